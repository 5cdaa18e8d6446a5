//! `release.sig` in the OpenSSF Model Signing format (the `model-signing` package, v1.x, its
//! `key` method): a Sigstore bundle v0.3 whose DSSE envelope carries an in-toto statement of
//! predicate type `https://model_signing/signature/v1.0`, listing every file's sha256
//! (serialization method `files`). `model_signing verify key DIR --signature DIR/release.sig
//! --public_key KEY.pub.pem` checks it without this tool.
//!
//! Keyless signing (a Sigstore certificate from an OIDC identity, logged in Rekor) would fill
//! `verificationMaterial` with a certificate and a transparency-log entry instead of a key hint;
//! the statement and envelope stay as they are. It needs the public Sigstore services, which
//! this tool does not reach yet.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::dsse::Envelope;
use super::keys::{PublicKey, SigningKey};
use super::statement::{Statement, Subject};

pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
pub const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";

/// Paths model_signing leaves out by default; listed in the signature so that a copy cloned
/// from the Hub (which adds `.gitattributes`) still verifies.
const GIT_PATHS: [&str; 4] = [".git", ".gitattributes", ".github", ".gitignore"];

/// Whether `path` is one of the git files a signature never covers.
pub fn is_git_path(path: &str) -> bool {
    GIT_PATHS.iter().any(|g| path == *g || path.starts_with(&format!("{g}/")))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    media_type: String,
    verification_material: VerificationMaterial,
    dsse_envelope: Envelope,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VerificationMaterial {
    #[serde(default)]
    public_key: Option<KeyHint>,
    #[serde(default)]
    tlog_entries: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct KeyHint {
    #[serde(default)]
    hint: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Predicate {
    serialization: Serialization,
    resources: Vec<Resource>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Serialization {
    method: String,
    hash_type: String,
    allow_symlinks: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ignore_paths: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Resource {
    name: String,
    algorithm: String,
    digest: String,
}

/// sha256 over the resources' raw digests in their listed order: the statement's subject.
fn root_digest<'a>(digests: impl IntoIterator<Item = &'a str>) -> Result<String, String> {
    let mut hasher = Sha256::new();
    for digest in digests {
        hasher.update(hex::decode(digest).map_err(|_| format!("resource digest {digest:?} is not hex"))?);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The bytes of `release.sig` over `files` (path -> sha256, every file but the signature
/// itself), named `name`.
pub fn sign(name: &str, files: &BTreeMap<String, String>, signature_file: &str, key: &SigningKey) -> Vec<u8> {
    let resources: Vec<Resource> =
        files.iter().map(|(path, sha256)| Resource { name: path.clone(), algorithm: "sha256".into(), digest: sha256.clone() }).collect();
    let root = root_digest(resources.iter().map(|r| r.digest.as_str())).expect("our own digests are hex");
    let mut ignore_paths: Vec<String> = vec![signature_file.to_string()];
    ignore_paths.extend(GIT_PATHS.iter().map(|p| p.to_string()));
    let predicate = Predicate {
        serialization: Serialization { method: "files".into(), hash_type: "sha256".into(), allow_symlinks: false, ignore_paths },
        resources,
    };
    let statement = Statement::new(vec![Subject::sha256(name, &root)], PREDICATE_TYPE, predicate);
    let bundle = Bundle {
        media_type: BUNDLE_MEDIA_TYPE.into(),
        verification_material: VerificationMaterial {
            public_key: Some(KeyHint { hint: Some(key.public_key().model_signing_hint()) }),
            tlog_entries: Vec::new(),
        },
        // model_signing's own key signer leaves the key id empty; the hint names the key.
        dsse_envelope: Envelope::sign(&statement.to_bytes(), key, ""),
    };
    let mut bytes = serde_json::to_vec_pretty(&bundle).expect("in-memory JSON serialization cannot fail");
    bytes.push(b'\n');
    bytes
}

/// What a valid signature says about the files.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum SignedFileProblem {
    /// On disk, not in the signature.
    NotSigned {
        path: String,
    },
    /// In the signature, not on disk.
    Missing {
        path: String,
    },
    Changed {
        path: String,
        signed: String,
        actual: String,
    },
}

impl std::fmt::Display for SignedFileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignedFileProblem::NotSigned { path } => write!(f, "not signed: {path} is in the release but not in the signature"),
            SignedFileProblem::Missing { path } => write!(f, "missing: {path} is signed but not in the release"),
            SignedFileProblem::Changed { path, signed, actual } => {
                write!(f, "changed since signing: {path} has sha256 {actual}, signed {signed}")
            }
        }
    }
}

/// Whether `release.sig`'s bytes are a Sigstore bundle of the kind this tool writes, without a
/// key: what `verify` says of a signature it cannot check.
pub fn check_form(bytes: &[u8]) -> Result<(), String> {
    let bundle: Bundle = serde_json::from_slice(bytes).map_err(|e| format!("is not a Sigstore bundle ({e})"))?;
    if bundle.media_type != BUNDLE_MEDIA_TYPE {
        return Err(format!("media type {:?}, expected {BUNDLE_MEDIA_TYPE:?}", bundle.media_type));
    }
    Ok(())
}

/// Checks `release.sig`'s bytes with `key` against `files` (path -> sha256, every file of the
/// release but the signature and git files). `Err` when the signature itself does not hold;
/// `Ok` with the files that do not match it otherwise (empty when all do).
pub fn check(bytes: &[u8], key: &PublicKey, files: &BTreeMap<String, String>) -> Result<Vec<SignedFileProblem>, String> {
    let bundle: Bundle = serde_json::from_slice(bytes).map_err(|e| format!("is not a Sigstore bundle ({e})"))?;
    if bundle.media_type != BUNDLE_MEDIA_TYPE {
        return Err(format!("media type {:?}, expected {BUNDLE_MEDIA_TYPE:?}", bundle.media_type));
    }
    if let Some(hint) = bundle.verification_material.public_key.as_ref().and_then(|k| k.hint.as_deref()) {
        if hint != key.model_signing_hint() {
            return Err(format!(
                "was signed by another key (its key hint is {hint}), not by the key with fingerprint {}",
                key.fingerprint()
            ));
        }
    }
    let payload = bundle.dsse_envelope.open(key)?;
    let statement: Statement<Predicate> = Statement::parse(&payload, PREDICATE_TYPE)?;
    let serialization = &statement.predicate.serialization;
    if serialization.method != "files" || serialization.hash_type != "sha256" {
        return Err(format!(
            "serializes the files by method {:?} with {:?}; this verifier reads method \"files\" with \"sha256\"",
            serialization.method, serialization.hash_type
        ));
    }
    let [subject] = statement.subject.as_slice() else {
        return Err(format!("has {} subjects, expected one", statement.subject.len()));
    };
    let root = root_digest(statement.predicate.resources.iter().map(|r| r.digest.as_str()))?;
    if subject.digest.get("sha256") != Some(&root) {
        return Err("is inconsistent: its subject digest is not the digest of its resources".into());
    }
    let mut signed = BTreeMap::new();
    for resource in &statement.predicate.resources {
        if resource.algorithm != "sha256" {
            return Err(format!("resource {} uses {:?}, expected sha256", resource.name, resource.algorithm));
        }
        signed.insert(resource.name.as_str(), resource.digest.as_str());
    }
    let mut problems = Vec::new();
    for (path, actual) in files {
        match signed.get(path.as_str()) {
            None => problems.push(SignedFileProblem::NotSigned { path: path.clone() }),
            Some(digest) if *digest != actual => {
                problems.push(SignedFileProblem::Changed { path: path.clone(), signed: digest.to_string(), actual: actual.clone() })
            }
            Some(_) => {}
        }
    }
    problems.extend(signed.keys().filter(|p| !files.contains_key(**p)).map(|p| SignedFileProblem::Missing { path: p.to_string() }));
    Ok(problems)
}
