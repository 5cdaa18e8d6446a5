//! `bpals-release verify --remote ORG/NAME[@REV]`: every file the remote manifest lists must be
//! on the Hub at that revision with its size and sha256, and nothing else may be there.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::hub::{DigestSource, Hub, HubError, RepoRef, GITATTRIBUTES};
use crate::manifest::{FileProblem, Manifest, MANIFEST_FILE, MANIFEST_FORMAT};

#[derive(Debug, Clone, Serialize)]
pub struct RemoteVerifyReport {
    pub repo: String,
    pub revision: String,
    /// The commit the revision resolved to.
    pub commit: String,
    pub release_id: String,
    pub version: String,
    pub files_checked: usize,
    /// How each file's sha256 was established: by the Hub's ETag or by download.
    pub by_etag: usize,
    pub by_download: usize,
    pub problems: Vec<FileProblem>,
}

impl RemoteVerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl std::fmt::Display for RemoteVerifyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = format!("{}@{} ({})", self.repo, self.revision, crate::hub::short(&self.commit));
        if self.ok() {
            return writeln!(
                f,
                "ok: release {} {} at {at}: {} files match the manifest ({} by the Hub's sha256 ETag, {} downloaded and hashed)",
                self.release_id, self.version, self.files_checked, self.by_etag, self.by_download
            );
        }
        writeln!(f, "FAILED: release {} at {at}: {} problem(s)", self.release_id, self.problems.len())?;
        self.problems.iter().try_for_each(|p| writeln!(f, "  {p}"))
    }
}

/// Checks the release at `repo`; with `download`, also writes every file there (then checked
/// locally against the same manifest).
pub fn verify_remote(hub: &Hub, repo: &RepoRef, download: Option<&Path>, log: &dyn Fn(&str)) -> Result<RemoteVerifyReport, HubError> {
    let revision = repo.revision().to_string();
    // Pin the revision to a commit first, so every later call reads the same tree.
    let commit = hub.commit_of(repo, &revision)?;
    let tree = hub.files(repo, &commit)?;
    if !tree.contains_key(MANIFEST_FILE) {
        return Err(HubError::Protocol(format!("{}@{revision} has no {MANIFEST_FILE}: not a bpals release", repo.id())));
    }
    let manifest_bytes = hub.download(repo, &commit, MANIFEST_FILE)?;
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| HubError::Protocol(format!("{}@{revision}: {MANIFEST_FILE} is not a valid manifest: {e}", repo.id())))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(HubError::Protocol(format!(
            "{}@{revision}: manifest format {:?}, expected {MANIFEST_FORMAT:?}",
            repo.id(),
            manifest.format
        )));
    }
    log(&format!(
        "remote manifest at {}: release {} {}, {} files",
        crate::hub::short(&commit),
        manifest.release_id,
        manifest.version,
        manifest.files.len()
    ));

    let mut problems = Vec::new();
    let (mut by_etag, mut by_download) = (0, 0);
    let mut downloaded: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for file in &manifest.files {
        if !tree.contains_key(&file.path) {
            problems.push(FileProblem::Missing { path: file.path.clone() });
            continue;
        }
        let (size, sha256) = if download.is_some() {
            let bytes = hub.download(repo, &commit, &file.path)?;
            by_download += 1;
            let digest = (bytes.len() as u64, crate::hashing::sha256_hex(&bytes));
            downloaded.insert(file.path.clone(), bytes);
            digest
        } else {
            let (size, sha256, source) = hub.sha256(repo, &commit, &file.path)?;
            match source {
                DigestSource::Etag => by_etag += 1,
                DigestSource::Download => by_download += 1,
            }
            (size, sha256)
        };
        if size != file.bytes {
            problems.push(FileProblem::Size { path: file.path.clone(), expected: file.bytes, actual: size });
        } else if sha256 != file.sha256 {
            problems.push(FileProblem::Digest { path: file.path.clone(), expected: file.sha256.clone(), actual: sha256 });
        }
    }
    for path in tree.keys() {
        if path != MANIFEST_FILE && path != GITATTRIBUTES && !manifest.files.iter().any(|f| &f.path == path) {
            problems.push(FileProblem::Extra { path: path.clone() });
        }
    }
    if let Some(dir) = download {
        write_release(dir, &manifest_bytes, &downloaded).map_err(|e| HubError::Protocol(format!("writing {}: {e}", dir.display())))?;
        log(&format!("downloaded {} files into {}", downloaded.len() + 1, dir.display()));
    }
    Ok(RemoteVerifyReport {
        repo: repo.id(),
        revision,
        commit,
        release_id: manifest.release_id,
        version: manifest.version,
        files_checked: manifest.files.len(),
        by_etag,
        by_download,
        problems,
    })
}

/// Writes the downloaded release into a fresh directory, through a staging folder renamed at
/// the end, like a build.
fn write_release(dir: &Path, manifest: &[u8], files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
    let staging = crate::pipeline::output::Staging::create(dir)?;
    std::fs::write(staging.dir.join(MANIFEST_FILE), manifest)?;
    for (path, bytes) in files {
        let target = staging.dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, bytes)?;
    }
    staging.commit().map(|_| ())
}
