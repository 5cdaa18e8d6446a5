//! A release with confident learning against expert labels: the model's answers alone,
//! confident learning alone, the two together as the release classes them, and the two stacked
//! by a rule fitted on the gold itself (cross-fitted, so no row is judged by a fit that saw its
//! own read). Only the rows of findings with a probe are compared: the others have one view.

use std::collections::BTreeMap;

use serde::Serialize;

use super::metrics::{auroc, average_precision};
use super::{join, mislabel_metrics, verdict_detection, ClassDetection, EvalOptions, FamilyMetrics, GoldLabels, Judged, ReleaseRow};
use crate::signal::joint_rule::{self, FitRow};
use crate::signal::{agreement, ClassThresholds};

/// The verdict confident learning gives, as the evaluation names it.
pub const LABEL_ISSUE: &str = "cl_label_issue";

/// Each view of the judged rows of probed findings.
#[derive(Debug, Clone, Serialize)]
pub struct ViewComparison {
    /// The model's answers: `confidence`, ranked by 1 - `agreement`, classed by the thresholds
    /// alone (as a release without confident learning would class them).
    pub answers: FamilyMetrics,
    /// Confident learning: the probe's probability, ranked by 1 - `cl_confidence`, its verdict
    /// `cl_label_issue`.
    pub confident_learning: FamilyMetrics,
    /// Both as the release ships them: classed by the release's `trust_class`, ranked by the
    /// joint rule's confidence where the release names one over confident learning (out-of-fold
    /// on the rows of images it was fitted on, as their classes are), else by the mean of the two
    /// probabilities.
    pub both: FamilyMetrics,
    /// Both stacked by a logistic rule fitted on these judgements ([`joint_rule`]'s fit, the
    /// answers as the first view), each row's confidence from the rule fitted without its fold.
    pub stacked: FamilyMetrics,
    pub folds: usize,
    /// Per finding: judged rows, mislabeled rows, and the mislabel AP of the answers, confident
    /// learning, their mean and the stacked rule.
    pub per_label: BTreeMap<String, LabelViews>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LabelViews {
    pub n: usize,
    pub mislabeled: usize,
    pub ap: [Option<f64>; 4],
}

/// The comparison, where judged rows carry confident learning's view (None otherwise).
/// `thresholds` class the answers alone; without them the answers' classes are not reported.
pub(super) fn compare(
    rows: &[ReleaseRow],
    gold: &GoldLabels,
    thresholds: Option<&ClassThresholds>,
    options: &EvalOptions,
) -> Option<ViewComparison> {
    let judged: Vec<Judged<'_>> = join(rows, gold).into_iter().filter(|j| j.row.confident.is_some()).collect();
    if judged.is_empty() {
        return None;
    }
    let cl = |r: &ReleaseRow| r.confident.expect("filtered on it");
    let probe_p = |r: &ReleaseRow| cl(r).present(r.nih_label);
    let reads: Vec<FitRow<'_>> = judged
        .iter()
        .map(|j| FitRow { image: &j.row.image_index, label: &j.row.label, primary: j.row.confidence, second: probe_p(j.row), gold: j.gold })
        .collect();
    let stacked_confidence = joint_rule::cross_fitted(&reads);

    let view = |confidence: f64, row: &ReleaseRow, class: String| ReleaseRow {
        confidence,
        agreement: agreement(confidence, row.nih_label),
        trust_class: class,
        ..row.clone()
    };
    let class_of = |confidence: f64, row: &ReleaseRow| {
        thresholds.map_or(String::new(), |t| t.class(agreement(confidence, row.nih_label)).name().to_string())
    };
    let answers: Vec<ReleaseRow> = judged.iter().map(|j| view(j.row.confidence, j.row, class_of(j.row.confidence, j.row))).collect();
    let probes: Vec<ReleaseRow> = judged.iter().map(|j| view(probe_p(j.row), j.row, String::new())).collect();
    let both_confidence = |r: &ReleaseRow| cl(r).joint.unwrap_or((r.confidence + probe_p(r)) / 2.0);
    let both: Vec<ReleaseRow> = judged.iter().map(|j| view(both_confidence(j.row), j.row, j.row.trust_class.clone())).collect();
    let stacked: Vec<ReleaseRow> = judged.iter().zip(&stacked_confidence).map(|(j, &c)| view(c, j.row, class_of(c, j.row))).collect();
    let truth: Vec<bool> = judged.iter().map(|j| j.gold).collect();
    let metrics = |rows: &[ReleaseRow]| {
        let again: Vec<Judged<'_>> = rows.iter().zip(&truth).map(|(row, &gold)| Judged { row, gold }).collect();
        let refs: Vec<&Judged<'_>> = again.iter().collect();
        let confidence: Vec<f64> = rows.iter().map(|r| r.confidence).collect();
        FamilyMetrics { auroc: auroc(&confidence, &truth), mislabel: mislabel_metrics(&refs, options) }
    };
    let mut confident_learning = metrics(&probes);
    confident_learning.mislabel.by_class = vec![issue_detection(&judged)];
    let (mut answers_metrics, mut stacked_metrics) = (metrics(&answers), metrics(&stacked));
    if thresholds.is_none() {
        // Without the release's thresholds these views have no classes to report.
        answers_metrics.mislabel.by_class.clear();
        stacked_metrics.mislabel.by_class.clear();
    }

    let mut per_label = BTreeMap::new();
    for label in crate::vocab::LABELS {
        let at: Vec<usize> = (0..judged.len()).filter(|&i| judged[i].row.label == label).collect();
        if at.is_empty() {
            continue;
        }
        let wrong: Vec<bool> = at.iter().map(|&i| judged[i].row.nih_label != truth[i]).collect();
        let ap = |rows: &[ReleaseRow]| {
            let doubt: Vec<f64> = at.iter().map(|&i| 1.0 - rows[i].agreement).collect();
            average_precision(&doubt, &wrong)
        };
        let mislabeled = wrong.iter().filter(|w| **w).count();
        per_label
            .insert(label.to_string(), LabelViews { n: at.len(), mislabeled, ap: [ap(&answers), ap(&probes), ap(&both), ap(&stacked)] });
    }
    Some(ViewComparison {
        answers: answers_metrics,
        confident_learning,
        both: metrics(&both),
        stacked: stacked_metrics,
        folds: joint_rule::FOLDS,
        per_label,
    })
}

/// `cl_label_issue` read as a verdict "mislabeled".
fn issue_detection(judged: &[Judged<'_>]) -> ClassDetection {
    let refs: Vec<&Judged<'_>> = judged.iter().collect();
    let mislabeled = judged.iter().filter(|j| j.row.nih_label != j.gold).count();
    verdict_detection(&refs, LABEL_ISSUE.to_string(), mislabeled, |j| j.row.confident.is_some_and(|c| c.label_issue))
}
