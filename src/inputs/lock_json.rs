//! The resolved spec as build.lock records it and the spec hash covers: the spec's own JSON with
//! the content of each file it names in place of the file's name (the calibration table, the
//! gold file's digest), so the hash changes whenever one of those files does.

use serde_json::Value;

use super::ResolvedSpec;
use crate::hashing::sha256_json;

impl ResolvedSpec {
    /// The whole spec as JSON (absolute paths left out, so it is the same on every machine).
    pub fn to_json(&self) -> Value {
        let mut json = serde_json::to_value(&self.spec).expect("in-memory JSON serialization cannot fail");
        json["signal"] = self.signal_json();
        json["evaluation"] = self.evaluation_json();
        if let Some(key) = &self.publisher_key {
            json["publish"]["public_key"] = serde_json::to_value(key).expect("in-memory JSON serialization cannot fail");
        }
        json
    }

    /// sha256 of [`Self::to_json`]: the spec part of build.lock.
    pub fn hash(&self) -> String {
        sha256_json(&self.to_json())
    }

    /// The `signal` section, its calibration file and joint rule read.
    pub fn signal_json(&self) -> Value {
        let mut signal = serde_json::to_value(&self.spec.signal).expect("in-memory JSON serialization cannot fail");
        signal["calibration"] = serde_json::to_value(&self.calibration).expect("in-memory JSON serialization cannot fail");
        if let Some(rule) = &self.joint_rule {
            // Only where named: a release without one keeps its lock, and so its bytes.
            signal["joint_rule"] = serde_json::to_value(rule).expect("in-memory JSON serialization cannot fail");
        }
        signal
    }

    /// The `evaluation` section, its gold file's digest in place (null without one).
    pub fn evaluation_json(&self) -> Value {
        serde_json::to_value(&self.gold).expect("in-memory JSON serialization cannot fail")
    }
}
