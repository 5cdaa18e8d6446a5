//! Every image's feature vector from a scorer (see [`super::FeatureDefinition`]), for confident
//! learning's probes: cached per image under a content key (image bytes, scorer, definition) in
//! the score cache's location, so a second run, or a run on another machine sharing a bucket,
//! reads what the first computed. Parallel over passes as scoring is; results in input order.

use base64::Engine;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::runner::{decode_png, read_image, STALE_TEMP_AGE};
use super::store::{CacheLocation, EntryStore};
use super::{FeatureDefinition, ImageInput, ImageJob, InferError, RunOptions, Scorer};
use crate::hashing::sha256_parts;

/// What an entry holds: the vector as little-endian f32 bytes in base64 (a 4,096-wide vector is
/// 22 KB, where JSON numbers would be about twice that).
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    image: String,
    image_sha256: String,
    definition: String,
    dims: usize,
    f32_le_base64: String,
}

/// The feature cache of one definition: one entry per (image, scorer, definition).
#[derive(Debug, Clone)]
pub struct FeatureCache {
    entries: EntryStore,
    definition: FeatureDefinition,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl FeatureCache {
    pub fn open(location: &CacheLocation, definition: FeatureDefinition) -> Result<Self, InferError> {
        Ok(FeatureCache { entries: location.open("features-v1")?, definition })
    }

    /// Which vectors this cache holds.
    pub fn definition(&self) -> FeatureDefinition {
        self.definition
    }

    fn key(&self, image_sha256: &str, scorer_hash: &str) -> String {
        sha256_parts(&["bpals-features/1", image_sha256, scorer_hash, self.definition.name()])
    }

    /// The cached vector, or None on a miss; an entry that fails its check is a miss, reported
    /// in [`Self::take_problems`].
    pub fn get(&self, image_sha256: &str, scorer_hash: &str) -> Result<Option<Vec<f32>>, InferError> {
        let decode = |entry: &Entry| -> Option<Vec<f32>> {
            let bytes = b64().decode(&entry.f32_le_base64).ok()?;
            (bytes.len() == entry.dims * 4 && entry.dims > 0)
                .then(|| bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<f32>>())
        };
        let check = |entry: &Entry| {
            if entry.image_sha256 != image_sha256 {
                return Err((format!("image sha256 {image_sha256}"), entry.image_sha256.clone()));
            }
            if entry.definition != self.definition.name() {
                return Err((format!("features {}", self.definition.name()), entry.definition.clone()));
            }
            match decode(entry) {
                Some(v) if v.iter().all(|x| x.is_finite()) => Ok(()),
                _ => Err((format!("{} finite features", entry.dims), "unreadable or not finite features".into())),
            }
        };
        Ok(self.entries.get(&self.key(image_sha256, scorer_hash), check)?.and_then(|entry: Entry| decode(&entry)))
    }

    pub fn put(&self, image: &str, image_sha256: &str, scorer_hash: &str, values: &[f32]) -> Result<(), InferError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let entry = Entry {
            image: image.to_string(),
            image_sha256: image_sha256.to_string(),
            definition: self.definition.name().to_string(),
            dims: values.len(),
            f32_le_base64: b64().encode(bytes),
        };
        self.entries.put(&self.key(image_sha256, scorer_hash), &entry)
    }

    /// Keeps the vector a scoring pass gave for `job`, checked as a computed one is.
    pub(super) fn keep(
        &self,
        scorer: &dyn Scorer,
        scorer_hash: &str,
        job: &ImageJob,
        image_sha256: &str,
        v: &[f32],
    ) -> Result<(), InferError> {
        check(scorer, job, v)?;
        self.put(&job.name, image_sha256, scorer_hash, v)
    }

    /// Entries that failed their check since the last call, each set aside and computed again.
    pub fn take_problems(&self) -> Vec<super::CacheProblem> {
        self.entries.take_problems()
    }
}

/// Every image's vector, in input order, and where they came from.
#[derive(Debug)]
pub struct FeaturesReport {
    pub vectors: Vec<Vec<f32>>,
    pub computed: usize,
    pub cached: usize,
    pub cache_problems: Vec<super::CacheProblem>,
}

/// The feature vector of each image of `images`, from `cache` where it has it. Every vector has
/// the same length.
pub fn run_features(
    images: &[ImageJob],
    scorer: &dyn Scorer,
    cache: &FeatureCache,
    options: &RunOptions,
) -> Result<FeaturesReport, InferError> {
    let scorer_hash = scorer.identity().hash();
    cache.entries.sweep_stale_temp_files(STALE_TEMP_AGE);
    let bar = options.progress_bar(images.len(), "features");
    let per_pass = scorer.images_per_pass().max(1);
    // Per image: its vector and whether it was computed here.
    let pass = |jobs: &[ImageJob]| -> Result<Vec<(Vec<f32>, bool)>, InferError> {
        let mut out: Vec<Option<(Vec<f32>, bool)>> = Vec::with_capacity(jobs.len());
        let mut misses = Vec::new();
        for job in jobs {
            let (bytes, sha) = read_image(job)?;
            match cache.get(&sha, &scorer_hash)? {
                Some(v) => out.push(Some((v, false))),
                None => {
                    let decoded = decode_png(&bytes, job)?;
                    misses.push((out.len(), job, bytes, sha, decoded));
                    out.push(None);
                }
            }
        }
        if !misses.is_empty() {
            let inputs: Vec<ImageInput<'_>> =
                misses.iter().map(|(_, job, bytes, sha, image)| ImageInput { name: &job.name, sha256: sha, bytes, image }).collect();
            let vectors = scorer.image_features(&inputs, cache.definition)?;
            super::check_feature_count(scorer, vectors.len(), misses.len())?;
            for ((at, job, _, sha, _), v) in misses.iter().zip(vectors) {
                check(scorer, job, &v)?;
                cache.put(&job.name, sha, &scorer_hash, &v)?;
                out[*at] = Some((v, true));
            }
        }
        bar.inc(jobs.len() as u64);
        Ok(out.into_iter().map(|v| v.expect("every image of the pass has its vector")).collect())
    };
    let passes: Vec<Vec<(Vec<f32>, bool)>> = options.pool()?.install(|| images.par_chunks(per_pass).map(pass).collect::<Result<_, _>>())?;
    bar.finish_and_clear();
    let all: Vec<(Vec<f32>, bool)> = passes.into_iter().flatten().collect();
    let computed = all.iter().filter(|(_, fresh)| *fresh).count();
    let vectors: Vec<Vec<f32>> = all.into_iter().map(|(v, _)| v).collect();
    if let Some((job, v)) = images.iter().zip(&vectors).find(|(_, v)| v.len() != vectors[0].len()) {
        return Err(fail(scorer, format!("image {}: {} features where the first image has {}", job.name, v.len(), vectors[0].len())));
    }
    Ok(FeaturesReport { cached: vectors.len() - computed, computed, vectors, cache_problems: cache.take_problems() })
}

fn check(scorer: &dyn Scorer, job: &ImageJob, v: &[f32]) -> Result<(), InferError> {
    if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
        return Err(fail(scorer, format!("image {}: features that are not finite numbers", job.name)));
    }
    Ok(())
}

fn fail(scorer: &dyn Scorer, message: String) -> InferError {
    InferError::Scorer { backend: scorer.identity().backend.name().to_string(), message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::{DecodingSettings, ImageAnswers, ScorerIdentity, YesNo};
    use crate::release_spec::{Backend, Question};

    /// A backend whose features are what a broken one might send: `vector` gives image i's, and
    /// `short` drops the last image's.
    struct Hostile {
        identity: ScorerIdentity,
        vector: fn(usize) -> Vec<f32>,
        short: bool,
    }

    impl Hostile {
        fn new(vector: fn(usize) -> Vec<f32>, short: bool) -> Self {
            let identity = ScorerIdentity {
                backend: Backend::Fixture,
                model_id: "hostile".into(),
                revision: "v1".into(),
                commit: None,
                weights_sha256: None,
                fixture: true,
                preprocessing: serde_json::Value::Null,
                generation: None,
            };
            Hostile { identity, vector, short }
        }
    }

    impl Scorer for Hostile {
        fn identity(&self) -> &ScorerIdentity {
            &self.identity
        }
        fn score(&self, _: &ImageInput<'_>, questions: &[Question]) -> Result<Vec<YesNo>, InferError> {
            Ok(questions.iter().map(|_| YesNo { logit_yes: 0.0, logit_no: 0.0 }).collect())
        }
        fn generate(&self, _: &[ImageInput<'_>], _: &[&[String]], _: &DecodingSettings) -> Result<Vec<ImageAnswers>, InferError> {
            unreachable!("features only")
        }
        fn family(&self) -> &'static str {
            "hostile"
        }
        fn images_per_pass(&self) -> usize {
            4
        }
        fn image_features(&self, images: &[ImageInput<'_>], _: FeatureDefinition) -> Result<Vec<Vec<f32>>, InferError> {
            let keep = images.len() - usize::from(self.short);
            Ok((0..keep).map(self.vector).collect())
        }
    }

    /// Three tiny PNGs, and the jobs that read them.
    fn images(dir: &std::path::Path) -> Vec<ImageJob> {
        (0..3u8)
            .map(|i| {
                let path = dir.join(format!("{i:08}_000.png"));
                image::GrayImage::from_pixel(4, 4, image::Luma([i * 40])).save(&path).unwrap();
                ImageJob { name: format!("{i:08}_000.png"), path }
            })
            .collect()
    }

    fn features_of(scorer: &Hostile) -> Result<FeaturesReport, InferError> {
        let dir = tempfile::tempdir().unwrap();
        let jobs = images(dir.path());
        let cache = FeatureCache::open(&CacheLocation::Dir(dir.path().join("cache")), FeatureDefinition::VisionTowerMean).unwrap();
        run_features(&jobs, scorer, &cache, &RunOptions { jobs: 1, shard: None, progress: false })
    }

    #[test]
    fn a_backends_bad_features_are_refused_naming_the_image() {
        let honest = features_of(&Hostile::new(|i| vec![i as f32, 1.0], false)).unwrap();
        assert_eq!((honest.vectors.len(), honest.computed), (3, 3));

        let nan = features_of(&Hostile::new(|i| if i == 1 { vec![f32::NAN, 1.0] } else { vec![0.0, 1.0] }, false));
        let message = nan.unwrap_err().to_string();
        assert!(message.contains("00000001_000.png") && message.contains("not finite"), "{message}");

        let ragged = features_of(&Hostile::new(|i| vec![0.0; 2 + i], false));
        let message = ragged.unwrap_err().to_string();
        assert!(message.contains("00000001_000.png: 3 features where the first image has 2"), "{message}");

        let short = features_of(&Hostile::new(|_| vec![0.0, 1.0], true));
        let message = short.unwrap_err().to_string();
        assert!(message.contains("returned features for 2 images of a pass of 3"), "{message}");

        let empty = features_of(&Hostile::new(|_| Vec::new(), false));
        assert!(empty.unwrap_err().to_string().contains("not finite"));
    }
}
