//! Writes one split of the pair table as `data/{split}-{i:05d}-of-{n:05d}.parquet`.
//!
//! Determinism: rows arrive in a fixed order, every writer setting is set explicitly (nothing
//! depends on library defaults that may drift), `created_by` names this tool, and no timestamp is
//! written. Shards are written in parallel, each by one thread, so `--jobs` cannot change a byte.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float32Builder, Float64Builder, ListBuilder, StringBuilder, UInt32Builder};
use arrow_array::{ArrayRef, RecordBatch};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as PqCompression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use rayon::prelude::*;

use super::schema::{pair_schema, SCHEMA_VERSION};
use crate::spec::{Compression, OutputSpec};

/// One row of the pair table, borrowing from the selection and the scores.
#[derive(Debug, Clone)]
pub struct PairRecord<'a> {
    pub image_index: &'a str,
    pub patient_id: u32,
    pub view_position: &'a str,
    pub official_split: Option<&'a str>,
    pub label: &'a str,
    pub nih_label: bool,
    pub confidence: f64,
    pub agreement: f64,
    pub consistency: f64,
    pub trust_class: &'a str,
    pub flags: &'a [&'static str],
    pub support_devices: &'a [&'static str],
    pub question_ids: &'a [String],
    pub question_logit_yes: Vec<f32>,
    pub question_logit_no: Vec<f32>,
    pub device_question_ids: &'a [String],
    pub device_logit_yes: &'a [f32],
    pub device_logit_no: &'a [f32],
}

/// Written into every file's key-value metadata.
#[derive(Debug, Clone)]
pub struct ShardMeta {
    pub release_id: String,
    pub release_version: String,
    pub tool_version: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShardFile {
    /// Relative to the release directory, with `/` separators.
    pub path: String,
    pub split: String,
    pub rows: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("writing {}: {message}", path.display())]
    Write { path: PathBuf, message: String },
}

pub fn shard_name(split: &str, index: usize, count: usize) -> String {
    format!("data/{split}-{index:05}-of-{count:05}.parquet")
}

fn properties(output: &OutputSpec, meta: &ShardMeta) -> WriterProperties {
    let compression = match output.compression {
        Compression::Zstd => PqCompression::ZSTD(
            ZstdLevel::try_new(output.compression_level.unwrap_or(3)).expect("level validated by the spec"),
        ),
        Compression::Snappy => PqCompression::SNAPPY,
        Compression::None => PqCompression::UNCOMPRESSED,
    };
    WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_1_0)
        .set_compression(compression)
        .set_max_row_group_row_count(Some(output.row_group_rows))
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_data_page_size_limit(1024 * 1024)
        .set_write_batch_size(1024)
        .set_bloom_filter_enabled(false)
        .set_created_by(format!("bpals-release {}", meta.tool_version))
        .set_key_value_metadata(Some(vec![
            KeyValue::new("bpals.release_id".into(), meta.release_id.clone()),
            KeyValue::new("bpals.release_version".into(), meta.release_version.clone()),
            KeyValue::new("bpals.schema_version".into(), SCHEMA_VERSION.to_string()),
        ]))
        .build()
}

/// Writes `records` as one split under `dir/data/`. Returns the files in shard order.
pub fn write_split(
    dir: &Path,
    split: &str,
    records: &[PairRecord<'_>],
    output: &OutputSpec,
    meta: &ShardMeta,
) -> Result<Vec<ShardFile>, ShardError> {
    let count = records.len().div_ceil(output.rows_per_shard).max(1);
    let props = properties(output, meta);
    (0..count)
        .into_par_iter()
        .map(|i| {
            let start = (i * output.rows_per_shard).min(records.len());
            let end = ((i + 1) * output.rows_per_shard).min(records.len());
            let name = shard_name(split, i, count);
            let path = dir.join(&name);
            write_file(&path, &records[start..end], output.row_group_rows, props.clone())?;
            Ok(ShardFile { path: name, split: split.to_string(), rows: (end - start) as u64 })
        })
        .collect()
}

fn write_file(path: &Path, records: &[PairRecord<'_>], batch_rows: usize, props: WriterProperties) -> Result<(), ShardError> {
    let err = |message: String| ShardError::Write { path: path.to_path_buf(), message };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
    }
    let file = File::create(path).map_err(|e| err(e.to_string()))?;
    let mut writer = ArrowWriter::try_new(file, pair_schema(), Some(props)).map_err(|e| err(e.to_string()))?;
    for chunk in records.chunks(batch_rows.max(1)) {
        writer.write(&to_batch(chunk).map_err(|e| err(e.to_string()))?).map_err(|e| err(e.to_string()))?;
    }
    writer.close().map_err(|e| err(e.to_string()))?;
    Ok(())
}

fn strings<'a>(rows: &[PairRecord<'a>], f: impl Fn(&PairRecord<'a>) -> &'a str) -> ArrayRef {
    let mut b = StringBuilder::new();
    rows.iter().for_each(|r| b.append_value(f(r)));
    Arc::new(b.finish())
}

fn floats(rows: &[PairRecord<'_>], f: impl Fn(&PairRecord<'_>) -> f64) -> ArrayRef {
    let mut b = Float64Builder::with_capacity(rows.len());
    rows.iter().for_each(|r| b.append_value(f(r)));
    Arc::new(b.finish())
}

fn string_lists<'r, S: AsRef<str> + 'r>(rows: &'r [PairRecord<'_>], f: impl Fn(&'r PairRecord<'_>) -> &'r [S]) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for r in rows {
        for s in f(r) {
            b.values().append_value(s.as_ref());
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

fn float_lists<'r>(rows: &'r [PairRecord<'_>], f: impl Fn(&'r PairRecord<'_>) -> &'r [f32]) -> ArrayRef {
    let mut b = ListBuilder::new(Float32Builder::new());
    for r in rows {
        b.values().append_slice(f(r));
        b.append(true);
    }
    Arc::new(b.finish())
}

fn to_batch(rows: &[PairRecord<'_>]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let mut patient = UInt32Builder::with_capacity(rows.len());
    let mut nih = BooleanBuilder::with_capacity(rows.len());
    let mut split = StringBuilder::new();
    for r in rows {
        patient.append_value(r.patient_id);
        nih.append_value(r.nih_label);
        split.append_option(r.official_split);
    }
    let columns: Vec<ArrayRef> = vec![
        strings(rows, |r| r.image_index),
        Arc::new(patient.finish()),
        strings(rows, |r| r.view_position),
        Arc::new(split.finish()),
        strings(rows, |r| r.label),
        Arc::new(nih.finish()),
        floats(rows, |r| r.confidence),
        floats(rows, |r| r.agreement),
        floats(rows, |r| r.consistency),
        strings(rows, |r| r.trust_class),
        string_lists(rows, |r| r.flags),
        string_lists(rows, |r| r.support_devices),
        string_lists(rows, |r| r.question_ids),
        float_lists(rows, |r| &r.question_logit_yes),
        float_lists(rows, |r| &r.question_logit_no),
        string_lists(rows, |r| r.device_question_ids),
        float_lists(rows, |r| r.device_logit_yes),
        float_lists(rows, |r| r.device_logit_no),
    ];
    RecordBatch::try_new(pair_schema(), columns)
}
