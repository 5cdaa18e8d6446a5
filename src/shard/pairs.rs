//! The pair table: one row per (image, label).

use std::sync::Arc;

use arrow_array::builder::BooleanBuilder;
use arrow_array::{ArrayRef, RecordBatch};

use super::columns::*;
use super::schema::pair_schema;
use super::writer::TableLayout;

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
        float_lists(rows, |r| &r.question_logit_yes),
        float_lists(rows, |r| &r.question_logit_no),
        string_lists(rows, |r| r.device_question_ids),
        float_lists(rows, |r| r.device_logit_yes),
        float_lists(rows, |r| r.device_logit_no),
    ];
    RecordBatch::try_new(pair_schema(), columns)
}
