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
    /// The per-image input hashes: a file of their own, named here by its digest.
    pub images: ImageHashesFile,
    pub scorer: serde_json::Value,
    pub scorer_sha256: String,
    /// The second opinion's scorer and its identity's hash, where the spec names one (left out
    /// otherwise, so a one-scorer lock reads as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_scorer: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_scorer_sha256: Option<String>,
    pub prompt_set_sha256: String,
    pub seed: u64,
    /// Key of each stage's output: a hash of its inputs, so a rebuild can tell what changed.
    pub stage_keys: BTreeMap<String, String>,
}

/// `images.sha256`: one `<sha256>  <image file>` line per curated image, sorted by name.
///
/// At full scale these hashes are 10 MB, almost all of the lock; in a file of their own the lock
/// stays small enough to read and diff, and an auditor checks a local copy of the images with
/// `sha256sum -c images.sha256` from inside the images folder, no tool needed. The lock pins the
/// file's digest, so a rebuild still depends on every image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageHashesFile {
    pub path: String,
    pub sha256: String,
    pub images: usize,
}

pub const IMAGE_HASHES_FILE: &str = "images.sha256";

impl ImageHashesFile {
    /// The file's text (sha256sum's format) for images given as (file name, sha256), and how
    /// the lock names it.
    pub fn render<'a>(images: impl IntoIterator<Item = (&'a str, &'a str)>) -> (String, ImageHashesFile) {
        let sorted: BTreeMap<&str, &str> = images.into_iter().collect();
        let text: String = sorted.iter().map(|(name, sha)| format!("{sha}  {name}\n")).collect();
        let entry = ImageHashesFile {
            path: IMAGE_HASHES_FILE.to_string(),
            sha256: crate::hashing::sha256_hex(text.as_bytes()),
            images: sorted.len(),
        };
        (text, entry)
    }
}

/// Version 2 moved the per-image hashes out of the lock into `images.sha256`.
pub const LOCK_FORMAT: &str = "bpals-lock/2";

impl BuildLock {
    /// The build.lock of the release in `dir`.
    pub fn read(dir: &std::path::Path) -> Result<BuildLock, super::ManifestError> {
        super::error::read_json(dir.join(super::LOCK_FILE), "build.lock", LOCK_FORMAT, |l: &BuildLock| &l.format)
    }
}
