//! The labeler's vocabulary and cues, read from YAML (`templates/report-labeler.yaml` is built
//! in; `label-report --rules FILE` reads another).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::text::words;

/// The built-in rules.
pub const DEFAULT_RULES: &str = include_str!("../../templates/report-labeler.yaml");

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("labeler rules {source_name}:\n{message}")]
    Parse { source_name: String, message: String },
    #[error("labeler rules {source_name}: {message}")]
    Invalid { source_name: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    findings: BTreeMap<String, Vec<String>>,
    devices: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    ignore: Vec<String>,
    negation: Cues,
    uncertainty: Cues,
    terminators: Vec<String>,
    sides: Sides,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cues {
    before: Vec<String>,
    after: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sides {
    left: Vec<String>,
    right: Vec<String>,
    bilateral: Vec<String>,
}

/// A phrase as the words it is matched by.
pub(super) type Phrase = Vec<String>;

/// What the labeler can name: a finding or a device, with its phrases.
#[derive(Debug, Clone)]
pub(super) struct Concept {
    pub name: String,
    pub kind: ConceptKind,
    pub phrases: Vec<Phrase>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConceptKind {
    Finding,
    Device,
    /// Matched so that its words are not read as a finding, then dropped.
    Ignored,
}

/// The rules, with every phrase split into words.
#[derive(Debug, Clone)]
pub struct LabelerRules {
    pub(super) concepts: Vec<Concept>,
    pub(super) negation_before: Vec<Phrase>,
    pub(super) negation_after: Vec<Phrase>,
    pub(super) uncertainty_before: Vec<Phrase>,
    pub(super) uncertainty_after: Vec<Phrase>,
    pub(super) terminators: Vec<Phrase>,
    pub(super) left: Vec<Phrase>,
    pub(super) right: Vec<Phrase>,
    pub(super) bilateral: Vec<Phrase>,
}

impl LabelerRules {
    pub fn builtin() -> LabelerRules {
        Self::parse(DEFAULT_RULES, "templates/report-labeler.yaml").expect("the built-in rules parse")
    }

    pub fn parse(text: &str, source_name: &str) -> Result<LabelerRules, RulesError> {
        let file: RulesFile = serde_saphyr::from_str(text).map_err(|e| RulesError::Parse {
            source_name: source_name.to_string(),
            message: e.render_with_options(serde_saphyr::render_options! { source_name: Some(source_name) }),
        })?;
        let invalid = |message: String| RulesError::Invalid { source_name: source_name.to_string(), message };
        let phrases = |list: &[String], key: &str| -> Result<Vec<Phrase>, RulesError> {
            list.iter()
                .map(|p| {
                    let w = words(p);
                    if w.is_empty() {
                        Err(invalid(format!("{key}: the phrase {p:?} has no words")))
                    } else {
                        Ok(w)
                    }
                })
                .collect()
        };
        let mut concepts = Vec::new();
        for (kind, map, key) in [(ConceptKind::Finding, &file.findings, "findings"), (ConceptKind::Device, &file.devices, "devices")] {
            for (name, list) in map {
                if list.is_empty() {
                    return Err(invalid(format!("{key}.{name}: no phrases")));
                }
                concepts.push(Concept { name: name.clone(), kind, phrases: phrases(list, &format!("{key}.{name}"))? });
            }
        }
        concepts.push(Concept { name: String::new(), kind: ConceptKind::Ignored, phrases: phrases(&file.ignore, "ignore")? });
        let findings = &crate::vocab::LABELS[..crate::vocab::LABELS.len() - 1];
        let unknown: Vec<&String> = file.findings.keys().filter(|f| !findings.contains(&f.as_str())).collect();
        if !unknown.is_empty() {
            return Err(invalid(format!("findings: {unknown:?} are not NIH findings (expected names from {findings:?})")));
        }
        let unknown: Vec<&String> = file.devices.keys().filter(|d| !crate::vocab::SUPPORT_DEVICES.contains(&d.as_str())).collect();
        if !unknown.is_empty() {
            return Err(invalid(format!(
                "devices: {unknown:?} are not support devices (expected names from {:?})",
                crate::vocab::SUPPORT_DEVICES
            )));
        }
        Ok(LabelerRules {
            concepts,
            negation_before: phrases(&file.negation.before, "negation.before")?,
            negation_after: phrases(&file.negation.after, "negation.after")?,
            uncertainty_before: phrases(&file.uncertainty.before, "uncertainty.before")?,
            uncertainty_after: phrases(&file.uncertainty.after, "uncertainty.after")?,
            terminators: phrases(&file.terminators, "terminators")?,
            left: phrases(&file.sides.left, "sides.left")?,
            right: phrases(&file.sides.right, "sides.right")?,
            bilateral: phrases(&file.sides.bilateral, "sides.bilateral")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_rules_name_the_key() {
        let base = DEFAULT_RULES.replace("  Hernia:", "  Hernias:");
        let err = LabelerRules::parse(&base, "r.yaml").unwrap_err().to_string();
        assert!(err.contains("\"Hernias\"") && err.contains("not NIH findings"), "{err}");
        let err = LabelerRules::parse("findings: {}\nbogus: 1\n", "r.yaml").unwrap_err().to_string();
        assert!(err.contains("r.yaml") && err.contains("bogus"), "{err}");
    }
}
