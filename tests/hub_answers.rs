//! What a Hub's answers can no longer do to this tool: an answer of any length is read under a
//! cap (by its announced length before a byte is read, else once past the cap), an error answer
//! only far enough for its message, a listing in pages is read whole while its next page stays
//! on the Hub's own server, and a lost answer to a tag is confirmed, not retried into a failure.
//! The Hub is the loopback fake (`tests/fake_hub`), which pages its tree as the real Hub does: by
//! an absolute `Link: <...>; rel="next"` URL.

mod common;
#[path = "fake_hub/mod.rs"]
mod fake_hub;

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use common::*;
use fake_hub::{FakeHub, Fault};

const TOKEN: &str = "hf_fakeTOKENvalue0123456789";
const REPO: &str = "bpals-test/cxr14-bpals";
/// `hub::JSON_CAP`: the most of a JSON answer this tool takes from the Hub.
const JSON_CAP: u64 = 64 * 1024 * 1024;

fn published(s: &Scratch, hub: &FakeHub) -> PathBuf {
    let dir = s.path("s1a");
    build(&fixture_s1a(), &dir, &s.cache(), &[]).success();
    publish_to(&hub.url, TOKEN, REPO, &dir, &[]).success();
    dir
}

fn verify_remote(hub: &FakeHub, retries: &str) -> assert_cmd::assert::Assert {
    bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", REPO, "--endpoint", &hub.url, "--retries", retries]).assert()
}

#[test]
fn an_api_answer_past_the_cap_is_refused_whether_or_not_it_announces_its_length() {
    let s = Scratch::new();
    let hub = FakeHub::start(Some(TOKEN));
    published(&s, &hub);
    let sent = hub.state.lock().unwrap().sent.clone();

    // Announced: refused on its Content-Length, before the body is read, and never retried.
    hub.inject("info", Fault::Huge { status: 200, bytes: 10 * 1024 * 1024 * 1024, announced: true });
    let err = stderr(&verify_remote(&hub, "3").failure());
    assert!(err.contains(&hub.url) && err.contains(&format!("/api/datasets/{REPO}/revision/main")), "server and route: {err}");
    assert!(err.contains("is refused: it announces 10737418240 bytes, above the cap of 67108864 bytes"), "{err}");
    assert!(!err.contains("retrying"), "a cap is not a transient failure: {err}");
    assert!(sent.load(Ordering::Relaxed) < JSON_CAP / 4, "read before refusing: {}", sent.load(Ordering::Relaxed));

    // Not announced (chunked): refused once one byte past the cap has arrived.
    sent.store(0, Ordering::Relaxed);
    hub.inject("tree", Fault::Huge { status: 200, bytes: 2 * JSON_CAP, announced: false });
    let err = stderr(&verify_remote(&hub, "0").failure());
    assert!(err.contains("/tree/") && err.contains("is refused: it sent more than that, above the cap of 67108864"), "{err}");
    assert!(sent.load(Ordering::Relaxed) < 2 * JSON_CAP, "the rest was never read");

    // The same Hub, honest again.
    verify_remote(&hub, "0").success();
}

/// hf-hub reads an error answer's whole body for its message; this tool reads 64 KiB of it.
#[test]
fn an_error_answer_is_read_only_as_far_as_its_message() {
    let s = Scratch::new();
    let hub = FakeHub::start(Some(TOKEN));
    published(&s, &hub);
    let sent = hub.state.lock().unwrap().sent.clone();
    hub.inject("tree", Fault::Huge { status: 404, bytes: 8 * 1024 * 1024 * 1024, announced: false });
    let err = stderr(&verify_remote(&hub, "0").failure());
    assert!(err.contains("listing the files of") && err.contains("the Hub answered 404 Not Found"), "{err}");
    let read = sent.load(Ordering::Relaxed);
    assert!(read < JSON_CAP / 4, "an 8 GiB error body stopped after {read} bytes were handed to the socket");
}

#[test]
fn a_listing_in_pages_is_read_whole_and_its_pages_stay_on_the_hub() {
    let s = Scratch::new();
    let hub = FakeHub::start(Some(TOKEN));
    hub.state.lock().unwrap().tree_page = Some(3);
    let dir = published(&s, &hub);
    let pages = hub.count("GET /api/datasets/bpals-test/cxr14-bpals/tree/");
    let a = verify_remote(&hub, "0").success();
    assert!(stdout(&a).contains("ok: release s1a"), "{}", stdout(&a));
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert!(hub.count("GET /api/datasets/bpals-test/cxr14-bpals/tree/") - pages > files / 3, "every page was read");

    // A next page on another server is not followed: the token would go with it.
    let elsewhere = FakeHub::start(None);
    hub.state.lock().unwrap().next_page_origin = Some(elsewhere.url.clone());
    let err = stderr(&verify_remote(&hub, "0").failure());
    assert!(err.contains(&format!("names its next page on another server ({})", elsewhere.url)), "{err}");
    assert_eq!(elsewhere.count(""), 0, "not one request went to the other server");
}

#[test]
fn a_tag_whose_answer_was_lost_is_confirmed_within_the_run() {
    let s = Scratch::new();
    let dir = s.path("s1a");
    build(&fixture_s1a(), &dir, &s.cache(), &[]).success();
    let hub = FakeHub::start(Some(TOKEN));
    hub.inject("tag", Fault::StatusAfterApply(502));
    let a = bin()
        .env("HF_TOKEN", TOKEN)
        .arg("publish")
        .arg(&dir)
        .args(["--repo", REPO, "--endpoint", &hub.url, "--allow-demo", "--retries", "2"])
        .assert()
        .success();
    assert!(stderr(&a).contains("502 Bad Gateway") && stderr(&a).contains("retrying"), "{}", stderr(&a));
    let repo = hub.repo(REPO).unwrap();
    assert_eq!((repo.tags.len(), repo.tags["s1a-v1.0.0"].as_str()), (1, repo.head().sha.as_str()));
}
