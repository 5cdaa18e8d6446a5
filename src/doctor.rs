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
    /// The PyTorch version whose libtorch the binary was linked against.
    pub built_against: String,
    /// The folder the running libtorch was loaded from, and the version and CUDA build its
    /// PyTorch says beside it (torch/version.py).
    pub loaded_from: Option<PathBuf>,
    pub version: Option<String>,
    pub cuda_build: Option<String>,
    /// The GPUs nvidia-smi lists (none without it), whether or not libtorch sees them.
    pub gpus: Vec<Gpu>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub name: String,
    pub memory_mib: u64,
    pub driver: String,
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
    pub engine_families: Vec<bpals_vlm::Family>,
    pub libtorch: Option<LibtorchInfo>,
    /// The CPU kernel pins in force (see `bpals_vlm::cpu_kernels`): the engine's CPU logits are the
    /// same bits on every AVX2 machine only when each is reproducible.
    pub cpu_kernels: Vec<bpals_vlm::cpu_kernels::KernelSetting>,
    /// Where the Hub token comes from; never the token.
    pub hub_token: String,
    pub hf_cache: PathBuf,
    pub model: Option<ModelState>,
    /// `doctor --model DIR`: that directory as the engine reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<ModelDirReport>,
    pub next_step: String,
    /// The one command to run next.
    pub next_command: String,
}

/// A model directory as the engine reads it: its family, what its chat template reads, what the
/// tool sets, and the prompt it renders (one image placeholder) with thinking off and on.
#[derive(Debug, Clone, Serialize)]
pub struct ModelDirReport {
    pub path: PathBuf,
    pub family: bpals_vlm::Family,
    /// A mixture of experts' shape (experts, per token, sparse layers, shared expert).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experts: Option<bpals_vlm::MoeConfig>,
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
    pub thinking: bpals_vlm::Thinking,
    pub question: String,
    pub text: String,
    /// The token ids, the image placeholder once (the engine repeats it per merged patch).
    pub input_ids: Vec<u32>,
    /// The prompt ends inside an open `<think>` block.
    pub opens_reasoning: bool,
}

/// Opens `dir` as the engine does (no weights are loaded) and renders `question`'s prompt.
pub fn model_dir(dir: &std::path::Path, question: &str) -> Result<ModelDirReport, bpals_vlm::VlmError> {
    use bpals_vlm::Thinking;
    let opened = bpals_vlm::ModelDir::open(dir)?;
    let merge = opened.config.vision.spatial_merge_size;
    let prompts = [Thinking::Off, Thinking::On]
        .into_iter()
        .map(|thinking| {
            let p = opened.prompt(question, (1, merge, merge), thinking)?;
            Ok(PromptView { thinking, question: question.into(), text: p.text, input_ids: p.input_ids, opens_reasoning: p.opens_reasoning })
        })
        .collect::<Result<_, bpals_vlm::VlmError>>()?;
    Ok(ModelDirReport {
        path: dir.into(),
        family: opened.config.family,
        experts: opened.config.text.moe.clone(),
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
    bpals_vlm::engine::load_cuda_backend(false);
    let device = Device::cuda_if_available();
    let try_kind = |kind: Kind| {
        std::panic::catch_unwind(|| {
            let a = Tensor::ones([4, 4], (kind, device));
            a.matmul(&a).sum(Kind::Float).double_value(&[]) == 64.0
        })
        .unwrap_or(false)
    };
    let loaded_from = loaded_libtorch();
    let version_py = loaded_from.as_ref().and_then(|lib| std::fs::read_to_string(lib.parent()?.join("version.py")).ok());
    // `__version__ = '2.13.0+cu130'`, `cuda: Optional[str] = '13.0'` (None: a CPU build).
    let field = |name: &str| -> Option<String> {
        let line = version_py.as_deref()?.lines().find(|l| l.split(['=', ':']).next().is_some_and(|k| k.trim() == name))?;
        let value = line.rsplit('=').next()?.trim().trim_matches('\'');
        (value != "None").then(|| value.to_string())
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
        built_against: option_env!("BPALS_LIBTORCH_BUILT").unwrap_or("unknown").to_string(),
        version: field("__version__"),
        cuda_build: field("cuda"),
        loaded_from,
        gpus: gpus(),
    })
}

/// The folder of the libtorch this process has loaded, read from its memory map.
#[cfg(feature = "vlm")]
fn loaded_libtorch() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let lib = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.ends_with("/libtorch_cpu.so"))?;
    Some(std::path::Path::new(lib).parent()?.to_path_buf())
}

/// The GPUs nvidia-smi lists, with their memory and driver; none when it is not installed.
#[cfg(feature = "vlm")]
fn gpus() -> Vec<Gpu> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"])
        .output();
    let Ok(out) = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()) else { return Vec::new() };
    out.lines()
        .filter_map(|line| {
            let mut f = line.split(',').map(str::trim);
            Some(Gpu { name: f.next()?.to_string(), memory_mib: f.next()?.parse().ok()?, driver: f.next()?.to_string() })
        })
        .collect()
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
    let spec_arg = spec.map_or("specs/s1a.yaml".to_string(), |s| s.path.display().to_string());
    let (next_step, next_command) = match (&libtorch, &model) {
        (_, Some(m)) if m.backend == Backend::Openai => (
            format!(
                "the model is served at {}: nothing to load or download here (the API key {} OPENAI_API_KEY)",
                served.map_or("?", |s| s.endpoint.as_str()),
                if std::env::var_os(crate::infer::openai::API_KEY_VAR).is_some() { "comes from" } else { "would come from" }
            ),
            format!("bpals-release build {spec_arg} --dry-run"),
        ),
        (None, _) => (
            "this build has no libtorch: verify, card, publish, audit and diff work; for the VLM build with `--features vlm` \
             (PyPI torch==2.13.0 with LIBTORCH_USE_PYTORCH=1)"
                .to_string(),
            "scripts/bpals-release doctor".to_string(),
        ),
        (Some(t), _) if !t.cuda_available => (
            "no CUDA device: the tiny fixture models run on the CPU; a full-size model needs a GPU (or --allow-cpu)".to_string(),
            if !t.gpus.is_empty() {
                "nvidia-smi lists a GPU that libtorch does not see: check CUDA_VISIBLE_DEVICES and that this PyTorch is a CUDA build".into()
            } else if spec.is_some_and(|s| s.model.backend.is_native() && s.model.demo_weights.is_none()) {
                // A real model on a machine without a GPU: the engine goes to a GPU node.
                "scripts/gpu-bundle --torch <the GPU node's PyTorch version> --out bundles".to_string()
            } else {
                format!("bpals-release build {spec_arg}")
            },
        ),
        (Some(_), Some(m)) if m.backend == Backend::Fixture => {
            ("the spec uses the fixture scorer: nothing to download".to_string(), format!("bpals-release build {spec_arg}"))
        }
        (Some(_), Some(m)) if m.local_dir.is_some() => {
            ("ready: the model is a local directory".to_string(), format!("bpals-release build {spec_arg}"))
        }
        (Some(_), Some(m)) if m.cached_at.is_none() => (
            format!(
                "the first build fetches {}@{} into the Hugging Face cache (or run `hf download {} --revision {}`)",
                m.id, m.revision, m.id, m.revision
            ),
            format!("hf download {} --revision {}", m.id, m.revision),
        ),
        _ => ("ready".to_string(), format!("bpals-release build {spec_arg}")),
    };
    DoctorReport {
        tool: ToolInfo::current(),
        vlm_feature: cfg!(feature = "vlm"),
        engine_families: bpals_vlm::Family::ALL.to_vec(),
        libtorch,
        cpu_kernels: bpals_vlm::cpu_kernels::settings(),
        hub_token: crate::hub::token::source().unwrap_or_else(|| "none configured".into()),
        hf_cache,
        model,
        model_dir: None,
        next_step,
        next_command,
    }
}

impl std::fmt::Display for DoctorReport {
    /// The report in words: what this build is, what libtorch and GPUs it found, what is missing
    /// for a GPU run, and the one command to run next.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let families: Vec<&str> = self.engine_families.iter().map(|f| f.name()).collect();
        let engine = if self.vlm_feature { "with the VLM engine" } else { "without the VLM engine (no libtorch)" };
        writeln!(f, "bpals-release {} ({}), {engine}", self.tool.version, short(&self.tool.commit))?;
        match &self.libtorch {
            None => writeln!(f, "  verify, card, publish, audit and diff work here; build, probe and describe need the engine")?,
            Some(t) => {
                writeln!(f, "  engine families: {}", families.join(", "))?;
                let version = t.version.as_deref().unwrap_or("of unknown version");
                let from = t.loaded_from.as_ref().map_or("an unknown folder".to_string(), |p| p.display().to_string());
                let cuda = t.cuda_build.as_deref().map_or("a CPU-only build".to_string(), |c| format!("built for CUDA {c}"));
                writeln!(f, "libtorch {version} from {from} ({cuda}; this binary was built against {})", t.built_against)?;
                let dtypes: Vec<&str> = t.dtypes.iter().filter(|(_, ok)| *ok).map(|(n, _)| n.as_str()).collect();
                let pinned = self.cpu_kernels.iter().all(|k| k.reproducible);
                writeln!(
                    f,
                    "CPU: {} threads; dtypes that run: {}; CPU kernels {}",
                    t.cpu_threads,
                    dtypes.join(", "),
                    if pinned {
                        "pinned (logits the same bits on any x86-64 machine with AVX2, Intel or AMD)"
                    } else {
                        "NOT pinned: logits may differ between machines"
                    }
                )?;
                if t.cuda_available {
                    writeln!(f, "GPU: {} CUDA device(s) visible to libtorch; cuDNN {}", t.cuda_devices, yes_no(t.cudnn_available))?;
                } else {
                    writeln!(f, "GPU: none visible to libtorch; cuDNN {}", yes_no(t.cudnn_available))?;
                }
                for g in &t.gpus {
                    writeln!(f, "  {}: {:.1} GiB, driver {}", g.name, g.memory_mib as f64 / 1024.0, g.driver)?;
                }
                let mut missing = Vec::new();
                if t.gpus.is_empty() && !t.cuda_available {
                    missing.push("a GPU (nvidia-smi lists none)");
                }
                if !t.cuda_available && !t.gpus.is_empty() {
                    missing.push("libtorch's view of the GPU (CUDA_VISIBLE_DEVICES? a CPU-only PyTorch?)");
                }
                if t.cuda_build.is_none() {
                    missing.push("a CUDA build of PyTorch");
                }
                if !missing.is_empty() {
                    writeln!(f, "  missing for a GPU run: {}", missing.join("; "))?;
                }
            }
        }
        writeln!(f, "Hub token: {}; model cache: {}", self.hub_token, self.hf_cache.display())?;
        if let Some(m) = &self.model {
            let at = match (&m.local_dir, &m.cached_at) {
                (Some(dir), _) => format!("the local directory {}", dir.display()),
                (None, Some(dir)) => format!("cached at {} ({} bytes)", dir.display(), m.cached_bytes.unwrap_or(0)),
                (None, None) => "not on this machine yet".to_string(),
            };
            writeln!(f, "Spec's model: {}@{} ({} backend), {at}", m.id, m.revision, m.backend.name())?;
        }
        if let Some(d) = &self.model_dir {
            write!(f, "{d}")?;
        }
        writeln!(f, "Next: {}", self.next_step)?;
        writeln!(f, "  {}", self.next_command)
    }
}

impl std::fmt::Display for ModelDirReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Model directory {}: {}, chat template from {}", self.path.display(), self.family.name(), self.chat_template_from)?;
        if let Some(m) = &self.experts {
            let sparse = m.sparse_layers.iter().filter(|&&s| s).count();
            let shared = m.shared_expert_intermediate_size.map_or(String::new(), |s| format!(", a shared expert of {s}"));
            writeln!(
                f,
                "  a mixture of experts: {} experts of {}, {} per token, in {sparse} of {} layers{shared}",
                m.num_experts,
                m.moe_intermediate_size,
                m.num_experts_per_tok,
                m.sparse_layers.len()
            )?;
        }
        let reads =
            if self.template_reads.is_empty() { "nothing but the conversation".to_string() } else { self.template_reads.join(", ") };
        writeln!(f, "  the template reads {reads}; the tool sets {} for scores", serde_json::Value::from(self.sets_for_scores.clone()))?;
        for p in &self.prompts {
            let thinking = if p.thinking.is_off() { "thinking off" } else { "thinking on" };
            writeln!(f, "  prompt, {thinking} ({} tokens, the image as one placeholder):", p.input_ids.len())?;
            for line in p.text.lines() {
                writeln!(f, "    | {line}")?;
            }
        }
        Ok(())
    }
}

/// The commit's first 12 digits, a `+dirty` mark kept.
fn short(commit: &str) -> String {
    let (id, mark) = commit.split_once('+').map_or((commit, ""), |(id, _)| (id, "+dirty"));
    format!("{}{mark}", id.get(..12).unwrap_or(id))
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "available"
    } else {
        "not available"
    }
}
