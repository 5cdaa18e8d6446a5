//! The generic gold CSV: header `image_index,label,value`, one row per judged (image, label),
//! value 0 or 1, labels in the NIH vocabulary (the 14 findings and "No Finding").

use std::path::Path;

use super::{csv_reader, GoldError, GoldFormat, GoldLabels, GoldSet, LabelMapping};
use crate::vocab::{LABELS, NO_FINDING};

pub fn read(path: &Path) -> Result<GoldSet, GoldError> {
    let mut reader = csv_reader(path)?;
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
                let hint = if fields.iter().any(|f| f.eq_ignore_ascii_case("Image Index") || f.eq_ignore_ascii_case("Image ID")) {
                    " (this looks like a Google NIH expert-label file: pass --format google-nih)"
                } else {
                    ""
                };
                return Err(bad(line, format!("header is {fields:?}, expected image_index,label,value{hint}")));
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
        if !LABELS.contains(&label) {
            return Err(bad(line, format!("label {label:?} is not an NIH label (one of the 14 findings, or {NO_FINDING:?})")));
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
    let mut labels: Vec<&str> = gold.keys().map(|(_, l)| l.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    let mapping =
        labels.into_iter().map(|l| LabelMapping { gold: l.to_string(), nih: vec![l.to_string()], note: None, negated: false }).collect();
    Ok(GoldSet {
        format: GoldFormat::Generic,
        variant: "image_index,label,value".into(),
        labels: gold,
        mapping,
        unmapped: Vec::new(),
        uncertain: 0,
        repeated: None,
    })
}
