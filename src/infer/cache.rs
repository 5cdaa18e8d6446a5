//! The per-image score cache: one small JSON entry per (image, scorer, prompt set), kept in a
//! folder or an object store (see [`super::store`]).

use serde::{Deserialize, Serialize};

use super::store::{CacheLocation, EntryStore};
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
    entries: EntryStore,
}

impl ScoreCache {
    pub fn open(location: &CacheLocation) -> Result<Self, InferError> {
        Ok(ScoreCache { entries: location.open("scores-v1")? })
    }

    pub fn contains(&self, key: &CacheKey) -> Result<bool, InferError> {
        self.entries.exists(&key.digest())
    }

    /// The cached scores, or None on a miss. An entry that does not parse or does not match its
    /// key is treated as a miss (and overwritten later): the cache is never trusted over a rerun.
    pub fn get(&self, key: &CacheKey, question_ids: &[String]) -> Result<Option<Vec<YesNo>>, InferError> {
        let digest = key.digest();
        let Some(bytes) = self.entries.read(&digest)? else { return Ok(None) };
        let Ok(entry) = serde_json::from_slice::<Entry>(&bytes) else { return Ok(None) };
        let valid = entry.key == digest
            && entry.image_sha256 == key.image_sha256
            && entry.question_ids == question_ids
            && entry.scores.len() == question_ids.len()
            && entry.scores.iter().all(|s| s.logit_yes.is_finite() && s.logit_no.is_finite());
        Ok(valid.then_some(entry.scores))
    }

    /// Removes temp files older than `max_age` that killed runs left behind.
    pub fn sweep_stale_temp_files(&self, max_age: std::time::Duration) -> usize {
        self.entries.sweep_stale_temp_files(max_age)
    }

    pub fn put(&self, key: &CacheKey, image: &str, question_ids: &[String], scores: &[YesNo]) -> Result<(), InferError> {
        let digest = key.digest();
        let entry = Entry {
            key: digest.clone(),
            image: image.to_string(),
            image_sha256: key.image_sha256.clone(),
            question_ids: question_ids.to_vec(),
            scores: scores.to_vec(),
        };
        self.entries.write(&digest, serde_json::to_vec(&entry).expect("entries serialize"))
    }
}
