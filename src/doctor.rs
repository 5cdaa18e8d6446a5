//! `bpals-release doctor`: what this machine can run, and the next step to take.

use std::path::PathBuf;

use serde::Serialize;

use crate::manifest::ToolInfo;
use crate::release_spec::{Backend, ReleaseSpec};

#[derive(Debug, Clone, Serialize)]
pub struct LibtorchInfo {
    pub cuda_available: bool,
    pub cuda_devices: i64,
    pub cudnn_available: bool,
    pub cpu_threads: i32,
    /// Whether a small matrix product runs in each dtype on the default device.
    pub dtypes: Vec<(String, bool)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelState {
    pub backend: Backend,
    pub id: String,
    pub revision: String,
    /// `model.path` resolved, when the spec names a local model directory.
    pub local_dir: Option<PathBuf>,
    /// The snapshot folder in the Hugging Face cache, when present.
    pub cached_at: Option<PathBuf>,
    pub cached_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub tool: ToolInfo,
    pub vlm_feature: bool,
    /// The model families the native engine runs (`model_type` in a checkpoint's config.json).
    pub engine_families: Vec<crate::vlm::Family>,
    pub libtorch: Option<LibtorchInfo>,
    /// The CPU kernel pins in force (see `vlm::cpu_kernels`): the engine's CPU logits are the
    /// same bits on every AVX2 machine only when each is reproducible.
    pub cpu_kernels: Vec<crate::vlm::cpu_kernels::KernelSetting>,
    /// Where the Hub token comes from; never the token.
    pub hub_token: String,
    pub hf_cache: PathBuf,
    pub model: Option<ModelState>,
    /// `doctor --model DIR`: that directory as the engine reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<ModelDirReport>,
    pub next_step: String,
}

/// A model directory as the engine reads it: its family, what its chat template reads, what the
/// tool sets, and the prompt it renders (one image placeholder) with thinking off and on.
#[derive(Debug, Clone, Serialize)]
pub struct ModelDirReport {
    pub path: PathBuf,
    pub family: crate::vlm::Family,
    pub chat_template_from: &'static str,
    /// Every variable the template reads besides `messages` and `add_generation_prompt`.
    pub template_reads: Vec<String>,
    /// What the tool sets for scores and grounding (always thinking off) and for generation
    /// with `model.thinking: on`; only the variables the template reads.
    pub sets_for_scores: serde_json::Map<String, serde_json::Value>,
    pub sets_for_thinking_on: serde_json::Map<String, serde_json::Value>,
    pub prompts: Vec<PromptView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptView {
    pub thinking: crate::vlm::Thinking,
    pub question: String,
    pub text: String,
    /// The token ids, the image placeholder once (the engine repeats it per merged patch).
    pub input_ids: Vec<u32>,
    /// The prompt ends inside an open `<think>` block.
    pub opens_reasoning: bool,
}

/// Opens `dir` as the engine does (no weights are loaded) and renders `question`'s prompt.
pub fn model_dir(dir: &std::path::Path, question: &str) -> Result<ModelDirReport, crate::vlm::VlmError> {
    use crate::vlm::Thinking;
    let opened = crate::vlm::ModelDir::open(dir)?;
    let merge = opened.config.vision.spatial_merge_size;
    let prompts = [Thinking::Off, Thinking::On]
        .into_iter()
        .map(|thinking| {
            let p = opened.prompt(question, (1, merge, merge), thinking)?;
            Ok(PromptView { thinking, question: question.into(), text: p.text, input_ids: p.input_ids, opens_reasoning: p.opens_reasoning })
        })
        .collect::<Result<_, crate::vlm::VlmError>>()?;
    Ok(ModelDirReport {
        path: dir.into(),
        family: opened.config.family,
        chat_template_from: opened.chat_template_source.file(),
        template_reads: opened.template.reads().map(str::to_string).collect(),
        sets_for_scores: opened.template.variables(Thinking::Off),
        sets_for_thinking_on: opened.template.variables(Thinking::On),
        prompts,
    })
}

#[cfg(feature = "vlm")]
fn libtorch() -> Option<LibtorchInfo> {
    use tch::{Device, Kind, Tensor};
    let device = Device::cuda_if_available();
    let try_kind = |kind: Kind| {
        std::panic::catch_unwind(|| {
            let a = Tensor::ones([4, 4], (kind, device));
            a.matmul(&a).sum(Kind::Float).double_value(&[]) == 64.0
        })
        .unwrap_or(false)
    };
    Some(LibtorchInfo {
        cuda_available: tch::Cuda::is_available(),
        cuda_devices: tch::Cuda::device_count(),
        cudnn_available: tch::Cuda::cudnn_is_available(),
        cpu_threads: tch::get_num_threads(),
        dtypes: [("f32", Kind::Float), ("bf16", Kind::BFloat16), ("f16", Kind::Half)]
            .iter()
            .map(|(n, k)| (n.to_string(), try_kind(*k)))
            .collect(),
    })
}

#[cfg(not(feature = "vlm"))]
fn libtorch() -> Option<LibtorchInfo> {
    None
}

fn du(dir: &std::path::Path) -> u64 {
    crate::manifest::list_files(dir)
        .map(|files| files.iter().filter_map(|f| std::fs::metadata(dir.join(f)).ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

pub fn report(spec: Option<&ReleaseSpec>) -> DoctorReport {
    let hf_cache = crate::hub::model::cache_dir();
    let model = spec.map(|s| {
        let m = &s.model;
        let cached_at = crate::hub::model::cached_snapshot(&hf_cache, &m.id, &m.revision).map(|s| s.dir);
        ModelState {
            backend: m.backend,
            id: m.id.clone(),
            revision: m.revision.clone(),
            local_dir: m.path.as_ref().and(m.dir.clone()),
            cached_bytes: cached_at.as_deref().map(du),
            cached_at,
        }
    });
    let libtorch = libtorch();
    let served = spec.and_then(|s| s.model.served.as_ref());
    let next_step = match (&libtorch, &model) {
        (_, Some(m)) if m.backend == Backend::Openai => format!(
            "the model is served at {}: nothing to load or download here (the API key {} OPENAI_API_KEY)",
            served.map_or("?", |s| s.endpoint.as_str()),
            if std::env::var_os(crate::infer::openai::API_KEY_VAR).is_some() { "comes from" } else { "would come from" }
        ),
        (None, _) => "this build has no libtorch: verify, card, publish, audit and diff work; for the VLM build with \
                      `--features vlm` (PyPI torch==2.13.0 with LIBTORCH_USE_PYTORCH=1)"
            .to_string(),
        (Some(t), _) if !t.cuda_available => {
            "no CUDA device: the tiny fixture models run on the CPU; a full-size model needs a GPU (or --allow-cpu)".to_string()
        }
        (Some(_), Some(m)) if m.backend == Backend::Fixture => "the spec uses the fixture scorer: nothing to download".to_string(),
        (Some(_), Some(m)) if m.local_dir.is_some() => "ready: the model is a local directory".to_string(),
        (Some(_), Some(m)) if m.cached_at.is_none() => format!(
            "the first build fetches {}@{} into the Hugging Face cache (or run `hf download {} --revision {}`)",
            m.id, m.revision, m.id, m.revision
        ),
        _ => "ready".to_string(),
    };
    DoctorReport {
        tool: ToolInfo::current(),
        vlm_feature: cfg!(feature = "vlm"),
        engine_families: crate::vlm::Family::ALL.to_vec(),
        libtorch,
        cpu_kernels: crate::vlm::cpu_kernels::settings(),
        hub_token: crate::hub::token::source().unwrap_or_else(|| "none configured".into()),
        hf_cache,
        model,
        model_dir: None,
        next_step,
    }
}
