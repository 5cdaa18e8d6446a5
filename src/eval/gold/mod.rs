//! Expert gold labels, read into one shape whatever file they came from: a value per
//! (image, label), the mapping from the file's vocabulary to NIH's, and what could not be mapped.
//!
//! Formats:
//! - `generic`: a CSV `image_index,label,value` (value 0 or 1) in the NIH vocabulary, "No
//!   Finding" included.
//! - `google-nih`: Google's expert relabels of NIH images: the four-findings files (adjudicated
//!   `test_labels.csv` and `validation_labels.csv`, both in one file with a `Set Id` column as
//!   torchxrayvision ships it, and `individual_readers.csv`) and the all-findings files
//!   (`test_labels.csv` and `test_individual_readers.csv`); per-reader files are reduced by
//!   majority vote.
//!
//! A file whose name ends in `.gz` is read through gzip.

mod generic;
mod google;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use crate::release_spec::GoldFormat;

#[derive(Debug, thiserror::Error)]
pub enum GoldError {
    #[error("cannot read gold file {}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}: {message}", path.display())]
    Row { path: PathBuf, line: u64, message: String },
}

/// Gold value per (image index, label). The label is an NIH label, or the gold's own name for a
/// composite (see [`LabelMapping`]).
pub type GoldLabels = BTreeMap<(String, String), bool>;

/// How one gold column maps onto NIH labels. With one NIH label the gold is scored as that
/// label; with several it becomes a composite named `gold`, scored on a derived row whose NIH
/// label is the union of the members and whose confidence is the highest member confidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelMapping {
    pub gold: String,
    pub nih: Vec<String>,
    /// Why the mapping is only approximate, when it is.
    pub note: Option<String>,
    /// The gold column says the opposite of its NIH label (Google's `Abnormal` is the negation of
    /// NIH's "No Finding"): its values are stored negated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub negated: bool,
}

impl LabelMapping {
    /// The label name evaluation reports this gold column under.
    pub fn eval_label(&self) -> &str {
        if self.nih.len() == 1 {
            &self.nih[0]
        } else {
            &self.gold
        }
    }
    pub fn is_composite(&self) -> bool {
        self.nih.len() > 1
    }
}

/// A gold column left out of the evaluation, with the judgements it held and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unmapped {
    pub column: String,
    pub judgements: usize,
    pub reason: String,
}

/// A gold file, read.
#[derive(Debug, Clone, Serialize)]
pub struct GoldSet {
    pub format: GoldFormat,
    /// Which variant of the format, e.g. "four-findings adjudicated".
    pub variant: String,
    #[serde(skip)]
    pub labels: GoldLabels,
    pub mapping: Vec<LabelMapping>,
    pub unmapped: Vec<Unmapped>,
    /// Cells with no usable verdict: HEDGE, a tied reader vote.
    pub uncertain: usize,
    /// Readers who judged the same image more than once, and what was done about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeated: Option<RepeatedJudgements>,
}

/// A reader's repeated judgements of one image, as some published per-reader files hold them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepeatedJudgements {
    pub policy: String,
    /// (image, reader) pairs that appear on more than one row.
    pub repeated_pairs: usize,
    /// Label cells on which a reader's repeats disagree (that reader's vote on them is left out).
    pub conflicting_cells: usize,
}

/// What the evaluation does with a reader who judged an image twice.
pub const REPEAT_POLICY: &str = "a reader who judged an image more than once counts once: repeats that agree are one vote, \
     and where they disagree on a label that reader's vote on it is left out";

impl GoldSet {
    pub fn composites(&self) -> impl Iterator<Item = &LabelMapping> {
        self.mapping.iter().filter(|m| m.is_composite())
    }
}

pub fn read(path: &Path, format: GoldFormat) -> Result<GoldSet, GoldError> {
    match format {
        GoldFormat::Generic => generic::read(path),
        GoldFormat::GoogleNih => google::read(path),
    }
}

/// Opens a CSV reader that reports line numbers and tolerates ragged rows (checked per row).
/// A `.gz` file is decompressed on the way.
fn csv_reader(path: &Path) -> Result<csv::Reader<Box<dyn std::io::Read>>, GoldError> {
    let input = crate::source::open_text(path).map_err(|source| GoldError::Io { path: path.into(), source })?;
    Ok(csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(input))
}
