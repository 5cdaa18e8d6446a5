//! One writer at a time: an exclusive `flock` on a lock file, so a crash releases it, with the
//! holder's pid written in it for the next writer's message. The folders the tool writes
//! ([`super::out_dir`]) and the sales ledger take one.
//!
//! A lock file is never followed and never truncated unless it is one of ours: it is created new
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`), or, where one is left from a writer that was killed, opened
//! without following a link and taken over only if it is a regular file of one name holding a
//! pid. A link planted at the lock's path (to a ledger, say) is refused, and what it points to is
//! never opened for writing.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum LockError {
    /// Another process holds it: its pid, or "unknown".
    Held(String),
    /// Something that is not a lock file this tool left is at the lock's path: what it is.
    NotALock {
        path: PathBuf,
        what: String,
    },
    Io(io::Error),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held(pid) => write!(f, "held by pid {pid}"),
            LockError::NotALock { path, what } => {
                write!(f, "the lock file {} {what}; it is not one this tool left, so it is not touched: remove it yourself", path.display())
            }
            LockError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// A lock file holds a pid and nothing else; one larger than this is not ours.
const MAX_LOCK_BYTES: u64 = 32;

/// A held lock; dropping it releases the lock and removes the file.
#[derive(Debug)]
pub struct FileLock {
    path: PathBuf,
    _file: File,
}

impl FileLock {
    /// Takes the lock at `path` at once, or says who holds it.
    pub fn take(path: &Path) -> Result<FileLock, LockError> {
        for _ in 0..16 {
            let Some(mut file) = open_own(path)? else { continue };
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let _ = file.rewind();
                    let mut pid = String::new();
                    let _ = file.read_to_string(&mut pid);
                    let pid = pid.trim();
                    return Err(LockError::Held(if pid.is_empty() { "unknown".into() } else { pid.to_string() }));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
            }
            // The holder before us may have removed the file after we opened it: lock the one
            // at the path, not an orphan.
            let same = std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == file.metadata().map_or(0, |f| f.ino()));
            if !same {
                continue;
            }
            file.set_len(0).and_then(|_| file.rewind()).and_then(|_| write!(file, "{}", std::process::id())).map_err(LockError::Io)?;
            return Ok(FileLock { path: path.to_path_buf(), _file: file });
        }
        Err(LockError::Io(io::Error::other("the lock file kept changing under this process")))
    }
}

/// The lock file at `path`, created new, or the one a killed writer left; `None` when it went
/// between two looks (try again). Anything else at the path is refused, untouched.
fn open_own(path: &Path) -> Result<Option<File>, LockError> {
    let options = |create: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if create {
            o.create_new(true);
        }
        o
    };
    match options(true).open(path) {
        Ok(file) => return Ok(Some(file)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refusal(path, e)),
    }
    let file = match options(false).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(refusal(path, e)),
    };
    let meta = file.metadata().map_err(LockError::Io)?;
    let not_ours = |what: String| Err(LockError::NotALock { path: path.to_path_buf(), what });
    if !meta.is_file() {
        return not_ours(format!("is {}", super::regular::kind_of(&meta)));
    }
    if meta.nlink() != 1 {
        return not_ours(format!("has {} names (a hard link)", meta.nlink()));
    }
    if meta.len() > MAX_LOCK_BYTES {
        return not_ours(format!("holds {} bytes, more than a pid", meta.len()));
    }
    let mut text = String::new();
    let read = (&file).take(MAX_LOCK_BYTES).read_to_string(&mut text);
    if read.is_err() || !text.trim().bytes().all(|b| b.is_ascii_digit()) {
        return not_ours("holds something other than a pid".into());
    }
    Ok(Some(file))
}

/// An open that failed: a link at the path (`ELOOP` under `O_NOFOLLOW`) or a folder is named as
/// what it is; anything else is the system's error.
fn refusal(path: &Path, e: io::Error) -> LockError {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() || meta.is_dir() => {
            LockError::NotALock { path: path.to_path_buf(), what: format!("is {}", super::regular::kind_of(&meta)) }
        }
        _ => LockError::Io(e),
    }
}

impl Drop for FileLock {
    /// The lock file goes while the lock is still held; a writer that opened it in between sees
    /// that its file is no longer the one at the path and tries again.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A canary file, and a lock path that names it by a symbolic link or by a hard link: the
    /// lock is refused and the canary keeps its bytes.
    #[test]
    fn a_link_at_the_lock_path_is_refused_and_its_target_kept() {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("ledger.jsonl");
        std::fs::write(&canary, "the whole history\n").unwrap();
        let soft = dir.path().join(".soft.lock");
        std::os::unix::fs::symlink(&canary, &soft).unwrap();
        let hard = dir.path().join(".hard.lock");
        std::fs::hard_link(&canary, &hard).unwrap();
        for (path, what) in [(&soft, "is a symbolic link"), (&hard, "has 2 names")] {
            match FileLock::take(path) {
                Err(e @ LockError::NotALock { .. }) => assert!(e.to_string().contains(what), "{e}"),
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "the whole history\n");
        // A link to a file that does not exist yet is not followed either: nothing is created.
        let dangling = dir.path().join(".dangling.lock");
        std::os::unix::fs::symlink(dir.path().join("new-file"), &dangling).unwrap();
        assert!(matches!(FileLock::take(&dangling), Err(LockError::NotALock { .. })));
        assert!(!dir.path().join("new-file").exists());
    }

    /// A lock file a killed writer left (its pid in it) is taken over; a file that holds
    /// anything else, or a folder, is refused untouched.
    #[test]
    fn a_stale_lock_is_taken_and_a_foreign_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".stale.lock");
        std::fs::write(&stale, "4194303").unwrap();
        let lock = FileLock::take(&stale).unwrap();
        assert_eq!(std::fs::read_to_string(&stale).unwrap(), std::process::id().to_string());
        drop(lock);
        assert!(!stale.exists(), "the lock file goes with the lock");

        let foreign = dir.path().join(".foreign.lock");
        std::fs::write(&foreign, "notes\n").unwrap();
        assert!(matches!(FileLock::take(&foreign), Err(LockError::NotALock { .. })));
        assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "notes\n");
        let folder = dir.path().join(".folder.lock");
        std::fs::create_dir(&folder).unwrap();
        match FileLock::take(&folder) {
            Err(e @ LockError::NotALock { .. }) => assert!(e.to_string().contains("folder"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}
