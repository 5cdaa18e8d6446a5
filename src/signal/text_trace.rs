//! The consistency trace of generated text (S3's answers, S4's reports) in chest2err's shape:
//! tuples of (category, anatomy, concept, reference item, candidate item), K capped at
//! [`MAX_TUPLES`], and the score exp(-K / tau). The reference is a list of findings (NIH's, or
//! the model's own yes/no findings); the candidate is the text, and its item is the sentence (S4)
//! or the row (S3) responsible.

use serde::Serialize;

use super::trace::{anatomy_of, score, MAX_TUPLES};
use crate::vocab::LABELS;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TextTuple {
    /// 1 = false finding (the text asserts what the reference does not), 2 = omission (the
    /// reference holds what the text leaves out), 3 = location (the text's side contradicts S2's).
    pub category: u8,
    pub anatomy: u8,
    /// Index of the finding in [`LABELS`].
    pub concept: u8,
    /// Position in the reference list, or -1.
    pub reference_item: i32,
    /// The sentence (S4) or the image's row (S3) responsible, or -1.
    pub candidate_item: i32,
}

impl TextTuple {
    pub fn new(category: u8, label: &str, reference_item: i32, candidate_item: i32) -> TextTuple {
        let concept = LABELS.iter().position(|l| *l == label).expect("a vocabulary label") as u8;
        TextTuple { category, anatomy: anatomy_of(label), concept, reference_item, candidate_item }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextTrace {
    pub tuples: Vec<TextTuple>,
    pub k_total: usize,
    pub errors_found: usize,
    pub score: f64,
    pub per_category: [u32; 5],
    pub per_anatomy: [u32; 9],
}

impl TextTrace {
    /// Caps the tuples at [`MAX_TUPLES`] (in the order given) and scores them.
    pub fn new(mut tuples: Vec<TextTuple>, tau: f64) -> TextTrace {
        let errors_found = tuples.len();
        tuples.truncate(MAX_TUPLES);
        let mut per_category = [0u32; 5];
        let mut per_anatomy = [0u32; 9];
        for t in &tuples {
            per_category[usize::from(t.category) - 1] += 1;
            per_anatomy[usize::from(t.anatomy)] += 1;
        }
        TextTrace { k_total: tuples.len(), errors_found, score: score(tuples.len(), tau), tuples, per_category, per_anatomy }
    }

    /// The trace of nothing to check (no text, or nothing it could contradict).
    pub fn empty() -> TextTrace {
        TextTrace::new(Vec::new(), 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_are_capped_and_scored() {
        let tuples: Vec<TextTuple> = (0..30).map(|i| TextTuple::new(1 + (i % 2) as u8, "Effusion", i, -1)).collect();
        let t = TextTrace::new(tuples, 4.0);
        assert_eq!((t.k_total, t.errors_found), (MAX_TUPLES, 30));
        assert!((t.score - (-(MAX_TUPLES as f64) / 4.0).exp()).abs() < 1e-12);
        assert_eq!(t.per_category[..2], [12, 12]);
        assert_eq!(t.per_anatomy[1], 24, "effusion is pleural");
        assert_eq!(TextTrace::empty().score, 1.0);
    }
}
