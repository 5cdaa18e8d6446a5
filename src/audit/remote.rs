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
    let manifest_bytes = hub.download(repo, &commit, MANIFEST_FILE)?;
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
    let mut downloaded: BTreeMap<String, Vec<u8>> = BTreeMap::new();
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
        let (size, sha256) = if download.is_some() {
            let bytes = hub.download(repo, &commit, &file.path)?;
            by_download += 1;
            let digest = (bytes.len() as u64, crate::hashing::sha256_hex(&bytes));
            downloaded.insert(file.path.clone(), bytes);
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
            signature_files.insert(name, hub.download(repo, &commit, name)?);
        }
    }
    let signature = match key {
        None => None,
        Some(key) => {
            let lock_bytes = hub.download(repo, &commit, LOCK_FILE)?;
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
    if download.is_some() {
        downloaded.extend(signature_files.into_iter().map(|(name, bytes)| (name.to_string(), bytes)));
    }
    if let (Some(dir), Some(claimed)) = (download, &claimed) {
        write_release(claimed, &manifest_bytes, &downloaded).map_err(|e| HubError::Protocol(format!("writing {}: {e}", dir.display())))?;
        log(&format!("downloaded {} files into {}", downloaded.len() + 1, dir.display()));
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

/// Writes the downloaded release into a fresh directory, through a staging folder renamed at
/// the end, like a build.
fn write_release(claimed: &crate::files::OutDir, manifest: &[u8], files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
    let staging = crate::pipeline::output::Staging::create(claimed)?;
    std::fs::write(staging.dir.join(MANIFEST_FILE), manifest)?;
    for (path, bytes) in files {
        let target = staging.dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, bytes)?;
    }
    staging.commit().map(|_| ())
}
