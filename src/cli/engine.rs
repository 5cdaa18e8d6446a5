//! The VLM engine as `probe` and `describe` open it: the model, device and dtype flags.

use std::path::PathBuf;

#[cfg(feature = "vlm")]
use anyhow::Result;
use clap::Args;

/// Where and how the VLM runs.
#[derive(Args)]
pub struct EngineArgs {
    /// A Hugging Face model directory (config.json, weights, tokenizer, chat template), or a
    /// model id ORG/NAME[@REVISION] from the Hugging Face cache (fetched into it when missing).
    #[arg(long)]
    pub model: PathBuf,
    #[command(flatten)]
    pub offline: super::OfflineArg,
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// auto: bf16 on CUDA, f32 on the CPU.
    #[arg(long, value_enum, default_value_t = DtypeArg::Auto)]
    pub dtype: DtypeArg,
    /// Cap on the resized image's pixel count [default: the model's max_pixels].
    #[arg(long)]
    pub max_pixels: Option<u64>,
    /// Run a full-size model on the CPU anyway (hours of work).
    #[arg(long)]
    pub allow_cpu: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum DeviceArg {
    Auto,
    Cpu,
    Cuda,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum DtypeArg {
    Auto,
    F32,
    Bf16,
    F16,
}

#[cfg(feature = "vlm")]
impl DeviceArg {
    pub fn choice(self) -> bpals_vlm::engine::DeviceChoice {
        use bpals_vlm::engine::DeviceChoice;
        match self {
            DeviceArg::Auto => DeviceChoice::Auto,
            DeviceArg::Cpu => DeviceChoice::Cpu,
            DeviceArg::Cuda => DeviceChoice::Cuda,
        }
    }
}

#[cfg(feature = "vlm")]
impl DtypeArg {
    pub fn choice(self) -> bpals_vlm::engine::DtypeChoice {
        use bpals_vlm::engine::DtypeChoice;
        match self {
            DtypeArg::Auto => DtypeChoice::Auto,
            DtypeArg::F32 => DtypeChoice::F32,
            DtypeArg::Bf16 => DtypeChoice::Bf16,
            DtypeArg::F16 => DtypeChoice::F16,
        }
    }
}

#[cfg(feature = "vlm")]
pub fn open(args: &EngineArgs) -> Result<bpals_vlm::engine::Engine> {
    use bpals_vlm::engine::{Engine, EngineOptions};
    let options = EngineOptions {
        device: args.device.choice(),
        dtype: args.dtype.choice(),
        min_pixels: None,
        max_pixels: args.max_pixels,
        allow_cpu: args.allow_cpu,
    };
    Ok(Engine::open(&model_dir(args)?, &options)?)
}

/// `--model`: a directory as given, else ORG/NAME[@REVISION] located in the Hugging Face cache.
#[cfg(feature = "vlm")]
fn model_dir(args: &EngineArgs) -> Result<PathBuf> {
    if args.model.is_dir() {
        return Ok(args.model.clone());
    }
    let text = args.model.to_string_lossy();
    let Ok(repo) = bpals_release::hub::RepoRef::parse(&text) else {
        anyhow::bail!("--model {text}: no such directory, and not a model id ORG/NAME[@REVISION]");
    };
    let snapshot = bpals_release::hub::model::locate(&repo.id(), repo.revision(), args.offline.offline, true)?;
    Ok(snapshot.dir)
}

#[cfg(not(feature = "vlm"))]
pub fn no_vlm() -> anyhow::Error {
    anyhow::anyhow!(bpals_release::infer::NO_VLM_FEATURE)
}
