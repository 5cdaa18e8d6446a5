//! in-toto Statement v1 (github.com/in-toto/attestation, spec/v1): subjects with digests, and
//! a typed predicate about them. The model signature and the build provenance are both one.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement<P> {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: P,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    pub name: String,
    /// Algorithm name ("sha256") to hex digest.
    pub digest: BTreeMap<String, String>,
}

impl Subject {
    pub fn sha256(name: &str, sha256: &str) -> Subject {
        Subject { name: name.into(), digest: BTreeMap::from([("sha256".to_string(), sha256.to_string())]) }
    }
}

impl<P: Serialize> Statement<P> {
    pub fn new(subject: Vec<Subject>, predicate_type: &str, predicate: P) -> Statement<P> {
        Statement { statement_type: STATEMENT_TYPE.into(), subject, predicate_type: predicate_type.into(), predicate }
    }

    /// The statement's bytes as signed: pretty JSON, stable for equal values.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("in-memory JSON serialization cannot fail")
    }
}

impl<P: DeserializeOwned> Statement<P> {
    /// Reads a statement and checks its type and predicate type; the error says what is wrong.
    pub fn parse(bytes: &[u8], predicate_type: &str) -> Result<Statement<P>, String> {
        let head: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| format!("the statement is not JSON ({e})"))?;
        let found = head.get("_type").and_then(|t| t.as_str()).unwrap_or("");
        if found != STATEMENT_TYPE {
            return Err(format!("statement type {found:?}, expected {STATEMENT_TYPE:?}"));
        }
        let found = head.get("predicateType").and_then(|t| t.as_str()).unwrap_or("");
        if found != predicate_type {
            return Err(format!("predicate type {found:?}, expected {predicate_type:?}"));
        }
        serde_json::from_value(head).map_err(|e| format!("the {predicate_type} statement is malformed ({e})"))
    }
}
