//! The one error type of the VLM engine: a model directory, its files, or an input it cannot take.

use std::path::PathBuf;

use super::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum VlmError {
    #[error("model directory {}: no {what} ({})", dir.display(), hint)]
    Missing { dir: PathBuf, what: String, hint: String },
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file that was read but is not what it should be (JSON, a tokenizer, an image,
    /// safetensors): `what` says what it should be.
    #[error("{}: not {what}", path.display())]
    NotA {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{}: key `{}`: {}", path.display(), error.key, error.message)]
    Config { path: PathBuf, error: ConfigError },
    #[error("chat template from {source_file}: {message}")]
    Template { source_file: String, message: String },
    #[error("{0}")]
    Input(String),
    /// NaN or infinite numbers out of the model: `what` says where they were found.
    #[error(
        "{what}: the model computed a NaN or infinite number (broken weights, or an overflow in 16-bit floats: try dtype bf16 or f32)"
    )]
    NonFinite { what: String },
}
