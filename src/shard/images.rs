//! The image table: one row per image, with its chest2err-shaped error trace.

use arrow_array::{ArrayRef, RecordBatch};

use super::columns::*;
use super::schema::{has_column, image_columns, schema_of, ColumnSet};
use super::writer::TableLayout;
use crate::paraphrase::ImageReport;
use crate::signal::text_trace::TextTrace;
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
    /// S3: the image's answers traced against its scores.
    pub reasoning_trace: Option<&'a TextTrace>,
    /// S4: the report and its traces.
    pub report: Option<&'a ImageReport>,
    /// Confident learning's verdicts on the image's labels.
    pub confident: Option<&'a ImageIssues>,
}

/// The labels of one image confident learning names issues, by what NIH said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageIssues {
    /// Findings NIH lists that the probe confidently says absent.
    pub false_labels: Vec<&'static str>,
    /// Findings NIH left out that the probe confidently says present.
    pub omissions: Vec<&'static str>,
}

/// The image table with the columns of the series `set` names.
pub fn layout<'a>(set: ColumnSet) -> TableLayout<ImageRecord<'a>> {
    TableLayout { folder: "data/images", schema: schema_of(&image_columns(set)), to_batch }
}

/// The seven columns of a consistency trace.
fn text_trace_columns(traces: &[&TextTrace]) -> [ArrayRef; 7] {
    let field = |f: fn(&crate::signal::text_trace::TextTuple) -> i32| move |t: &&TextTrace| t.tuples.iter().map(f).collect::<Vec<i32>>();
    [
        floats(traces, |t| t.score),
        u32s(traces, |t| t.k_total as u32),
        int_lists(traces, field(|t| i32::from(t.category))),
        int_lists(traces, field(|t| i32::from(t.anatomy))),
        int_lists(traces, field(|t| i32::from(t.concept))),
        int_lists(traces, field(|t| t.reference_item)),
        int_lists(traces, field(|t| t.candidate_item)),
    ]
}

fn tuple_field(r: &ImageRecord<'_>, f: impl Fn(&crate::signal::trace::ErrorTuple) -> i32) -> Vec<i32> {
    r.trace.tuples.iter().map(f).collect()
}

fn to_batch(schema: &arrow_schema::SchemaRef, rows: &[ImageRecord<'_>]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let mut columns = vec![
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
    ];
    let empty = TextTrace::empty();
    if has_column(schema, "reasoning_error_score") {
        let traces: Vec<&TextTrace> = rows.iter().map(|r| r.reasoning_trace.unwrap_or(&empty)).collect();
        columns.extend(text_trace_columns(&traces));
    }
    if has_column(schema, "report_text") {
        let reports: Vec<&ImageReport> = rows.iter().map(|r| r.report.expect("an S4 release reports every image")).collect();
        columns.extend([
            strings(&reports, |r| r.text.as_str()),
            u32s(&reports, |r| r.new_tokens as u32),
            bools(&reports, |r| r.truncated),
            u32s(&reports, |r| r.sentences as u32),
            string_lists(&reports, |r| r.present.as_slice()),
            string_lists(&reports, |r| r.uncertain.as_slice()),
        ]);
        columns.extend(text_trace_columns(&reports.iter().map(|r| &r.against_nih).collect::<Vec<_>>()));
        columns.extend(text_trace_columns(&reports.iter().map(|r| &r.against_model).collect::<Vec<_>>()));
    }
    if has_column(schema, "cl_false_labels") {
        let issues: Vec<&ImageIssues> = rows.iter().map(|r| r.confident.expect("confident learning judges every image")).collect();
        columns.extend([string_lists(&issues, |i| i.false_labels.as_slice()), string_lists(&issues, |i| i.omissions.as_slice())]);
    }
    RecordBatch::try_new(schema.clone(), columns)
}
