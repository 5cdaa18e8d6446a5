//! `bpals-release bench pipeline|generation|scoring|labeler`: the benchmarks, one group. Each
//! prints numbers measured in one run; the scripts in benches/ turn them into ratios.

pub mod generation;
pub mod labeler;
pub mod pipeline;
pub mod prep;
pub mod scoring;

use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time the non-inference pipeline on a metadata file (see benches/pipeline.sh).
    Pipeline(pipeline::PipelineArgs),
    /// Time batched against one-at-a-time greedy decoding on one model (see benches/vlm.sh).
    Generation(generation::BenchGenerationArgs),
    /// Scoring throughput and MFU of a full-size model from its config alone, with random
    /// weights made on the device (see benches/gpu.sh).
    Scoring(scoring::BenchScoringArgs),
    /// The report labeler's precision and recall on the OpenI reports (see benches/labeler.sh).
    Labeler(labeler::BenchLabelerArgs),
    /// Image preparation (PNG decode, resize, normalisation) on 1, 4 and all CPU threads: whether
    /// the CPUs or the GPU bound a full run (the GPU bundle's runner runs it).
    Prep(prep::BenchPrepArgs),
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        BenchCommand::Pipeline(a) => pipeline::run(a),
        BenchCommand::Generation(a) => generation::run(a),
        BenchCommand::Scoring(a) => scoring::run(a),
        BenchCommand::Labeler(a) => labeler::run(a),
        BenchCommand::Prep(a) => prep::run(a),
    }
}

/// The older command names (`bench-generation`, `bench-scoring`, `bench-labeler`), hidden and
/// kept for one release: they say what replaces them, then run it.
pub fn renamed(old: &str) {
    eprintln!("note: `{old}` is now `{}` (the old name goes in the next release)", old.replacen('-', " ", 1));
}
