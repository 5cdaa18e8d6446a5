//! Runs a scorer over images: hash, look up the cache, decode and score the misses, store.
//! Parallel over images; results come back in input order whatever the thread count.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use super::shard::{shard_of, ShardSpec};
use super::{CacheKey, ImageInput, ImageScores, InferError, ScoreCache, Scorer};
use crate::hashing::sha256_hex;
use crate::release_spec::Question;

/// One image to score.
#[derive(Debug, Clone)]
pub struct ImageJob {
    pub name: String,
    pub path: PathBuf,
}

pub struct RunOptions {
    pub jobs: usize,
    pub shard: Option<ShardSpec>,
    pub progress: bool,
}

impl RunOptions {
    /// Whether this run's shard holds the image.
    pub(super) fn covers(&self, image: &str) -> bool {
        self.shard.is_none_or(|s| shard_of(image, s.count) == s.index)
    }

    /// A progress bar over `len` images, `verb` ("scoring") at its left; hidden without --progress.
    pub(super) fn progress_bar(&self, len: usize, verb: &str) -> ProgressBar {
        let bar = if self.progress { ProgressBar::new(len as u64) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template(&format!("{verb} {{bar:30}} {{pos}}/{{len}} images  {{per_sec}}  eta {{eta}}"))
                .expect("a valid template"),
        );
        bar
    }

    /// The thread pool of `--jobs` workers.
    pub(super) fn pool(&self) -> Result<rayon::ThreadPool, InferError> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(self.jobs.max(1))
            .build()
            .map_err(|e| InferError::Scorer { backend: "runner".into(), message: e.to_string() })
    }
}

#[derive(Debug)]
pub struct InferReport {
    /// Scores per input image, None for images outside this run's shard.
    pub scores: Vec<Option<ImageScores>>,
    pub cached: usize,
    pub computed: usize,
    /// Images whose feature vectors the scoring pass gave and the feature cache now holds.
    pub features_kept: usize,
    /// Cache entries that failed their check (set aside, scored again).
    pub cache_problems: Vec<super::CacheProblem>,
}

enum Outcome {
    Skipped,
    Cached(ImageScores),
    /// Scored here; whether the pass's feature vector was kept.
    Computed(ImageScores, bool),
}

/// Cache temp files older than this were left by a killed run.
pub(super) const STALE_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Scores every image of `images` this run covers, from `cache` where it has them. With
/// `features`, the images scored here keep the feature vectors their pass gives (where the
/// scorer gives them) in that cache, for confident learning.
pub fn run(
    images: &[ImageJob],
    scorer: &dyn Scorer,
    questions: &[Question],
    questions_hash: &str,
    cache: &ScoreCache,
    features: Option<&super::FeatureCache>,
    options: &RunOptions,
) -> Result<InferReport, InferError> {
    let scorer_hash = scorer.identity().hash();
    cache.sweep_stale_temp_files(STALE_TEMP_AGE);
    let question_ids: Vec<String> = questions.iter().map(|q| q.id.clone()).collect();
    let bar = options.progress_bar(images.iter().filter(|j| options.covers(&j.name)).count(), "scoring");

    // Images go to the scorer in passes of its size (one, or several on a GPU), taken in input
    // order; the workers read, hash and decode a pass's images while another pass is on the
    // device. Cached images leave a pass short: the engine pads every pass to one shape, so an
    // image's scores never depend on what shares its pass.
    let per_pass = scorer.images_per_pass().max(1);
    let score_pass = |jobs: &[&ImageJob]| -> Result<Vec<Outcome>, InferError> {
        let mut outcomes = Vec::with_capacity(jobs.len());
        let mut misses = Vec::new();
        for &job in jobs {
            let (bytes, key) = read_keyed(job, &scorer_hash, questions_hash)?;
            if let Some(scores) = cache.get(&key, &question_ids)? {
                outcomes.push(Outcome::Cached(ImageScores { image_sha256: key.image_sha256, scores }));
                bar.inc(1);
            } else {
                let decoded = decode_png(&bytes, job)?;
                misses.push((outcomes.len(), job, bytes, key, decoded));
                outcomes.push(Outcome::Skipped); // replaced below
            }
        }
        if misses.is_empty() {
            return Ok(outcomes);
        }
        let inputs: Vec<ImageInput<'_>> = misses
            .iter()
            .map(|(_, job, bytes, key, decoded)| ImageInput { name: &job.name, sha256: &key.image_sha256, bytes, image: decoded })
            .collect();
        let (scored, vectors) = match features {
            Some(features) => scorer.score_pass_with_features(&inputs, questions, features.definition())?,
            None => (scorer.score_pass(&inputs, questions)?, None),
        };
        let mut kept = vec![false; inputs.len()];
        if let (Some(features), Some(vectors)) = (features, vectors) {
            super::check_feature_count(scorer, vectors.len(), inputs.len())?;
            for (((_, job, _, key, _), v), kept) in misses.iter().zip(vectors).zip(&mut kept) {
                features.keep(scorer, &scorer_hash, job, &key.image_sha256, &v)?;
                *kept = true;
            }
        }
        if scored.len() != inputs.len() {
            return Err(InferError::Scorer {
                backend: format!("{:?}", scorer.identity().backend),
                message: format!("returned scores for {} images of a pass of {}", scored.len(), inputs.len()),
            });
        }
        for (((at, job, _, key, _), scores), kept) in misses.into_iter().zip(scored).zip(kept) {
            if scores.len() != questions.len() {
                return Err(InferError::Scorer {
                    backend: format!("{:?}", scorer.identity().backend),
                    message: format!("returned {} scores for {} questions", scores.len(), questions.len()),
                });
            }
            super::check_finite(scorer.identity(), &job.name, questions, &scores)?;
            cache.put(&key, &job.name, &question_ids, &scores)?;
            outcomes[at] = Outcome::Computed(ImageScores { image_sha256: key.image_sha256, scores }, kept);
            bar.inc(1);
        }
        Ok(outcomes)
    };

    // Passes of this run's shard only, so a shard's passes are as full as a whole run's.
    let covered: Vec<&ImageJob> = images.iter().filter(|j| options.covers(&j.name)).collect();
    let passes: Vec<Vec<Outcome>> = options.pool()?.install(|| covered.par_chunks(per_pass).map(score_pass).collect::<Result<_, _>>())?;
    let mut scored = passes.into_iter().flatten();
    let outcomes: Vec<Outcome> = images
        .iter()
        .map(|j| if options.covers(&j.name) { scored.next().expect("one per covered image") } else { Outcome::Skipped })
        .collect();
    bar.finish_and_clear();

    let mut report = InferReport {
        scores: Vec::with_capacity(images.len()),
        cached: 0,
        computed: 0,
        features_kept: 0,
        cache_problems: cache.take_problems(),
    };
    for outcome in outcomes {
        report.scores.push(match outcome {
            Outcome::Skipped => None,
            Outcome::Cached(s) => {
                report.cached += 1;
                Some(s)
            }
            Outcome::Computed(s, kept) => {
                report.computed += 1;
                report.features_kept += usize::from(kept);
                Some(s)
            }
        });
    }
    Ok(report)
}

/// An image's bytes, decoded as the PNG they must be.
pub(super) fn decode_png(bytes: &[u8], job: &ImageJob) -> Result<image::DynamicImage, InferError> {
    image::load_from_memory_with_format(bytes, image::ImageFormat::Png)
        .map_err(|source| InferError::ImageDecode { path: job.path.clone(), source })
}

/// An image's bytes and their sha256.
pub(super) fn read_image(job: &ImageJob) -> Result<(Vec<u8>, String), InferError> {
    let bytes = crate::files::regular::read(&job.path, crate::files::regular::IMAGE)
        .map_err(|source| InferError::ImageRead { path: job.path.clone(), source })?;
    let sha = sha256_hex(&bytes);
    Ok((bytes, sha))
}

/// An image's bytes and its cache key.
fn read_keyed(job: &ImageJob, scorer_hash: &str, questions_hash: &str) -> Result<(Vec<u8>, CacheKey), InferError> {
    let (bytes, image_sha256) = read_image(job)?;
    let key = CacheKey { image_sha256, scorer_hash: scorer_hash.to_string(), questions_hash: questions_hash.to_string() };
    Ok((bytes, key))
}

/// How many of the images already have cached scores (reads and hashes every image, scores none).
pub fn count_cached(images: &[ImageJob], scorer: &dyn Scorer, questions_hash: &str, cache: &ScoreCache) -> Result<usize, InferError> {
    let scorer_hash = scorer.identity().hash();
    images
        .par_iter()
        .try_fold(|| 0usize, |n, job| Ok(n + usize::from(cache.contains(&read_keyed(job, &scorer_hash, questions_hash)?.1)?)))
        .try_reduce(|| 0, |a, b| Ok(a + b))
}
