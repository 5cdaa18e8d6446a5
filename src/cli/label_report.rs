//! `bpals-release label-report [FILE|-]`: the rule-based labeler on one report's text: per NIH
//! finding and support device, present / absent / uncertain, with the sentences and the side.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::JsonArg;
use bpals_release::reports::{Labeler, LabelerRules};

#[derive(Args)]
pub struct LabelReportArgs {
    /// The report as plain text; `-` or nothing reads standard input.
    file: Option<PathBuf>,
    /// Rules to use instead of the built-in templates/report-labeler.yaml.
    #[arg(long)]
    rules: Option<PathBuf>,
    #[command(flatten)]
    json: JsonArg,
}

/// The built-in rules, or the file `--rules` names.
pub fn labeler(rules: Option<&PathBuf>) -> anyhow::Result<Labeler> {
    Ok(match rules {
        None => Labeler::builtin(),
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Labeler::new(LabelerRules::parse(&text, &path.display().to_string())?)
        }
    })
}

pub fn run(args: LabelReportArgs) -> anyhow::Result<ExitCode> {
    let labeler = labeler(args.rules.as_ref())?;
    let text = match args.file.as_deref().filter(|p| p.as_os_str() != "-") {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading the report from standard input")?;
            text
        }
    };
    args.json.print(&labeler.label(&text))?;
    Ok(ExitCode::SUCCESS)
}
