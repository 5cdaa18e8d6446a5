//! Resolve-time gates: refuse a spec before any input is read or any GPU second is spent.

use super::{Backend, ReleaseSpec, SpecError, Status};

/// Weight licenses this tool knows, and whether each allows commercial use of the model's output.
/// An unknown license is an error, never a guess.
pub const WEIGHT_LICENSES: [(&str, bool); 7] = [
    ("apache-2.0", true),
    ("mit", true),
    ("bsd-3-clause", true),
    ("qwen-research", false),
    ("nvidia-oneway-noncommercial", false),
    ("cc-by-nc-4.0", false),
    // The fixture scorer has no weights at all.
    ("none", true),
];

pub fn license_allows_commercial(license: &str) -> Option<bool> {
    WEIGHT_LICENSES.iter().find(|(name, _)| *name == license).map(|(_, ok)| *ok)
}

fn gate(spec: &ReleaseSpec, gate: &'static str, message: String) -> SpecError {
    SpecError::Gate { path: spec.path.clone(), gate, message }
}

/// Gates that need nothing but the spec. They run on every load.
pub fn check_static(spec: &ReleaseSpec) -> Result<(), SpecError> {
    let license = spec.model.weight_license.as_str();
    let Some(commercial_ok) = license_allows_commercial(license) else {
        let known: Vec<&str> = WEIGHT_LICENSES.iter().map(|(n, _)| *n).collect();
        return Err(gate(
            spec,
            "weight-license",
            format!("unknown model.weight_license {license:?}: known licenses are {}", known.join(", ")),
        ));
    };
    if license == "none" && spec.model.backend != Backend::Fixture {
        return Err(gate(spec, "weight-license", "model.weight_license `none` is only valid for the fixture backend".into()));
    }
    if spec.release.tier.is_commercial() && !commercial_ok {
        return Err(gate(
            spec,
            "tier-license",
            format!(
                "the {} tier is sold commercially, but model {} ships under {license}, which forbids commercial use; \
                 use an Apache-2.0 model (e.g. Qwen/Qwen2-VL-7B-Instruct) or the trial tier",
                spec.release.tier.name(),
                spec.model.id
            ),
        ));
    }
    let missing: Vec<&str> = spec.additions.iter().filter(|a| !a.implemented()).map(|a| a.describe()).collect();
    if !missing.is_empty() {
        return Err(gate(
            spec,
            "not-implemented",
            format!(
                "release {} adds {}, which this version of bpals-release cannot build yet; refusing rather than \
                 producing an S1 build under an S{} name",
                spec.release.id,
                missing.join(", "),
                spec.release.id.trim_start_matches('s')
            ),
        ));
    }
    Ok(())
}

/// Why a build of this spec would be a demo rather than a publishable release. Empty = publishable.
pub fn demo_reasons(spec: &ReleaseSpec) -> Vec<String> {
    let mut reasons = Vec::new();
    if spec.source.embedded_sample {
        reasons.push(format!("source is the embedded synthetic sample ({})", spec.source.root_as_written));
    }
    for (section, model) in std::iter::once(("model", &spec.model)).chain(spec.second_opinion.iter().map(|m| ("second_opinion", m))) {
        if model.backend == Backend::Fixture {
            let whose = if section == "model" { String::new() } else { format!("{section}: ") };
            reasons.push(format!("{whose}scores come from the fixture scorer, not a vision-language model"));
        }
        if let Some(weights) = model.demo_weights {
            reasons.push(format!("{section} {} {}", model.id, weights.demo_reason()));
        }
        if model.backend.is_native() && model.path.is_none() && !crate::hashing::is_commit(&model.revision) {
            reasons.push(format!(
                "{section} {} revision {:?} is a branch or tag, which can move: pin {section}.revision to a 40-hex commit",
                model.id, model.revision
            ));
        }
    }
    for (name, _) in spec.source.metadata_files() {
        if !spec.source.expected_sha256.contains_key(&name) {
            reasons.push(format!("input {name} has no pinned sha256 in source.sha256"));
        }
    }
    let missing = spec.croissant.missing();
    if !missing.is_empty() {
        reasons.push(format!("croissant.json lacks the publisher's Responsible-AI words: set {}", missing.join(", ")));
    }
    if spec.release.status != Status::Confirmed {
        reasons.push(format!("release {} is tentative", spec.release.id));
    }
    reasons
}

/// `build --publishable`: every demo reason becomes an error.
pub fn check_publishable(spec: &ReleaseSpec) -> Result<(), SpecError> {
    let reasons = demo_reasons(spec);
    if reasons.is_empty() {
        return Ok(());
    }
    Err(gate(spec, "publishable", format!("a publishable build needs real inputs and a real model:\n  - {}", reasons.join("\n  - "))))
}
