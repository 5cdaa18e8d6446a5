//! The files confident learning reads and writes, all Parquet:
//! - a features file: `image_index` (text) and `features` (a list of float32 or float64, the same
//!   length on every row), one row per image: what a backend without the engine's features (an
//!   OpenAI-compatible server) brings;
//! - a probabilities file: `image_index`, `finding` (text) and `p` (float64), the out-of-fold
//!   probability that the finding is present, for rules on probabilities made elsewhere;
//! - the out-of-fold table this tool writes: `image_index`, `patient_id`, `fold`, `finding`,
//!   `nih_label`, `p`, one row per (image, finding) probed.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::{Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

use super::probe::FeatureMatrix;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read {}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not a readable Parquet file: {message}", path.display())]
    Parquet { path: PathBuf, message: String },
    #[error("{}: no column {column:?} (expected {expected})", path.display())]
    MissingColumn { path: PathBuf, column: &'static str, expected: &'static str },
    #[error("{}: column {column:?} is {found}, expected {expected}", path.display())]
    ColumnType { path: PathBuf, column: &'static str, found: String, expected: &'static str },
    #[error("{}: row {row} ({image}): {message}", path.display())]
    Row { path: PathBuf, row: usize, image: String, message: String },
    #[error("{}: no rows", path.display())]
    Empty { path: PathBuf },
}

/// Every image's features, in file order.
pub fn read_features(path: &Path) -> Result<(Vec<String>, FeatureMatrix), TableError> {
    let mut images = Vec::new();
    let mut values = Vec::new();
    let mut dims = None;
    let mut seen = HashSet::new();
    for_each_batch(path, |batch| {
        let names = text_column(path, batch, "image_index", "text, the NIH image name")?;
        let features = column(path, batch, "features", "a list of float32 or float64 per image")?;
        for i in 0..batch.num_rows() {
            let row = images.len();
            let image = names.value(i).to_string();
            let bad = |message: String| TableError::Row { path: path.into(), row, image: image.clone(), message };
            let vector: Vec<f32> = list_values(path, &features, i, &bad)?;
            let expected = *dims.get_or_insert(vector.len());
            if vector.len() != expected || expected == 0 {
                return Err(bad(format!("{} features where the first row has {expected}", vector.len())));
            }
            if let Some(k) = vector.iter().position(|v| !v.is_finite()) {
                return Err(bad(format!("feature {k} is {}", vector[k])));
            }
            if !seen.insert(image.clone()) {
                return Err(bad("the image appears twice".into()));
            }
            values.extend(vector);
            images.push(image);
        }
        Ok(())
    })?;
    let Some(dims) = dims else { return Err(TableError::Empty { path: path.into() }) };
    let rows = images.len();
    Ok((images, FeatureMatrix::new(rows, dims, values)))
}

/// One out-of-fold probability from a probabilities file.
#[derive(Debug, Clone, PartialEq)]
pub struct Probability {
    pub image_index: String,
    pub finding: String,
    pub p: f64,
}

/// Every row of a probabilities file; each (image, finding) at most once, each p in [0, 1].
pub fn read_probabilities(path: &Path) -> Result<Vec<Probability>, TableError> {
    let mut rows = Vec::new();
    let mut seen = HashSet::new();
    for_each_batch(path, |batch| {
        let names = text_column(path, batch, "image_index", "text, the NIH image name")?;
        let findings = text_column(path, batch, "finding", "text, the NIH label")?;
        let p = column(path, batch, "p", "float64, the probability that the finding is present")?;
        let Some(p) = p.as_primitive_opt::<Float64Type>() else {
            return Err(type_error(path, "p", p.data_type(), "float64"));
        };
        for i in 0..batch.num_rows() {
            let row = Probability { image_index: names.value(i).to_string(), finding: findings.value(i).to_string(), p: p.value(i) };
            let bad = |message: String| TableError::Row { path: path.into(), row: rows.len(), image: row.image_index.clone(), message };
            if p.is_null(i) || !(0.0..=1.0).contains(&row.p) {
                return Err(bad(format!("p of {} is {}, expected a probability in [0, 1]", row.finding, row.p)));
            }
            if !seen.insert((row.image_index.clone(), row.finding.clone())) {
                return Err(bad(format!("{} appears twice for this image", row.finding)));
            }
            rows.push(row);
        }
        Ok(())
    })?;
    if rows.is_empty() {
        return Err(TableError::Empty { path: path.into() });
    }
    Ok(rows)
}

/// A row of the out-of-fold table.
#[derive(Debug, Clone, PartialEq)]
pub struct OutOfFoldRow<'a> {
    pub image_index: &'a str,
    pub patient_id: u32,
    pub fold: u32,
    pub finding: &'a str,
    pub nih_label: bool,
    pub p: f64,
}

/// The out-of-fold table as Parquet bytes (written whole by the caller).
pub fn out_of_fold_parquet(rows: &[OutOfFoldRow<'_>]) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("image_index", DataType::Utf8, false),
        Field::new("patient_id", DataType::UInt32, false),
        Field::new("fold", DataType::UInt32, false),
        Field::new("finding", DataType::Utf8, false),
        Field::new("nih_label", DataType::Boolean, false),
        Field::new("p", DataType::Float64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.image_index))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.patient_id))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.fold))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.finding))),
        Arc::new(BooleanArray::from(rows.iter().map(|r| r.nih_label).collect::<Vec<_>>())),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.p))),
    ];
    parquet_bytes(schema, columns, &[])
}

/// A features file as Parquet bytes: one row per image, `features` a list of float32; `metadata`
/// goes into the file's key-value metadata (what made the vectors).
pub fn features_parquet(names: &[String], vectors: &[Vec<f32>], metadata: &[(String, String)]) -> Vec<u8> {
    use arrow_array::builder::{Float32Builder, ListBuilder};
    let mut list = ListBuilder::new(Float32Builder::new()).with_field(Arc::new(Field::new("item", DataType::Float32, false)));
    for v in vectors {
        list.values().append_slice(v);
        list.append(true);
    }
    let list = list.finish();
    let schema = Arc::new(Schema::new(vec![
        Field::new("image_index", DataType::Utf8, false),
        Field::new("features", list.data_type().clone(), false),
    ]));
    let columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from_iter_values(names)), Arc::new(list)];
    parquet_bytes(schema, columns, metadata)
}

/// One record batch of `columns` as Parquet bytes, with `metadata` as the file's key-value
/// metadata (none when empty).
fn parquet_bytes(schema: Arc<Schema>, columns: Vec<ArrayRef>, metadata: &[(String, String)]) -> Vec<u8> {
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("columns match the schema");
    let props = (!metadata.is_empty()).then(|| {
        let kv = metadata.iter().map(|(k, v)| parquet::file::metadata::KeyValue::new(k.clone(), v.clone())).collect();
        parquet::file::properties::WriterProperties::builder().set_key_value_metadata(Some(kv)).build()
    });
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, props).expect("an in-memory writer");
    writer.write(&batch).expect("an in-memory write");
    writer.close().expect("an in-memory close");
    bytes
}

fn for_each_batch(path: &Path, mut each: impl FnMut(&RecordBatch) -> Result<(), TableError>) -> Result<(), TableError> {
    let file = File::open(path).map_err(|source| TableError::Io { path: path.into(), source })?;
    let parquet = |e: &dyn std::fmt::Display| TableError::Parquet { path: path.into(), message: e.to_string() };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| parquet(&e))?.build().map_err(|e| parquet(&e))?;
    for batch in reader {
        each(&batch.map_err(|e| parquet(&e))?)?;
    }
    Ok(())
}

fn column(path: &Path, batch: &RecordBatch, name: &'static str, expected: &'static str) -> Result<ArrayRef, TableError> {
    let column = batch.column_by_name(name).cloned();
    let column = column.ok_or(TableError::MissingColumn { path: path.into(), column: name, expected })?;
    if column.null_count() > 0 {
        let row = (0..column.len()).find(|&i| column.is_null(i)).unwrap_or(0);
        return Err(TableError::Row { path: path.into(), row, image: "?".into(), message: format!("{name} is empty") });
    }
    Ok(column)
}

fn text_column(path: &Path, batch: &RecordBatch, name: &'static str, expected: &'static str) -> Result<StringArray, TableError> {
    let c = column(path, batch, name, expected)?;
    match c.data_type() {
        DataType::Utf8 => Ok(c.as_string::<i32>().clone()),
        DataType::LargeUtf8 => Ok(StringArray::from_iter_values(c.as_string::<i64>().iter().map(|v| v.unwrap_or_default()))),
        DataType::Utf8View => Ok(StringArray::from_iter_values(c.as_string_view().iter().map(|v| v.unwrap_or_default()))),
        other => Err(type_error(path, name, other, "text")),
    }
}

/// Row `i` of a list-of-floats column (this batch's), as f32; `bad` names the row in the file.
fn list_values(path: &Path, column: &ArrayRef, i: usize, bad: &dyn Fn(String) -> TableError) -> Result<Vec<f32>, TableError> {
    let values = match column.data_type() {
        DataType::List(_) => column.as_list::<i32>().value(i),
        DataType::LargeList(_) => column.as_list::<i64>().value(i),
        DataType::FixedSizeList(_, _) => column.as_fixed_size_list().value(i),
        other => return Err(type_error(path, "features", other, "a list of float32 or float64")),
    };
    if values.null_count() > 0 {
        return Err(bad("a feature is empty".into()));
    }
    match values.data_type() {
        DataType::Float32 => Ok(values.as_primitive::<Float32Type>().values().to_vec()),
        // The engine's features are f32; a float64 file is read at that precision.
        DataType::Float64 => Ok(values.as_primitive::<Float64Type>().values().iter().map(|&v| v as f32).collect()),
        other => Err(type_error(
            path,
            "features",
            &DataType::List(Arc::new(Field::new("item", other.clone(), true))),
            "a list of float32 or float64",
        )),
    }
}

fn type_error(path: &Path, column: &'static str, found: &DataType, expected: &'static str) -> TableError {
    TableError::ColumnType { path: path.into(), column, found: found.to_string(), expected }
}
