//! `bpals-release calibrate DIR --gold FILE --out FILE`: per-label calibration of a release's
//! confidence, fitted on expert labels; a spec names the file as `signal.calibration`. With
//! `--joint`, the joint rule of a two-family release instead (`signal.joint_rule`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::GoldArgs;
use bpals_release::signal::calibration::Method;
use bpals_release::signal::joint_rule::SecondView;

#[derive(Args)]
pub struct CalibrateArgs {
    /// The release directory.
    dir: PathBuf,
    #[command(flatten)]
    gold: GoldArgs,
    #[arg(long, value_enum, default_value_t = MethodArg::Platt)]
    method: MethodArg,
    /// Fit how a release combines two views, per label (logistic stacking of their confidences),
    /// instead of a calibration: its two families, or its answers and confident learning; name
    /// the file in a spec as signal.joint_rule.
    #[arg(long, conflicts_with = "method")]
    joint: bool,
    /// With --joint, the second view: `family` (a two-family release; the default there) or
    /// `confident-learning` (the default for a release with one family and confident learning).
    #[arg(long, value_enum, requires = "joint")]
    second_view: Option<SecondView>,
    /// Where to write the calibration JSON (name it in a spec as signal.calibration, or with
    /// --joint as signal.joint_rule).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum MethodArg {
    Platt,
    Temperature,
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    refuse_inside(&args.out, &args.dir)?;
    if args.joint {
        return run_joint(args);
    }
    let ours = |head: &str| head.contains(bpals_release::signal::calibration::CALIBRATION_FORMAT);
    bpals_release::files::check_file(&args.out, "--out", "a calibration", &ours)?;
    let gold = args.gold.read()?;
    let method = match args.method {
        MethodArg::Platt => Method::Platt,
        MethodArg::Temperature => Method::Temperature,
    };
    let table = bpals_release::eval::fit_calibration(&args.dir, &args.gold.gold, &gold, method)?;
    let bytes = bpals_release::manifest::to_json_bytes(&table);
    // Whole or not at all: an interrupted run never leaves a truncated file a spec could name.
    bpals_release::review::write_all(&[(&args.out, &bytes)])?;
    println!("wrote {:?} calibration for {} labels ({}) to {}", method, table.labels.len(), table.fitted_on, args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// `--joint`: the joint rule, and a line per source saying how many labels took it.
fn run_joint(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    use bpals_release::signal::joint_rule::{RuleSource, JOINT_RULE_FORMAT, MIN_EACH_CLASS};
    let ours = |head: &str| head.contains(JOINT_RULE_FORMAT);
    bpals_release::files::check_file(&args.out, "--out", "a joint rule", &ours)?;
    let gold = args.gold.read()?;
    let rule = bpals_release::eval::fit_joint_rule(&args.dir, &args.gold.gold, &gold, args.second_view)?;
    bpals_release::review::write_all(&[(&args.out, &bpals_release::manifest::to_json_bytes(&rule))])?;
    let (views, first, second) = match rule.second_view {
        SecondView::Family => ("the two families", "primary", "second"),
        SecondView::ConfidentLearning => ("the answers and confident learning", "answers", "confident learning"),
    };
    println!("wrote the joint rule of {views} ({}, {} images) to {}", rule.fitted_on, rule.images.len(), args.out.display());
    match rule.pooled.weights {
        Some(w) => println!(
            "  all labels pooled: {} reads; weights {first} {:.3}, {second} {:.3}, bias {:.3}",
            rule.pooled.n, w.primary, w.second, w.bias
        ),
        None => println!(
            "  all labels pooled: {} reads, {} present: fewer than {MIN_EACH_CLASS} of a class, so the mean",
            rule.pooled.n, rule.pooled.positives
        ),
    }
    for (source, count) in rule.sources() {
        let what = match source {
            RuleSource::Label => "fitted on their own reads",
            RuleSource::Pooled => "short of reads, on the pooled rule",
            RuleSource::Mean => "at the mean",
        };
        println!("  {count} labels {what}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `--out` inside the release it fits from would add a file its manifest does not list, and the
/// release would fail `verify`: refused before any work.
fn refuse_inside(out: &std::path::Path, release: &std::path::Path) -> anyhow::Result<()> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if let (Ok(parent), Ok(release_dir)) = (parent.canonicalize(), release.canonicalize()) {
        if parent.starts_with(&release_dir) {
            anyhow::bail!(
                "--out {}: is inside the release {} (a file its manifest does not list fails `verify`); write it beside the release",
                out.display(),
                release.display()
            );
        }
    }
    Ok(())
}
