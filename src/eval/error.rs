//! What can stop an evaluation: the release's files, or a gold file that matches none of it.

use std::path::PathBuf;

use crate::manifest::ManifestError;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Release(#[from] ManifestError),
    #[error("{}: the manifest lists no pair shards (data/full-* or data/trial-*)", dir.display())]
    NoPairShards { dir: PathBuf },
    #[error("{}: the release has no `{split}` split (it has: {present})", dir.display())]
    NoSplit { dir: PathBuf, split: String, present: String },
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the Parquet file {}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("cannot read the Parquet file {}", path.display())]
    Arrow {
        path: PathBuf,
        #[source]
        source: arrow_schema::ArrowError,
    },
    #[error("{}: no column `{column}`", path.display())]
    MissingColumn { path: PathBuf, column: String },
    #[error("{}: release {release} has no S2 location columns (its spec has no prompts.location)", dir.display())]
    NotDiagnosed { dir: PathBuf, release: String },
    #[error("reference boxes {}", path.display())]
    Boxes {
        path: PathBuf,
        #[source]
        source: crate::source::SourceError,
    },
    #[error("the boxed images in {}", dir.display())]
    ImageSizes {
        dir: PathBuf,
        #[source]
        source: crate::source::SourceError,
    },
    #[error("review plan {plan}: {message}")]
    ReviewPlan { plan: String, message: String },
    #[error(
        "{}: release {release} has one model and no confident learning: a joint rule combines the two families of a \
         release built with a second_opinion, or the answers with confident learning (signal.confident_learning)",
        dir.display()
    )]
    OneFamily { dir: PathBuf, release: String },
    #[error("{}: release {release} has no {view}: `--second-view {flag}` needs it", dir.display())]
    NoSecondView { dir: PathBuf, release: String, view: &'static str, flag: &'static str },
    #[error("{}: build.lock: {message}", dir.display())]
    Lock { dir: PathBuf, message: String },
    #[error("no gold judgement in {gold} matches a row of release {release}")]
    NoMatch { gold: String, release: String },
}
