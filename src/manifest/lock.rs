//! build.lock: what a rebuild needs to reproduce the release, and what an audit compares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
    /// Git commit the tool was built from ("unknown" outside a checkout; "+dirty" if modified).
    pub commit: String,
}

impl ToolInfo {
    pub fn current() -> Self {
        ToolInfo {
            name: env!("CARGO_PKG_NAME").to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: env!("BPALS_GIT_COMMIT").to_string(),
        }
    }
}

/// Kept as JSON values where the content is owned by another stage's types, so the lock can be
/// read back by any version of the tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildLock {
    pub format: String,
    pub tool: ToolInfo,
    /// Spec file name as given, the resolved spec's hash and content.
    pub spec_file: String,
    pub spec_sha256: String,
    pub spec: serde_json::Value,
    /// Metadata inputs by file name: sha256 and bytes.
    pub inputs: serde_json::Value,
    /// sha256 of every curated image, by image index.
    pub images: BTreeMap<String, String>,
    pub scorer: serde_json::Value,
    pub scorer_sha256: String,
    pub prompt_set_sha256: String,
    pub seed: u64,
    /// Key of each stage's output: a hash of its inputs, so a rebuild can tell what changed.
    pub stage_keys: BTreeMap<String, String>,
}

pub const LOCK_FORMAT: &str = "bpals-lock/1";

impl BuildLock {
    /// The build.lock of the release in `dir`.
    pub fn read(dir: &std::path::Path) -> Result<BuildLock, super::ManifestError> {
        super::error::read_json(dir.join(super::LOCK_FILE), "build.lock", LOCK_FORMAT, |l: &BuildLock| &l.format)
    }
}
