//! The publisher's Responsible-AI words for the release's Croissant file (`croissant.json`):
//! what only the publisher can say (how the data came to be, what it cannot tell, whom it may
//! disadvantage, what it is for). Everything the build knows (counts, the model, the files) the
//! Croissant file computes itself.
//!
//! ```yaml
//! croissant:
//!   data_collection: NIH's radiographs and report-derived labels, re-examined by ...
//!   data_collection_type: [Secondary data analysis, Machine annotation]
//!   data_limitations: ...
//!   data_biases: ...
//!   data_use_cases: ...
//!   data_social_impact: ...
//!   personal_sensitive_information: ...
//!   annotator_demographics: ...   # optional
//! ```
//!
//! A demo build without these words gets placeholders that say so; a publishable build is
//! refused until they are written.

use serde::{Deserialize, Serialize};

/// The words, as a spec file writes them and as the resolved spec carries them (the same keys
/// either way: resolving only checks and trims them). Each None when unset.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CroissantSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_collection: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_collection_type: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_limitations: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_biases: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_use_cases: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_social_impact: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub personal_sensitive_information: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotator_demographics: Option<String>,
}

impl super::merge::Merge for CroissantSpec {
    fn merge(&mut self, c: Self, nulls: &super::merge::Nulls) {
        super::merge::merge_options!(self, c, nulls;
            data_collection, data_collection_type, data_limitations, data_biases, data_use_cases,
            data_social_impact, personal_sensitive_information, annotator_demographics);
    }
}

impl CroissantSpec {
    pub fn is_empty(&self) -> bool {
        self.missing().len() == REQUIRED.len() && self.annotator_demographics.is_none()
    }

    /// The required keys the spec leaves unset, as `croissant.KEY`.
    pub fn missing(&self) -> Vec<&'static str> {
        let set = [
            self.data_collection.is_some(),
            self.data_collection_type.is_some(),
            self.data_limitations.is_some(),
            self.data_biases.is_some(),
            self.data_use_cases.is_some(),
            self.data_social_impact.is_some(),
            self.personal_sensitive_information.is_some(),
        ];
        REQUIRED.iter().zip(set).filter(|(_, set)| !set).map(|(key, _)| *key).collect()
    }
}

/// What a publishable build must have the publisher's words for (annotator demographics are
/// optional: a model annotated the release).
pub const REQUIRED: [&str; 7] = [
    "croissant.data_collection",
    "croissant.data_collection_type",
    "croissant.data_limitations",
    "croissant.data_biases",
    "croissant.data_use_cases",
    "croissant.data_social_impact",
    "croissant.personal_sensitive_information",
];

/// Resolves the layer: every word set must say something.
pub fn resolve(layer: Option<CroissantSpec>) -> Result<CroissantSpec, (&'static str, String)> {
    let Some(l) = layer else { return Ok(CroissantSpec::default()) };
    let text = |key: &'static str, value: Option<String>| -> Result<Option<String>, (&'static str, String)> {
        match value {
            Some(v) if v.trim().is_empty() => Err((key, "must not be empty: say it, or leave the key out".into())),
            Some(v) => Ok(Some(v.trim().to_string())),
            None => Ok(None),
        }
    };
    let types = match l.data_collection_type {
        Some(list) if list.is_empty() || list.iter().any(|t| t.trim().is_empty()) => {
            return Err(("croissant.data_collection_type", "expected a list of one or more non-empty strings".into()))
        }
        other => other,
    };
    Ok(CroissantSpec {
        data_collection: text("croissant.data_collection", l.data_collection)?,
        data_collection_type: types,
        data_limitations: text("croissant.data_limitations", l.data_limitations)?,
        data_biases: text("croissant.data_biases", l.data_biases)?,
        data_use_cases: text("croissant.data_use_cases", l.data_use_cases)?,
        data_social_impact: text("croissant.data_social_impact", l.data_social_impact)?,
        personal_sensitive_information: text("croissant.personal_sensitive_information", l.personal_sensitive_information)?,
        annotator_demographics: text("croissant.annotator_demographics", l.annotator_demographics)?,
    })
}
