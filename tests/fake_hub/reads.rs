//! The fake Hub's routes that read a repo: its info, refs and file tree (in pages, where a
//! test asks for them) and its files' bytes, for dataset and model repos alike.

use super::*;

pub(super) fn info_json(repo: &Repo, id: &str, commit: &Commit) -> Value {
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

pub(super) async fn info(
    state: State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name)): Path<(String, String)>,
) -> Response {
    info_at(state, method, headers, Path((owner, name, "main".into()))).await
}

pub(super) async fn info_at(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    info_in(state, method, headers, &id, &id, &format!("/api/datasets/{id}/revision/{rev}"), &rev).await
}

pub(super) async fn model_info_at(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    info_in(state, method, headers, &model_key(&id), &id, &format!("/api/models/{id}/revision/{rev}"), &rev).await
}

/// A repo's info at `rev`; `key` is where the fake keeps it, `id` what the Hub calls it.
pub(super) async fn info_in(state: Shared, method: Method, headers: HeaderMap, key: &str, id: &str, logged: &str, rev: &str) -> Response {
    let _ = enter_or_return!(state, "info", method, logged, headers, false, Some(key));
    let s = state.lock().unwrap();
    let Some(repo) = s.repos.get(key) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    let Some(commit) = repo.commit(rev) else { return error(StatusCode::NOT_FOUND, "Revision not found") };
    Json(info_json(repo, id, commit)).into_response()
}

pub(super) async fn refs(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name)): Path<(String, String)>,
) -> Response {
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

pub(super) fn tree_entries(commit: &Commit, under: &str) -> Vec<Value> {
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

pub(super) async fn tree(
    state: State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
    q: Query<BTreeMap<String, String>>,
) -> Response {
    tree_under(state, method, headers, Path((owner, name, rev, String::new())), q).await
}

pub(super) async fn tree_under(
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
pub(super) async fn paged(state: &Shared, listing: Response, route: &str, cursor: Option<&String>) -> Response {
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

pub(super) async fn model_tree(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev)): Path<(String, String, String)>,
    Query(_q): Query<BTreeMap<String, String>>,
) -> Response {
    let id = format!("{owner}/{name}");
    tree_in(state, method, headers, &model_key(&id), &format!("/api/models/{id}/tree/{rev}"), &rev, "").await
}

pub(super) async fn tree_in(
    state: Shared,
    method: Method,
    headers: HeaderMap,
    key: &str,
    logged: &str,
    rev: &str,
    under: &str,
) -> Response {
    let _ = enter_or_return!(state, "tree", method, logged, headers, false, Some(key));
    let s = state.lock().unwrap();
    let Some(repo) = s.repos.get(key) else { return error(StatusCode::NOT_FOUND, "Repository not found") };
    let Some(commit) = repo.commit(rev) else { return error(StatusCode::NOT_FOUND, "Revision not found") };
    Json(Value::Array(tree_entries(commit, under.trim_matches('/')))).into_response()
}

pub(super) async fn resolve(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev, path)): Path<(String, String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    resolve_in(state, method, headers, &id, &format!("/datasets/{id}/resolve/{rev}/{path}"), &rev, &path).await
}

pub(super) async fn model_resolve(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, rev, path)): Path<(String, String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    resolve_in(state, method, headers, &model_key(&id), &format!("/{id}/resolve/{rev}/{path}"), &rev, &path).await
}

pub(super) async fn resolve_in(
    state: Shared,
    method: Method,
    headers: HeaderMap,
    key: &str,
    logged: &str,
    rev: &str,
    path: &str,
) -> Response {
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
