//! Evaluation of the signal against expert labels. [`metrics`] holds the metric definitions.

pub mod metrics;
