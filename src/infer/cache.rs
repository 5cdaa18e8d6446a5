//! The per-image score cache: one small JSON file per (image, scorer, prompt set), written
//! atomically, so concurrent shard runs and killed builds never leave a half-written entry.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{InferError, QuestionScore};
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
    scores: Vec<QuestionScore>,
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
    pub fn get(&self, key: &CacheKey, question_ids: &[String]) -> Option<Vec<QuestionScore>> {
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

    pub fn put(&self, key: &CacheKey, image: &str, question_ids: &[String], scores: &[QuestionScore]) -> Result<(), InferError> {
        let digest = key.digest();
        let path = self.path(&digest);
        let dir = path.parent().expect("cache paths have a parent");
        let io = |source| InferError::Cache { path: path.clone(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let entry = Entry {
            key: digest.clone(),
            image: image.to_string(),
            image_sha256: key.image_sha256.clone(),
            question_ids: question_ids.to_vec(),
            scores: scores.to_vec(),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        serde_json::to_writer(&mut tmp, &entry).map_err(|e| io(e.into()))?;
        tmp.flush().map_err(io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        Ok(())
    }
}
