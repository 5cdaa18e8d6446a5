//! Google's expert relabels of NIH ChestX-ray14 (Cloud Healthcare API public datasets page):
//!
//! - four findings (Majkowska et al., Radiology 2019): `test_labels.csv` / `validation_labels.csv`
//!   are NIH's metadata plus adjudicated `Fracture`, `Pneumothorax`, `Airspace opacity`,
//!   `Nodule or mass` columns (YES/NO; empty when the image was not adjudicated).
//! - all findings (Nabulsi et al., Sci Rep 2021): one YES/NO column per NIH finding plus a
//!   normal/abnormal column and `Other`; `test_individual_readers.csv` has a `Reader ID` and five
//!   rows per image, which this reader reduces by majority vote (ties count as uncertain).
//!
//! Columns are matched by name, ignoring case, `_` versus space and `/` versus " or ". Columns
//! that carry no expert label (patient, view, NIH's own `Finding Labels`) are ignored.

use std::collections::BTreeMap;
use std::path::Path;

use super::{csv_reader, GoldError, GoldFormat, GoldLabels, GoldSet, LabelMapping, Unmapped};
use crate::vocab::{LABELS, NO_FINDING};

/// NIH findings that present as airspace opacity; atelectasis (volume loss) is left out.
const AIRSPACE_OPACITY: [&str; 4] = ["Consolidation", "Infiltration", "Pneumonia", "Edema"];

/// What one expert column is.
enum Column {
    Mapped(LabelMapping),
    Unmapped(&'static str),
}

fn normalize(header: &str) -> String {
    header.trim().to_lowercase().replace('_', " ").replace('/', " or ")
}

fn classify(header: &str) -> Option<Column> {
    let mapped = |nih: &[&str], note: Option<&str>| {
        Some(Column::Mapped(LabelMapping {
            gold: header.trim().to_string(),
            nih: nih.iter().map(|s| s.to_string()).collect(),
            note: note.map(str::to_string),
        }))
    };
    match normalize(header).as_str() {
        "airspace opacity" => mapped(
            &AIRSPACE_OPACITY,
            Some("approximate: NIH has no airspace-opacity label; scored against the union of Consolidation, Infiltration, Pneumonia and Edema"),
        ),
        "nodule or mass" => mapped(&["Nodule", "Mass"], None),
        "fracture" => Some(Column::Unmapped("NIH ChestX-ray14 has no fracture label")),
        "other" => Some(Column::Unmapped("findings outside the 14 NIH labels")),
        "abnormal" | "normal" | "normal or abnormal" => {
            Some(Column::Unmapped("a normal/abnormal verdict, not a finding; the evaluation scores the 14 findings"))
        }
        name => LABELS
            .iter()
            .filter(|l| **l != NO_FINDING)
            .find(|l| normalize(l) == name)
            .and_then(|l| mapped(&[l], None)),
    }
}

fn find_column(header: &[String], names: &[&str]) -> Option<usize> {
    header.iter().position(|h| names.iter().any(|n| normalize(h) == *n))
}

pub fn read(path: &Path) -> Result<GoldSet, GoldError> {
    let mut reader = csv_reader(path)?;
    let bad = |line: u64, message: String| GoldError::Row { path: path.into(), line, message };
    let mut records = reader.records();
    let header: Vec<String> = match records.next() {
        None => return Err(bad(0, "the file is empty".into())),
        Some(r) => r.map_err(|e| bad(1, format!("unreadable CSV: {e}")))?.iter().map(str::to_string).collect(),
    };
    let image_col = find_column(&header, &["image index", "image id"])
        .ok_or_else(|| bad(1, format!("no `Image Index` or `Image ID` column in the header {header:?}")))?;
    let reader_col = find_column(&header, &["reader id"]);
    let columns: Vec<(usize, Column)> = header.iter().enumerate().filter_map(|(i, h)| classify(h).map(|c| (i, c))).collect();
    if !columns.iter().any(|(_, c)| matches!(c, Column::Mapped(_))) {
        return Err(bad(1, format!("no expert label column (Airspace opacity, Pneumothorax, Atelectasis, ...) in the header {header:?}")));
    }
    let four_findings = columns.iter().any(|(i, _)| normalize(&header[*i]) == "airspace opacity");

    // Votes per (image, eval label): (yes, no). A file without readers gives one vote each.
    let mut votes: BTreeMap<(String, String), (u32, u32)> = BTreeMap::new();
    let mut unmapped_counts = vec![0usize; columns.len()];
    let mut seen_rows: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut uncertain = 0usize;
    for record in records {
        let record = record.map_err(|e| bad(e.position().map_or(0, |p| p.line()), format!("unreadable CSV: {e}")))?;
        let line = record.position().map_or(0, |p| p.line());
        if record.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        if record.len() != header.len() {
            return Err(bad(line, format!("{} fields, the header has {}", record.len(), header.len())));
        }
        let image = record[image_col].trim().to_string();
        if image.is_empty() {
            return Err(bad(line, format!("empty `{}`", header[image_col])));
        }
        let reader = reader_col.map(|c| record[c].trim().to_string()).unwrap_or_default();
        if let Some(first) = seen_rows.insert((image.clone(), reader.clone()), line) {
            let who = if reader.is_empty() { String::new() } else { format!(" by reader {reader}") };
            return Err(bad(line, format!("{image} is judged twice{who} (first on line {first})")));
        }
        for (k, (i, column)) in columns.iter().enumerate() {
            let cell = record[*i].trim();
            let value = match cell.to_ascii_uppercase().as_str() {
                "" => continue,
                "YES" => true,
                "NO" => false,
                "HEDGE" => {
                    uncertain += 1;
                    continue;
                }
                _ => return Err(bad(line, format!("column `{}`: {cell:?}, expected YES, NO, HEDGE or empty", header[*i]))),
            };
            match column {
                Column::Unmapped(_) => unmapped_counts[k] += 1,
                Column::Mapped(m) => {
                    let v = votes.entry((image.clone(), m.eval_label().to_string())).or_default();
                    if value {
                        v.0 += 1;
                    } else {
                        v.1 += 1;
                    }
                }
            }
        }
    }
    let mut labels = GoldLabels::new();
    for (key, (yes, no)) in votes {
        if yes == no {
            uncertain += 1;
        } else {
            labels.insert(key, yes > no);
        }
    }
    if labels.is_empty() {
        return Err(bad(0, "no YES/NO judgement in any expert label column".into()));
    }
    let mut mapping = Vec::new();
    let mut unmapped = Vec::new();
    for ((i, column), judgements) in columns.into_iter().zip(unmapped_counts) {
        match column {
            Column::Mapped(m) => mapping.push(m),
            Column::Unmapped(reason) => unmapped.push(Unmapped { column: header[i].trim().to_string(), judgements, reason: reason.into() }),
        }
    }
    let variant = match (four_findings, reader_col.is_some()) {
        (true, false) => "four-findings adjudicated",
        (true, true) => "four-findings individual readers (majority vote)",
        (false, false) => "all-findings",
        (false, true) => "all-findings individual readers (majority vote)",
    };
    Ok(GoldSet { format: GoldFormat::GoogleNih, variant: variant.into(), labels, mapping, unmapped, uncertain })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_matches_by_normalized_name() {
        assert!(matches!(classify("Pleural Thickening"), Some(Column::Mapped(m)) if m.nih == ["Pleural_Thickening"]));
        assert!(
            matches!(classify("Nodule/mass"), Some(Column::Mapped(m)) if m.nih == ["Nodule", "Mass"] && m.eval_label() == "Nodule/mass")
        );
        assert!(matches!(classify("Fracture"), Some(Column::Unmapped(_))));
        assert!(classify("Patient ID").is_none());
        assert!(classify("Finding Labels").is_none());
        assert!(classify("No Finding").is_none());
    }
}
