//! `review import`: reviewers' answers from a Label Studio JSON export, reduced to one gold value
//! per (image, label) in the generic gold format, with a report of what was answered, by whom,
//! and how far reviewers agreed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::agreement::{cohen_kappa, fleiss_kappa};
use super::label_studio::{read_export, ExportedAnnotation, ExportedTask, ABSENT, PRESENT, UNCERTAIN};
use super::plan::ReviewPlan;
use super::{short_digest, ReviewError};

/// How answers become gold, as the report states it. In the spirit of the adjudication of
/// Google's NIH relabels: a majority of definite answers decides, and a tie is no verdict.
pub struct GoldRule;

impl GoldRule {
    pub const TEXT: &'static str = "each reviewer counts once per row, with their latest submitted answer (cancelled, \
that is skipped, annotations are ignored); `uncertain` is an abstention; the majority of present and absent answers \
is the gold value; a tie, or a row with only uncertain answers, gets no gold value and is counted as left out";
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Present,
    Absent,
    Uncertain,
}

impl Answer {
    fn parse(text: &str) -> Option<Answer> {
        match text {
            PRESENT => Some(Answer::Present),
            ABSENT => Some(Answer::Absent),
            UNCERTAIN => Some(Answer::Uncertain),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct AnnotatorCounts {
    pub tasks: usize,
    pub present: usize,
    pub absent: usize,
    pub uncertain: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PairAgreement {
    pub reviewers: (String, String),
    /// Rows both answered.
    pub rows: usize,
    pub cohen_kappa: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    /// Rows answered by two or more reviewers.
    pub rows: usize,
    pub fleiss_kappa: Option<f64>,
    pub pairs: Vec<PairAgreement>,
}

/// What an import read and what it made of it.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    pub export_file: String,
    pub release_id: String,
    pub split: String,
    pub plan_sha256: String,
    pub tasks: usize,
    /// Tasks with at least one submitted annotation.
    pub answered_tasks: usize,
    /// Tasks whose every annotation was cancelled (skipped).
    pub skipped_tasks: usize,
    /// Tasks nobody annotated.
    pub unanswered_tasks: usize,
    pub annotations: usize,
    pub cancelled_annotations: usize,
    /// Earlier annotations of a task by a reviewer who annotated it again (the latest counts).
    pub superseded_annotations: usize,
    pub reviewers: BTreeMap<String, AnnotatorCounts>,
    /// Rows the tasks asked about.
    pub rows: usize,
    pub gold_rows: usize,
    pub gold_present: usize,
    pub tied_rows: usize,
    pub uncertain_rows: usize,
    pub unanswered_rows: usize,
    pub agreement: Agreement,
    pub rule: &'static str,
}

/// The gold CSV (`image_index,label,value`) and the report of a Label Studio JSON export.
/// With `plan`, every task must come from that plan and ask only about its rows.
pub fn import(path: &Path, plan: Option<(&Path, &ReviewPlan, &str)>) -> Result<(Vec<u8>, ImportReport), ReviewError> {
    let tasks = read_export(path)?;
    let bad = |message: String| ReviewError::Export { path: path.into(), message };
    if tasks.is_empty() {
        return Err(bad("the export holds no task".into()));
    }
    let origin = task_origin(path, &tasks[0])?;
    // (image, label) -> reviewer -> answer.
    let mut answers: BTreeMap<(String, String), BTreeMap<String, Answer>> = BTreeMap::new();
    let mut report = ImportReport {
        export_file: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        release_id: origin.release_id.clone(),
        split: origin.split.clone(),
        plan_sha256: origin.plan_sha256.clone(),
        tasks: tasks.len(),
        answered_tasks: 0,
        skipped_tasks: 0,
        unanswered_tasks: 0,
        annotations: 0,
        cancelled_annotations: 0,
        superseded_annotations: 0,
        reviewers: BTreeMap::new(),
        rows: 0,
        gold_rows: 0,
        gold_present: 0,
        tied_rows: 0,
        uncertain_rows: 0,
        unanswered_rows: 0,
        agreement: Agreement { rows: 0, fleiss_kappa: None, pairs: Vec::new() },
        rule: GoldRule::TEXT,
    };
    let planned: Option<BTreeSet<(&str, &str)>> =
        plan.map(|(_, p, _)| p.rows.iter().map(|r| (r.image_index.as_str(), r.label.as_str())).collect());
    if let Some((plan_path, _, digest)) = plan {
        if origin.plan_sha256 != digest {
            return Err(bad(format!(
                "its tasks were exported from another plan (plan digest {}), not {} ({})",
                short_digest(&origin.plan_sha256),
                plan_path.display(),
                short_digest(digest)
            )));
        }
    }
    if let Some((plan_path, p, _)) = plan {
        if origin.release_manifest_sha256 != p.release_manifest_sha256 {
            return Err(bad(format!(
                "its tasks name release manifest {}, but {} was planned on release {} (manifest {})",
                short_digest(&origin.release_manifest_sha256),
                plan_path.display(),
                p.release_id,
                short_digest(&p.release_manifest_sha256)
            )));
        }
    }
    // Task ids and rows already seen: a task exported twice would vote twice.
    let mut task_ids: BTreeMap<String, usize> = BTreeMap::new();
    let mut asked_by: BTreeMap<(String, String), String> = BTreeMap::new();
    for (at, task) in tasks.iter().enumerate() {
        let this = task_origin(path, task)?;
        let id = task.id.to_string();
        if let Some(first) = task_ids.insert(id.clone(), at) {
            return Err(bad(format!(
                "task {id} appears twice (entries {} and {} of the export): one answer per task and reviewer",
                first + 1,
                at + 1
            )));
        }
        if this.release_manifest_sha256 != origin.release_manifest_sha256 {
            return Err(bad(format!(
                "task {} names release manifest {}, the first task {}: import one release's tasks at a time",
                task.id,
                short_digest(&this.release_manifest_sha256),
                short_digest(&origin.release_manifest_sha256)
            )));
        }
        if this.plan_sha256 != origin.plan_sha256 {
            return Err(bad(format!(
                "task {} comes from another review plan (digest {}) than the first task ({}): import one project's export at a time",
                task.id,
                short_digest(&this.plan_sha256),
                short_digest(&origin.plan_sha256)
            )));
        }
        for label in &this.labels {
            let key = (this.image_index.clone(), label.clone());
            if let Some(other) = asked_by.insert(key.clone(), id.clone()) {
                let also = if other == id { "twice".to_string() } else { format!("as task {other} does") };
                return Err(bad(format!("task {id} asks about ({}, {label}) {also}: one answer per row and reviewer", key.0)));
            }
            if let Some(planned) = &planned {
                if !planned.contains(&(key.0.as_str(), key.1.as_str())) {
                    return Err(bad(format!("task {} asks about ({}, {label}), which the plan does not hold", task.id, key.0)));
                }
            }
            answers.entry(key).or_default();
            report.rows += 1;
        }
        let submitted: Vec<&ExportedAnnotation> = task.annotations.iter().filter(|a| !a.was_cancelled).collect();
        report.annotations += task.annotations.len();
        report.cancelled_annotations += task.annotations.len() - submitted.len();
        match (task.annotations.is_empty(), submitted.is_empty()) {
            (true, _) => report.unanswered_tasks += 1,
            (false, true) => report.skipped_tasks += 1,
            (false, false) => report.answered_tasks += 1,
        }
        // Each reviewer's latest submitted annotation of this task.
        let mut latest: BTreeMap<String, &ExportedAnnotation> = BTreeMap::new();
        for a in submitted {
            match latest.get(&a.annotator()) {
                Some(prev) if prev.changed_at() > a.changed_at() => report.superseded_annotations += 1,
                Some(_) => {
                    report.superseded_annotations += 1;
                    latest.insert(a.annotator(), a);
                }
                None => {
                    latest.insert(a.annotator(), a);
                }
            }
        }
        for (reviewer, annotation) in latest {
            let counts = report.reviewers.entry(reviewer.clone()).or_default();
            counts.tasks += 1;
            for (label, answer) in task_answers(path, task, &this.labels, annotation)? {
                match answer {
                    Answer::Present => counts.present += 1,
                    Answer::Absent => counts.absent += 1,
                    Answer::Uncertain => counts.uncertain += 1,
                }
                answers.get_mut(&(this.image_index.clone(), label)).expect("every asked row has an entry").insert(reviewer.clone(), answer);
            }
        }
    }

    // Image names and labels were checked against NIH's rules; the cells go through the
    // spreadsheet guard all the same, as every CSV the tool writes does.
    let safe = crate::files::spreadsheet::safe_cell;
    let mut gold = csv::Writer::from_writer(Vec::new());
    gold.write_record(["image_index", "label", "value"]).map_err(ReviewError::Csv)?;
    for ((image, label), votes) in &answers {
        if votes.is_empty() {
            report.unanswered_rows += 1;
            continue;
        }
        let present = votes.values().filter(|a| **a == Answer::Present).count();
        let absent = votes.values().filter(|a| **a == Answer::Absent).count();
        let value = match present.cmp(&absent) {
            _ if present + absent == 0 => {
                report.uncertain_rows += 1;
                continue;
            }
            std::cmp::Ordering::Equal => {
                report.tied_rows += 1;
                continue;
            }
            std::cmp::Ordering::Greater => "1",
            std::cmp::Ordering::Less => "0",
        };
        report.gold_rows += 1;
        report.gold_present += usize::from(value == "1");
        gold.write_record([safe(image), safe(label), safe(value)].iter().map(|c| c.as_bytes())).map_err(ReviewError::Csv)?;
    }
    report.agreement = agreement(&answers);
    let gold = gold.into_inner().map_err(|e| ReviewError::Csv(e.into_error().into()))?;
    Ok((gold, report))
}

/// What a task says about where it came from (written by `review export`).
struct TaskOrigin {
    release_id: String,
    release_manifest_sha256: String,
    split: String,
    plan_sha256: String,
    image_index: String,
    labels: Vec<String>,
}

fn task_origin(path: &Path, task: &ExportedTask) -> Result<TaskOrigin, ReviewError> {
    let bad = |message: String| ReviewError::Export { path: path.into(), message };
    let Some(bpals) = task.data.get("bpals") else {
        return Err(bad(format!(
            "task {} was not written by `bpals-release review export` (its data has no `bpals` section): is this an export of another project?",
            task.id
        )));
    };
    let text = |v: Option<&Value>, key: &str| -> Result<String, ReviewError> {
        v.and_then(Value::as_str).map(str::to_string).ok_or_else(|| bad(format!("task {}: `{key}` is missing or not text", task.id)))
    };
    let labels = bpals
        .get("labels")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).map(str::to_string).collect::<Vec<_>>())
        .filter(|l| !l.is_empty())
        .ok_or_else(|| bad(format!("task {}: `bpals.labels` is missing or empty", task.id)))?;
    let image_index = text(task.data.get("image_index"), "image_index")?;
    if !crate::vocab::is_nih_image_name(&image_index) {
        return Err(bad(format!("task {}: image_index {image_index:?} is not an NIH image name (like 00000013_005.png)", task.id)));
    }
    if let Some(label) = labels.iter().find(|l| crate::vocab::label_index(l).is_none()) {
        return Err(bad(format!("task {}: label {label:?} is not one of NIH ChestX-ray14's 15 labels", task.id)));
    }
    let digest = |key: &str| -> Result<String, ReviewError> {
        let value = text(bpals.get(key), &format!("bpals.{key}"))?;
        if !is_sha256(&value) {
            return Err(bad(format!("task {}: `bpals.{key}` is {value:?}, not a sha256 (64 lowercase hex digits, not all zero)", task.id)));
        }
        Ok(value)
    };
    Ok(TaskOrigin {
        release_id: text(bpals.get("release_id"), "bpals.release_id")?,
        release_manifest_sha256: digest("release_manifest_sha256")?,
        split: text(bpals.get("split"), "bpals.split")?,
        plan_sha256: digest("plan_sha256")?,
        image_index,
        labels,
    })
}

/// 64 lowercase hex digits, and not the all-zero placeholder no file hashes to.
fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) && text.bytes().any(|b| b != b'0')
}

/// One annotation's answers, as (label, answer): `answer_N` answers the task's N-th label.
fn task_answers(
    path: &Path,
    task: &ExportedTask,
    labels: &[String],
    annotation: &ExportedAnnotation,
) -> Result<Vec<(String, Answer)>, ReviewError> {
    let bad = |message: String| ReviewError::Export { path: path.into(), message };
    let mut out: Vec<(String, Answer)> = Vec::new();
    for result in annotation.result.iter().filter(|r| r.kind == "choices") {
        let Some(index) = result.from_name.strip_prefix("answer_").and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        let label = labels.get(index).ok_or_else(|| {
            bad(format!(
                "task {}, annotation {}: `{}` answers question {index}, but the task has {}",
                task.id,
                annotation.id,
                result.from_name,
                labels.len()
            ))
        })?;
        if out.iter().any(|(l, _)| l == label) {
            return Err(bad(format!(
                "task {}, annotation {}: `{}` is answered twice: one answer per question and reviewer",
                task.id, annotation.id, result.from_name
            )));
        }
        let choice = result.value.get("choices").and_then(Value::as_array).and_then(|c| c.first()).and_then(Value::as_str).unwrap_or("");
        let answer = Answer::parse(choice).ok_or_else(|| {
            bad(format!(
                "task {}, annotation {}: answer {choice:?} to {label}, expected present, absent or uncertain",
                task.id, annotation.id
            ))
        })?;
        out.push((label.clone(), answer));
    }
    Ok(out)
}

fn agreement(answers: &BTreeMap<(String, String), BTreeMap<String, Answer>>) -> Agreement {
    let multi: Vec<Vec<Answer>> = answers.values().filter(|v| v.len() >= 2).map(|v| v.values().copied().collect()).collect();
    let reviewers: BTreeSet<&String> = answers.values().flat_map(|v| v.keys()).collect();
    let reviewers: Vec<&String> = reviewers.into_iter().collect();
    let mut pairs = Vec::new();
    for (i, a) in reviewers.iter().enumerate() {
        for b in &reviewers[i + 1..] {
            let both: Vec<(Answer, Answer)> = answers.values().filter_map(|v| Some((*v.get(*a)?, *v.get(*b)?))).collect();
            if !both.is_empty() {
                pairs.push(PairAgreement { reviewers: ((*a).clone(), (*b).clone()), rows: both.len(), cohen_kappa: cohen_kappa(&both) });
            }
        }
    }
    Agreement { rows: multi.len(), fleiss_kappa: fleiss_kappa(&multi), pairs }
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kappa = |k: Option<f64>| k.map_or("n/a".to_string(), |k| format!("{k:.3}"));
        writeln!(f, "{}: release {}, `{}` split, plan {}", self.export_file, self.release_id, self.split, short_digest(&self.plan_sha256))?;
        writeln!(
            f,
            "tasks: {} ({} answered, {} skipped, {} not annotated); annotations: {} ({} cancelled, {} superseded by a later answer)",
            self.tasks,
            self.answered_tasks,
            self.skipped_tasks,
            self.unanswered_tasks,
            self.annotations,
            self.cancelled_annotations,
            self.superseded_annotations
        )?;
        for (name, c) in &self.reviewers {
            writeln!(f, "  {name}: {} tasks; {} present, {} absent, {} uncertain", c.tasks, c.present, c.absent, c.uncertain)?;
        }
        writeln!(
            f,
            "rows: {} asked, {} with a gold value ({} present), {} tied, {} only uncertain, {} unanswered",
            self.rows, self.gold_rows, self.gold_present, self.tied_rows, self.uncertain_rows, self.unanswered_rows
        )?;
        writeln!(
            f,
            "agreement: {} rows answered by two or more reviewers; Fleiss' kappa {}",
            self.agreement.rows,
            kappa(self.agreement.fleiss_kappa)
        )?;
        for p in &self.agreement.pairs {
            writeln!(f, "  {} and {}: {} rows, Cohen's kappa {}", p.reviewers.0, p.reviewers.1, p.rows, kappa(p.cohen_kappa))?;
        }
        writeln!(f, "rule: {}", self.rule)
    }
}
