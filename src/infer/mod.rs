//! Inference: yes/no scores per image and question, behind the [`Scorer`] interface, cached per
//! image under a content key so that sharded runs on many machines merge into one build.

mod cache;
mod features;
mod fixture;
mod generation;
#[cfg(feature = "vlm")]
mod native;
pub mod openai;
mod runner;
mod shard;
mod store;

use image::DynamicImage;
use serde::Serialize;

pub use cache::{CacheKey, ScoreCache};
pub use features::{run_features, FeatureCache, FeaturesReport};
pub use fixture::FixtureScorer;
pub use generation::{
    count_cached_answers, run_generation, Answer, DecodingSettings, GenerationCache, GenerationJob, GenerationReport, ImageAnswers,
    BATCH_IMAGES,
};
pub use runner::{count_cached, run, ImageJob, InferReport, RunOptions};
pub use shard::{parse_shard, shard_from_scheduler, shard_of, ShardSpec, SCHEDULER_INDEX_VARS};
pub use store::{CacheLocation, CacheProblem};

use crate::hashing::sha256_json;
use crate::release_spec::{Backend, ModelSpec, Question};

pub use bpals_vlm::YesNo;

/// All question scores of one image, in prompt-set order.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageScores {
    pub image_sha256: String,
    pub scores: Vec<YesNo>,
}

/// What produced the scores; recorded in the manifest, build.lock and the card.
#[derive(Debug, Clone, Serialize)]
pub struct ScorerIdentity {
    pub backend: Backend,
    pub model_id: String,
    pub revision: String,
    /// The commit of a model fetched from the Hub (the snapshot it was loaded from); absent for
    /// a local `model.path` and the fixture scorer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Hash of the weights, when the backend has any.
    pub weights_sha256: Option<String>,
    /// True for stand-ins (the fixture scorer): never publishable.
    pub fixture: bool,
    /// Everything about preprocessing that changes the scores.
    pub preprocessing: serde_json::Value,
    /// What generated answers read besides a score's inputs (the engine's
    /// `generation_config.json`, which says where an answer stops): recorded in build.lock and
    /// in the generation stages' keys, kept out of the score cache key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<serde_json::Value>,
}

impl ScorerIdentity {
    /// The key of everything that shapes a score (the score cache, the infer stage).
    pub fn hash(&self) -> String {
        if self.generation.is_none() {
            return sha256_json(self);
        }
        sha256_json(&ScorerIdentity { generation: None, ..self.clone() })
    }

    /// The key of everything that shapes a generated answer: the score's inputs and the
    /// generation-only ones (the same as [`Self::hash`] for a scorer without any).
    pub fn generation_hash(&self) -> String {
        sha256_json(self)
    }
}

/// One image handed to a scorer: its file's bytes, decoded, with their content hash.
pub struct ImageInput<'a> {
    pub name: &'a str,
    pub sha256: &'a str,
    /// The PNG as read (what a served model is sent).
    pub bytes: &'a [u8],
    pub image: &'a DynamicImage,
}

#[derive(Debug, thiserror::Error)]
pub enum InferError {
    #[error("image {}: cannot read", path.display())]
    ImageRead {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("image {}: not a readable PNG (truncated or corrupt?)", path.display())]
    ImageDecode {
        path: std::path::PathBuf,
        #[source]
        source: image::ImageError,
    },
    #[error("the {backend} engine: {context}")]
    Engine {
        backend: String,
        context: String,
        #[source]
        source: Box<bpals_vlm::VlmError>,
    },
    #[error("{}", path.display())]
    File {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("score cache {location}")]
    Cache {
        location: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("scorer {backend}: {message}")]
    Scorer { backend: String, message: String },
    /// A NaN or infinite logit: refused where it is made, before any row is written.
    #[error(transparent)]
    NonFinite(Box<NonFiniteScore>),
    #[error("{0}")]
    Shard(String),
    #[error("inference was interrupted")]
    Interrupted,
    #[error(transparent)]
    Model(#[from] crate::hub::HubError),
}

/// A NaN or an infinite logit, with what it answered and what to change. Boxed in
/// [`InferError`], which every scorer returns, so that the common errors stay small.
#[derive(Debug, thiserror::Error)]
#[error(
    "image {image}, question {question_id} ({question:?}): model {model} ({backend} backend) answered logit_yes {logit_yes}, \
     logit_no {logit_no}, not finite numbers; nothing was written. {advice}"
)]
pub struct NonFiniteScore {
    pub image: String,
    pub question_id: String,
    pub question: String,
    pub model: String,
    pub backend: String,
    pub logit_yes: f32,
    pub logit_no: f32,
    /// Where such a number comes from, and what to change: the spec's dtype for the engine,
    /// the server for a served model.
    pub advice: &'static str,
}

/// The first non-finite score of `scores` as an error naming the image, the question and the
/// model; every scorer's answers pass through it before they are cached or written.
pub fn check_finite(identity: &ScorerIdentity, image: &str, questions: &[Question], scores: &[YesNo]) -> Result<(), InferError> {
    match questions.iter().zip(scores).find(|(_, s)| !s.is_finite()) {
        None => Ok(()),
        Some((q, s)) => Err(InferError::NonFinite(Box::new(NonFiniteScore {
            image: image.to_string(),
            question_id: q.id.clone(),
            question: q.text.clone(),
            model: identity.model_id.clone(),
            backend: identity.backend.name().to_string(),
            logit_yes: s.logit_yes,
            logit_no: s.logit_no,
            advice: match identity.backend {
                Backend::Openai => {
                    "The server sent it: a broken model, or an overflow in the 16-bit floats it serves in (serve the model \
                     in bf16 or f32)"
                }
                _ => "A NaN or an infinity comes from broken weights or from an overflow in 16-bit floats (try model.dtype bf16 or f32)",
            },
        }))),
    }
}

/// A scorer gives one feature vector an image of its pass: the scoring pass that keeps them and
/// a features pass both hold it to that.
fn check_feature_count(scorer: &dyn Scorer, got: usize, asked: usize) -> Result<(), InferError> {
    if got != asked {
        return Err(InferError::Scorer {
            backend: scorer.identity().backend.name().to_string(),
            message: format!("returned features for {got} images of a pass of {asked}"),
        });
    }
    Ok(())
}

/// A pass's scores per image, and each image's feature vector where the scorer kept them.
pub type ScoresAndFeatures = (Vec<Vec<YesNo>>, Option<Vec<Vec<f32>>>);

/// A VLM (or stand-in) that answers yes/no questions about one image.
pub trait Scorer: Sync {
    fn identity(&self) -> &ScorerIdentity;
    /// One score per question, in the order given.
    fn score(&self, image: &ImageInput<'_>, questions: &[Question]) -> Result<Vec<YesNo>, InferError>;
    /// How many images [`Self::score_pass`] takes at once: the runner hands it passes of this
    /// many (fewer where the cache had some).
    fn images_per_pass(&self) -> usize {
        1
    }
    /// [`Self::score`] for each image of a pass, in the order given; an image's scores must not
    /// depend on what else is in its pass.
    fn score_pass(&self, images: &[ImageInput<'_>], questions: &[Question]) -> Result<Vec<Vec<YesNo>>, InferError> {
        images.iter().map(|image| self.score(image, questions)).collect()
    }
    /// [`Self::score_pass`], and each image's feature vector (as `definition` says) where the
    /// backend has it in hand from the same pass (the native engine's vision tower output): no
    /// second pass over the images for confident learning. None where it has not; the vectors
    /// must be the bits [`Self::image_features`] gives.
    fn score_pass_with_features(
        &self,
        images: &[ImageInput<'_>],
        questions: &[Question],
        definition: FeatureDefinition,
    ) -> Result<ScoresAndFeatures, InferError> {
        let _ = definition;
        Ok((self.score_pass(images, questions)?, None))
    }
    /// Greedy answers to each image's prompts (`prompts[i]` for `images[i]`), decoded together.
    fn generate(
        &self,
        images: &[ImageInput<'_>],
        prompts: &[&[String]],
        settings: &DecodingSettings,
    ) -> Result<Vec<ImageAnswers>, InferError>;
    /// The model family, as `prompts.location.ground` names it: which grounding prompt and box
    /// format apply.
    fn family(&self) -> &'static str;
    /// What opening the scorer found worth saying (a digest cache entry that failed its check).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// One feature vector per image, for confident learning's probes, as `definition` says. A
    /// backend that has none says so.
    fn image_features(&self, images: &[ImageInput<'_>], definition: FeatureDefinition) -> Result<Vec<Vec<f32>>, InferError> {
        let _ = (images, definition);
        Err(InferError::Scorer {
            backend: self.identity().backend.name().into(),
            message: "a served model returns no image features: bring a features file made elsewhere (`label-issues --features`)".into(),
        })
    }
}

/// What an image's feature vector is (the spec's `signal.confident_learning.features`).
pub use crate::release_spec::FeatureDefinition;

/// What a libtorch-free binary says when asked to run the VLM engine.
pub const NO_VLM_FEATURE: &str = "this binary was built without the `vlm` feature (no libtorch): run the command through \
     scripts/bpals-release, which sets up libtorch and builds with `--features vlm`";

/// How a build may reach a model that is not on this machine yet.
#[derive(Debug, Clone, Copy)]
pub struct ModelAccess {
    pub offline: bool,
    pub progress: bool,
}

/// The spec's model with its directory filled in: `model.path`, or the Hugging Face cache's
/// snapshot of `id`@`revision`, fetched into the cache first when it is missing (unless
/// offline). The commit the snapshot holds goes into the scorer's identity, so build.lock pins it.
pub fn locate_model(model: &ModelSpec, access: &ModelAccess) -> Result<ModelSpec, InferError> {
    if !model.backend.is_native() || model.dir.is_some() {
        return Ok(model.clone());
    }
    let fail = |message: String| InferError::Scorer { backend: model.backend.name().into(), message };
    if !cfg!(feature = "vlm") {
        return Err(fail(NO_VLM_FEATURE.into())); // before downloading gigabytes it cannot run
    }
    let snapshot = crate::hub::model::locate(&model.id, &model.revision, access.offline, access.progress)?;
    Ok(ModelSpec { dir: Some(snapshot.dir), commit: Some(snapshot.commit), ..model.clone() })
}

/// The scorer a spec names, its model located (see [`locate_model`]). `cache_root` also keeps
/// the weights' digests, so a checkpoint is hashed once (every time with `rehash_weights`); `workers` is how many threads will
/// score at once.
#[cfg_attr(not(feature = "vlm"), allow(unused_variables))]
pub fn scorer_for(
    model: &ModelSpec,
    cache_root: &std::path::Path,
    rehash_weights: bool,
    workers: usize,
) -> Result<Box<dyn Scorer>, InferError> {
    match model.backend {
        Backend::Fixture => Ok(Box::new(FixtureScorer::new(model))),
        Backend::Openai => Ok(Box::new(openai::OpenAiScorer::connect(model)?)),
        #[cfg(feature = "vlm")]
        Backend::Native | Backend::Qwen2vl => {
            let dir = model.dir.as_ref().ok_or_else(|| InferError::Scorer {
                backend: model.backend.name().into(),
                message: "the model has not been located".into(),
            })?;
            Ok(Box::new(native::NativeScorer::open(
                model,
                dir,
                &crate::hashing::DigestCache::new(cache_root).rehashing(rehash_weights),
                workers,
            )?))
        }
        #[cfg(not(feature = "vlm"))]
        Backend::Native | Backend::Qwen2vl => {
            Err(InferError::Scorer { backend: model.backend.name().into(), message: NO_VLM_FEATURE.into() })
        }
    }
}
