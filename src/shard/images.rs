//! The image table: one row per image, with its chest2err-shaped error trace.

use arrow_array::RecordBatch;

use super::columns::*;
use super::schema::image_schema;
use super::writer::TableLayout;
use crate::signal::trace::ErrorTrace;

#[derive(Debug, Clone)]
pub struct ImageRecord<'a> {
    pub image_index: &'a str,
    pub patient_id: u32,
    pub view_position: &'a str,
    pub official_split: Option<&'a str>,
    pub support_devices: &'a [&'static str],
    pub device_question_ids: &'a [String],
    pub device_logit_yes: &'a [f32],
    pub device_logit_no: &'a [f32],
    pub trace: &'a ErrorTrace,
}

pub fn layout<'a>() -> TableLayout<ImageRecord<'a>> {
    TableLayout { folder: "data/images", schema: image_schema(), to_batch }
}

fn tuple_field(r: &ImageRecord<'_>, f: impl Fn(&crate::signal::trace::ErrorTuple) -> i32) -> Vec<i32> {
    r.trace.tuples.iter().map(f).collect()
}

fn to_batch(rows: &[ImageRecord<'_>]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    RecordBatch::try_new(
        image_schema(),
        vec![
            strings(rows, |r| r.image_index),
            u32s(rows, |r| r.patient_id),
            strings(rows, |r| r.view_position),
            optional_strings(rows, |r| r.official_split),
            string_lists(rows, |r| r.trace.nih_findings.as_slice()),
            string_lists(rows, |r| r.trace.model_findings.as_slice()),
            string_lists(rows, |r| r.support_devices),
            string_lists(rows, |r| r.device_question_ids),
            float_lists(rows, |r| r.device_logit_yes.iter().copied()),
            float_lists(rows, |r| r.device_logit_no.iter().copied()),
            floats(rows, |r| r.trace.score),
            u32s(rows, |r| r.trace.k_total as u32),
            int_lists(rows, |r| tuple_field(r, |t| i32::from(t.category))),
            int_lists(rows, |r| tuple_field(r, |t| i32::from(t.anatomy))),
            int_lists(rows, |r| tuple_field(r, |t| i32::from(t.concept))),
            int_lists(rows, |r| tuple_field(r, |t| t.nih_item)),
            int_lists(rows, |r| tuple_field(r, |t| t.model_item)),
            int_lists(rows, |r| r.trace.per_category.iter().map(|&n| n as i32).collect()),
        ],
    )
}
