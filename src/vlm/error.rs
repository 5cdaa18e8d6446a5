//! The one error type of the VLM engine: a model directory, its files, or an input it cannot take.

use std::path::PathBuf;

use super::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum VlmError {
    #[error("model directory {}: no {what} ({})", dir.display(), hint)]
    Missing { dir: PathBuf, what: String, hint: String },
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{}: key `{}`: {}", path.display(), error.key, error.message)]
    Config { path: PathBuf, error: ConfigError },
    #[error("chat template from {source_file}: {message}")]
    Template { source_file: String, message: String },
    #[error("{0}")]
    Input(String),
}
