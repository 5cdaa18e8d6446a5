//! bpals-release: builds, verifies and publishes CXR14-BPALS, a trust signal over the
//! report-derived labels of NIH ChestX-ray14.
//!
//! The modules follow the pipeline, lowest first; a module imports only those below it
//! (`tests/architecture.rs` checks this):
//!
//! 0. The vision-language model engine is a crate of its own, [`bpals_vlm`] (`crates/vlm/`): it
//!    knows nothing of releases, and every module here may use its public API (the spec checks
//!    its model family against the engine's list).
//! 1. [`vocab`], [`files`], [`hashing`]: the label vocabulary, guarded reads and output folders,
//!    content hashes; they import nothing above them.
//! 2. [`release_spec`]: the release spec as plain data (reading its YAML layers is its only I/O).
//! 3. [`manifest`], [`signing`], [`hub`]: the release's file contract, its signature and
//!    provenance, the Hub client.
//! 4. The stages, in order: [`source`] (NIH ingest) -> [`select`] -> [`infer`] (scores and
//!    and answers, cached) -> [`signal`] -> [`diagnose`] (S2: location and signs) -> [`trial`]
//!    -> [`eval`] -> [`review`] (expert review plans and answers) -> [`shard`] (Parquet) -> [`card`].
//! 5. [`inputs`] resolves the files a spec names (calibration, gold labels, the embedded sample's
//!    pins, the model directory); [`pipeline`] wires the stages into `build`, `build --dry-run`
//!    and `infer`.
//! 6. What works on whole releases: [`publish`], [`audit`], [`diff`], [`doctor`], [`bench`];
//!    and on what a published release earns: [`access`] (payments -> gated access, the ledger).
//!
//! `main.rs` and `src/cli/` are only the command line.

pub mod access;
pub mod audit;
pub mod bench;
pub mod card;
pub mod diagnose;
pub mod diff;
pub mod doctor;
pub mod eval;
pub mod files;
pub mod hashing;
pub mod hub;
pub mod infer;
pub mod inputs;
pub mod manifest;
pub mod paraphrase;
pub mod pipeline;
pub mod publish;
pub mod reason;
pub mod release_spec;
pub mod reports;
pub mod review;
pub mod select;
pub mod shard;
pub mod signal;
pub mod signing;
pub mod source;
pub mod trial;
pub mod vocab;
