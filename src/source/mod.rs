//! NIH ingest: the metadata files of ChestX-ray14, checked against their pinned sha256 and
//! normalised into one typed polars table with a row per image.

mod bbox;
mod csv_rows;
mod data_entry;
pub mod fetch;
mod relabelled;
mod splits;
mod summary;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde::Serialize;

pub use bbox::{image_sizes, read as read_bbox_list, BoundingBox};
pub use csv_rows::open_text;
pub use data_entry::{parse_age, parse_labels, DataEntryRow, LabelsError};
pub use relabelled::read_relabelled_images;
pub use splits::OfficialSplit;
pub use summary::{summarize, SourceSummary};

use crate::hashing::sha256_file;
use crate::release_spec::SourceSpec;
use crate::vocab::LABELS;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read {}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: bad header: {message}", path.display())]
    Header { path: PathBuf, message: String },
    #[error("{}:{line}: {message}", path.display())]
    Row { path: PathBuf, line: u64, message: String },
    #[error("{}: sha256 mismatch: the spec pins {expected}, the file has {actual}", path.display())]
    Checksum { path: PathBuf, expected: String, actual: String },
    #[error("{}: image {image} appears twice (first on line {first})", path.display())]
    Duplicate { path: PathBuf, image: String, first: u64 },
    #[error("image {}: cannot read its size", path.display())]
    ImageSize {
        path: PathBuf,
        #[source]
        source: image::ImageError,
    },
    #[error("building the NIH table")]
    Table(#[from] PolarsError),
}

impl SourceError {
    fn csv(path: &Path, err: &csv::Error) -> Self {
        let line = err.position().map_or(0, |p| p.line());
        SourceError::Row { path: path.into(), line, message: format!("unreadable CSV: {err}") }
    }
}

/// A metadata input as read: its digest and size, recorded in build.lock.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InputFile {
    pub sha256: String,
    pub bytes: u64,
}

/// The NIH metadata as one table: a row per image in file order (see [`NihTable::COLUMNS`]).
#[derive(Debug, Clone)]
pub struct NihTable {
    pub frame: DataFrame,
    pub boxes: Vec<BoundingBox>,
    pub has_splits: bool,
    /// Inputs by file name, as hashed.
    pub inputs: BTreeMap<String, InputFile>,
}

/// The files to read, without the spec's pins: what `bpals-release source` takes.
#[derive(Debug, Clone, Default)]
pub struct SourceFiles {
    pub data_entry: PathBuf,
    pub bbox: Option<PathBuf>,
    pub train_val_list: Option<PathBuf>,
    pub test_list: Option<PathBuf>,
}

impl SourceFiles {
    pub fn from_spec(spec: &SourceSpec) -> Self {
        SourceFiles {
            data_entry: spec.data_entry_path(),
            bbox: spec.bbox.as_ref().map(|b| spec.root.join(b)),
            train_val_list: spec.train_val_list.as_ref().map(|b| spec.root.join(b)),
            test_list: spec.test_list.as_ref().map(|b| spec.root.join(b)),
        }
    }
}

impl NihTable {
    /// Columns besides one boolean column per label (named as in [`LABELS`]).
    pub const COLUMNS: [&'static str; 13] = [
        "image_index",
        "finding_labels",
        "follow_up",
        "patient_id",
        "age_years",
        "sex",
        "view_position",
        "width",
        "height",
        "spacing_x",
        "spacing_y",
        "split",
        "n_boxes",
    ];

    pub fn images(&self) -> usize {
        self.frame.height()
    }

    pub fn str_column(&self, name: &str) -> Result<Vec<&str>, SourceError> {
        Ok(self.frame.column(name)?.str()?.iter().map(|v| v.unwrap_or("")).collect())
    }

    pub fn u32_column(&self, name: &str) -> Result<Vec<u32>, SourceError> {
        Ok(self.frame.column(name)?.u32()?.iter().map(|v| v.unwrap_or(0)).collect())
    }

    /// Per image, the official split ("train_val" or "test") when the split lists were read.
    pub fn split_column(&self) -> Result<Vec<Option<&str>>, SourceError> {
        Ok(self.frame.column("split")?.str()?.iter().collect())
    }

    /// Per image, the bitmask of NIH-asserted labels (bit i = `LABELS[i]`).
    pub fn label_masks(&self) -> Result<Vec<u16>, SourceError> {
        let mut masks = vec![0u16; self.frame.height()];
        for (i, label) in LABELS.iter().enumerate() {
            for (mask, v) in masks.iter_mut().zip(self.frame.column(label)?.bool()?.iter()) {
                if v == Some(true) {
                    *mask |= 1 << i;
                }
            }
        }
        Ok(masks)
    }
}

/// Reads and checks the files named in the spec, verifying every pinned sha256 first.
pub fn load(spec: &SourceSpec) -> Result<NihTable, SourceError> {
    let files = SourceFiles::from_spec(spec);
    let inputs = hash_inputs(&files)?;
    for (name, path) in spec.metadata_files() {
        let actual = &inputs[&file_name(&path)].sha256;
        if let Some(expected) = spec.expected_sha256.get(&name) {
            if expected != actual {
                return Err(SourceError::Checksum { path, expected: expected.clone(), actual: actual.clone() });
            }
        }
    }
    read_files(&files, inputs)
}

/// Reads the files without any pin: for `bpals-release source` on a download the user points at.
pub fn load_files(files: &SourceFiles) -> Result<NihTable, SourceError> {
    let inputs = hash_inputs(files)?;
    read_files(files, inputs)
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn hash_inputs(files: &SourceFiles) -> Result<BTreeMap<String, InputFile>, SourceError> {
    let mut inputs = BTreeMap::new();
    let all = [Some(&files.data_entry), files.bbox.as_ref(), files.train_val_list.as_ref(), files.test_list.as_ref()];
    for path in all.into_iter().flatten() {
        let (sha256, bytes) = sha256_file(path).map_err(|source| SourceError::Io { path: path.clone(), source })?;
        inputs.insert(file_name(path), InputFile { sha256, bytes });
    }
    Ok(inputs)
}

fn read_files(files: &SourceFiles, inputs: BTreeMap<String, InputFile>) -> Result<NihTable, SourceError> {
    let rows = data_entry::read(&files.data_entry)?;
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        if let Some(&first) = index.get(row.image_index.as_str()) {
            return Err(SourceError::Duplicate { path: files.data_entry.clone(), image: row.image_index.clone(), first: rows[first].line });
        }
        index.insert(&row.image_index, i);
    }
    let boxes = match &files.bbox {
        Some(path) => {
            let known: HashSet<&str> = index.keys().copied().collect();
            bbox::read(path, Some(&known))?
        }
        None => Vec::new(),
    };
    let split_of = match (&files.train_val_list, &files.test_list) {
        (Some(tv), Some(test)) => Some(splits::read(tv, test, &index)?),
        _ => None,
    };
    let mut n_boxes = vec![0u32; rows.len()];
    for b in &boxes {
        n_boxes[index[b.image_index.as_str()]] += 1;
    }
    let split: Vec<Option<&str>> = (0..rows.len()).map(|i| split_of.as_ref().and_then(|s| s.get(&i)).map(|s| s.name())).collect();
    let frame = build_frame(&rows, &n_boxes, split)?;
    Ok(NihTable { frame, boxes, has_splits: split_of.is_some(), inputs })
}

fn build_frame(rows: &[DataEntryRow], n_boxes: &[u32], split: Vec<Option<&str>>) -> Result<DataFrame, PolarsError> {
    let col_str = |name: &str, f: &dyn Fn(&DataEntryRow) -> &str| Column::new(name.into(), rows.iter().map(f).collect::<Vec<&str>>());
    let col_u32 = |name: &str, f: &dyn Fn(&DataEntryRow) -> u32| Column::new(name.into(), rows.iter().map(f).collect::<Vec<u32>>());
    let col_f64 = |name: &str, f: &dyn Fn(&DataEntryRow) -> f64| Column::new(name.into(), rows.iter().map(f).collect::<Vec<f64>>());
    let finding_labels: Vec<String> = rows
        .iter()
        .map(|r| LABELS.iter().enumerate().filter(|(i, _)| r.labels & (1 << i) != 0).map(|(_, l)| *l).collect::<Vec<_>>().join("|"))
        .collect();
    let mut columns = vec![
        col_str("image_index", &|r| &r.image_index),
        Column::new("finding_labels".into(), finding_labels),
        col_u32("follow_up", &|r| r.follow_up),
        col_u32("patient_id", &|r| r.patient_id),
        col_u32("age_years", &|r| u32::from(r.age_years)),
        col_str("sex", &|r| &r.sex),
        col_str("view_position", &|r| &r.view_position),
        col_u32("width", &|r| r.width),
        col_u32("height", &|r| r.height),
        col_f64("spacing_x", &|r| r.spacing_x),
        col_f64("spacing_y", &|r| r.spacing_y),
        Column::new("split".into(), split),
        Column::new("n_boxes".into(), n_boxes.to_vec()),
    ];
    for (i, label) in LABELS.iter().enumerate() {
        columns.push(Column::new((*label).into(), rows.iter().map(|r| r.labels & (1 << i) != 0).collect::<Vec<bool>>()));
    }
    DataFrame::new(rows.len(), columns)
}
