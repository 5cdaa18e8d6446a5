//! `bpals-release eval DIR --gold FILE`: a release against expert labels; with `--boxes FILE`
//! (S2), its boxes and zones against reference boxes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::GoldFormatArg;
use bpals_release::eval;

#[derive(Args)]
pub struct EvalArgs {
    /// The release directory.
    dir: PathBuf,
    /// Expert gold labels, in the format given by --format.
    #[arg(long, required_unless_present = "boxes")]
    gold: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = GoldFormatArg::Generic)]
    format: GoldFormatArg,
    /// S2: reference boxes in BBox_List_2017.csv's layout, to evaluate the release's boxes and
    /// zones against (JSON `location`; alone, the location report is the whole output).
    #[arg(long)]
    boxes: Option<PathBuf>,
    /// The folder of the boxed images, to read their sizes [default: NIH's 1024x1024 for all].
    #[arg(long, requires = "boxes")]
    images: Option<PathBuf>,
    /// Bootstrap resamples for the 95% intervals (at most 100,000).
    #[arg(long, default_value_t = 1000, value_parser = bootstrap_resamples)]
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
    /// The review plan the gold answers (see `review plan`): adds the label errors found per 100
    /// reviews in the rows the signal chose against the plan's random control.
    #[arg(long, requires = "gold")]
    review_plan: Option<PathBuf>,
}

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let location =
        args.boxes.as_deref().map(|boxes| eval::location::evaluate_release(&args.dir, boxes, args.images.as_deref())).transpose()?;
    let Some(gold_path) = &args.gold else {
        let location = location.expect("clap requires --gold or --boxes");
        write_markdown(args.markdown.as_deref(), &eval::location::to_markdown(&location))?;
        println!("{}", serde_json::to_string_pretty(&location)?);
        return Ok(ExitCode::SUCCESS);
    };
    let gold = eval::gold::read(gold_path, args.format.into())?;
    let options = eval::EvalOptions { bootstrap_resamples: args.bootstrap, seed: args.seed, ..Default::default() };
    let calibration = args.calibration.as_deref().map(bpals_release::signal::calibration::Calibration::read).transpose()?;
    let review = match &args.review_plan {
        Some(path) => Some(bpals_release::review::ReviewPlan::read(path)?.0.review_input(path)),
        None => None,
    };
    let report = eval::evaluate(&args.dir, gold_path, &gold, &options, calibration.as_ref(), review.as_ref())?;
    let mut markdown = eval::to_markdown(&report);
    let mut json = serde_json::to_value(&report)?;
    if let Some(location) = &location {
        markdown.push_str(&format!("\n## Location evaluation\n\n{}", eval::location::to_markdown(location)));
        json["location"] = serde_json::to_value(location)?;
    }
    write_markdown(args.markdown.as_deref(), &markdown)?;
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(ExitCode::SUCCESS)
}

fn write_markdown(path: Option<&std::path::Path>, text: &str) -> anyhow::Result<()> {
    if let Some(path) = path {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The most resamples `--bootstrap` takes: each one recomputes every metric over every row, so
/// an unbounded count is an unbounded run (100,000 already gives intervals to the third digit).
const MAX_BOOTSTRAP: usize = 100_000;

fn bootstrap_resamples(text: &str) -> Result<usize, String> {
    let n: usize = text.parse().map_err(|_| format!("{text:?} is not a count of resamples"))?;
    if n > MAX_BOOTSTRAP {
        return Err(format!("{n} resamples is more than the {MAX_BOOTSTRAP} that --bootstrap takes"));
    }
    Ok(n)
}
