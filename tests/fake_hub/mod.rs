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

async fn create_repo(State(state): State<Shared>, method: Method, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let _ = enter_or_return!(state, "create", method, "/api/repos/create", headers, true, None);
    let (Some(name), Some(kind)) = (body["name"].as_str(), body["type"].as_str()) else {
        return error(StatusCode::BAD_REQUEST, "name and type are required");
    };
    if kind != "dataset" {
        return error(StatusCode::BAD_REQUEST, "this fake serves dataset repos only");
    }
    let id = match body["organization"].as_str() {
        Some(org) => format!("{org}/{name}"),
        None => format!("user/{name}"),
    };
    let mut s = state.lock().unwrap();
    if s.repos.contains_key(&id) {
        return error(StatusCode::CONFLICT, "You already created this dataset repo");
    }
    let initial = Commit {
        sha: hex::encode(sha1::Sha1::digest(format!("initial {id}").as_bytes())),
        parent: None,
        message: "initial commit".into(),
        files: BTreeMap::from([(".gitattributes".to_string(), b"*.parquet filter=lfs diff=lfs merge=lfs -text\n".to_vec())]),
    };
    let private = body["private"].as_bool().unwrap_or(false);
    s.repos.insert(id.clone(), Repo { private, gated: None, commits: vec![initial], tags: BTreeMap::new() });
    Json(json!({ "url": format!("https://fake.hub/datasets/{id}"), "name": id })).into_response()
}

fn info_json(repo: &Repo, id: &str, commit: &Commit) -> Value {
    json!({
        "id": id,
        "_id": id,
        "author": id.split('/').next(),
        "sha": commit.sha,
        "private": repo.private,
        "gated": repo.gated.clone().map_or(json!(false), Value::String),
        "siblings": commit.files.keys().map(|p| json!({ "rfilename": p })).collect::<Vec<_>>(),
    })
}

async fn info(state: State<Shared>, method: Method, headers: HeaderMap, Path((owner, name)): Path<(String, String)>) -> Response {
    info_at(state, method, headers, Path((owner, name, "main".into()))).await
}

async fn info_at(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    info_in(state, method, headers, &id, &id, &format!("/api/datasets/{id}/revision/{rev}"), &rev).await
}

async fn model_info_at(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    info_in(state, method, headers, &model_key(&id), &id, &format!("/api/models/{id}/revision/{rev}"), &rev).await
}

/// A repo's info at `rev`; `key` is where the fake keeps it, `id` what the Hub calls it.
async fn info_in(state: Shared, method: Method, headers: HeaderMap, key: &str, id: &str, logged: &str, rev: &str) -> Response {
    let _ = enter_or_return!(state, "info", method, logged, headers, false, Some(key));
    let s = state.lock().unwrap();
    let Some(repo) = s.repos.get(key) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    let Some(commit) = repo.commit(rev) else { return error(StatusCode::NOT_FOUND, "Revision not found") };
    Json(info_json(repo, id, commit)).into_response()
}

async fn settings(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let id = format!("{owner}/{name}");
    let _ = enter_or_return!(state, "settings", method, &format!("/api/datasets/{id}/settings"), headers, true, Some(&id));
    let mut s = state.lock().unwrap();
    let Some(repo) = s.repos.get_mut(&id) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    if let Some(p) = body["private"].as_bool() {
        repo.private = p;
    }
    match &body["gated"] {
        Value::String(mode) => repo.gated = Some(mode.clone()),
        Value::Bool(false) => repo.gated = None,
        _ => {}
    }
    Json(json!({})).into_response()
}

async fn preupload(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let id = format!("{owner}/{name}");
    let _ = enter_or_return!(state, "preupload", method, &format!("/api/datasets/{id}/preupload/{rev}"), headers, true, Some(&id));
    let files: Vec<Value> = body["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .map(|f| {
                    let path = f["path"].as_str().unwrap_or_default();
                    json!({ "path": path, "uploadMode": if is_lfs(path) { "lfs" } else { "regular" }, "shouldIgnore": false })
                })
                .collect()
        })
        .unwrap_or_default();
    Json(json!({ "files": files })).into_response()
}

async fn lfs_batch(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, repo_git)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let id = format!("{owner}/{}", repo_git.trim_end_matches(".git"));
    let _ = enter_or_return!(state, "lfs", method, &format!("/datasets/{id}.git/info/lfs/objects/batch"), headers, true, Some(&id));
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let objects: Vec<Value> = body["objects"].as_array().cloned().unwrap_or_default();
    // Basic mode with no actions: hf-hub then sends the bytes inline in the commit.
    let objects: Vec<Value> = objects.into_iter().map(|o| json!({ "oid": o["oid"], "size": o["size"] })).collect();
    ([("content-type", "application/vnd.git-lfs+json")], Json(json!({ "transfer": "basic", "objects": objects, "hash_algo": "sha256" })))
        .into_response()
}

async fn commit(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let id = format!("{owner}/{name}");
    let fault = enter_or_return!(state, "commit", method, &format!("/api/datasets/{id}/commit/{rev}"), headers, true, Some(&id));
    let mut header = Value::Null;
    let mut adds: Vec<(String, Vec<u8>)> = Vec::new();
    let mut deletes: Vec<String> = Vec::new();
    for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(v) = serde_json::from_slice::<Value>(line) else { return error(StatusCode::BAD_REQUEST, "bad NDJSON line") };
        match v["key"].as_str() {
            Some("header") => header = v["value"].clone(),
            Some("file") => {
                let Some(content) = v["value"]["content"].as_str() else { return error(StatusCode::BAD_REQUEST, "file without content") };
                let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(content) else {
                    return error(StatusCode::BAD_REQUEST, "content is not base64");
                };
                adds.push((v["value"]["path"].as_str().unwrap_or_default().to_string(), bytes));
            }
            Some("deletedFile") => deletes.push(v["value"]["path"].as_str().unwrap_or_default().to_string()),
            Some("lfsFile") => return error(StatusCode::BAD_REQUEST, "this fake takes inline content only (basic transfer)"),
            _ => return error(StatusCode::BAD_REQUEST, "unknown NDJSON key"),
        }
    }
    if rev != "main" {
        return error(StatusCode::BAD_REQUEST, "this fake commits to main only");
    }
    // A stalled commit is applied by a task of its own, like a server that finishes the work
    // although the client has hung up.
    let parent_commit = header["parentCommit"].as_str().map(str::to_string);
    let stall = match &fault {
        Some(Fault::StallThenApply(d)) => Some(*d),
        _ => None,
    };
    let task = tokio::spawn(async move {
        if let Some(d) = stall {
            tokio::time::sleep(d).await;
        }
        apply_commit(&state, &id, &header, adds, deletes)
    });
    let (id, sha) = match task.await.expect("the commit task does not panic") {
        Ok(done) => done,
        Err(response) => return response,
    };
    if let Some(Fault::StatusAfterApply(code)) = fault {
        return error(StatusCode::from_u16(code).unwrap(), "injected fault after the commit was applied");
    }
    let sha = match fault {
        Some(Fault::WrongCommitOid) => parent_commit.unwrap_or_else(|| "0".repeat(40)),
        _ => sha,
    };
    Json(json!({ "commitOid": sha, "commitUrl": format!("https://fake.hub/datasets/{id}/commit/{sha}") })).into_response()
}

/// Applies a commit to main, whole, if its parent is still the head.
fn apply_commit(
    state: &Shared,
    id: &str,
    header: &Value,
    adds: Vec<(String, Vec<u8>)>,
    deletes: Vec<String>,
) -> Result<(String, String), Response> {
    let mut s = state.lock().unwrap();
    let Some(repo) = s.repos.get_mut(id) else { return Err(error(StatusCode::NOT_FOUND, "Repository not found")) };
    let head = repo.head().clone();
    if let Some(parent) = header["parentCommit"].as_str() {
        if parent != head.sha {
            let message = format!("A commit has happened since. Parent {parent} is not the head {}", head.sha);
            return Err(error(StatusCode::PRECONDITION_FAILED, &message));
        }
    }
    let mut files = head.files.clone();
    for path in &deletes {
        if files.remove(path).is_none() {
            return Err(error(StatusCode::NOT_FOUND, &format!("cannot delete {path}: no such file")));
        }
    }
    for (path, bytes) in adds {
        files.insert(path, bytes);
    }
    let message = header["summary"].as_str().unwrap_or_default().to_string();
    let sha = hex::encode(sha1::Sha1::digest(format!("{}{}{}", head.sha, message, repo.commits.len()).as_bytes()));
    repo.commits.push(Commit { sha: sha.clone(), parent: Some(head.sha), message, files });
    Ok((id.to_string(), sha))
}

async fn tag(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let id = format!("{owner}/{name}");
    let fault = enter_or_return!(state, "tag", method, &format!("/api/datasets/{id}/tag/{rev}"), headers, true, Some(&id));
    let mut s = state.lock().unwrap();
    let Some(repo) = s.repos.get_mut(&id) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    let Some(target) = repo.commit(&rev).map(|c| c.sha.clone()) else { return error(StatusCode::NOT_FOUND, "Revision not found") };
    let Some(name) = body["tag"].as_str() else { return error(StatusCode::BAD_REQUEST, "tag is required") };
    if repo.tags.contains_key(name) {
        return error(StatusCode::CONFLICT, "Tag already exists");
    }
    repo.tags.insert(name.to_string(), target);
    if let Some(Fault::StatusAfterApply(code)) = fault {
        return error(StatusCode::from_u16(code).unwrap(), "injected fault after the tag was created");
    }
    Json(json!({})).into_response()
}

async fn refs(State(state): State<Shared>, method: Method, headers: HeaderMap, Path((owner, name)): Path<(String, String)>) -> Response {
    let id = format!("{owner}/{name}");
    let _ = enter_or_return!(state, "refs", method, &format!("/api/datasets/{id}/refs"), headers, false, Some(&id));
    let s = state.lock().unwrap();
    let Some(repo) = s.repos.get(&id) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    let tags: Vec<Value> =
        repo.tags.iter().map(|(t, sha)| json!({ "name": t, "ref": format!("refs/tags/{t}"), "targetCommit": sha })).collect();
    Json(json!({
        "branches": [{ "name": "main", "ref": "refs/heads/main", "targetCommit": repo.head().sha }],
        "tags": tags,
        "converts": [],
    }))
    .into_response()
}

fn tree_entries(commit: &Commit, under: &str) -> Vec<Value> {
    let mut dirs = std::collections::BTreeSet::new();
    let mut entries = Vec::new();
    for (path, bytes) in &commit.files {
        if !under.is_empty() && !path.starts_with(&format!("{under}/")) {
            continue;
        }
        let mut parts: Vec<&str> = path.split('/').collect();
        parts.pop();
        for i in 1..=parts.len() {
            dirs.insert(parts[..i].join("/"));
        }
        let mut entry = json!({ "type": "file", "size": bytes.len(), "path": path });
        if is_lfs(path) {
            let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n", sha256(bytes), bytes.len());
            entry["oid"] = json!(git_blob_sha1(pointer.as_bytes()));
            entry["lfs"] = json!({ "oid": sha256(bytes), "size": bytes.len(), "pointerSize": pointer.len() });
        } else {
            entry["oid"] = json!(git_blob_sha1(bytes));
        }
        entries.push(entry);
    }
    let mut all: Vec<Value> = dirs.into_iter().map(|d| json!({ "type": "directory", "oid": "0".repeat(40), "path": d })).collect();
    all.extend(entries);
    all
}

async fn tree(
    state: State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
    q: Query<BTreeMap<String, String>>,
) -> Response {
    tree_under(state, method, headers, Path((owner, name, rev, String::new())), q).await
}

async fn tree_under(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev, under)): Path<(String, String, String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let id = format!("{owner}/{name}");
    let logged = format!("/api/datasets/{id}/tree/{rev}/{under}");
    let page = tree_in(state.clone(), method, headers, &id, &logged, &rev, &under).await;
    paged(&state, page, &format!("/api/datasets/{id}/tree/{rev}"), q.get("cursor")).await
}

/// A whole listing cut to the page `cursor` names, with a `Link` to the next, when
/// `HubState::tree_page` is set (as the Hub pages, by an opaque cursor in an absolute URL).
async fn paged(state: &Shared, listing: Response, route: &str, cursor: Option<&String>) -> Response {
    let (page, origin) = {
        let s = state.lock().unwrap();
        (s.tree_page, s.next_page_origin.clone().unwrap_or_else(|| s.url.clone()))
    };
    let Some(page) = page.filter(|_| listing.status() == StatusCode::OK) else { return listing };
    let body = axum::body::to_bytes(listing.into_body(), usize::MAX).await.unwrap();
    let all: Vec<Value> = serde_json::from_slice(&body).unwrap();
    let start: usize = cursor.map_or(0, |c| c.parse().unwrap());
    let end = (start + page).min(all.len());
    let mut response = Json(Value::Array(all[start..end].to_vec())).into_response();
    if end < all.len() {
        let link = format!("<{origin}{route}?recursive=true&cursor={end}>; rel=\"next\"");
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

async fn model_tree(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
    Query(_q): Query<BTreeMap<String, String>>,
) -> Response {
    let id = format!("{owner}/{name}");
    tree_in(state, method, headers, &model_key(&id), &format!("/api/models/{id}/tree/{rev}"), &rev, "").await
}

async fn tree_in(state: Shared, method: Method, headers: HeaderMap, key: &str, logged: &str, rev: &str, under: &str) -> Response {
    let _ = enter_or_return!(state, "tree", method, logged, headers, false, Some(key));
    let s = state.lock().unwrap();
    let Some(repo) = s.repos.get(key) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    let Some(commit) = repo.commit(rev) else { return error(StatusCode::NOT_FOUND, "Revision not found") };
    Json(Value::Array(tree_entries(commit, under.trim_matches('/')))).into_response()
}

async fn resolve(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev, path)): Path<(String, String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    resolve_in(state, method, headers, &id, &format!("/datasets/{id}/resolve/{rev}/{path}"), &rev, &path).await
}

async fn model_resolve(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev, path)): Path<(String, String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    resolve_in(state, method, headers, &model_key(&id), &format!("/{id}/resolve/{rev}/{path}"), &rev, &path).await
}

async fn resolve_in(state: Shared, method: Method, headers: HeaderMap, key: &str, logged: &str, rev: &str, path: &str) -> Response {
    let fault = enter_or_return!(state, "resolve", method, logged, headers, false, Some(key));
    let mut s = state.lock().unwrap();
    let pad = match fault {
        Some(Fault::Pad { bytes, announced }) if method == Method::GET => Some((bytes, announced)),
        Some(f @ Fault::Pad { .. }) => {
            s.faults.insert(0, ("resolve".to_string(), f));
            None
        }
        _ => None,
    };
    let Some(repo) = s.repos.get(key) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    let Some(commit) = repo.commit(rev) else { return error(StatusCode::NOT_FOUND, "Revision not found") };
    let Some(bytes) = commit.files.get(path) else {
        return (StatusCode::NOT_FOUND, [("x-error-code", "EntryNotFound")], "Entry not found").into_response();
    };
    let mut response = Response::builder()
        .status(200)
        .header("x-repo-commit", &commit.sha)
        .header("content-length", bytes.len())
        .header("content-type", "application/octet-stream");
    if is_lfs(path) {
        let digest = s.stale_etags.get(&(key.to_string(), path.to_string())).cloned().unwrap_or_else(|| sha256(bytes));
        response = response
            .header("etag", format!("\"{digest}\""))
            .header("x-linked-etag", format!("\"{digest}\""))
            .header("x-linked-size", bytes.len());
    } else {
        response = response.header("etag", format!("\"{}\"", git_blob_sha1(bytes)));
    }
    if let Some((extra, announced)) = pad {
        let mut padded = bytes.clone();
        padded.resize(bytes.len() + extra, b' ');
        let response =
            Response::builder().status(200).header("x-repo-commit", &commit.sha).header("content-type", "application/octet-stream");
        return if announced {
            response.header("content-length", padded.len()).body(Body::from(padded)).unwrap()
        } else {
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> = padded.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
            response.body(Body::from_stream(futures::stream::iter(chunks))).unwrap()
        };
    }
    let body = if method == Method::HEAD { Body::empty() } else { Body::from(bytes.clone()) };
    response.body(body).unwrap()
}

// After the macros and helpers above, which it uses.
mod access;
pub use access::AccessRequest;
