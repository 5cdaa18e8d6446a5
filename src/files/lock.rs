//! One writer at a time: an exclusive `flock` on a lock file, so a crash releases it, with the
//! holder's pid written in it for the next writer's message. The folders the tool writes
//! ([`super::out_dir`]) and the sales ledger take one.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum LockError {
    /// Another process holds it: its pid, or "unknown".
    Held(String),
    Io(io::Error),
}

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
            let mut file = File::options().read(true).write(true).create(true).truncate(false).open(path).map_err(LockError::Io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut pid = String::new();
                    let _ = file.read_to_string(&mut pid);
                    let pid = pid.trim();
                    return Err(LockError::Held(if pid.is_empty() { "unknown".into() } else { pid.to_string() }));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
            }
            // The holder before us may have removed the file after we opened it: lock the one
            // at the path, not an orphan.
            let same = std::fs::metadata(path).is_ok_and(|m| m.ino() == file.metadata().map_or(0, |f| f.ino()));
            if !same {
                continue;
            }
            file.set_len(0).and_then(|_| file.rewind()).and_then(|_| write!(file, "{}", std::process::id())).map_err(LockError::Io)?;
            return Ok(FileLock { path: path.to_path_buf(), _file: file });
        }
        Err(LockError::Io(io::Error::other("the lock file kept changing under this process")))
    }
}

impl Drop for FileLock {
    /// The lock file goes while the lock is still held; a writer that opened it in between sees
    /// that its file is no longer the one at the path and tries again.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
