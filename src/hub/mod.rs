//! The Hugging Face Hub, as publish and the remote audits see it: a thin layer over hf-hub's
//! blocking client that names each call's purpose in its errors.

pub mod access;
mod download;
pub mod model;
pub mod retry;
pub mod token;

use std::collections::BTreeMap;
use std::time::Duration;

use hf_hub::repository::RepoTreeEntry;
use hf_hub::{HFClient, HFClientBuilder, HFClientSync, HFError, RepoTypeDataset};

pub use download::JSON_CAP;

/// The public Hub. Demo builds may only go to another endpoint (a staging or fake Hub).
pub const PUBLIC_HUB: &str = "https://huggingface.co";

/// How long a request may connect or wait for data before it counts as failed (and is retried).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The file the Hub manages in every repo; never part of a release.
pub const GITATTRIBUTES: &str = ".gitattributes";

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{action}")]
    Call { action: String, source: HFError },
    #[error("{action}: the Hub answered {status}: {message}")]
    Status { action: String, status: u16, message: String },
    #[error("{0:?} is not a repo id: expected ORG/NAME or ORG/NAME@REVISION")]
    BadRepo(String),
    #[error("{0}")]
    Protocol(String),
    #[error(
        "model {id}@{revision} is not in the Hugging Face cache ({}) and this run is offline (--offline, HF_HUB_OFFLINE \
         or a dry run): run once online, or `hf download {id} --revision {revision}`",
        cache.display()
    )]
    ModelNotCached { id: String, revision: String, cache: std::path::PathBuf },
    #[error("{server}: {route} is refused: {what}, above the cap of {cap} bytes for it")]
    TooLarge { server: String, route: String, cap: u64, what: String },
}

/// `ORG/NAME` with an optional `@REVISION` (branch, tag or commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    pub owner: String,
    pub name: String,
    pub revision: Option<String>,
}

impl RepoRef {
    pub fn parse(text: &str) -> Result<RepoRef, HubError> {
        let (id, revision) = match text.split_once('@') {
            Some((id, rev)) if !rev.is_empty() => (id, Some(rev.to_string())),
            Some(_) => return Err(HubError::BadRepo(text.into())),
            None => (text, None),
        };
        // The Hub's rule; it also keeps a relative path like ./model from passing for an id.
        let valid = |s: &str| {
            !s.is_empty()
                && !s.starts_with(['.', '-'])
                && !s.ends_with(['.', '-'])
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        match id.split_once('/') {
            Some((owner, name)) if valid(owner) && valid(name) => Ok(RepoRef { owner: owner.into(), name: name.into(), revision }),
            _ => Err(HubError::BadRepo(text.into())),
        }
    }

    pub fn id(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    pub fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or("main")
    }
}

/// A repo's state at its main branch.
#[derive(Debug, Clone)]
pub struct RemoteRepo {
    pub head: String,
    pub private: bool,
    pub gated: bool,
}

/// One file of a remote tree.
#[derive(Debug, Clone)]
pub struct RemoteFile {
    pub size: u64,
    /// The git object id: the blob's sha1 for a plain file, the LFS pointer's for an LFS file.
    pub git_oid: String,
    pub lfs: bool,
}

/// How a remote file's sha256 was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DigestSource {
    /// The Hub's LFS/Xet ETag, which is the content's sha256.
    Etag,
    /// Downloaded and hashed here.
    Download,
}

pub struct Hub {
    client: HFClientSync,
    /// The same Hub through hf-hub's async client, for downloads streamed under a cap (the
    /// blocking client only hands out whole files), and the runtime it runs on.
    streaming: HFClient,
    runtime: std::sync::OnceLock<tokio::runtime::Runtime>,
    pub endpoint: String,
}

/// `endpoint`, else HF_ENDPOINT, else the public Hub; without a trailing slash.
fn endpoint_or_default(endpoint: Option<&str>) -> String {
    endpoint
        .map(str::to_string)
        .or_else(|| std::env::var("HF_ENDPOINT").ok().filter(|e| !e.is_empty()))
        .unwrap_or_else(|| PUBLIC_HUB.to_string())
        .trim_end_matches('/')
        .to_string()
}

/// A request that connects or receives nothing for `stall` fails.
fn http_client(stall: Duration) -> Result<reqwest::Client, HubError> {
    reqwest::Client::builder()
        .user_agent(format!("{}/{} hf-hub/1", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
        .connect_timeout(stall)
        .read_timeout(stall)
        .build()
        .map_err(|e| HubError::Protocol(format!("building the HTTP client: {e}")))
}

impl Hub {
    /// `endpoint`: --endpoint, else HF_ENDPOINT, else the public Hub. `retries`: attempts after
    /// the first on transient failures (hf-hub's default when None). A request that connects or
    /// receives nothing for `stall` fails (a long transfer that keeps moving is never cut).
    pub fn connect(endpoint: Option<&str>, retries: Option<usize>, stall: Duration) -> Result<Hub, HubError> {
        let endpoint = endpoint_or_default(endpoint);
        let http = || http_client(stall).map(|c| HFClient::builder().endpoint(&endpoint).cache_enabled(false).client(c));
        Hub::build(&endpoint, http, retries)
    }

    /// Two clients of one configuration (`builder` makes each its own, with its own connection
    /// pool): the blocking one runs on hf-hub's runtime thread, the streaming one on a runtime of
    /// this Hub's, started on the first download. The token comes from the usual places.
    fn build(endpoint: &str, builder: impl Fn() -> Result<HFClientBuilder, HubError>, retries: Option<usize>) -> Result<Hub, HubError> {
        let token = token::value()?;
        let configured = || -> Result<HFClientBuilder, HubError> {
            let mut builder = builder()?;
            if let Some(token) = &token {
                builder = builder.token(token.clone());
            }
            if let Some(n) = retries {
                builder = builder.retry_max_attempts(n);
            }
            Ok(builder)
        };
        let connecting = |source| HubError::Call { action: format!("connecting to {endpoint}"), source };
        let client = configured()?.build_sync().map_err(connecting)?;
        let streaming = configured()?.build().map_err(connecting)?;
        Ok(Hub { client, streaming, runtime: std::sync::OnceLock::new(), endpoint: endpoint.to_string() })
    }

    pub fn is_public_hub(&self) -> bool {
        self.endpoint == PUBLIC_HUB || self.endpoint == "https://hf.co"
    }

    fn dataset(&self, repo: &RepoRef) -> hf_hub::HFRepositorySync<RepoTypeDataset> {
        self.client.dataset(&repo.owner, &repo.name)
    }

    fn call<T>(action: impl FnOnce() -> String, result: Result<T, HFError>) -> Result<T, HubError> {
        result.map_err(|source| HubError::Call { action: action(), source })
    }

    /// The repo's main branch, or None when the repo does not exist.
    pub fn repo(&self, repo: &RepoRef) -> Result<Option<RemoteRepo>, HubError> {
        match self.dataset(repo).info().send() {
            Ok(info) => {
                let head = info.sha.ok_or_else(|| HubError::Protocol(format!("the Hub sent no commit sha for {}", repo.id())))?;
                let gated = info.gated.is_some_and(|g| g != serde_json::Value::Bool(false) && !g.is_null());
                Ok(Some(RemoteRepo { head, private: info.private.unwrap_or(false), gated }))
            }
            Err(HFError::RepoNotFound { .. }) => Ok(None),
            Err(source) => Err(HubError::Call { action: format!("reading dataset repo {}", repo.id()), source }),
        }
    }

    /// The commit a branch, tag or commit id names.
    pub fn commit_of(&self, repo: &RepoRef, revision: &str) -> Result<String, HubError> {
        let info = self.dataset(repo).info().revision(revision).send();
        let info = Self::call(|| format!("resolving {}@{revision}", repo.id()), info)?;
        info.sha.ok_or_else(|| HubError::Protocol(format!("the Hub sent no commit sha for {}@{revision}", repo.id())))
    }

    pub fn create_repo(&self, repo: &RepoRef, private: bool) -> Result<(), HubError> {
        let id = repo.id();
        let made = self.client.create_repository().repo_id(&id).repo_type(RepoTypeDataset).private(private).exist_ok(true).send();
        Self::call(|| format!("creating dataset repo {id}"), made).map(|_| ())
    }

    /// Sets the repo private, or gated with manual approval.
    pub fn restrict(&self, repo: &RepoRef, private: bool, gated: bool) -> Result<(), HubError> {
        let gated = gated.then_some(hf_hub::repository::GatedApprovalMode::Manual);
        let done = self.dataset(repo).update_settings().maybe_private(private.then_some(true)).maybe_gated(gated).send();
        Self::call(|| format!("updating the settings of {}", repo.id()), done)
    }

    /// Every file at `revision`, by path.
    pub fn files(&self, repo: &RepoRef, revision: &str) -> Result<BTreeMap<String, RemoteFile>, HubError> {
        let entries = self.dataset(repo).list_tree().revision(revision).recursive(true).send();
        let entries = Self::call(|| format!("listing the files of {}@{revision}", repo.id()), entries)?;
        Ok(entries
            .into_iter()
            .filter_map(|e| match e {
                RepoTreeEntry::File { oid, size, path, lfs, .. } => Some((path, RemoteFile { size, git_oid: oid, lfs: lfs.is_some() })),
                _ => None,
            })
            .collect())
    }

    /// Tags and the commits they name.
    pub fn tags(&self, repo: &RepoRef) -> Result<BTreeMap<String, String>, HubError> {
        let refs = Self::call(|| format!("listing the refs of {}", repo.id()), self.dataset(repo).list_refs().send())?;
        Ok(refs.tags.into_iter().map(|t| (t.name, t.target_commit)).collect())
    }

    pub fn create_tag(&self, repo: &RepoRef, tag: &str, commit: &str, message: &str) -> Result<(), HubError> {
        let made = self.dataset(repo).create_tag().tag(tag).revision(commit).message(message).send();
        Self::call(|| format!("tagging {} as {tag}", repo.id()), made)
    }

    /// One commit holding every operation, on top of `parent` (the Hub refuses it if main moved).
    pub fn commit(
        &self,
        repo: &RepoRef,
        operations: Vec<hf_hub::repository::CommitOperation>,
        message: &str,
        description: &str,
        parent: &str,
    ) -> Result<Option<String>, HubError> {
        let made = self
            .dataset(repo)
            .create_commit()
            .operations(operations)
            .commit_message(message)
            .commit_description(description)
            .parent_commit(parent)
            .send();
        Self::call(|| format!("committing to {} on top of {}", repo.id(), short(parent)), made).map(|info| info.commit_oid)
    }

    /// A file's size and sha256: from its LFS/Xet ETag when the Hub gives one, else by download.
    pub fn sha256(&self, repo: &RepoRef, revision: &str, path: &str) -> Result<(u64, String, DigestSource), HubError> {
        let meta = self.dataset(repo).get_file_metadata().filepath(path).revision(revision).send();
        let meta = Self::call(|| format!("reading the metadata of {path} in {}@{revision}", repo.id()), meta)?;
        let etag = meta.etag.trim_matches('"').to_ascii_lowercase();
        if etag.len() == 64 && etag.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok((meta.file_size, etag, DigestSource::Etag));
        }
        // Hashed as it streams, and never past the size the metadata announced.
        let (size, sha256) = self.download_digest(repo, revision, path, meta.file_size)?;
        Ok((size, sha256, DigestSource::Download))
    }
}

pub fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// The git object id of a plain file's content (what the Hub lists for non-LFS files).
pub fn git_blob_oid(bytes: &[u8]) -> String {
    use sha1::Digest;
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_refs_parse_or_say_what_was_expected() {
        let r = RepoRef::parse("o5i/cxr14-bpals@s1a-v1.0.0").unwrap();
        assert_eq!((r.id(), r.revision()), ("o5i/cxr14-bpals".to_string(), "s1a-v1.0.0"));
        assert_eq!(RepoRef::parse("o5i/x").unwrap().revision(), "main");
        for bad in ["noslash", "a/b/c", "/x", "a/", "a/b@", "a b/c", "./model", "../x", "a/-b", "a./b"] {
            assert!(RepoRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn git_blob_oid_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(git_blob_oid(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
    }
}
