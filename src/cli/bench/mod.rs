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

/// A JSON file a bench reads (a config.json, a preprocessor_config.json), the file named in
/// errors.
#[cfg(feature = "vlm")]
fn read_json(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))
}

/// A preprocessor_config.json as the engine reads it, or a processor_config.json's
/// `image_processor` object (a Gemma 4 checkpoint has only that file).
#[cfg(feature = "vlm")]
fn read_preprocessor(path: &std::path::Path) -> anyhow::Result<bpals_vlm::PreprocessorConfig> {
    use bpals_vlm::PreprocessorConfig;
    let json = read_json(path)?;
    let (settings, at) = match PreprocessorConfig::in_processor_config(&json) {
        Some(image) => (image, "image_processor."),
        None => (&json, ""),
    };
    PreprocessorConfig::from_json(settings).map_err(|e| anyhow::anyhow!("{}: key {at}{}: {}", path.display(), e.key, e.message))
}

/// The older command names (`bench-generation`, `bench-scoring`, `bench-labeler`), hidden and
/// kept for one release: they say what replaces them, then run it.
pub fn renamed(old: &str) {
    eprintln!("note: `{old}` is now `{}` (the old name goes in the next release)", old.replacen('-', " ", 1));
}
