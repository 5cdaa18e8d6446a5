//! Google's expert relabels of NIH ChestX-ray14 (Cloud Healthcare API public datasets page):
//!
//! - four findings (Majkowska et al., Radiology 2019): `test_labels.csv` / `validation_labels.csv`
//!   are NIH's metadata plus adjudicated `Fracture`, `Pneumothorax`, `Airspace opacity`,
//!   `Nodule or mass` columns (YES/NO; empty when the image was not adjudicated).
//!   `individual_readers.csv` has the same findings per reader.
//! - all findings (Nabulsi et al., Sci Rep 2021): one YES/NO column per NIH finding plus an
//!   `Abnormal` column (0/1 in the per-reader file) and `Other`; `test_individual_readers.csv`
//!   has a `Reader ID` and five rows per image.
//!
//! Per-reader files are reduced by majority vote (ties count as uncertain). A reader who judged
//! an image twice counts once (see [`REPEAT_POLICY`]). `Abnormal` is scored as the negation of
//! NIH's "No Finding".
//!
//! Columns are matched by name, ignoring case, `_` versus space and `/` versus " or ". Columns
//! that carry no expert label (patient, view, NIH's own `Finding Labels`, `Set Id`) are ignored.
//! Cells are YES, NO, HEDGE (no verdict), 1, 0 or empty (not judged).

use std::collections::BTreeMap;
use std::path::Path;

use super::{csv_reader, GoldError, GoldFormat, GoldLabels, GoldSet, LabelMapping, RepeatedJudgements, Unmapped, REPEAT_POLICY};
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
    let label = |nih: &[&str], note: Option<&str>, negated: bool| {
        Some(Column::Mapped(LabelMapping {
            gold: header.trim().to_string(),
            nih: nih.iter().map(|s| s.to_string()).collect(),
            note: note.map(str::to_string),
            negated,
        }))
    };
    let mapped = |nih: &[&str], note: Option<&str>| label(nih, note, false);
    match normalize(header).as_str() {
        "airspace opacity" => mapped(
            &AIRSPACE_OPACITY,
            Some("approximate: NIH has no airspace-opacity label; scored against the union of Consolidation, Infiltration, Pneumonia and Edema"),
        ),
        "nodule or mass" => mapped(&["Nodule", "Mass"], None),
        "fracture" => Some(Column::Unmapped("NIH ChestX-ray14 has no fracture label")),
        "other" => Some(Column::Unmapped("findings outside the 14 NIH labels")),
        "abnormal" => label(&[NO_FINDING], Some("negated: an image is abnormal exactly when NIH's No Finding is false"), true),
        "normal" => mapped(&[NO_FINDING], None),
        "normal or abnormal" => Some(Column::Unmapped("a normal/abnormal verdict whose values are not YES/NO")),
        name => LABELS.iter().find(|l| normalize(l) == name).and_then(|l| mapped(&[l], None)),
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

    // Each reader's vote per (image, eval label); None once their repeats disagree. A file
    // without readers has one reader, "".
    let mut votes: BTreeMap<(String, String), BTreeMap<String, Option<bool>>> = BTreeMap::new();
    let mut unmapped_counts = vec![0usize; columns.len()];
    let mut seen_rows: BTreeMap<(String, String), u64> = BTreeMap::new();
    let (mut repeated_pairs, mut conflicting_cells) = (0usize, 0usize);
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
        let repeat = match seen_rows.insert((image.clone(), reader.clone()), line) {
            // One row per image is the adjudicated files' layout: a second one is a broken file.
            Some(first) if reader_col.is_none() => {
                return Err(bad(line, format!("{image} is judged twice (first on line {first})")));
            }
            Some(_) => {
                repeated_pairs += 1;
                true
            }
            None => false,
        };
        for (k, (i, column)) in columns.iter().enumerate() {
            let cell = record[*i].trim();
            let value = match cell.to_ascii_uppercase().as_str() {
                "" => continue,
                "YES" | "1" | "1.0" => true,
                "NO" | "0" | "0.0" => false,
                "HEDGE" => {
                    uncertain += 1;
                    continue;
                }
                _ => return Err(bad(line, format!("column `{}`: {cell:?}, expected YES, NO, HEDGE, 1, 0 or empty", header[*i]))),
            };
            match column {
                Column::Unmapped(_) if !repeat => unmapped_counts[k] += 1,
                Column::Unmapped(_) => {}
                Column::Mapped(m) => {
                    let value = value != m.negated;
                    let by_reader = votes.entry((image.clone(), m.eval_label().to_string())).or_default();
                    match by_reader.get(&reader) {
                        None => {
                            by_reader.insert(reader.clone(), Some(value));
                        }
                        Some(Some(earlier)) if *earlier != value => {
                            by_reader.insert(reader.clone(), None);
                            conflicting_cells += 1;
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    let mut labels = GoldLabels::new();
    for (key, by_reader) in votes {
        let yes = by_reader.values().filter(|v| **v == Some(true)).count();
        let no = by_reader.values().filter(|v| **v == Some(false)).count();
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
    let repeated = (repeated_pairs > 0).then(|| RepeatedJudgements { policy: REPEAT_POLICY.into(), repeated_pairs, conflicting_cells });
    Ok(GoldSet { format: GoldFormat::GoogleNih, variant: variant.into(), labels, mapping, unmapped, uncertain, repeated })
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
        assert!(classify("Set Id").is_none());
        assert!(matches!(classify("Abnormal"), Some(Column::Mapped(m)) if m.nih == ["No Finding"] && m.negated));
        assert!(matches!(classify("No Finding"), Some(Column::Mapped(m)) if m.nih == ["No Finding"] && !m.negated));
    }
}
