//! What the repo's main branch holds, checked on both sides of a publish: before, the files a
//! commit would delete that are not a bpals release's; after, the commit to tag, read back.

use std::collections::BTreeMap;
use std::path::Path;

use super::plan::{self, FileStatus};
use super::PublishError;
use crate::hub::{self, Hub, RemoteFile, RepoRef};
use crate::manifest::{Manifest, MANIFEST_FILE, MANIFEST_FORMAT, PROVENANCE_FILE, SIGNATURE_FILE};

/// The files among `removed` that main's own manifest does not list: someone else's work, which
/// the release commit would delete. All of them when main holds no bpals manifest.
pub fn foreign_files(
    hub: &Hub,
    repo: &RepoRef,
    head: &str,
    files: &BTreeMap<String, RemoteFile>,
    removed: &[String],
) -> Result<Vec<String>, PublishError> {
    if removed.is_empty() {
        return Ok(Vec::new()); // nothing deleted: no need to read main's manifest
    }
    let released: Vec<String> = match files.get(MANIFEST_FILE) {
        None => Vec::new(),
        Some(listed) => {
            let bytes = hub.download_capped(repo, head, MANIFEST_FILE, listed.size.min(hub::JSON_CAP))?;
            match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) if m.format == MANIFEST_FORMAT => {
                    m.files.into_iter().map(|f| f.path).chain([SIGNATURE_FILE, PROVENANCE_FILE].map(String::from)).collect()
                }
                _ => Vec::new(),
            }
        }
    };
    Ok(removed.iter().filter(|p| !released.contains(p)).cloned().collect())
}

/// The refusal that lists the foreign files a publish would delete.
pub fn refuse_foreign(repo: &RepoRef, foreign: &[String]) -> PublishError {
    const SHOWN: usize = 20;
    let mut list: Vec<String> = foreign.iter().take(SHOWN).map(|p| format!("  {p}")).collect();
    if foreign.len() > SHOWN {
        list.push(format!("  ... and {} more", foreign.len() - SHOWN));
    }
    PublishError::Refused(format!(
        "main of {} holds {} that no bpals release lists, and the release commit would delete them:\n{}\n\
         Publish to another repo, or pass --replace-foreign-files to replace them.",
        repo.id(),
        files(foreign.len()),
        list.join("\n")
    ))
}

/// Reads main back before tagging: `commit` must be main's head and hold exactly the release's
/// files, whatever the Hub answered to the commit.
pub fn check_release_commit(hub: &Hub, repo: &RepoRef, dir: &Path, manifest: &Manifest, commit: &str) -> Result<(), PublishError> {
    let head = hub.repo(repo)?.map(|r| r.head);
    if head.as_deref() != Some(commit) {
        return Err(PublishError::Refused(format!(
            "the release commit is {}, but main of {} is at {}: not tagged. Rerun publish: it compares main with the release again",
            hub::short(commit),
            repo.id(),
            head.as_deref().map_or("nothing", hub::short)
        )));
    }
    let at_head = hub.files(repo, commit)?;
    let (files, removed) = plan::compute(hub, repo, dir, manifest, Some((commit, &at_head)))?;
    let differ: Vec<&str> = files
        .iter()
        .filter(|f| f.status != FileStatus::Unchanged)
        .map(|f| f.path.as_str())
        .chain(removed.iter().map(String::as_str))
        .collect();
    if !differ.is_empty() {
        return Err(PublishError::Refused(format!(
            "main of {} at {} does not hold exactly the release's files ({}): not tagged",
            repo.id(),
            hub::short(commit),
            differ.join(", ")
        )));
    }
    Ok(())
}

/// "1 file", "3 files".
pub fn files(n: usize) -> String {
    format!("{n} file{}", if n == 1 { "" } else { "s" })
}
