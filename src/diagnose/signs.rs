//! Observable signs: each sign of a row's finding scored yes/no, those seen, and the flag when
//! NIH asserts the finding and the model sees none.

use std::collections::HashMap;

use super::RowDiagnosis;
use crate::release_spec::diagnose::{sign_id, SignPrompts};
use bpals_vlm::YesNo;

pub(super) fn score_row(
    d: &mut RowDiagnosis,
    prompts: &SignPrompts,
    label: &str,
    nih_label: bool,
    scores: &[YesNo],
    position: &HashMap<&str, usize>,
) {
    let Some(vocabulary) = prompts.vocabulary.get(label) else { return };
    for (k, sign) in vocabulary.iter().enumerate() {
        let score = scores[position[sign_id(label, k).as_str()]];
        if score.p_yes() >= prompts.seen_min {
            d.signs_seen.push(sign.clone());
        }
        d.signs.push(sign.clone());
        d.sign_scores.push(score);
    }
    d.no_sign_seen = nih_label.then_some(d.signs_seen.is_empty());
}
