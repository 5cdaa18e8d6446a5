//! `bpals-release bench pipeline SPEC --data-entry FILE`: times the non-inference pipeline.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::JobsArg;
use bpals_release::files::{Claim, OutDir, Protected};
use bpals_release::{bench, inputs};

#[derive(Args)]
pub struct PipelineArgs {
    /// Spec whose prompts, signal and output settings the bench uses.
    spec: PathBuf,
    /// NIH-format metadata, e.g. from `fixtures/gen_sample.py --metadata-only --images 112120`.
    #[arg(long)]
    data_entry: PathBuf,
    /// Folder for the shards: missing, or one an earlier bench wrote (it is replaced).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    jobs: JobsArg,
}

/// What an earlier bench left: only its shards, `data/full-*.parquet`.
fn bench_shards_only(dir: &std::path::Path) -> Result<(), String> {
    let found = bpals_release::manifest::scan(dir).map_err(|e| format!("cannot be listed: {e}"))?;
    let foreign: Vec<String> = found
        .files
        .into_iter()
        .chain(found.others.into_iter().map(|(p, _)| p))
        .filter(|p| !(p.starts_with("data/full-") && p.ends_with(".parquet") && !p[5..].contains('/')))
        .collect();
    match foreign.first() {
        None => Ok(()),
        Some(first) => {
            let n = foreign.len();
            Err(format!("holds {n} {} a bench did not write (such as {first})", if n == 1 { "file" } else { "files" }))
        }
    }
}

pub fn run(args: PipelineArgs) -> anyhow::Result<ExitCode> {
    let spec = inputs::load(&args.spec)?;
    // Before any work: the bench replaces this folder, so it must hold nothing but its shards.
    let protected =
        [Protected { what: "the source root", path: &spec.source.root }, Protected { what: "the metadata file", path: &args.data_entry }];
    let claim = Claim { option: "--out", replaces: true, is_ours: &bench_shards_only, protected: &protected };
    let _claimed = OutDir::claim(&args.out, &claim)?;
    let report = bench::run(&spec, &args.data_entry, &args.out, args.jobs.get())?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}
