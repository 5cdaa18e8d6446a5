//! A second opinion: the same rows scored by a second model of another family, and the signal a
//! release gives when both are asked.
//!
//! Each family's signal is derived alone, by the same rules (`primary` and `second`). The joint
//! row that the release's `confidence`, `agreement`, `consistency`, `trust_class` and `flags`
//! columns then carry:
//! - confidence is the two families' mean, or, where the spec names a joint rule fitted on expert
//!   labels ([`super::joint_rule`]), that rule's combination; agreement follows from it and NIH's
//!   label; consistency is the two families' mean;
//! - the trust class follows the joint agreement and the spec's thresholds. Under the mean, a row
//!   is `likely_mislabeled` only when both families doubt NIH (each one's own agreement is below
//!   `review_min_agreement`), otherwise `suspect` at worst: the mean cannot tell a confident
//!   family from a weak one. A fitted rule has already weighed them, and its agreement decides;
//! - `hard_case` and `low_consistency` are judged on the joint values, the device flag on the
//!   primary model's devices, and `families_disagree` is added where one family finds the label
//!   present (confidence at or above `finding_present_min`) and the other does not;
//! - `family_agreement` is 1 - |primary confidence - second confidence|.
//!
//! Everything is a function of the two families' shipped logits (and the rule, which build.lock
//! carries): anyone can re-derive it.

use super::joint_rule::JointRule;
use super::{trust_class, PairSignal, Signal, TrustClass, FLAG_DEVICE_CONFOUNDER, FLAG_HARD_CASE, FLAG_LOW_CONSISTENCY};
use crate::release_spec::SignalSpec;
use crate::select::Selection;
use crate::vocab::LABELS;

/// The flag of a row on which the two families give opposite answers.
pub const FLAG_FAMILIES_DISAGREE: &str = "families_disagree";
/// The flags of a two-family release, in the order the card counts them.
pub const JOINT_FLAGS: [&str; 4] = [FLAG_HARD_CASE, FLAG_LOW_CONSISTENCY, FLAG_DEVICE_CONFOUNDER, FLAG_FAMILIES_DISAGREE];

/// Both families' signals of every row, and the joint one.
#[derive(Debug, Clone)]
pub struct JointSignal {
    /// The release's signal: the joint rows, the primary model's devices and traces.
    pub joint: Signal,
    /// The primary model's own signal.
    pub primary: Signal,
    /// The second model's own signal.
    pub second: Signal,
    /// Per row: 1 - |primary confidence - second confidence|.
    pub family_agreement: Vec<f64>,
}

/// Joins the two families' signals of the selection's rows (in row order), by the mean or by
/// `rule` where the spec names one.
pub fn combine(selection: &Selection, primary: Signal, second: Signal, spec: &SignalSpec, rule: Option<&JointRule>) -> JointSignal {
    let pairs: Vec<PairSignal> = (selection.rows.iter().zip(&primary.pairs).zip(&second.pairs))
        .map(|((row, a), b)| joint_row(a, b, Row { label: LABELS[row.label], nih_label: row.nih_label }, spec, rule))
        .collect();
    let family_agreement = primary.pairs.iter().zip(&second.pairs).map(|(a, b)| 1.0 - (a.confidence - b.confidence).abs()).collect();
    let joint = Signal { pairs, devices: primary.devices.clone(), traces: primary.traces.clone() };
    JointSignal { joint, primary, second, family_agreement }
}

/// What a joint row needs to know of its selection row.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub label: &'a str,
    pub nih_label: bool,
}

/// One row as both families see it (see the module's rule).
pub fn joint_row(a: &PairSignal, b: &PairSignal, row: Row<'_>, spec: &SignalSpec, rule: Option<&JointRule>) -> PairSignal {
    let consistency = (a.consistency + b.consistency) / 2.0;
    let (confidence, agreement, class) = match rule {
        None => {
            let agreement = (a.agreement + b.agreement) / 2.0;
            let both_doubt = a.agreement < spec.review_min_agreement && b.agreement < spec.review_min_agreement;
            let class = match trust_class(agreement, spec) {
                TrustClass::LikelyMislabeled if !both_doubt => TrustClass::Suspect,
                class => class,
            };
            ((a.confidence + b.confidence) / 2.0, agreement, class)
        }
        Some(rule) => {
            let confidence = rule.apply(row.label, a.confidence, b.confidence);
            let agreement = super::agreement(confidence, row.nih_label);
            (confidence, agreement, trust_class(agreement, spec))
        }
    };
    let mut flags = Vec::new();
    if (confidence - 0.5).abs() < spec.hard_case_margin {
        flags.push(FLAG_HARD_CASE);
    }
    if consistency < spec.low_consistency_below {
        flags.push(FLAG_LOW_CONSISTENCY);
    }
    if a.flags.contains(&FLAG_DEVICE_CONFOUNDER) {
        flags.push(FLAG_DEVICE_CONFOUNDER);
    }
    if (a.confidence >= spec.finding_present_min) != (b.confidence >= spec.finding_present_min) {
        flags.push(FLAG_FAMILIES_DISAGREE);
    }
    PairSignal { confidence, agreement, consistency, trust_class: class, flags }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::signal::tests::spec;

    fn row(confidence: f64, nih: bool) -> PairSignal {
        let agreement = crate::signal::agreement(confidence, nih);
        PairSignal { confidence, agreement, consistency: 1.0, trust_class: trust_class(agreement, &spec()), flags: Vec::new() }
    }

    /// A row of label Mass, NIH's label `nih`.
    fn mass(nih: bool) -> Row<'static> {
        Row { label: "Mass", nih_label: nih }
    }

    #[test]
    fn likely_mislabeled_needs_both_families_to_doubt_nih() {
        let s = spec();
        // Both doubt NIH's positive label strongly: likely mislabeled.
        let both = joint_row(&row(0.05, true), &row(0.1, true), mass(true), &s, None);
        assert_eq!(both.trust_class, TrustClass::LikelyMislabeled);
        assert!(both.flags.is_empty());
        // With a suspect threshold above half the review one, a mean can fall below it while one
        // family does not doubt NIH (agreement 0.5): the row is then suspect, not likely
        // mislabeled. (With the defaults, 0.2 and 0.45, a mean below 0.2 already needs both.)
        let high = SignalSpec { suspect_min_agreement: 0.3, ..spec() };
        let one = joint_row(&row(0.0, true), &row(0.5, true), mass(true), &high, None);
        assert!((one.agreement - 0.25).abs() < 1e-12);
        assert_eq!(trust_class(0.25, &high), TrustClass::LikelyMislabeled);
        assert_eq!(one.trust_class, TrustClass::Suspect);
        // Opposite answers: flagged, and the class is the mean's.
        let split = joint_row(&row(0.95, false), &row(0.3, false), mass(false), &s, None);
        assert_eq!(split.flags, vec![FLAG_FAMILIES_DISAGREE]);
        assert_eq!(split.trust_class, trust_class(0.375, &s));
        // Near the margin on the mean: a hard case too.
        assert_eq!(
            joint_row(&row(0.9, false), &row(0.2, false), mass(false), &s, None).flags,
            vec![FLAG_HARD_CASE, FLAG_FAMILIES_DISAGREE]
        );
        let selection = Selection {
            images: vec![],
            rows: vec![crate::select::PairRow { image: 0, label: 4, nih_label: true }],
            candidates: 1,
            capped: false,
        };
        let agreeing = combine(
            &selection,
            Signal { pairs: vec![row(0.9, true)], devices: vec![], traces: vec![] },
            Signal { pairs: vec![row(0.7, true)], devices: vec![], traces: vec![] },
            &s,
            None,
        );
        assert!((agreeing.family_agreement[0] - 0.8).abs() < 1e-12);
        assert_eq!(agreeing.joint.pairs[0].trust_class, TrustClass::Trusted);
    }

    #[test]
    fn a_fitted_rule_decides_the_class_alone() {
        use crate::signal::joint_rule::{LabelRule, RuleSource, Weights};
        let s = spec();
        // The rule trusts the primary family and ignores the second.
        let listen_to_primary =
            LabelRule { source: RuleSource::Label, weights: Some(Weights { primary: 1.0, second: 0.0, bias: 0.0 }), n: 100, positives: 50 };
        let rule = JointRule {
            format: crate::signal::joint_rule::JOINT_RULE_FORMAT.into(),
            second_view: crate::signal::joint_rule::SecondView::Family,
            fitted_on: "test".into(),
            gold_sha256: String::new(),
            pooled: listen_to_primary,
            labels: [("Mass".to_string(), listen_to_primary)].into(),
            images: vec![],
            scorers: None,
        };
        // The primary doubts NIH's positive label, the second is sure of it: under the mean the
        // row is a `review` (agreement 0.5); under the rule, the primary's doubt decides.
        let mean = joint_row(&row(0.05, true), &row(0.95, true), mass(true), &s, None);
        assert_eq!(mean.trust_class, TrustClass::Review);
        let fitted = joint_row(&row(0.05, true), &row(0.95, true), mass(true), &s, Some(&rule));
        assert!((fitted.confidence - 0.05).abs() < 1e-9 && (fitted.agreement - 0.05).abs() < 1e-9, "{fitted:?}");
        assert_eq!(fitted.trust_class, TrustClass::LikelyMislabeled);
        assert!(fitted.flags.contains(&FLAG_FAMILIES_DISAGREE), "the families still disagree: {fitted:?}");
        // Where NIH says absent, agreement is the complement.
        let absent = joint_row(&row(0.05, false), &row(0.95, false), mass(false), &s, Some(&rule));
        assert!((absent.agreement - 0.95).abs() < 1e-9);
    }
}
