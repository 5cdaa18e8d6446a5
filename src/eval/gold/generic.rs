//! The generic gold CSV: header `image_index,label,value`, one row per judged (image, label),
//! value 0 or 1, labels in the NIH vocabulary (the 14 findings and "No Finding").
//! The embedded sample's `truth.csv` (`image_index,label,truth,nih`) reads as one: `truth` is
//! the value, and `nih` (the labels the sample ships) is not gold.

use std::path::Path;

use super::{csv_reader, GoldError, GoldFormat, GoldLabels, GoldSet, LabelMapping};
use crate::vocab::{LABELS, NO_FINDING};

const HEADER: [&str; 3] = ["image_index", "label", "value"];
const SAMPLE_TRUTH_HEADER: [&str; 4] = ["image_index", "label", "truth", "nih"];

pub fn read(path: &Path) -> Result<GoldSet, GoldError> {
    let mut reader = csv_reader(path)?;
    let mut gold = GoldLabels::new();
    let mut first = true;
    let mut columns = HEADER.len();
    for record in reader.records() {
        let bad = |line: u64, message: String| GoldError::Row { path: path.into(), line, message };
        let record = record.map_err(|e| bad(e.position().map_or(0, |p| p.line()), format!("unreadable CSV: {e}")))?;
        let line = record.position().map_or(0, |p| p.line());
        let fields: Vec<&str> = record.iter().map(str::trim).collect();
        if first {
            first = false;
            if fields != HEADER && fields != SAMPLE_TRUTH_HEADER {
                let hint = if fields.iter().any(|f| f.eq_ignore_ascii_case("Image Index") || f.eq_ignore_ascii_case("Image ID")) {
                    " (this looks like a Google NIH expert-label file: pass --format google-nih)"
                } else {
                    ""
                };
                return Err(bad(line, format!("header is {fields:?}, expected image_index,label,value{hint}")));
            }
            columns = fields.len();
            continue;
        }
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        if fields.len() != columns {
            return Err(bad(line, format!("expected {columns} fields (as the header), found {}", fields.len())));
        }
        let label = fields[1];
        if !LABELS.contains(&label) {
            return Err(bad(line, format!("label {label:?} is not an NIH label (one of the 14 findings, or {NO_FINDING:?})")));
        }
        // `value`, or `truth` in the sample's truth file (the third column either way).
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
        variant: if columns == HEADER.len() { HEADER.join(",") } else { SAMPLE_TRUTH_HEADER.join(",") },
        labels: gold,
        mapping,
        unmapped: Vec::new(),
        uncertain: 0,
        repeated: None,
    })
}
