//! `bpals-release eval DIR --gold FILE`: a release against expert labels.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::GoldArgs;
use bpals_release::eval;

#[derive(Args)]
pub struct EvalArgs {
    /// The release directory.
    dir: PathBuf,
    #[command(flatten)]
    gold: GoldArgs,
    /// Bootstrap resamples for the 95% intervals.
    #[arg(long, default_value_t = 1000)]
    bootstrap: usize,
    /// Seed of the bootstrap resampler.
    #[arg(long, default_value_t = 20260526)]
    seed: u64,
    /// Also write the Markdown section for the card here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// A calibration file to report ECE and Brier after (see `calibrate`).
    #[arg(long)]
    calibration: Option<PathBuf>,
}

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let gold = args.gold.read()?;
    let options = eval::EvalOptions { bootstrap_resamples: args.bootstrap, seed: args.seed, ..Default::default() };
    let calibration = args.calibration.as_deref().map(bpals_release::signal::calibration::Calibration::read).transpose()?;
    let report = eval::evaluate(&args.dir, &args.gold.gold, &gold, &options, calibration.as_ref())?;
    if let Some(path) = &args.markdown {
        std::fs::write(path, eval::to_markdown(&report)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}
