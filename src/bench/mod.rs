//! `bpals-release bench`: the non-inference pipeline at full NIH scale, stage by stage.
//!
//! Runs the library's own stages on synthetic metadata (see `fixtures/gen_sample.py
//! --metadata-only`): ingest, select (every image, all 15 labels: about 1.7M rows at 112,120
//! images), score with the fixture scorer (from each image name's digest: there are no pixels at
//! this scale), derive the signal, write the shards, hash them. `benches/pipeline.sh` times
//! pyarrow writing the same table in the same run and prints the ratio.
//!
//! [`preparation`] (with the engine) times image preparation for the model, `bench prep`.

#[cfg(feature = "vlm")]
pub mod preparation;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use crate::hashing::sha256_hex;
use crate::infer::{FixtureScorer, ImageScores};
use crate::inputs::ResolvedSpec;
use crate::manifest;
use crate::pipeline::records::RecordTable;
use crate::release_spec::{RowPolicy, SelectionSpec};
use crate::select::{self, Selection};
use crate::shard::{self, ShardMeta};
use crate::signal;
use crate::source::{self, SourceFiles};

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub images: usize,
    pub rows: usize,
    pub jobs: usize,
    /// Seconds per stage, in pipeline order.
    pub seconds: Vec<(String, f64)>,
    pub total_seconds: f64,
    pub shards: Vec<String>,
    pub out: PathBuf,
    /// The writer settings pyarrow must use to write the same table.
    pub writer: BTreeMap<String, serde_json::Value>,
}

pub fn run(spec: &ResolvedSpec, data_entry: &Path, out: &Path, jobs: usize) -> anyhow::Result<BenchReport> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build()?;
    pool.install(|| run_in_pool(spec, data_entry, out, jobs))
}

fn run_in_pool(spec: &ResolvedSpec, data_entry: &Path, out: &Path, jobs: usize) -> anyhow::Result<BenchReport> {
    let mut seconds = Vec::new();
    let start = Instant::now();
    let mut lap = Instant::now();
    let mut mark = |name: &str, lap: &mut Instant| {
        seconds.push((name.to_string(), lap.elapsed().as_secs_f64()));
        *lap = Instant::now();
    };

    let table = source::load_files(&SourceFiles { data_entry: data_entry.to_path_buf(), ..Default::default() })?;
    mark("ingest", &mut lap);

    let selection_spec = SelectionSpec {
        images: None,
        seed: spec.selection.seed,
        curated_images: table.images(),
        expected_rows: None,
        rows: RowPolicy::AllLabels,
        views: spec.selection.views.clone(),
        trial: None,
    };
    let selection: Selection = select::select(&table, &selection_spec, None, false)?;
    mark("select", &mut lap);

    let questions = spec.prompts.questions();
    let keys = FixtureScorer::question_keys(&questions);
    let scores: Vec<ImageScores> = selection
        .images
        .par_iter()
        .map(|img| {
            let digest = sha256_hex(img.image_index.as_bytes());
            let scores = FixtureScorer::score_digest(&digest, &keys);
            ImageScores { image_sha256: digest, scores }
        })
        .collect();
    mark("score", &mut lap);

    let sig = signal::derive(&selection, &scores, &questions, &signal::Rules::new(&spec.signal, spec.calibration_table()));
    mark("signal", &mut lap);

    if out.exists() {
        std::fs::remove_dir_all(out)?;
    }
    let records = RecordTable::new(&selection, &sig, &scores, &questions);
    let all: Vec<usize> = (0..selection.rows.len()).collect();
    let meta = ShardMeta { release_id: "bench".into(), release_version: "0.0.0".into(), tool_version: env!("CARGO_PKG_VERSION").into() };
    let files =
        shard::write_split(out, &shard::pairs::layout(shard::ColumnSet::default()), "full", &records.records(&all), &spec.output, &meta)?;
    mark("shard", &mut lap);

    let hashed = manifest::collect_files(out, &|_| None)?;
    mark("hash", &mut lap);
    let total_seconds = start.elapsed().as_secs_f64();

    let mut writer = BTreeMap::new();
    writer.insert("compression".into(), serde_json::json!(format!("{:?}", spec.output.compression).to_lowercase()));
    writer.insert("compression_level".into(), serde_json::json!(spec.output.compression_level));
    writer.insert("row_group_rows".into(), serde_json::json!(spec.output.row_group_rows));
    writer.insert("rows_per_shard".into(), serde_json::json!(spec.output.rows_per_shard));
    Ok(BenchReport {
        images: selection.images.len(),
        rows: selection.rows.len(),
        jobs,
        seconds,
        total_seconds,
        shards: hashed.into_iter().map(|f| f.path).filter(|p| files.iter().any(|s| &s.path == p)).collect(),
        out: out.to_path_buf(),
        writer,
    })
}
