//! The gated-repo access-request routes of the fake Hub, as the owner sees them:
//! list by status, handle (accept, reject, back to pending) and grant.

use super::*;

/// One user's request on one repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRequest {
    /// The username as the user spells it.
    pub user: String,
    /// "pending", "accepted" or "rejected".
    pub status: String,
}

pub(super) fn routes(router: Router<Shared>) -> Router<Shared> {
    router
        // GET .../pending|accepted|rejected lists; POST .../handle|grant changes.
        .route("/api/datasets/{owner}/{name}/user-access-request/{status}", get(list).post(change))
}

impl FakeHub {
    /// A dataset repo with manual gating, as `publish` leaves a commercial release.
    pub fn create_gated(&self, id: &str) {
        self.create_with(id, Some("manual"));
    }

    /// A public dataset repo: no access requests.
    pub fn create_public(&self, id: &str) {
        self.create_with(id, None);
    }

    fn create_with(&self, id: &str, gated: Option<&str>) {
        let initial = Commit {
            sha: hex::encode(sha1::Sha1::digest(id.as_bytes())),
            parent: None,
            message: "initial commit".into(),
            files: BTreeMap::new(),
        };
        let repo = Repo { gated: gated.map(str::to_string), commits: vec![initial], ..Default::default() };
        self.state.lock().unwrap().repos.insert(id.to_string(), repo);
    }

    /// A user asks for access through the repo page.
    pub fn request_access(&self, repo: &str, user: &str) {
        let mut s = self.state.lock().unwrap();
        s.access
            .entry(repo.to_string())
            .or_default()
            .insert(user.to_ascii_lowercase(), AccessRequest { user: user.into(), status: "pending".into() });
    }

    /// Sets a request's status directly, as the owner clicking in the web UI would.
    pub fn set_access(&self, repo: &str, user: &str, status: &str) {
        let mut s = self.state.lock().unwrap();
        s.access
            .entry(repo.to_string())
            .or_default()
            .insert(user.to_ascii_lowercase(), AccessRequest { user: user.into(), status: status.into() });
    }

    /// Every user's status on `repo`, by lower-cased username.
    pub fn access(&self, repo: &str) -> BTreeMap<String, String> {
        let s = self.state.lock().unwrap();
        s.access.get(repo).map(|m| m.iter().map(|(k, r)| (k.clone(), r.status.clone())).collect()).unwrap_or_default()
    }
}

/// The repo must exist and be gated, as on the Hub.
fn gated(s: &HubState, id: &str) -> Result<(), Response> {
    match s.repos.get(id) {
        None => Err(error(StatusCode::NOT_FOUND, "Repository not found")),
        Some(r) if r.gated.is_none() => Err(error(StatusCode::BAD_REQUEST, "This repository is not gated")),
        Some(_) => Ok(()),
    }
}

async fn list(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, status)): Path<(String, String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    let fault = enter_or_return!(
        state,
        "access-list",
        method,
        &format!("/api/datasets/{id}/user-access-request/{status}"),
        headers,
        true,
        Some(&id)
    );
    let s = state.lock().unwrap();
    if let Err(r) = gated(&s, &id) {
        return r;
    }
    if !["pending", "accepted", "rejected"].contains(&status.as_str()) {
        return error(StatusCode::BAD_REQUEST, "status must be pending, accepted or rejected");
    }
    let listed: Vec<Value> = s
        .access
        .get(&id)
        .into_iter()
        .flat_map(|m| m.values())
        .filter(|r| r.status == status)
        .map(|r| json!({ "user": { "user": r.user, "fullname": r.user, "email": null }, "status": r.status, "timestamp": "2026-07-20T00:00:00.000Z", "fields": {} }))
        .collect();
    match fault {
        // A listing padded with whitespace: still valid JSON, only longer than any real one.
        Some(Fault::Pad { bytes, .. }) => {
            let mut body = serde_json::to_vec(&listed).unwrap();
            body.resize(body.len() + bytes, b' ');
            ([("content-type", "application/json")], body).into_response()
        }
        _ => Json(listed).into_response(),
    }
}

/// POST `handle` (set a request's status) or `grant` (access without a request).
async fn change(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path((owner, name, action)): Path<(String, String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let id = format!("{owner}/{name}");
    let route = format!("access-{action}");
    let logged = format!("/api/datasets/{id}/user-access-request/{action}");
    let fault = enter_or_return!(state, &route, method, &logged, headers, true, Some(&id));
    let mut s = state.lock().unwrap();
    if let Err(r) = gated(&s, &id) {
        return r;
    }
    let Some(user) = body["user"].as_str() else { return error(StatusCode::BAD_REQUEST, "user is required") };
    let requests = s.access.entry(id).or_default();
    let key = user.to_ascii_lowercase();
    match action.as_str() {
        "handle" => {
            let status = body["status"].as_str().unwrap_or_default();
            if !["pending", "accepted", "rejected"].contains(&status) {
                return error(StatusCode::BAD_REQUEST, "status must be pending, accepted or rejected");
            }
            let Some(request) = requests.get_mut(&key) else {
                return error(StatusCode::NOT_FOUND, "This user has no access request on this repository");
            };
            // As the Hub does: a request cannot be set to the status it has.
            if request.status == status {
                return error(StatusCode::NOT_FOUND, &format!("The user access request is already in the {status} list"));
            }
            request.status = status.to_string();
        }
        "grant" => {
            if requests.get(&key).is_some_and(|r| r.status == "accepted") {
                return error(StatusCode::BAD_REQUEST, "This user already has access to this repository");
            }
            requests.insert(key, AccessRequest { user: user.into(), status: "accepted".into() });
        }
        _ => return error(StatusCode::NOT_FOUND, "no such access-request action"),
    }
    after_apply(fault)
}

/// The change is made; a `StatusAfterApply` fault still answers an error.
fn after_apply(fault: Option<Fault>) -> Response {
    match fault {
        Some(Fault::StatusAfterApply(code)) => error(StatusCode::from_u16(code).unwrap(), "injected fault after the change was made"),
        _ => Json(json!({})).into_response(),
    }
}
