//! The expert-review round trip a release exists for: choose the rows to review ([`plan`]),
//! hand them to reviewers in Label Studio ([`label_studio`]), and bring their answers back as
//! gold labels with a report of who answered what and how far they agreed ([`answers`]). The
//! gold then goes to `eval` (with the plan, for the lift) and `calibrate` like any other.

pub mod agreement;
pub mod answers;
pub mod label_studio;
pub mod plan;

use std::path::{Path, PathBuf};

pub use answers::{GoldRule, ImportReport};
pub use plan::{Budget, PlanOptions, ReviewPlan};

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error(transparent)]
    Release(#[from] crate::eval::EvalError),
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Json { path: PathBuf, message: String },
    #[error("cannot write CSV")]
    Csv(#[source] csv::Error),
    #[error("a budget of {budget} rows is more than the `{split}` split holds ({rows} rows)")]
    Budget { budget: usize, split: String, rows: usize },
    #[error("--control-share {0}: expected a share between 0 and 1")]
    ControlShare(f64),
    #[error(
        "{}: the plan was made for release {planned_for}, but {} is another build (manifest {digest}); plan this release anew",
        plan.display(),
        release.display()
    )]
    OtherRelease { plan: PathBuf, planned_for: String, release: PathBuf, digest: String },
    #[error("{} of the plan's {planned} images are missing under {}: {examples}", missing, dir.display())]
    MissingImages { dir: PathBuf, missing: usize, planned: usize, examples: String },
    #[error("{}: {} is not inside --document-root {}", images.display(), images.display(), root.display())]
    DocumentRoot { images: PathBuf, root: PathBuf },
    #[error("{}: {message}", path.display())]
    Export { path: PathBuf, message: String },
    #[error("the release has no view of {view} to rank by (no {column})")]
    NoView { view: &'static str, column: &'static str },
}

/// A digest's first 12 characters, for messages: whatever a hand-edited file holds there, never
/// a panic.
pub(crate) fn short_digest(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// Writes every file or none: each goes to a temporary file beside its target first, and only
/// when all are written are they renamed into place.
pub fn write_all(files: &[(&Path, &[u8])]) -> Result<(), ReviewError> {
    let mut staged = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        let werr = |source| ReviewError::Write { path: path.to_path_buf(), source };
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(werr)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(werr)?;
        std::io::Write::write_all(&mut tmp, bytes).map_err(werr)?;
        tmp.as_file().sync_all().map_err(werr)?;
        staged.push((tmp, *path));
    }
    for (tmp, path) in staged {
        tmp.persist(path).map_err(|e| ReviewError::Write { path: path.to_path_buf(), source: e.error })?;
    }
    Ok(())
}

/// Plans a review of the release in `dir` (see [`plan`] for the rule).
pub fn plan_release(dir: &Path, options: &PlanOptions) -> Result<ReviewPlan, ReviewError> {
    let manifest = crate::manifest::Manifest::read(dir).map_err(crate::eval::EvalError::from)?;
    let (split, rows) = crate::eval::read_release_split(dir, options.split.as_deref())?;
    let lock = crate::manifest::BuildLock::read(dir).map_err(crate::eval::EvalError::from)?;
    // A lock without thresholds (hand-made) only stops a plan by the answers alone.
    let thresholds: Option<crate::signal::ClassThresholds> = serde_json::from_value(lock.spec["signal"].clone()).ok();
    plan::plan(&manifest, &manifest_bytes(dir)?, &split, &rows, thresholds.as_ref(), options)
}

/// The bytes of the release's `manifest.json`, which plans are checked against.
pub fn manifest_bytes(dir: &Path) -> Result<Vec<u8>, ReviewError> {
    let path = dir.join(crate::manifest::MANIFEST_FILE);
    crate::files::regular::read(&path, crate::files::regular::RELEASE_JSON).map_err(|source| ReviewError::Io { path, source })
}
