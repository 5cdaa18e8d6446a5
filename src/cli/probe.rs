//! `bpals-release probe`: yes/no questions about one image, answered by the VLM engine.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub engine: super::engine::EngineArgs,
    /// The image (PNG or JPEG).
    #[arg(long)]
    pub image: PathBuf,
    /// A yes/no question; repeat for more (they share one pass over the image).
    #[arg(long = "question", required = true)]
    pub questions: Vec<String>,
}

pub fn run(args: ProbeArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        let report = super::engine::open(&args.engine)?.probe(&args.image, &args.questions)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(super::engine::no_vlm())
    }
}
