//! `bpals-release calibrate DIR --gold FILE --out FILE`: per-label calibration of a release's
//! confidence, fitted on expert labels; a spec names the file as `signal.calibration`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::GoldArgs;
use bpals_release::signal::calibration::Method;

#[derive(Args)]
pub struct CalibrateArgs {
    /// The release directory.
    dir: PathBuf,
    #[command(flatten)]
    gold: GoldArgs,
    #[arg(long, value_enum, default_value_t = MethodArg::Platt)]
    method: MethodArg,
    /// Where to write the calibration JSON (name it in a spec as signal.calibration).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum MethodArg {
    Platt,
    Temperature,
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let ours = |head: &str| head.contains(bpals_release::signal::calibration::CALIBRATION_FORMAT);
    bpals_release::files::check_file(&args.out, "--out", "a calibration", &ours)?;
    let gold = args.gold.read()?;
    let method = match args.method {
        MethodArg::Platt => Method::Platt,
        MethodArg::Temperature => Method::Temperature,
    };
    let table = bpals_release::eval::fit_calibration(&args.dir, &args.gold.gold, &gold, method)?;
    let bytes = bpals_release::manifest::to_json_bytes(&table);
    std::fs::write(&args.out, bytes).with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("wrote {:?} calibration for {} labels ({}) to {}", method, table.labels.len(), table.fitted_on, args.out.display());
    Ok(ExitCode::SUCCESS)
}
