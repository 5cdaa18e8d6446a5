//! The trust signal per (image, label), derived only from the raw per-question scores, so anyone
//! holding the shipped scores can re-derive every column exactly.

pub mod calibration;
pub mod confident_learning;
pub mod joint;
pub mod joint_rule;
pub mod text_trace;
pub mod trace;
pub mod views;

use rayon::prelude::*;
use serde::Serialize;

use crate::infer::ImageScores;
use crate::release_spec::{Question, SignalSpec};
use crate::select::Selection;
use crate::vocab::{LABELS, SUPPORT_DEVICES};

pub use crate::vocab::TrustClass;

/// Class from the agreement between the model and NIH, by the spec's thresholds.
pub fn trust_class(agreement: f64, spec: &SignalSpec) -> TrustClass {
    ClassThresholds::of(spec).class(agreement)
}

/// The spec's class thresholds: all a trust class needs, and what an evaluation reads back from
/// a release's build.lock (`spec.signal`) to class rows anew.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
pub struct ClassThresholds {
    pub trusted_min_agreement: f64,
    pub review_min_agreement: f64,
    pub suspect_min_agreement: f64,
}

impl ClassThresholds {
    pub fn of(spec: &SignalSpec) -> Self {
        ClassThresholds {
            trusted_min_agreement: spec.trusted_min_agreement,
            review_min_agreement: spec.review_min_agreement,
            suspect_min_agreement: spec.suspect_min_agreement,
        }
    }

    pub fn class(&self, agreement: f64) -> TrustClass {
        if agreement >= self.trusted_min_agreement {
            TrustClass::Trusted
        } else if agreement >= self.review_min_agreement {
            TrustClass::Review
        } else if agreement >= self.suspect_min_agreement {
            TrustClass::Suspect
        } else {
            TrustClass::LikelyMislabeled
        }
    }
}

pub const FLAG_HARD_CASE: &str = "hard_case";
pub const FLAG_LOW_CONSISTENCY: &str = "low_consistency";
pub const FLAG_DEVICE_CONFOUNDER: &str = "support_device_confounder";
pub const FLAGS: [&str; 3] = [FLAG_HARD_CASE, FLAG_LOW_CONSISTENCY, FLAG_DEVICE_CONFOUNDER];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSignal {
    /// Ensemble probability that the finding is present: the mean p_yes over the label's questions.
    pub confidence: f64,
    /// Probability that the model agrees with NIH: `confidence` where NIH asserts the label, else 1 - it.
    pub agreement: f64,
    /// Share of the label's questions whose yes/no vote matches the ensemble's majority.
    pub consistency: f64,
    pub trust_class: TrustClass,
    pub flags: Vec<&'static str>,
}

/// Where each label's and each device's questions sit in the prompt set, found once per build
/// rather than once per row.
#[derive(Debug, Clone)]
pub struct QuestionIndex {
    /// Per label of [`LABELS`], the positions of its questions, in prompt-set order.
    pub labels: Vec<Vec<usize>>,
    /// Per device of [`SUPPORT_DEVICES`], likewise.
    pub devices: Vec<Vec<usize>>,
}

impl QuestionIndex {
    pub fn new(questions: &[Question]) -> Self {
        let positions = |target: &str| questions.iter().enumerate().filter(|(_, q)| q.target == target).map(|(i, _)| i).collect();
        QuestionIndex {
            labels: LABELS.iter().map(|l| positions(l)).collect(),
            devices: SUPPORT_DEVICES.iter().map(|d| positions(d)).collect(),
        }
    }
}

/// The p_yes of the questions at `positions`, in that order.
fn p_yes_at(scores: &ImageScores, positions: &[usize]) -> Vec<f64> {
    positions.iter().map(|&i| scores.scores[i].p_yes()).collect()
}

/// Per image: the support devices the model sees (mean p_yes over a device's questions >= threshold).
pub fn devices_present(scores: &ImageScores, index: &QuestionIndex, spec: &SignalSpec) -> Vec<&'static str> {
    SUPPORT_DEVICES
        .iter()
        .zip(&index.devices)
        .filter(|(_, positions)| !positions.is_empty() && mean(&p_yes_at(scores, positions)) >= spec.device_present_min)
        .map(|(device, _)| *device)
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    // Summed in a fixed order: the result must not depend on threads.
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The signal of a whole selection.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    /// One per selection row, in row order.
    pub pairs: Vec<PairSignal>,
    /// Support devices seen, one list per selected image.
    pub devices: Vec<Vec<&'static str>>,
    /// The chest2err-shaped error trace, one per selected image.
    pub traces: Vec<trace::ErrorTrace>,
}

/// The rules the signal is derived by: the spec's thresholds and, when the spec names one, the
/// calibration table applied to each confidence.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub spec: &'a SignalSpec,
    pub calibration: Option<&'a calibration::Calibration>,
}

impl<'a> Rules<'a> {
    pub fn new(spec: &'a SignalSpec, calibration: Option<&'a calibration::Calibration>) -> Self {
        Rules { spec, calibration }
    }
    fn calibrate(&self, label: &str, raw: f64) -> f64 {
        self.calibration.map_or(raw, |c| c.apply(label, raw))
    }
}

/// Per label, the confidence a row of that label would get (calibrated when the rules say so).
pub fn label_confidences(scores: &ImageScores, index: &QuestionIndex, rules: &Rules<'_>) -> Vec<f64> {
    LABELS
        .iter()
        .zip(&index.labels)
        .map(|(label, positions)| {
            let raw = if positions.is_empty() { 0.0 } else { mean(&p_yes_at(scores, positions)) };
            rules.calibrate(label, raw)
        })
        .collect()
}

/// Derives the signal for every row of the selection, in row order.
pub fn derive(selection: &Selection, scores: &[ImageScores], questions: &[Question], rules: &Rules<'_>) -> Signal {
    let spec = rules.spec;
    // Rows and images are independent; parallel collects keep their order, so the output does not
    // depend on the thread count.
    let index = QuestionIndex::new(questions);
    let devices: Vec<Vec<&'static str>> = scores.par_iter().map(|s| devices_present(s, &index, spec)).collect();
    let traces = selection
        .images
        .par_iter()
        .zip(scores)
        .map(|(image, s)| trace::trace(image.labels, &label_confidences(s, &index, rules), spec.finding_present_min, spec.tau))
        .collect();
    let pairs = selection
        .rows
        .par_iter()
        .map(|row| {
            let ps = p_yes_at(&scores[row.image], &index.labels[row.label]);
            pair_signal(&ps, row.nih_label, LABELS[row.label], !devices[row.image].is_empty(), rules)
        })
        .collect();
    Signal { pairs, devices, traces }
}

/// How far a confidence that the finding is present agrees with NIH's label: the confidence
/// where NIH asserts the label, else its complement.
pub fn agreement(confidence: f64, nih_label: bool) -> f64 {
    if nih_label {
        confidence
    } else {
        1.0 - confidence
    }
}

/// The signal of one row from its questions' p_yes values.
pub fn pair_signal(ps: &[f64], nih_label: bool, label: &str, device_present: bool, rules: &Rules<'_>) -> PairSignal {
    let spec = rules.spec;
    let raw = mean(ps);
    let confidence = rules.calibrate(label, raw);
    let agreement = agreement(confidence, nih_label);
    let yes_votes = ps.iter().filter(|p| **p >= 0.5).count();
    let majority = yes_votes.max(ps.len() - yes_votes);
    let consistency = majority as f64 / ps.len() as f64;
    let mut flags = Vec::new();
    if (confidence - 0.5).abs() < spec.hard_case_margin {
        flags.push(FLAG_HARD_CASE);
    }
    if consistency < spec.low_consistency_below {
        flags.push(FLAG_LOW_CONSISTENCY);
    }
    if device_present && spec.device_confounded_labels.iter().any(|l| l == label) {
        flags.push(FLAG_DEVICE_CONFOUNDER);
    }
    PairSignal { confidence, agreement, consistency, trust_class: trust_class(agreement, spec), flags }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn spec() -> SignalSpec {
        SignalSpec {
            trusted_min_agreement: 0.7,
            review_min_agreement: 0.45,
            suspect_min_agreement: 0.2,
            hard_case_margin: 0.1,
            low_consistency_below: 0.67,
            device_present_min: 0.5,
            finding_present_min: 0.5,
            device_confounded_labels: vec!["Pneumothorax".into()],
            tau: 3.0,
            calibration: None,
            joint_rule: None,
            confident_learning: None,
        }
    }

    #[test]
    fn classes_follow_agreement_thresholds() {
        let s = spec();
        let sig = pair_signal(&[0.9, 0.8, 0.85], true, "Mass", false, &Rules::new(&s, None));
        assert!((sig.confidence - 0.85).abs() < 1e-12);
        assert_eq!(sig.trust_class, TrustClass::Trusted);
        assert_eq!(sig.consistency, 1.0);
        assert!(sig.flags.is_empty());
        let sig = pair_signal(&[0.9, 0.8, 0.85], false, "Mass", false, &Rules::new(&s, None));
        assert_eq!(sig.trust_class, TrustClass::LikelyMislabeled);
        let sig = pair_signal(&[0.55, 0.6, 0.5], true, "Pneumothorax", true, &Rules::new(&s, None));
        assert_eq!(sig.trust_class, TrustClass::Review);
        assert_eq!(sig.flags, vec![FLAG_HARD_CASE, FLAG_DEVICE_CONFOUNDER]);
        let sig = pair_signal(&[0.1, 0.9], true, "Mass", false, &Rules::new(&s, None));
        assert_eq!(sig.consistency, 0.5);
        assert!(sig.flags.contains(&FLAG_LOW_CONSISTENCY));
    }
}

/// Counts the card reports: per trust class, per flag, and per label.
#[derive(Debug, Clone, Serialize)]
pub struct SignalStats {
    pub rows: usize,
    pub classes: Vec<(String, usize)>,
    pub flags: Vec<(String, usize)>,
    pub per_label: Vec<LabelStats>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LabelStats {
    pub label: String,
    pub rows: usize,
    pub nih_positive: usize,
    /// Rows per trust class, in [`TrustClass::ALL`] order.
    pub classes: Vec<usize>,
    pub mean_confidence: f64,
}

/// Statistics over the rows picked by `rows` (indices into the selection's rows), counting the
/// flags [`FLAGS`] (a two-family release: [`joint::JOINT_FLAGS`]).
pub fn stats(selection: &Selection, signals: &[PairSignal], rows: &[usize]) -> SignalStats {
    stats_of_flags(selection, signals, rows, &FLAGS)
}

/// [`stats`] counting the flags `names`.
pub fn stats_of_flags(selection: &Selection, signals: &[PairSignal], rows: &[usize], names: &[&str]) -> SignalStats {
    let mut classes = [0usize; 4];
    let mut flags = vec![0usize; names.len()];
    let mut per_label: Vec<LabelStats> = LABELS
        .iter()
        .map(|l| LabelStats { label: l.to_string(), rows: 0, nih_positive: 0, classes: vec![0; 4], mean_confidence: 0.0 })
        .collect();
    for &i in rows {
        let (row, sig) = (&selection.rows[i], &signals[i]);
        classes[sig.trust_class as usize] += 1;
        for f in &sig.flags {
            flags[names.iter().position(|x| x == f).expect("known flag")] += 1;
        }
        let l = &mut per_label[row.label];
        l.rows += 1;
        l.nih_positive += usize::from(row.nih_label);
        l.classes[sig.trust_class as usize] += 1;
        l.mean_confidence += sig.confidence;
    }
    for l in &mut per_label {
        if l.rows > 0 {
            l.mean_confidence /= l.rows as f64;
        }
    }
    SignalStats {
        rows: rows.len(),
        classes: TrustClass::ALL.iter().map(|c| (c.name().to_string(), classes[*c as usize])).collect(),
        flags: names.iter().zip(flags).map(|(f, n)| (f.to_string(), n)).collect(),
        per_label: per_label.into_iter().filter(|l| l.rows > 0).collect(),
    }
}
