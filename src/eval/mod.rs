//! `bpals-release eval`: the signal against expert labels, measured the way the field measures
//! it: per-label AUROC and AUPRC with bootstrap intervals, mislabel-detection AP, precision@K
//! and Lift@K, calibration (ECE, Brier), and the same split by strata (support devices present
//! or not, AP vs PA). [`metrics`] holds the metric definitions, checked against scikit-learn.

mod error;
pub mod gold;
mod joint;
pub mod location;
pub mod metrics;
mod release_rows;
mod report;
mod review_lift;
mod views;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use error::EvalError;
pub use gold::{GoldError, GoldFormat, GoldLabels, GoldSet, LabelMapping, Unmapped};
pub use joint::{fit_joint_rule, Disagreement, JointRuleEval, JointRuleInput};
pub use release_rows::{read as read_release_rows, read_split as read_release_split, ReleaseRow};
pub use release_rows::{ConfidentCells, Family as FamilyView, FamilyViews};
pub use report::to_markdown;
pub use review_lift::{review_lift, ArmYield, PlannedReview, ReviewArm, ReviewLift};
pub use views::{LabelViews, ViewComparison};

use crate::signal::{calibration, ClassThresholds};
use crate::vocab::TrustClass;
use metrics::*;

/// How intervals and calibration are computed; recorded in the report.
#[derive(Debug, Clone, Serialize)]
pub struct EvalOptions {
    pub bootstrap_resamples: usize,
    pub seed: u64,
    pub ece_bins: usize,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions { bootstrap_resamples: 1000, seed: 20260526, ece_bins: 10 }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LabelMetrics {
    pub n: usize,
    pub prevalence: f64,
    pub auroc: Option<f64>,
    pub auprc: Option<f64>,
    pub auroc_ci95: Option<(f64, f64)>,
    pub auprc_ci95: Option<(f64, f64)>,
    pub brier: Option<f64>,
    pub ece: Option<f64>,
}

/// Finding the NIH labels that the gold contradicts, ranked by 1 - agreement.
#[derive(Debug, Clone, Serialize)]
pub struct MislabelMetrics {
    pub n: usize,
    pub mislabeled: usize,
    pub ap: Option<f64>,
    pub ap_ci95: Option<(f64, f64)>,
    /// (K, precision@K, Lift@K) for K = the number of mislabeled rows and 10% of rows.
    pub at_k: Vec<(usize, Option<f64>, Option<f64>)>,
    /// The flagging trust classes taken as a verdict "mislabeled": how many of the rows they
    /// hold are, and how many of the mislabeled rows they catch.
    pub by_class: Vec<ClassDetection>,
}

/// One trust class (or the union of the flagging ones) against the mislabeled rows.
#[derive(Debug, Clone, Serialize)]
pub struct ClassDetection {
    /// `likely_mislabeled`, `suspect`, or `likely_mislabeled+suspect`.
    pub classes: String,
    pub flagged: usize,
    /// Mislabeled rows among the flagged; None when nothing is flagged.
    pub precision: Option<f64>,
    /// Flagged rows among the mislabeled; None when nothing is mislabeled.
    pub recall: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StratumMetrics {
    pub n: usize,
    /// Confidence against gold, pooled over labels.
    pub auroc: Option<f64>,
    pub mislabel: MislabelMetrics,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub release_id: String,
    /// What the gold is ("expert labels", or what the spec's `evaluation.against` says).
    pub against: String,
    pub split: String,
    pub gold_file: String,
    /// The gold's format and variant, how its labels map onto NIH's, and what was left out.
    pub gold: GoldSet,
    pub gold_judgements: usize,
    /// Gold judgements with a matching release row.
    pub matched: usize,
    pub coverage: Coverage,
    pub options: EvalOptions,
    pub per_label: BTreeMap<String, LabelMetrics>,
    pub mislabel_detection: MislabelMetrics,
    /// Confidence against gold, pooled over labels.
    pub calibration: Calibration,
    pub strata: BTreeMap<String, StratumMetrics>,
    /// What an expert review planned by `review plan` found, per arm (`eval --review-plan`, or
    /// the spec's `evaluation.review_plan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewLift>,
    /// A two-family release: the headline figures of each family alone and of the joint signal
    /// (left out of a one-model release's report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub families: Option<FamilyComparison>,
    /// A release with confident learning: each view alone and both together, on the judged rows
    /// of probed findings (left out of a release without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub views: Option<ViewComparison>,
    /// A release built with a fitted joint rule: which judged rows were cross-fitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joint_rule: Option<JointRuleEval>,
}

/// How a two-family release is evaluated.
#[derive(Debug, Clone, Copy, Default)]
pub struct FamilyOptions<'a> {
    /// The joint rule the release was built with: the rows it was fitted on are judged by their
    /// out-of-fold confidences.
    pub joint_rule: Option<&'a JointRuleInput>,
    /// Each family's AUROC per label and the label errors where the families disagree. The build
    /// adds them only with a joint rule, so that a release built without one keeps its bytes;
    /// `eval` always does.
    pub details: bool,
    /// The release's class thresholds: with confident learning, they class the answers alone.
    pub thresholds: Option<ClassThresholds>,
}

/// Each family alone and both together, on the same gold judgements.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyComparison {
    pub primary: FamilyMetrics,
    pub second: FamilyMetrics,
    pub joint: FamilyMetrics,
    /// Per label: AUROC of the primary family, the second, and the release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_label_auroc: Option<BTreeMap<String, [Option<f64>; 3]>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disagreement: Option<Disagreement>,
}

/// Confidence against gold (pooled AUROC) and mislabel detection, for one view of the rows.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyMetrics {
    pub auroc: Option<f64>,
    pub mislabel: MislabelMetrics,
}

/// How much of the release the gold judges, in images.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    /// Images the gold file judges.
    pub gold_images: usize,
    /// Images of the evaluated split.
    pub release_images: usize,
    /// Images of the split the gold judges.
    pub gold_images_in_release: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub ece: Option<f64>,
    pub brier: Option<f64>,
    /// The same after applying a calibration file (`eval --calibration`).
    pub after_calibration: Option<AfterCalibration>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AfterCalibration {
    pub method: calibration::Method,
    pub fitted_on: String,
    pub ece: f64,
    pub brier: f64,
}

/// Fits a per-label calibration of the release's `confidence` on the gold labels.
/// Only NIH labels get a calibration: a composite gold label has no shipped confidence to apply
/// it to.
pub fn fit_calibration(
    dir: &Path,
    gold_path: &Path,
    gold: &GoldSet,
    method: calibration::Method,
) -> Result<calibration::Calibration, EvalError> {
    let manifest = crate::manifest::Manifest::read(dir)?;
    let (_, rows) = read_release_rows(dir)?;
    let judged = join(&rows, &gold.labels);
    let mut labels = BTreeMap::new();
    for label in crate::vocab::LABELS {
        let subset: Vec<&Judged<'_>> = judged.iter().filter(|j| j.row.label == label).collect();
        if !subset.is_empty() {
            let (conf, truth) = columns(&subset, |j| j.row.confidence);
            labels.insert(label.to_string(), calibration::fit(method, &conf, &truth));
        }
    }
    if labels.is_empty() {
        return Err(EvalError::NoMatch { gold: gold_path.display().to_string(), release: dir.display().to_string() });
    }
    let gold_name = gold_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(calibration::Calibration {
        format: calibration::CALIBRATION_FORMAT.into(),
        method,
        fitted_on: format!("release {} against {gold_name}", manifest.release_id),
        labels,
    })
}

fn coverage(rows: &[ReleaseRow], gold: &GoldSet) -> Coverage {
    use std::collections::BTreeSet;
    let release: BTreeSet<&str> = rows.iter().map(|r| r.image_index.as_str()).collect();
    let judged: BTreeSet<&str> = gold.labels.keys().map(|(image, _)| image.as_str()).collect();
    Coverage { gold_images: judged.len(), release_images: release.len(), gold_images_in_release: judged.intersection(&release).count() }
}

/// One release row joined with its gold value.
struct Judged<'a> {
    row: &'a ReleaseRow,
    gold: bool,
}

/// `calibration`, when given, is applied to the shipped confidence for the "after calibration"
/// figures (in-sample when it was fitted on the same gold: say so when reporting it). `review`,
/// when given, adds what the review it planned found (see [`add_review`]).
pub fn evaluate(
    dir: &Path,
    gold_path: &Path,
    gold: &GoldSet,
    options: &EvalOptions,
    calibration: Option<&calibration::Calibration>,
    review: Option<&ReviewInput>,
) -> Result<EvalReport, EvalError> {
    let manifest = crate::manifest::Manifest::read(dir)?;
    let (split, rows) = read_release_rows(dir)?;
    let gold_file = gold_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let joint_rule = JointRuleInput::of_release(dir)?;
    let thresholds = release_thresholds(dir)?;
    let families = FamilyOptions { joint_rule: joint_rule.as_ref(), details: true, thresholds: Some(thresholds) };
    let mut report =
        evaluate_rows(&manifest.release_id, &split, &rows, &gold_file, gold, options, calibration, families).map_err(|e| match e {
            EvalError::NoMatch { .. } => EvalError::NoMatch {
                gold: gold_path.display().to_string(),
                release: format!("{} in {}", manifest.release_id, dir.display()),
            },
            other => other,
        })?;
    if let Some(review) = review {
        add_review(&mut report, &rows, gold, review)?;
    }
    Ok(report)
}

/// The evaluation of rows already in hand: `evaluate` reads them from a release directory; the
/// A stratum of the evaluation: its name, and which rows are in it.
type Stratum = (&'static str, fn(&ReleaseRow) -> bool);

/// build passes its own, so the card can carry the evaluation of the release it describes.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_rows(
    release_id: &str,
    split: &str,
    rows: &[ReleaseRow],
    gold_file: &str,
    gold: &GoldSet,
    options: &EvalOptions,
    calibration: Option<&calibration::Calibration>,
    families: FamilyOptions<'_>,
) -> Result<EvalReport, EvalError> {
    let (cross_fitted, joint_rule) = match families.joint_rule {
        Some(joint) => {
            let (rows, summary) = joint::cross_fit(rows, &gold.labels, joint);
            (Some(rows), Some(summary))
        }
        None => (None, None),
    };
    let rows = cross_fitted.as_deref().unwrap_or(rows);
    let composite_rows = composites(rows, gold);
    let mut judged = join(rows, &gold.labels);
    judged.extend(join(&composite_rows, &gold.labels));
    if judged.is_empty() {
        return Err(EvalError::NoMatch { gold: gold_file.to_string(), release: release_id.to_string() });
    }

    let mut per_label = BTreeMap::new();
    for mapping in &gold.mapping {
        let label = mapping.eval_label();
        let subset: Vec<&Judged<'_>> = judged.iter().filter(|j| j.row.label == label).collect();
        if !subset.is_empty() {
            per_label.insert(label.to_string(), label_metrics(&subset, options));
        }
    }
    let all: Vec<&Judged<'_>> = judged.iter().collect();
    let (conf, truth) = columns(&all, |j| j.row.confidence);
    let mut strata = BTreeMap::new();
    let groups: [Stratum; 4] = [
        ("support_devices_present", |r| r.devices_present),
        ("support_devices_absent", |r| !r.devices_present),
        ("view_AP", |r| r.view_position == "AP"),
        ("view_PA", |r| r.view_position == "PA"),
    ];
    for (name, keep) in groups {
        let subset: Vec<&Judged<'_>> = judged.iter().filter(|j| keep(j.row)).collect();
        if !subset.is_empty() {
            let (c, t) = columns(&subset, |j| j.row.confidence);
            strata.insert(
                name.to_string(),
                StratumMetrics { n: subset.len(), auroc: auroc(&c, &t), mislabel: mislabel_metrics(&subset, options) },
            );
        }
    }
    Ok(EvalReport {
        release_id: release_id.to_string(),
        against: crate::release_spec::EXPERT_LABELS.to_string(),
        split: split.to_string(),
        gold_file: gold_file.to_string(),
        gold: gold.clone(),
        gold_judgements: gold.labels.len(),
        matched: judged.len(),
        coverage: coverage(rows, gold),
        options: options.clone(),
        per_label,
        mislabel_detection: mislabel_metrics(&all, options),
        calibration: Calibration {
            ece: ece(&conf, &truth, options.ece_bins),
            brier: brier(&conf, &truth),
            after_calibration: calibration.and_then(|c| {
                let calibrated: Vec<f64> = judged.iter().map(|j| c.apply(&j.row.label, j.row.confidence)).collect();
                Some(AfterCalibration {
                    method: c.method,
                    fitted_on: c.fitted_on.clone(),
                    ece: ece(&calibrated, &truth, options.ece_bins)?,
                    brier: brier(&calibrated, &truth)?,
                })
            }),
        },
        strata,
        review: None,
        families: family_comparison(rows, gold, options, families.details),
        views: views::compare(rows, &gold.labels, families.thresholds.as_ref(), options),
        joint_rule,
    })
}

/// The class thresholds build.lock records for the release in `dir`.
fn release_thresholds(dir: &Path) -> Result<ClassThresholds, EvalError> {
    let lock = crate::manifest::BuildLock::read(dir)?;
    serde_json::from_value(lock.spec["signal"].clone())
        .map_err(|e| EvalError::Lock { dir: dir.into(), message: format!("spec.signal: {e}") })
}

/// The figures of each family alone, and the joint ones, where every row carries both views.
fn family_comparison(rows: &[ReleaseRow], gold: &GoldSet, options: &EvalOptions, details: bool) -> Option<FamilyComparison> {
    if rows.is_empty() {
        return None;
    }
    let view = |family| rows.iter().map(|r| r.family_view(family)).collect::<Option<Vec<ReleaseRow>>>();
    let (primary, second) = (view(release_rows::Family::Primary)?, view(release_rows::Family::Second)?);
    let metrics = |rows: &[ReleaseRow]| -> FamilyMetrics {
        let composite_rows = composites(rows, gold);
        let mut judged = join(rows, &gold.labels);
        judged.extend(join(&composite_rows, &gold.labels));
        let all: Vec<&Judged<'_>> = judged.iter().collect();
        let (conf, truth) = columns(&all, |j| j.row.confidence);
        FamilyMetrics { auroc: auroc(&conf, &truth), mislabel: mislabel_metrics(&all, options) }
    };
    Some(FamilyComparison {
        primary: metrics(&primary),
        second: metrics(&second),
        joint: metrics(rows),
        per_label_auroc: details.then(|| joint::per_label_aurocs(rows, &gold.labels)),
        disagreement: details.then(|| joint::disagreement(rows, &gold.labels)),
    })
}

/// A review plan's rows, as [`add_review`] needs them.
pub struct ReviewInput {
    /// The plan's file name, for the report.
    pub plan_file: String,
    /// The release and split the plan was made from.
    pub release_id: String,
    pub split: String,
    pub rows: Vec<PlannedReview>,
}

/// Adds to `report` the yield of the review `plan` describes, judged by `gold`. `rows` are the
/// evaluated split's rows; every planned row must be one of them.
pub fn add_review(report: &mut EvalReport, rows: &[ReleaseRow], gold: &GoldSet, plan: &ReviewInput) -> Result<(), EvalError> {
    if plan.release_id != report.release_id {
        return Err(EvalError::ReviewPlan {
            plan: plan.plan_file.to_string(),
            message: format!("it was made for release {}, not {}", plan.release_id, report.release_id),
        });
    }
    if plan.split != report.split {
        return Err(EvalError::ReviewPlan {
            plan: plan.plan_file.to_string(),
            message: format!("it was made from the `{}` split, the evaluation reads the `{}` split", plan.split, report.split),
        });
    }
    let known: std::collections::BTreeSet<(&str, &str)> = rows.iter().map(|r| (r.image_index.as_str(), r.label.as_str())).collect();
    if let Some(missing) = plan.rows.iter().find(|p| !known.contains(&(p.image_index.as_str(), p.label.as_str()))) {
        return Err(EvalError::ReviewPlan {
            plan: plan.plan_file.to_string(),
            message: format!(
                "row ({}, {}) is not in the `{}` split of release {}: the plan was made for another release",
                missing.image_index, missing.label, report.split, report.release_id
            ),
        });
    }
    report.review = Some(review_lift(rows, &gold.labels, &plan.rows, &plan.plan_file, &report.options));
    Ok(())
}

/// One derived row per image and composite gold label, when the release holds a row for every
/// member label of that image: NIH asserts the composite when it asserts any member, and the
/// confidence is the highest member confidence (a lower bound on P(any member present)).
fn composites(rows: &[ReleaseRow], gold: &GoldSet) -> Vec<ReleaseRow> {
    let mut by_image: BTreeMap<&str, Vec<&ReleaseRow>> = BTreeMap::new();
    for row in rows {
        by_image.entry(&row.image_index).or_default().push(row);
    }
    let mut derived = Vec::new();
    for mapping in gold.composites() {
        for (image, image_rows) in &by_image {
            let members: Vec<&ReleaseRow> = mapping.nih.iter().filter_map(|l| image_rows.iter().find(|r| &r.label == l).copied()).collect();
            if members.len() != mapping.nih.len() {
                continue;
            }
            let nih_label = members.iter().any(|r| r.nih_label);
            let confidence = members.iter().map(|r| r.confidence).fold(f64::MIN, f64::max);
            derived.push(ReleaseRow {
                image_index: image.to_string(),
                label: mapping.gold.clone(),
                nih_label,
                confidence,
                agreement: crate::signal::agreement(confidence, nih_label),
                view_position: members[0].view_position.clone(),
                devices_present: members[0].devices_present,
                // A composite has no class or questions of its own.
                trust_class: String::new(),
                flags: Vec::new(),
                logit_yes: Vec::new(),
                logit_no: Vec::new(),
                families: None,
                confident: None,
            });
        }
    }
    derived
}

/// The release rows that have a gold judgement, with it.
fn join<'a>(rows: &'a [ReleaseRow], gold: &GoldLabels) -> Vec<Judged<'a>> {
    rows.iter().filter_map(|row| gold.get(&(row.image_index.clone(), row.label.clone())).map(|&g| Judged { row, gold: g })).collect()
}

fn columns(judged: &[&Judged<'_>], score: impl Fn(&Judged<'_>) -> f64) -> (Vec<f64>, Vec<bool>) {
    (judged.iter().map(|j| score(j)).collect(), judged.iter().map(|j| j.gold).collect())
}

fn label_metrics(judged: &[&Judged<'_>], o: &EvalOptions) -> LabelMetrics {
    let (conf, truth) = columns(judged, |j| j.row.confidence);
    let positives = truth.iter().filter(|t| **t).count();
    LabelMetrics {
        n: judged.len(),
        prevalence: positives as f64 / judged.len() as f64,
        auroc: auroc(&conf, &truth),
        auprc: average_precision(&conf, &truth),
        auroc_ci95: bootstrap_ci95(&conf, &truth, o.bootstrap_resamples, o.seed, auroc),
        auprc_ci95: bootstrap_ci95(&conf, &truth, o.bootstrap_resamples, o.seed, average_precision),
        brier: brier(&conf, &truth),
        ece: ece(&conf, &truth, o.ece_bins),
    }
}

fn mislabel_metrics(judged: &[&Judged<'_>], o: &EvalOptions) -> MislabelMetrics {
    let doubt: Vec<f64> = judged.iter().map(|j| 1.0 - j.row.agreement).collect();
    let wrong: Vec<bool> = judged.iter().map(|j| j.row.nih_label != j.gold).collect();
    let mislabeled = wrong.iter().filter(|w| **w).count();
    let mut ks = vec![mislabeled, judged.len().div_ceil(10)];
    ks.retain(|&k| k > 0);
    ks.dedup();
    MislabelMetrics {
        n: judged.len(),
        mislabeled,
        ap: average_precision(&doubt, &wrong),
        ap_ci95: bootstrap_ci95(&doubt, &wrong, o.bootstrap_resamples, o.seed, average_precision),
        at_k: ks.into_iter().map(|k| (k, precision_at_k(&doubt, &wrong, k), lift_at_k(&doubt, &wrong, k))).collect(),
        by_class: [&[TrustClass::LikelyMislabeled][..], &[TrustClass::Suspect], &[TrustClass::LikelyMislabeled, TrustClass::Suspect]]
            .into_iter()
            .map(|classes| class_detection(judged, classes, mislabeled))
            .collect(),
    }
}

fn class_detection(judged: &[&Judged<'_>], classes: &[TrustClass], mislabeled: usize) -> ClassDetection {
    let name = classes.iter().map(|c| c.name()).collect::<Vec<_>>().join("+");
    verdict_detection(judged, name, mislabeled, |j| TrustClass::parse(&j.row.trust_class).is_some_and(|c| classes.contains(&c)))
}

/// A verdict "mislabeled" (`flags` says which rows it names) against the mislabeled rows.
fn verdict_detection(judged: &[&Judged<'_>], name: String, mislabeled: usize, flags: impl Fn(&Judged<'_>) -> bool) -> ClassDetection {
    let flagged: Vec<&&Judged<'_>> = judged.iter().filter(|j| flags(j)).collect();
    let caught = flagged.iter().filter(|j| j.row.nih_label != j.gold).count();
    let ratio = |n: usize, d: usize| (d > 0).then(|| n as f64 / d as f64);
    ClassDetection { classes: name, flagged: flagged.len(), precision: ratio(caught, flagged.len()), recall: ratio(caught, mislabeled) }
}
