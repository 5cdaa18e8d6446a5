//! `bpals-release features SPEC --out FILE`: every selected image's feature vector from the spec's
//! model, as the features file `label-issues` reads.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::build::RunArgs;
use bpals_release::infer::FeatureDefinition;
use bpals_release::pipeline;
use bpals_release::signal::confident_learning::table;

#[derive(Args)]
pub struct FeaturesArgs {
    /// The release spec (YAML): its source, selection and model.
    spec: PathBuf,
    /// The features file to write (Parquet: `image_index`, `features`).
    #[arg(long)]
    out: PathBuf,
    /// Which vector of each image: the spec's `signal.confident_learning.features` where it
    /// names confident learning, else vision_tower_mean.
    #[arg(long, value_enum)]
    definition: Option<FeatureDefinition>,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(args: FeaturesArgs) -> anyhow::Result<ExitCode> {
    let spec = args.run.load(&args.spec)?;
    let definition = args.definition.or(spec.signal.confident_learning.as_ref().map(|c| c.features)).unwrap_or_default();
    let found = pipeline::image_features(&spec, &args.run.options(PathBuf::new()), definition)?;
    let metadata = vec![
        ("bpals.features".to_string(), definition.name().to_string()),
        ("bpals.scorer".to_string(), serde_json::to_string(&found.scorer)?),
        ("bpals.scorer_hash".to_string(), found.scorer.hash()),
    ];
    let report = &found.report;
    let bytes = table::features_parquet(&found.names, &report.vectors, &metadata);
    bpals_release::review::write_all(&[(&args.out, &bytes)])?;
    let dims = report.vectors.first().map_or(0, Vec::len);
    println!(
        "wrote {} images x {dims} features ({}, {}) to {}",
        found.names.len(),
        definition.name(),
        found.scorer.model_id,
        args.out.display()
    );
    println!("  {} computed, {} from the cache", report.computed, report.cached);
    for problem in &report.cache_problems {
        println!("  cache: {problem}");
    }
    for reason in &found.demo_reasons {
        println!("  demo: {reason}");
    }
    if found.scorer.fixture {
        println!("  the fixture scorer's features are a hash of each image: they carry no information about it");
    }
    Ok(ExitCode::SUCCESS)
}
