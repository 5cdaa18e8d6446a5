//! The release directory appears only when complete: everything is written to a hidden staging
//! directory beside it, then renamed into place. A killed build leaves only the staging
//! directory, which the next build of the same target removes. Before the rename every file is
//! flushed to disk, so a power cut after a build says it is done cannot leave a release with
//! empty files in it. (Cache entries are not synced: a torn entry fails its check and is scored
//! again.)
//!
//! The target is claimed first ([`claim`]): it must be missing or hold a release this tool wrote
//! and nothing else, and one build at a time holds it. So the only staging folders a build meets
//! beside its target are those of builds that are gone, and the only folder it replaces is a
//! release.

use std::path::{Path, PathBuf};

use crate::files::{Claim, OutDir, OutDirError, Protected};
use crate::inputs::ResolvedSpec;

pub struct Staging {
    pub dir: PathBuf,
    target: PathBuf,
}

/// Claims the release folder `out` before any work: see [`crate::files::out_dir`]. It may not
/// overlap what the build reads: the source root, the cache folder, the spec's files.
pub fn claim(out: &Path, spec: &ResolvedSpec, cache: Option<&Path>) -> Result<OutDir, OutDirError> {
    let mut protected = vec![Protected { what: "the source root", path: &spec.source.root }];
    if let Some(cache) = cache {
        protected.push(Protected { what: "the cache", path: cache });
    }
    protected.extend(spec.layers.iter().map(|l| Protected { what: "the spec", path: &l.path }));
    OutDir::claim(out, &Claim { option: "--out", replaces: true, is_ours: &crate::manifest::owned_release, protected: &protected })
}

fn hidden_sibling(target: &Path, tag: &str) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "release".into());
    target.with_file_name(format!(".{name}.{tag}-{}", std::process::id()))
}

impl Staging {
    /// A staging folder beside the claimed target (whose lock the caller holds).
    pub fn create(claimed: &OutDir) -> std::io::Result<Staging> {
        let target = claimed.path();
        let parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)?;
        remove_stale(target)?;
        let dir = hidden_sibling(target, "partial");
        std::fs::create_dir_all(&dir)?;
        Ok(Staging { dir, target: target.to_path_buf() })
    }

    /// Moves the finished release into place, replacing any previous one.
    pub fn commit(self) -> std::io::Result<PathBuf> {
        sync_tree(&self.dir)?;
        let old = hidden_sibling(&self.target, "old");
        if self.target.exists() {
            std::fs::rename(&self.target, &old)?;
        }
        std::fs::rename(&self.dir, &self.target)?;
        sync_dir(self.target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")))?;
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        Ok(self.target.clone())
    }
}

impl Drop for Staging {
    /// A build that fails (rather than being killed) cleans up after itself.
    fn drop(&mut self) {
        if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Flushes every file under `dir`, then each folder's entries, to disk.
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            std::fs::File::open(entry.path())?.sync_all()?;
        }
    }
    sync_dir(dir)
}

/// Flushes a folder's entries (its names, not its files' contents). Where a folder cannot be
/// opened for syncing (not a Unix), there is nothing more to do.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::File::open(dir) {
        Ok(f) if cfg!(unix) => f.sync_all(),
        _ => Ok(()),
    }
}

/// Staging and replaced directories left by killed builds of the same target. Only the holder of
/// the target's lock calls this, so none of them belongs to a running build.
fn remove_stale(target: &Path) -> std::io::Result<()> {
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else { return Ok(()) };
    let parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    for entry in std::fs::read_dir(parent)? {
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.starts_with(&format!(".{name}.partial-")) || file.starts_with(&format!(".{name}.old-")) {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}
