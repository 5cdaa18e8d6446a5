//! `bpals-release bench SPEC --data-entry FILE`: times the non-inference pipeline.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::JobsArg;
use bpals_release::{bench, inputs};

#[derive(Args)]
pub struct BenchArgs {
    /// Spec whose prompts, signal and output settings the bench uses.
    spec: PathBuf,
    /// NIH-format metadata, e.g. from `fixtures/gen_sample.py --metadata-only --images 112120`.
    #[arg(long)]
    data_entry: PathBuf,
    /// Folder for the shards (replaced).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    jobs: JobsArg,
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let spec = inputs::load(&args.spec)?;
    let report = bench::run(&spec, &args.data_entry, &args.out, args.jobs.get())?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}
