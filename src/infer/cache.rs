//! The per-image score cache: one small JSON file per (image, scorer, prompt set), written
//! atomically, so concurrent shard runs and killed builds never leave a half-written entry.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{InferError, YesNo};
use crate::hashing::sha256_parts;

/// Everything a cached score depends on.
#[derive(Debug, Clone)]
pub struct CacheKey {
    pub image_sha256: String,
    pub scorer_hash: String,
    pub prompt_set_hash: String,
}

impl CacheKey {
    pub fn digest(&self) -> String {
        sha256_parts(&["bpals-scores/1", &self.image_sha256, &self.scorer_hash, &self.prompt_set_hash])
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    key: String,
    image: String,
    image_sha256: String,
    question_ids: Vec<String>,
    scores: Vec<YesNo>,
}

#[derive(Debug, Clone)]
pub struct ScoreCache {
    dir: PathBuf,
}

impl ScoreCache {
    pub fn new(root: &Path) -> Self {
        ScoreCache { dir: root.join("scores-v1") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(&digest[..2]).join(format!("{digest}.json"))
    }

    pub fn contains(&self, key: &CacheKey) -> bool {
        self.path(&key.digest()).is_file()
    }

    /// The cached scores, or None on a miss. An entry that does not parse or does not match its
    /// key is treated as a miss (and overwritten later): the cache is never trusted over a rerun.
    pub fn get(&self, key: &CacheKey, question_ids: &[String]) -> Option<Vec<YesNo>> {
        let digest = key.digest();
        let bytes = std::fs::read(self.path(&digest)).ok()?;
        let entry: Entry = serde_json::from_slice(&bytes).ok()?;
        let valid = entry.key == digest
            && entry.image_sha256 == key.image_sha256
            && entry.question_ids == question_ids
            && entry.scores.len() == question_ids.len()
            && entry.scores.iter().all(|s| s.logit_yes.is_finite() && s.logit_no.is_finite());
        valid.then_some(entry.scores)
    }

    /// Removes temp files older than `max_age` that killed runs left behind (see [`sweep_stale_temp_files`]).
    pub fn sweep_stale_temp_files(&self, max_age: std::time::Duration) -> usize {
        sweep_stale_temp_files(&self.dir, max_age)
    }

    pub fn put(&self, key: &CacheKey, image: &str, question_ids: &[String], scores: &[YesNo]) -> Result<(), InferError> {
        let digest = key.digest();
        let path = self.path(&digest);
        let entry = Entry {
            key: digest.clone(),
            image: image.to_string(),
            image_sha256: key.image_sha256.clone(),
            question_ids: question_ids.to_vec(),
            scores: scores.to_vec(),
        };
        write_entry(&path, &entry)
    }
}

/// Writes one cache entry atomically (a temp file in the same folder, then a rename), so a
/// killed run or a concurrent shard never leaves a half-written entry.
pub(super) fn write_entry(path: &Path, entry: &impl Serialize) -> Result<(), InferError> {
    let dir = path.parent().expect("cache paths have a parent");
    let io = |source| InferError::Cache { path: path.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    serde_json::to_writer(&mut tmp, entry).map_err(|e| io(e.into()))?;
    tmp.flush().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

/// Removes temp files older than `max_age` from a cache's folders. Younger ones may belong to a
/// run writing right now (sharded `infer` jobs share the cache), so they stay. Returns how many
/// were removed.
pub(super) fn sweep_stale_temp_files(root: &Path, max_age: std::time::Duration) -> usize {
    let Ok(dirs) = std::fs::read_dir(root) else { return 0 };
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for dir in dirs.flatten().filter(|d| d.path().is_dir()) {
        let Ok(files) = std::fs::read_dir(dir.path()) else { continue };
        for file in files.flatten() {
            let stale = file.file_name().to_string_lossy().starts_with(".tmp")
                && file.metadata().and_then(|m| m.modified()).is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > max_age));
            if stale && std::fs::remove_file(file.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod sweep_tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn only_old_temp_files_are_swept() {
        let root = tempfile::tempdir().unwrap();
        let cache = ScoreCache::new(root.path());
        let key = CacheKey { image_sha256: "ab".repeat(32), scorer_hash: "s".into(), prompt_set_hash: "p".into() };
        cache.put(&key, "x.png", &["q".into()], &[YesNo { logit_yes: 1.0, logit_no: 0.0 }]).unwrap();
        let sub = cache.path(&key.digest()).parent().unwrap().to_path_buf();
        let old = sub.join(".tmpOLD");
        std::fs::write(&old, "partial").unwrap();
        std::fs::File::options().write(true).open(&old).unwrap().set_modified(SystemTime::now() - Duration::from_secs(7200)).unwrap();
        let fresh = sub.join(".tmpNEW");
        std::fs::write(&fresh, "being written").unwrap();
        assert_eq!(cache.sweep_stale_temp_files(Duration::from_secs(3600)), 1);
        assert!(!old.exists() && fresh.exists());
        assert!(cache.get(&key, &["q".into()]).is_some(), "entries are never swept");
    }
}
