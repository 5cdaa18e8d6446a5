//! How this tool retries an HTTP call it makes without hf-hub (the Hub's access requests, an
//! OpenAI-compatible server): which answers are worth another try, and how long to wait.

use std::time::Duration;

/// 429 and 5xx: the server may answer differently in a moment.
pub fn is_transient(status: reqwest::StatusCode) -> bool {
    status.as_u16() == 429 || status.is_server_error()
}

/// The answer's `Retry-After`, in seconds.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()).map(Duration::from_secs)
}

/// Waits between attempts: doubling from `first` up to `max`, or what the server asked for
/// (`Retry-After`), up to `retry_after_cap`.
pub struct Backoff {
    next: Duration,
    max: Duration,
    retry_after_cap: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration, retry_after_cap: Duration) -> Backoff {
        Backoff { next: first, max, retry_after_cap }
    }

    /// The pause before the next attempt; the backoff doubles for the one after.
    pub fn pause(&mut self, retry_after: Option<Duration>) -> Duration {
        let pause = retry_after.unwrap_or(self.next).min(self.retry_after_cap);
        self.next = (self.next * 2).min(self.max);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_its_cap_and_retry_after_is_honoured_up_to_its_own() {
        let mut b = Backoff::new(Duration::from_millis(250), Duration::from_secs(1), Duration::from_secs(4));
        let waits: Vec<u128> = (0..4).map(|_| b.pause(None).as_millis()).collect();
        assert_eq!(waits, [250, 500, 1000, 1000]);
        assert_eq!(b.pause(Some(Duration::from_secs(3))), Duration::from_secs(3));
        assert_eq!(b.pause(Some(Duration::from_secs(60))), Duration::from_secs(4));
        assert!(is_transient(reqwest::StatusCode::TOO_MANY_REQUESTS) && is_transient(reqwest::StatusCode::BAD_GATEWAY));
        assert!(!is_transient(reqwest::StatusCode::NOT_FOUND));
    }
}
