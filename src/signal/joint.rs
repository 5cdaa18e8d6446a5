//! A second opinion: the same rows scored by a second model of another family, and the signal a
//! release gives when both are asked.
//!
//! Each family's signal is derived alone, by the same rules (`primary` and `second`). The joint
//! row that the release's `confidence`, `agreement`, `consistency`, `trust_class` and `flags`
//! columns then carry:
//! - confidence, agreement and consistency are the two families' means;
//! - the trust class follows the joint agreement and the spec's thresholds, except that a row is
//!   `likely_mislabeled` only when both families doubt NIH (each one's own agreement is below
//!   `review_min_agreement`); otherwise it is `suspect` at worst;
//! - `hard_case` and `low_consistency` are judged on the joint values, the device flag on the
//!   primary model's devices, and `families_disagree` is added where one family finds the label
//!   present (confidence at or above `finding_present_min`) and the other does not;
//! - `family_agreement` is 1 - |primary confidence - second confidence|.
//!
//! Everything is a function of the two families' shipped logits: anyone can re-derive it.

use super::{trust_class, PairSignal, Signal, TrustClass, FLAG_DEVICE_CONFOUNDER, FLAG_HARD_CASE, FLAG_LOW_CONSISTENCY};
use crate::release_spec::SignalSpec;

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

/// Joins the two families' signals of the same rows (in row order).
pub fn combine(primary: Signal, second: Signal, spec: &SignalSpec) -> JointSignal {
    let pairs: Vec<PairSignal> = primary.pairs.iter().zip(&second.pairs).map(|(a, b)| joint_row(a, b, spec)).collect();
    let family_agreement = primary.pairs.iter().zip(&second.pairs).map(|(a, b)| 1.0 - (a.confidence - b.confidence).abs()).collect();
    let joint = Signal { pairs, devices: primary.devices.clone(), traces: primary.traces.clone() };
    JointSignal { joint, primary, second, family_agreement }
}

/// One row as both families see it (see the module's rule).
pub fn joint_row(a: &PairSignal, b: &PairSignal, spec: &SignalSpec) -> PairSignal {
    let confidence = (a.confidence + b.confidence) / 2.0;
    let agreement = (a.agreement + b.agreement) / 2.0;
    let consistency = (a.consistency + b.consistency) / 2.0;
    let both_doubt = a.agreement < spec.review_min_agreement && b.agreement < spec.review_min_agreement;
    let class = match trust_class(agreement, spec) {
        TrustClass::LikelyMislabeled if !both_doubt => TrustClass::Suspect,
        class => class,
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
        let agreement = if nih { confidence } else { 1.0 - confidence };
        PairSignal { confidence, agreement, consistency: 1.0, trust_class: trust_class(agreement, &spec()), flags: Vec::new() }
    }

    #[test]
    fn likely_mislabeled_needs_both_families_to_doubt_nih() {
        let s = spec();
        // Both doubt NIH's positive label strongly: likely mislabeled.
        let both = joint_row(&row(0.05, true), &row(0.1, true), &s);
        assert_eq!(both.trust_class, TrustClass::LikelyMislabeled);
        assert!(both.flags.is_empty());
        // With a suspect threshold above half the review one, a mean can fall below it while one
        // family does not doubt NIH (agreement 0.5): the row is then suspect, not likely
        // mislabeled. (With the defaults, 0.2 and 0.45, a mean below 0.2 already needs both.)
        let high = SignalSpec { suspect_min_agreement: 0.3, ..spec() };
        let one = joint_row(&row(0.0, true), &row(0.5, true), &high);
        assert!((one.agreement - 0.25).abs() < 1e-12);
        assert_eq!(trust_class(0.25, &high), TrustClass::LikelyMislabeled);
        assert_eq!(one.trust_class, TrustClass::Suspect);
        // Opposite answers: flagged, and the class is the mean's.
        let split = joint_row(&row(0.95, false), &row(0.3, false), &s);
        assert_eq!(split.flags, vec![FLAG_FAMILIES_DISAGREE]);
        assert_eq!(split.trust_class, trust_class(0.375, &s));
        // Near the margin on the mean: a hard case too.
        assert_eq!(joint_row(&row(0.9, false), &row(0.2, false), &s).flags, vec![FLAG_HARD_CASE, FLAG_FAMILIES_DISAGREE]);
        let agreeing = combine(
            Signal { pairs: vec![row(0.9, true)], devices: vec![], traces: vec![] },
            Signal { pairs: vec![row(0.7, true)], devices: vec![], traces: vec![] },
            &s,
        );
        assert!((agreeing.family_agreement[0] - 0.8).abs() < 1e-12);
        assert_eq!(agreeing.joint.pairs[0].trust_class, TrustClass::Trusted);
    }
}
