//! The Hub's gated-repo access requests, from the owner's side: list them by status, accept,
//! reject or return one to pending, and grant access to a user who never asked.
//!
//! hf-hub 1.0 has no calls for these, so they go through this tool's own bounded client to the
//! routes the Hub's own Python client uses (`/api/datasets/ID/user-access-request/...`). Each
//! call sets a state, so each is retried on 429 (after its Retry-After), 5xx and dropped
//! connections; when a retry is refused because the first attempt already set the state, a
//! listing confirms it.

use reqwest::Method;
use serde::Deserialize;

use super::http::{Answer, HubHttp};
use super::{endpoint_or_default, token, HubError, RepoRef};

/// Where a user's access request stands on a gated repo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    Pending,
    Accepted,
    Rejected,
}

impl RequestStatus {
    pub const ALL: [RequestStatus; 3] = [RequestStatus::Pending, RequestStatus::Accepted, RequestStatus::Rejected];

    pub fn name(self) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Accepted => "accepted",
            RequestStatus::Rejected => "rejected",
        }
    }
}

/// One entry of a listing: `{"user": {"user": NAME, ...}, "status": ..., ...}`.
#[derive(Deserialize)]
struct Listed {
    user: ListedUser,
}

#[derive(Deserialize)]
struct ListedUser {
    user: String,
}

/// The owner's side of a gated dataset repo's access requests.
pub struct GatedAccess {
    http: HubHttp,
}

impl GatedAccess {
    /// `endpoint`: --endpoint, else HF_ENDPOINT, else the public Hub. The token comes from the
    /// same places hf-hub reads it; these calls need one with write access to the repo.
    pub fn connect(endpoint: Option<&str>, patience: super::Patience) -> Result<GatedAccess, HubError> {
        Ok(GatedAccess { http: HubHttp::connect(&endpoint_or_default(endpoint), token::value()?, patience)? })
    }

    pub fn endpoint(&self) -> &str {
        self.http.endpoint()
    }

    fn url(&self, repo: &RepoRef, tail: &str) -> reqwest::Url {
        self.http.url(&["api", "datasets", &repo.owner, &repo.name, "user-access-request", tail])
    }

    /// The users whose request has `status`, as the Hub spells their names.
    pub fn list(&self, repo: &RepoRef, status: RequestStatus) -> Result<Vec<String>, HubError> {
        let action = format!("listing the {} access requests of {}", status.name(), repo.id());
        let listed: Vec<Listed> = self.http.get_json(&action, &self.url(repo, status.name()), LISTING_CAP)?;
        Ok(listed.into_iter().map(|l| l.user.user).collect())
    }

    /// Sets `user`'s request to `status` (accepting, rejecting, or returning it to pending).
    pub fn handle(&self, repo: &RepoRef, user: &str, status: RequestStatus, reason: Option<&str>) -> Result<(), HubError> {
        let mut body = serde_json::json!({ "user": user, "status": status.name() });
        if let Some(reason) = reason {
            body["rejectionReason"] = reason.into();
        }
        let action = format!("setting {user}'s access request to {} on {}", status.name(), repo.id());
        let done = self.http.send(&action, Method::POST, &self.url(repo, "handle"), Some(&body), LISTING_CAP);
        self.confirm(repo, user, status, done)
    }

    /// Gives `user` access without a request of theirs.
    pub fn grant(&self, repo: &RepoRef, user: &str) -> Result<(), HubError> {
        let body = serde_json::json!({ "user": user });
        let action = format!("granting {user} access to {}", repo.id());
        let done = self.http.send(&action, Method::POST, &self.url(repo, "grant"), Some(&body), LISTING_CAP);
        self.confirm(repo, user, RequestStatus::Accepted, done)
    }

    /// The Hub refuses to set a status a request already has (400, 404 or 409, by route). After
    /// a retry whose first attempt was applied, that refusal means the work is done: it is
    /// taken as success when `user` is listed under `status`.
    fn confirm(&self, repo: &RepoRef, user: &str, status: RequestStatus, done: Result<Answer, HubError>) -> Result<(), HubError> {
        match done {
            Ok(_) => Ok(()),
            Err(HubError::Status { status: 400 | 404 | 409, .. })
                if self.list(repo, status)?.iter().any(|u| u.eq_ignore_ascii_case(user)) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// The longest answer an access call takes: a listing of tens of thousands of users is a few
/// MiB.
pub const LISTING_CAP: u64 = 32 * 1024 * 1024;
