//! `bpals-release bench generation`: batched against one-at-a-time greedy decoding on one model,
//! printed as a ratio measured in the same run (benches/vlm.sh runs it on the mid config).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct BenchGenerationArgs {
    #[command(flatten)]
    pub engine: crate::cli::engine::EngineArgs,
    #[arg(long)]
    pub image: PathBuf,
    /// How many different prompts decode together.
    #[arg(long, default_value_t = 32)]
    pub sequences: usize,
    /// New tokens per sequence (stop tokens are ignored, so every run decodes exactly this many).
    #[arg(long, default_value_t = 64)]
    pub new_tokens: usize,
    /// Each side keeps its best of this many runs.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

pub fn run(args: BenchGenerationArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        let report = crate::cli::engine::open(&args.engine)?.bench_generation(&args.image, args.sequences, args.new_tokens, args.runs)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(crate::cli::engine::no_vlm())
    }
}
