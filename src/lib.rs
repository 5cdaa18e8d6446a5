//! bpals-release: builds, verifies and publishes CXR14-BPALS, a trust signal over the
//! report-derived labels of NIH ChestX-ray14.
//!
//! The modules follow the pipeline:
//! [`spec`] -> [`source`] (NIH ingest) -> [`select`] -> [`infer`] (scores + cache) -> [`signal`]
//! -> [`shard`] (Parquet) -> [`card`] -> [`manifest`] (manifest, lock, verify).
//! [`build`] wires the stages together; `main.rs` is only the command line.

pub mod audit;
pub mod bench;
pub mod build;
pub mod card;
pub mod diff;
pub mod doctor;
pub mod eval;
pub mod hashing;
pub mod hub;
pub mod infer;
pub mod labels;
pub mod manifest;
pub mod publish;
pub mod select;
pub mod shard;
pub mod signal;
pub mod source;
pub mod spec;
pub mod vlm;
