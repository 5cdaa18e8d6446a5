//! The per-image error trace, in the shape of chest2err's output: tuples of (category, anatomy,
//! concept, NIH pointer, model pointer), the count K, and the score exp(-K / tau).
//!
//! Here the reference is NIH's label list and the candidate is the model's: a *false
//! prediction* is a finding NIH asserts and the model rejects; an *omission* is a finding the
//! model sees and NIH left out. ("No Finding" is the absence of findings, not a concept.)
//! S2 adds location tuples (category 3); severity and comparison (4-5) have no source yet.

use serde::Serialize;

use crate::vocab::{LABELS, NO_FINDING};

/// chest2err's categories (ReXVal merged), 1-based in tuples.
pub const CATEGORIES: [&str; 5] = ["false_prediction", "omission", "location", "severity", "comparison"];
pub const FALSE_PREDICTION: u8 = 1;
pub const OMISSION: u8 = 2;
/// S2: the model places a finding where NIH's box of it cannot be ([`crate::diagnose`]).
pub const LOCATION: u8 = 3;

/// chest2err's anatomy regions, 0-based in tuples.
pub const ANATOMY: [&str; 9] = [
    "Lungs & Airways",
    "Pleura",
    "Mediastinum & Hila",
    "Cardiovascular",
    "Chest Wall",
    "Bones/Spine",
    "Upper Abdomen",
    "Lower Neck",
    "Others",
];

/// Hard cap on tuples per image, as in chest2err.
pub const MAX_TUPLES: usize = 24;

/// The region each NIH finding belongs to.
pub fn anatomy_of(label: &str) -> u8 {
    match label {
        "Atelectasis" | "Infiltration" | "Mass" | "Nodule" | "Pneumonia" | "Consolidation" | "Edema" | "Emphysema" | "Fibrosis" => 0,
        "Effusion" | "Pneumothorax" | "Pleural_Thickening" => 1,
        "Cardiomegaly" => 3,
        // NIH's hernias are hiatal: stomach above the diaphragm.
        "Hernia" => 6,
        _ => 8,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ErrorTuple {
    /// 1-based index into [`CATEGORIES`].
    pub category: u8,
    /// 0-based index into [`ANATOMY`].
    pub anatomy: u8,
    /// Index of the finding in [`LABELS`].
    pub concept: u8,
    /// Position in the image's NIH finding list, or -1.
    pub nih_item: i32,
    /// Position in the model's finding list, or -1.
    pub model_item: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorTrace {
    /// NIH's findings for the image, in vocabulary order ("No Finding" left out).
    pub nih_findings: Vec<&'static str>,
    /// Findings whose confidence reaches the threshold, in vocabulary order.
    pub model_findings: Vec<&'static str>,
    pub tuples: Vec<ErrorTuple>,
    /// K: the number of tuples kept (at most [`MAX_TUPLES`]).
    pub k_total: usize,
    /// Errors found before the cap; more than `k_total` only when the cap bit.
    pub errors_found: usize,
    /// exp(-K / tau).
    pub score: f64,
    pub per_category: [u32; 5],
    pub per_anatomy: [u32; 9],
}

/// The trace of one image. `nih` is NIH's label bitmask over [`LABELS`]; `confidence[i]` is the
/// model's probability that `LABELS[i]` is present (the 14 findings; "No Finding" is ignored).
pub fn trace(nih: u16, confidence: &[f64], threshold: f64, tau: f64) -> ErrorTrace {
    let findings: Vec<usize> = (0..LABELS.len()).filter(|&i| LABELS[i] != NO_FINDING).collect();
    let nih_list: Vec<usize> = findings.iter().copied().filter(|&i| nih & (1 << i) != 0).collect();
    let model_list: Vec<usize> = findings.iter().copied().filter(|&i| confidence[i] >= threshold).collect();
    let position = |list: &[usize], i: usize| list.iter().position(|&x| x == i).map_or(-1, |p| p as i32);

    let mut tuples = Vec::new();
    for &i in &nih_list {
        if !model_list.contains(&i) {
            tuples.push(ErrorTuple {
                category: FALSE_PREDICTION,
                anatomy: anatomy_of(LABELS[i]),
                concept: i as u8,
                nih_item: position(&nih_list, i),
                model_item: -1,
            });
        }
    }
    for &i in &model_list {
        if !nih_list.contains(&i) {
            tuples.push(ErrorTuple {
                category: OMISSION,
                anatomy: anatomy_of(LABELS[i]),
                concept: i as u8,
                nih_item: -1,
                model_item: position(&model_list, i),
            });
        }
    }
    let errors_found = tuples.len();
    tuples.truncate(MAX_TUPLES);
    ErrorTrace::from_tuples(
        nih_list.iter().map(|&i| LABELS[i]).collect(),
        model_list.iter().map(|&i| LABELS[i]).collect(),
        tuples,
        errors_found,
        tau,
    )
}

impl ErrorTrace {
    /// Counts and score from already-capped tuples.
    pub fn from_tuples(
        nih_findings: Vec<&'static str>,
        model_findings: Vec<&'static str>,
        tuples: Vec<ErrorTuple>,
        errors_found: usize,
        tau: f64,
    ) -> Self {
        let mut per_category = [0u32; 5];
        let mut per_anatomy = [0u32; 9];
        for t in &tuples {
            per_category[usize::from(t.category) - 1] += 1;
            per_anatomy[usize::from(t.anatomy)] += 1;
        }
        let k_total = tuples.len();
        ErrorTrace { nih_findings, model_findings, tuples, k_total, errors_found, score: score(k_total, tau), per_category, per_anatomy }
    }
}

/// What the card reports about the traces of a split's images.
#[derive(Debug, Clone, Serialize)]
pub struct TraceStats {
    pub images: usize,
    pub mean_score: f64,
    /// (K, images with that K), for every K that occurs.
    pub k_histogram: Vec<(usize, usize)>,
    pub false_predictions: u32,
    pub omissions: u32,
    /// S2's location tuples.
    pub locations: u32,
    /// (region, tuples) for every region with tuples.
    pub per_anatomy: Vec<(String, u32)>,
}

pub fn stats(traces: &[ErrorTrace], images: &[usize]) -> TraceStats {
    let mut histogram = std::collections::BTreeMap::new();
    let mut per_anatomy = [0u32; 9];
    let (mut score_sum, mut false_predictions, mut omissions, mut locations) = (0.0, 0, 0, 0);
    for &i in images {
        let t = &traces[i];
        *histogram.entry(t.k_total).or_insert(0) += 1;
        score_sum += t.score;
        false_predictions += t.per_category[0];
        omissions += t.per_category[1];
        locations += t.per_category[2];
        for (a, n) in t.per_anatomy.iter().enumerate() {
            per_anatomy[a] += n;
        }
    }
    TraceStats {
        images: images.len(),
        mean_score: if images.is_empty() { 0.0 } else { score_sum / images.len() as f64 },
        k_histogram: histogram.into_iter().collect(),
        false_predictions,
        omissions,
        locations,
        per_anatomy: ANATOMY.iter().zip(per_anatomy).filter(|(_, n)| *n > 0).map(|(a, n)| (a.to_string(), n)).collect(),
    }
}

/// chest2err's score: exp(-K / tau). Rank-equivalent to -K for any tau > 0.
pub fn score(k: usize, tau: f64) -> f64 {
    (-(k as f64) / tau).exp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::label_index;

    fn mask(labels: &[&str]) -> u16 {
        labels.iter().map(|l| 1u16 << label_index(l).unwrap()).sum()
    }

    fn conf(present: &[&str]) -> Vec<f64> {
        LABELS.iter().map(|l| if present.contains(l) { 0.9 } else { 0.1 }).collect()
    }

    #[test]
    fn scores_follow_chest2err_at_tau_3() {
        let rounded = |k| (score(k, 3.0) * 100.0).round() / 100.0;
        assert_eq!(rounded(0), 1.0);
        assert_eq!(rounded(1), 0.72);
        assert_eq!(rounded(2), 0.51);
        assert_eq!(rounded(3), 0.37);
        assert!(score(5, 3.0) <= 0.19);
        assert!(score(2, 1.0) < score(2, 3.0), "tau sets the slope");
    }

    #[test]
    fn agreement_gives_an_empty_trace() {
        let t = trace(mask(&["Effusion", "Mass"]), &conf(&["Effusion", "Mass"]), 0.5, 3.0);
        assert!(t.tuples.is_empty());
        assert_eq!((t.k_total, t.score), (0, 1.0));
        assert_eq!(t.nih_findings, ["Effusion", "Mass"]);
    }

    #[test]
    fn false_predictions_and_omissions_point_at_their_items() {
        // NIH: Effusion, Mass, Nodule. Model: Effusion, Cardiomegaly, Pneumothorax.
        let t = trace(mask(&["Effusion", "Mass", "Nodule"]), &conf(&["Cardiomegaly", "Effusion", "Pneumothorax"]), 0.5, 3.0);
        assert_eq!(t.nih_findings, ["Effusion", "Mass", "Nodule"]);
        assert_eq!(t.model_findings, ["Cardiomegaly", "Effusion", "Pneumothorax"]);
        let mass = label_index("Mass").unwrap() as u8;
        let nodule = label_index("Nodule").unwrap() as u8;
        let cardio = label_index("Cardiomegaly").unwrap() as u8;
        let ptx = label_index("Pneumothorax").unwrap() as u8;
        assert_eq!(
            t.tuples,
            vec![
                ErrorTuple { category: 1, anatomy: 0, concept: mass, nih_item: 1, model_item: -1 },
                ErrorTuple { category: 1, anatomy: 0, concept: nodule, nih_item: 2, model_item: -1 },
                ErrorTuple { category: 2, anatomy: 3, concept: cardio, nih_item: -1, model_item: 0 },
                ErrorTuple { category: 2, anatomy: 1, concept: ptx, nih_item: -1, model_item: 2 },
            ]
        );
        assert_eq!(t.k_total, 4);
        assert_eq!(t.per_category, [2, 2, 0, 0, 0]);
        assert_eq!(t.per_anatomy, [2, 1, 0, 1, 0, 0, 0, 0, 0]);
        assert!((t.score - (-4.0f64 / 3.0).exp()).abs() < 1e-15);
    }

    #[test]
    fn no_finding_is_not_a_concept() {
        let t = trace(mask(&["No Finding"]), &conf(&["No Finding", "Hernia"]), 0.5, 3.0);
        assert!(t.nih_findings.is_empty());
        assert_eq!(t.model_findings, ["Hernia"]);
        assert_eq!(t.tuples.len(), 1);
        assert_eq!((t.tuples[0].category, t.tuples[0].anatomy), (OMISSION, 6));
    }

    #[test]
    fn the_cap_keeps_24_tuples_and_the_score_follows_it() {
        let many: Vec<ErrorTuple> = (0..30)
            .map(|i| ErrorTuple { category: 1 + (i % 2) as u8, anatomy: (i % 9) as u8, concept: 0, nih_item: -1, model_item: -1 })
            .collect();
        let mut kept = many.clone();
        kept.truncate(MAX_TUPLES);
        let t = ErrorTrace::from_tuples(vec![], vec![], kept, many.len(), 3.0);
        assert_eq!((t.k_total, t.errors_found), (24, 30));
        assert_eq!(t.score, (-24.0f64 / 3.0).exp());
        assert_eq!(t.per_category.iter().sum::<u32>(), 24);
        // With 14 findings one image has at most 14 errors: the cap never bites on S1 data.
        let all: Vec<&str> = LABELS.iter().copied().filter(|l| *l != NO_FINDING).collect();
        let t = trace(mask(&all[..7]), &conf(&all[7..]), 0.5, 3.0);
        assert_eq!((t.k_total, t.errors_found), (14, 14));
    }
}
