//! The release directory appears only when complete: everything is written to a hidden staging
//! directory beside it, then renamed into place. A killed build leaves only the staging
//! directory, which the next build removes. Before the rename every file is flushed to disk, so
//! a power cut after a build says it is done cannot leave a release with empty files in it.
//! (Cache entries are not synced: a torn entry fails its check and is scored again.)

use std::path::{Path, PathBuf};

pub struct Staging {
    pub dir: PathBuf,
    target: PathBuf,
}

fn hidden_sibling(target: &Path, tag: &str) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "release".into());
    target.with_file_name(format!(".{name}.{tag}-{}", std::process::id()))
}

impl Staging {
    pub fn create(target: &Path) -> std::io::Result<Staging> {
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

/// Staging and replaced directories left by killed builds of the same target.
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
