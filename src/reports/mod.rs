//! Report text: a rule-based labeler that reads a radiology report (or the model's report-style
//! paraphrase) and says, per NIH finding and device, whether it is present, absent or uncertain,
//! with the sentences that say so and the side they name. The vocabulary and the negation and
//! uncertainty cues are data (`templates/report-labeler.yaml`); the matching is in
//! [`labeler`]. [`openi`] measures it on the OpenI reports against their manual MeSH coding.

pub mod labeler;
pub mod openi;
mod rules;
mod text;

pub use labeler::{Assertion, ConceptLabel, Labeler, Mention, ReportLabels, Side};
pub use rules::{LabelerRules, RulesError};
