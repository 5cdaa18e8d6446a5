//! SHA-256 helpers shared by every stage that keys, pins or verifies something.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Streams a file through SHA-256; returns (hex digest, byte count).
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), total))
}

/// Hash of a value's JSON form. Struct fields serialize in declaration order and maps are
/// BTreeMaps, so the JSON (and the key) is stable for equal values.
pub fn sha256_json<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_vec(value).expect("in-memory JSON serialization cannot fail");
    sha256_hex(&json)
}

/// A full 40-hex git commit id: the only revision that cannot move.
pub fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Hash of several named parts, each length-prefixed so that ("ab","c") != ("a","bc").
pub fn sha256_parts(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Well-mixed 64-bit value from a string key: used where a stable pseudo-random order is needed
/// (seeded selection, tie-breaks) without pulling in an RNG whose stream could change.
pub fn stable_u64(parts: &[&str]) -> u64 {
    let digest = sha256_parts(parts);
    u64::from_str_radix(&digest[..16], 16).expect("hex digest")
}

/// Digests of large files (model weights), remembered under a cache folder so a file is hashed
/// once rather than on every build. An entry is keyed by the file's canonical path, size and
/// modification time, so a replaced or rewritten file is hashed again.
pub struct DigestCache {
    dir: std::path::PathBuf,
}

#[derive(Serialize, serde::Deserialize)]
struct DigestEntry {
    path: String,
    len: u64,
    modified_ns: u128,
    sha256: String,
}

impl DigestCache {
    pub fn new(cache_root: &Path) -> Self {
        DigestCache { dir: cache_root.join("file-digests-v1") }
    }

    /// The file's sha256, from the cache when its size and mtime are unchanged. A cache that
    /// cannot be written only costs the next build a rehash.
    pub fn sha256_file(&self, path: &Path) -> io::Result<String> {
        let canonical = std::fs::canonicalize(path)?;
        let meta = std::fs::metadata(&canonical)?;
        let modified_ns = meta.modified()?.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = canonical.to_string_lossy().into_owned();
        let entry_path = self.dir.join(format!("{}.json", sha256_parts(&[&name, &meta.len().to_string(), &modified_ns.to_string()])));
        if let Ok(text) = std::fs::read(&entry_path) {
            if let Ok(e) = serde_json::from_slice::<DigestEntry>(&text) {
                if e.path == name && e.len == meta.len() && e.modified_ns == modified_ns && e.sha256.len() == 64 {
                    return Ok(e.sha256);
                }
            }
        }
        let (sha256, len) = sha256_file(&canonical)?;
        let entry = DigestEntry { path: name, len, modified_ns, sha256: sha256.clone() };
        let _ = std::fs::create_dir_all(&self.dir).and_then(|_| {
            let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
            serde_json::to_writer(&mut tmp, &entry)?;
            tmp.persist(&entry_path).map(|_| ()).map_err(|e| e.error)
        });
        Ok(sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_full_commit_ids_count_as_pinned() {
        assert!(is_commit("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_commit("main") && !is_commit("v1.0") && !is_commit("0123456"));
    }

    #[test]
    fn a_file_is_hashed_once_until_it_changes() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("weights.bin");
        std::fs::write(&file, b"first").unwrap();
        let cache = DigestCache::new(&root.path().join("cache"));
        assert_eq!(cache.sha256_file(&file).unwrap(), sha256_hex(b"first"));
        // A cached digest is served as recorded (proved by planting a different one).
        let entry = std::fs::read_dir(root.path().join("cache/file-digests-v1")).unwrap().next().unwrap().unwrap().path();
        let planted = std::fs::read_to_string(&entry).unwrap().replace(&sha256_hex(b"first"), &"f".repeat(64));
        std::fs::write(&entry, planted).unwrap();
        assert_eq!(cache.sha256_file(&file).unwrap(), "f".repeat(64));
        // Rewriting the file (new size) makes a new entry.
        std::fs::write(&file, b"second!").unwrap();
        assert_eq!(cache.sha256_file(&file).unwrap(), sha256_hex(b"second!"));
        // Corrupt entries are ignored: the file is hashed again.
        for e in std::fs::read_dir(root.path().join("cache/file-digests-v1")).unwrap() {
            std::fs::write(e.unwrap().path(), b"not json").unwrap();
        }
        assert_eq!(cache.sha256_file(&file).unwrap(), sha256_hex(b"second!"));
    }
}
