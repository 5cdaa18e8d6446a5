//! The Hub's HTTP API as this tool calls it itself: every answer read under a cap, transient
//! failures retried, the token sent to the Hub's own origin only and redacted from every error.
//!
//! hf-hub 1.0 reads each answer whole (its JSON, and the text of every error answer), and
//! follows a listing's `Link: rel="next"` to any host with the token attached. So every call
//! whose answer a broken or hostile Hub could make endless goes through here: repo info, tree
//! listings, refs, repo creation, settings, tags, file downloads and access requests. hf-hub
//! keeps what it is for: the commit (its upload protocol), file metadata (a HEAD, no body) and
//! model snapshots (the cache layout `hf download` shares).

use std::io::Read;
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

use super::retry::{self, Backoff};
use super::{token, HubError, Patience};

/// The longest JSON answer taken from the Hub (repo info, one listing with all its pages, refs),
/// and the ceiling for a release's small JSON files (manifest, lock, signature, provenance): far
/// above any real one (a release repo holds a few dozen files).
pub const JSON_CAP: u64 = 64 * 1024 * 1024;
/// The most of an error answer read for its message.
const ERROR_CAP: u64 = 64 * 1024;
/// Pages of one listing followed at most (the Hub pages a tree by 1,000 entries).
const MAX_PAGES: usize = 10_000;

/// The first wait after a transient failure; it doubles per attempt, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// Attempts after the first when the caller names none.
pub const DEFAULT_RETRIES: usize = 5;

/// One Hub, called with one token.
pub struct HubHttp {
    client: Client,
    endpoint: Url,
    retries: usize,
    stall: Duration,
    deadline: Duration,
    token: Option<String>,
}

/// A 2xx answer, read whole under its cap.
pub struct Answer {
    pub body: Vec<u8>,
    /// The `Link: <...>; rel="next"` of a paged listing.
    next: Option<String>,
}

impl HubHttp {
    /// `endpoint` without a trailing slash; `token` as [`token::value`] read it. A request that
    /// connects or receives nothing for `patience.stall` fails (and is retried); a call fails
    /// once it has taken `patience.deadline`, retries included (a download gets more, for its
    /// size: [`super::transfer_budget`]).
    pub fn connect(endpoint: &str, token: Option<String>, patience: Patience) -> Result<HubHttp, HubError> {
        let endpoint = Url::parse(&format!("{endpoint}/"))
            .map_err(|e| HubError::Protocol(format!("the Hub endpoint {endpoint:?} is not a URL: {e}")))?;
        let stall = patience.stall;
        let client = Client::builder()
            .user_agent(format!("{}/{}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
            .connect_timeout(stall)
            .timeout(stall)
            // A renamed repo answers with a redirect; reqwest drops the token on another host.
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| HubError::Protocol(format!("building the HTTP client: {e}")))?;
        let retries = patience.retries.unwrap_or(DEFAULT_RETRIES);
        Ok(HubHttp { client, endpoint, retries, stall, deadline: patience.deadline, token })
    }

    /// The endpoint as the user gave it, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str().trim_end_matches('/')
    }

    /// The endpoint's URL with `segments` appended, each percent-encoded as one segment (a
    /// revision like `refs/pr/1` stays one).
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.endpoint.clone();
        url.path_segments_mut().expect("an http(s) endpoint has a path").pop_if_empty().extend(segments);
        url
    }

    /// GET `url` and parse its JSON, refused above `cap`.
    pub fn get_json<T: DeserializeOwned>(&self, action: &str, url: &Url, cap: u64) -> Result<T, HubError> {
        let answer = self.send(action, Method::GET, url, None, cap)?;
        parse(action, &answer.body)
    }

    /// GET a listing and every page its `Link` headers name, all pages together under `cap`.
    pub fn get_pages<T: DeserializeOwned>(&self, action: &str, first: &Url, cap: u64) -> Result<Vec<T>, HubError> {
        let (mut items, mut url, mut left) = (Vec::new(), first.clone(), cap);
        for _ in 0..MAX_PAGES {
            let answer = self.send(action, Method::GET, &url, None, left)?;
            left -= answer.body.len() as u64;
            items.extend(parse::<Vec<T>>(action, &answer.body)?);
            match answer.next {
                None => return Ok(items),
                Some(next) => url = self.same_origin(action, &next)?,
            }
        }
        Err(HubError::Protocol(format!("{action}: the Hub's listing runs past {MAX_PAGES} pages")))
    }

    /// A page link is followed only on the Hub's own origin: the token goes with it. The public
    /// Hub answers under both of its names, so either stands for the other.
    fn same_origin(&self, action: &str, link: &str) -> Result<Url, HubError> {
        let url = self.endpoint.join(link).map_err(|e| HubError::Protocol(format!("{action}: the next page {link:?}: {e}")))?;
        let public = |u: &Url| u.scheme() == "https" && matches!(u.host_str(), Some("huggingface.co" | "hf.co")) && u.port().is_none();
        if url.origin() != self.endpoint.origin() && !(public(&url) && public(&self.endpoint)) {
            return Err(HubError::Protocol(format!(
                "{action}: the Hub names its next page on another server ({}); not followed, the token would go with it",
                url.origin().ascii_serialization()
            )));
        }
        Ok(url)
    }

    /// Sends with the token, retrying transient failures (429, 5xx, a dropped or stalled
    /// connection); the body of a 2xx answer, refused above `cap`. A refusal names the server,
    /// the route and the cap; an error answer's message is read up to [`ERROR_CAP`].
    pub fn send(&self, action: &str, method: Method, url: &Url, body: Option<&serde_json::Value>, cap: u64) -> Result<Answer, HubError> {
        let until = Until::after(self.deadline);
        self.with_retries(action, method, url, body, until, |response| {
            let next = next_link(&response);
            self.read_capped(response, action, cap, until).map(|body| Answer { body, next })
        })
    }

    /// Streams a GET's body through `sink`, refused above `cap`; the bytes it passed. `route`
    /// names the file in a refusal. Failures before the first byte are retried; one after it is
    /// not (the sink has the bytes).
    pub fn stream(
        &self,
        action: &str,
        route: &str,
        url: &Url,
        cap: u64,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, HubError> {
        let until = Until::after(super::transfer_budget(self.deadline, cap));
        let mut response = self.with_retries(action, Method::GET, url, None, until, |response| {
            self.check_announced(&response, route, cap)?;
            Ok(response)
        })?;
        let mut buffer = vec![0u8; 256 * 1024];
        let mut total: u64 = 0;
        loop {
            until.check(|| self.late(action, route, until))?;
            let n =
                response
                    .read(&mut buffer)
                    .map_err(|e| if until.spent() { self.late(action, route, until) } else { self.failed(action, e) })?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
            if total > cap {
                return Err(self.too_large(route, cap, "it sent more than that"));
            }
            sink(&buffer[..n]).map_err(|e| HubError::Protocol(format!("{action}: {e}")))?;
        }
    }

    /// Runs `request` until it is answered with a 2xx that `take` accepts, or a failure that is
    /// not worth another try, or the retries are spent, or `until` has passed.
    fn with_retries<T>(
        &self,
        action: &str,
        method: Method,
        url: &Url,
        body: Option<&serde_json::Value>,
        until: Until,
        take: impl Fn(Response) -> Result<T, HubError>,
    ) -> Result<T, HubError> {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF, MAX_BACKOFF * 4);
        let late = || self.late(action, url.path(), until);
        for attempt in 0..=self.retries {
            until.check(late)?;
            let last = attempt == self.retries;
            // Connecting and each read wait at most what is left of the call.
            let request = self.request(method.clone(), url, body).timeout(self.stall.min(until.left()));
            let (retry_after, failure) = match request.send() {
                Ok(response) if response.status().is_success() => match take(response) {
                    Ok(taken) => return Ok(taken),
                    Err(failure @ (HubError::TooLarge { .. } | HubError::Late { .. })) => return Err(failure),
                    Err(failure) => (None, failure),
                },
                Ok(response) => {
                    let (status, retry_after) = (response.status(), retry::retry_after(response.headers()));
                    let failure = self.status_error(action, response, until);
                    if !(retry::is_transient(status) || status == StatusCode::REQUEST_TIMEOUT) {
                        return Err(failure);
                    }
                    (retry_after, failure)
                }
                Err(_) if until.spent() => return Err(late()),
                Err(e) => (None, self.failed(action, e)),
            };
            if last {
                return Err(failure);
            }
            let pause = backoff.pause(retry_after);
            if pause >= until.left() {
                return Err(failure);
            }
            eprintln!("  {failure}; retrying in {:.1} s ({}/{})", pause.as_secs_f64(), attempt + 1, self.retries);
            std::thread::sleep(pause);
        }
        unreachable!("the last attempt returns")
    }

    fn request(&self, method: Method, url: &Url, body: Option<&serde_json::Value>) -> RequestBuilder {
        let mut request = self.client.request(method, url.clone());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        request
    }

    /// A non-2xx answer as an error: its status and the Hub's message, read under [`ERROR_CAP`]
    /// and before `until`.
    fn status_error(&self, action: &str, response: Response, until: Until) -> HubError {
        let status = response.status().as_u16();
        let header = response.headers().get("x-error-message").and_then(|v| v.to_str().ok()).map(str::to_string);
        // What cannot be read in time is left unsaid: the status says enough.
        let bytes = read_within(response, ERROR_CAP, until).unwrap_or_else(|(partial, _)| partial);
        let message = header.unwrap_or_else(|| server_message(&String::from_utf8_lossy(&bytes)));
        HubError::Status { action: action.to_string(), status, message: token::redact(&message) }
    }

    /// An answer's bytes, refused above `cap`: by its `Content-Length` before a byte is read,
    /// else once more than the cap has arrived; and refused once `until` has passed.
    fn read_capped(&self, response: Response, action: &str, cap: u64, until: Until) -> Result<Vec<u8>, HubError> {
        let route = response.url().path().to_string();
        self.check_announced(&response, &route, cap)?;
        let bytes = read_within(response, cap + 1, until).map_err(|(_, stop)| match stop {
            ReadStop::Late => self.late(action, &route, until),
            ReadStop::Failed(e) => self.failed(action, e),
        })?;
        if bytes.len() as u64 > cap {
            return Err(self.too_large(&route, cap, "it sent more than that"));
        }
        Ok(bytes)
    }

    fn check_announced(&self, response: &Response, route: &str, cap: u64) -> Result<(), HubError> {
        match response.content_length().filter(|&n| n > cap) {
            Some(n) => Err(self.too_large(route, cap, &format!("it announces {n} bytes"))),
            None => Ok(()),
        }
    }

    /// Names the endpoint as the user gave it, and the route as the caller names it.
    fn too_large(&self, route: &str, cap: u64, what: &str) -> HubError {
        HubError::TooLarge { server: self.endpoint().to_string(), route: route.to_string(), cap, what: what.to_string() }
    }

    fn failed(&self, action: &str, error: impl std::fmt::Display) -> HubError {
        HubError::Protocol(token::redact(&format!("{action}: {error}")))
    }

    fn late(&self, action: &str, route: &str, until: Until) -> HubError {
        HubError::Late { action: action.to_string(), server: self.endpoint().to_string(), route: route.to_string(), budget: until.budget }
    }
}

/// When a call must end.
#[derive(Clone, Copy)]
struct Until {
    at: Instant,
    budget: Duration,
}

impl Until {
    fn after(budget: Duration) -> Until {
        Until { at: Instant::now() + budget, budget }
    }
    fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }
    /// Whether the call's time has (all but) run out.
    fn spent(&self) -> bool {
        self.left() < Duration::from_millis(250)
    }
    fn check(&self, late: impl FnOnce() -> HubError) -> Result<(), HubError> {
        if self.left().is_zero() {
            Err(late())
        } else {
            Ok(())
        }
    }
}

/// Why [`read_within`] stopped before the answer's end.
enum ReadStop {
    Late,
    Failed(std::io::Error),
}

/// Up to `limit` bytes of an answer, read until its end or `until`. A server that sends a byte
/// at a time never trips a read's own timeout; this checks the clock between reads.
fn read_within(mut response: Response, limit: u64, until: Until) -> Result<Vec<u8>, (Vec<u8>, ReadStop)> {
    let mut bytes = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    while (bytes.len() as u64) < limit {
        if until.left().is_zero() {
            return Err((bytes, ReadStop::Late));
        }
        let room = buffer.len().min((limit - bytes.len() as u64) as usize);
        match response.read(&mut buffer[..room]) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buffer[..n]),
            // The request's own timeout is what is left of the call: a read that fails as the
            // call's time runs out failed for that.
            Err(_) if until.spent() => return Err((bytes, ReadStop::Late)),
            Err(e) => return Err((bytes, ReadStop::Failed(e))),
        }
    }
    Ok(bytes)
}

fn parse<T: DeserializeOwned>(action: &str, body: &[u8]) -> Result<T, HubError> {
    serde_json::from_slice(body).map_err(|e| HubError::Protocol(format!("{action}: the Hub's answer is not what its API returns: {e}")))
}

/// `Link: <URL>; rel="next"`, as the Hub pages its listings.
fn next_link(response: &Response) -> Option<String> {
    let link = response.headers().get(reqwest::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        is_next.then(|| target.trim().trim_start_matches('<').trim_end_matches('>').to_string())
    })
}

/// The Hub's `{"error": ...}` message, else the body's first line, kept short.
fn server_message(body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.lines().next().unwrap_or("").to_string());
    message.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patience() -> Patience {
        Patience { retries: Some(0), stall: Duration::from_secs(1), deadline: Duration::from_secs(5) }
    }

    #[test]
    fn segments_are_encoded_one_by_one() {
        let http = HubHttp::connect("http://127.0.0.1:9/hub", None, patience()).unwrap();
        let url = http.url(&["api", "datasets", "o", "n", "tree", "refs/pr/1"]);
        assert_eq!(url.as_str(), "http://127.0.0.1:9/hub/api/datasets/o/n/tree/refs%2Fpr%2F1");
        let mut segments = vec!["datasets", "o", "n", "resolve", "main"];
        segments.extend("data/a b.parquet".split('/'));
        assert_eq!(http.url(&segments).path(), "/hub/datasets/o/n/resolve/main/data/a%20b.parquet");
    }

    #[test]
    fn a_next_page_on_another_server_is_not_followed() {
        let http = HubHttp::connect("http://127.0.0.1:9", None, patience()).unwrap();
        assert!(http.same_origin("listing", "/api/datasets/o/n/tree/main?cursor=x").is_ok());
        assert!(http.same_origin("listing", "http://127.0.0.1:9/api/x?cursor=y").is_ok());
        let err = http.same_origin("listing", "http://evil.example/api/x").unwrap_err().to_string();
        assert!(err.contains("another server (http://evil.example)") && err.contains("not followed"), "{err}");
        assert!(http.same_origin("listing", "http://127.0.0.1:10/x").is_err(), "another port is another origin");
        let public = HubHttp::connect("https://hf.co", None, patience()).unwrap();
        assert!(public.same_origin("listing", "https://huggingface.co/api/x?cursor=y").is_ok(), "the public Hub's two names");
        assert!(public.same_origin("listing", "http://huggingface.co/api/x").is_err(), "not over plain HTTP");
    }
}
