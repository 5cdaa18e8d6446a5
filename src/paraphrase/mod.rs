//! S4 Report: a report-style paragraph per image, written by the model from the image alone
//! (`prompts.report.conditioning: image_only`), so that checking it is an independent test.
//! NIH does not release its reports: the text is the model's paraphrase, never NIH's.
//!
//! The report labeler ([`crate::reports`]) reads the paragraph; its findings are traced in
//! chest2err's shape against two references: NIH's findings, and the model's own yes/no
//! findings. A false finding is a finding the report asserts and the reference lacks; an
//! omission, one the reference holds and the report neither asserts nor hedges; a location
//! tuple, a side the report names against the side S2's questions give, where both are known.

use crate::infer::{GenerationJob, ImageAnswers, ImageJob};
use crate::release_spec::narrative::ReportPrompts;
use crate::reports::{Assertion, Labeler, ReportLabels, Side};
use crate::signal::text_trace::{TextTrace, TextTuple};
use crate::vocab::{LABELS, NO_FINDING};
use bpals_vlm::Thinking;

/// One prompt per image.
pub fn plan(prompts: &ReportPrompts, images: &[ImageJob]) -> Vec<GenerationJob> {
    images.iter().map(|image| GenerationJob { image: image.clone(), prompts: vec![prompts.prompt.clone()] }).collect()
}

/// S4's columns of one image.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageReport {
    pub text: String,
    pub new_tokens: usize,
    pub truncated: bool,
    pub sentences: usize,
    /// Findings the report asserts, and those it hedges, in vocabulary order.
    pub present: Vec<&'static str>,
    pub uncertain: Vec<&'static str>,
    pub against_nih: TextTrace,
    pub against_model: TextTrace,
}

/// The references of one image: NIH's findings, the model's yes/no findings, and the side S2
/// states per finding (`right`/`left`) where it asks one.
pub struct References<'a> {
    pub nih: &'a [&'static str],
    pub model: &'a [&'static str],
    pub sides: &'a [(&'static str, &'static str)],
}

/// The trace of a report's labels against one reference list.
pub fn trace(labels: &ReportLabels, reference: &[&'static str], sides: &[(&'static str, &'static str)], tau: f64) -> TextTrace {
    let mut tuples = Vec::new();
    for label in LABELS.into_iter().filter(|l| *l != NO_FINDING) {
        let said = labels.findings.get(label);
        let first_sentence =
            said.and_then(|c| c.mentions.iter().find(|m| m.assertion != Assertion::Absent)).map_or(-1, |m| m.sentence as i32);
        let position = reference.iter().position(|r| *r == label).map_or(-1, |p| p as i32);
        match (said.map(|c| c.label), position >= 0) {
            (Some(Assertion::Present), false) => tuples.push(TextTuple::new(1, label, -1, first_sentence)),
            (Some(Assertion::Absent) | None, true) => tuples.push(TextTuple::new(2, label, position, -1)),
            _ => {}
        }
        let stated = sides.iter().find(|(l, _)| *l == label).map(|(_, s)| *s);
        let written = said.filter(|c| c.label == Assertion::Present).and_then(|c| c.side);
        let contradicts = matches!((stated, written), (Some("right"), Some(Side::Left)) | (Some("left"), Some(Side::Right)));
        if position >= 0 && contradicts {
            tuples.push(TextTuple::new(3, label, position, first_sentence));
        }
    }
    TextTrace::new(tuples, tau)
}

/// Reads one image's answer.
/// Reads an image's report; with thinking on, the report is what follows the model's reasoning
/// block (none when the block never closed).
pub fn read(answer: &ImageAnswers, references: &References<'_>, labeler: &Labeler, tau: f64, thinking: Thinking) -> ImageReport {
    let a = &answer.answers[0];
    let report = bpals_vlm::chat_template::after_reasoning(&a.text, thinking).unwrap_or("");
    let labels = labeler.label(report);
    let with = |assertion: Assertion| -> Vec<&'static str> {
        LABELS.into_iter().filter(|l| labels.findings.get(*l).is_some_and(|c| c.label == assertion)).collect()
    };
    ImageReport {
        text: report.trim().to_string(),
        new_tokens: a.new_tokens,
        truncated: a.truncated,
        sentences: labels.sentences.len(),
        present: with(Assertion::Present),
        uncertain: with(Assertion::Uncertain),
        against_nih: trace(&labels, references.nih, references.sides, tau),
        against_model: trace(&labels, references.model, references.sides, tau),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_traced_against_a_reference() {
        let l = Labeler::builtin();
        let labels = l.label("Small left pleural effusion. No pneumothorax. Possible pneumonia.\nMild cardiomegaly.");
        // NIH: effusion (right, by S2) and nodule.
        let t = trace(&labels, &["Effusion", "Nodule"], &[("Effusion", "right")], 3.0);
        let found: Vec<(u8, &str, i32, i32)> =
            t.tuples.iter().map(|t| (t.category, LABELS[t.concept as usize], t.reference_item, t.candidate_item)).collect();
        assert_eq!(
            found,
            [(1, "Cardiomegaly", -1, 3), (3, "Effusion", 0, 0), (2, "Nodule", 1, -1)],
            "cardiomegaly is a false finding (sentence 3), the effusion's side contradicts S2's, the nodule is omitted; \
             the hedged pneumonia is neither"
        );
        assert_eq!(t.per_category[..3], [1, 1, 1]);
    }
}
