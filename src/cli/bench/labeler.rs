//! `bpals-release bench labeler --openi DIR`: the report labeler's precision and recall per NIH
//! finding on the OpenI reports against their manual MeSH coding, beside what Wang et al. (2017)
//! report for NIH's labeler. benches/labeler.sh fetches the reports from PyPI and runs it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::JsonArg;
use bpals_release::reports::openi::{self, Split};

#[derive(Args)]
pub struct BenchLabelerArgs {
    /// The unpacked OpenI reports (the `ecgen-radiology/` folder of NLMCXR_reports.tgz).
    #[arg(long)]
    openi: PathBuf,
    /// Which reports: the even-numbered test set, the odd-numbered tuning set, or all.
    #[arg(long, value_enum, default_value_t = Split::Even)]
    split: Split,
    /// Count an uncertain mention as a positive.
    #[arg(long)]
    uncertain_positive: bool,
    /// Print the tuning set's (odd-numbered) errors for this finding instead.
    #[arg(long, value_name = "FINDING")]
    errors: Option<String>,
    /// Rules to use instead of the built-in templates/report-labeler.yaml.
    #[arg(long)]
    rules: Option<PathBuf>,
    #[command(flatten)]
    json: JsonArg,
}

pub fn run(args: BenchLabelerArgs) -> anyhow::Result<ExitCode> {
    let labeler = crate::cli::label_report::labeler(args.rules.as_ref())?;
    let reports = openi::read_dir(&args.openi)?;
    if let Some(finding) = &args.errors {
        for (report, predicted) in openi::errors(&reports, &labeler, finding, args.uncertain_positive) {
            let kind = if predicted { "false positive" } else { "false negative" };
            println!("{} ({kind}): {}", report.id, report.text.replace('\n', " | "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    args.json.print(&openi::evaluate(&reports, &labeler, args.split, args.uncertain_positive))?;
    Ok(ExitCode::SUCCESS)
}
