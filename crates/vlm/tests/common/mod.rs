//! What the engine's integration tests share.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository the crate sits in: the fixture checkpoints (`fixtures/vlm/`), their scripts
/// and goldens, and the sample's images.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}
