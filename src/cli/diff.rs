//! `bpals-release diff A B`: two releases compared row by row.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use bpals_release::diff;

#[derive(Args)]
pub struct DiffArgs {
    /// Release A (e.g. ours).
    a: PathBuf,
    /// Release B (e.g. a build with your own VLM).
    b: PathBuf,
    /// How many changed rows to list.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Also write the Markdown report here.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let report = diff::diff(&args.a, &args.b, args.top)?;
    if let Some(path) = &args.markdown {
        std::fs::write(path, diff::to_markdown(&report)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}
