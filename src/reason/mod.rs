//! S3 Reason: the model's reasoning behind each row's judgment, asked in NV-Reason-CXR's
//! `<think>…</think><answer>…</answer>` format, parsed, and checked against the row's yes/no
//! score. An answer may be yes/no or, as NV-Reason-CXR-3B writes it, a list of findings: the
//! report labeler ([`crate::reports`]) reads such a list.
//!
//! Per image, the answers are also traced against the model's own yes/no findings (chest2err's
//! shape, [`TextTrace`]): an answer that asserts a finding the scores reject is a false finding,
//! one that rejects a finding the scores see is an omission.

use crate::infer::{GenerationJob, ImageAnswers, ImageJob};
use crate::release_spec::narrative::ReasoningPrompts;
use crate::reports::{Assertion, Labeler};
use crate::select::Selection;
use crate::signal::text_trace::{TextTrace, TextTuple};
use crate::vocab::{LABELS, NO_FINDING};
use bpals_vlm::chat_template::opened_block;
use bpals_vlm::Thinking;

/// The generation work: per image, its distinct prompts, and for each of its rows (row, the
/// answer that row reads). A per-row prompt asks each row its own question; an image-level one
/// is asked once and its answer read for every row.
pub struct ReasoningPlan {
    pub jobs: Vec<GenerationJob>,
    pub rows: Vec<Vec<(usize, usize)>>,
}

pub fn plan(selection: &Selection, prompts: &ReasoningPrompts, images: &[ImageJob]) -> ReasoningPlan {
    let mut by_image: Vec<Vec<usize>> = vec![Vec::new(); selection.images.len()];
    for (i, row) in selection.rows.iter().enumerate() {
        by_image[row.image].push(i);
    }
    let mut plan = ReasoningPlan { jobs: Vec::new(), rows: Vec::new() };
    for (image, rows) in by_image.into_iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let mut asked: Vec<String> = Vec::new();
        let mut reads = Vec::with_capacity(rows.len());
        for &i in &rows {
            let prompt = prompts.for_label(LABELS[selection.rows[i].label]);
            let k = asked.iter().position(|p| *p == prompt).unwrap_or_else(|| {
                asked.push(prompt);
                asked.len() - 1
            });
            reads.push((i, k));
        }
        plan.jobs.push(GenerationJob { image: images[image].clone(), prompts: asked });
        plan.rows.push(reads);
    }
    plan
}

/// The two parts of an answer in the `<think>`/`<answer>` format.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedAnswer {
    pub think: Option<String>,
    pub answer: Option<String>,
    /// With thinking on: the model's reasoning block never closed within the token budget, so
    /// nothing of it is read as an answer.
    pub unclosed: bool,
}

impl ParsedAnswer {
    /// Parsed when the answer part is there and not empty (the reasoning part may be missing).
    pub fn parsed(&self) -> bool {
        self.answer.as_ref().is_some_and(|a| !a.is_empty())
    }
}

/// The text between `<tag>` and `</tag>`; a missing close tag takes the rest (a truncated answer).
fn section(text: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = text.find(&open)? + open.len();
    let rest = &text[start..];
    let end = rest.find(&format!("</{tag}>")).unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

pub fn parse(text: &str) -> ParsedAnswer {
    ParsedAnswer { think: section(text, "think"), answer: section(text, "answer"), unclosed: false }
}

/// Reads the model's turn as `thinking` produced it. With thinking on, a turn that opens with its
/// family's reasoning block (Qwen's `<think>`, Gemma 4's thought channel) has its reasoning there and its answer after the block (the
/// `<answer>` section when it writes one, else the text); a block that never closes gives no
/// answer. A turn without the block, or thinking off, is read by [`parse`].
pub fn parse_turn(text: &str, thinking: Thinking) -> ParsedAnswer {
    let Some((rest, close)) = opened_block(text, thinking) else {
        return parse(text);
    };
    let Some((think, after)) = rest.split_once(close) else {
        return ParsedAnswer { think: Some(rest.trim().to_string()), answer: None, unclosed: true };
    };
    let answer = section(after, "answer").or_else(|| Some(after.trim().to_string()).filter(|a| !a.is_empty()));
    ParsedAnswer { think: Some(think.trim().to_string()), answer, unclosed: false }
}

/// What an answer says of the row's label: yes, no, or None when it cannot be read. A yes/no
/// answer is read by its first word (a bare yes or no); a findings list by the labeler (a listed finding is yes,
/// one left out or negated is no; for No Finding, any finding listed is no).
pub fn says(label: &str, answer: &str, labeler: &Labeler) -> Option<bool> {
    let first = answer.split(|c: char| !c.is_alphanumeric()).find(|w| !w.is_empty())?.to_lowercase();
    match first.as_str() {
        "yes" => return Some(true),
        // A bare "No"; "No effusion, cardiomegaly" is a list, read below.
        "no" if answer.split_whitespace().count() == 1 => return Some(false),
        _ => {}
    }
    let labels = labeler.label(answer);
    if label == NO_FINDING {
        let any = labels.findings.values().any(|c| c.label == Assertion::Present);
        return Some(!any);
    }
    match labels.findings.get(label).map(|c| c.label) {
        Some(Assertion::Present) => Some(true),
        Some(Assertion::Uncertain) => None,
        Some(Assertion::Absent) | None => Some(false),
    }
}

/// S3's columns of one row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowReasoning {
    /// The `<think>` part, or the whole text when the answer did not follow the format.
    pub text: String,
    pub answer: Option<String>,
    pub parsed: bool,
    /// What the answer says of the label; None when unparsed or unreadable.
    pub says: Option<bool>,
    /// Whether that matches the row's yes/no confidence; None when `says` is None.
    pub agrees: Option<bool>,
    pub new_tokens: usize,
    pub truncated: bool,
    /// The model's reasoning block never closed (thinking on): no answer was read.
    pub unclosed: bool,
}

impl RowReasoning {
    /// The flag: the reasoning contradicts the score.
    pub fn disagrees(&self) -> bool {
        self.agrees == Some(false)
    }
}

pub struct Reasoning {
    /// One per selection row (default for rows without an answer).
    pub rows: Vec<RowReasoning>,
    /// One per selected image.
    pub traces: Vec<TextTrace>,
}

impl Reasoning {
    /// Rows whose answer never closed its reasoning block.
    pub fn unclosed(&self) -> usize {
        self.rows.iter().filter(|r| r.unclosed).count()
    }
}

/// Reads every answer, as `thinking` produced it. `confidence[i]` is row i's confidence; a
/// finding is the model's when it reaches `present_min`.
pub fn derive(
    selection: &Selection,
    plan: &ReasoningPlan,
    answers: &[ImageAnswers],
    confidence: &[f64],
    thresholds: (f64, f64),
    thinking: Thinking,
) -> Reasoning {
    let (present_min, tau) = thresholds;
    let labeler = Labeler::builtin();
    let mut rows = vec![RowReasoning::default(); selection.rows.len()];
    for (job_rows, answers) in plan.rows.iter().zip(answers) {
        for &(i, k) in job_rows {
            let a = &answers.answers[k];
            let parsed = parse_turn(&a.text, thinking);
            let says =
                parsed.answer.as_deref().filter(|_| parsed.parsed()).and_then(|ans| says(LABELS[selection.rows[i].label], ans, &labeler));
            rows[i] = RowReasoning {
                text: parsed.think.clone().unwrap_or_else(|| a.text.trim().to_string()),
                parsed: parsed.parsed(),
                answer: parsed.answer,
                says,
                agrees: says.map(|s| s == (confidence[i] >= present_min)),
                new_tokens: a.new_tokens,
                truncated: a.truncated,
                unclosed: parsed.unclosed,
            };
        }
    }
    let mut image_rows: Vec<Vec<usize>> = vec![Vec::new(); selection.images.len()];
    for (i, row) in selection.rows.iter().enumerate() {
        image_rows[row.image].push(i);
    }
    let traces = image_rows
        .iter()
        .map(|image| {
            // The reference: the image's findings the scores see, in row order.
            let reference: Vec<usize> =
                image.iter().copied().filter(|&i| LABELS[selection.rows[i].label] != NO_FINDING && confidence[i] >= present_min).collect();
            let mut tuples = Vec::new();
            for (k, &i) in image.iter().enumerate() {
                let label = LABELS[selection.rows[i].label];
                let (Some(says), true) = (rows[i].says, label != NO_FINDING) else { continue };
                let position = reference.iter().position(|&r| r == i).map_or(-1, |p| p as i32);
                match (says, position >= 0) {
                    (true, false) => tuples.push(TextTuple::new(1, label, -1, k as i32)),
                    (false, true) => tuples.push(TextTuple::new(2, label, position, k as i32)),
                    _ => {}
                }
            }
            TextTrace::new(tuples, tau)
        })
        .collect();
    Reasoning { rows, traces }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_level_prompt_is_asked_once_and_a_per_row_prompt_per_row() {
        use crate::release_spec::narrative::ReasoningPrompts;
        use crate::select::{ImageRef, PairRow};
        let image =
            ImageRef { image_index: "a.png".into(), patient_id: 1, view_position: "PA".into(), official_split: None, labels: 0b100 };
        let rows = [2, 5, 14].map(|label| PairRow { image: 0, label, nih_label: label == 2 }).to_vec();
        let selection = Selection { images: vec![image], rows, candidates: 1, capped: false };
        let images = [ImageJob { name: "a.png".into(), path: "a.png".into() }];
        let once = ReasoningPrompts { prompt: "Which findings?".into(), no_finding: None, max_new_tokens: 8 };
        let p = plan(&selection, &once, &images);
        assert_eq!((p.jobs[0].prompts.len(), p.rows[0].clone()), (1, vec![(0, 0), (1, 0), (2, 0)]));
        let per_row = ReasoningPrompts { prompt: "Is there {finding}?".into(), no_finding: Some("Normal?".into()), max_new_tokens: 8 };
        let p = plan(&selection, &per_row, &images);
        assert_eq!(p.jobs[0].prompts, ["Is there effusion?", "Is there nodule?", "Normal?"]);
    }

    #[test]
    fn answers_parse_in_the_think_answer_format() {
        let p = parse("<think>The costophrenic angle is blunted.</think> <answer>Yes</answer>");
        assert_eq!((p.think.as_deref(), p.answer.as_deref(), p.parsed()), (Some("The costophrenic angle is blunted."), Some("Yes"), true));
        let truncated = parse("<think>Looking at the left base, the");
        assert_eq!((truncated.think.as_deref(), truncated.parsed()), (Some("Looking at the left base, the"), false));
        assert!(!parse("Yes.").parsed(), "no tags: not parsed");
    }

    #[test]
    fn with_thinking_on_the_block_is_the_reasoning_and_what_follows_the_answer() {
        let p = parse_turn("<think>\nThe left angle is blunted.\n</think>\n\nYes, an effusion.", Thinking::On);
        assert_eq!(
            (p.think.as_deref(), p.answer.as_deref(), p.unclosed),
            (Some("The left angle is blunted."), Some("Yes, an effusion."), false)
        );
        let tagged = parse_turn("<think>x</think><think>y</think><answer>No</answer>", Thinking::On);
        assert_eq!(tagged.answer.as_deref(), Some("No"), "an <answer> section after the block is the answer");
        let open = parse_turn("<think>\nStill looking at the <answer>Yes", Thinking::On);
        assert!(open.unclosed && open.answer.is_none() && !open.parsed(), "an unclosed block is never an answer");
        assert_eq!(parse_turn("<think>x</think> Yes", Thinking::Off).answer, None, "thinking off: the tagged format only");
        // Gemma 4's thought channel is its reasoning.
        let gemma = parse_turn("<|channel>thought\nThe angle is blunted.<channel|>Yes, an effusion.", Thinking::On);
        assert_eq!((gemma.think.as_deref(), gemma.answer.as_deref()), (Some("The angle is blunted."), Some("Yes, an effusion.")));
    }

    #[test]
    fn answers_are_read_as_yes_no_or_findings_lists() {
        let l = Labeler::builtin();
        assert_eq!(says("Effusion", "Yes.", &l), Some(true));
        assert_eq!(says("Effusion", "no", &l), Some(false));
        assert_eq!(says("Effusion", "Left pleural effusion, cardiomegaly", &l), Some(true));
        assert_eq!(says("Nodule", "Left pleural effusion, cardiomegaly", &l), Some(false), "left out of the list");
        assert_eq!(says("Effusion", "No pleural effusion. Cardiomegaly.", &l), Some(false), "negated in the list");
        assert_eq!(says("Pneumonia", "Possible pneumonia", &l), None);
        assert_eq!(says("No Finding", "No acute findings", &l), Some(true));
        assert_eq!(says("No Finding", "Cardiomegaly", &l), Some(false));
        assert_eq!(says("Effusion", "", &l), None);
    }
}
