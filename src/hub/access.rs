//! The Hub's gated-repo access requests, from the owner's side: list them by status, accept,
//! reject or return one to pending, and grant access to a user who never asked.
//!
//! hf-hub 1.0 has no calls for these, so this is plain blocking reqwest against the routes the
//! Hub's own Python client uses (`/api/datasets/ID/user-access-request/...`). Each call sets a
//! state, so each is retried on 429 (after its Retry-After), 5xx and dropped connections; when a
//! retry is refused because the first attempt already set the state, a listing confirms it.

use std::time::Duration;

use serde::Deserialize;

use super::retry::{self, Backoff};
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
    client: reqwest::blocking::Client,
    endpoint: String,
    retries: usize,
    /// Read once, from where hf-hub reads it.
    token: Option<String>,
}

/// The first wait after a transient failure; it doubles per attempt, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// Attempts after the first when the caller names none.
pub const DEFAULT_RETRIES: usize = 5;

impl GatedAccess {
    /// `endpoint`: --endpoint, else HF_ENDPOINT, else the public Hub. The token comes from the
    /// same places hf-hub reads it; these calls need one with write access to the repo.
    pub fn connect(endpoint: Option<&str>, retries: Option<usize>, stall: Duration) -> Result<GatedAccess, HubError> {
        let client = reqwest::blocking::Client::builder()
            .user_agent(format!("{}/{}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
            .connect_timeout(stall)
            .timeout(stall)
            .build()
            .map_err(|e| HubError::Protocol(format!("building the HTTP client: {e}")))?;
        Ok(GatedAccess {
            client,
            endpoint: endpoint_or_default(endpoint),
            retries: retries.unwrap_or(DEFAULT_RETRIES),
            token: token::value()?,
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn url(&self, repo: &RepoRef, tail: &str) -> String {
        format!("{}/api/datasets/{}/user-access-request/{tail}", self.endpoint, repo.id())
    }

    /// The users whose request has `status`, as the Hub spells their names.
    pub fn list(&self, repo: &RepoRef, status: RequestStatus) -> Result<Vec<String>, HubError> {
        let action = format!("listing the {} access requests of {}", status.name(), repo.id());
        let body = self.send(&action, || self.client.get(self.url(repo, status.name())))?;
        let listed: Vec<Listed> = serde_json::from_str(&body)
            .map_err(|e| HubError::Protocol(format!("{action}: the Hub's answer is not a list of requests: {e}")))?;
        Ok(listed.into_iter().map(|l| l.user.user).collect())
    }

    /// Sets `user`'s request to `status` (accepting, rejecting, or returning it to pending).
    pub fn handle(&self, repo: &RepoRef, user: &str, status: RequestStatus, reason: Option<&str>) -> Result<(), HubError> {
        let mut body = serde_json::json!({ "user": user, "status": status.name() });
        if let Some(reason) = reason {
            body["rejectionReason"] = reason.into();
        }
        let action = format!("setting {user}'s access request to {} on {}", status.name(), repo.id());
        let done = self.send(&action, || self.client.post(self.url(repo, "handle")).json(&body));
        self.confirm(repo, user, status, done)
    }

    /// Gives `user` access without a request of theirs.
    pub fn grant(&self, repo: &RepoRef, user: &str) -> Result<(), HubError> {
        let body = serde_json::json!({ "user": user });
        let action = format!("granting {user} access to {}", repo.id());
        let done = self.send(&action, || self.client.post(self.url(repo, "grant")).json(&body));
        self.confirm(repo, user, RequestStatus::Accepted, done)
    }

    /// The Hub refuses to set a status a request already has (400, 404 or 409, by route). After
    /// a retry whose first attempt was applied, that refusal means the work is done: it is
    /// taken as success when `user` is listed under `status`.
    fn confirm(&self, repo: &RepoRef, user: &str, status: RequestStatus, done: Result<String, HubError>) -> Result<(), HubError> {
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

    /// Sends with the token, retrying transient failures; the body of a 2xx answer.
    fn send(&self, action: &str, request: impl Fn() -> reqwest::blocking::RequestBuilder) -> Result<String, HubError> {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF, MAX_BACKOFF * 4);
        for attempt in 0..=self.retries {
            let mut req = request();
            if let Some(token) = &self.token {
                req = req.bearer_auth(token);
            }
            let last = attempt == self.retries;
            let answer = req.send().map_err(|e| HubError::Protocol(token::redact(&format!("{action}: {e}")))).and_then(|r| {
                let (status, retry_after) = (r.status(), retry::retry_after(r.headers()));
                self.capped_text(r, action).map(|text| (status, retry_after, text))
            });
            let (retry_after, failure) = match answer {
                Ok((status, _, text)) if status.is_success() => return Ok(text),
                Ok((status, retry_after, text)) => {
                    let transient = retry::is_transient(status);
                    let failure = HubError::Status {
                        action: action.to_string(),
                        status: status.as_u16(),
                        message: token::redact(&server_message(&text)),
                    };
                    if !transient || last {
                        return Err(failure);
                    }
                    (retry_after, failure)
                }
                Err(failure @ HubError::TooLarge { .. }) => return Err(failure),
                Err(failure) => {
                    if last {
                        return Err(failure);
                    }
                    (None, failure)
                }
            };
            let pause = backoff.pause(retry_after);
            eprintln!("  {failure}; retrying in {:.1} s ({}/{})", pause.as_secs_f64(), attempt + 1, self.retries);
            std::thread::sleep(pause);
        }
        unreachable!("the last attempt returns")
    }
}

impl GatedAccess {
    /// An answer's text, refused above [`LISTING_CAP`]: by its `Content-Length` before a byte
    /// is read, else once more than the cap has arrived.
    fn capped_text(&self, response: reqwest::blocking::Response, action: &str) -> Result<String, HubError> {
        use std::io::Read;
        let route = response.url().path().to_string();
        let too_large = |what: String| HubError::TooLarge { server: self.endpoint.clone(), route: route.clone(), cap: LISTING_CAP, what };
        if let Some(n) = response.content_length().filter(|&n| n > LISTING_CAP) {
            return Err(too_large(format!("the answer announces {n} bytes")));
        }
        let mut bytes = Vec::new();
        response
            .take(LISTING_CAP + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| HubError::Protocol(token::redact(&format!("{action}: reading the answer: {e}"))))?;
        if bytes.len() as u64 > LISTING_CAP {
            return Err(too_large("the answer is longer".to_string()));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// The longest answer an access call takes: a listing of tens of thousands of users is a few
/// MiB.
pub const LISTING_CAP: u64 = 32 * 1024 * 1024;

/// The Hub's `{"error": ...}` message, else the body's first line, kept short.
fn server_message(body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.lines().next().unwrap_or("").to_string());
    message.chars().take(300).collect()
}
