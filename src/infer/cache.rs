//! The per-image score cache: one small JSON entry per (image, scorer, questions), kept in a
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
    pub questions_hash: String,
}

impl CacheKey {
    pub fn digest(&self) -> String {
        sha256_parts(&["bpals-scores/2", &self.image_sha256, &self.scorer_hash, &self.questions_hash])
    }
}

/// What an entry holds (sealed with its digests by the store).
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
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
        Ok(ScoreCache { entries: location.open("scores-v2")? })
    }

    pub fn contains(&self, key: &CacheKey) -> Result<bool, InferError> {
        self.entries.exists(&key.digest())
    }

    /// The cached scores, or None on a miss. An entry that fails its check (see
    /// [`super::store`]) or holds scores for other questions is a miss too, reported in
    /// [`Self::problems`]: the cache is never trusted over a rerun.
    pub fn get(&self, key: &CacheKey, question_ids: &[String]) -> Result<Option<Vec<YesNo>>, InferError> {
        let check = |entry: &Entry| {
            if entry.image_sha256 != key.image_sha256 {
                return Err((format!("image sha256 {}", key.image_sha256), entry.image_sha256.clone()));
            }
            if entry.question_ids != question_ids || entry.scores.len() != question_ids.len() {
                return Err((
                    format!("scores for {} questions", question_ids.len()),
                    format!("{} scores for other questions", entry.scores.len()),
                ));
            }
            if !entry.scores.iter().all(|s| s.logit_yes.is_finite() && s.logit_no.is_finite()) {
                return Err(("finite logits".into(), "a logit that is not finite".into()));
            }
            Ok(())
        };
        Ok(self.entries.get(&key.digest(), check)?.map(|entry: Entry| entry.scores))
    }

    /// Entries that failed their check since the last call, each set aside and scored again.
    pub fn take_problems(&self) -> Vec<super::CacheProblem> {
        self.entries.take_problems()
    }

    /// Removes temp files older than `max_age` that killed runs left behind.
    pub fn sweep_stale_temp_files(&self, max_age: std::time::Duration) -> usize {
        self.entries.sweep_stale_temp_files(max_age)
    }

    pub fn put(&self, key: &CacheKey, image: &str, question_ids: &[String], scores: &[YesNo]) -> Result<(), InferError> {
        let entry = Entry {
            image: image.to_string(),
            image_sha256: key.image_sha256.clone(),
            question_ids: question_ids.to_vec(),
            scores: scores.to_vec(),
        };
        self.entries.put(&key.digest(), &entry)
    }
}
