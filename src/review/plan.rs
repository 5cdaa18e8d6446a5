//! `review plan`: which (image, label) rows of a release to send to expert review, and why.
//!
//! The rule, in order:
//! 1. **Control.** `round(budget x control_share)` rows are drawn uniformly at random from the
//!    whole split (a seeded hash order, so the draw does not depend on row order). They estimate
//!    what random review would find, which is what the lift is measured against.
//! 2. **Targeted.** The rest of the budget comes from the remaining rows, by tier:
//!    `likely_mislabeled`, then `suspect`, then `review` rows flagged as a support-device
//!    confounder, then the other `review` rows, then `trusted`. Within a tier the labels take
//!    turns: each label's most doubted row (lowest agreement with the NIH label) comes before any
//!    label's second, so a common finding cannot starve a rare one. Within a turn, more doubt
//!    first.
//!
//! The signal's doubt (1 - agreement) is its estimate of the chance the NIH label is wrong, so
//! taking rows in this order maximises the errors a review can expect to find, up to the turns
//! taken for coverage.
//!
//! A release with confident learning has two views of each row, and a plan can rank by either
//! ([`RankBy`]): by default both (the release's classes, which need both views at the extremes,
//! and within a tier the mean of the two views' doubt), or the model's answers alone (the classes
//! their agreement gives by the release's thresholds), or confident learning alone (its label
//! issues, then the other rows its probes cover, then the rest, by its doubt: 1 - `cl_confidence`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{short_digest, ReviewError};
use crate::eval::{PlannedReview, ReleaseRow, ReviewArm, ReviewInput};
use crate::hashing::{sha256_hex, stable_u64};
use crate::signal::{ClassThresholds, FLAG_DEVICE_CONFOUNDER};
use crate::vocab::TrustClass;

pub const PLAN_FORMAT: &str = "bpals-review-plan/1";

/// The rule as the plan file states it.
pub const RULE: &str = "control: round(budget x control_share) rows drawn at random from the split (seeded); \
targeted: the rest by tier (likely_mislabeled, suspect, review with a support-device confounder, review, trusted), \
labels taking turns within a tier (each label's most doubted row before any label's next), most doubt first within a turn";

/// How many rows to review: a count, or a share of the split's rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    Rows(usize),
    Percent(f64),
}

impl Budget {
    /// `78` or `10%`.
    pub fn parse(text: &str) -> Result<Budget, String> {
        let text = text.trim();
        if let Some(p) = text.strip_suffix('%') {
            match p.trim().parse::<f64>() {
                Ok(p) if p > 0.0 && p <= 100.0 => Ok(Budget::Percent(p)),
                _ => Err(format!("{text:?}: a share must be above 0% and at most 100%")),
            }
        } else {
            match text.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Budget::Rows(n)),
                _ => Err(format!("{text:?}: expected a number of rows (at least 1) or a share such as 10%")),
            }
        }
    }

    pub fn rows(self, split_rows: usize) -> usize {
        match self {
            Budget::Rows(n) => n,
            Budget::Percent(p) => ((split_rows as f64 * p / 100.0).round() as usize).max(1),
        }
    }
}

/// Which view of the rows ranks them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankBy {
    /// The release's trust classes; with confident learning, both views.
    #[default]
    Both,
    /// The model's answers alone.
    Answers,
    /// Confident learning alone.
    ConfidentLearning,
}

impl RankBy {
    fn is_both(&self) -> bool {
        *self == RankBy::Both
    }

    /// The targeted rows' rule, as the plan file states it.
    fn rule(self) -> &'static str {
        match self {
            RankBy::Both => RULE,
            RankBy::Answers => RULE_ANSWERS,
            RankBy::ConfidentLearning => RULE_CONFIDENT_LEARNING,
        }
    }
}

/// The rule of a plan ranked by the model's answers alone.
pub const RULE_ANSWERS: &str = "control: round(budget x control_share) rows drawn at random from the split (seeded); \
targeted: the rest by the class the answers' agreement alone gives by the release's thresholds (likely_mislabeled, suspect, \
review with a support-device confounder, review, trusted), labels taking turns within a tier, most doubt (1 - agreement) first within a turn";

/// The rule of a plan ranked by confident learning alone.
pub const RULE_CONFIDENT_LEARNING: &str = "control: round(budget x control_share) rows drawn at random from the split (seeded); \
targeted: the rest by confident learning (cl_label_issue, then rows its probes cover, then rows without a probe), labels \
taking turns within a tier, most doubt (1 - cl_confidence, else 1 - agreement) first within a turn";

#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub budget: Budget,
    /// The split to plan over [default: `full` if the release has one, else `trial`].
    pub split: Option<String>,
    pub seed: u64,
    /// Share of the budget drawn at random as the control.
    pub control_share: f64,
    pub rank_by: RankBy,
}

pub const DEFAULT_CONTROL_SHARE: f64 = 0.2;

/// A review plan, as `plan.json` holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewPlan {
    pub format: String,
    pub release_id: String,
    pub release_version: String,
    /// SHA-256 of the release's `manifest.json`: the plan belongs to exactly those files.
    pub release_manifest_sha256: String,
    pub split: String,
    pub split_rows: usize,
    pub budget: usize,
    pub control_share: f64,
    pub seed: u64,
    /// Which view ranked the rows (absent: both, as plans before the choice existed).
    #[serde(default, skip_serializing_if = "RankBy::is_both")]
    pub rank_by: RankBy,
    pub rule: String,
    pub summary: PlanSummary,
    /// Ordered by image, then label: a reviewer sees each image once, with all its rows.
    pub rows: Vec<PlanRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSummary {
    pub images: usize,
    pub targeted: usize,
    pub control: usize,
    /// Targeted rows per tier.
    pub by_tier: BTreeMap<String, usize>,
    pub by_label: BTreeMap<String, usize>,
}

/// One row to review.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRow {
    pub image_index: String,
    pub label: String,
    pub nih_label: bool,
    pub arm: ReviewArm,
    /// The targeted rows' order of choice, from 1; none for the control.
    pub priority: Option<usize>,
    pub trust_class: String,
    pub confidence: f64,
    pub agreement: f64,
    pub flags: Vec<String>,
    /// Why the row was chosen, in words.
    pub reason: String,
}

/// The tiers targeted rows are taken from, in order, by the release's classes or the answers'.
const TIERS: [&str; 5] = ["likely_mislabeled", "suspect", "review_device_confounder", "review", "trusted"];
/// The tiers of a plan ranked by confident learning alone.
const CONFIDENT_TIERS: [&str; 3] = ["cl_label_issue", "cl_no_issue", "no_probe"];

fn class_tier(class: Option<TrustClass>, row: &ReleaseRow) -> usize {
    match class {
        Some(TrustClass::LikelyMislabeled) => 0,
        Some(TrustClass::Suspect) => 1,
        Some(TrustClass::Review) if row.flags.iter().any(|f| f == FLAG_DEVICE_CONFOUNDER) => 2,
        Some(TrustClass::Review) => 3,
        _ => 4,
    }
}

/// Each row's tier and doubt under a ranking, and what the plan says of it.
struct Ranking<'a> {
    rank_by: RankBy,
    thresholds: Option<&'a ClassThresholds>,
}

impl Ranking<'_> {
    fn tier_names(&self) -> &'static [&'static str] {
        match self.rank_by {
            RankBy::ConfidentLearning => &CONFIDENT_TIERS,
            _ => &TIERS,
        }
    }

    fn answers_class(&self, row: &ReleaseRow) -> Option<TrustClass> {
        self.thresholds.map(|t| t.class(row.agreement))
    }

    fn tier(&self, row: &ReleaseRow) -> usize {
        match self.rank_by {
            RankBy::Both => class_tier(TrustClass::parse(&row.trust_class), row),
            RankBy::Answers => class_tier(self.answers_class(row), row),
            RankBy::ConfidentLearning => match row.confident {
                Some(c) if c.label_issue => 0,
                Some(_) => 1,
                None => 2,
            },
        }
    }

    /// The row's estimated chance that NIH's label is right, under this ranking: the least
    /// first is the most doubted.
    fn trust(&self, row: &ReleaseRow) -> f64 {
        match (self.rank_by, row.confident) {
            (RankBy::Both, Some(c)) => (row.agreement + c.confidence) / 2.0,
            (RankBy::ConfidentLearning, Some(c)) => c.confidence,
            _ => row.agreement,
        }
    }

    fn reason(&self, row: &ReleaseRow) -> String {
        let mut reason = match (self.rank_by, row.confident) {
            (RankBy::ConfidentLearning, Some(c)) => format!(
                "{} (confident learning's probability that the NIH label is right {:.3})",
                CONFIDENT_TIERS[self.tier(row)],
                c.confidence
            ),
            (RankBy::ConfidentLearning, None) => format!("no probe for the finding (agreement with the NIH label {:.3})", row.agreement),
            (RankBy::Answers, _) => format!(
                "{} by the answers alone (agreement with the NIH label {:.3})",
                self.answers_class(row).map_or("unclassed", |c| c.name()),
                row.agreement
            ),
            (RankBy::Both, Some(c)) => format!(
                "{} (agreement with the NIH label {:.3}; confident learning's {:.3}{})",
                row.trust_class,
                row.agreement,
                c.confidence,
                if c.label_issue { ", a label issue" } else { "" }
            ),
            (RankBy::Both, None) => format!("{} (agreement with the NIH label {:.3})", row.trust_class, row.agreement),
        };
        if self.rank_by != RankBy::ConfidentLearning && row.flags.iter().any(|f| f == FLAG_DEVICE_CONFOUNDER) {
            reason.push_str("; a support device is present on a finding it is easily mistaken for");
        }
        reason
    }
}

/// Plans a review of `rows`, the `split` of the release whose manifest is `manifest_bytes`.
/// `thresholds` are the release's (a plan ranked by the answers alone classes them by these).
pub fn plan(
    manifest: &crate::manifest::Manifest,
    manifest_bytes: &[u8],
    split: &str,
    rows: &[ReleaseRow],
    thresholds: Option<&ClassThresholds>,
    o: &PlanOptions,
) -> Result<ReviewPlan, ReviewError> {
    let ranking = Ranking { rank_by: o.rank_by, thresholds };
    if o.rank_by == RankBy::ConfidentLearning && rows.iter().all(|r| r.confident.is_none()) {
        return Err(ReviewError::NoView { view: "confident learning", column: "cl_confidence" });
    }
    if o.rank_by == RankBy::Answers && thresholds.is_none() {
        return Err(ReviewError::NoView { view: "the answers' classes", column: "build.lock's spec.signal thresholds" });
    }
    let budget = o.budget.rows(rows.len());
    if budget > rows.len() {
        return Err(ReviewError::Budget { budget, split: split.to_string(), rows: rows.len() });
    }
    if !(0.0..=1.0).contains(&o.control_share) {
        return Err(ReviewError::ControlShare(o.control_share));
    }
    // Each row's place in the seeded random order, hashed once (sorting would hash per comparison).
    let seed = o.seed.to_string();
    let key: Vec<u64> = rows.iter().map(|r| stable_u64(&[&seed, &r.image_index, &r.label])).collect();
    let control_n = (budget as f64 * o.control_share).round() as usize;

    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| (key[i], i));
    let control: Vec<usize> = order[..control_n].to_vec();
    let is_control: std::collections::BTreeSet<usize> = control.iter().copied().collect();

    // Targeted: per (tier, label) queues, most doubt first; then labels take turns per tier.
    let mut queues: BTreeMap<(usize, &str), Vec<usize>> = BTreeMap::new();
    for i in (0..rows.len()).filter(|i| !is_control.contains(i)) {
        queues.entry((ranking.tier(&rows[i]), rows[i].label.as_str())).or_default().push(i);
    }
    let trust: Vec<f64> = rows.iter().map(|r| ranking.trust(r)).collect();
    let doubt_order = |a: &usize, b: &usize| trust[*a].total_cmp(&trust[*b]).then(key[*a].cmp(&key[*b]));
    let mut ranked: Vec<(usize, usize, usize)> = Vec::new(); // (tier, turn, row)
    for ((t, _), queue) in queues.iter_mut() {
        queue.sort_by(doubt_order);
        ranked.extend(queue.iter().enumerate().map(|(turn, &i)| (*t, turn, i)));
    }
    ranked.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(doubt_order(&a.2, &b.2)));
    let targeted: Vec<usize> = ranked.iter().take(budget - control_n).map(|&(_, _, i)| i).collect();

    let mut out: Vec<PlanRow> = Vec::with_capacity(budget);
    let mut summary =
        PlanSummary { images: 0, targeted: targeted.len(), control: control.len(), by_tier: BTreeMap::new(), by_label: BTreeMap::new() };
    for (priority, &i) in targeted.iter().enumerate() {
        *summary.by_tier.entry(ranking.tier_names()[ranking.tier(&rows[i])].to_string()).or_default() += 1;
        out.push(plan_row(&rows[i], ReviewArm::Targeted, Some(priority + 1), ranking.reason(&rows[i])));
    }
    for &i in &control {
        out.push(plan_row(&rows[i], ReviewArm::Control, None, format!("control: drawn at random (seed {})", o.seed)));
    }
    out.sort_by(|a, b| (&a.image_index, &a.label).cmp(&(&b.image_index, &b.label)));
    for row in &out {
        *summary.by_label.entry(row.label.clone()).or_default() += 1;
    }
    summary.images = out.iter().map(|r| &r.image_index).collect::<std::collections::BTreeSet<_>>().len();
    Ok(ReviewPlan {
        format: PLAN_FORMAT.to_string(),
        release_id: manifest.release_id.clone(),
        release_version: manifest.version.clone(),
        release_manifest_sha256: sha256_hex(manifest_bytes),
        split: split.to_string(),
        split_rows: rows.len(),
        budget,
        control_share: o.control_share,
        seed: o.seed,
        rank_by: o.rank_by,
        rule: o.rank_by.rule().to_string(),
        summary,
        rows: out,
    })
}

fn plan_row(r: &ReleaseRow, arm: ReviewArm, priority: Option<usize>, reason: String) -> PlanRow {
    PlanRow {
        image_index: r.image_index.clone(),
        label: r.label.clone(),
        nih_label: r.nih_label,
        arm,
        priority,
        trust_class: r.trust_class.clone(),
        confidence: r.confidence,
        agreement: r.agreement,
        flags: r.flags.clone(),
        reason,
    }
}

impl ReviewPlan {
    /// The plan as evaluation needs it; `path` is where it was read from (the report names its file).
    pub fn review_input(&self, path: &Path) -> ReviewInput {
        ReviewInput {
            plan_file: path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
            release_id: self.release_id.clone(),
            split: self.split.clone(),
            rows: self
                .rows
                .iter()
                .map(|r| PlannedReview { image_index: r.image_index.clone(), label: r.label.clone(), arm: r.arm })
                .collect(),
        }
    }

    /// Reads a plan written by `review plan`.
    pub fn read(path: &Path) -> Result<(ReviewPlan, String), ReviewError> {
        let bytes = crate::files::regular::read(path, crate::files::regular::RELEASE_JSON)
            .map_err(|source| ReviewError::Io { path: path.into(), source })?;
        let plan: ReviewPlan = serde_json::from_slice(&bytes).map_err(|e| ReviewError::Json {
            path: path.into(),
            message: format!("line {}, column {}: {e} (expected a plan written by `bpals-release review plan`)", e.line(), e.column()),
        })?;
        if plan.format != PLAN_FORMAT {
            return Err(ReviewError::Json { path: path.into(), message: format!("format {:?}, expected {PLAN_FORMAT:?}", plan.format) });
        }
        Ok((plan, sha256_hex(&bytes)))
    }

    /// Checks the plan was made for the release whose manifest is `manifest_bytes`.
    pub fn check_release(&self, plan_path: &Path, release_dir: &Path, manifest_bytes: &[u8]) -> Result<(), ReviewError> {
        let digest = sha256_hex(manifest_bytes);
        if digest != self.release_manifest_sha256 {
            return Err(ReviewError::OtherRelease {
                plan: plan_path.into(),
                planned_for: format!(
                    "{} {} (manifest {})",
                    self.release_id,
                    self.release_version,
                    short_digest(&self.release_manifest_sha256)
                ),
                release: release_dir.into(),
                digest: short_digest(&digest).to_string(),
            });
        }
        Ok(())
    }

    /// The plan as JSON and as CSV, rows in the same order.
    pub fn to_files(&self) -> Result<(Vec<u8>, Vec<u8>), ReviewError> {
        let mut json = serde_json::to_vec_pretty(self).expect("in-memory JSON serialization cannot fail");
        json.push(b'\n');
        let mut csv = csv::Writer::from_writer(Vec::new());
        let header = ["image_index", "label", "nih_label", "arm", "priority", "trust_class", "confidence", "agreement", "flags", "reason"];
        csv.write_record(header).map_err(ReviewError::Csv)?;
        for r in &self.rows {
            let arm = match r.arm {
                ReviewArm::Targeted => "targeted",
                ReviewArm::Control => "control",
            };
            let priority = r.priority.map_or(String::new(), |p| p.to_string());
            let record = [
                r.image_index.as_str(),
                &r.label,
                if r.nih_label { "1" } else { "0" },
                arm,
                &priority,
                &r.trust_class,
                &format!("{:.6}", r.confidence),
                &format!("{:.6}", r.agreement),
                &r.flags.join(";"),
                &r.reason,
            ];
            csv.write_record(record.iter().map(|c| crate::files::spreadsheet::safe_cell(c).into_owned())).map_err(ReviewError::Csv)?;
        }
        let csv = csv.into_inner().map_err(|e| ReviewError::Csv(e.into_error().into()))?;
        Ok((json, csv))
    }
}

/// The CSV written beside a plan's JSON: the same name, `.csv`.
pub fn csv_path(json: &Path) -> PathBuf {
    json.with_extension("csv")
}
