//! The `native` scorer (`qwen2vl` is its older name): the native engine, any family it runs,
//! behind the pipeline's [`Scorer`] interface. Per image: preprocess, run the vision tower once, then score every
//! question over the shared image prefix.
//!
//! libtorch tensors are not `Sync`, so each engine sits behind a mutex. On the CPU every worker
//! gets an engine of its own (the models that run there are small), each running libtorch
//! single-threaded, so the scores never depend on `--jobs`; on a GPU one engine serves all.

use std::collections::hash_map::{Entry, HashMap};
use std::path::Path;
use std::sync::Mutex;

use super::{Answer, DecodingSettings, FeatureDefinition, ImageAnswers, ImageInput, InferError, Scorer, ScorerIdentity, YesNo};
use crate::hashing::DigestCache;
use crate::release_spec::{ModelSpec, Question};
use bpals_vlm::engine::{DeviceChoice, DtypeChoice, Engine, EngineOptions};
use bpals_vlm::generate::{GenerationImage, GenerationPrompt};
use bpals_vlm::model::{PassImage, PromptImage};
use bpals_vlm::shared_prefix::PrefixAttention;
use bpals_vlm::{pixels, Thinking};

pub struct NativeScorer {
    identity: ScorerIdentity,
    engines: Vec<Mutex<Loaded>>,
    /// The token ids of "Yes" and "No", read once from the tokenizer.
    answer: (u32, u32),
    /// What resizing and normalising an image needs, kept outside the engines so that it runs
    /// before one is taken: on a GPU, where one engine serves every worker, the engine then
    /// never waits for another image's CPU work.
    pixels: PixelSettings,
    family: bpals_vlm::Family,
    /// Images scored in one pass (`model.images_per_pass`).
    images_per_pass: usize,
    /// Digest cache entries that failed their check while the weights were hashed.
    notes: Vec<String>,
}

struct PixelSettings {
    preprocessor: bpals_vlm::PreprocessorConfig,
    device: tch::Device,
}

struct Loaded {
    engine: Engine,
    /// Token ids of every question's prompt, per image grid and question set: images of one
    /// size share them, and on a small model rendering and tokenizing the prompts costs more
    /// than scoring them.
    prompts: HashMap<PromptKey, Vec<Vec<u32>>>,
}

/// An image's patch grid (t, h, w) and a hash of the question texts.
type PromptKey = ((usize, usize, usize), u64);

fn err(message: impl std::fmt::Display) -> InferError {
    InferError::Scorer { backend: "native".into(), message: message.to_string() }
}

/// An engine error, with what the scorer was doing.
fn engine_err(context: impl std::fmt::Display) -> impl FnOnce(bpals_vlm::VlmError) -> InferError {
    move |source| InferError::Engine { backend: "native".into(), context: context.to_string(), source: Box::new(source) }
}

impl NativeScorer {
    /// `workers`: how many threads will call `score` at once (engines loaded on the CPU).
    pub fn open(model: &ModelSpec, dir: &Path, digests: &DigestCache, workers: usize) -> Result<NativeScorer, InferError> {
        let options = EngineOptions {
            device: match model.device {
                crate::release_spec::DevicePolicy::Auto => DeviceChoice::Auto,
                crate::release_spec::DevicePolicy::Cpu => DeviceChoice::Cpu,
                crate::release_spec::DevicePolicy::Cuda => DeviceChoice::Cuda,
            },
            dtype: match model.dtype {
                crate::release_spec::Dtype::Auto => DtypeChoice::Auto,
                crate::release_spec::Dtype::F32 => DtypeChoice::F32,
                crate::release_spec::Dtype::Bf16 => DtypeChoice::Bf16,
                crate::release_spec::Dtype::F16 => DtypeChoice::F16,
            },
            min_pixels: model.min_pixels,
            max_pixels: model.max_pixels,
            allow_cpu: false,
        };
        let open_engine = || -> Result<Loaded, InferError> {
            let engine = Engine::open(dir, &options).map_err(engine_err(format!("opening model {}", dir.display())))?;
            Ok(Loaded { engine, prompts: HashMap::new() })
        };
        let first = open_engine()?;
        let engine = &first.engine;
        let (weights_sha256, mut notes) = weights_digest(&engine.dir.weights, digests)?;
        let answer = engine.dir.answer_token_ids().map_err(engine_err("the answer tokens"))?;
        let p = &engine.dir.preprocessor;
        let digest = |name: &str| file_sha256(&engine.dir.path.join(name));
        let mut preprocessing = serde_json::json!({
            "family": engine.dir.config.family,
            "device": if engine.model.device == tch::Device::Cpu { "cpu" } else { "cuda" },
            "dtype": format!("{:?}", engine.model.kind),
            "min_pixels": p.min_pixels,
            "max_pixels": p.max_pixels,
            "patch_size": p.patch_size,
            "merge_size": p.merge_size,
            "image_mean": p.image_mean,
            "image_std": p.image_std,
            "rescale_factor": p.rescale_factor,
            "chat_template_sha256": crate::hashing::sha256_hex(engine.dir.chat_template.as_bytes()),
            "tokenizer_sha256": digest("tokenizer.json")?,
            // Every other file the engine reads for a score, whole: an edited rope_theta or
            // rms_norm_eps changes every score, and an edited resize bound changes what the model sees.
            "config_sha256": digest("config.json")?,
            "preprocessor_config_sha256": file_sha256(&engine.dir.preprocessor_file)?,
        });
        // On the CPU the kernel pins in force shape every bit (`bpals_vlm::cpu_kernels`): scores made
        // under other pins are another scorer's, and a rebuild must repeat these.
        if engine.model.device == tch::Device::Cpu {
            preprocessing["cpu_kernels"] = bpals_vlm::cpu_kernels::identity();
            let unpinned = bpals_vlm::cpu_kernels::unpinned(&preprocessing["cpu_kernels"]);
            if !unpinned.is_empty() {
                notes.push(format!(
                    "the CPU kernels are not the engine's pinned ones ({}): these scores repeat only under the same settings on a \
                     processor that takes the same branches; unset them for scores every x86-64 machine repeats",
                    unpinned.join(", ")
                ));
            }
        }
        // Gemma 4's processor sizes images its own way (the Qwen identities stay as they were).
        if p.sizing != bpals_vlm::config::ImageSizing::SmartResize {
            preprocessing["image_sizing"] = serde_json::to_value(p.sizing).expect("plain data");
        }
        // The variables the scores' prompts were rendered with, where the template reads any (a
        // template without a switch keeps the identity it always had).
        let variables = engine.dir.template.variables(Thinking::Off);
        if !variables.is_empty() {
            preprocessing["chat_template_variables"] = variables.into();
        }
        // Every family scores with the image prefix held once (through the fused kernel on a
        // GPU), in passes of `images_per_pass` images, by the engine's arithmetic of this
        // revision: each shapes the last bits of a score, so each is in the identity (scores
        // made another way are another scorer's).
        let device = engine.model.device;
        // The engine's own CUDA kernels, where asked for, load now: a missing cubin or driver
        // stops the build here, before any image is scored.
        if let Some(Err(e)) = bpals_vlm::cuda_kernels::for_device(device) {
            return Err(InferError::Scorer { backend: "native".into(), message: format!("{}: {e}", bpals_vlm::cuda_kernels::ENV) });
        }
        preprocessing["scoring"] = serde_json::json!({
            "prefix": PrefixAttention::for_device(device).name(),
            "images_per_pass": model.images_per_pass,
            "arithmetic": bpals_vlm::arithmetic::revision(device.is_cuda()),
        });
        let identity = ScorerIdentity {
            backend: model.backend,
            model_id: model.id.clone(),
            revision: model.revision.clone(),
            commit: model.commit.clone(),
            weights_sha256: Some(weights_sha256),
            fixture: false,
            preprocessing,
            generation: generation_inputs(&engine.dir.path)?,
        };
        let pixels = PixelSettings { preprocessor: p.clone(), device: engine.model.device };
        let family = engine.dir.config.family;
        let replicas = if engine.model.device == tch::Device::Cpu { workers.max(1) } else { 1 };
        let mut engines = vec![Mutex::new(first)];
        for _ in 1..replicas {
            engines.push(Mutex::new(open_engine()?));
        }
        Ok(NativeScorer { identity, engines, answer, pixels, family, images_per_pass: model.images_per_pass, notes })
    }
}

/// One digest over every weight file, in order (each file's own digest cached, so a
/// multi-gigabyte checkpoint is read once, not on every build), and what the digest cache got
/// wrong.
fn weights_digest(files: &[std::path::PathBuf], digests: &DigestCache) -> Result<(String, Vec<String>), InferError> {
    let (mut parts, mut notes) = (Vec::new(), Vec::new());
    for f in files {
        let found = digests.sha256_file(f).map_err(|source| InferError::File { path: f.clone(), source })?;
        parts.push(found.sha256);
        notes.extend(found.problem);
    }
    Ok((crate::hashing::sha256_parts(&parts.iter().map(String::as_str).collect::<Vec<_>>()), notes))
}

/// An image's pixel values and its patch grid (t, h, w), as the engine takes them.
type Pixels = (tch::Tensor, (usize, usize, usize));

impl NativeScorer {
    /// Each image's pixel values and patch grid, on the engine's device. On the CPU it first pins
    /// libtorch to one thread on this worker: the count is per calling thread (OpenMP), and a
    /// different count can change the last bits of a sum.
    fn pixel_values(&self, images: &[ImageInput<'_>]) -> Result<Vec<Pixels>, InferError> {
        if self.pixels.device == tch::Device::Cpu {
            tch::set_num_threads(1);
        }
        let PixelSettings { preprocessor, device } = &self.pixels;
        images
            .iter()
            .map(|image| pixels::pixel_values(image.image, preprocessor, *device).map_err(engine_err(format!("image {}", image.name))))
            .collect()
    }

    /// This worker's engine: each pool thread has its own on the CPU; on a GPU all share the one.
    fn engine(&self) -> Result<std::sync::MutexGuard<'_, Loaded>, InferError> {
        let slot = rayon::current_thread_index().unwrap_or(0) % self.engines.len();
        self.engines[slot].lock().map_err(|_| err("the engine panicked on an earlier image"))
    }

    /// The scores of a pass, and with `keep` each image's feature vector, from the vision tower's
    /// output the pass computed anyway.
    fn score_pass_keeping(
        &self,
        images: &[ImageInput<'_>],
        questions: &[Question],
        keep: Option<FeatureDefinition>,
    ) -> Result<super::ScoresAndFeatures, InferError> {
        let prepared = self.pixel_values(images)?;

        let names = images.iter().map(|i| i.name).collect::<Vec<_>>().join(", ");
        let mut loaded = self.engine()?;
        let Loaded { engine, prompts } = &mut *loaded;
        let inputs: Vec<_> = prepared.iter().map(|(values, grid)| (values, *grid)).collect();
        let features = engine.model.encode_pass(&inputs, self.images_per_pass);
        // One pass per prompt section: S1's label and device questions, then S2's location and
        // sign questions (their ids hold a '/'). A pass's shapes follow its questions, and the
        // last bits of a score follow the shapes, so S1's questions are scored as an S1 build
        // scores them and an S2 release keeps S1's values exactly.
        let mut scores: Vec<Vec<YesNo>> = images.iter().map(|_| Vec::with_capacity(questions.len())).collect();
        for section in questions.chunk_by(|a, b| a.id.contains('/') == b.id.contains('/')) {
            let texts: Vec<&str> = section.iter().map(|q| q.text.as_str()).collect();
            let keys = rendered_prompts(engine, prompts, &prepared, &texts)?;
            let pass: Vec<PassImage<'_>> =
                features.iter().zip(&keys).map(|(f, key)| PassImage { prompts: &prompts[key], features: f, grid: key.0 }).collect();
            let section_scores =
                engine.model.score_pass(&pass, self.answer, self.images_per_pass).map_err(engine_err(format!("image {names}")))?;
            for (all, part) in scores.iter_mut().zip(section_scores) {
                all.extend(part);
            }
        }
        let kept = keep
            .map(|definition| feature_vectors(engine, prompts, images, &features, &prepared, definition, self.images_per_pass))
            .transpose()?;
        Ok((scores, kept))
    }
}

impl Scorer for NativeScorer {
    fn identity(&self) -> &ScorerIdentity {
        &self.identity
    }

    fn score(&self, image: &ImageInput<'_>, questions: &[Question]) -> Result<Vec<YesNo>, InferError> {
        Ok(self.score_pass(std::slice::from_ref(image), questions)?.remove(0))
    }

    fn images_per_pass(&self) -> usize {
        self.images_per_pass
    }

    fn score_pass(&self, images: &[ImageInput<'_>], questions: &[Question]) -> Result<Vec<Vec<YesNo>>, InferError> {
        Ok(self.score_pass_keeping(images, questions, None)?.0)
    }

    fn score_pass_with_features(
        &self,
        images: &[ImageInput<'_>],
        questions: &[Question],
        definition: FeatureDefinition,
    ) -> Result<super::ScoresAndFeatures, InferError> {
        self.score_pass_keeping(images, questions, Some(definition))
    }

    fn generate(
        &self,
        images: &[ImageInput<'_>],
        prompts: &[&[String]],
        settings: &DecodingSettings,
    ) -> Result<Vec<ImageAnswers>, InferError> {
        let pixel_values = self.pixel_values(images)?;
        let loaded = self.engine()?;
        let engine = &loaded.engine;
        let features: Vec<bpals_vlm::ImageFeatures> =
            pixel_values.iter().map(|(values, grid)| engine.model.encode_image(values, *grid)).collect();
        let mut rendered = Vec::new();
        for (i, ((_, grid), texts)) in pixel_values.iter().zip(prompts).enumerate() {
            for text in texts.iter() {
                rendered.push((i, engine.dir.prompt(text, *grid, settings.thinking).map_err(engine_err("the generation prompts"))?));
            }
        }
        let batch: Vec<GenerationImage> =
            features.iter().zip(&pixel_values).map(|(f, (_, grid))| GenerationImage { features: f, grid: *grid }).collect();
        let requests: Vec<GenerationPrompt> = rendered.iter().map(|(i, p)| GenerationPrompt { image: *i, ids: &p.input_ids }).collect();
        let names: Vec<&str> = images.iter().map(|i| i.name).collect();
        let generated = engine
            .model
            .generate_batch(&batch, &requests, settings.max_new_tokens, &engine.dir.stop_token_ids())
            .map_err(engine_err(format!("generating for {}", names.join(", "))))?;
        let mut generated = generated.into_iter().zip(&rendered);
        let patch = engine.dir.preprocessor.patch_size;
        let mut out = Vec::with_capacity(images.len());
        for ((image, (_, grid)), texts) in images.iter().zip(&pixel_values).zip(prompts) {
            let mut answers = Vec::with_capacity(texts.len());
            for (g, (_, prompt)) in generated.by_ref().take(texts.len()) {
                let text = engine.dir.answer_text(prompt, &g.tokens).map_err(engine_err(format!("image {}", image.name)))?;
                answers.push(Answer { text, new_tokens: g.tokens.len(), truncated: g.truncated });
            }
            out.push(ImageAnswers {
                original: (image.image.width(), image.image.height()),
                resized: (grid.1 * patch, grid.2 * patch),
                answers,
            });
        }
        Ok(out)
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn image_features(&self, images: &[ImageInput<'_>], definition: FeatureDefinition) -> Result<Vec<Vec<f32>>, InferError> {
        let prepared = self.pixel_values(images)?;
        let mut loaded = self.engine()?;
        let Loaded { engine, prompts } = &mut *loaded;
        let inputs: Vec<_> = prepared.iter().map(|(values, grid)| (values, *grid)).collect();
        let features = engine.model.encode_pass(&inputs, self.images_per_pass);
        feature_vectors(engine, prompts, images, &features, &prepared, definition, self.images_per_pass)
    }

    fn family(&self) -> &'static str {
        self.family.name()
    }
}

/// The question a prompt is rendered with where only its image's prefix runs
/// ([`FeatureDefinition::DecoderPrefixEnd`]): the engine stops at the token that closes the
/// image, so these words never reach the decoder.
const PREFIX_ONLY_QUESTION: &str = "Describe this image.";

/// The token ids of `texts`' prompts for each prepared image's grid, rendered once per grid and
/// question set into `prompts`; returns each image's key there.
fn rendered_prompts(
    engine: &Engine,
    prompts: &mut HashMap<PromptKey, Vec<Vec<u32>>>,
    prepared: &[Pixels],
    texts: &[&str],
) -> Result<Vec<PromptKey>, InferError> {
    let keys: Vec<PromptKey> = prepared.iter().map(|(_, grid)| (*grid, crate::hashing::stable_u64(texts))).collect();
    for key in &keys {
        if let Entry::Vacant(slot) = prompts.entry(*key) {
            let rendered = texts
                .iter()
                .map(|q| engine.dir.prompt(q, key.0, Thinking::Off).map(|p| p.input_ids))
                .collect::<Result<Vec<_>, _>>()
                .map_err(engine_err("the prompts"))?;
            slot.insert(rendered);
        }
    }
    Ok(keys)
}

/// Each image's feature vector as `definition` says, from the tower's output `features` (one per
/// image, from [`bpals_vlm::model::VlModel::encode_pass`]). The scoring pass and a features pass
/// both call this on the same bits: neither the tower's output nor the prefix's state depends on
/// what shares its pass.
fn feature_vectors(
    engine: &Engine,
    prompts: &mut HashMap<PromptKey, Vec<Vec<u32>>>,
    images: &[ImageInput<'_>],
    features: &[bpals_vlm::ImageFeatures],
    prepared: &[Pixels],
    definition: FeatureDefinition,
    pass_images: usize,
) -> Result<Vec<Vec<f32>>, InferError> {
    let vectors: Vec<tch::Tensor> = match definition {
        FeatureDefinition::VisionTowerMean => features
            .iter()
            .map(|f| f.embeds.to_kind(tch::Kind::Float).mean_dim(0, false, tch::Kind::Float).to_device(tch::Device::Cpu))
            .collect(),
        FeatureDefinition::DecoderPrefixEnd => {
            let keys = rendered_prompts(engine, prompts, prepared, &[PREFIX_ONLY_QUESTION])?;
            let inputs: Vec<PromptImage<'_>> =
                keys.iter().zip(features).map(|(key, f)| PromptImage { ids: &prompts[key][0], features: f, grid: key.0 }).collect();
            let names = images.iter().map(|i| i.name).collect::<Vec<_>>().join(", ");
            engine.model.prefix_end_states(&inputs, pass_images).map_err(engine_err(format!("image {names}")))?
        }
    };
    images
        .iter()
        .zip(vectors)
        .map(|(image, v)| Vec::<f32>::try_from(&v).map_err(|e| err(format!("image {}: reading its features: {e}", image.name))))
        .collect()
}

fn file_sha256(path: &std::path::Path) -> Result<String, InferError> {
    crate::hashing::sha256_file(path).map(|(digest, _)| digest).map_err(|source| InferError::File { path: path.into(), source })
}

/// What generation reads that a score does not: `generation_config.json`, where the checkpoint
/// has one (its `eos_token_id` ends an answer).
fn generation_inputs(dir: &Path) -> Result<Option<serde_json::Value>, InferError> {
    let path = dir.join(bpals_vlm::GENERATION_CONFIG);
    if !path.is_file() {
        return Ok(None);
    }
    Ok(Some(serde_json::json!({ "generation_config_sha256": file_sha256(&path)? })))
}
