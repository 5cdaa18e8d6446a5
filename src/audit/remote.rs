//! `bpals-release verify --remote ORG/NAME[@REV]`: every file the remote manifest lists must be
//! on the Hub at that revision with its size and sha256, and nothing else may be there.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::hub::{DigestSource, Hub, HubError, RepoRef, GITATTRIBUTES};
use crate::manifest::{
    is_signature_file, BuildLock, FileProblem, Manifest, LOCK_FILE, MANIFEST_FILE, MANIFEST_FORMAT, PROVENANCE_FILE, SIGNATURE_FILE,
};
use crate::signing::{self, PublicKey, SignatureReport, SignedRelease};

#[derive(Debug, Clone, Serialize)]
pub struct RemoteVerifyReport {
    pub repo: String,
    pub revision: String,
    /// The commit the revision resolved to.
    pub commit: String,
    pub release_id: String,
    pub version: String,
    pub files_checked: usize,
    /// How each file's sha256 was established: by the Hub's ETag or by download.
    pub by_etag: usize,
    pub by_download: usize,
    pub problems: Vec<FileProblem>,
    /// Whether the revision carries the signature files.
    pub signed: bool,
    /// The signature's check, when a public key was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<SignatureReport>,
}

impl RemoteVerifyReport {
    /// The files match; and the signature, if checked, holds (an unsigned release passes unless
    /// `require_signature`).
    pub fn ok(&self, require_signature: bool) -> bool {
        self.problems.is_empty() && self.signature.as_ref().is_none_or(|s| s.ok() && (s.signed || !require_signature))
    }
}

impl std::fmt::Display for RemoteVerifyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = format!("{}@{} ({})", self.repo, self.revision, crate::hub::short(&self.commit));
        if self.problems.is_empty() {
            let ok = format!("ok: release {} {} at {at}: {} files match the manifest", self.release_id, self.version, self.files_checked);
            if self.by_etag == 0 {
                writeln!(f, "{ok}, every one downloaded and hashed")?;
            } else {
                writeln!(
                    f,
                    "{ok}: {} by the sha256 the Hub states for them (their ETags), {} downloaded and hashed",
                    self.by_etag, self.by_download
                )?;
                writeln!(
                    f,
                    "note: those {} were not downloaded: this trusts the Hub to serve the bytes its ETags state; \
                     --download DIR fetches and hashes every byte",
                    self.by_etag
                )?;
            }
        } else {
            writeln!(f, "FAILED: release {} at {at}: {} problem(s)", self.release_id, self.problems.len())?;
            self.problems.iter().try_for_each(|p| writeln!(f, "  {p}"))?;
        }
        match &self.signature {
            Some(signature) => write!(f, "{signature}"),
            None if self.signed => writeln!(f, "note: the release is signed; pass --public-key KEY.pub.pem to check who signed it"),
            None => Ok(()),
        }
    }
}

/// Checks the release at `repo`; with `download`, also writes every file there (then checked
/// locally against the same manifest); with `key`, also checks its signature files.
pub fn verify_remote(
    hub: &Hub,
    repo: &RepoRef,
    download: Option<&Path>,
    key: Option<&PublicKey>,
    log: &dyn Fn(&str),
) -> Result<RemoteVerifyReport, HubError> {
    let revision = repo.revision().to_string();
    // Before anything is fetched: the download folder is this command's alone.
    let claimed = download
        .map(|dir| {
            let claim =
                crate::files::Claim { option: "--download", replaces: true, is_ours: &crate::manifest::owned_release, protected: &[] };
            crate::files::OutDir::claim(dir, &claim)
        })
        .transpose()
        .map_err(|e| HubError::Protocol(e.to_string()))?;
    // Pin the revision to a commit first, so every later call reads the same tree.
    let commit = hub.commit_of(repo, &revision)?;
    let tree = hub.files(repo, &commit)?;
    if !tree.contains_key(MANIFEST_FILE) {
        return Err(HubError::Protocol(format!("{}@{revision} has no {MANIFEST_FILE}: not a bpals release", repo.id())));
    }
    // Small files are fetched whole, never past the size the tree lists nor the JSON ceiling (a
    // file the tree does not list is asked for anyway, so the Hub's own answer says it is missing).
    let small_file = |path: &str| -> Result<Vec<u8>, HubError> {
        let cap = tree.get(path).map_or(crate::hub::JSON_CAP, |f| f.size.min(crate::hub::JSON_CAP));
        hub.download_capped(repo, &commit, path, cap)
    };
    let manifest_bytes = small_file(MANIFEST_FILE)?;
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| HubError::Protocol(format!("{}@{revision}: {MANIFEST_FILE} is not a valid manifest: {e}", repo.id())))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(HubError::Protocol(format!(
            "{}@{revision}: manifest format {:?}, expected {MANIFEST_FORMAT:?}",
            repo.id(),
            manifest.format
        )));
    }
    log(&format!(
        "remote manifest at {}: release {} {}, {} files",
        crate::hub::short(&commit),
        manifest.release_id,
        manifest.version,
        manifest.files.len()
    ));

    let mut problems = Vec::new();
    let (mut by_etag, mut by_download) = (0, 0);
    // A download streams every file into a staging folder, renamed into place at the end.
    let staging = claimed
        .as_ref()
        .map(crate::pipeline::output::Staging::create)
        .transpose()
        .map_err(|e| HubError::Protocol(format!("staging the download: {e}")))?;
    // What each file's sha256 is on the Hub: what the signature is checked against.
    let mut on_hub: BTreeMap<String, String> = BTreeMap::new();
    for file in &manifest.files {
        if !crate::manifest::is_plain_relative(&file.path) {
            problems.push(FileProblem::UnsafePath { path: file.path.clone() });
            continue;
        }
        if !tree.contains_key(&file.path) {
            problems.push(FileProblem::Missing { path: file.path.clone() });
            continue;
        }
        let (size, sha256) = if let Some(staging) = &staging {
            // Never past the size the tree lists: a server sending more is refused, not believed.
            let digest = hub.download_to(repo, &commit, &file.path, tree[&file.path].size, &staging.dir.join(&file.path))?;
            by_download += 1;
            digest
        } else {
            let (size, sha256, source) = hub.sha256(repo, &commit, &file.path)?;
            match source {
                DigestSource::Etag => by_etag += 1,
                DigestSource::Download => by_download += 1,
            }
            (size, sha256)
        };
        on_hub.insert(file.path.clone(), sha256.clone());
        if size != file.bytes {
            problems.push(FileProblem::Size { path: file.path.clone(), expected: file.bytes, actual: size });
        } else if sha256 != file.sha256 {
            problems.push(FileProblem::Digest { path: file.path.clone(), expected: file.sha256.clone(), actual: sha256 });
        }
    }
    for path in tree.keys() {
        if path != MANIFEST_FILE && path != GITATTRIBUTES && !is_signature_file(path) && !manifest.files.iter().any(|f| &f.path == path) {
            problems.push(FileProblem::Extra { path: path.clone() });
        }
    }
    let signed = tree.contains_key(SIGNATURE_FILE) || tree.contains_key(PROVENANCE_FILE);
    // The signature files are small: fetched whole, kept with a download.
    let mut signature_files = BTreeMap::new();
    if signed && (key.is_some() || download.is_some()) {
        for name in [SIGNATURE_FILE, PROVENANCE_FILE].into_iter().filter(|n| tree.contains_key(*n)) {
            signature_files.insert(name, small_file(name)?);
        }
    }
    let signature = match key {
        None => None,
        Some(key) => {
            let lock_bytes = small_file(LOCK_FILE)?;
            let lock: BuildLock = serde_json::from_slice(&lock_bytes)
                .map_err(|e| HubError::Protocol(format!("{}@{revision}: {LOCK_FILE} is not a valid build lock: {e}", repo.id())))?;
            on_hub.insert(MANIFEST_FILE.to_string(), crate::hashing::sha256_hex(&manifest_bytes));
            if let Some(provenance) = signature_files.get(PROVENANCE_FILE) {
                on_hub.insert(PROVENANCE_FILE.to_string(), crate::hashing::sha256_hex(provenance));
            }
            let release = SignedRelease {
                signature: signature_files.get(SIGNATURE_FILE).map(Vec::as_slice),
                provenance: signature_files.get(PROVENANCE_FILE).map(Vec::as_slice),
                files: &on_hub,
                lock: &lock,
            };
            Some(signing::check(&release, key))
        }
    };
    if let (Some(dir), Some(staging)) = (download, staging) {
        let extra: Vec<(&str, &[u8])> = std::iter::once((MANIFEST_FILE, manifest_bytes.as_slice()))
            .chain(signature_files.iter().map(|(n, b)| (*n, b.as_slice())))
            .collect();
        finish_download(staging, &extra).map_err(|e| HubError::Protocol(format!("writing {}: {e}", dir.display())))?;
        log(&format!("downloaded {} files into {}", by_download + extra.len(), dir.display()));
    }
    Ok(RemoteVerifyReport {
        repo: repo.id(),
        revision,
        commit,
        release_id: manifest.release_id,
        version: manifest.version,
        files_checked: manifest.files.len(),
        by_etag,
        by_download,
        problems,
        signed,
        signature,
    })
}

/// Adds the small files fetched whole (the manifest, the signature files) to the staged
/// download and renames it into place, like a build.
fn finish_download(staging: crate::pipeline::output::Staging, files: &[(&str, &[u8])]) -> std::io::Result<()> {
    for (path, bytes) in files {
        std::fs::write(staging.dir.join(path), bytes)?;
    }
    staging.commit().map(|_| ())
}
