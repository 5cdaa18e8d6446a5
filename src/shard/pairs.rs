//! The pair table: one row per (image, label).

use std::sync::Arc;

use arrow_array::builder::BooleanBuilder;
use arrow_array::{ArrayRef, RecordBatch};

use super::columns::*;
use super::schema::pair_schema;
use super::writer::TableLayout;
use crate::infer::YesNo;

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
    /// The image's scores for the whole prompt set, and where this row's questions sit in it:
    /// the logits are read in place rather than copied per row.
    pub scores: &'a [YesNo],
    pub positions: &'a [usize],
}

pub fn layout<'a>() -> TableLayout<PairRecord<'a>> {
    TableLayout { folder: "data", schema: pair_schema(), to_batch }
}

fn to_batch(rows: &[PairRecord<'_>]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let mut nih = BooleanBuilder::with_capacity(rows.len());
    rows.iter().for_each(|r| nih.append_value(r.nih_label));
    let columns: Vec<ArrayRef> = vec![
        strings(rows, |r| r.image_index),
        u32s(rows, |r| r.patient_id),
        strings(rows, |r| r.view_position),
        optional_strings(rows, |r| r.official_split),
        strings(rows, |r| r.label),
        Arc::new(nih.finish()),
        floats(rows, |r| r.confidence),
        floats(rows, |r| r.agreement),
        floats(rows, |r| r.consistency),
        strings(rows, |r| r.trust_class),
        string_lists(rows, |r| r.flags),
        string_lists(rows, |r| r.support_devices),
        string_lists(rows, |r| r.question_ids),
        float_lists(rows, |r| r.positions.iter().map(|&q| r.scores[q].logit_yes)),
        float_lists(rows, |r| r.positions.iter().map(|&q| r.scores[q].logit_no)),
    ];
    RecordBatch::try_new(pair_schema(), columns)
}
