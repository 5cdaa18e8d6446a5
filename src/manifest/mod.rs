//! `manifest.json` (every file of the release: path, bytes, sha256, Parquet row counts) and
//! `build.lock` (everything needed to rebuild it), plus `verify`, which re-hashes a release.

mod error;
mod lock;
mod verify;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use error::ManifestError;
pub use lock::{BuildLock, ImageHashesFile, ToolInfo, IMAGE_HASHES_FILE, LOCK_FORMAT};
pub use verify::{is_plain_relative, verify, FileProblem, VerifyReport};

use crate::hashing::sha256_file;

pub const MANIFEST_FILE: &str = "manifest.json";
pub const LOCK_FILE: &str = "build.lock";
pub const MANIFEST_FORMAT: &str = "bpals-manifest/1";
/// The publisher's signature over every file (OpenSSF Model Signing), and the signed build
/// provenance (SLSA v1). Not listed in the manifest: they sign it (see `signing`).
pub const SIGNATURE_FILE: &str = "release.sig";
pub const PROVENANCE_FILE: &str = "provenance.intoto.jsonl";

/// Whether `path` is one of the two signature files that sit beside the manifest's files.
pub fn is_signature_file(path: &str) -> bool {
    path == SIGNATURE_FILE || path == PROVENANCE_FILE
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub release_id: String,
    pub version: String,
    pub tier: String,
    /// Non-empty when the build is a demo (sample data, fixture scorer, random weights...).
    pub demo_reasons: Vec<String>,
    /// Every file of the release but the manifest itself, sorted by path.
    pub files: Vec<ManifestFile>,
}

impl Manifest {
    pub fn is_demo(&self) -> bool {
        !self.demo_reasons.is_empty()
    }

    /// The manifest of the release in `dir`.
    pub fn read(dir: &Path) -> Result<Manifest, ManifestError> {
        error::read_json(dir.join(MANIFEST_FILE), "manifest", MANIFEST_FORMAT, |m: &Manifest| &m.format)
    }
}

/// Hashes every file under `dir` (but the manifest and signature files) into manifest entries,
/// sorted by path.
/// `rows` gives row counts for the Parquet files, by relative path.
pub fn collect_files(dir: &Path, rows: &dyn Fn(&str) -> Option<u64>) -> std::io::Result<Vec<ManifestFile>> {
    let mut files = Vec::new();
    for rel in list_files(dir)? {
        if rel == MANIFEST_FILE || is_signature_file(&rel) {
            continue;
        }
        let (sha256, bytes) = sha256_file(&dir.join(&rel))?;
        files.push(ManifestFile { rows: rows(&rel), path: rel, bytes, sha256 });
    }
    Ok(files)
}

/// Every regular file under `dir`, as sorted `/`-separated relative paths. Links and special
/// files are left out (see [`scan`] for them): nothing outside the release is ever read through it.
pub fn list_files(dir: &Path) -> std::io::Result<Vec<String>> {
    Ok(scan(dir)?.files)
}

/// What is under a release folder: its regular files, and everything else (links, FIFOs,
/// devices, sockets) with what it is. Links are never followed, folder links included.
#[derive(Debug, Default)]
pub struct Scan {
    pub files: Vec<String>,
    pub others: Vec<(String, &'static str)>,
}

pub fn scan(dir: &Path) -> std::io::Result<Scan> {
    let mut out = Scan::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
                continue;
            }
            let rel = entry.path().strip_prefix(dir).expect("under dir").to_path_buf();
            let parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if kind.is_file() {
                out.files.push(parts.join("/"));
            } else {
                out.others.push((parts.join("/"), crate::files::regular::kind_of(&entry.metadata()?)));
            }
        }
    }
    out.files.sort();
    out.others.sort();
    Ok(out)
}

/// Whether `dir` holds a release this tool wrote and nothing else: a manifest of ours, and no
/// file it does not list (the signature files aside). What a build may replace; the reason when
/// not.
pub fn owned_release(dir: &Path) -> Result<(), String> {
    let manifest = match Manifest::read(dir) {
        Ok(m) => m,
        Err(_) if std::fs::symlink_metadata(dir.join(MANIFEST_FILE)).is_err() => {
            let found = scan(dir).map(|s| s.files.len() + s.others.len()).unwrap_or(0);
            let files = if found == 1 { "file" } else { "files" };
            return Err(format!("holds {found} {files} and no {MANIFEST_FILE}: it is not a release this tool wrote"));
        }
        Err(e) => return Err(format!("holds a {MANIFEST_FILE} that is not a release manifest of this tool's ({})", error_chain(&e))),
    };
    let listed: std::collections::BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    let found = scan(dir).map_err(|e| format!("cannot be listed: {e}"))?;
    let foreign: Vec<&str> = found
        .files
        .iter()
        .map(String::as_str)
        .chain(found.others.iter().map(|(p, _)| p.as_str()))
        .filter(|p| *p != MANIFEST_FILE && !is_signature_file(p) && !listed.contains(p))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = foreign.iter().take(5).copied().collect();
    let more = if foreign.len() > 5 { format!(" and {} more", foreign.len() - 5) } else { String::new() };
    Err(format!("holds a release, and files its manifest does not list: {}{more}", shown.join(", ")))
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Pretty JSON with a trailing newline: stable bytes for equal values.
pub fn to_json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("in-memory JSON serialization cannot fail");
    bytes.push(b'\n');
    bytes
}
