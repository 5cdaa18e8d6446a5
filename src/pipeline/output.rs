//! The release directory appears only when complete: everything is written to a hidden staging
//! directory beside it, then renamed into place. A killed build leaves only the staging
//! directory, which the next build removes.

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
        let old = hidden_sibling(&self.target, "old");
        if self.target.exists() {
            std::fs::rename(&self.target, &old)?;
        }
        std::fs::rename(&self.dir, &self.target)?;
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
