//! `bpals-release infer SPEC --shard K/N`: fills the score cache for one shard of the images, so
//! that array jobs on many machines can share the work; a later `build` merges them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::build::RunArgs;
use bpals_release::{infer, inputs, pipeline};

#[derive(Args)]
pub struct InferArgs {
    /// The release spec (YAML).
    spec: PathBuf,
    /// K/N: score only the images of shard K (0-based) of N.
    #[arg(long)]
    shard: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(args: InferArgs) -> anyhow::Result<ExitCode> {
    let spec = inputs::load(&args.spec)?;
    let shard = args.shard.as_deref().map(infer::parse_shard).transpose()?;
    let report = pipeline::infer_shard(&spec, &args.run.options(PathBuf::new()), shard)?;
    print!("{report}");
    Ok(ExitCode::SUCCESS)
}
