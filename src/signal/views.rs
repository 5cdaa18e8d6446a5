//! How a release with confident learning sets each row's trust class from its two views: the
//! model's answers (the zero-shot view, one family's or two families' joint) and confident
//! learning's verdict on NIH's label (`cl_label_issue`).
//!
//! Without expert labels nothing says which view to believe, so neither decides alone:
//! - a row is `likely_mislabeled` only where both views doubt NIH: the answers put it there and
//!   confident learning names the label an issue; where the answers alone doubt it, `suspect`;
//! - a row is `trusted` only where neither doubts: the answers trust it and confident learning
//!   names no issue; where confident learning alone doubts it, `review`;
//! - `review` and `suspect` rows keep their class, and so does every row of a finding without a
//!   probe (its `cl_label_issue` is null).
//!
//! Confident learning's doubt is its own verdict, not its probability: a rare finding's true
//! positives get low probabilities from any probe, and the rules judge each class against its
//! own threshold. The answers' `confidence` and `agreement` columns stay the answers' own, so
//! either view can still be read alone.
//!
//! Where expert labels exist, a joint rule fitted on them (`calibrate --joint` on a release with
//! confident learning) weighs the two views per finding instead ([`fitted_class`]).

use super::joint_rule::JointRule;
use super::TrustClass;
use crate::release_spec::SignalSpec;

/// The trust class of a row under a joint rule over the two views: the rule's confidence that the
/// finding is present, from the answers' `confidence` and the probe's probability `probe`,
/// read against NIH's label and the spec's thresholds. The rule has weighed the views already,
/// so its agreement decides, as a fitted rule over two families does.
pub fn fitted_class(rule: &JointRule, label: &str, answers: f64, probe: f64, nih_label: bool, spec: &SignalSpec) -> TrustClass {
    super::trust_class(super::agreement(rule.apply(label, answers, probe), nih_label), spec)
}

/// The trust class of a row whose answers give `answers` and confident learning says
/// `label_issue` (None where the finding has no probe).
pub fn trust_class(answers: TrustClass, label_issue: Option<bool>) -> TrustClass {
    match (answers, label_issue) {
        (TrustClass::LikelyMislabeled, Some(false)) => TrustClass::Suspect,
        (TrustClass::Trusted, Some(true)) => TrustClass::Review,
        (class, _) => class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TrustClass::*;

    #[test]
    fn the_extreme_classes_need_both_views() {
        assert_eq!(trust_class(LikelyMislabeled, Some(true)), LikelyMislabeled);
        assert_eq!(trust_class(LikelyMislabeled, Some(false)), Suspect);
        assert_eq!(trust_class(Trusted, Some(false)), Trusted);
        assert_eq!(trust_class(Trusted, Some(true)), Review);
        for class in [Review, Suspect] {
            for issue in [Some(true), Some(false), None] {
                assert_eq!(trust_class(class, issue), class);
            }
        }
        // No probe for the finding: the answers decide alone.
        assert_eq!(trust_class(LikelyMislabeled, None), LikelyMislabeled);
        assert_eq!(trust_class(Trusted, None), Trusted);
    }
}
