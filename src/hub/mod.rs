//! The Hugging Face Hub, as publish and the remote audits see it. Every call names its purpose
//! in its errors. Reads and small writes go through [`http::HubHttp`], which bounds every answer;
//! hf-hub makes the commit (its upload protocol), reads file metadata and fetches model files,
//! each of its calls bounded by [`guard::AnswerGuard`]. Every call has a deadline, retries
//! included.

pub mod access;
mod download;
mod guard;
mod http;
pub mod model;
pub mod retry;
pub mod token;

use std::collections::BTreeMap;
use std::time::Duration;

use hf_hub::{HFClient, HFClientBuilder, HFClientSync, HFError, RepoTypeDataset};
use reqwest::Method;
use serde::Deserialize;

use http::HubHttp;
pub use http::JSON_CAP;

/// The public Hub. Demo builds may only go to another endpoint (a staging or fake Hub).
pub const PUBLIC_HUB: &str = "https://huggingface.co";

/// How long a request may connect or wait for data before it counts as failed (and is retried).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one call to the Hub may take in all (connecting, every read, every retry).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
/// A transfer of N bytes gets N / this many more seconds than the deadline: the slowest link a
/// download or an upload is waited for (1 MiB/s).
pub const SLOWEST_TRANSFER_RATE: u64 = 1024 * 1024;

/// The time a call moving `bytes` is given: the deadline, plus the bytes at the slowest rate.
pub fn transfer_budget(deadline: Duration, bytes: u64) -> Duration {
    deadline.saturating_add(Duration::from_secs(bytes / SLOWEST_TRANSFER_RATE))
}

/// How hard and how long to try the Hub.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// Attempts after the first on transient failures (the default when None).
    pub retries: Option<usize>,
    /// A request that connects or receives nothing for this long fails (and is retried).
    pub stall: Duration,
    /// One call, its retries included, fails once it has taken this long.
    pub deadline: Duration,
}

impl Default for Patience {
    fn default() -> Patience {
        Patience { retries: None, stall: DEFAULT_STALL_TIMEOUT, deadline: DEFAULT_DEADLINE }
    }
}

/// The file the Hub manages in every repo; never part of a release.
pub const GITATTRIBUTES: &str = ".gitattributes";

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{action}")]
    Call { action: String, source: HFError },
    #[error("{action}: the Hub answered {status}{}: {message}", reason(*.status))]
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
    #[error("{action}: {server} was still answering {route} at the deadline, {} s after the call began, retries included (--deadline)", .budget.as_secs())]
    Late { action: String, server: String, route: String, budget: Duration },
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
    /// hf-hub, for the commit, file metadata and model files; through `guard`.
    client: HFClientSync,
    /// Bounds what each of hf-hub's calls may read, and for how long.
    guard: guard::AnswerGuard,
    /// Every other call, each answer under a cap.
    http: HubHttp,
    deadline: Duration,
    pub endpoint: String,
}

/// " Unauthorized" and the like, after a status code people may not know by heart.
fn reason(status: u16) -> String {
    reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).map_or_else(String::new, |r| format!(" {r}"))
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

/// hf-hub's HTTP client: a request that connects or receives nothing for `stall` fails; every
/// request goes through `guard` on a connection of its own (none is kept idle), so that each
/// answer is counted alone.
fn http_client(stall: Duration, guard: &guard::AnswerGuard) -> Result<reqwest::Client, HubError> {
    reqwest::Client::builder()
        .user_agent(format!("{}/{} hf-hub/1", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
        .connect_timeout(stall)
        .read_timeout(stall)
        .proxy(guard.proxy()?)
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| HubError::Protocol(format!("building the HTTP client: {e}")))
}

impl Hub {
    /// `endpoint`: --endpoint, else HF_ENDPOINT, else the public Hub. `patience`: the retries,
    /// the stall that fails a request and the deadline that fails a call.
    pub fn connect(endpoint: Option<&str>, patience: Patience) -> Result<Hub, HubError> {
        Hub::build(&endpoint_or_default(endpoint), patience, |builder| builder.cache_enabled(false))
    }

    /// hf-hub's client (as `configure` sets it up) and this tool's bounded one, of one
    /// configuration. The token comes from the usual places, read once.
    fn build(endpoint: &str, patience: Patience, configure: impl FnOnce(HFClientBuilder) -> HFClientBuilder) -> Result<Hub, HubError> {
        let guard = guard::AnswerGuard::start(endpoint, patience.stall)?;
        let mut builder = configure(HFClient::builder().endpoint(endpoint).client(http_client(patience.stall, &guard)?));
        let token = token::value()?;
        if let Some(token) = &token {
            builder = builder.token(token.clone());
        }
        if let Some(n) = patience.retries {
            builder = builder.retry_max_attempts(n);
        }
        let client = builder.build_sync().map_err(|source| HubError::Call { action: format!("connecting to {endpoint}"), source })?;
        let http = HubHttp::connect(endpoint, token, patience)?;
        Ok(Hub { client, guard, http, deadline: patience.deadline, endpoint: endpoint.to_string() })
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

    /// `/api/datasets/OWNER/NAME/...`
    fn api(&self, repo: &RepoRef, tail: &[&str]) -> reqwest::Url {
        self.api_of(RepoKind::Dataset, repo, tail)
    }

    /// `/api/KIND/OWNER/NAME/...`
    fn api_of(&self, kind: RepoKind, repo: &RepoRef, tail: &[&str]) -> reqwest::Url {
        let mut segments = vec!["api", kind.plural(), &repo.owner, &repo.name];
        segments.extend_from_slice(tail);
        self.http.url(&segments)
    }

    /// The repo's main branch, or None when the repo does not exist.
    pub fn repo(&self, repo: &RepoRef) -> Result<Option<RemoteRepo>, HubError> {
        let action = format!("reading dataset repo {}", repo.id());
        match self.http.get_json::<RepoInfo>(&action, &self.api(repo, &[]), JSON_CAP) {
            Ok(info) => {
                let head = info.sha.ok_or_else(|| HubError::Protocol(format!("the Hub sent no commit sha for {}", repo.id())))?;
                let gated = info.gated.is_some_and(|g| g != serde_json::Value::Bool(false) && !g.is_null());
                Ok(Some(RemoteRepo { head, private: info.private.unwrap_or(false), gated }))
            }
            Err(HubError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The commit a branch, tag or commit id names.
    pub fn commit_of(&self, repo: &RepoRef, revision: &str) -> Result<String, HubError> {
        self.commit_in(RepoKind::Dataset, repo, revision, &format!("resolving {}@{revision}", repo.id()))
    }

    /// The commit `revision` names in a repo of `kind`; `action` names the call in errors.
    fn commit_in(&self, kind: RepoKind, repo: &RepoRef, revision: &str, action: &str) -> Result<String, HubError> {
        let info: RepoInfo = self.http.get_json(action, &self.api_of(kind, repo, &["revision", revision]), JSON_CAP)?;
        info.sha.ok_or_else(|| HubError::Protocol(format!("{action}: the Hub sent no commit sha for {}@{revision}", repo.id())))
    }

    /// Creates the repo; one that exists already (an earlier attempt's) is fine.
    pub fn create_repo(&self, repo: &RepoRef, private: bool) -> Result<(), HubError> {
        let body = serde_json::json!({ "name": repo.name, "organization": repo.owner, "type": "dataset", "private": private });
        let action = format!("creating dataset repo {}", repo.id());
        match self.http.send(&action, Method::POST, &self.http.url(&["api", "repos", "create"]), Some(&body), JSON_CAP) {
            Ok(_) | Err(HubError::Status { status: 409, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sets the repo private, or gated with manual approval.
    pub fn restrict(&self, repo: &RepoRef, private: bool, gated: bool) -> Result<(), HubError> {
        let mut body = serde_json::Map::new();
        if private {
            body.insert("private".into(), true.into());
        }
        if gated {
            body.insert("gated".into(), "manual".into());
        }
        let action = format!("updating the settings of {}", repo.id());
        let url = self.api(repo, &["settings"]);
        self.http.send(&action, Method::PUT, &url, Some(&serde_json::Value::Object(body)), JSON_CAP).map(|_| ())
    }

    /// Every file at `revision`, by path: the whole listing, every page of it, under [`JSON_CAP`].
    pub fn files(&self, repo: &RepoRef, revision: &str) -> Result<BTreeMap<String, RemoteFile>, HubError> {
        self.files_in(RepoKind::Dataset, repo, revision)
    }

    /// [`Hub::files`] of a repo of `kind`.
    fn files_in(&self, kind: RepoKind, repo: &RepoRef, revision: &str) -> Result<BTreeMap<String, RemoteFile>, HubError> {
        let action = format!("listing the files of {}@{revision}", repo.id());
        let mut url = self.api_of(kind, repo, &["tree", revision]);
        url.query_pairs_mut().append_pair("recursive", "true");
        let entries: Vec<TreeEntry> = self.http.get_pages(&action, &url, JSON_CAP)?;
        entries
            .into_iter()
            .filter(|e| e.kind == "file")
            .map(|e| {
                let size = e.size.ok_or_else(|| HubError::Protocol(format!("{action}: the Hub lists {} without a size", e.path)))?;
                Ok((e.path, RemoteFile { size, git_oid: e.oid, lfs: e.lfs.is_some_and(|l| !l.is_null()) }))
            })
            .collect()
    }

    /// Tags and the commits they name.
    pub fn tags(&self, repo: &RepoRef) -> Result<BTreeMap<String, String>, HubError> {
        let refs: Refs = self.http.get_json(&format!("listing the refs of {}", repo.id()), &self.api(repo, &["refs"]), JSON_CAP)?;
        Ok(refs.tags.into_iter().map(|t| (t.name, t.target_commit)).collect())
    }

    /// Tags `commit`. A retry whose first attempt landed meets "tag exists": the refs say
    /// whether it names this commit (done) or another (refused).
    pub fn create_tag(&self, repo: &RepoRef, tag: &str, commit: &str, message: &str) -> Result<(), HubError> {
        let body = serde_json::json!({ "tag": tag, "message": message });
        let action = format!("tagging {} as {tag}", repo.id());
        match self.http.send(&action, Method::POST, &self.api(repo, &["tag", commit]), Some(&body), JSON_CAP) {
            Ok(_) => Ok(()),
            Err(conflict @ HubError::Status { status: 409, .. }) => match self.tags(repo)?.get(tag) {
                Some(at) if at == commit => Ok(()),
                _ => Err(conflict),
            },
            Err(e) => Err(e),
        }
    }

    /// One commit holding every operation, on top of `parent` (the Hub refuses it if main moved).
    /// `upload_bytes`, what the operations add, earns the call time beyond the deadline.
    pub fn commit(
        &self,
        repo: &RepoRef,
        operations: Vec<hf_hub::repository::CommitOperation>,
        message: &str,
        description: &str,
        parent: &str,
        upload_bytes: u64,
    ) -> Result<Option<String>, HubError> {
        let action = format!("committing to {} on top of {}", repo.id(), short(parent));
        // Each of the commit's answers (preupload, LFS batch, the commit's own) is small JSON.
        let budget = transfer_budget(self.deadline, upload_bytes);
        let made = self.guard.run(&action, JSON_CAP, budget, || {
            let made = self
                .dataset(repo)
                .create_commit()
                .operations(operations)
                .commit_message(message)
                .commit_description(description)
                .parent_commit(parent)
                .send();
            Self::call(|| action.clone(), made)
        })?;
        Ok(made.commit_oid)
    }

    /// A file's size and sha256: from its LFS/Xet ETag when the Hub gives one, else by download.
    pub fn sha256(&self, repo: &RepoRef, revision: &str, path: &str) -> Result<(u64, String, DigestSource), HubError> {
        let action = format!("reading the metadata of {path} in {}@{revision}", repo.id());
        // A HEAD: its answer is headers, and an error's body.
        let meta = self.guard.run(&action, guard::ERROR_BODY_CAP, self.deadline, || {
            Self::call(|| action.clone(), self.dataset(repo).get_file_metadata().filepath(path).revision(revision).send())
        })?;
        let etag = meta.etag.trim_matches('"').to_ascii_lowercase();
        if etag.len() == 64 && etag.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok((meta.file_size, etag, DigestSource::Etag));
        }
        // Hashed as it streams, and never past the size the metadata announced.
        let (size, sha256) = self.download_digest(repo, revision, path, meta.file_size)?;
        Ok((size, sha256, DigestSource::Download))
    }
}

/// The kinds of repo this tool reads.
#[derive(Debug, Clone, Copy)]
enum RepoKind {
    Dataset,
    Model,
}

impl RepoKind {
    fn plural(self) -> &'static str {
        match self {
            RepoKind::Dataset => "datasets",
            RepoKind::Model => "models",
        }
    }
}

/// What this tool reads of `GET /api/{datasets,models}/ID[/revision/REV]`.
#[derive(Deserialize)]
struct RepoInfo {
    sha: Option<String>,
    private: Option<bool>,
    gated: Option<serde_json::Value>,
}

/// One entry of `GET /api/datasets/ID/tree/REV?recursive=true`: a file or a directory.
#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    oid: String,
    size: Option<u64>,
    lfs: Option<serde_json::Value>,
}

/// What this tool reads of `GET /api/datasets/ID/refs`.
#[derive(Deserialize)]
struct Refs {
    #[serde(default)]
    tags: Vec<Tag>,
}

#[derive(Deserialize)]
struct Tag {
    name: String,
    #[serde(rename = "targetCommit")]
    target_commit: String,
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
