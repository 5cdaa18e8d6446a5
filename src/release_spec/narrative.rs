//! The S3 (Reason) and S4 (Report) parts of the prompt set: the prompts of the generated text.
//!
//! ```yaml
//! prompts:
//!   reasoning:                     # S3: one answer per (image, label) row
//!     prompt: "Is there {finding} in this chest X-ray? Think ... <think></think> ... <answer></answer>."
//!     no_finding: "Is this chest X-ray normal, with no finding? ..."
//!     max_new_tokens: 96
//!   report:                        # S4: one paragraph per image
//!     prompt: "Describe the findings of this chest X-ray as a radiology report would."
//!     conditioning: image_only
//!     max_new_tokens: 128
//! ```

use serde::{Deserialize, Serialize};

use crate::vocab::NO_FINDING;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningLayer {
    pub prompt: Option<String>,
    pub no_finding: Option<String>,
    pub max_new_tokens: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportLayer {
    pub prompt: Option<String>,
    pub conditioning: Option<Conditioning>,
    pub max_new_tokens: Option<usize>,
}

/// What the report prompt gives the model besides the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Conditioning {
    /// The image alone: the report is the model's own reading, so checking it against NIH's
    /// labels and the model's yes/no answers is an independent test of both.
    ImageOnly,
}

/// S3: the prompt that asks the model to reason about one row's finding.
#[derive(Debug, Clone, Serialize)]
pub struct ReasoningPrompts {
    /// `{finding}` is replaced by the finding's words.
    pub prompt: String,
    /// For `No Finding` rows.
    pub no_finding: String,
    pub max_new_tokens: usize,
}

impl ReasoningPrompts {
    /// The prompt of one row.
    pub fn for_label(&self, label: &str) -> String {
        if label == NO_FINDING {
            self.no_finding.clone()
        } else {
            self.prompt.replace("{finding}", &finding_words(label))
        }
    }
}

/// How a prompt names a finding: lower case, underscores as spaces ("pleural thickening").
pub fn finding_words(label: &str) -> String {
    label.replace('_', " ").to_lowercase()
}

/// S4: the prompt that asks for a report-style paragraph per image.
#[derive(Debug, Clone, Serialize)]
pub struct ReportPrompts {
    pub prompt: String,
    pub conditioning: Conditioning,
    pub max_new_tokens: usize,
}

fn non_empty(key: &'static str, value: Option<String>) -> Result<String, (&'static str, String)> {
    match value {
        Some(v) if !v.trim().is_empty() => Ok(v),
        Some(_) => Err((key, "must not be empty".into())),
        None => Err((key, "is required".into())),
    }
}

fn tokens(key: &'static str, value: Option<usize>) -> Result<usize, (&'static str, String)> {
    match value {
        Some(n) if (1..=4096).contains(&n) => Ok(n),
        Some(n) => Err((key, format!("{n}: expected 1 to 4096 new tokens"))),
        None => Err((key, "is required".into())),
    }
}

pub fn resolve_reasoning(layer: ReasoningLayer) -> Result<ReasoningPrompts, (&'static str, String)> {
    let prompt = non_empty("prompts.reasoning.prompt", layer.prompt)?;
    if !prompt.contains("{finding}") {
        return Err(("prompts.reasoning.prompt", "must contain {finding}, where the row's finding is named".into()));
    }
    Ok(ReasoningPrompts {
        prompt,
        no_finding: non_empty("prompts.reasoning.no_finding", layer.no_finding)?,
        max_new_tokens: tokens("prompts.reasoning.max_new_tokens", layer.max_new_tokens)?,
    })
}

pub fn resolve_report(layer: ReportLayer) -> Result<ReportPrompts, (&'static str, String)> {
    Ok(ReportPrompts {
        prompt: non_empty("prompts.report.prompt", layer.prompt)?,
        conditioning: layer.conditioning.unwrap_or(Conditioning::ImageOnly),
        max_new_tokens: tokens("prompts.report.max_new_tokens", layer.max_new_tokens)?,
    })
}
