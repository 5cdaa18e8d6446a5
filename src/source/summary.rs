//! The JSON summary `bpals-release source` prints, computed with polars over the NIH table.

use polars::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{NihTable, SourceError};
use crate::vocab::LABELS;

#[derive(Debug, Clone, Serialize)]
pub struct SourceSummary {
    pub images: u64,
    pub patients: u64,
    /// Images per label, in vocabulary order.
    pub labels: Map<String, Value>,
    /// (image, label) pairs NIH asserts, "No Finding" included.
    pub label_rows: u64,
    pub view_positions: Map<String, Value>,
    pub sexes: Map<String, Value>,
    pub age: AgeRange,
    pub boxes: BoxSummary,
    pub splits: Option<Map<String, Value>>,
    pub inputs: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AgeRange {
    pub min: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BoxSummary {
    pub total: u64,
    pub images: u64,
    pub per_finding: Map<String, Value>,
}

/// A numeric column reduced to one value (min, max or sum), as u64; 0 for an empty table.
fn reduce(frame: &DataFrame, name: &str, how: fn(&Column) -> PolarsResult<Scalar>) -> Result<u64, SourceError> {
    let column = frame.column(name)?.cast(&DataType::UInt64)?;
    Ok(how(&column)?.value().extract::<u64>().unwrap_or(0))
}

/// Counts per distinct value of a string column, sorted by value; nulls left out.
fn counts(frame: &DataFrame, column: &str) -> Result<Map<String, Value>, SourceError> {
    let present = frame.select([column])?.drop_nulls::<String>(None)?;
    let groups = present.group_by([column])?;
    let keys = groups.keys().swap_remove(0);
    let sizes = groups.get_groups().group_count();
    let mut counted: Vec<(String, u64)> =
        keys.str()?.iter().zip(sizes.iter()).map(|(k, n)| (k.unwrap_or("").to_string(), u64::from(n.unwrap_or(0)))).collect();
    counted.sort();
    Ok(counted.into_iter().map(|(k, n)| (k, Value::from(n))).collect())
}

pub fn summarize(table: &NihTable) -> Result<SourceSummary, SourceError> {
    let frame = &table.frame;
    let mut labels = Map::new();
    let mut label_rows = 0;
    for label in LABELS {
        let n = reduce(frame, label, Column::sum_reduce)?;
        label_rows += n;
        labels.insert(label.to_string(), n.into());
    }
    let boxed_images = frame.column("n_boxes")?.as_materialized_series().gt(0u32)?.sum().unwrap_or(0);
    let mut per_finding = Map::new();
    for label in LABELS {
        let n = table.boxes.iter().filter(|b| b.label == label).count();
        if n > 0 {
            per_finding.insert(label.to_string(), n.into());
        }
    }
    let splits = if table.has_splits {
        let mut s = counts(frame, "split")?;
        let assigned: u64 = s.values().filter_map(Value::as_u64).sum();
        s.insert("unassigned".into(), (frame.height() as u64 - assigned).into());
        Some(s)
    } else {
        None
    };
    Ok(SourceSummary {
        images: frame.height() as u64,
        patients: frame.column("patient_id")?.n_unique()? as u64,
        labels,
        label_rows,
        view_positions: counts(frame, "view_position")?,
        sexes: counts(frame, "sex")?,
        age: AgeRange { min: reduce(frame, "age_years", Column::min_reduce)?, max: reduce(frame, "age_years", Column::max_reduce)? },
        boxes: BoxSummary { total: table.boxes.len() as u64, images: u64::from(boxed_images), per_finding },
        splits,
        inputs: table.inputs.iter().map(|(k, v)| (k.clone(), serde_json::to_value(v).expect("plain struct"))).collect(),
    })
}
