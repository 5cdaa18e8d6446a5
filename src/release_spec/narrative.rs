//! The S3 (Reason) and S4 (Report) parts of the prompt set: the prompts of the generated text.
//!
//! ```yaml
//! prompts:
//!   reasoning:                     # S3: one answer per (image, label) row
//!     prompt: "Which findings does this chest X-ray show? Think first, then answer."
//!     # or per row: "Is there {finding} ...?" with `no_finding:` for No Finding rows
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

/// S3: the prompt that asks the model to reason about a row's finding. With `{finding}` in it,
/// each row is asked about its own finding (and `no_finding` asks No Finding rows); without,
/// it is one question about the whole image, NV-Reason-CXR's way, asked once per image and its
/// findings list read for every row of the image.
#[derive(Debug, Clone, Serialize)]
pub struct ReasoningPrompts {
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_finding: Option<String>,
    pub max_new_tokens: usize,
}

impl ReasoningPrompts {
    /// Whether each row gets a prompt of its own.
    pub fn per_row(&self) -> bool {
        self.prompt.contains("{finding}")
    }

    /// The prompt of one row.
    pub fn for_label(&self, label: &str) -> String {
        match (&self.no_finding, label == NO_FINDING) {
            (Some(no_finding), true) => no_finding.clone(),
            _ => self.prompt.replace("{finding}", &finding_words(label)),
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
    let no_finding = match (prompt.contains("{finding}"), layer.no_finding) {
        (true, none_or_some) => Some(non_empty("prompts.reasoning.no_finding", none_or_some)?),
        (false, None) => None,
        (false, Some(_)) => {
            return Err(("prompts.reasoning.no_finding", "applies only to a per-row prompt, one with {finding} in it".into()))
        }
    };
    Ok(ReasoningPrompts { prompt, no_finding, max_new_tokens: tokens("prompts.reasoning.max_new_tokens", layer.max_new_tokens)? })
}

pub fn resolve_report(layer: ReportLayer) -> Result<ReportPrompts, (&'static str, String)> {
    Ok(ReportPrompts {
        prompt: non_empty("prompts.report.prompt", layer.prompt)?,
        conditioning: layer.conditioning.unwrap_or(Conditioning::ImageOnly),
        max_new_tokens: tokens("prompts.report.max_new_tokens", layer.max_new_tokens)?,
    })
}
