//! The engine as the CLI and the scorer use it: a model directory opened on a chosen device and
//! dtype, and the `probe` and `describe` operations with their JSON reports.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use tch::{Device, Kind};

use super::chat_template::{after_reasoning, Thinking};
use super::error::VlmError;
use super::families::ImageFeatures;
use super::generate::{Generated, GenerationImage, GenerationPrompt};
use super::grounding::{self, Grounding, ImageGeometry};
use super::model::VlModel;
use super::model_dir::ModelDir;
use super::pixels;
use super::YesNo;

/// Models above this many parameters are full size: hours of work on a CPU.
pub const FULL_SIZE_PARAMS: i64 = 100_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DtypeChoice {
    Auto,
    F32,
    Bf16,
    F16,
}

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub device: DeviceChoice,
    pub dtype: DtypeChoice,
    /// Pixel bounds that replace the preprocessor config's (the spec's `model.min_pixels` and
    /// `model.max_pixels`, `--max-pixels`); checked like the config's own.
    pub min_pixels: Option<u64>,
    pub max_pixels: Option<u64>,
    pub allow_cpu: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { device: DeviceChoice::Auto, dtype: DtypeChoice::Auto, min_pixels: None, max_pixels: None, allow_cpu: false }
    }
}

pub struct Engine {
    pub dir: ModelDir,
    pub model: VlModel,
    pub parameters: i64,
    pub load_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub path: PathBuf,
    pub family: super::Family,
    pub parameters: i64,
    pub device: String,
    pub dtype: String,
    pub chat_template_from: &'static str,
    /// The variables the chat template was rendered with (those it reads).
    pub chat_template_variables: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImageInfo {
    pub path: PathBuf,
    pub width: u32,
    pub height: u32,
    pub resized: (usize, usize),
    pub grid_thw: (usize, usize, usize),
    pub image_tokens: usize,
}

/// One question of `probe`, its answer logits and p_yes.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeAnswer {
    pub question: String,
    #[serde(flatten)]
    pub answer: YesNo,
    pub p_yes: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub model: ModelInfo,
    pub image: ImageInfo,
    pub questions: Vec<ProbeAnswer>,
    pub timing_ms: Timing,
}

/// Milliseconds per phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timing {
    pub load: f64,
    pub preprocess: f64,
    pub vision: f64,
    pub text: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DescribeReport {
    pub model: ModelInfo,
    pub image: ImageInfo,
    pub prompt: String,
    pub response: String,
    /// The `<think>` and `<answer>` sections, when the model writes them (NV-Reason-CXR style);
    /// with `--thinking on` and no `<answer>` section, the answer is the text after the block.
    pub think: Option<String>,
    pub answer: Option<String>,
    /// Boxes in the family's grounding format, mapped to the original image's pixels.
    pub grounding: Grounding,
    pub new_tokens: usize,
    pub truncated_by_max_new_tokens: bool,
    pub timing_ms: Timing,
}

/// Loads libtorch's CUDA half, `libtorch_cuda.so`, where this machine may have an NVIDIA GPU
/// (or `cuda` was asked for): it registers libtorch's CUDA backend when loaded. The linker leaves
/// it out of the binary's needs, since nothing calls it by name, and without it libtorch sees no
/// GPU at all. It is found where libtorch is (the binary's rpath, or LD_LIBRARY_PATH on a GPU
/// node); a CPU-only machine skips the load and the second or so it costs.
pub fn load_cuda_backend(asked: bool) {
    static LOADED: std::sync::Once = std::sync::Once::new();
    let gpu_here = Path::new("/dev/nvidia0").exists() || Path::new("/proc/driver/nvidia").exists();
    if asked || gpu_here {
        LOADED.call_once(|| {
            // SAFETY: a C string literal, and flags dlopen documents; the handle is kept for the
            // life of the process (never closed), as libtorch's registrations require.
            unsafe { libc::dlopen(c"libtorch_cuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        });
    }
}

/// The device a choice names on this machine, and the dtype (auto: bf16 on a GPU, f32 on the CPU).
pub fn device_and_kind(device: DeviceChoice, dtype: DtypeChoice) -> Result<(Device, Kind), VlmError> {
    if device != DeviceChoice::Cpu {
        load_cuda_backend(device == DeviceChoice::Cuda);
    }
    let device = match device {
        DeviceChoice::Auto => Device::cuda_if_available(),
        DeviceChoice::Cpu => Device::Cpu,
        DeviceChoice::Cuda if tch::Cuda::is_available() => Device::Cuda(0),
        DeviceChoice::Cuda => {
            return Err(VlmError::Input("--device cuda: libtorch sees no CUDA device (see `bpals-release doctor`)".into()))
        }
    };
    let kind = match (dtype, device) {
        (DtypeChoice::Auto, Device::Cpu) | (DtypeChoice::F32, _) => Kind::Float,
        (DtypeChoice::Auto, _) | (DtypeChoice::Bf16, _) => Kind::BFloat16,
        (DtypeChoice::F16, _) => Kind::Half,
    };
    Ok((device, kind))
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

impl Engine {
    pub fn open(path: &Path, options: &EngineOptions) -> Result<Engine, VlmError> {
        let start = Instant::now();
        let mut dir = ModelDir::open(path)?;
        if options.min_pixels.is_some() || options.max_pixels.is_some() {
            let p = &mut dir.preprocessor;
            p.min_pixels = options.min_pixels.unwrap_or(p.min_pixels);
            p.max_pixels = options.max_pixels.unwrap_or(p.max_pixels);
            super::model_dir::check_preprocessor(&dir.preprocessor, &dir.config).map_err(|e| {
                VlmError::Input(format!(
                    "the pixel bounds given (model.min_pixels / model.max_pixels in the spec, or --max-pixels), key `{}`: {}",
                    e.key, e.message
                ))
            })?;
        }
        let (device, kind) = device_and_kind(options.device, options.dtype)?;
        let model = VlModel::load(&dir, device, kind)?;
        let parameters = model.parameters();
        // What a token costs is its active parameters: a mixture of experts runs k of its experts.
        let active = super::flops::active_parameters(&dir.config, parameters);
        if device == Device::Cpu && active > FULL_SIZE_PARAMS && !options.allow_cpu {
            let of = if active == parameters { String::new() } else { format!(" active (of {parameters})") };
            return Err(VlmError::Input(format!(
                "{} has {active} parameters{of}: CPU inference of a full-size model takes hours; use a GPU or pass --allow-cpu",
                path.display()
            )));
        }
        Ok(Engine { dir, model, parameters, load_ms: ms(start) })
    }

    fn model_info(&self, thinking: Thinking) -> ModelInfo {
        ModelInfo {
            path: self.dir.path.clone(),
            family: self.dir.config.family,
            parameters: self.parameters,
            device: format!("{:?}", self.model.device),
            dtype: format!("{:?}", self.model.kind),
            chat_template_from: self.dir.chat_template_source.file(),
            chat_template_variables: self.dir.template.variables(thinking),
        }
    }

    fn load_image(&self, path: &Path) -> Result<(image::DynamicImage, tch::Tensor, ImageInfo), VlmError> {
        let bytes = std::fs::read(path).map_err(|source| VlmError::Read { path: path.into(), source })?;
        let image = image::load_from_memory(&bytes).map_err(|e| VlmError::NotA {
            path: path.into(),
            what: "a decodable image (truncated or corrupt?)",
            source: e.into(),
        })?;
        let (pixel_values, grid) = pixels::pixel_values(&image, &self.dir.preprocessor, self.model.device)?;
        let merge = self.dir.config.vision.spatial_merge_size;
        let p = self.dir.preprocessor.patch_size;
        let info = ImageInfo {
            path: path.into(),
            width: image.width(),
            height: image.height(),
            resized: (grid.1 * p, grid.2 * p),
            grid_thw: grid,
            image_tokens: grid.0 * grid.1 * grid.2 / (merge * merge),
        };
        Ok((image, pixel_values, info))
    }

    /// Reads, preprocesses and encodes one image, timing each step.
    fn encode_image(&self, path: &Path) -> Result<(ImageInfo, ImageFeatures, Timing), VlmError> {
        let mut timing = Timing { load: self.load_ms, ..Default::default() };
        let start = Instant::now();
        let (_, pixel_values, info) = self.load_image(path)?;
        timing.preprocess = ms(start);
        let start = Instant::now();
        let features = self.model.encode_image(&pixel_values, info.grid_thw);
        timing.vision = ms(start);
        Ok((info, features, timing))
    }

    /// Yes/no logits for each question about one image, the image prefix run once.
    pub fn probe(&self, image_path: &Path, questions: &[String]) -> Result<ProbeReport, VlmError> {
        let (info, features, mut timing) = self.encode_image(image_path)?;
        let start = Instant::now();
        let prompts = questions
            .iter()
            .map(|q| self.dir.prompt(q, info.grid_thw, Thinking::Off).map(|p| p.input_ids))
            .collect::<Result<Vec<_>, _>>()?;
        let scores = self.model.score(&prompts, &features, info.grid_thw, self.dir.answer_token_ids()?)?;
        timing.text = ms(start);
        if let Some((q, s)) = questions.iter().zip(&scores).find(|(_, s)| !s.is_finite()) {
            return Err(VlmError::NonFinite {
                what: format!(
                    "model {}, image {}, question {q:?}: logit_yes {}, logit_no {}",
                    self.dir.path.display(),
                    image_path.display(),
                    s.logit_yes,
                    s.logit_no
                ),
            });
        }
        let questions =
            questions.iter().zip(scores).map(|(q, s)| ProbeAnswer { question: q.clone(), answer: s, p_yes: s.p_yes() }).collect();
        Ok(ProbeReport { model: self.model_info(Thinking::Off), image: info, questions, timing_ms: timing })
    }

    /// Greedy generation for a free-form prompt about one image.
    pub fn describe(&self, image_path: &Path, prompt: &str, max_new_tokens: usize, thinking: Thinking) -> Result<DescribeReport, VlmError> {
        let (info, features, mut timing) = self.encode_image(image_path)?;
        let start = Instant::now();
        let p = self.dir.prompt(prompt, info.grid_thw, thinking)?;
        let stop = self.dir.stop_token_ids();
        let image = GenerationImage { features: &features, grid: info.grid_thw };
        let request = GenerationPrompt { image: 0, ids: &p.input_ids };
        let Generated { tokens, truncated } =
            self.model.generate_batch(&[image], &[request], max_new_tokens, &stop)?.pop().expect("one prompt, one answer");
        timing.text = ms(start);
        let response = self.dir.answer_text(&p, &tokens)?;
        let geometry = ImageGeometry { original: (info.width, info.height), resized: info.resized };
        Ok(DescribeReport {
            model: self.model_info(thinking),
            image: info,
            prompt: prompt.to_string(),
            think: section(&response, "think"),
            answer: section(&response, "answer").or_else(|| text_after_block(&response, thinking)),
            grounding: grounding::parse(self.dir.config.family.box_format(), &response, geometry),
            response,
            new_tokens: tokens.len(),
            truncated_by_max_new_tokens: truncated,
            timing_ms: timing,
        })
    }
}

/// Batched against one-at-a-time greedy decoding of the same prompts (`bench generation`).
#[derive(Debug, Clone, Serialize)]
pub struct GenerationBench {
    pub model: ModelInfo,
    pub image: ImageInfo,
    pub sequences: usize,
    pub new_tokens: usize,
    /// Both runs decode exactly `new_tokens` per sequence (stop tokens ignored).
    pub batched_ms: f64,
    pub one_at_a_time_ms: f64,
    /// batched / one at a time, each the best of `runs`.
    pub ratio: f64,
    pub runs: usize,
    pub same_tokens: bool,
}

impl Engine {
    /// `sequences` different questions about one image, `new_tokens` each, decoded as one batch
    /// and one at a time; each side keeps its best of `runs`.
    pub fn bench_generation(
        &self,
        image_path: &Path,
        sequences: usize,
        new_tokens: usize,
        runs: usize,
    ) -> Result<GenerationBench, VlmError> {
        let (info, features, _) = self.encode_image(image_path)?;
        let ids = (0..sequences)
            .map(|i| {
                self.dir
                    .prompt(&format!("Question {i}: describe finding number {i} in this chest X-ray."), info.grid_thw, Thinking::Off)
                    .map(|p| p.input_ids)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let image = [GenerationImage { features: &features, grid: info.grid_thw }];
        let prompts: Vec<GenerationPrompt> = ids.iter().map(|p| GenerationPrompt { image: 0, ids: p }).collect();
        let (mut batched_ms, mut one_ms) = (f64::INFINITY, f64::INFINITY);
        let (mut batched, mut alone) = (Vec::new(), Vec::new());
        for _ in 0..runs.max(1) {
            let start = Instant::now();
            batched = self.model.generate_batch(&image, &prompts, new_tokens, &[])?;
            batched_ms = batched_ms.min(ms(start));
            let start = Instant::now();
            alone = prompts
                .iter()
                .map(|p| self.model.generate_batch(&image, std::slice::from_ref(p), new_tokens, &[]).map(|mut g| g.remove(0)))
                .collect::<Result<Vec<_>, _>>()?;
            one_ms = one_ms.min(ms(start));
        }
        Ok(GenerationBench {
            model: self.model_info(Thinking::Off),
            image: info,
            sequences,
            new_tokens,
            batched_ms,
            one_at_a_time_ms: one_ms,
            ratio: batched_ms / one_ms,
            runs: runs.max(1),
            same_tokens: batched == alone,
        })
    }
}

/// With thinking on, the text after the model's reasoning block, when it wrote any (None with
/// thinking off, where only an `<answer>` section is an answer, or a block that never closed).
fn text_after_block(response: &str, thinking: Thinking) -> Option<String> {
    let after = after_reasoning(response, thinking).filter(|_| thinking == Thinking::On)?.trim();
    (!after.is_empty()).then(|| after.to_string())
}

/// The text between `<tag>` and `</tag>` (or the end, when the closing tag is missing).
pub fn section(text: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = text.find(&open)? + open.len();
    let rest = &text[start..];
    let end = rest.find(&format!("</{tag}>")).unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn think_and_answer_sections_split_out() {
        let t = "<think> the heart is large </think>\n<answer>Cardiomegaly</answer>";
        assert_eq!(super::section(t, "think").as_deref(), Some("the heart is large"));
        assert_eq!(super::section(t, "answer").as_deref(), Some("Cardiomegaly"));
        assert_eq!(super::section("<think>cut off", "think").as_deref(), Some("cut off"));
        assert_eq!(super::section("plain", "answer"), None);
    }

    #[test]
    fn with_thinking_on_the_answer_is_what_follows_the_block() {
        use super::{text_after_block, Thinking};
        assert_eq!(text_after_block("<think>\nlooking\n</think>\n\nYes.", Thinking::On).as_deref(), Some("Yes."));
        assert_eq!(text_after_block("<think>\nstill looking", Thinking::On), None, "an open block has no answer");
        assert_eq!(text_after_block("<think>x</think> Yes.", Thinking::Off), None, "thinking off: <answer> sections only");
    }
}
