//! Expert gold labels. The generic format is a CSV with a header `image_index,label,value`
//! (value 0 or 1), one row per judged (image, label); labels use the NIH vocabulary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::labels::{LABELS, NO_FINDING};

#[derive(Debug, thiserror::Error)]
pub enum GoldError {
    #[error("cannot read gold file {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}: {message}", path.display())]
    Row { path: PathBuf, line: u64, message: String },
}

/// Gold value per (image index, label).
pub type GoldLabels = BTreeMap<(String, String), bool>;

pub fn read_generic(path: &Path) -> Result<GoldLabels, GoldError> {
    let file = std::fs::File::open(path).map_err(|source| GoldError::Io { path: path.into(), source })?;
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(file);
    let mut gold = GoldLabels::new();
    let mut first = true;
    for record in reader.records() {
        let bad = |line: u64, message: String| GoldError::Row { path: path.into(), line, message };
        let record = record.map_err(|e| bad(e.position().map_or(0, |p| p.line()), format!("unreadable CSV: {e}")))?;
        let line = record.position().map_or(0, |p| p.line());
        let fields: Vec<&str> = record.iter().map(str::trim).collect();
        if first {
            first = false;
            if fields != ["image_index", "label", "value"] {
                return Err(bad(line, format!("header is {fields:?}, expected image_index,label,value")));
            }
            continue;
        }
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        if fields.len() != 3 {
            return Err(bad(line, format!("expected 3 fields (image_index, label, value), found {}", fields.len())));
        }
        let label = fields[1];
        if !LABELS.contains(&label) || label == NO_FINDING {
            return Err(bad(line, format!("label {label:?} is not one of the 14 NIH findings")));
        }
        let value = match fields[2] {
            "1" => true,
            "0" => false,
            other => return Err(bad(line, format!("value {other:?}: expected 0 or 1"))),
        };
        if gold.insert((fields[0].to_string(), label.to_string()), value).is_some() {
            return Err(bad(line, format!("({}, {label}) is judged twice", fields[0])));
        }
    }
    if first {
        return Err(GoldError::Row { path: path.into(), line: 0, message: "the file is empty".into() });
    }
    Ok(gold)
}
