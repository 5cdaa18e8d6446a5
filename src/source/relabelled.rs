//! Which images carry expert relabels: the `Image Index` column of a file such as Google's 2019
//! labels of NIH images (`google2019_nih-chest-xray-labels.csv[.gz]`). Curation only needs the
//! names; the labels themselves are read by [`crate::eval`]'s gold readers.

use std::collections::BTreeSet;
use std::path::Path;

use super::{open_text, SourceError};

/// The distinct image names of the file's `Image Index` column.
pub fn read_relabelled_images(path: &Path) -> Result<BTreeSet<String>, SourceError> {
    let input = open_text(path).map_err(|source| SourceError::Io { path: path.into(), source })?;
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(input);
    let header = reader.headers().map_err(|e| SourceError::csv(path, &e))?;
    let Some(column) = header.iter().position(|h| h.trim() == "Image Index") else {
        return Err(SourceError::Header { path: path.into(), message: "no \"Image Index\" column".into() });
    };
    let mut names = BTreeSet::new();
    for record in reader.records() {
        let record = record.map_err(|e| SourceError::csv(path, &e))?;
        let name = record.get(column).unwrap_or("").trim();
        if name.is_empty() {
            let line = record.position().map_or(0, |p| p.line());
            return Err(SourceError::Row { path: path.into(), line, message: "empty Image Index".into() });
        }
        names.insert(name.to_string());
    }
    Ok(names)
}
