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

fn scalar(frame: &DataFrame, name: &str) -> Result<u64, SourceError> {
    Ok(frame.column(name)?.get(0)?.extract::<u64>().unwrap_or(0))
}

/// Counts per distinct value of a string column, sorted by value.
fn counts(frame: &DataFrame, column: &str) -> Result<Map<String, Value>, SourceError> {
    let counted = frame
        .clone()
        .lazy()
        .filter(col(column).is_not_null())
        .group_by([col(column)])
        .agg([len().alias("n")])
        .sort([column], SortMultipleOptions::default())
        .collect()?;
    let keys = counted.column(column)?.str()?.clone();
    let ns = counted.column("n")?.cast(&DataType::UInt64)?;
    let ns = ns.u64()?;
    Ok(keys.iter().zip(ns.iter()).map(|(k, n)| (k.unwrap_or("").to_string(), Value::from(n.unwrap_or(0)))).collect())
}

pub fn summarize(table: &NihTable) -> Result<SourceSummary, SourceError> {
    let frame = &table.frame;
    let mut exprs = vec![
        len().cast(DataType::UInt64).alias("images"),
        col("patient_id").n_unique().cast(DataType::UInt64).alias("patients"),
        col("age_years").min().cast(DataType::UInt64).alias("age_min"),
        col("age_years").max().cast(DataType::UInt64).alias("age_max"),
        col("n_boxes").gt(lit(0u32)).cast(DataType::UInt64).sum().alias("boxed_images"),
    ];
    for label in LABELS {
        exprs.push(col(label).cast(DataType::UInt64).sum().alias(format!("count:{label}")));
    }
    let agg = frame.clone().lazy().select(exprs).collect()?;
    let mut labels = Map::new();
    let mut label_rows = 0;
    for label in LABELS {
        let n = scalar(&agg, &format!("count:{label}"))?;
        label_rows += n;
        labels.insert(label.to_string(), n.into());
    }
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
        images: scalar(&agg, "images")?,
        patients: scalar(&agg, "patients")?,
        labels,
        label_rows,
        view_positions: counts(frame, "view_position")?,
        sexes: counts(frame, "sex")?,
        age: AgeRange { min: scalar(&agg, "age_min")?, max: scalar(&agg, "age_max")? },
        boxes: BoxSummary { total: table.boxes.len() as u64, images: scalar(&agg, "boxed_images")?, per_finding },
        splits,
        inputs: table.inputs.iter().map(|(k, v)| (k.clone(), serde_json::to_value(v).expect("plain struct"))).collect(),
    })
}
