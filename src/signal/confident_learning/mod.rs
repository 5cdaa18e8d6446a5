//! Confident learning: the second view of every label. A linear probe per finding learns NIH's
//! label from the model's own image features; each image's probability comes from the probe
//! that never saw it (out of fold), and confident learning's rules ([`rules`]) find the labels
//! those probabilities confidently contradict.
//!
//! The two views fail differently. The zero-shot answer never saw a label but may be a weak
//! reader; the probe reads the features well but learns the report labeler's systematic
//! mistakes along with its labels, so it can only flag the errors that look like noise.
//!
//! - [`folds`]: K folds split by patient, seeded.
//! - [`probe`]: one probe, its objective and its fit ([`lbfgs`]).
//! - [`out_of_fold`]: every image's out-of-fold probability per finding, the regularisation of
//!   each fold's probe chosen on its training folds only (each of them held out in turn).
//! - [`rules`]: thresholds, the confident joint, noise rates, issues.
//! - [`table`] and [`report`]: the files read and written, and the whole run over NIH's labels.

pub mod folds;
mod lbfgs;
pub mod probe;
pub mod report;
pub mod rules;
pub mod table;

use rayon::prelude::*;
use serde::Serialize;

use crate::release_spec::ConfidentLearningSpec;

pub use folds::patient_folds;
pub use probe::FeatureMatrix;
pub use rules::{find_issues, FindingIssues};

/// How the probes are fitted: the spec's `signal.confident_learning`, which owns the defaults
/// and the checks, and what `label-issues` takes as flags. build.lock records it with the spec.
pub type ProbeSettings = ConfidentLearningSpec;

/// One finding's labels: NIH's label of every image, in the feature matrix's row order.
#[derive(Debug, Clone)]
pub struct FindingLabels {
    pub finding: String,
    pub labels: Vec<bool>,
}

/// A finding's out-of-fold probabilities, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingProbes {
    pub finding: String,
    /// Per image, the probability that the finding is present from the probe of the image's fold
    /// (empty when the finding was skipped).
    #[serde(skip)]
    pub probabilities: Vec<f64>,
    /// Per fold, the strength chosen on its training folds.
    pub chosen_c: Vec<f64>,
    /// Per fold, per strength in the grid: the mean log loss on the training folds, each of them
    /// predicted by a probe fitted on the others.
    pub inner_log_loss: Vec<Vec<f64>>,
    /// Why no probe was fitted.
    pub skipped: Option<String>,
}

/// Every image's fold and every finding's probes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutOfFold {
    pub settings: ProbeSettings,
    #[serde(skip)]
    pub folds: Vec<usize>,
    pub findings: Vec<FindingProbes>,
}

/// Out-of-fold probabilities of every finding over every image of `features` (row i is the
/// image of `patients[i]`). `done` is called with each finding's name as it finishes.
pub fn out_of_fold(
    features: &FeatureMatrix,
    patients: &[u32],
    findings: &[FindingLabels],
    settings: &ProbeSettings,
    done: &(dyn Fn(&str) + Sync),
) -> OutOfFold {
    assert_eq!(patients.len(), features.rows, "a patient per image");
    let folds = patient_folds(patients, settings.folds, settings.fold_seed);
    let probes = findings
        .par_iter()
        .map(|f| {
            assert_eq!(f.labels.len(), features.rows, "{}: a label per image", f.finding);
            let probes = finding_probes(features, &folds, f, settings);
            done(&f.finding);
            probes
        })
        .collect();
    OutOfFold { settings: settings.clone(), folds, findings: probes }
}

fn finding_probes(features: &FeatureMatrix, folds: &[usize], finding: &FindingLabels, settings: &ProbeSettings) -> FindingProbes {
    let k = settings.folds;
    let labels = &finding.labels;
    let skipped = |why: String| FindingProbes {
        finding: finding.finding.clone(),
        probabilities: Vec::new(),
        chosen_c: Vec::new(),
        inner_log_loss: Vec::new(),
        skipped: Some(why),
    };
    // Every probe is fitted with two folds held out at most: each class must be outside any two.
    let mut per_fold = vec![[0usize; 2]; k];
    for (&f, &y) in folds.iter().zip(labels) {
        per_fold[f][usize::from(y)] += 1;
    }
    for class in [true, false] {
        let folds_with = per_fold.iter().filter(|c| c[usize::from(class)] > 0).count();
        if folds_with < 3 {
            let which = if class { "positives" } else { "negatives" };
            return skipped(format!("NIH's {which} fall in {folds_with} of {k} folds; a probe needs them in at least 3"));
        }
    }

    let rows_outside = |held: &[usize]| -> Vec<usize> { (0..folds.len()).filter(|&i| !held.contains(&folds[i])).collect() };
    let rows_in = |fold: usize| -> Vec<usize> { (0..folds.len()).filter(|&i| folds[i] == fold).collect() };
    let grid = &settings.grid;
    // Summed log loss per (outer fold, strength): the inner fold g of outer fold f is predicted by
    // the probe fitted without f and g, the same probe that predicts f for outer fold g.
    let mut inner = vec![vec![0.0; grid.len()]; k];
    for f in 0..k {
        for g in f + 1..k {
            let train = rows_outside(&[f, g]);
            let (held_f, held_g) = (rows_in(f), rows_in(g));
            for (ci, p) in probe::fit_path(features, &train, labels, grid).iter().enumerate() {
                inner[f][ci] += probe::log_loss(p, features, &held_g, labels) * held_g.len() as f64;
                inner[g][ci] += probe::log_loss(p, features, &held_f, labels) * held_f.len() as f64;
            }
        }
    }
    let mut probabilities = vec![f64::NAN; folds.len()];
    let mut chosen_c = Vec::with_capacity(k);
    let mut inner_log_loss = Vec::with_capacity(k);
    for (f, losses) in inner.into_iter().enumerate() {
        let train = rows_outside(&[f]);
        let mean: Vec<f64> = losses.iter().map(|l| l / train.len() as f64).collect();
        // The lowest loss; on a tie the stronger regularisation (the grid ascends).
        let best = (0..grid.len()).fold(0, |b, ci| if mean[ci] < mean[b] { ci } else { b });
        let p = probe::fit(features, &train, labels, grid[best]);
        for i in rows_in(f) {
            probabilities[i] = p.probability(features.row(i));
        }
        chosen_c.push(grid[best]);
        inner_log_loss.push(mean);
    }
    FindingProbes { finding: finding.finding.clone(), probabilities, chosen_c, inner_log_loss, skipped: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 30 patients of 1 to 3 images; feature 0 carries the finding, feature 1 is noise.
    fn demo() -> (FeatureMatrix, Vec<u32>, Vec<bool>) {
        let (mut values, mut patients, mut labels) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..60u32 {
            let present = i % 3 == 0;
            let signal = if present { 1.0 } else { -1.0 } + ((i * 17 % 7) as f32 - 3.0) * 0.3;
            values.extend([signal, (i * 31 % 13) as f32]);
            patients.push(i / 2);
            labels.push(present);
        }
        (FeatureMatrix::new(60, 2, values), patients, labels)
    }

    fn settings() -> ProbeSettings {
        ProbeSettings { folds: 4, fold_seed: 1, grid: vec![0.01, 1.0] }
    }

    #[test]
    fn an_images_own_label_never_reaches_its_probability() {
        let (x, patients, labels) = demo();
        let finding = |labels: Vec<bool>| vec![FindingLabels { finding: "Effusion".into(), labels }];
        let before = out_of_fold(&x, &patients, &finding(labels.clone()), &settings(), &|_| {});
        let mut flipped = labels.clone();
        flipped[7] = !flipped[7];
        let after = out_of_fold(&x, &patients, &finding(flipped), &settings(), &|_| {});
        let (a, b) = (&before.findings[0].probabilities, &after.findings[0].probabilities);
        assert_eq!(a[7], b[7], "image 7's probability moved with its own label");
        // Its fold's other images share its probe, and the other folds' probes saw the flip.
        let fold = before.folds[7];
        assert!((0..60).filter(|&i| before.folds[i] != fold).any(|i| a[i] != b[i]));
    }

    #[test]
    fn a_patients_images_are_never_split_across_folds() {
        let (x, patients, labels) = demo();
        let oof = out_of_fold(&x, &patients, &[FindingLabels { finding: "Mass".into(), labels }], &settings(), &|_| {});
        for i in 0..60 {
            for j in 0..60 {
                assert!(patients[i] != patients[j] || oof.folds[i] == oof.folds[j]);
            }
        }
        assert!(oof.findings[0].probabilities.iter().all(|p| (0.0..=1.0).contains(p)));
    }

    #[test]
    fn a_finding_without_positives_in_enough_folds_is_skipped_with_the_reason() {
        let (x, patients, _) = demo();
        let labels: Vec<bool> = (0..60).map(|i| i == 4).collect();
        let oof = out_of_fold(&x, &patients, &[FindingLabels { finding: "Hernia".into(), labels }], &settings(), &|_| {});
        assert_eq!(oof.findings[0].skipped.as_deref(), Some("NIH's positives fall in 1 of 4 folds; a probe needs them in at least 3"));
    }

    #[test]
    fn settings_outside_their_range_are_named() {
        let bad = |f: fn(&mut ProbeSettings)| {
            let mut s = ProbeSettings::default();
            f(&mut s);
            s.problem().unwrap()
        };
        assert!(bad(|s| s.folds = 2).contains("folds is 2"));
        assert!(bad(|s| s.grid = vec![1.0, 0.1]).contains("ascending"));
        assert!(bad(|s| s.grid = vec![f64::NAN]).contains("positive, finite"));
        assert_eq!(ProbeSettings::default().problem(), None);
    }
}
