//! Reads a release's pair shards back (what an evaluator has: the published files).

use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::EvalError;

/// The columns evaluation needs from one pair row.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseRow {
    pub image_index: String,
    pub label: String,
    pub nih_label: bool,
    pub confidence: f64,
    pub agreement: f64,
    pub view_position: String,
    pub devices_present: bool,
    pub trust_class: String,
    /// The row's flags (`hard_case`, `support_device_confounder`, ...), as shipped.
    pub flags: Vec<String>,
    /// The label questions' raw logits, as shipped.
    pub logit_yes: Vec<f32>,
    pub logit_no: Vec<f32>,
    /// Each family's own view of the row, in a two-family release.
    pub families: Option<FamilyViews>,
    /// Confident learning's view of the row, where the release has one and the finding a probe.
    pub confident: Option<ConfidentCells>,
}

/// A row's `cl_confidence` and `cl_label_issue`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfidentCells {
    /// The probe's out-of-fold probability that NIH's label is right.
    pub confidence: f64,
    pub label_issue: bool,
    /// Where the release names a joint rule over the answers and confident learning: the rule's
    /// confidence that the finding is present (out-of-fold on rows of images it was fitted on).
    /// Not a column: the evaluation fills it in.
    pub joint: Option<f64>,
}

impl ConfidentCells {
    /// The probe's probability that the finding is present, for a row whose NIH label is
    /// `nih_label`.
    pub fn present(&self, nih_label: bool) -> f64 {
        if nih_label {
            self.confidence
        } else {
            1.0 - self.confidence
        }
    }
}

/// One family of a two-family release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Primary,
    Second,
}

impl ReleaseRow {
    /// One family's confidence, in a two-family release.
    pub fn family_confidence(&self, family: Family) -> Option<f64> {
        let f = self.families.as_ref()?;
        Some(match family {
            Family::Primary => f.primary_confidence,
            Family::Second => f.second_confidence,
        })
    }

    /// The row as one family of a two-family release sees it alone: that family's confidence,
    /// agreement and class, as a one-model row (no logits, no family views). None in a
    /// one-model release.
    pub fn family_view(&self, family: Family) -> Option<ReleaseRow> {
        let f = self.families.as_ref()?;
        let (confidence, class) = match family {
            Family::Primary => (f.primary_confidence, &f.primary_trust_class),
            Family::Second => (f.second_confidence, &f.second_trust_class),
        };
        let agreement = crate::signal::agreement(confidence, self.nih_label);
        let (logit_yes, logit_no, families) = (Vec::new(), Vec::new(), None);
        Some(ReleaseRow { confidence, agreement, trust_class: class.clone(), logit_yes, logit_no, families, ..self.clone() })
    }
}

/// A row as each family of a two-family release sees it alone.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyViews {
    pub primary_confidence: f64,
    pub primary_trust_class: String,
    pub second_confidence: f64,
    pub second_trust_class: String,
    /// The second model's raw logits per question, as shipped (an audit compares them too).
    pub second_logit_yes: Vec<f32>,
    pub second_logit_no: Vec<f32>,
}

/// The pair shards of `split`, or by default of the `full` split if the release has one, else
/// of its `trial` split.
pub(super) fn pair_files(dir: &Path, split: Option<&str>) -> Result<(String, Vec<String>), EvalError> {
    let manifest = crate::manifest::Manifest::read(dir)?;
    let pairs = |split: &str| -> Vec<String> {
        manifest
            .files
            .iter()
            .map(|f| f.path.clone())
            .filter(|p| p.starts_with(&format!("data/{split}-")) && p.ends_with(".parquet"))
            .collect()
    };
    if let Some(split) = split {
        let files = pairs(split);
        if files.is_empty() {
            let has = |s: &str| !pairs(s).is_empty();
            let present: Vec<&str> = ["full", "trial"].into_iter().filter(|s| has(s)).collect();
            return Err(EvalError::NoSplit { dir: dir.to_path_buf(), split: split.to_string(), present: present.join(", ") });
        }
        return Ok((split.to_string(), files));
    }
    let (split, files) = match pairs("full") {
        f if !f.is_empty() => ("full", f),
        _ => ("trial", pairs("trial")),
    };
    if files.is_empty() {
        return Err(EvalError::NoPairShards { dir: dir.to_path_buf() });
    }
    Ok((split.to_string(), files))
}

/// Every record batch of the chosen split's pair shards, in file order.
pub(super) fn batches(
    dir: &Path,
    files: &[String],
    mut each: impl FnMut(&Path, &arrow_array::RecordBatch) -> Result<(), EvalError>,
) -> Result<(), EvalError> {
    for rel in files {
        let path = dir.join(rel);
        let file = File::open(&path).map_err(|source| EvalError::Io { path: path.clone(), source })?;
        let parquet = |source| EvalError::Parquet { path: path.clone(), source };
        let reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(parquet)?.build().map_err(parquet)?;
        for batch in reader {
            each(&path, &batch.map_err(|source| EvalError::Arrow { path: path.clone(), source })?)?;
        }
    }
    Ok(())
}

pub(super) fn column(path: &Path, batch: &arrow_array::RecordBatch, name: &str) -> Result<arrow_array::ArrayRef, EvalError> {
    batch.column_by_name(name).cloned().ok_or_else(|| EvalError::MissingColumn { path: path.to_path_buf(), column: name.into() })
}

/// Every row of the pair table's `full` split if the release has one, else its `trial` split.
pub fn read(dir: &Path) -> Result<(String, Vec<ReleaseRow>), EvalError> {
    read_split(dir, None)
}

/// Every row of the pair table's `split` (the default as [`read`] when `None`).
pub fn read_split(dir: &Path, split: Option<&str>) -> Result<(String, Vec<ReleaseRow>), EvalError> {
    let (split, files) = pair_files(dir, split)?;
    let mut rows = Vec::new();
    batches(dir, &files, |path, batch| {
        let column = |name: &str| column(path, batch, name);
        let images = column("image_index")?;
        let labels = column("label")?;
        let nih = column("nih_label")?;
        let confidence = column("confidence")?;
        let agreement = column("agreement")?;
        let views = column("view_position")?;
        let devices = column("support_devices")?;
        let classes = column("trust_class")?;
        let flags = column("flags")?;
        let flags = flags.as_list::<i32>();
        let (yes, no) = (column("question_logit_yes")?, column("question_logit_no")?);
        let (classes, yes, no) = (classes.as_string::<i32>(), yes.as_list::<i32>(), no.as_list::<i32>());
        let (images, labels, views) = (images.as_string::<i32>(), labels.as_string::<i32>(), views.as_string::<i32>());
        let (confidence, agreement) = (confidence.as_primitive::<Float64Type>(), agreement.as_primitive::<Float64Type>());
        let (nih, devices) = (nih.as_boolean(), devices.as_list::<i32>());
        // A two-family release's own views, read where the columns are.
        let families = match batch.column_by_name("second_confidence") {
            None => None,
            Some(_) => Some((
                (column("primary_confidence")?, column("primary_trust_class")?),
                (column("second_confidence")?, column("second_trust_class")?),
                (column("second_question_logit_yes")?, column("second_question_logit_no")?),
            )),
        };
        // Confident learning's columns, where the release has them (null where a finding has no probe).
        let confident = match batch.column_by_name("cl_confidence") {
            None => None,
            Some(_) => Some((column("cl_confidence")?, column("cl_label_issue")?)),
        };
        let confident = confident.as_ref().map(|(p, issue)| (p.as_primitive::<Float64Type>(), issue.as_boolean()));
        for i in 0..batch.num_rows() {
            rows.push(ReleaseRow {
                image_index: images.value(i).to_string(),
                label: labels.value(i).to_string(),
                nih_label: nih.value(i),
                confidence: confidence.value(i),
                agreement: agreement.value(i),
                view_position: views.value(i).to_string(),
                devices_present: !devices.value(i).is_empty(),
                trust_class: classes.value(i).to_string(),
                flags: flags.value(i).as_string::<i32>().iter().flatten().map(str::to_string).collect(),
                logit_yes: floats(&yes.value(i)),
                logit_no: floats(&no.value(i)),
                families: families.as_ref().map(|((pc, pt), (sc, st), (sy, sn))| FamilyViews {
                    primary_confidence: pc.as_primitive::<Float64Type>().value(i),
                    primary_trust_class: pt.as_string::<i32>().value(i).to_string(),
                    second_confidence: sc.as_primitive::<Float64Type>().value(i),
                    second_trust_class: st.as_string::<i32>().value(i).to_string(),
                    second_logit_yes: floats(&sy.as_list::<i32>().value(i)),
                    second_logit_no: floats(&sn.as_list::<i32>().value(i)),
                }),
                confident: confident.filter(|(p, issue)| p.is_valid(i) && issue.is_valid(i)).map(|(p, issue)| ConfidentCells {
                    confidence: p.value(i),
                    label_issue: issue.value(i),
                    joint: None,
                }),
            });
        }
        Ok(())
    })?;
    Ok((split, rows))
}

fn floats(list: &arrow_array::ArrayRef) -> Vec<f32> {
    list.as_primitive::<arrow_array::types::Float32Type>().values().to_vec()
}
