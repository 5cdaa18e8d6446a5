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
mod kernel;
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

/// How many fits [`out_of_fold`] runs for `folds` folds: one per pair of folds (a path over the
/// grid), then one per fold (at each finding's chosen strength). Its progress counts these.
pub fn fit_count(folds: usize) -> usize {
    folds * (folds - 1) / 2 + folds
}

/// Out-of-fold probabilities of every finding over every image of `features` (row i is the
/// image of `patients[i]`). Every finding's probes on the same rows are fitted together (one pass
/// over the features serves them all); the fits of different rows run on separate threads.
/// `done` is called as each fit finishes, with the folds it left out.
pub fn out_of_fold(
    features: &FeatureMatrix,
    patients: &[u32],
    findings: &[FindingLabels],
    settings: &ProbeSettings,
    done: &(dyn Fn(&str) + Sync),
) -> OutOfFold {
    assert_eq!(patients.len(), features.rows, "a patient per image");
    let (k, grid) = (settings.folds, &settings.grid);
    let folds = patient_folds(patients, k, settings.fold_seed);
    for f in findings {
        assert_eq!(f.labels.len(), features.rows, "{}: a label per image", f.finding);
    }
    let skipped: Vec<Option<String>> = findings.iter().map(|f| skip_reason(&folds, &f.labels, k)).collect();
    let probed: Vec<usize> = (0..findings.len()).filter(|&i| skipped[i].is_none()).collect();
    let labels: Vec<&[bool]> = probed.iter().map(|&i| findings[i].labels.as_slice()).collect();
    let rows_outside = |held: &[usize]| -> Vec<usize> { (0..folds.len()).filter(|&i| !held.contains(&folds[i])).collect() };
    let rows_in = |fold: usize| -> Vec<usize> { (0..folds.len()).filter(|&i| folds[i] == fold).collect() };

    // Per pair of folds f < g, a path over the grid on the rest. Its probes predict g for outer
    // fold f and f for outer fold g: the inner losses of the regularisation's choice.
    let pairs: Vec<(usize, usize)> = (0..k).flat_map(|f| (f + 1..k).map(move |g| (f, g))).collect();
    // Per pair: each finding's path, and its summed losses on the two held-out folds.
    type PairFit = (Vec<Vec<probe::Probe>>, Vec<[Vec<f64>; 2]>);
    let pair_fits: Vec<PairFit> = pairs
        .par_iter()
        .map(|&(f, g)| {
            let paths = probe::fit_paths(features, &rows_outside(&[f, g]), &labels, grid);
            let (held_f, held_g) = (rows_in(f), rows_in(g));
            done(&format!("folds {} and {} held out", f + 1, g + 1));
            let losses = paths
                .iter()
                .zip(&labels)
                .map(|(path, y)| {
                    let summed = |held: &[usize]| -> Vec<f64> {
                        path.iter().map(|p| probe::log_loss(p, features, held, y) * held.len() as f64).collect()
                    };
                    [summed(&held_g), summed(&held_f)]
                })
                .collect();
            (paths, losses)
        })
        .collect();
    let pair_losses: Vec<&Vec<[Vec<f64>; 2]>> = pair_fits.iter().map(|(_, losses)| losses).collect();
    // Summed log loss per (finding, outer fold, strength), in the order of the pairs.
    let mut inner = vec![vec![vec![0.0; grid.len()]; k]; probed.len()];
    for (&(f, g), losses) in pairs.iter().zip(pair_losses) {
        for (finding, [on_g, on_f]) in losses.iter().enumerate() {
            for ci in 0..grid.len() {
                inner[finding][f][ci] += on_g[ci];
                inner[finding][g][ci] += on_f[ci];
            }
        }
    }
    // Each fold's strength per finding: the lowest mean loss; on a tie the stronger
    // regularisation (the grid ascends).
    let mean_loss: Vec<Vec<Vec<f64>>> = inner
        .into_iter()
        .map(|per_fold| {
            per_fold
                .into_iter()
                .enumerate()
                .map(|(f, losses)| losses.iter().map(|l| l / (folds.len() - rows_in(f).len()) as f64).collect())
                .collect()
        })
        .collect();
    let chosen: Vec<Vec<usize>> = mean_loss
        .iter()
        .map(|per_fold| {
            per_fold.iter().map(|mean: &Vec<f64>| (0..grid.len()).fold(0, |b, ci| if mean[ci] < mean[b] { ci } else { b })).collect()
        })
        .collect();
    let finals: Vec<Vec<probe::Probe>> = (0..k)
        .into_par_iter()
        .map(|f| {
            let cs: Vec<f64> = chosen.iter().map(|c| grid[c[f]]).collect();
            // Each search starts from the probe at its strength fitted without f and one more
            // fold (the first pair that leaves f out): nearly these rows, nearly this minimum.
            let other = usize::from(f == 0);
            let pair = pairs.iter().position(|&p| p == (f.min(other), f.max(other))).expect("every pair was fitted");
            let starts: Vec<&probe::Probe> = chosen.iter().enumerate().map(|(i, c)| &pair_fits[pair].0[i][c[f]]).collect();
            let probes = probe::fit_each(features, &rows_outside(&[f]), &labels, &cs, Some(&starts));
            done(&format!("fold {} held out", f + 1));
            probes
        })
        .collect();

    let mut results = findings
        .iter()
        .zip(&skipped)
        .map(|(f, why)| FindingProbes {
            finding: f.finding.clone(),
            probabilities: Vec::new(),
            chosen_c: Vec::new(),
            inner_log_loss: Vec::new(),
            skipped: why.clone(),
        })
        .collect::<Vec<_>>();
    for (slot, &i) in probed.iter().enumerate() {
        let mut probabilities = vec![f64::NAN; folds.len()];
        for (f, fold_probes) in finals.iter().enumerate() {
            for row in rows_in(f) {
                probabilities[row] = fold_probes[slot].probability(features.row(row));
            }
        }
        let r = &mut results[i];
        r.probabilities = probabilities;
        r.chosen_c = chosen[slot].iter().map(|&ci| grid[ci]).collect();
        r.inner_log_loss = mean_loss[slot].clone();
    }
    OutOfFold { settings: settings.clone(), folds, findings: results }
}

/// Why a finding gets no probe: every probe is fitted with two folds held out at most, so each
/// class must be outside any two.
fn skip_reason(folds: &[usize], labels: &[bool], k: usize) -> Option<String> {
    let mut per_fold = vec![[0usize; 2]; k];
    for (&f, &y) in folds.iter().zip(labels) {
        per_fold[f][usize::from(y)] += 1;
    }
    [true, false].into_iter().find_map(|class| {
        let folds_with = per_fold.iter().filter(|c| c[usize::from(class)] > 0).count();
        let which = if class { "positives" } else { "negatives" };
        (folds_with < 3).then(|| format!("NIH's {which} fall in {folds_with} of {k} folds; a probe needs them in at least 3"))
    })
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
        ProbeSettings { folds: 4, fold_seed: 1, grid: vec![0.01, 1.0], ..Default::default() }
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
