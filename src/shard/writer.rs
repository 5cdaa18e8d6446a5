//! Writes one split of a table as `{folder}/{split}-{i:05d}-of-{n:05d}.parquet`.
//!
//! Determinism: rows arrive in a fixed order, every writer setting is set explicitly (nothing
//! depends on library defaults that may drift), `created_by` names this tool, and no timestamp is
//! written. Shards are written in parallel, each by one thread, so `--jobs` cannot change a byte.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as PqCompression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use rayon::prelude::*;

use super::schema::SCHEMA_VERSION;
use crate::release_spec::{Compression, OutputSpec};

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

pub fn shard_name(folder: &str, split: &str, index: usize, count: usize) -> String {
    format!("{folder}/{split}-{index:05}-of-{count:05}.parquet")
}

fn properties(output: &OutputSpec, meta: &ShardMeta) -> WriterProperties {
    let compression = match output.compression {
        Compression::Zstd => {
            PqCompression::ZSTD(ZstdLevel::try_new(output.compression_level.unwrap_or(3)).expect("level validated by the spec"))
        }
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

/// Which table a shard belongs to: its folder, its schema and how rows become a batch.
pub struct TableLayout<R> {
    /// Folder under the release directory, e.g. `data` or `data/images`.
    pub folder: &'static str,
    pub schema: SchemaRef,
    /// Builds a batch of the schema's columns (a table's later-series columns are there or not).
    pub to_batch: fn(&SchemaRef, &[R]) -> Result<RecordBatch, arrow_schema::ArrowError>,
}

/// Writes `records` as one split of a table. Returns the files in shard order.
pub fn write_split<R: Sync>(
    dir: &Path,
    table: &TableLayout<R>,
    split: &str,
    records: &[R],
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
            let name = shard_name(table.folder, split, i, count);
            let path = dir.join(&name);
            write_file(&path, table, &records[start..end], output.row_group_rows, props.clone())?;
            Ok(ShardFile { path: name, split: split.to_string(), rows: (end - start) as u64 })
        })
        .collect()
}

fn write_file<R>(path: &Path, table: &TableLayout<R>, records: &[R], batch_rows: usize, props: WriterProperties) -> Result<(), ShardError> {
    let err = |message: String| ShardError::Write { path: path.to_path_buf(), message };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
    }
    let file = File::create(path).map_err(|e| err(e.to_string()))?;
    let mut writer = ArrowWriter::try_new(file, table.schema.clone(), Some(props)).map_err(|e| err(e.to_string()))?;
    for chunk in records.chunks(batch_rows.max(1)) {
        writer.write(&(table.to_batch)(&table.schema, chunk).map_err(|e| err(e.to_string()))?).map_err(|e| err(e.to_string()))?;
    }
    writer.close().map_err(|e| err(e.to_string()))?;
    Ok(())
}
