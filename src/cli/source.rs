//! `bpals-release source`: a summary of NIH metadata files.

use std::process::ExitCode;

use clap::Args;

use super::NihFilesArgs;
use bpals_release::source;

#[derive(Args)]
pub struct SourceArgs {
    #[command(flatten)]
    files: NihFilesArgs,
}

pub fn run(args: SourceArgs) -> anyhow::Result<ExitCode> {
    let summary = source::summarize(&source::load_files(&args.files.get())?)?;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(ExitCode::SUCCESS)
}
