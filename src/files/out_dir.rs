//! The folders the tool writes are its own alone. Before any work, a command that writes a folder
//! (`build --out`, `rebuild --scratch`, `review export --out`, `man --out`, `fetch-nih DIR`)
//! *claims* it:
//!
//! - the folder is missing, empty, or holds what this tool wrote there before (each command says
//!   how it knows its own: a release's manifest lists every file). Anything else is refused,
//!   naming what is in it: a user who wants it gone deletes it;
//! - it is not, is not inside and does not hold a folder or file the command reads (the source
//!   root, the cache, the spec) nor the current folder;
//! - one writer at a time: an OS lock on a file beside the folder (`.NAME.lock`, [`FileLock`]).
//!   A second writer fails at once, naming the holder's pid.

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use super::lock::{FileLock, LockError};

/// Something the claimed folder must stay clear of, named in the refusal.
#[derive(Debug, Clone, Copy)]
pub struct Protected<'a> {
    /// "the source root", "the cache", "the spec".
    pub what: &'static str,
    pub path: &'a Path,
}

#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    #[error("{option} {}: {why}", path.display())]
    Refused { option: &'static str, path: PathBuf, why: String },
    #[error("{option} {}: another bpals-release (pid {pid}) is writing it; wait for it to finish or choose another folder", path.display())]
    Busy { option: &'static str, path: PathBuf, pid: String },
    #[error("{option} {}", path.display())]
    Io {
        option: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// How a command writes its folder, for [`OutDir::claim`].
pub struct Claim<'a> {
    /// The flag or argument that named the folder (`--out`), for messages.
    pub option: &'static str,
    /// The command replaces the folder whole (a release is renamed into place): then the folder
    /// may not be a link nor hold the current folder. Commands that write files inside it allow
    /// both.
    pub replaces: bool,
    /// Whether an existing, non-empty folder holds only what this command wrote (Err says what
    /// else is there).
    pub is_ours: &'a dyn Fn(&Path) -> Result<(), String>,
    /// What the folder must stay clear of.
    pub protected: &'a [Protected<'a>],
}

/// A claimed folder: the lock is held until this is dropped.
#[derive(Debug)]
pub struct OutDir {
    path: PathBuf,
    _lock: FileLock,
}

impl OutDir {
    /// Claims `path` for a command that writes it as `claim` says.
    pub fn claim(path: &Path, claim: &Claim<'_>) -> Result<OutDir, OutDirError> {
        let Claim { option, replaces, is_ours, protected } = *claim;
        let refuse = |why: String| OutDirError::Refused { option, path: path.to_path_buf(), why };
        let io_err = |source| OutDirError::Io { option, path: path.to_path_buf(), source };
        let resolved = resolve(path).map_err(io_err)?;
        let Some(name) = resolved.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return Err(refuse("is the file system's root".into()));
        };
        match std::fs::symlink_metadata(&resolved) {
            Ok(m) if m.file_type().is_symlink() && replaces => return Err(refuse("is a symbolic link; name the folder itself".into())),
            Ok(m) if !m.file_type().is_symlink() && !m.is_dir() => return Err(refuse("is a file, not a folder".into())),
            _ => {}
        }
        let resolved = if replaces { resolved } else { resolved.canonicalize().unwrap_or(resolved) };
        let cwd = std::env::current_dir().and_then(|d| d.canonicalize());
        if replaces && cwd.is_ok_and(|cwd| cwd.starts_with(&resolved)) {
            return Err(refuse("is or holds the current folder; choose a folder of its own".into()));
        }
        for p in protected {
            let Ok(other) = resolve(p.path) else { continue };
            let relation = if other == resolved {
                "is"
            } else if resolved.starts_with(&other) {
                "is inside"
            } else if other.starts_with(&resolved) {
                "holds"
            } else {
                continue;
            };
            return Err(refuse(format!("{relation} {} {}; choose a folder of its own", p.what, p.path.display())));
        }
        let check_contents = |dir: &Path| -> Result<(), OutDirError> {
            if dir.is_dir() && !is_empty(dir).map_err(io_err)? {
                is_ours(dir).map_err(|why| refuse(format!("{why}; delete it yourself or choose another folder")))?;
            }
            Ok(())
        };
        check_contents(&resolved)?;
        let parent = resolved.parent().expect("a path with a file name has a parent");
        std::fs::create_dir_all(parent).map_err(io_err)?;
        let lock_path = parent.join(format!(".{name}.lock"));
        let lock = FileLock::take(&lock_path).map_err(|e| match e {
            LockError::Held(pid) => OutDirError::Busy { option, path: path.to_path_buf(), pid },
            e @ LockError::NotALock { .. } => refuse(e.to_string()),
            LockError::Io(source) => io_err(source),
        })?;
        // Under the lock, once more: another writer may have finished in between.
        let claimed = OutDir { path: resolved, _lock: lock };
        check_contents(&claimed.path)?;
        Ok(claimed)
    }

    /// The folder, absolute, with its existing parents' links resolved.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// For a command that writes one file (`calibrate --out`, `review plan --out`, ...): `path` may
/// be missing or a file this tool wrote, which `looks_ours` recognises from its first 64 KiB (a
/// format field, a header line). Anything else, a link or a folder included, is refused, naming it.
pub fn check_file(path: &Path, option: &'static str, what: &str, looks_ours: &dyn Fn(&str) -> bool) -> Result<(), OutDirError> {
    let refuse = |why: String| OutDirError::Refused { option, path: path.to_path_buf(), why };
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(OutDirError::Io { option, path: path.to_path_buf(), source }),
        Ok(meta) => meta,
    };
    if !meta.file_type().is_file() {
        return Err(refuse(format!("exists and is {}; choose another path", super::regular::kind_of(&meta))));
    }
    if !head_matches(path, looks_ours) {
        return Err(refuse(format!("exists and is not {what} this tool wrote; delete it yourself or choose another path")));
    }
    Ok(())
}

/// Whether the regular file at `path` (not followed through a link) is one this tool wrote, as
/// `looks_ours` tells from its first 64 KiB; an unreadable file is not.
pub fn head_matches(path: &Path, looks_ours: &dyn Fn(&str) -> bool) -> bool {
    let mut head = Vec::new();
    let read = super::regular::open(path, false).and_then(|f| f.take(64 << 10).read_to_end(&mut head));
    read.is_ok() && looks_ours(&String::from_utf8_lossy(&head))
}

fn is_empty(dir: &Path) -> io::Result<bool> {
    Ok(std::fs::read_dir(dir)?.next().is_none())
}

/// `path` made absolute, `..` and `.` folded, and links resolved in the part that exists (the
/// last component itself is left as it is, so a link there can be refused).
pub fn resolve(path: &Path) -> io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut folded = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                folded.pop();
            }
            Component::CurDir => {}
            other => folded.push(other),
        }
    }
    let Some(name) = folded.file_name().map(|n| n.to_os_string()) else { return Ok(folded) };
    // Resolve the parent chain: the deepest existing ancestor, canonical, then the rest.
    let parent = folded.parent().expect("a path with a file name has a parent");
    let mut existing = parent.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match existing.file_name() {
            Some(n) => rest.push(n.to_os_string()),
            None => break,
        }
        existing.pop();
    }
    let mut out = existing.canonicalize()?;
    out.extend(rest.iter().rev());
    out.push(name);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &Path) -> Result<(), String> {
        Err("holds files this tool did not write".into())
    }

    fn release<'a>(is_ours: &'a dyn Fn(&Path) -> Result<(), String>, protected: &'a [Protected<'a>]) -> Claim<'a> {
        Claim { option: "--out", replaces: true, is_ours, protected }
    }

    #[test]
    fn a_folder_with_someone_elses_files_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        assert!(OutDir::claim(&dir, &release(&never, &[])).is_ok(), "an empty folder is fine");
        std::fs::write(dir.join("f"), "x").unwrap();
        let err = OutDir::claim(&dir, &release(&never, &[])).unwrap_err().to_string();
        assert!(err.contains("holds files this tool did not write; delete it yourself"), "{err}");
        assert!(dir.join("f").exists());
    }

    #[test]
    fn a_folder_overlapping_what_the_command_reads_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let source = root.path().join("nih");
        std::fs::create_dir_all(source.join("images")).unwrap();
        let guard = [Protected { what: "the source root", path: &source }];
        for (out, relation) in
            [(source.clone(), "is the source root"), (source.join("images/x"), "is inside"), (root.path().to_path_buf(), "holds")]
        {
            let err = OutDir::claim(&out, &release(&|_| Ok(()), &guard)).unwrap_err().to_string();
            assert!(err.contains(relation), "{err}");
        }
        let dotted = source.join("../nih/./images/../images");
        assert!(OutDir::claim(&dotted, &release(&|_| Ok(()), &guard)).unwrap_err().to_string().contains("is inside"));
    }

    #[test]
    fn one_writer_at_a_time() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("release");
        let first = OutDir::claim(&dir, &release(&never, &[])).unwrap();
        let err = OutDir::claim(&dir, &release(&never, &[])).unwrap_err().to_string();
        assert!(err.contains(&format!("(pid {})", std::process::id())), "{err}");
        drop(first);
        assert!(!root.path().join(".release.lock").exists(), "the lock file goes with the claim");
        OutDir::claim(&dir, &release(&never, &[])).unwrap();
    }

    #[test]
    fn a_file_is_overwritten_only_when_this_tool_wrote_it() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("calibration.json");
        let ours = |head: &str| head.contains("bpals-calibration/1");
        assert!(check_file(&path, "--out", "a calibration", &ours).is_ok(), "a missing file");
        std::fs::write(&path, r#"{"format": "bpals-calibration/1"}"#).unwrap();
        assert!(check_file(&path, "--out", "a calibration", &ours).is_ok());
        std::fs::write(&path, "my notes").unwrap();
        let err = check_file(&path, "--out", "a calibration", &ours).unwrap_err().to_string();
        assert!(err.ends_with("exists and is not a calibration this tool wrote; delete it yourself or choose another path"), "{err}");
        assert!(check_file(root.path(), "--out", "a calibration", &ours).unwrap_err().to_string().contains("is a folder"));
    }

    #[test]
    fn links_files_and_the_root_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(OutDir::claim(&file, &release(&never, &[])).unwrap_err().to_string().contains("is a file, not a folder"));
        let link = root.path().join("link");
        std::os::unix::fs::symlink(root.path(), &link).unwrap();
        assert!(OutDir::claim(&link, &release(&never, &[])).unwrap_err().to_string().contains("symbolic link"));
        let inside = Claim { option: "DIR", replaces: false, is_ours: &|_| Ok(()), protected: &[] };
        assert!(OutDir::claim(&link, &inside).is_ok(), "a command that writes inside a folder follows a link to it");
        assert!(OutDir::claim(Path::new("/"), &release(&never, &[])).unwrap_err().to_string().contains("root"));
    }
}
