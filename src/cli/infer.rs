//! `bpals-release infer SPEC --shard K/N` (or `--shard-count N` inside an array job): fills the
//! score cache for one shard of the images, so that many machines can share the work; a later
//! `build` merges them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::build::RunArgs;
use bpals_release::{infer, pipeline};

#[derive(Args)]
pub struct InferArgs {
    /// The release spec (YAML).
    spec: PathBuf,
    /// K/N: score only the images of shard K (0-based) of N.
    #[arg(long, conflicts_with = "shard_count")]
    shard: Option<String>,
    /// N: score shard K of N, K being this task's index in an array job (JOB_COMPLETION_INDEX,
    /// SLURM_ARRAY_TASK_ID or AWS_BATCH_JOB_ARRAY_INDEX). See deploy/.
    #[arg(long, value_name = "N")]
    shard_count: Option<usize>,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(args: InferArgs) -> anyhow::Result<ExitCode> {
    let spec = args.run.load(&args.spec)?;
    let (shard, source) = match (&args.shard, args.shard_count) {
        (Some(text), _) => (Some(infer::parse_shard(text)?), None),
        (None, Some(count)) => {
            let (shard, source) = infer::shard_from_scheduler(count, |name| std::env::var(name).ok())?;
            (Some(shard), Some(source))
        }
        (None, None) => (None, None),
    };
    let mut report = pipeline::infer_shard(&spec, &args.run.options(PathBuf::new()), shard)?;
    report.shard_source = source;
    print!("{report}");
    Ok(ExitCode::SUCCESS)
}
