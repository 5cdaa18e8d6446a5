//! `Data_Entry_2017.csv` in both official variants (2017 and the 2020 revision).
//!
//! Real copies differ in line endings (CRLF/LF), zero padding of ids, age encoding (`58` or `058Y`),
//! the sex column's name, and trailing empty columns. Columns are matched by position after the
//! header is checked, since the width/height and spacing headers are themselves split by commas.

use std::path::Path;

use super::csv_rows::MetadataCsv;
use super::SourceError;
use crate::vocab::{label_index, LABELS, NO_FINDING};

/// One image's metadata row, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct DataEntryRow {
    pub image_index: String,
    /// Bit i set = NIH asserts `LABELS[i]`.
    pub labels: u16,
    pub follow_up: u32,
    pub patient_id: u32,
    pub age_years: u16,
    pub sex: String,
    pub view_position: String,
    pub width: u32,
    pub height: u32,
    pub spacing_x: f64,
    pub spacing_y: f64,
    /// 1-based line in the file, kept for later error messages.
    pub line: u64,
}

const EXPECTED_HEADER: [&str; 7] =
    ["Image Index", "Finding Labels", "Follow-up #", "Patient ID", "Patient Age", "Patient Gender", "View Position"];

pub fn read(path: &Path) -> Result<Vec<DataEntryRow>, SourceError> {
    let (records, header) = MetadataCsv::open(path, 11, "image to pixel spacing")?;
    for (i, want) in EXPECTED_HEADER.iter().enumerate() {
        let got = header.get(i).unwrap_or("").trim().trim_start_matches('\u{feff}');
        let ok = got == *want || (i == 5 && got == "Patient Sex");
        if !ok {
            return Err(records.bad_header(format!("column {} is {got:?}, expected {want:?}", i + 1)));
        }
    }
    let named = header.iter().filter(|h| !h.trim().is_empty()).count();
    if named < 11 {
        return Err(records.bad_header(format!("expected 11 columns (image size and pixel spacing included), found {named}")));
    }

    let mut rows = Vec::new();
    for row in records {
        let row = row?;
        let bad = |message: String| row.error(message);
        let field = |i: usize| row.field(i);
        let image_index = field(0).to_string();
        if !crate::vocab::is_nih_image_name(&image_index) {
            return Err(bad(format!("image index {image_index:?} is not of the form 00000001_000.png")));
        }
        let labels = parse_labels(field(1)).map_err(|e| bad(e.to_string()))?;
        let int = |i: usize, name: &str| -> Result<u32, SourceError> {
            field(i).parse::<u32>().map_err(|_| bad(format!("{name} {:?} is not a whole number", field(i))))
        };
        let float = |i: usize, name: &str| -> Result<f64, SourceError> {
            let v = field(i).parse::<f64>().map_err(|_| bad(format!("{name} {:?} is not a number", field(i))))?;
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(bad(format!("{name} {v} must be positive")))
            }
        };
        let age_years = parse_age(field(4)).ok_or_else(|| bad(format!("patient age {:?} is not like 58 or 058Y", field(4))))?;
        let sex = field(5).to_string();
        if sex != "M" && sex != "F" {
            return Err(bad(format!("patient sex {sex:?}: expected M or F")));
        }
        let view_position = field(6).to_string();
        if view_position != "PA" && view_position != "AP" {
            return Err(bad(format!("view position {view_position:?}: expected PA or AP")));
        }
        rows.push(DataEntryRow {
            image_index,
            labels,
            follow_up: int(2, "follow-up #")?,
            patient_id: int(3, "patient id")?,
            age_years,
            sex,
            view_position,
            width: int(7, "image width")?,
            height: int(8, "image height")?,
            spacing_x: float(9, "pixel spacing x")?,
            spacing_y: float(10, "pixel spacing y")?,
            line: row.line,
        });
    }
    Ok(rows)
}

/// What is wrong with a `Finding Labels` cell.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabelsError {
    #[error("finding labels are empty (write \"No Finding\" for none)")]
    Empty,
    #[error("unknown finding label {0:?}: expected one of {all}", all = LABELS.join(", "))]
    Unknown(String),
    #[error("finding label {0:?} is repeated")]
    Repeated(String),
    #[error("\"No Finding\" combined with findings in {0:?}")]
    NoFindingWithFindings(String),
}

/// `Effusion|Mass` -> bitmask over [`LABELS`]; "No Finding" must stand alone.
pub fn parse_labels(s: &str) -> Result<u16, LabelsError> {
    if s.is_empty() {
        return Err(LabelsError::Empty);
    }
    let mut mask = 0u16;
    for part in s.split('|') {
        let part = part.trim();
        let i = label_index(part).ok_or_else(|| LabelsError::Unknown(part.to_string()))?;
        if mask & (1 << i) != 0 {
            return Err(LabelsError::Repeated(part.to_string()));
        }
        mask |= 1 << i;
    }
    let no_finding = 1 << label_index(NO_FINDING).expect("in vocabulary");
    if mask & no_finding != 0 && mask != no_finding {
        return Err(LabelsError::NoFindingWithFindings(s.to_string()));
    }
    Ok(mask)
}

/// Ages appear as `58`, `058` or `058Y`; the odd `M`/`D` suffix means months or days.
pub fn parse_age(s: &str) -> Option<u16> {
    let (digits, unit) = match s.chars().last()? {
        'Y' | 'y' => (&s[..s.len() - 1], 'Y'),
        'M' | 'm' => (&s[..s.len() - 1], 'M'),
        'D' | 'd' => (&s[..s.len() - 1], 'D'),
        _ => (s, 'Y'),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u16 = digits.parse().ok()?;
    Some(match unit {
        'M' => n / 12,
        'D' => 0,
        _ => n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_in_every_encoding() {
        assert_eq!(parse_age("58"), Some(58));
        assert_eq!(parse_age("058Y"), Some(58));
        assert_eq!(parse_age("024M"), Some(2));
        assert_eq!(parse_age("003D"), Some(0));
        assert_eq!(parse_age("Y"), None);
        assert_eq!(parse_age("5x"), None);
        assert_eq!(parse_age(""), None);
    }

    #[test]
    fn labels_are_checked_against_the_vocabulary() {
        assert_eq!(parse_labels("Atelectasis").unwrap(), 1);
        assert_eq!(parse_labels("Cardiomegaly|Effusion").unwrap(), 0b110);
        assert!(parse_labels("No Finding").is_ok());
        assert!(parse_labels("Infiltrate").unwrap_err().to_string().contains("unknown finding label \"Infiltrate\""));
        assert!(parse_labels("No Finding|Mass").is_err());
        assert!(parse_labels("Mass|Mass").is_err());
        assert!(parse_labels("").is_err());
    }
}
