//! A joint rule fitted on expert labels: how a two-family release combines its families'
//! confidences, per label, instead of their plain mean; or how a release with confident learning
//! combines the model's answers with the probes' probabilities, instead of the rule that needs
//! both views to agree ([`super::views`]). The file says which (`second_view`); below, "the
//! families" are the two views either way.
//!
//! The rule is logistic stacking: for a row of label L,
//! `confidence = sigmoid(w_primary * logit(c_primary) + w_second * logit(c_second) + bias)`,
//! with the weights fitted by Newton's method on the log loss of the expert reads of L. A weak
//! family gets a small weight instead of half the say, and a family good on one label and poor on
//! another is weighed per label. Three safeguards keep fits honest:
//! - neither weight may be negative (Breiman's constraint for stacking, 1996): a family's "present"
//!   never counts against a finding, so where one family adds nothing beside the other its
//!   weight is 0 and the rule ranks as the other family alone;
//! - a ridge penalty pulls both weights toward 0.5 (the logit-scale mean of the two families),
//!   worth less than one read: it only matters where the reads cannot tell the weights apart
//!   (the two families' logits nearly collinear, or the reads separable);
//! - a label needs [`MIN_EACH_CLASS`] reads of each class (present, absent) for a fit of its own:
//!   the usual ten events per fitted slope. Short of that it takes the rule fitted on every
//!   label's reads together (`pooled`), and where even those are too few, the plain mean.
//!
//! Targets are Platt's smoothed ones, as in [`super::calibration`]. Everything is deterministic
//! (fixed order, no randomness), and the file lists the images whose reads it was fitted on, so
//! an evaluation can tell fitted rows from held-out ones and cross-fit the former.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::calibration::{logit, sigmoid};

pub const JOINT_RULE_FORMAT: &str = "bpals-joint-rule/1";
/// Reads of each class a fit needs: ten per fitted slope, two slopes.
pub const MIN_EACH_CLASS: usize = 20;
/// Folds of the cross-fitted evaluation (images are split among them by a hash of their name).
pub const FOLDS: usize = 5;
/// The ridge penalty toward equal weights, in units of the summed log loss.
const RIDGE: f64 = 1.0;

/// Where a label's combination comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleSource {
    /// Fitted on the label's own reads.
    Label,
    /// The rule fitted on every label's reads together.
    Pooled,
    /// Too few reads anywhere: the two families' mean.
    Mean,
}

/// Logit-scale weights of the two families and the bias.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    pub primary: f64,
    pub second: f64,
    pub bias: f64,
}

/// One label's combination, and the reads it was fitted on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelRule {
    pub source: RuleSource,
    /// None for the mean.
    pub weights: Option<Weights>,
    /// Expert reads of this label (of every label, for the pooled rule).
    pub n: usize,
    pub positives: usize,
}

impl LabelRule {
    const MEAN: LabelRule = LabelRule { source: RuleSource::Mean, weights: None, n: 0, positives: 0 };

    /// The joint confidence of a row whose families say `primary` and `second`.
    pub fn apply(&self, primary: f64, second: f64) -> f64 {
        match self.weights {
            None => (primary + second) / 2.0,
            Some(w) => sigmoid(w.primary * logit(primary) + w.second * logit(second) + w.bias),
        }
    }
}

/// The largest weight (or bias) a rule file may hold. A fit's are a few units (its ridge pulls
/// them toward each other); within this bound a row's logit stays below 3,000 (the logits are
/// clamped at ±13.8), so no confidence can be NaN.
const MAX_WEIGHT: f64 = 100.0;

/// NIH ChestX-ray14's images: no rule is fitted on more.
const MAX_IMAGES: usize = 112_120;

/// What a rule's second view is: the second family's confidence, or confident learning's
/// out-of-fold probability that the finding is present. The first is always the release's
/// `confidence` (one family's, or two families' joint).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum SecondView {
    #[default]
    Family,
    ConfidentLearning,
}

impl SecondView {
    pub fn is_family(&self) -> bool {
        *self == SecondView::Family
    }
}

/// A fitted joint rule, as `calibrate --joint` writes it and a spec names it
/// (`signal.joint_rule`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JointRule {
    pub format: String,
    /// What the second view is. Absent from the files of two-family rules, which were all there
    /// were before confident learning.
    #[serde(default, skip_serializing_if = "SecondView::is_family")]
    pub second_view: SecondView,
    /// Where the fit came from (release id and gold file name), for the card and the lock.
    pub fitted_on: String,
    /// The gold file's sha256.
    pub gold_sha256: String,
    /// The rule every label short of its own reads takes.
    pub pooled: LabelRule,
    /// One entry per NIH label.
    pub labels: BTreeMap<String, LabelRule>,
    /// The images whose reads the rule was fitted on, sorted: an evaluation cross-fits their rows.
    pub images: Vec<String>,
    /// The scorers whose confidences it was fitted on (their identities' sha256, as the
    /// release's build.lock records them): a build refuses the rule under any others. Absent
    /// from rule files written before it was recorded; a build then says it could not check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scorers: Option<FittedScorers>,
}

/// The two scorers a rule was fitted on. A rule over confident learning has one scorer (both
/// fields name it) and the probes' settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FittedScorers {
    pub primary_sha256: String,
    pub second_sha256: String,
    /// sha256 of `signal.confident_learning` as build.lock records it: other probes are other
    /// probabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confident_learning_sha256: Option<String>,
}

/// Why a joint rule file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JointRuleError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a joint rule file", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: format {found:?}, expected {JOINT_RULE_FORMAT:?}", path.display())]
    Format { path: PathBuf, found: String },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

impl JointRule {
    /// Reads a joint rule file written by `bpals-release calibrate --joint`, with its bytes (a
    /// spec that names it records their digest).
    pub fn read_with_bytes(path: &Path) -> Result<(JointRule, Vec<u8>), JointRuleError> {
        let bytes = crate::files::regular::read(path, crate::files::regular::RELEASE_JSON)
            .map_err(|source| JointRuleError::Read { path: path.into(), source })?;
        let parse = |source| JointRuleError::Parse { path: path.into(), source };
        // The format first: a calibration file named by mistake says so, not which key it lacks.
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(parse)?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(JOINT_RULE_FORMAT) => {}
            found => return Err(JointRuleError::Format { path: path.into(), found: found.unwrap_or("none").to_string() }),
        }
        let rule: JointRule = serde_json::from_value(value).map_err(parse)?;
        let invalid = |message: String| JointRuleError::Invalid { path: path.into(), message };
        if let Some(label) = rule.labels.keys().find(|l| !crate::vocab::LABELS.contains(&l.as_str())) {
            return Err(invalid(format!("unknown label {label:?}")));
        }
        for (name, entry) in std::iter::once(("pooled", &rule.pooled)).chain(rule.labels.iter().map(|(l, r)| (l.as_str(), r))) {
            match entry.weights {
                None if entry.source != RuleSource::Mean => {
                    return Err(invalid(format!("{name}: a {:?} rule without weights", entry.source)))
                }
                Some(_) if entry.source == RuleSource::Mean => return Err(invalid(format!("{name}: the mean takes no weights"))),
                Some(w) if ![w.primary, w.second, w.bias].iter().all(|x| x.is_finite()) => {
                    return Err(invalid(format!("{name}: weights must be finite numbers")))
                }
                Some(w) if w.primary < 0.0 || w.second < 0.0 => {
                    return Err(invalid(format!(
                        "{name}: a view's weight is negative ({}, {}); the fit never makes one (a view that points the wrong way weighs 0)",
                        w.primary, w.second
                    )))
                }
                Some(w) if [w.primary, w.second, w.bias].iter().any(|x| x.abs() > MAX_WEIGHT) => {
                    return Err(invalid(format!(
                        "{name}: weights beyond ±{MAX_WEIGHT}, which no fit makes and which would saturate every confidence"
                    )))
                }
                _ => {}
            }
        }
        if rule.images.len() > MAX_IMAGES {
            return Err(invalid(format!("lists {} images, more than the {MAX_IMAGES} NIH has", rule.images.len())));
        }
        if let Some(pair) = rule.images.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Err(invalid(format!("images must be sorted and unique: {:?} comes before {:?}", pair[0], pair[1])));
        }
        if let Some(image) = rule.images.iter().find(|i| i.is_empty() || i.len() > 64 || i.chars().any(|c| c.is_control())) {
            return Err(invalid(format!("{image:?} is not an image file name")));
        }
        let fitted_on = &rule.fitted_on;
        if fitted_on.chars().count() > 200 || fitted_on.chars().any(|c| c.is_control() || crate::release_spec::is_bidi_control(c)) {
            return Err(invalid("fitted_on must be one line of at most 200 characters, without control characters".into()));
        }
        if rule.gold_sha256.len() != 64 || !rule.gold_sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(format!("gold_sha256 {:?} is not a sha256 (64 hex digits)", rule.gold_sha256)));
        }
        Ok((rule, bytes))
    }

    /// The joint confidence of a row of `label` (labels the file does not list take the pooled rule).
    pub fn apply(&self, label: &str, primary: f64, second: f64) -> f64 {
        self.labels.get(label).unwrap_or(&self.pooled).apply(primary, second)
    }

    /// Labels fitted on their own reads, on the pooled reads, and left at the mean.
    pub fn sources(&self) -> [(RuleSource, usize); 3] {
        [RuleSource::Label, RuleSource::Pooled, RuleSource::Mean].map(|s| (s, self.labels.values().filter(|r| r.source == s).count()))
    }
}

/// One expert read joined with both families' confidences.
#[derive(Debug, Clone, Copy)]
pub struct FitRow<'a> {
    pub image: &'a str,
    pub label: &'a str,
    pub primary: f64,
    pub second: f64,
    pub gold: bool,
}

/// The pooled rule and one rule per NIH label, fitted on `rows`.
pub fn fit(rows: &[FitRow<'_>]) -> (LabelRule, BTreeMap<String, LabelRule>) {
    let pooled = fit_one(rows.iter(), RuleSource::Pooled);
    let labels = crate::vocab::LABELS
        .iter()
        .map(|&label| {
            let own = fit_one(rows.iter().filter(|r| r.label == label), RuleSource::Label);
            let rule = match own.source {
                RuleSource::Label => own,
                _ => LabelRule { n: own.n, positives: own.positives, ..pooled },
            };
            (label.to_string(), rule)
        })
        .collect();
    (pooled, labels)
}

/// The fold of an image in a cross-fitted evaluation.
pub fn fold_of(image: &str) -> usize {
    (crate::hashing::stable_u64(&["joint-rule-fold", image]) % FOLDS as u64) as usize
}

/// Out-of-fold joint confidences: each row's from the rule fitted on the rows of the other folds,
/// so no row's own read enters its confidence.
pub fn cross_fitted(rows: &[FitRow<'_>]) -> Vec<f64> {
    let folds: Vec<usize> = rows.iter().map(|r| fold_of(r.image)).collect();
    let rules: Vec<(LabelRule, BTreeMap<String, LabelRule>)> = (0..FOLDS)
        .map(|k| {
            let training: Vec<FitRow<'_>> = rows.iter().zip(&folds).filter(|(_, f)| **f != k).map(|(r, _)| *r).collect();
            fit(&training)
        })
        .collect();
    rows.iter()
        .zip(&folds)
        .map(|(r, &k)| {
            let (pooled, labels) = &rules[k];
            labels.get(r.label).unwrap_or(pooled).apply(r.primary, r.second)
        })
        .collect()
}

/// One logistic fit on `rows`, or the mean where they are too few.
fn fit_one<'a>(rows: impl Iterator<Item = &'a FitRow<'a>>, source: RuleSource) -> LabelRule {
    let rows: Vec<&FitRow<'_>> = rows.collect();
    let (n, positives) = (rows.len(), rows.iter().filter(|r| r.gold).count());
    if positives.min(n - positives) < MIN_EACH_CLASS {
        return LabelRule { n, positives, ..LabelRule::MEAN };
    }
    let hi = (positives as f64 + 1.0) / (positives as f64 + 2.0);
    let lo = 1.0 / ((n - positives) as f64 + 2.0);
    let x: Vec<[f64; 3]> = rows.iter().map(|r| [logit(r.primary), logit(r.second), 1.0]).collect();
    let t: Vec<f64> = rows.iter().map(|r| if r.gold { hi } else { lo }).collect();
    // Neither weight may be negative: a family's "present" never counts against a finding.
    // The loss is convex: where the fit free in both weights respects the bound it is the best
    // bounded rule; otherwise the best lies on a bound, the lower-loss of the fits with one
    // weight held at 0 that respect it.
    let bounded = |w: [f64; 3]| w[0] >= 0.0 && w[1] >= 0.0;
    let free = newton(&x, &t, [true, true]);
    let best = if bounded(free) {
        Some(free)
    } else {
        [[true, false], [false, true]]
            .map(|free| newton(&x, &t, free))
            .into_iter()
            .filter(|&w| bounded(w))
            .min_by(|a, b| loss(&x, &t, a).total_cmp(&loss(&x, &t, b)))
    };
    match best {
        Some(w) => LabelRule { source, weights: Some(Weights { primary: w[0], second: w[1], bias: w[2] }), n, positives },
        // Both families point the wrong way on these reads: nothing to weigh, the mean.
        None => LabelRule { n, positives, ..LabelRule::MEAN },
    }
}

/// The penalized log loss: the logistic loss plus the ridge toward equal weights.
fn loss(x: &[[f64; 3]], t: &[f64], w: &[f64; 3]) -> f64 {
    let data: f64 = x
        .iter()
        .zip(t)
        .map(|(xi, ti)| {
            let z = dot(xi, w);
            // log(1 + e^z) - t z, computed without overflow.
            z.max(0.0) + (-z.abs()).exp().ln_1p() - ti * z
        })
        .sum();
    data + RIDGE / 2.0 * ((w[0] - 0.5).powi(2) + (w[1] - 0.5).powi(2))
}

fn dot(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Damped Newton's method from equal weights, over the family weights `free` says may move (a
/// fixed one stays at 0) and the bias; the penalty keeps the Hessian positive definite.
#[allow(clippy::needless_range_loop)] // The 3 x 3 algebra reads as it is written, by index.
fn newton(x: &[[f64; 3]], t: &[f64], free: [bool; 2]) -> [f64; 3] {
    let moves = [free[0], free[1], true];
    let mut w = [if free[0] { 0.5 } else { 0.0 }, if free[1] { 0.5 } else { 0.0 }, 0.0];
    let mut current = loss(x, t, &w);
    for _ in 0..100 {
        let mut g = [RIDGE * (w[0] - 0.5), RIDGE * (w[1] - 0.5), 0.0];
        let mut h = [[0.0; 3]; 3];
        (h[0][0], h[1][1]) = (RIDGE, RIDGE);
        for (xi, ti) in x.iter().zip(t) {
            let p = sigmoid(dot(xi, &w));
            let s = p * (1.0 - p);
            for i in 0..3 {
                g[i] += (p - ti) * xi[i];
                for j in 0..3 {
                    h[i][j] += s * xi[i] * xi[j];
                }
            }
        }
        // A fixed weight's row and column become the identity, its gradient 0: no step.
        for i in (0..3).filter(|&i| !moves[i]) {
            g[i] = 0.0;
            for j in 0..3 {
                (h[i][j], h[j][i]) = (0.0, 0.0);
            }
            h[i][i] = 1.0;
        }
        let Some(step) = solve(h, g) else { break };
        let mut scale = 1.0;
        let (mut next_w, mut next) = (w, current);
        for _ in 0..50 {
            next_w = [w[0] - scale * step[0], w[1] - scale * step[1], w[2] - scale * step[2]];
            next = loss(x, t, &next_w);
            if next <= current {
                break;
            }
            scale /= 2.0;
        }
        if next > current {
            break;
        }
        let moved: f64 = (0..3).map(|i| (next_w[i] - w[i]).abs()).sum();
        (w, current) = (next_w, next);
        if moved < 1e-12 {
            break;
        }
    }
    w
}

/// Solves the symmetric 3 x 3 system `h s = g` by Gaussian elimination with partial pivoting.
#[allow(clippy::needless_range_loop)] // As in `newton`.
fn solve(mut h: [[f64; 3]; 3], mut g: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&a, &b| h[a][col].abs().total_cmp(&h[b][col].abs()))?;
        if h[pivot][col].abs() < 1e-12 {
            return None;
        }
        h.swap(col, pivot);
        g.swap(col, pivot);
        for row in col + 1..3 {
            let f = h[row][col] / h[col][col];
            for k in col..3 {
                h[row][k] -= f * h[col][k];
            }
            g[row] -= f * g[col];
        }
    }
    let mut s = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| h[row][k] * s[k]).sum();
        s[row] = (g[row] - tail) / h[row][row];
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::metrics::auroc;

    /// A deterministic stream of uniform numbers in (0, 1).
    struct Uniform(u64);
    impl Uniform {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        /// A standard normal draw (Box-Muller).
        fn normal(&mut self) -> f64 {
            (-2.0 * self.next().ln()).sqrt() * (std::f64::consts::TAU * self.next()).cos()
        }
    }

    /// `n` images of one label; each family sees the truth through noise of its own: a family of
    /// strength s gives confidence sigmoid(s * (+-1) + noise), independently of the other.
    fn synthetic(n: usize, strength: [f64; 2], seed: u64) -> (Vec<String>, Vec<(f64, f64, bool)>) {
        let mut u = Uniform(seed);
        let images = (0..n).map(|i| format!("{i:08}_000.png")).collect();
        let rows = (0..n)
            .map(|_| {
                let gold = u.next() < 0.4;
                let sign = if gold { 1.0 } else { -1.0 };
                let mut family = |s: f64| sigmoid(s * sign + u.normal());
                (family(strength[0]), family(strength[1]), gold)
            })
            .collect();
        (images, rows)
    }

    fn fit_rows<'a>(images: &'a [String], rows: &[(f64, f64, bool)]) -> Vec<FitRow<'a>> {
        images.iter().zip(rows).map(|(image, &(primary, second, gold))| FitRow { image, label: "Mass", primary, second, gold }).collect()
    }

    /// AUROC of the primary alone, the second alone, and the out-of-fold joint confidence.
    fn three_aurocs(n: usize, strength: [f64; 2], seed: u64) -> [f64; 3] {
        let (images, rows) = synthetic(n, strength, seed);
        let fit_rows = fit_rows(&images, &rows);
        let gold: Vec<bool> = rows.iter().map(|r| r.2).collect();
        let column = |f: fn(&(f64, f64, bool)) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
        [auroc(&column(|r| r.0), &gold), auroc(&column(|r| r.1), &gold), auroc(&cross_fitted(&fit_rows), &gold)].map(|a| a.unwrap())
    }

    /// The hostile rule files of a review: a negated rule, ±1e308 weights (NaN confidences), the
    /// images reversed (the leak check off), card text that is not one line, a gold digest that
    /// is not one. Each is refused naming what is wrong; the honest rule reads.
    #[test]
    fn rule_files_no_fit_makes_are_refused() {
        let honest = JointRule {
            format: JOINT_RULE_FORMAT.into(),
            second_view: SecondView::Family,
            fitted_on: "release s1a against gold.csv".into(),
            gold_sha256: "ab".repeat(32),
            pooled: LabelRule {
                source: RuleSource::Pooled,
                weights: Some(Weights { primary: 1.2, second: 0.8, bias: -0.3 }),
                n: 40,
                positives: 20,
            },
            labels: BTreeMap::new(),
            images: vec!["00000001_000.png".into(), "00000002_000.png".into()],
            scorers: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let read = |rule: &JointRule| {
            let path = dir.path().join("rule.json");
            std::fs::write(&path, serde_json::to_vec(rule).unwrap()).unwrap();
            JointRule::read_with_bytes(&path).map(|_| ()).map_err(|e| e.to_string())
        };
        assert_eq!(read(&honest), Ok(()));
        let with = |edit: &dyn Fn(&mut JointRule)| {
            let mut rule = honest.clone();
            edit(&mut rule);
            read(&rule).unwrap_err()
        };
        let weights = |w: Weights| move |r: &mut JointRule| r.pooled.weights = Some(w);
        let e = with(&weights(Weights { primary: -1.2, second: -0.8, bias: 0.3 }));
        assert!(e.contains("negative"), "{e}");
        let e = with(&weights(Weights { primary: 1e308, second: 1e308, bias: -1e308 }));
        assert!(e.contains("beyond ±100"), "{e}");
        let e = with(&|r| r.images.reverse());
        assert!(e.contains("sorted and unique"), "{e}");
        let e = with(&|r| r.images.push(r.images[1].clone()));
        assert!(e.contains("sorted and unique"), "{e}");
        let e = with(&|r| r.fitted_on = "s1a\n\n## Every label is right".into());
        assert!(e.contains("fitted_on must be one line"), "{e}");
        let e = with(&|r| r.gold_sha256 = "not a digest".into());
        assert!(e.contains("is not a sha256"), "{e}");
    }

    #[test]
    fn two_equally_good_families_with_independent_errors_beat_either() {
        for seed in [1, 2, 3] {
            let [a, b, joint] = three_aurocs(2_000, [1.0, 1.0], seed);
            eprintln!("seed {seed}: primary {a:.4}, second {b:.4}, out-of-fold joint {joint:.4}");
            assert!(joint > a.max(b) + 0.02, "seed {seed}: joint {joint:.4} against {a:.4} and {b:.4}");
        }
    }

    #[test]
    fn a_family_of_noise_leaves_the_good_one_alone() {
        for seed in [1, 2, 3] {
            let [good, noise, joint] = three_aurocs(2_000, [1.5, 0.0], seed);
            assert!((noise - 0.5).abs() < 0.05, "the noise family ranks at chance: {noise}");
            // Within the sampling noise of an AUROC on 2,000 rows (its standard error is about 0.01).
            assert!(joint > good - 0.01, "seed {seed}: joint {joint:.4} against the good family's {good:.4}");
            let (images, rows) = synthetic(2_000, [1.5, 0.0], seed);
            let (pooled, _) = fit(&fit_rows(&images, &rows));
            let w = pooled.weights.unwrap();
            assert!((0.0..0.15 * w.primary).contains(&w.second), "the noise family's weight is small: {w:?}");
            // The mean pays for listening to the noise.
            let gold: Vec<bool> = rows.iter().map(|r| r.2).collect();
            let mean = auroc(&rows.iter().map(|r| (r.0 + r.1) / 2.0).collect::<Vec<_>>(), &gold).unwrap();
            eprintln!("seed {seed}: good {good:.4}, noise {noise:.4}, out-of-fold joint {joint:.4}, mean {mean:.4}");
            assert!(joint > mean + 0.02, "seed {seed}: joint {joint:.4}, mean {mean:.4}");
        }
    }

    #[test]
    fn a_family_that_points_the_wrong_way_weighs_nothing() {
        // The second family's confidence falls as the finding's likelihood rises.
        let (images, rows) = synthetic(2_000, [1.5, -0.7], 5);
        let (pooled, _) = fit(&fit_rows(&images, &rows));
        let w = pooled.weights.unwrap();
        assert_eq!(w.second, 0.0, "{w:?}");
        assert!(w.primary > 0.0, "{w:?}");
        // So the rule ranks the rows exactly as the primary family does.
        let gold: Vec<bool> = rows.iter().map(|r| r.2).collect();
        let primary: Vec<f64> = rows.iter().map(|r| r.0).collect();
        let joint: Vec<f64> = rows.iter().map(|r| pooled.apply(r.0, r.1)).collect();
        assert_eq!(auroc(&joint, &gold), auroc(&primary, &gold));
    }

    #[test]
    fn labels_short_of_reads_take_the_pooled_rule_then_the_mean() {
        let (images, rows) = synthetic(400, [1.0, 0.5], 7);
        let mut fit_rows = fit_rows(&images, &rows);
        // A label with 30 reads: too few of its own, it takes the pooled rule.
        for r in fit_rows.iter_mut().take(30) {
            r.label = "Hernia";
        }
        let (pooled, labels) = fit(&fit_rows);
        assert_eq!(pooled.source, RuleSource::Pooled);
        assert_eq!(labels["Mass"].source, RuleSource::Label);
        assert_eq!((labels["Hernia"].source, labels["Hernia"].weights, labels["Hernia"].n), (RuleSource::Pooled, pooled.weights, 30));
        assert_eq!((labels["Edema"].source, labels["Edema"].n), (RuleSource::Pooled, 0));
        // Too few reads anywhere: the mean, exactly.
        let (pooled, labels) = fit(&fit_rows[..25]);
        assert_eq!((pooled.source, labels["Mass"].source), (RuleSource::Mean, RuleSource::Mean));
        assert_eq!(labels["Mass"].apply(0.2, 0.7), (0.2 + 0.7) / 2.0, "the same arithmetic as the unfitted joint row");
    }

    #[test]
    fn fits_are_deterministic_and_finite_on_separable_reads() {
        let images: Vec<String> = (0..100).map(|i| format!("{i}")).collect();
        let fit_rows: Vec<FitRow<'_>> = images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                let gold = i % 2 == 0;
                let c = if gold { 0.9 } else { 0.1 };
                FitRow { image, label: "Mass", primary: c, second: c, gold }
            })
            .collect();
        let (a, _) = fit(&fit_rows);
        let (b, _) = fit(&fit_rows);
        assert_eq!(a, b);
        let w = a.weights.unwrap();
        assert!(w.primary.is_finite() && w.second.is_finite() && w.bias.is_finite(), "{w:?}");
        // Identical families (collinear logits): the penalty splits the weight evenly.
        assert!((w.primary - w.second).abs() < 1e-9, "{w:?}");
    }

    #[test]
    fn folds_split_images_evenly_enough() {
        let mut counts = [0usize; FOLDS];
        for i in 0..5_000 {
            counts[fold_of(&format!("{i:08}_000.png"))] += 1;
        }
        assert!(counts.iter().all(|&c| (900..1_100).contains(&c)), "{counts:?}");
    }
}
