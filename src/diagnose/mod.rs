//! S2 Diagnose: where each finding of a row is, and which of its radiographic signs the model
//! sees, on the same rows as S1.
//!
//! - Side and zone: p_yes of the spec's yes/no questions, scored with S1's questions over the
//!   shared image prefix.
//! - A box: the answer to the family's grounding prompt (the generation stage), for every
//!   finding NIH asserts and the spec boxes, parsed strictly and mapped back to the original
//!   image's pixels ([`bpals_vlm::grounding`]).
//! - Signs: each sign of the finding's vocabulary scored yes/no; a row is flagged when NIH
//!   asserts the finding and the model sees none of its signs.
//!
//! Where NIH has a box, a model box or zone that contradicts it becomes a location tuple
//! (category 3) in the image's error trace.

pub mod location;
mod signs;

use std::collections::HashMap;

use crate::infer::{GenerationJob, ImageAnswers, ImageJob, ImageScores};
use crate::release_spec::diagnose::{side_id, zone_id, SIDES, ZONES};
use crate::release_spec::{PromptSet, Question};
use crate::select::Selection;
use crate::signal::trace::{self, ErrorTrace, ErrorTuple, LOCATION};
use crate::source::BoundingBox;
use crate::vocab::LABELS;
use bpals_vlm::grounding::{self, Grounding, ImageBox, ImageGeometry};
use bpals_vlm::{Family, YesNo};

/// What S2 adds to one row. Every part is None (or empty) where the spec does not ask it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowDiagnosis {
    /// p_yes of the side questions, [right, left].
    pub side_p: Option<[f64; 2]>,
    /// p_yes of the zone questions, [upper, middle, lower].
    pub zone_p: Option<[f64; 3]>,
    /// The grounding answer and its boxes.
    pub grounding: Option<RowGrounding>,
    /// The finding's signs (the spec's vocabulary), their scores, and those the model sees.
    pub signs: Vec<String>,
    pub sign_scores: Vec<YesNo>,
    pub signs_seen: Vec<String>,
    /// True when NIH asserts the finding and the model sees none of its signs; None where the
    /// finding has no signs or NIH does not assert it.
    pub no_sign_seen: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RowGrounding {
    pub answer: String,
    pub truncated: bool,
    pub grounding: Grounding,
}

impl RowDiagnosis {
    /// The side the model states: the one side it answers yes to (None when it says yes to both
    /// or to neither, or was not asked).
    pub fn side(&self) -> Option<&'static str> {
        self.side_p.and_then(|p| the_only_yes(&p)).map(|i| SIDES[i])
    }
    /// The zone the model states: the one zone it answers yes to.
    pub fn zone(&self) -> Option<&'static str> {
        self.zone_p.and_then(|p| the_only_yes(&p)).map(|i| ZONES[i])
    }
    /// The first box of the grounding answer: the one the columns carry.
    pub fn first_box(&self) -> Option<&ImageBox> {
        self.grounding.as_ref()?.grounding.boxes.first()
    }
}

/// The position of the only p_yes of at least one half, if exactly one is.
fn the_only_yes(p: &[f64]) -> Option<usize> {
    let mut yes = p.iter().enumerate().filter(|(_, p)| **p >= 0.5).map(|(i, _)| i);
    match (yes.next(), yes.next()) {
        (Some(i), None) => Some(i),
        _ => None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error("prompts.location.ground has no prompt for the model's family {family} (it has: {known})")]
    NoGroundPrompt { family: String, known: String },
}

/// The grounding work: one job per image with an asserted, boxed finding, and for each job the
/// selection row each of its prompts answers.
pub struct GroundingPlan {
    pub jobs: Vec<GenerationJob>,
    pub rows: Vec<Vec<usize>>,
    pub family: &'static str,
}

pub fn grounding_plan(
    selection: &Selection,
    prompts: &PromptSet,
    family: &'static str,
    images: &[ImageJob],
) -> Result<GroundingPlan, DiagnoseError> {
    let mut plan = GroundingPlan { jobs: Vec::new(), rows: Vec::new(), family };
    let Some(location) = &prompts.location else { return Ok(plan) };
    if !location.ground.contains_key(family) {
        let known: Vec<&str> = location.ground.keys().map(String::as_str).collect();
        return Err(DiagnoseError::NoGroundPrompt { family: family.to_string(), known: known.join(", ") });
    }
    let mut by_image: Vec<Vec<usize>> = vec![Vec::new(); selection.images.len()];
    for (i, row) in selection.rows.iter().enumerate() {
        if row.nih_label && location.findings.contains_key(LABELS[row.label]) {
            by_image[row.image].push(i);
        }
    }
    for (image, rows) in by_image.into_iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let prompts = rows
            .iter()
            .map(|&i| location.ground_prompt(family, LABELS[selection.rows[i].label]).expect("checked: family and finding are known"))
            .collect();
        plan.jobs.push(GenerationJob { image: images[image].clone(), prompts });
        plan.rows.push(rows);
    }
    Ok(plan)
}

/// Everything S2 derives, per selection row, and the traces with their location tuples.
pub struct Diagnosis {
    pub rows: Vec<RowDiagnosis>,
}

/// What [`derive`] reads.
pub struct DiagnoseInput<'a> {
    pub selection: &'a Selection,
    pub scores: &'a [ImageScores],
    pub questions: &'a [Question],
    pub prompts: &'a PromptSet,
    pub plan: &'a GroundingPlan,
    /// Per job of the plan.
    pub answers: &'a [ImageAnswers],
    /// NIH's boxes (the sample's drawn boxes).
    pub boxes: &'a [BoundingBox],
    /// (width, height) of each boxed image's PNG: NIH's boxes are in the pixels of its 1024x1024
    /// PNGs, not in the metadata's `OriginalImage` size.
    pub sizes: &'a HashMap<String, (u32, u32)>,
    pub tau: f64,
}

/// Derives every row's diagnosis and adds location tuples to `traces`.
pub fn derive(input: &DiagnoseInput<'_>, traces: &mut [ErrorTrace]) -> Diagnosis {
    let selection = input.selection;
    let position: HashMap<&str, usize> = input.questions.iter().enumerate().map(|(i, q)| (q.id.as_str(), i)).collect();
    let family = Family::from_name(input.plan.family).expect("the scorer names a known family");
    let mut rows: Vec<RowDiagnosis> = selection
        .rows
        .iter()
        .map(|row| {
            let scores = &input.scores[row.image].scores;
            let label = LABELS[row.label];
            let mut d = RowDiagnosis::default();
            if let Some(location) = &input.prompts.location {
                if location.zoned().any(|f| f == label) {
                    let p = |id: String| scores[position[id.as_str()]].p_yes();
                    d.side_p = Some(SIDES.map(|s| p(side_id(label, s))));
                    d.zone_p = Some(ZONES.map(|z| p(zone_id(label, z))));
                }
            }
            if let Some(vocabulary) = &input.prompts.signs {
                signs::score_row(&mut d, vocabulary, label, row.nih_label, scores, &position);
            }
            d
        })
        .collect();
    for (job_rows, answers) in input.plan.rows.iter().zip(input.answers) {
        let geometry = ImageGeometry { original: answers.original, resized: answers.resized };
        for (&row, answer) in job_rows.iter().zip(&answers.answers) {
            rows[row].grounding = Some(RowGrounding {
                answer: answer.text.clone(),
                truncated: answer.truncated,
                grounding: grounding::parse(family.box_format(), &answer.text, geometry),
            });
        }
    }
    if let Some(location) = &input.prompts.location {
        add_location_tuples(selection, &rows, input, location.zone_bounds, traces);
    }
    Diagnosis { rows }
}

/// A location tuple for every row whose box or zone contradicts NIH's box of the finding.
fn add_location_tuples(
    selection: &Selection,
    rows: &[RowDiagnosis],
    input: &DiagnoseInput<'_>,
    zone_bounds: [f64; 2],
    traces: &mut [ErrorTrace],
) {
    let image_of: HashMap<&str, usize> = selection.images.iter().enumerate().map(|(i, r)| (r.image_index.as_str(), i)).collect();
    let mut reference: HashMap<(usize, &str), Vec<&BoundingBox>> = HashMap::new();
    for b in input.boxes {
        if let Some(&image) = image_of.get(b.image_index.as_str()) {
            reference.entry((image, b.label.as_str())).or_default().push(b);
        }
    }
    let mut extra: Vec<Vec<ErrorTuple>> = vec![Vec::new(); traces.len()];
    for (row, d) in selection.rows.iter().zip(rows) {
        let label = LABELS[row.label];
        let Some(nih) = reference.get(&(row.image, label)) else { continue };
        let Some(&size) = input.sizes.get(&selection.images[row.image].image_index) else { continue };
        if location::contradicts(d, nih, size, zone_bounds) {
            let t = &traces[row.image];
            let at = |list: &[&str]| list.iter().position(|f| *f == label).map_or(-1, |p| p as i32);
            extra[row.image].push(ErrorTuple {
                category: LOCATION,
                anatomy: trace::anatomy_of(label),
                concept: row.label as u8,
                nih_item: at(&t.nih_findings),
                model_item: at(&t.model_findings),
            });
        }
    }
    for (t, more) in traces.iter_mut().zip(extra).filter(|(_, m)| !m.is_empty()) {
        let found = t.errors_found + more.len();
        let mut tuples = std::mem::take(&mut t.tuples);
        tuples.extend(more);
        tuples.truncate(trace::MAX_TUPLES);
        *t = ErrorTrace::from_tuples(std::mem::take(&mut t.nih_findings), std::mem::take(&mut t.model_findings), tuples, found, input.tau);
    }
}
