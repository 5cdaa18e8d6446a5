//! A loopback fake of the Hugging Face Hub API: the calls hf-hub 1.0 makes to publish, list and
//! download a dataset repo, served by axum on 127.0.0.1 inside the test process.
//!
//! It keeps every commit in memory, applies a commit atomically (all files or none), refuses a
//! commit whose `parentCommit` is not the branch head (as the Hub does), and answers the LFS
//! batch call in "basic" mode, so hf-hub puts file bytes inline in the commit and the fake holds
//! real content. Faults can be queued per route: an HTTP status before or after a commit is
//! applied, a dropped connection, a slow answer.
#![allow(dead_code)]
// A handler's early answer is an axum `Response`, as axum's own examples return it; boxing it
// would only add noise to a test fake.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use base64::Engine;
use serde_json::{json, Value};
use sha1::Digest as _;

/// A fault to inject on the next request to a route.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status without doing anything.
    Status(u16),
    /// Apply the request (a commit), then answer 500: the case that makes blind retries unsafe.
    StatusAfterApply(u16),
    /// Send headers, then break the body: the client sees a dropped connection.
    Drop,
    /// Wait, then answer normally.
    Slow(Duration),
    /// For a commit: wait, then apply it even if the client has gone.
    StallThenApply(Duration),
    /// For a download (GET; a HEAD leaves it queued): this many bytes more than the file
    /// holds, and than the tree lists. `announced`: in the Content-Length; else sent chunked,
    /// with no length, as a server that does not know or will not say.
    Pad { bytes: usize, announced: bool },
    /// For a commit: apply it, then answer with another commit's id (the parent's), as a Hub
    /// that misreports would.
    WrongCommitOid,
    /// Answer with this status and a body of `bytes` bytes, made as it is sent (never held):
    /// `announced` in the Content-Length, else chunked. What was sent adds to `HubState::sent`.
    Huge { status: u16, bytes: u64, announced: bool },
    /// Answer with this status, then one byte of body every `every`, for as long as the client
    /// stays: a Hub that never stalls long enough to trip a read timeout and never ends.
    Drip { status: u16, every: Duration },
}

#[derive(Debug, Clone)]
pub struct Commit {
    pub sha: String,
    pub parent: Option<String>,
    pub message: String,
    pub files: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, Clone, Default)]
pub struct Repo {
    pub private: bool,
    pub gated: Option<String>,
    pub commits: Vec<Commit>,
    pub tags: BTreeMap<String, String>,
}

impl Repo {
    pub fn head(&self) -> &Commit {
        self.commits.last().expect("a repo starts with an initial commit")
    }
    fn commit(&self, rev: &str) -> Option<&Commit> {
        if rev == "main" {
            return self.commits.last();
        }
        let sha = self.tags.get(rev).map(String::as_str).unwrap_or(rev);
        self.commits.iter().find(|c| c.sha == sha)
    }
}

#[derive(Default)]
pub struct HubState {
    pub repos: BTreeMap<String, Repo>,
    /// When set, every write and every read of a private or gated repo needs this bearer token.
    pub token: Option<String>,
    faults: Vec<(String, Fault)>,
    /// "METHOD path" of every request, in order.
    pub requests: Vec<String>,
    /// Every Authorization header seen, to check the client sent the token.
    pub auth_headers: Vec<String>,
    /// Gated repos' access requests: repo id -> lower-cased username -> request.
    pub access: BTreeMap<String, BTreeMap<String, AccessRequest>>,
    /// (repo key, path) -> the sha256 its ETag keeps stating after its bytes were swapped: a
    /// storage fault, or a Hub that lies, which only a download can catch.
    stale_etags: BTreeMap<(String, String), String>,
    /// Bytes of `Fault::Huge` bodies handed to the connection so far.
    pub sent: Arc<std::sync::atomic::AtomicU64>,
    /// Entries per page of a tree listing (the real Hub pages by 1,000), and the origin its
    /// `Link: rel="next"` names (this fake's own unless set, as a hostile Hub might).
    pub tree_page: Option<usize>,
    pub next_page_origin: Option<String>,
    /// This fake's own URL.
    pub url: String,
}

pub struct FakeHub {
    pub url: String,
    pub state: Arc<Mutex<HubState>>,
    _runtime: tokio::runtime::Runtime,
}

type Shared = Arc<Mutex<HubState>>;

impl FakeHub {
    pub fn start(token: Option<&str>) -> FakeHub {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let state: Shared = Arc::new(Mutex::new(HubState { token: token.map(str::to_string), ..Default::default() }));
        let app = Router::new()
            .route("/api/repos/create", post(create_repo))
            .route("/api/datasets/{owner}/{name}", get(info))
            .route("/api/datasets/{owner}/{name}/revision/{rev}", get(info_at))
            .route("/api/datasets/{owner}/{name}/settings", put(settings))
            .route("/api/datasets/{owner}/{name}/preupload/{rev}", post(preupload))
            .route("/datasets/{owner}/{repo_git}/info/lfs/objects/batch", post(lfs_batch))
            .route("/api/datasets/{owner}/{name}/commit/{rev}", post(commit))
            .route("/api/datasets/{owner}/{name}/tag/{rev}", post(tag))
            .route("/api/datasets/{owner}/{name}/refs", get(refs))
            .route("/api/datasets/{owner}/{name}/tree/{rev}", get(tree))
            .route("/api/datasets/{owner}/{name}/tree/{rev}/{*path}", get(tree_under))
            .route("/datasets/{owner}/{name}/resolve/{rev}/{*path}", get(resolve).head(resolve))
            // Model repos, read-only: what a build fetching its model asks for.
            .route("/api/models/{owner}/{name}/revision/{rev}", get(model_info_at))
            .route("/api/models/{owner}/{name}/tree/{rev}", get(model_tree))
            .route("/{owner}/{name}/resolve/{rev}/{*path}", get(model_resolve).head(model_resolve))
            .layer(axum::extract::DefaultBodyLimit::disable());
        let app = access::routes(app).with_state(state.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        state.lock().unwrap().url = url.clone();
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeHub { url, state, _runtime: runtime }
    }

    /// Queues a fault for the next request whose route is `route` ("commit", "preupload",
    /// "tag", "resolve", "tree", "info", ...).
    pub fn inject(&self, route: &str, fault: Fault) {
        self.state.lock().unwrap().faults.push((route.to_string(), fault));
    }

    pub fn repo(&self, id: &str) -> Option<Repo> {
        self.state.lock().unwrap().repos.get(id).cloned()
    }

    /// Commits made by clients (the initial commit of a new repo is not counted).
    pub fn release_commits(&self, id: &str) -> usize {
        self.repo(id).map_or(0, |r| r.commits.len() - 1)
    }

    /// Replaces a file on main with a commit of its own, as someone editing the repo would.
    pub fn tamper(&self, id: &str, path: &str, bytes: Option<&[u8]>) {
        let mut s = self.state.lock().unwrap();
        let repo = s.repos.get_mut(id).unwrap();
        let mut files = repo.head().files.clone();
        match bytes {
            Some(b) => files.insert(path.to_string(), b.to_vec()),
            None => files.remove(path),
        };
        let parent = repo.head().sha.clone();
        let sha = hex::encode(sha1::Sha1::digest(format!("tamper {parent} {path}").as_bytes()));
        repo.commits.push(Commit { sha, parent: Some(parent), message: format!("edit {path}"), files });
    }

    /// Replaces an LFS file's bytes in the head commit with others of the same length, while
    /// its ETag keeps stating the old sha256.
    pub fn swap_bytes_keeping_etag(&self, id: &str, path: &str, bytes: &[u8]) {
        let mut s = self.state.lock().unwrap();
        let commit = s.repos.get_mut(id).unwrap().commits.last_mut().unwrap();
        let old = commit.files.insert(path.to_string(), bytes.to_vec()).unwrap();
        assert_eq!(old.len(), bytes.len(), "the same length, so the size still matches");
        s.stale_etags.insert((id.to_string(), path.to_string()), sha256(&old));
    }

    /// Creates a model repo holding `files` in one commit; returns the commit sha.
    pub fn seed_model(&self, id: &str, files: BTreeMap<String, Vec<u8>>) -> String {
        let sha = hex::encode(sha1::Sha1::digest(format!("model {id} {}", files.len()).as_bytes()));
        let commit = Commit { sha: sha.clone(), parent: None, message: "upload model".into(), files };
        self.state.lock().unwrap().repos.insert(model_key(id), Repo { commits: vec![commit], ..Default::default() });
        sha
    }

    pub fn count(&self, request_prefix: &str) -> usize {
        self.state.lock().unwrap().requests.iter().filter(|r| r.starts_with(request_prefix)).count()
    }
}

fn git_blob_sha1(bytes: &[u8]) -> String {
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex::encode(h.finalize())
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Model repos are kept apart from dataset repos, as on the Hub.
fn model_key(id: &str) -> String {
    format!("models/{id}")
}

/// Large binary files go to LFS on the Hub; the rest are plain git blobs.
fn is_lfs(path: &str) -> bool {
    path.ends_with(".parquet") || path.ends_with(".png") || path.ends_with(".safetensors")
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// Logs the request, checks the token and takes the route's queued fault.
fn enter(
    state: &Shared,
    route: &str,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    write: bool,
    repo: Option<&str>,
) -> Result<Option<Fault>, Response> {
    let mut s = state.lock().unwrap();
    s.requests.push(format!("{method} {path}"));
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(a) = &auth {
        s.auth_headers.push(a.clone());
    }
    let locked = repo.and_then(|r| s.repos.get(r)).is_some_and(|r| r.private || r.gated.is_some());
    if let Some(token) = &s.token {
        if (write || locked) && auth.as_deref() != Some(&format!("Bearer {token}")) {
            // Echoes what it got, as a careless server might: the client must not print it.
            let got = auth.unwrap_or_default();
            return Err(error(StatusCode::UNAUTHORIZED, &format!("Invalid credentials in Authorization header: {got}")));
        }
    }
    let fault = s.faults.iter().position(|(r, _)| r == route).map(|i| s.faults.remove(i).1);
    Ok(fault)
}

async fn apply_pre(state: &Shared, fault: &Option<Fault>) -> Option<Response> {
    match fault {
        Some(Fault::Huge { status, bytes, announced }) => {
            let sent = state.lock().unwrap().sent.clone();
            let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
            let total = *bytes;
            let body = futures::stream::unfold(0u64, move |done| {
                let (chunk, sent) = (chunk.clone(), sent.clone());
                async move {
                    (done < total).then(|| {
                        let n = (total - done).min(chunk.len() as u64);
                        sent.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                        (Ok::<_, std::io::Error>(chunk.slice(..n as usize)), done + n)
                    })
                }
            });
            let mut response = Response::builder().status(*status).header("content-type", "application/json");
            if *announced {
                response = response.header("content-length", total);
            }
            Some(response.body(Body::from_stream(body)).unwrap())
        }
        Some(Fault::Drip { status, every }) => {
            let every = *every;
            let body = futures::stream::unfold((), move |()| async move {
                tokio::time::sleep(every).await;
                Some((Ok::<_, std::io::Error>(Bytes::from_static(b" ")), ()))
            });
            Some(Response::builder().status(*status).header("content-type", "application/json").body(Body::from_stream(body)).unwrap())
        }
        Some(Fault::Status(code)) => Some(error(StatusCode::from_u16(*code).unwrap(), "injected fault")),
        Some(Fault::Drop) => {
            let body = Body::from_stream(futures::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected drop"))
            }));
            Some(Response::builder().status(200).header("content-type", "application/json").body(body).unwrap())
        }
        Some(Fault::Slow(d)) => {
            tokio::time::sleep(*d).await;
            None
        }
        _ => None,
    }
}

macro_rules! enter_or_return {
    ($state:expr, $route:expr, $method:expr, $path:expr, $headers:expr, $write:expr, $repo:expr) => {{
        let fault = match enter(&$state, $route, &$method, $path, &$headers, $write, $repo) {
            Ok(f) => f,
            Err(r) => return r,
        };
        if let Some(r) = apply_pre(&$state, &fault).await {
            return r;
        }
        fault
    }};
}

// After the macros and helpers above, which they use.
mod access;
mod reads;
mod writes;
pub use access::AccessRequest;
use reads::*;
use writes::*;
