//! `bpals-release curate`: runs the curation rule on real NIH metadata and writes the image list
//! a spec names (`selection.images`). Run once; commit the list and pin its sha256. Prints a
//! JSON report: the list's sha256, the rule, and what the list holds.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::NihFilesArgs;
use bpals_release::hashing::sha256_hex;
use bpals_release::select::curate::{self, CurationRule};
use bpals_release::source;

#[derive(Args)]
pub struct CurateArgs {
    #[command(flatten)]
    files: NihFilesArgs,
    /// Expert relabels of NIH images (Google's 2019 labels): only the Image Index column is read.
    #[arg(long)]
    relabelled: PathBuf,
    /// Where to write the list.
    #[arg(long)]
    out: PathBuf,
    /// Images in the list.
    #[arg(long, default_value_t = CurationRule::baseline().images)]
    images: usize,
    /// NIH-asserted (image, label) rows the images must carry.
    #[arg(long, default_value_t = CurationRule::baseline().rows)]
    rows: usize,
    /// No patient contributes more images than this.
    #[arg(long, default_value_t = CurationRule::baseline().max_per_patient)]
    max_per_patient: usize,
    /// Every finding gets at least this many rows.
    #[arg(long, default_value_t = CurationRule::baseline().min_rows_per_finding)]
    min_rows: usize,
    /// Seed of the order within each group.
    #[arg(long, default_value_t = CurationRule::baseline().seed)]
    seed: u64,
}

pub fn run(args: CurateArgs) -> anyhow::Result<ExitCode> {
    bpals_release::files::check_file(&args.out, "--out", "a curated list", &|head| head.contains("Written by `bpals-release curate`"))?;
    let files = args.files.get();
    if files.bbox.is_none() {
        anyhow::bail!("curate needs --bbox: images with NIH expert boxes come first");
    }
    let table = source::load_files(&files)?;
    let relabelled = source::read_relabelled_images(&args.relabelled)?;
    let rule = CurationRule {
        images: args.images,
        rows: args.rows,
        max_per_patient: args.max_per_patient,
        min_rows_per_finding: args.min_rows,
        seed: args.seed,
        ..CurationRule::baseline()
    };
    let curated = curate::curate(&table, &relabelled, &rule)?;
    let mut inputs: Vec<(String, String)> = table.inputs.iter().map(|(name, f)| (name.clone(), f.sha256.clone())).collect();
    let (relabelled_sha, _) = bpals_release::hashing::sha256_file(&args.relabelled)?;
    let relabelled_name = args.relabelled.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    inputs.push((relabelled_name, relabelled_sha));
    let text = curated.to_text(&inputs);
    std::fs::write(&args.out, &text).with_context(|| format!("writing {}", args.out.display()))?;
    let report =
        serde_json::json!({ "list": args.out, "sha256": sha256_hex(text.as_bytes()), "rule": curated.rule, "report": curated.report });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}
