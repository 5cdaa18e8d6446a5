//! The row loop both metadata CSVs share: a header, then data rows with their line numbers.
//! Blank rows are skipped; a row needs at least `width` fields and nothing but empty ones after.

use std::io::Read;
use std::path::{Path, PathBuf};

use csv::StringRecord;

use super::SourceError;

/// Opens a text file, decompressing it on the way when its name ends in `.gz` (the copies of
/// NIH's files that ship in the torchxrayvision wheel are gzipped).
pub fn open_text(path: &Path) -> std::io::Result<Box<dyn Read>> {
    let file = crate::files::regular::open(path, true)?;
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file)))
    } else {
        Box::new(file)
    })
}

pub(crate) struct MetadataCsv {
    path: PathBuf,
    records: csv::StringRecordsIntoIter<Box<dyn Read>>,
    width: usize,
    /// What the first `width` fields are, for the error message.
    fields: &'static str,
}

impl MetadataCsv {
    /// Opens the file and reads its header row.
    pub(crate) fn open(path: &Path, width: usize, fields: &'static str) -> Result<(Self, StringRecord), SourceError> {
        let file = open_text(path).map_err(|source| SourceError::Io { path: path.into(), source })?;
        let reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(file);
        let mut records = reader.into_records();
        let header = match records.next() {
            Some(r) => r.map_err(|e| SourceError::csv(path, &e))?,
            None => return Err(SourceError::Header { path: path.into(), message: "the file is empty".into() }),
        };
        Ok((MetadataCsv { path: path.into(), records, width, fields }, header))
    }

    pub(crate) fn bad_header(&self, message: String) -> SourceError {
        SourceError::Header { path: self.path.clone(), message }
    }
}

/// A data row: its 1-based line and its fields.
pub(crate) struct Row {
    pub line: u64,
    pub record: StringRecord,
    pub path: PathBuf,
}

impl Row {
    pub(crate) fn field(&self, i: usize) -> &str {
        self.record.get(i).unwrap_or("").trim()
    }
    pub(crate) fn error(&self, message: String) -> SourceError {
        SourceError::Row { path: self.path.clone(), line: self.line, message }
    }
}

impl Iterator for MetadataCsv {
    type Item = Result<Row, SourceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let record = match self.records.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(SourceError::csv(&self.path, &e))),
            };
            if record.iter().all(|f| f.trim().is_empty()) {
                continue;
            }
            let row = Row { line: record.position().map_or(0, |p| p.line()), record, path: self.path.clone() };
            if row.record.len() < self.width {
                return Some(Err(row.error(format!("expected {} fields ({}), found {}", self.width, self.fields, row.record.len()))));
            }
            if let Some(extra) = row.record.iter().skip(self.width).find(|f| !f.trim().is_empty()) {
                let message = format!("unexpected value {extra:?} after the {} fields ({})", self.width, self.fields);
                return Some(Err(row.error(message)));
            }
            return Some(Ok(row));
        }
    }
}
