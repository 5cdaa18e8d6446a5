//! The pair table: one row per (image, label).

use arrow_array::{ArrayRef, RecordBatch};

use super::columns::*;
use super::schema::{has_column, pair_columns, schema_of, ColumnSet};
use super::writer::TableLayout;
use crate::diagnose::RowDiagnosis;
use crate::infer::YesNo;
use crate::reason::RowReasoning;
use bpals_vlm::grounding::ImageBox;

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
    /// S2's location and signs; None in an S1 release.
    pub diagnosis: Option<&'a RowDiagnosis>,
    /// S3's reasoning; None before S3.
    pub reasoning: Option<&'a RowReasoning>,
    /// Each family's own view of the row, where a second opinion was asked.
    pub second: Option<SecondOpinionRow<'a>>,
    /// Confident learning's view of the row, where the spec asks for it.
    pub confident: Option<ConfidentRow>,
}

/// A row as confident learning sees it: both None where the finding had no probe.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConfidentRow {
    /// The out-of-fold probability that NIH's label is right.
    pub confidence: Option<f64>,
    pub label_issue: Option<bool>,
}

/// A row as each family sees it alone, in a two-family release.
#[derive(Debug, Clone)]
pub struct SecondOpinionRow<'a> {
    pub primary_confidence: f64,
    pub primary_trust_class: &'a str,
    pub second_confidence: f64,
    pub second_trust_class: &'a str,
    /// The second model's scores of the image's whole prompt set (read at `positions`).
    pub second_scores: &'a [YesNo],
    pub family_agreement: f64,
}

/// The pair table with the columns of the series `set` names.
pub fn layout<'a>(set: ColumnSet) -> TableLayout<PairRecord<'a>> {
    TableLayout { folder: "data", schema: schema_of(&pair_columns(set)), to_batch }
}

fn to_batch(schema: &arrow_schema::SchemaRef, rows: &[PairRecord<'_>]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let mut columns = s1_columns(rows);
    if has_column(schema, "location_side") {
        columns.extend(diagnose_columns(rows));
    }
    if has_column(schema, "reasoning_text") {
        let empty = RowReasoning::default();
        let r: Vec<&RowReasoning> = rows.iter().map(|row| row.reasoning.unwrap_or(&empty)).collect();
        columns.extend([
            strings(&r, |r| r.text.as_str()),
            optional_strings(&r, |r| r.answer.as_deref()),
            bools(&r, |r| r.parsed),
            optional_bools(&r, |r| r.says),
            optional_bools(&r, |r| r.agrees),
            bools(&r, |r| r.disagrees()),
            u32s(&r, |r| r.new_tokens as u32),
            bools(&r, |r| r.truncated),
        ]);
    }
    if has_column(schema, "second_confidence") {
        let s: Vec<(&SecondOpinionRow, &[usize])> =
            rows.iter().map(|r| (r.second.as_ref().expect("a two-family release's rows have both views"), r.positions)).collect();
        columns.extend([
            floats(&s, |(s, _)| s.primary_confidence),
            strings(&s, |(s, _)| s.primary_trust_class),
            floats(&s, |(s, _)| s.second_confidence),
            strings(&s, |(s, _)| s.second_trust_class),
            float_lists(&s, |(s, p)| p.iter().map(|&q| s.second_scores[q].logit_yes)),
            float_lists(&s, |(s, p)| p.iter().map(|&q| s.second_scores[q].logit_no)),
            floats(&s, |(s, _)| s.family_agreement),
        ]);
    }
    if has_column(schema, "cl_confidence") {
        let c: Vec<ConfidentRow> = rows.iter().map(|r| r.confident.unwrap_or_default()).collect();
        columns.extend([optional_floats(&c, |c| c.confidence), optional_bools(&c, |c| c.label_issue)]);
    }
    RecordBatch::try_new(schema.clone(), columns)
}

fn diagnose_columns(rows: &[PairRecord<'_>]) -> Vec<ArrayRef> {
    let empty = RowDiagnosis::default();
    let d: Vec<&RowDiagnosis> = rows.iter().map(|r| r.diagnosis.unwrap_or(&empty)).collect();
    let boxes: Vec<Option<&ImageBox>> = d.iter().map(|d| d.first_box()).collect();
    vec![
        optional_strings(&d, |d| d.side()),
        optional_floats(&d, |d| d.side_p.map(|p| p[0])),
        optional_floats(&d, |d| d.side_p.map(|p| p[1])),
        optional_strings(&d, |d| d.zone()),
        optional_floats(&d, |d| d.zone_p.map(|p| p[0])),
        optional_floats(&d, |d| d.zone_p.map(|p| p[1])),
        optional_floats(&d, |d| d.zone_p.map(|p| p[2])),
        optional_strings(&d, |d| d.grounding.as_ref().map(|g| g.grounding.status.name())),
        optional_floats(&boxes, |b| b.map(|b| b.x1)),
        optional_floats(&boxes, |b| b.map(|b| b.y1)),
        optional_floats(&boxes, |b| b.map(|b| b.x2)),
        optional_floats(&boxes, |b| b.map(|b| b.y2)),
        optional_strings(&d, |d| d.grounding.as_ref().map(|g| g.answer.as_str())),
        optional_bools(&d, |d| d.grounding.as_ref().map(|g| g.truncated)),
        string_lists(&d, |d| d.signs.as_slice()),
        float_lists(&d, |d| d.sign_scores.iter().map(|s| s.logit_yes)),
        float_lists(&d, |d| d.sign_scores.iter().map(|s| s.logit_no)),
        string_lists(&d, |d| d.signs_seen.as_slice()),
        optional_bools(&d, |d| d.no_sign_seen),
    ]
}

fn s1_columns(rows: &[PairRecord<'_>]) -> Vec<ArrayRef> {
    let columns: Vec<ArrayRef> = vec![
        strings(rows, |r| r.image_index),
        u32s(rows, |r| r.patient_id),
        strings(rows, |r| r.view_position),
        optional_strings(rows, |r| r.official_split),
        strings(rows, |r| r.label),
        bools(rows, |r| r.nih_label),
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
    columns
}
