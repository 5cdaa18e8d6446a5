//! The joint rule of a two-family release against expert labels: fitting it (`calibrate
//! --joint`), evaluating it without the leak of judging rows by a rule fitted on their own reads
//! (cross-fitting), and what the families' disagreement says about label errors.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::{auroc, join, release_rows::Family, ConfidentCells, EvalError, GoldLabels, GoldSet, Judged, ReleaseRow};
use crate::signal::joint::FLAG_FAMILIES_DISAGREE;
use crate::signal::joint_rule::{self, FitRow, JointRule, SecondView, JOINT_RULE_FORMAT};
use crate::signal::ClassThresholds;

/// A release's joint rule as an evaluation needs it: the rule, and the thresholds its classes
/// follow.
#[derive(Debug, Clone)]
pub struct JointRuleInput {
    pub rule: JointRule,
    pub classes: ClassThresholds,
}

impl JointRuleInput {
    /// The joint rule build.lock records for the release in `dir`, if it was built with one.
    pub fn of_release(dir: &Path) -> Result<Option<JointRuleInput>, EvalError> {
        let lock = crate::manifest::BuildLock::read(dir)?;
        let signal = &lock.spec["signal"];
        let Some(rule) = signal.get("joint_rule").filter(|r| !r.is_null()) else { return Ok(None) };
        let invalid = |what: &str, e: serde_json::Error| EvalError::Lock { dir: dir.into(), message: format!("{what}: {e}") };
        let rule: JointRule = serde_json::from_value(rule["rule"].clone()).map_err(|e| invalid("spec.signal.joint_rule.rule", e))?;
        let classes: ClassThresholds = serde_json::from_value(signal.clone()).map_err(|e| invalid("spec.signal", e))?;
        Ok(Some(JointRuleInput { rule, classes }))
    }
}

/// How a release's joint rule entered its evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct JointRuleEval {
    pub fitted_on: String,
    /// Judged rows of images the rule was fitted on: their joint confidence is out-of-fold.
    pub cross_fitted_rows: usize,
    /// Judged rows of other images: the shipped joint confidence, never seen by the fit.
    pub held_out_rows: usize,
    pub folds: usize,
}

/// Fits a release's joint rule on the gold labels (NIH labels only; composite gold labels have
/// no shipped family confidences). `second_view` says what the rule combines with the release's
/// `confidence`: the second family, or confident learning; by default the second family where
/// the release has two, else confident learning where it has it.
pub fn fit_joint_rule(dir: &Path, gold_path: &Path, gold: &GoldSet, second_view: Option<SecondView>) -> Result<JointRule, EvalError> {
    let manifest = crate::manifest::Manifest::read(dir)?;
    let (_, rows) = super::read_release_rows(dir)?;
    let families = rows.first().is_some_and(|r| r.families.is_some());
    let confident = rows.iter().any(|r| r.confident.is_some());
    let view = match (second_view, families, confident) {
        (Some(SecondView::Family), false, _) => {
            return Err(EvalError::NoSecondView { dir: dir.into(), release: manifest.release_id, view: "second family", flag: "family" })
        }
        (Some(SecondView::ConfidentLearning), _, false) => {
            return Err(EvalError::NoSecondView {
                dir: dir.into(),
                release: manifest.release_id,
                view: "confident learning",
                flag: "confident-learning",
            })
        }
        (Some(view), _, _) => view,
        (None, true, _) => SecondView::Family,
        (None, false, true) => SecondView::ConfidentLearning,
        (None, false, false) => return Err(EvalError::OneFamily { dir: dir.into(), release: manifest.release_id }),
    };
    let reads = fit_rows(&join(&rows, &gold.labels), |_| true, view);
    if reads.is_empty() {
        return Err(EvalError::NoMatch { gold: gold_path.display().to_string(), release: dir.display().to_string() });
    }
    let (pooled, labels) = joint_rule::fit(&reads);
    let mut images: Vec<String> = reads.iter().map(|r| r.image.to_string()).collect();
    images.sort();
    images.dedup();
    let bytes = std::fs::read(gold_path).map_err(|source| EvalError::Io { path: gold_path.into(), source })?;
    // The scores it is fitted on: a build under other scorers refuses it.
    let lock = crate::manifest::BuildLock::read(dir)?;
    let scorers = match view {
        SecondView::Family => lock.second_scorer_sha256.map(|second| joint_rule::FittedScorers {
            primary_sha256: lock.scorer_sha256,
            second_sha256: second,
            confident_learning_sha256: None,
        }),
        SecondView::ConfidentLearning => Some(joint_rule::FittedScorers {
            primary_sha256: lock.scorer_sha256.clone(),
            second_sha256: lock.scorer_sha256,
            confident_learning_sha256: Some(crate::hashing::sha256_json(&lock.spec["signal"]["confident_learning"])),
        }),
    };
    let gold_name = gold_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(JointRule {
        format: JOINT_RULE_FORMAT.into(),
        second_view: view,
        fitted_on: format!("release {} against {gold_name}", manifest.release_id),
        gold_sha256: crate::hashing::sha256_hex(&bytes),
        pooled,
        labels,
        images,
        scorers,
    })
}

/// The judged rows whose image `keep` accepts, as fitting input: the two families'
/// confidences, or the release's `confidence` and the probe's probability (rows with a probe).
fn fit_rows<'a>(judged: &[Judged<'a>], keep: impl Fn(&str) -> bool, view: SecondView) -> Vec<FitRow<'a>> {
    judged
        .iter()
        .filter(|j| keep(&j.row.image_index))
        .filter_map(|&Judged { row, gold }| {
            let (primary, second) = match view {
                SecondView::Family => row.families.as_ref().map(|f| (f.primary_confidence, f.second_confidence))?,
                SecondView::ConfidentLearning => (row.confidence, row.confident?.present(row.nih_label)),
            };
            Some(FitRow { image: &row.image_index, label: &row.label, primary, second, gold })
        })
        .collect()
}

/// `rows` with the joint confidence, agreement and class of every judged row of a fitted image
/// replaced by its out-of-fold value: the rule refitted on the other folds' reads predicts it.
///
/// That stands in for the shipped confidence only where the shipped rule is exactly what the fit
/// gives on these reads (refitted here and compared). A rule fitted on other reads (another
/// release, other gold) or edited by hand is not judged by a refit: the confidences the release
/// ships are evaluated as they are, every judged row held out.
pub fn cross_fit(rows: &[ReleaseRow], gold: &GoldLabels, joint: &JointRuleInput) -> (Vec<ReleaseRow>, JointRuleEval) {
    let fitted = |image: &str| joint.rule.images.binary_search_by(|i| i.as_str().cmp(image)).is_ok();
    let judged = join(rows, gold);
    let view = joint.rule.second_view;
    let reads = fit_rows(&judged, fitted, view);
    let reads = if is_the_fit_of(&joint.rule, &reads) { reads } else { Vec::new() };
    let predicted: BTreeMap<(&str, &str), f64> =
        reads.iter().zip(joint_rule::cross_fitted(&reads)).map(|(r, p)| ((r.image, r.label), p)).collect();
    let out = rows
        .iter()
        .map(|r| {
            let out_of_fold = predicted.get(&(r.image_index.as_str(), r.label.as_str())).copied();
            match (view, out_of_fold) {
                (SecondView::Family, None) => r.clone(),
                (SecondView::Family, Some(confidence)) => {
                    let agreement = crate::signal::agreement(confidence, r.nih_label);
                    let trust_class = joint.classes.class(agreement).name().to_string();
                    ReleaseRow { confidence, agreement, trust_class, ..r.clone() }
                }
                // Over confident learning the rule sets only the class: `confidence` stays the
                // answers' own. The rule's confidence rides with the probe's cells.
                (SecondView::ConfidentLearning, _) => {
                    let Some(cells) = r.confident else { return r.clone() };
                    let joint_confidence =
                        out_of_fold.unwrap_or_else(|| joint.rule.apply(&r.label, r.confidence, cells.present(r.nih_label)));
                    let agreement = crate::signal::agreement(joint_confidence, r.nih_label);
                    ReleaseRow {
                        trust_class: joint.classes.class(agreement).name().to_string(),
                        confident: Some(ConfidentCells { joint: Some(joint_confidence), ..cells }),
                        ..r.clone()
                    }
                }
            }
        })
        .collect();
    let summary = JointRuleEval {
        fitted_on: joint.rule.fitted_on.clone(),
        cross_fitted_rows: predicted.len(),
        held_out_rows: judged.len() - predicted.len(),
        folds: joint_rule::FOLDS,
    };
    (out, summary)
}

/// Whether `rule` is what fitting `reads` gives: the same images and, label by label, the same
/// source, counts and weights (within what a trip through JSON may move a weight).
fn is_the_fit_of(rule: &JointRule, reads: &[FitRow<'_>]) -> bool {
    if reads.is_empty() {
        return false;
    }
    let mut images: Vec<&str> = reads.iter().map(|r| r.image).collect();
    images.sort_unstable();
    images.dedup();
    if !images.iter().copied().eq(rule.images.iter().map(String::as_str)) {
        return false;
    }
    let (pooled, labels) = joint_rule::fit(reads);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    let same = |a: &joint_rule::LabelRule, b: &joint_rule::LabelRule| {
        a.source == b.source
            && (a.n, a.positives) == (b.n, b.positives)
            && match (a.weights, b.weights) {
                (None, None) => true,
                (Some(x), Some(y)) => close(x.primary, y.primary) && close(x.second, y.second) && close(x.bias, y.bias),
                _ => false,
            }
    };
    same(&pooled, &rule.pooled)
        && labels.len() == rule.labels.len()
        && labels.iter().all(|(l, r)| rule.labels.get(l).is_some_and(|s| same(r, s)))
}

/// Label errors where the families disagree and where they agree (judged NIH-label rows).
#[derive(Debug, Clone, Serialize)]
pub struct Disagreement {
    pub disagree_rows: usize,
    pub disagree_mislabeled: usize,
    pub agree_rows: usize,
    pub agree_mislabeled: usize,
    /// The error rate where they disagree over the rate where they agree.
    pub rate_ratio: Option<f64>,
}

pub(super) fn disagreement(rows: &[ReleaseRow], gold: &GoldLabels) -> Disagreement {
    let mut d = Disagreement { disagree_rows: 0, disagree_mislabeled: 0, agree_rows: 0, agree_mislabeled: 0, rate_ratio: None };
    for Judged { row, gold } in join(rows, gold) {
        let wrong = usize::from(row.nih_label != gold);
        if row.flags.iter().any(|f| f == FLAG_FAMILIES_DISAGREE) {
            (d.disagree_rows, d.disagree_mislabeled) = (d.disagree_rows + 1, d.disagree_mislabeled + wrong);
        } else {
            (d.agree_rows, d.agree_mislabeled) = (d.agree_rows + 1, d.agree_mislabeled + wrong);
        }
    }
    let rate = |wrong: usize, n: usize| (n > 0).then(|| wrong as f64 / n as f64);
    d.rate_ratio = match (rate(d.disagree_mislabeled, d.disagree_rows), rate(d.agree_mislabeled, d.agree_rows)) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    d
}

/// Per NIH label the gold judges: AUROC of the primary family, the second, and the release's
/// joint confidence.
pub(super) fn per_label_aurocs(rows: &[ReleaseRow], gold: &GoldLabels) -> BTreeMap<String, [Option<f64>; 3]> {
    let all = join(rows, gold);
    let mut out = BTreeMap::new();
    for label in crate::vocab::LABELS {
        let judged: Vec<&Judged<'_>> = all.iter().filter(|j| j.row.label == label).collect();
        if judged.is_empty() {
            continue;
        }
        let truth: Vec<bool> = judged.iter().map(|j| j.gold).collect();
        let score = |view: Option<Family>| -> Option<f64> {
            let conf: Option<Vec<f64>> = judged
                .iter()
                .map(|j| match view {
                    None => Some(j.row.confidence),
                    Some(family) => j.row.family_confidence(family),
                })
                .collect();
            auroc(&conf?, &truth)
        };
        out.insert(label.to_string(), [score(Some(Family::Primary)), score(Some(Family::Second)), score(None)]);
    }
    out
}
