//! Joins the selection, the scores and the signal into shard records.

use crate::diagnose::Diagnosis;
use crate::infer::ImageScores;
use crate::paraphrase::ImageReport;
use crate::reason::Reasoning;
use crate::release_spec::Question;
use crate::select::Selection;
use crate::shard::{ImageRecord, PairRecord};
use crate::signal::{QuestionIndex, Signal};
use crate::vocab::LABELS;

/// Per-label and per-device question positions, computed once for all rows.
pub struct RecordTable<'a> {
    selection: &'a Selection,
    signal: &'a Signal,
    scores: &'a [ImageScores],
    label_questions: Vec<Vec<usize>>,
    label_question_ids: Vec<Vec<String>>,
    device_question_ids: Vec<String>,
    device_logits: Vec<(Vec<f32>, Vec<f32>)>,
    diagnosis: Option<&'a Diagnosis>,
    reasoning: Option<&'a Reasoning>,
    /// S4: one report per selected image.
    reports: Option<&'a [ImageReport]>,
    second: Option<SecondOpinion<'a>>,
    confident: Option<&'a super::confident::ConfidentView>,
}

/// A second opinion's inputs to the records: each family's own signal, the second model's
/// scores, and the families' agreement per row.
#[derive(Clone, Copy)]
pub struct SecondOpinion<'a> {
    pub primary: &'a Signal,
    pub second: &'a Signal,
    pub scores: &'a [ImageScores],
    pub family_agreement: &'a [f64],
}

impl<'a> RecordTable<'a> {
    pub fn new(selection: &'a Selection, signal: &'a Signal, scores: &'a [ImageScores], questions: &[Question]) -> Self {
        let index = QuestionIndex::new(questions);
        let label_questions = index.labels;
        let label_question_ids = label_questions.iter().map(|qs| qs.iter().map(|&i| questions[i].id.clone()).collect()).collect();
        // All device questions, in prompt-set order.
        let mut device_idx: Vec<usize> = index.devices.into_iter().flatten().collect();
        device_idx.sort_unstable();
        let device_question_ids = device_idx.iter().map(|&i| questions[i].id.clone()).collect();
        let device_logits = scores
            .iter()
            .map(|s| {
                (device_idx.iter().map(|&i| s.scores[i].logit_yes).collect(), device_idx.iter().map(|&i| s.scores[i].logit_no).collect())
            })
            .collect();
        RecordTable {
            selection,
            signal,
            scores,
            label_questions,
            label_question_ids,
            device_question_ids,
            device_logits,
            diagnosis: None,
            reasoning: None,
            reports: None,
            second: None,
            confident: None,
        }
    }

    /// Adds confident learning's view of every row.
    pub fn with_confident_learning(self, confident: Option<&'a super::confident::ConfidentView>) -> Self {
        RecordTable { confident, ..self }
    }

    /// Adds each family's own view of every row (a two-family release).
    pub fn with_second_opinion(self, second: Option<SecondOpinion<'a>>) -> Self {
        RecordTable { second, ..self }
    }

    /// Adds S2's per-row location and signs to the records.
    pub fn with_diagnosis(self, diagnosis: Option<&'a Diagnosis>) -> Self {
        RecordTable { diagnosis, ..self }
    }

    /// Adds S3's reasoning (rows and image traces) and S4's reports.
    pub fn with_narrative(self, reasoning: Option<&'a Reasoning>, reports: Option<&'a [ImageReport]>) -> Self {
        RecordTable { reasoning, reports, ..self }
    }

    /// Records for the given selection rows, in the order given.
    pub fn records(&self, rows: &[usize]) -> Vec<PairRecord<'_>> {
        rows.iter()
            .map(|&i| {
                let row = &self.selection.rows[i];
                let image = &self.selection.images[row.image];
                let sig = &self.signal.pairs[i];
                PairRecord {
                    image_index: &image.image_index,
                    patient_id: image.patient_id,
                    view_position: &image.view_position,
                    official_split: image.official_split.as_deref(),
                    label: LABELS[row.label],
                    nih_label: row.nih_label,
                    confidence: sig.confidence,
                    agreement: sig.agreement,
                    consistency: sig.consistency,
                    trust_class: sig.trust_class.name(),
                    flags: &sig.flags,
                    support_devices: &self.signal.devices[row.image],
                    question_ids: &self.label_question_ids[row.label],
                    scores: &self.scores[row.image].scores,
                    positions: &self.label_questions[row.label],
                    diagnosis: self.diagnosis.map(|d| &d.rows[i]),
                    reasoning: self.reasoning.map(|r| &r.rows[i]),
                    second: self.second.map(|s| crate::shard::pairs::SecondOpinionRow {
                        primary_confidence: s.primary.pairs[i].confidence,
                        primary_trust_class: s.primary.pairs[i].trust_class.name(),
                        second_confidence: s.second.pairs[i].confidence,
                        second_trust_class: s.second.pairs[i].trust_class.name(),
                        second_scores: &s.scores[row.image].scores,
                        family_agreement: s.family_agreement[i],
                    }),
                    confident: self.confident.map(|c| c.row(row.image, row.label, row.nih_label)),
                }
            })
            .collect()
    }

    /// Image-table records for the given selected images, in the order given.
    pub fn image_records(&self, images: &[usize]) -> Vec<ImageRecord<'_>> {
        images
            .iter()
            .map(|&i| {
                let image = &self.selection.images[i];
                ImageRecord {
                    image_index: &image.image_index,
                    patient_id: image.patient_id,
                    view_position: &image.view_position,
                    official_split: image.official_split.as_deref(),
                    support_devices: &self.signal.devices[i],
                    device_question_ids: &self.device_question_ids,
                    device_logit_yes: &self.device_logits[i].0,
                    device_logit_no: &self.device_logits[i].1,
                    trace: &self.signal.traces[i],
                    reasoning_trace: self.reasoning.map(|r| &r.traces[i]),
                    report: self.reports.map(|r| &r[i]),
                    confident: self.confident.map(|c| c.image_issues(i)),
                }
            })
            .collect()
    }

    /// The images the given rows belong to, each once, in image order.
    pub fn images_of(&self, rows: &[usize]) -> Vec<usize> {
        let mut images: Vec<usize> = rows.iter().map(|&r| self.selection.rows[r].image).collect();
        images.dedup();
        images
    }

    /// The given rows as the card's plots draw them, with the gold verdict where there is one.
    pub fn plot_rows(&self, rows: &[usize], gold: Option<&crate::eval::GoldLabels>) -> Vec<crate::card::plots::PlotRow<'_>> {
        rows.iter()
            .map(|&i| {
                let row = &self.selection.rows[i];
                let label = LABELS[row.label];
                crate::card::plots::PlotRow {
                    label,
                    confidence: self.signal.pairs[i].confidence,
                    nih_label: row.nih_label,
                    flags: &self.signal.pairs[i].flags,
                    gold: gold.and_then(|g| g.get(&(self.selection.images[row.image].image_index.clone(), label.to_string())).copied()),
                }
            })
            .collect()
    }

    /// The given rows as evaluation reads them from shards.
    pub fn release_rows(&self, rows: &[usize]) -> Vec<crate::eval::ReleaseRow> {
        rows.iter()
            .map(|&i| {
                let row = &self.selection.rows[i];
                let image = &self.selection.images[row.image];
                let (questions, scores) = (&self.label_questions[row.label], &self.scores[row.image].scores);
                crate::eval::ReleaseRow {
                    image_index: image.image_index.clone(),
                    label: LABELS[row.label].to_string(),
                    nih_label: row.nih_label,
                    confidence: self.signal.pairs[i].confidence,
                    agreement: self.signal.pairs[i].agreement,
                    view_position: image.view_position.clone(),
                    devices_present: !self.signal.devices[row.image].is_empty(),
                    trust_class: self.signal.pairs[i].trust_class.name().to_string(),
                    flags: self.signal.pairs[i].flags.iter().map(|f| f.to_string()).collect(),
                    logit_yes: questions.iter().map(|&q| scores[q].logit_yes).collect(),
                    logit_no: questions.iter().map(|&q| scores[q].logit_no).collect(),
                    families: self.second.map(|s| crate::eval::FamilyViews {
                        primary_confidence: s.primary.pairs[i].confidence,
                        primary_trust_class: s.primary.pairs[i].trust_class.name().to_string(),
                        second_confidence: s.second.pairs[i].confidence,
                        second_trust_class: s.second.pairs[i].trust_class.name().to_string(),
                        second_logit_yes: questions.iter().map(|&q| s.scores[row.image].scores[q].logit_yes).collect(),
                        second_logit_no: questions.iter().map(|&q| s.scores[row.image].scores[q].logit_no).collect(),
                    }),
                    confident: self.confident.and_then(|c| {
                        let cells = c.row(row.image, row.label, row.nih_label);
                        Some(crate::eval::ConfidentCells { confidence: cells.confidence?, label_issue: cells.label_issue?, joint: None })
                    }),
                }
            })
            .collect()
    }
}
