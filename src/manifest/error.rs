//! What can be wrong with a release directory's own files.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a valid {what}", path.display())]
    Parse {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: format {found:?}, expected {expected:?}", path.display())]
    Format { path: PathBuf, found: String, expected: &'static str },
    #[error("cannot list the files of {}", dir.display())]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Reads a JSON file of a release and checks its `format` field.
pub(super) fn read_json<T: serde::de::DeserializeOwned>(
    path: PathBuf,
    what: &'static str,
    expected: &'static str,
    format_of: impl Fn(&T) -> &str,
) -> Result<T, ManifestError> {
    // Never through a link: what is read is the release's own file.
    let bytes = crate::files::regular::open(&path, false)
        .and_then(|f| crate::files::regular::read_file(f, crate::files::regular::RELEASE_JSON))
        .map_err(|source| ManifestError::Read { path: path.clone(), source })?;
    let value: T = serde_json::from_slice(&bytes).map_err(|source| ManifestError::Parse { path: path.clone(), what, source })?;
    let found = format_of(&value);
    if found != expected {
        return Err(ManifestError::Format { found: found.to_string(), path, expected });
    }
    Ok(value)
}
