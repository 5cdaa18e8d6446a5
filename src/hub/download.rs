//! Files fetched from the Hub, bounded: every download has a cap in bytes (the size the tree
//! listing announced, or a ceiling for small JSON files), an announced `Content-Length` above it
//! is refused before a byte is read, and the body is streamed (hashed, or written to disk) as it
//! arrives, never held whole unless the caller asked for the bytes of a small file.

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Hub, HubError, RepoRef};

impl Hub {
    /// The bytes of a small file, refused above `cap`.
    pub fn download_capped(&self, repo: &RepoRef, revision: &str, path: &str, cap: u64) -> Result<Vec<u8>, HubError> {
        let mut bytes = Vec::new();
        self.stream(repo, revision, path, cap, |chunk| {
            bytes.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(bytes)
    }

    /// A file's size and sha256, hashed as it arrives; refused above `cap`.
    pub fn download_digest(&self, repo: &RepoRef, revision: &str, path: &str, cap: u64) -> Result<(u64, String), HubError> {
        let mut hasher = Sha256::new();
        let size = self.stream(repo, revision, path, cap, |chunk| {
            hasher.update(chunk);
            Ok(())
        })?;
        Ok((size, hex::encode(hasher.finalize())))
    }

    /// Writes a file to `target` as it arrives, hashing it on the way; refused above `cap`
    /// (what is written so far stays for the caller's staging folder to remove).
    pub fn download_to(&self, repo: &RepoRef, revision: &str, path: &str, cap: u64, target: &Path) -> Result<(u64, String), HubError> {
        let failed = |e: std::io::Error| HubError::Protocol(format!("writing {}: {e}", target.display()));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(failed)?;
        }
        let mut file = std::io::BufWriter::new(std::fs::File::create(target).map_err(failed)?);
        let mut hasher = Sha256::new();
        let size = self.stream(repo, revision, path, cap, |chunk| {
            hasher.update(chunk);
            file.write_all(chunk)
        })?;
        file.flush().map_err(failed)?;
        Ok((size, hex::encode(hasher.finalize())))
    }

    /// Streams `path` at `revision` through `sink`, chunk by chunk; the bytes it passed.
    fn stream(
        &self,
        repo: &RepoRef,
        revision: &str,
        path: &str,
        cap: u64,
        sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, HubError> {
        let route = format!("{}@{revision}/{path}", repo.id());
        let action = format!("downloading {path} from {}@{revision}", repo.id());
        let mut segments = vec!["datasets", &repo.owner, &repo.name, "resolve", revision];
        segments.extend(path.split('/'));
        self.http.stream(&action, &route, &self.http.url(&segments), cap, sink)
    }
}
