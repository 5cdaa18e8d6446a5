//! `bpals-release describe`: a free-form answer about one image (greedy decoding).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub engine: super::engine::EngineArgs,
    #[arg(long)]
    pub image: PathBuf,
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 2048)]
    pub max_new_tokens: usize,
}

pub fn run(args: DescribeArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        let report = super::engine::open(&args.engine)?.describe(&args.image, &args.prompt, args.max_new_tokens)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(super::engine::no_vlm())
    }
}
