//! `bpals-release verify DIR`: re-hash every file and compare with the manifest.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde::Serialize;

use super::{is_signature_file, list_files, Manifest, ManifestError, MANIFEST_FILE};
use crate::hashing::sha256_file;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum FileProblem {
    Missing { path: String },
    Extra { path: String },
    Size { path: String, expected: u64, actual: u64 },
    Digest { path: String, expected: String, actual: String },
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileProblem::Missing { path } => write!(f, "missing: {path}"),
            FileProblem::Extra { path } => write!(f, "extra (not in the manifest): {path}"),
            FileProblem::Size { path, expected, actual } => write!(f, "changed: {path} has {actual} bytes, the manifest says {expected}"),
            FileProblem::Digest { path, expected, actual } => {
                write!(f, "changed: {path} has sha256 {actual}, the manifest says {expected}")
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The release directory checked.
    #[serde(skip)]
    pub dir: std::path::PathBuf,
    pub release_id: String,
    pub files_checked: usize,
    pub problems: Vec<FileProblem>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (id, dir) = (&self.release_id, self.dir.display());
        if self.ok() {
            return writeln!(f, "ok: release {id} in {dir}: {} files match the manifest", self.files_checked);
        }
        writeln!(f, "FAILED: release {id} in {dir}: {} problem(s)", self.problems.len())?;
        self.problems.iter().try_for_each(|p| writeln!(f, "  {p}"))
    }
}

/// The manifest's files against the disk. The two signature files are not the manifest's to
/// check (`signing` does).
pub fn verify(dir: &Path) -> Result<VerifyReport, ManifestError> {
    let manifest = Manifest::read(dir)?;
    let on_disk: BTreeSet<String> = list_files(dir)
        .map_err(|source| ManifestError::List { dir: dir.to_path_buf(), source })?
        .into_iter()
        .filter(|p| p != MANIFEST_FILE && !is_signature_file(p))
        .collect();
    let mut problems = Vec::new();
    for file in &manifest.files {
        if !on_disk.contains(&file.path) {
            problems.push(FileProblem::Missing { path: file.path.clone() });
            continue;
        }
        let path = dir.join(&file.path);
        let (sha256, bytes) = sha256_file(&path).map_err(|source| ManifestError::Read { path, source })?;
        if bytes != file.bytes {
            problems.push(FileProblem::Size { path: file.path.clone(), expected: file.bytes, actual: bytes });
        } else if sha256 != file.sha256 {
            problems.push(FileProblem::Digest { path: file.path.clone(), expected: file.sha256.clone(), actual: sha256 });
        }
    }
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    for path in &on_disk {
        if !listed.contains(path.as_str()) {
            problems.push(FileProblem::Extra { path: path.clone() });
        }
    }
    Ok(VerifyReport { dir: dir.to_path_buf(), release_id: manifest.release_id, files_checked: manifest.files.len(), problems })
}
