//! The labeler: per sentence, find the mentions of each finding and device (longest phrase
//! first), then decide each mention's assertion from the cues in its clause, NegEx-style:
//!
//! - a cue before a mention applies when no terminator ("but", "however", ";", …) stands
//!   between them; one after it, when none does and it is at most [`AFTER_SCOPE`] words on;
//! - an uncertainty cue wins over a negation cue ("cannot be excluded" holds "not");
//! - the side is what the side words between the mention and its neighbours name (within
//!   [`SIDE_SCOPE`] words, before it first, in its clause).
//!
//! A report's label for a concept is present if any mention is, else uncertain if any is, else
//! absent; concepts never mentioned are left out (not "absent": the report did not say).

use std::collections::BTreeMap;

use serde::Serialize;

use super::rules::{ConceptKind, LabelerRules, Phrase};
use super::text::{sentences, word_matches, words};

/// How far after a mention a trailing cue ("… is not seen") still reaches, in words.
const AFTER_SCOPE: usize = 8;
/// How far from a mention a side word is taken as its side, in words.
const SIDE_SCOPE: usize = 6;
/// Words a side does not reach across: "cardiomegaly and a left effusion" has one side, the
/// effusion's.
const SIDE_BOUNDARIES: [&str; 5] = ["and", "with", "or", ",", "plus"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Assertion {
    Present,
    Uncertain,
    Absent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Left,
    Right,
    Bilateral,
}

/// One mention of a concept in one sentence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mention {
    pub sentence: usize,
    /// The words that named it, as matched.
    pub text: String,
    pub assertion: Assertion,
    pub side: Option<Side>,
}

/// What a report says of one finding or device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConceptLabel {
    pub label: Assertion,
    /// Indices of the sentences that mention it.
    pub sentences: Vec<usize>,
    /// The sides its present or uncertain mentions name (both sides: bilateral).
    pub side: Option<Side>,
    pub mentions: Vec<Mention>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportLabels {
    pub sentences: Vec<String>,
    /// By NIH finding name; only the findings the report mentions.
    pub findings: BTreeMap<String, ConceptLabel>,
    /// By support-device name; only those mentioned.
    pub devices: BTreeMap<String, ConceptLabel>,
}

impl ReportLabels {
    /// The label of a finding or device, None when the report does not mention it.
    pub fn label(&self, name: &str) -> Option<Assertion> {
        self.findings.get(name).or_else(|| self.devices.get(name)).map(|c| c.label)
    }
}

pub struct Labeler {
    rules: LabelerRules,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CueKind {
    NegateBefore,
    NegateAfter,
    UncertainBefore,
    UncertainAfter,
    Terminator,
}

/// A matched span of words.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

impl Labeler {
    pub fn new(rules: LabelerRules) -> Labeler {
        Labeler { rules }
    }

    pub fn builtin() -> Labeler {
        Labeler::new(LabelerRules::builtin())
    }

    pub fn label(&self, report: &str) -> ReportLabels {
        let sentences = sentences(report);
        let mut findings: BTreeMap<String, ConceptLabel> = BTreeMap::new();
        let mut devices: BTreeMap<String, ConceptLabel> = BTreeMap::new();
        for (index, sentence) in sentences.iter().enumerate() {
            for (concept, mention) in self.sentence_mentions(index, sentence) {
                let concept = &self.rules.concepts[concept];
                let map = match concept.kind {
                    ConceptKind::Finding => &mut findings,
                    ConceptKind::Device => &mut devices,
                    ConceptKind::Ignored => continue,
                };
                let entry = map.entry(concept.name.clone()).or_insert_with(|| ConceptLabel {
                    label: Assertion::Absent,
                    sentences: Vec::new(),
                    side: None,
                    mentions: Vec::new(),
                });
                entry.label = entry.label.min(mention.assertion);
                if entry.sentences.last() != Some(&index) {
                    entry.sentences.push(index);
                }
                if mention.assertion != Assertion::Absent {
                    entry.side = merge_sides(entry.side, mention.side);
                }
                entry.mentions.push(mention);
            }
        }
        ReportLabels { sentences, findings, devices }
    }

    /// (concept index, mention) for every mention in one sentence.
    fn sentence_mentions(&self, index: usize, sentence: &str) -> Vec<(usize, Mention)> {
        let words = words(sentence);
        let cues = self.cues(&words);
        let terminators: Vec<usize> = cues.iter().filter(|(k, _)| *k == CueKind::Terminator).map(|(_, s)| s.start).collect();
        let blocked = |from: usize, to: usize| terminators.iter().any(|&t| t >= from && t < to);
        let side_spans = self.side_spans(&words);
        let mut spans = Vec::new();
        let mut at = 0;
        while at < words.len() {
            match self.longest_concept(&words, at) {
                Some((concept, len)) => {
                    spans.push((concept, Span { start: at, end: at + len }));
                    at += len;
                }
                None => at += 1,
            }
        }
        let mut out = Vec::new();
        for (k, &(concept, span)) in spans.iter().enumerate() {
            let applies = |kind: CueKind| {
                cues.iter().any(|(c_kind, c)| {
                    *c_kind == kind
                        && match kind {
                            CueKind::NegateBefore | CueKind::UncertainBefore => c.start < span.start && !blocked(c.end, span.start),
                            _ => c.start >= span.end && c.start - span.end <= AFTER_SCOPE && !blocked(span.end, c.start),
                        }
                })
            };
            let assertion = if applies(CueKind::UncertainBefore) || applies(CueKind::UncertainAfter) {
                Assertion::Uncertain
            } else if applies(CueKind::NegateBefore) || applies(CueKind::NegateAfter) {
                Assertion::Absent
            } else {
                Assertion::Present
            };
            // The side that belongs to this mention: named in it or just before it, else just
            // after it; never past a neighbouring mention, a side boundary or a terminator.
            let previous_end = if k == 0 { 0 } else { spans[k - 1].1.end };
            let next_start = spans.get(k + 1).map_or(words.len(), |(_, s)| s.start);
            let before = (previous_end.max(span.start.saturating_sub(SIDE_SCOPE))..span.end).rev();
            let after = span.end..next_start.min(span.end + SIDE_SCOPE);
            let read = |positions: &mut dyn Iterator<Item = usize>| {
                let mut found = None;
                for at in positions {
                    match side_spans.iter().find(|(_, s)| s.start <= at && at < s.end) {
                        Some((side, _)) => found = merge_sides(found, Some(*side)),
                        None if at >= span.start && at < span.end => {}
                        None if terminators.contains(&at) || SIDE_BOUNDARIES.contains(&words[at].as_str()) => break,
                        None => {}
                    }
                }
                found
            };
            let side = read(&mut before.into_iter()).or_else(|| read(&mut after.into_iter()));
            out.push((concept, Mention { sentence: index, text: words[span.start..span.end].join(" "), assertion, side }));
        }
        out
    }

    /// The concept whose phrase matches the most words at `at`, and how many.
    fn longest_concept(&self, words: &[String], at: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for (i, concept) in self.rules.concepts.iter().enumerate() {
            for phrase in &concept.phrases {
                if matches_at(words, at, phrase) && best.is_none_or(|(_, len)| phrase.len() > len) {
                    best = Some((i, phrase.len()));
                }
            }
        }
        best
    }

    /// Every cue in a sentence, the longest at each position (any kind).
    fn cues(&self, words: &[String]) -> Vec<(CueKind, Span)> {
        let r = &self.rules;
        let kinds: [(CueKind, &Vec<Phrase>); 5] = [
            (CueKind::UncertainBefore, &r.uncertainty_before),
            (CueKind::UncertainAfter, &r.uncertainty_after),
            (CueKind::NegateBefore, &r.negation_before),
            (CueKind::NegateAfter, &r.negation_after),
            (CueKind::Terminator, &r.terminators),
        ];
        let mut out = Vec::new();
        let mut at = 0;
        while at < words.len() {
            let mut best: Option<(CueKind, usize)> = None;
            for (kind, phrases) in &kinds {
                for phrase in phrases.iter() {
                    if matches_at(words, at, phrase) && best.is_none_or(|(_, len)| phrase.len() > len) {
                        best = Some((*kind, phrase.len()));
                    }
                }
            }
            match best {
                Some((kind, len)) => {
                    out.push((kind, Span { start: at, end: at + len }));
                    // A terminator may start inside a longer cue's words; cues do not overlap.
                    at += len;
                }
                None => at += 1,
            }
        }
        out
    }

    /// Every side phrase in a sentence, the longest at each position ("left and right" is one).
    fn side_spans(&self, words: &[String]) -> Vec<(Side, Span)> {
        let r = &self.rules;
        let kinds = [(Side::Bilateral, &r.bilateral), (Side::Left, &r.left), (Side::Right, &r.right)];
        let mut out = Vec::new();
        let mut at = 0;
        while at < words.len() {
            let best = kinds
                .iter()
                .flat_map(|(side, phrases)| phrases.iter().filter(|p| matches_at(words, at, p)).map(move |p| (*side, p.len())))
                .max_by_key(|(_, len)| *len);
            match best {
                Some((side, len)) => {
                    out.push((side, Span { start: at, end: at + len }));
                    at += len;
                }
                None => at += 1,
            }
        }
        out
    }
}

fn matches_at(words: &[String], at: usize, phrase: &Phrase) -> bool {
    at + phrase.len() <= words.len() && phrase.iter().zip(&words[at..]).all(|(p, w)| word_matches(w, p))
}

fn merge_sides(a: Option<Side>, b: Option<Side>) -> Option<Side> {
    match (a, b) {
        (None, s) | (s, None) => s,
        (Some(x), Some(y)) if x == y => Some(x),
        _ => Some(Side::Bilateral),
    }
}

impl std::fmt::Display for Assertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Assertion::Present => "present",
            Assertion::Uncertain => "uncertain",
            Assertion::Absent => "absent",
        })
    }
}

/// One line per mentioned finding, then per device: its label, side and sentence numbers.
impl std::fmt::Display for ReportLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} sentences", self.sentences.len())?;
        for (heading, map) in [("findings", &self.findings), ("devices", &self.devices)] {
            if map.is_empty() {
                writeln!(f, "{heading}: none mentioned")?;
                continue;
            }
            writeln!(f, "{heading}:")?;
            for (name, c) in map {
                let side = c.side.map(|s| format!(" ({})", serde_json::to_value(s).expect("plain")).replace('"', "")).unwrap_or_default();
                let sentences: Vec<String> = c.sentences.iter().map(|s| s.to_string()).collect();
                writeln!(f, "  {name:<20} {}{side}  sentences {}", c.label, sentences.join(", "))?;
            }
        }
        Ok(())
    }
}
