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
    /// Answer the questions this many times in one process and report the fastest run's
    /// timing, with every run's total in `runs_ms` (benchmarks: the first run of a process pays
    /// libtorch's warm-up, as the first call of a Python session does).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
}

pub fn run(args: ProbeArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        let engine = super::engine::open(&args.engine)?;
        let total = |t: &bpals_vlm::engine::Timing| t.preprocess + t.vision + t.text;
        let mut best: Option<bpals_vlm::engine::ProbeReport> = None;
        let mut runs_ms = Vec::with_capacity(args.repeat as usize);
        for _ in 0..args.repeat {
            let report = engine.probe(&args.image, &args.questions)?;
            runs_ms.push(total(&report.timing_ms));
            if best.as_ref().is_none_or(|b| total(&report.timing_ms) < total(&b.timing_ms)) {
                best = Some(report);
            }
        }
        let mut json = serde_json::to_value(best.expect("at least one run"))?;
        if args.repeat > 1 {
            json["runs_ms"] = serde_json::to_value(runs_ms)?;
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(super::engine::no_vlm())
    }
}
