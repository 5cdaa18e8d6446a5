//! Signed releases: `release.sig` (OpenSSF Model Signing over every file) and
//! `provenance.intoto.jsonl` (SLSA Provenance v1 of the build), both signed with the publisher's
//! elliptic-curve key, both checkable without this tool.
//!
//! The two files sit beside the release's files and are not listed in `manifest.json`: the
//! provenance names every file but the two (the manifest and build.lock included) as its subject,
//! and the signature covers every file but itself (the provenance included). So signing adds two
//! files and changes no byte of the others, and a release can be signed after it was built.

mod dsse;
mod error;
mod keys;
mod model_signature;
mod provenance;
mod statement;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use error::SigningError;
pub use keys::{is_encrypted, Curve, PublicKey, SigningKey};
pub use model_signature::SignedFileProblem;
pub use provenance::{Claims, RunDetails, BUILD_TYPE, LOCAL_BUILDER};

use crate::hashing::sha256_file;
use crate::manifest::{self, BuildLock, PROVENANCE_FILE, SIGNATURE_FILE};

/// The copy of the publisher's public key a release carries when its spec names one
/// (`publish.public_key`). A buyer still checks its fingerprint against one the publisher gives
/// them elsewhere: a key inside the release vouches for nothing by itself.
pub const PUBLISHER_KEY_FILE: &str = "publisher-key.pub.pem";

/// Every file of the release in `dir` that the signature covers (all but the signature itself
/// and git files), path -> sha256.
pub fn release_digests(dir: &Path) -> Result<BTreeMap<String, String>, SigningError> {
    let paths = manifest::list_files(dir).map_err(|source| SigningError::Read { path: dir.to_path_buf(), source })?;
    let mut out = BTreeMap::new();
    for rel in paths {
        if rel == SIGNATURE_FILE || model_signature::is_git_path(&rel) {
            continue;
        }
        let path = dir.join(&rel);
        let (sha256, _) = sha256_file(&path).map_err(|source| SigningError::Read { path, source })?;
        out.insert(rel, sha256);
    }
    Ok(out)
}

/// A loaded key and who is signing with it: what `build --sign-key` carries through a build.
pub struct Signer {
    pub key: SigningKey,
    /// The builder id for the provenance ([`LOCAL_BUILDER`] when None).
    pub builder_id: Option<String>,
}

impl std::fmt::Debug for Signer {
    /// The key's fingerprint only: never its bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer(key {}, builder {:?})", self.key.public_key().fingerprint(), self.builder_id)
    }
}

/// RFC 3339 UTC time, to the second, for the provenance.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// What `sign` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct SignOutcome {
    pub fingerprint: String,
    pub curve: &'static str,
    pub files_signed: usize,
}

/// Signs the release in `dir`: writes the provenance, then the signature over every file. The
/// release must verify against its manifest first; both files are written whole or not at all.
pub fn sign_release(dir: &Path, key: &SigningKey, run: &RunDetails) -> Result<SignOutcome, SigningError> {
    let verified = manifest::verify(dir)?;
    if !verified.ok() {
        let problems: Vec<String> = verified.problems.iter().map(|p| format!("  {p}")).collect();
        return Err(SigningError::Unverified { dir: dir.to_path_buf(), problems: problems.join("\n") });
    }
    let lock = BuildLock::read(dir)?;
    let named = &lock.spec["publish"]["public_key"];
    if let Some(named_fingerprint) = named["fingerprint"].as_str() {
        let fingerprint = key.public_key().fingerprint();
        if fingerprint != named_fingerprint {
            return Err(SigningError::NotThePublisherKey {
                fingerprint,
                named: named["file"].as_str().unwrap_or("").to_string(),
                named_fingerprint: named_fingerprint.to_string(),
            });
        }
    }
    let manifest = manifest::Manifest::read(dir)?;
    let mut files = release_digests(dir)?;
    files.remove(PROVENANCE_FILE);
    let provenance = provenance::sign(&provenance::statement(&lock, &files, run), key);
    files.insert(PROVENANCE_FILE.to_string(), crate::hashing::sha256_hex(&provenance));
    let name = format!("{}-{}", manifest.release_id, manifest.version);
    let signature = model_signature::sign(&name, &files, SIGNATURE_FILE, key);

    // Both files go to temporary names first, then into place: an interrupted signing leaves at
    // worst an old pair or a provenance the old signature rejects, never a half-written file.
    let write = |name: &str, bytes: &[u8]| -> Result<(), SigningError> {
        let path = dir.join(name);
        let temp = dir.join(format!(".{name}.partial"));
        std::fs::write(&temp, bytes).map_err(|source| SigningError::Write { path: temp.clone(), source })?;
        std::fs::rename(&temp, &path).map_err(|source| SigningError::Write { path, source })
    };
    write(PROVENANCE_FILE, &provenance)?;
    write(SIGNATURE_FILE, &signature)?;
    Ok(SignOutcome { fingerprint: key.public_key().fingerprint(), curve: key.public_key().curve().name(), files_signed: files.len() })
}

/// The two signed files of a release and what they are checked against, wherever they come from
/// (a directory, or a Hub revision).
pub struct SignedRelease<'a> {
    pub signature: Option<&'a [u8]>,
    pub provenance: Option<&'a [u8]>,
    /// Every file but `release.sig` and git files, path -> sha256.
    pub files: &'a BTreeMap<String, String>,
    pub lock: &'a BuildLock,
}

/// The outcome of checking a release's signatures with a public key.
#[derive(Debug, Clone, Serialize)]
pub struct SignatureReport {
    /// The key checked against.
    pub fingerprint: String,
    pub curve: &'static str,
    /// Whether the release carries signature files at all. An unsigned release has nothing to
    /// check: it passes unless the caller requires a signature.
    pub signed: bool,
    /// Files the signature covers, when it holds.
    pub files_signed: usize,
    pub provenance: Option<Claims>,
    pub problems: Vec<String>,
}

impl SignatureReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl std::fmt::Display for SignatureReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.signed {
            return writeln!(f, "UNSIGNED: the release has no {SIGNATURE_FILE}; nothing to check with key {}", self.fingerprint);
        }
        if !self.ok() {
            writeln!(f, "FAILED: signature check with key {} ({}):", self.fingerprint, self.curve)?;
            return self.problems.iter().try_for_each(|p| writeln!(f, "  {p}"));
        }
        writeln!(f, "ok: {SIGNATURE_FILE} signs all {} files; signed by key {} ({})", self.files_signed, self.fingerprint, self.curve)?;
        if let Some(c) = &self.provenance {
            writeln!(f, "ok: {PROVENANCE_FILE} is signed by the same key and claims:")?;
            writeln!(f, "  builder   {}", c.builder_id)?;
            writeln!(f, "  spec      {} (resolved sha256 {})", c.spec_path, c.spec_sha256)?;
            writeln!(f, "  model     {}", c.model)?;
            writeln!(f, "  inputs    {} pinned by digest", c.dependencies)?;
            match (&c.started_on, &c.finished_on) {
                (Some(s), Some(e)) => writeln!(f, "  built     {s} to {e}")?,
                _ => writeln!(f, "  built     (signed after the build: no run times)")?,
            }
        } else {
            writeln!(f, "note: no {PROVENANCE_FILE}: the signature says who signed the files, not how they were built")?;
        }
        Ok(())
    }
}

/// Checks both signed files of `release` with `key`.
pub fn check(release: &SignedRelease<'_>, key: &PublicKey) -> SignatureReport {
    let mut report = SignatureReport {
        fingerprint: key.fingerprint(),
        curve: key.curve().name(),
        signed: release.signature.is_some() || release.provenance.is_some(),
        files_signed: 0,
        provenance: None,
        problems: Vec::new(),
    };
    if !report.signed {
        return report;
    }
    match release.signature {
        None => report.problems.push(format!("the release is not signed: it has no {SIGNATURE_FILE}")),
        Some(bytes) => match model_signature::check(bytes, key, release.files) {
            Err(why) => report.problems.push(format!("{SIGNATURE_FILE} {why}")),
            Ok(problems) if problems.is_empty() => report.files_signed = release.files.len(),
            Ok(problems) => report.problems.extend(problems.iter().map(|p| format!("{SIGNATURE_FILE}: {p}"))),
        },
    }
    let mut subjects = release.files.clone();
    subjects.remove(PROVENANCE_FILE);
    match release.provenance {
        // A signature made by model_signing itself has no provenance beside it; a provenance
        // removed from a release we signed shows as a missing signed file above.
        None => {}
        Some(bytes) => match provenance::check(bytes, key, &subjects, release.lock) {
            Err(why) => report.problems.push(format!("{PROVENANCE_FILE} {why}")),
            Ok(claims) => report.provenance = Some(claims),
        },
    }
    report
}

/// Checks the signed files of the release in `dir` with `key`.
pub fn check_dir(dir: &Path, key: &PublicKey) -> Result<SignatureReport, SigningError> {
    let files = release_digests(dir)?;
    let lock = BuildLock::read(dir)?;
    let read = |name: &str| -> Result<Option<Vec<u8>>, SigningError> {
        let path = dir.join(name);
        let read =
            crate::files::regular::open(&path, false).and_then(|f| crate::files::regular::read_file(f, crate::files::regular::SIGNATURE));
        match read {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SigningError::Read { path, source }),
        }
    };
    let (signature, provenance) = (read(SIGNATURE_FILE)?, read(PROVENANCE_FILE)?);
    let release = SignedRelease { signature: signature.as_deref(), provenance: provenance.as_deref(), files: &files, lock: &lock };
    Ok(check(&release, key))
}

/// Whether the release in `dir` carries a signature (checked or not).
pub fn is_signed(dir: &Path) -> bool {
    dir.join(SIGNATURE_FILE).is_file()
}

/// Without a key: whether the release's `release.sig`, when it has one, is a signature bundle at
/// all (a junk file there is not a signature, and `verify` says so). Ok(false) when unsigned.
pub fn signature_form(dir: &Path) -> Result<bool, String> {
    let path = dir.join(SIGNATURE_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(false);
    }
    let bytes = crate::files::regular::open(&path, false)
        .and_then(|f| crate::files::regular::read_file(f, crate::files::regular::SIGNATURE))
        .map_err(|e| format!("{SIGNATURE_FILE} {e}"))?;
    model_signature::check_form(&bytes).map_err(|why| format!("{SIGNATURE_FILE} {why}"))?;
    Ok(true)
}
