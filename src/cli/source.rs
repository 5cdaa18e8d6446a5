//! `bpals-release source`: a summary of NIH metadata files.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use bpals_release::source;

#[derive(Args)]
pub struct SourceArgs {
    /// Data_Entry_2017.csv or Data_Entry_2017_v2020.csv.
    #[arg(long)]
    data_entry: PathBuf,
    /// BBox_List_2017.csv.
    #[arg(long)]
    bbox: Option<PathBuf>,
    /// train_val_list.txt (needs --test-list).
    #[arg(long, requires = "test_list")]
    train_val_list: Option<PathBuf>,
    /// test_list.txt (needs --train-val-list).
    #[arg(long, requires = "train_val_list")]
    test_list: Option<PathBuf>,
}

pub fn run(args: SourceArgs) -> anyhow::Result<ExitCode> {
    let files = source::SourceFiles {
        data_entry: args.data_entry,
        bbox: args.bbox,
        train_val_list: args.train_val_list,
        test_list: args.test_list,
    };
    let summary = source::summarize(&source::load_files(&files)?)?;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(ExitCode::SUCCESS)
}
