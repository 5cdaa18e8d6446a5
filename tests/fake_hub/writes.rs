//! The fake Hub's routes that change a repo: create it, set its gating, and commit and tag
//! (the preupload and LFS batch calls a commit starts with).

use super::*;

pub(super) async fn create_repo(State(state): State<Shared>, method: Method, headers: HeaderMap, Json(body): Json<Value>) -> Response {
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

pub(super) async fn settings(
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

pub(super) async fn preupload(
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

pub(super) async fn lfs_batch(
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

pub(super) async fn commit(
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
pub(super) fn apply_commit(
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

pub(super) async fn tag(
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
