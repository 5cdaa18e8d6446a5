//! `probe` and `describe`: the VLM engine on one image, from the command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

/// Where and how the VLM runs.
#[derive(Args)]
pub(crate) struct EngineArgs {
    /// A Hugging Face model directory (config.json, weights, tokenizer, chat template), or a
    /// model id ORG/NAME[@REVISION] from the Hugging Face cache (fetched into it when missing).
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// Never download the model; use only the Hugging Face cache.
    #[arg(long)]
    pub(crate) offline: bool,
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub(crate) device: DeviceArg,
    /// auto: bf16 on CUDA, f32 on the CPU.
    #[arg(long, value_enum, default_value_t = DtypeArg::Auto)]
    pub(crate) dtype: DtypeArg,
    /// Cap on the resized image's pixel count [default: the model's max_pixels].
    #[arg(long)]
    pub(crate) max_pixels: Option<u64>,
    /// Run a full-size model on the CPU anyway (hours of work).
    #[arg(long)]
    pub(crate) allow_cpu: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum DeviceArg {
    Auto,
    Cpu,
    Cuda,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum DtypeArg {
    Auto,
    F32,
    Bf16,
    F16,
}

#[derive(Args)]
pub(crate) struct ProbeArgs {
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    /// The image (PNG or JPEG).
    #[arg(long)]
    pub(crate) image: PathBuf,
    /// A yes/no question; repeat for more (they share one pass over the image).
    #[arg(long = "question", required = true)]
    pub(crate) questions: Vec<String>,
}

#[derive(Args)]
pub(crate) struct DescribeArgs {
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    #[arg(long)]
    pub(crate) image: PathBuf,
    #[arg(long)]
    pub(crate) prompt: String,
    #[arg(long, default_value_t = 2048)]
    pub(crate) max_new_tokens: usize,
}

#[cfg(feature = "vlm")]
fn engine(args: &EngineArgs) -> Result<bpals_release::vlm::engine::Engine> {
    use bpals_release::vlm::engine::{DeviceChoice, DtypeChoice, Engine, EngineOptions};
    let options = EngineOptions {
        device: match args.device {
            DeviceArg::Auto => DeviceChoice::Auto,
            DeviceArg::Cpu => DeviceChoice::Cpu,
            DeviceArg::Cuda => DeviceChoice::Cuda,
        },
        dtype: match args.dtype {
            DtypeArg::Auto => DtypeChoice::Auto,
            DtypeArg::F32 => DtypeChoice::F32,
            DtypeArg::Bf16 => DtypeChoice::Bf16,
            DtypeArg::F16 => DtypeChoice::F16,
        },
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
    let snapshot = bpals_release::hub::model::locate(&repo.id(), repo.revision(), args.offline, true).map_err(anyhow::Error::msg)?;
    Ok(snapshot.dir)
}

#[cfg(not(feature = "vlm"))]
fn no_vlm() -> anyhow::Error {
    anyhow::anyhow!(bpals_release::infer::NO_VLM_FEATURE)
}

pub(crate) fn run_probe(args: ProbeArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        let report = engine(&args.engine)?.probe(&args.image, &args.questions)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(no_vlm())
    }
}

pub(crate) fn run_describe(args: DescribeArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        let report = engine(&args.engine)?.describe(&args.image, &args.prompt, args.max_new_tokens)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(no_vlm())
    }
}
