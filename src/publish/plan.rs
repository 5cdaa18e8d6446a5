//! What a publish will do: each release file new, changed or unchanged against the repo's main
//! branch, the remote files it removes, and the tag.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::hub::{self, Hub, HubError, RemoteFile, RepoRef, GITATTRIBUTES};
use crate::manifest::{Manifest, MANIFEST_FILE, PROVENANCE_FILE, SIGNATURE_FILE};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    New,
    Changed,
    Unchanged,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlannedFile {
    pub path: String,
    pub bytes: u64,
    pub status: FileStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TagState {
    Missing,
    /// The tag exists and names this commit.
    Exists {
        commit: String,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct PublishPlan {
    pub repo: String,
    pub endpoint: String,
    pub visibility: String,
    /// The repo does not exist yet and will be created.
    pub create_repo: bool,
    /// The main-branch commit the plan was computed against (and the new commit's parent).
    pub parent: Option<String>,
    pub files: Vec<PlannedFile>,
    pub removed: Vec<String>,
    pub tag: String,
    pub tag_state: TagState,
}

impl PublishPlan {
    /// Whether a commit is needed.
    pub fn changes(&self) -> bool {
        self.create_repo || !self.removed.is_empty() || self.files.iter().any(|f| f.status != FileStatus::Unchanged)
    }

    pub fn count(&self, status: FileStatus) -> (usize, u64) {
        let of: Vec<&PlannedFile> = self.files.iter().filter(|f| f.status == status).collect();
        (of.len(), of.iter().map(|f| f.bytes).sum())
    }

    /// The plan as a person reads it.
    pub fn render(&self) -> String {
        let mut out = format!(
            "publish plan for dataset repo {} at {} ({})\n",
            self.repo,
            self.endpoint,
            if self.create_repo { format!("new repo, {}", self.visibility) } else { self.visibility.clone() }
        );
        if let Some(parent) = &self.parent {
            out.push_str(&format!("  on top of main at {}\n", hub::short(parent)));
        }
        for f in &self.files {
            let status = match f.status {
                FileStatus::New => "new      ",
                FileStatus::Changed => "changed  ",
                FileStatus::Unchanged => "unchanged",
            };
            out.push_str(&format!("  {status} {:>12} bytes  {}\n", f.bytes, f.path));
        }
        for path in &self.removed {
            out.push_str(&format!("  removed  {:>12}        {path}\n", ""));
        }
        let (new, new_bytes) = self.count(FileStatus::New);
        let (changed, changed_bytes) = self.count(FileStatus::Changed);
        let (same, _) = self.count(FileStatus::Unchanged);
        out.push_str(&format!(
            "  {new} new ({new_bytes} bytes), {changed} changed ({changed_bytes} bytes), {same} unchanged, {} removed\n",
            self.removed.len()
        ));
        out.push_str(&match &self.tag_state {
            TagState::Missing => format!("  tag {} will name the release commit\n", self.tag),
            TagState::Exists { commit } => format!("  tag {} exists at {}\n", self.tag, hub::short(commit)),
        });
        if !self.changes() {
            out.push_str("  the repo already holds these exact files: no commit\n");
        }
        out
    }
}

/// Compares the release in `dir` with the repo's main branch (`remote` is None for a repo that
/// does not exist yet).
pub fn compute(
    hub: &Hub,
    repo: &RepoRef,
    dir: &Path,
    manifest: &Manifest,
    remote: Option<(&str, &BTreeMap<String, RemoteFile>)>,
) -> Result<(Vec<PlannedFile>, Vec<String>), HubError> {
    let mut local: Vec<(String, u64, String)> = manifest.files.iter().map(|f| (f.path.clone(), f.bytes, f.sha256.clone())).collect();
    let manifest_bytes =
        std::fs::read(dir.join(MANIFEST_FILE)).map_err(|e| HubError::Protocol(format!("{}: {e}", dir.join(MANIFEST_FILE).display())))?;
    local.push((MANIFEST_FILE.to_string(), manifest_bytes.len() as u64, crate::hashing::sha256_hex(&manifest_bytes)));
    // The signature files travel with the release, in the same commit.
    for name in [SIGNATURE_FILE, PROVENANCE_FILE] {
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            local.push((name.to_string(), bytes.len() as u64, crate::hashing::sha256_hex(&bytes)));
        }
    }
    local.sort();
    let mut files = Vec::new();
    for (path, bytes, sha256) in &local {
        let status = match remote.and_then(|(head, files)| files.get(path).map(|f| (head, f))) {
            None => FileStatus::New,
            Some((_, rf)) if rf.size != *bytes => FileStatus::Changed,
            Some((head, rf)) if rf.lfs => {
                let (_, remote_sha, _) = hub.sha256(repo, head, path)?;
                if &remote_sha == sha256 {
                    FileStatus::Unchanged
                } else {
                    FileStatus::Changed
                }
            }
            Some((_, rf)) => {
                let content =
                    std::fs::read(dir.join(path)).map_err(|e| HubError::Protocol(format!("{}: {e}", dir.join(path).display())))?;
                if hub::git_blob_oid(&content) == rf.git_oid {
                    FileStatus::Unchanged
                } else {
                    FileStatus::Changed
                }
            }
        };
        files.push(PlannedFile { path: path.clone(), bytes: *bytes, status });
    }
    let removed = match remote {
        None => Vec::new(),
        Some((_, remote_files)) => {
            remote_files.keys().filter(|p| p.as_str() != GITATTRIBUTES && !local.iter().any(|(l, _, _)| l == *p)).cloned().collect()
        }
    };
    Ok((files, removed))
}
