//! The S2 (Diagnose) part of the prompt set: where a finding is, and the signs that show it.
//!
//! ```yaml
//! prompts:
//!   location:
//!     findings: {Effusion: pleural effusion, ...}   # how the questions name each finding
//!     whole_chest: [Cardiomegaly, ...]             # boxed, but asked no side or zone
//!     side: "Is the {finding} in the patient's {side} lung?"
//!     zone: "Is the {finding} in the {zone} zone?"
//!     ground: {qwen2_vl: "Locate the {finding} in this chest X-ray.", qwen2_5_vl: ...}
//!     max_new_tokens: 48
//!   signs:
//!     question: "Is there {sign} on this image?"
//!     vocabulary: {Effusion: [a blunted costophrenic angle, a meniscus sign], ...}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Question;
use crate::vocab::{LABELS, NO_FINDING};

pub const SIDES: [&str; 2] = ["right", "left"];
pub const ZONES: [&str; 3] = ["upper", "middle", "lower"];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocationLayer {
    pub findings: Option<BTreeMap<String, String>>,
    pub whole_chest: Option<Vec<String>>,
    pub side: Option<String>,
    pub zone: Option<String>,
    pub ground: Option<BTreeMap<String, String>>,
    pub max_new_tokens: Option<usize>,
    pub zone_bounds: Option<[f64; 2]>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignsLayer {
    pub question: Option<String>,
    pub vocabulary: Option<BTreeMap<String, Vec<String>>>,
    pub seen_min: Option<f64>,
}

/// Lesion location: side and zone questions, and the grounding prompt whose answer is a box.
#[derive(Debug, Clone, Serialize)]
pub struct LocationPrompts {
    /// Finding -> the words the questions use for it. Every finding listed gets a box.
    pub findings: BTreeMap<String, String>,
    /// Findings that are central or bilateral: boxed, but asked no side or zone.
    pub whole_chest: Vec<String>,
    pub side: String,
    pub zone: String,
    /// Model family -> grounding prompt, in the family's own phrasing.
    pub ground: BTreeMap<String, String>,
    /// Greedy decoding's cap on a grounding answer.
    pub max_new_tokens: usize,
    /// Where the upper zone ends and the lower begins, as fractions of the image height: how a
    /// reference box's centre is read as a zone.
    pub zone_bounds: [f64; 2],
}

impl LocationPrompts {
    /// The findings asked a side and a zone, in vocabulary order.
    pub fn zoned(&self) -> impl Iterator<Item = &'static str> + '_ {
        LABELS.into_iter().filter(|l| self.findings.contains_key(*l) && !self.whole_chest.iter().any(|w| w == l))
    }

    /// The grounding prompt for `finding` in `family`'s phrasing.
    pub fn ground_prompt(&self, family: &str, finding: &str) -> Option<String> {
        Some(self.ground.get(family)?.replace("{finding}", self.findings.get(finding)?))
    }

    pub fn questions(&self) -> Vec<Question> {
        let mut out = Vec::new();
        for finding in self.zoned() {
            let words = &self.findings[finding];
            for side in SIDES {
                let text = self.side.replace("{finding}", words).replace("{side}", side);
                out.push(Question { id: side_id(finding, side), target: side_id(finding, side), text });
            }
            for zone in ZONES {
                let text = self.zone.replace("{finding}", words).replace("{zone}", zone);
                out.push(Question { id: zone_id(finding, zone), target: zone_id(finding, zone), text });
            }
        }
        out
    }
}

pub fn side_id(finding: &str, side: &str) -> String {
    format!("{finding}/side={side}")
}

pub fn zone_id(finding: &str, zone: &str) -> String {
    format!("{finding}/zone={zone}")
}

pub fn sign_id(finding: &str, k: usize) -> String {
    format!("{finding}/sign#{k}")
}

/// Observable signs: per finding, radiographic signs each asked as a yes/no question.
#[derive(Debug, Clone, Serialize)]
pub struct SignPrompts {
    pub question: String,
    pub vocabulary: BTreeMap<String, Vec<String>>,
    /// A sign counts as seen from this p_yes.
    pub seen_min: f64,
}

impl SignPrompts {
    pub fn questions(&self) -> Vec<Question> {
        let mut out = Vec::new();
        for finding in LABELS {
            for (k, sign) in self.vocabulary.get(finding).into_iter().flatten().enumerate() {
                let id = sign_id(finding, k);
                out.push(Question { id: id.clone(), target: id, text: self.question.replace("{sign}", sign) });
            }
        }
        out
    }
}

/// `finding` must be one of the 14 findings (No Finding has no place and no signs).
fn check_finding(key: &'static str, finding: &str) -> Result<(), (&'static str, String)> {
    if LABELS.contains(&finding) && finding != NO_FINDING {
        return Ok(());
    }
    let all: Vec<&str> = LABELS.into_iter().filter(|l| *l != NO_FINDING).collect();
    Err((key, format!("unknown finding {finding:?}: expected one of {}", all.join(", "))))
}

/// Checks and fills in `prompts.location`; `Err((key, message))` names the key at fault.
pub fn resolve_location(layer: LocationLayer) -> Result<LocationPrompts, (&'static str, String)> {
    let findings = layer.findings.ok_or(("prompts.location.findings", "is required: the findings to locate".to_string()))?;
    for (finding, words) in &findings {
        check_finding("prompts.location.findings", finding)?;
        if words.trim().is_empty() {
            return Err(("prompts.location.findings", format!("{finding}: needs the words the questions use for it")));
        }
    }
    let whole_chest = layer.whole_chest.unwrap_or_default();
    if let Some(stray) = whole_chest.iter().find(|w| !findings.contains_key(*w)) {
        return Err(("prompts.location.whole_chest", format!("{stray:?} is not in prompts.location.findings")));
    }
    let template = |value: Option<String>, key: &'static str, needs: &[&str]| -> Result<String, (&'static str, String)> {
        let text = value.ok_or((key, "is required".to_string()))?;
        match needs.iter().find(|n| !text.contains(*n)) {
            Some(missing) => Err((key, format!("{text:?} has no {missing} placeholder"))),
            None => Ok(text),
        }
    };
    let side = template(layer.side, "prompts.location.side", &["{finding}", "{side}"])?;
    let zone = template(layer.zone, "prompts.location.zone", &["{finding}", "{zone}"])?;
    let ground = layer.ground.ok_or(("prompts.location.ground", "is required: a grounding prompt per model family".to_string()))?;
    for (family, text) in &ground {
        // The families whose grounding format the parser knows: the engine's.
        if bpals_vlm::Family::from_name(family).is_none() {
            let known = bpals_vlm::Family::supported();
            return Err(("prompts.location.ground", format!("unknown model family {family:?}: expected one of {known}")));
        }
        template(Some(text.clone()), "prompts.location.ground", &["{finding}"])?;
    }
    let max_new_tokens = layer.max_new_tokens.unwrap_or(48);
    if !(1..=4096).contains(&max_new_tokens) {
        return Err(("prompts.location.max_new_tokens", format!("{max_new_tokens}: expected 1 to 4096")));
    }
    let zone_bounds = layer.zone_bounds.unwrap_or([0.375, 0.5625]);
    if !(0.0 < zone_bounds[0] && zone_bounds[0] < zone_bounds[1] && zone_bounds[1] < 1.0) {
        return Err(("prompts.location.zone_bounds", format!("{zone_bounds:?}: expected two fractions 0 < a < b < 1")));
    }
    Ok(LocationPrompts { findings, whole_chest, side, zone, ground, max_new_tokens, zone_bounds })
}

/// Checks and fills in `prompts.signs`.
pub fn resolve_signs(layer: SignsLayer) -> Result<SignPrompts, (&'static str, String)> {
    let question = layer.question.ok_or(("prompts.signs.question", "is required".to_string()))?;
    if !question.contains("{sign}") {
        return Err(("prompts.signs.question", format!("{question:?} has no {{sign}} placeholder")));
    }
    let vocabulary = layer.vocabulary.ok_or(("prompts.signs.vocabulary", "is required: the signs of each finding".to_string()))?;
    for (finding, signs) in &vocabulary {
        check_finding("prompts.signs.vocabulary", finding)?;
        if signs.is_empty() || signs.iter().any(|s| s.trim().is_empty()) {
            return Err(("prompts.signs.vocabulary", format!("{finding}: needs at least one non-empty sign")));
        }
    }
    let seen_min = layer.seen_min.unwrap_or(0.5);
    if !(0.0..=1.0).contains(&seen_min) {
        return Err(("prompts.signs.seen_min", format!("{seen_min}: expected a probability")));
    }
    Ok(SignPrompts { question, vocabulary, seen_min })
}
