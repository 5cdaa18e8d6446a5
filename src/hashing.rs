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
    sha256_reader(File::open(path)?)
}

/// Streams an opened file (or any reader) through SHA-256; returns (hex digest, byte count).
pub fn sha256_reader(mut file: impl Read) -> io::Result<(String, u64)> {
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

/// A cache entry as stored: its content with the digest of its key and of its content, so that an
/// entry edited, torn, or written under another key's name is caught rather than believed. The
/// score and generation caches and the weights-digest cache all store entries this way.
#[derive(Serialize, serde::Deserialize)]
pub struct Sealed<T> {
    pub key: String,
    pub content_sha256: String,
    pub content: T,
}

impl<T: Serialize> Sealed<T> {
    pub fn new(key: &str, content: T) -> Self {
        Sealed { key: key.to_string(), content_sha256: sha256_json(&content), content }
    }

    /// The bytes of the stored entry.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("entries serialize")
    }
}

/// The content of an entry stored under `key`, if its bytes parse, name that key and hold the
/// content their digest says; else what was expected and what was found, for the report.
pub fn open_sealed<T: Serialize + serde::de::DeserializeOwned>(bytes: &[u8], key: &str) -> Result<T, (String, String)> {
    match serde_json::from_slice::<Sealed<T>>(bytes) {
        Err(e) => Err(("an entry of this cache's format".to_string(), format!("{} bytes that do not parse ({e})", bytes.len()))),
        Ok(sealed) if sealed.key != key => Err((format!("key {key}"), format!("key {}", sealed.key))),
        Ok(sealed) => {
            let actual = sha256_json(&sealed.content);
            if actual != sealed.content_sha256 {
                return Err((format!("content sha256 {}", sealed.content_sha256), actual));
            }
            Ok(sealed.content)
        }
    }
}

/// Digests of large files (model weights), remembered under a cache folder so a file is hashed
/// once rather than on every build. An entry is keyed by the file's canonical path, size,
/// modification and change times and inode, so a replaced, rewritten or touched file is hashed
/// again; each entry also carries the digest of its own content, so an edited entry is not
/// believed. With `rehash` (`build --verify-cache`, and every publishable build) the file is
/// hashed whatever the cache says, and a cached digest that disagrees is reported.
pub struct DigestCache {
    dir: std::path::PathBuf,
    rehash: bool,
}

#[derive(Serialize, serde::Deserialize)]
struct DigestEntry {
    path: String,
    len: u64,
    modified_ns: u128,
    changed_ns: i128,
    inode: u64,
    sha256: String,
}

/// What [`DigestCache::sha256_file`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct FileDigest {
    pub sha256: String,
    /// A cached digest that the file's bytes contradict (found with `rehash`), or a cache entry
    /// that failed its own check: said to the user, never used.
    pub problem: Option<String>,
}

impl DigestCache {
    pub fn new(cache_root: &Path) -> Self {
        DigestCache { dir: cache_root.join("file-digests-v2"), rehash: false }
    }

    /// Hash every file even when the cache holds its digest.
    pub fn rehashing(self, rehash: bool) -> Self {
        DigestCache { rehash, ..self }
    }

    /// The file's sha256, from the cache when nothing about the file changed. A cache that
    /// cannot be written only costs the next build a rehash.
    pub fn sha256_file(&self, path: &Path) -> io::Result<FileDigest> {
        use std::os::unix::fs::MetadataExt;
        let canonical = std::fs::canonicalize(path)?;
        let meta = std::fs::metadata(&canonical)?;
        let modified_ns = meta.modified()?.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let changed_ns = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
        let name = canonical.to_string_lossy().into_owned();
        let key =
            sha256_parts(&[&name, &meta.len().to_string(), &modified_ns.to_string(), &changed_ns.to_string(), &meta.ino().to_string()]);
        let entry_path = self.dir.join(format!("{key}.json"));
        let mut problem = None;
        let cached = match std::fs::read(&entry_path).ok().map(|b| open_sealed::<DigestEntry>(&b, &key)) {
            None => None,
            Some(Ok(e)) => {
                let same = e.path == name && e.len == meta.len() && e.modified_ns == modified_ns;
                (same && e.changed_ns == changed_ns && e.inode == meta.ino() && e.sha256.len() == 64).then_some(e.sha256)
            }
            Some(Err(_)) => {
                problem = Some(format!("digest cache entry {} failed its check: hashed {} again", entry_path.display(), path.display()));
                None
            }
        };
        if let (Some(sha256), false) = (&cached, self.rehash) {
            return Ok(FileDigest { sha256: sha256.clone(), problem });
        }
        let (sha256, len) = sha256_file(&canonical)?;
        if let Some(c) = cached.filter(|c| *c != sha256) {
            problem = Some(format!("the digest cache said {} has sha256 {c}; its bytes have {sha256}", path.display()));
        }
        let entry = DigestEntry { path: name, len, modified_ns, changed_ns, inode: meta.ino(), sha256: sha256.clone() };
        let _ = std::fs::create_dir_all(&self.dir).and_then(|_| {
            let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
            std::io::Write::write_all(&mut tmp, &Sealed::new(&key, &entry).to_bytes())?;
            tmp.persist(&entry_path).map(|_| ()).map_err(|e| e.error)
        });
        Ok(FileDigest { sha256, problem })
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
        let digest = |c: &DigestCache| c.sha256_file(&file).unwrap();
        assert_eq!(digest(&cache), FileDigest { sha256: sha256_hex(b"first"), problem: None });
        let entry = std::fs::read_dir(root.path().join("cache/file-digests-v2")).unwrap().next().unwrap().unwrap().path();
        // A cached digest is served as recorded while its entry checks out (proved by planting a
        // different one, resealed as a faulty writer would).
        let plant = |sha: &str| {
            let mut sealed: Sealed<DigestEntry> = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
            sealed.content.sha256 = sha.to_string();
            std::fs::write(&entry, Sealed::new(&sealed.key, &sealed.content).to_bytes()).unwrap();
        };
        plant(&"f".repeat(64));
        assert_eq!(digest(&cache).sha256, "f".repeat(64));
        // ... unless the build rehashes: then the lie is caught and said.
        let checked = digest(&DigestCache::new(&root.path().join("cache")).rehashing(true));
        assert_eq!(checked.sha256, sha256_hex(b"first"));
        assert!(checked.problem.unwrap().contains(&format!("said {} has sha256 {}", file.display(), "f".repeat(64))));
        // An entry edited without its seal is not believed.
        let text = std::fs::read_to_string(&entry).unwrap().replace(&sha256_hex(b"first"), &"e".repeat(64));
        std::fs::write(&entry, text).unwrap();
        let found = digest(&cache);
        assert_eq!(found.sha256, sha256_hex(b"first"));
        assert!(found.problem.unwrap().contains("failed its check"));
        // Rewriting the file (new size) makes a new entry.
        std::fs::write(&file, b"second!").unwrap();
        assert_eq!(digest(&cache).sha256, sha256_hex(b"second!"));
        // Corrupt entries are ignored: the file is hashed again.
        for e in std::fs::read_dir(root.path().join("cache/file-digests-v2")).unwrap() {
            std::fs::write(e.unwrap().path(), b"not json").unwrap();
        }
        assert_eq!(digest(&cache).sha256, sha256_hex(b"second!"));
    }
}
