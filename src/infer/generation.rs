//! The generation stage: greedy free-form answers (S2's grounding prompts) per image, with the
//! guarantees of the scoring stage. Each image's answers are cached under a content key (image
//! bytes, scorer, prompts, decoding settings), so killed runs resume and `infer --shard` runs on
//! many machines merge into the next build. Images decode in batches: several images, each
//! with several prompts over its shared prefix, in one batch of the engine.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::runner::{decode_png, read_image, STALE_TEMP_AGE};
use super::store::{CacheLocation, EntryStore};
use super::{ImageInput, ImageJob, InferError, RunOptions, Scorer};
use crate::hashing::{sha256_json, sha256_parts};
use bpals_vlm::Thinking;

/// Images decoded together in one batch. On the CPU each worker runs its own batch; the batch
/// mostly saves per-step overhead, which a few images already amortise.
pub const BATCH_IMAGES: usize = 8;

/// One greedy answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The answer's text, special tokens kept (Qwen2-VL's box markers are special tokens), the
    /// stop token left out.
    pub text: String,
    pub new_tokens: usize,
    /// True when `max_new_tokens` cut the answer before a stop token.
    pub truncated: bool,
}

/// An image's answers, in prompt order, with the geometry their coordinates refer to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageAnswers {
    /// The original image (width, height) in pixels.
    pub original: (u32, u32),
    /// The resized image the model saw (height, width).
    pub resized: (usize, usize),
    pub answers: Vec<Answer>,
}

/// One image and the prompts to answer about it.
#[derive(Debug, Clone)]
pub struct GenerationJob {
    pub image: ImageJob,
    pub prompts: Vec<String>,
}

/// Everything about decoding that changes an answer (hashed into each cache key).
#[derive(Debug, Clone, Serialize)]
pub struct DecodingSettings {
    pub strategy: &'static str,
    pub max_new_tokens: usize,
    /// Whether the model may reason first (the chat template's `enable_thinking`). Left out of
    /// the key when off, so answers cached before the setting existed still match.
    #[serde(skip_serializing_if = "Thinking::is_off")]
    pub thinking: Thinking,
}

impl DecodingSettings {
    /// Greedy decoding with thinking off (S2's grounding answers).
    pub fn greedy(max_new_tokens: usize) -> Self {
        DecodingSettings { strategy: "greedy", max_new_tokens, thinking: Thinking::Off }
    }

    pub fn thinking(self, thinking: Thinking) -> Self {
        DecodingSettings { thinking, ..self }
    }
}

/// What an entry holds (sealed with its digests by the store).
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    image: String,
    image_sha256: String,
    prompts: Vec<String>,
    answers: ImageAnswers,
}

/// One small JSON entry per (image, scorer, prompts, decoding settings), in a folder or an
/// object store (see [`super::store`]).
#[derive(Debug, Clone)]
pub struct GenerationCache {
    entries: EntryStore,
}

impl GenerationCache {
    pub fn open(location: &CacheLocation) -> Result<Self, InferError> {
        Ok(GenerationCache { entries: location.open("generations-v2")? })
    }

    fn key(image_sha256: &str, scorer_hash: &str, prompts: &[String], settings: &DecodingSettings) -> String {
        sha256_parts(&["bpals-generations/1", image_sha256, scorer_hash, &sha256_json(&(prompts, settings))])
    }

    /// The cached answers, or None on a miss; an entry that fails its check or answers other
    /// prompts is a miss too, reported in [`Self::take_problems`].
    fn get(&self, digest: &str, image_sha256: &str, prompts: &[String]) -> Result<Option<ImageAnswers>, InferError> {
        let check = |entry: &Entry| {
            if entry.image_sha256 != image_sha256 {
                return Err((format!("image sha256 {image_sha256}"), entry.image_sha256.clone()));
            }
            if entry.prompts != prompts || entry.answers.answers.len() != prompts.len() {
                return Err((
                    format!("answers to {} prompts", prompts.len()),
                    format!("{} answers to other prompts", entry.answers.answers.len()),
                ));
            }
            Ok(())
        };
        Ok(self.entries.get(digest, check)?.map(|entry: Entry| entry.answers))
    }

    /// Entries that failed their check since the last call, each set aside and decoded again.
    pub fn take_problems(&self) -> Vec<super::CacheProblem> {
        self.entries.take_problems()
    }

    fn put(&self, digest: &str, job: &GenerationJob, image_sha256: &str, answers: &ImageAnswers) -> Result<(), InferError> {
        let entry = Entry {
            image: job.image.name.clone(),
            image_sha256: image_sha256.to_string(),
            prompts: job.prompts.clone(),
            answers: answers.clone(),
        };
        self.entries.put(digest, &entry)
    }
}

/// How many jobs already have cached answers (reads and hashes every image, decodes nothing).
pub fn count_cached_answers(
    jobs: &[GenerationJob],
    scorer: &dyn Scorer,
    settings: &DecodingSettings,
    cache: &GenerationCache,
) -> Result<usize, InferError> {
    let scorer_hash = scorer.identity().generation_hash();
    jobs.par_iter()
        .try_fold(
            || 0usize,
            |n, job| {
                let (_, sha) = read_image(&job.image)?;
                let digest = GenerationCache::key(&sha, &scorer_hash, &job.prompts, settings);
                Ok(n + usize::from(cache.get(&digest, &sha, &job.prompts)?.is_some()))
            },
        )
        .try_reduce(|| 0, |a, b| Ok(a + b))
}

#[derive(Debug)]
pub struct GenerationReport {
    /// Answers per job, None for images outside this run's shard.
    pub answers: Vec<Option<ImageAnswers>>,
    pub cached: usize,
    pub computed: usize,
    /// Cache entries that failed their check (set aside, decoded again).
    pub cache_problems: Vec<super::CacheProblem>,
}

/// Answers every job's prompts: from the cache, or decoded in batches of [`BATCH_IMAGES`].
/// Results come back in job order whatever the thread count.
pub fn run_generation(
    jobs: &[GenerationJob],
    scorer: &dyn Scorer,
    settings: &DecodingSettings,
    cache: &GenerationCache,
    options: &RunOptions,
) -> Result<GenerationReport, InferError> {
    let scorer_hash = scorer.identity().generation_hash();
    cache.entries.sweep_stale_temp_files(STALE_TEMP_AGE);
    let mine: Vec<usize> = (0..jobs.len()).filter(|&j| options.covers(&jobs[j].image.name)).collect();
    let bar = options.progress_bar(mine.len(), "generating");

    // Per batch: (job, answers, computed) for each of its jobs.
    let run_batch = |batch: &[usize]| -> Result<Vec<(usize, ImageAnswers, bool)>, InferError> {
        let mut done = Vec::with_capacity(batch.len());
        let mut misses = Vec::new();
        for &j in batch {
            let job = &jobs[j];
            let (bytes, sha) = read_image(&job.image)?;
            let digest = GenerationCache::key(&sha, &scorer_hash, &job.prompts, settings);
            match cache.get(&digest, &sha, &job.prompts)? {
                Some(answers) => done.push((j, answers, false)),
                None => misses.push((j, bytes, sha, digest)),
            }
        }
        if !misses.is_empty() {
            let decoded = misses.iter().map(|(j, bytes, _, _)| decode_png(bytes, &jobs[*j].image)).collect::<Result<Vec<_>, _>>()?;
            let inputs: Vec<ImageInput> = misses
                .iter()
                .zip(&decoded)
                .map(|((j, bytes, sha, _), image)| ImageInput { name: &jobs[*j].image.name, sha256: sha, bytes, image })
                .collect();
            let prompts: Vec<&[String]> = misses.iter().map(|(j, _, _, _)| jobs[*j].prompts.as_slice()).collect();
            let answered = scorer.generate(&inputs, &prompts, settings)?;
            if answered.len() != misses.len() || answered.iter().zip(&prompts).any(|(a, p)| a.answers.len() != p.len()) {
                return Err(InferError::Scorer {
                    backend: format!("{:?}", scorer.identity().backend),
                    message: "returned answers that do not match the prompts".into(),
                });
            }
            for ((j, _, sha, digest), answers) in misses.iter().zip(answered) {
                cache.put(digest, &jobs[*j], sha, &answers)?;
                done.push((*j, answers, true));
            }
        }
        bar.inc(batch.len() as u64);
        Ok(done)
    };

    let batches: Vec<Vec<(usize, ImageAnswers, bool)>> =
        options.pool()?.install(|| mine.par_chunks(BATCH_IMAGES).map(run_batch).collect::<Result<_, _>>())?;
    bar.finish_and_clear();

    let mut report = GenerationReport { answers: vec![None; jobs.len()], cached: 0, computed: 0, cache_problems: Vec::new() };
    for (j, answers, computed) in batches.into_iter().flatten() {
        if computed {
            report.computed += 1;
        } else {
            report.cached += 1;
        }
        report.answers[j] = Some(answers);
    }
    report.cache_problems = cache.take_problems();
    Ok(report)
}
