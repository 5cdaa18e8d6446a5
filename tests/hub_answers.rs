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

/// The tool run as a user would, under a 6 GiB address-space limit, killed if it outlives
/// `limit`: its output and how long it took.
fn bounded_run(args: &[&str], limit: std::time::Duration) -> (std::process::Output, std::time::Duration) {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"));
    command.env("HF_TOKEN", TOKEN).args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let six_gib = 6 << 30;
            let limit = libc::rlimit { rlim_cur: six_gib, rlim_max: six_gib };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = std::time::Instant::now();
    let mut child = command.spawn().unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    (output, started.elapsed())
}

/// The largest resident size, in MiB, of any child this test process has waited for: an upper
/// bound on each one's.
fn peak_child_mib() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) }, 0);
    usage.ru_maxrss / 1024
}

/// hf-hub reads each answer of a commit whole (preupload, LFS batch, the commit's own) and the
/// whole body of an error. Through the answer guard each is cut once past the cap, the error
/// names the server, the route and the cap, and hf-hub's retries end there.
#[test]
fn hf_hubs_own_answers_are_cut_past_the_cap_and_not_retried() {
    let s = Scratch::new();
    let dir = s.path("s1a");
    build(&fixture_s1a(), &dir, &s.cache(), &[]).success();
    let dir = dir.to_str().unwrap();
    // hf-hub retries a 5xx without reading its body, and reads the last one's whole.
    let routes = [
        ("preupload", 200, "3", "POST /api/datasets/bpals-test/cxr14-bpals/preupload/main"),
        ("lfs", 200, "3", "POST /datasets/bpals-test/cxr14-bpals.git/info/lfs/objects/batch"),
        ("commit", 200, "3", "POST /api/datasets/bpals-test/cxr14-bpals/commit/main"),
        ("preupload", 500, "0", "POST /api/datasets/bpals-test/cxr14-bpals/preupload/main"),
    ];
    for (route, status, retries, request) in routes {
        let hub = FakeHub::start(Some(TOKEN));
        let sent = hub.state.lock().unwrap().sent.clone();
        hub.inject(route, Fault::Huge { status, bytes: 4 * JSON_CAP, announced: false });
        let args = ["publish", dir, "--repo", REPO, "--endpoint", &hub.url, "--allow-demo", "--retries", retries];
        let (output, took) = bounded_run(&args, std::time::Duration::from_secs(120));
        let err = String::from_utf8_lossy(&output.stderr);
        eprintln!("{route} {status}: refused after {took:?}, {} bytes sent: {err}", sent.load(Ordering::Relaxed));
        assert!(!output.status.success(), "{route}: {err}");
        assert!(err.contains(&hub.url) && err.contains("is refused: it sent more than that, above the cap of 67108864"), "{route}: {err}");
        assert!(sent.load(Ordering::Relaxed) < 2 * JSON_CAP, "{route}: {} bytes sent", sent.load(Ordering::Relaxed));
        assert_eq!(hub.count(request), 1, "{route} {status}: a cap is not retried");
        assert_eq!(hub.repo(REPO).map_or(0, |r| r.commits.len()), 1, "{route}: nothing committed");
        assert!(!err.contains(TOKEN));
    }
    eprintln!("the largest resident size of a command: {} MiB", peak_child_mib());
    assert!(peak_child_mib() < 512, "a command took {} MiB resident", peak_child_mib());
}

/// A Hub that sends one byte a second never trips a read's own timeout; the call's deadline
/// (retries included) ends it, whether the tool or hf-hub reads the answer.
#[test]
fn a_dripping_hub_is_cut_at_the_deadline() {
    let s = Scratch::new();
    let hub = FakeHub::start(Some(TOKEN));
    let dir = published(&s, &hub);
    let drip = Fault::Drip { status: 200, every: std::time::Duration::from_secs(1) };
    let limit = std::time::Duration::from_secs(60);

    // The tool's own client (verify --remote reads the repo's info).
    hub.inject("info", drip.clone());
    let args = ["verify", "--remote", REPO, "--endpoint", &hub.url, "--retries", "3", "--timeout", "5", "--deadline", "3"];
    let (output, took) = bounded_run(&args, limit);
    let err = String::from_utf8_lossy(&output.stderr);
    eprintln!("cut after {took:?}: {err}");
    assert!(!output.status.success() && took.as_secs() < 12, "{took:?}: {err}");
    assert!(
        err.contains(&format!("{} was still answering /api/datasets/{REPO}", hub.url)) && err.contains("at the deadline, 3 s"),
        "{err}"
    );

    // hf-hub's (a commit to a new repo starts with the preupload call).
    hub.inject("preupload", drip);
    let dir = dir.to_str().unwrap();
    let args = [
        "publish",
        dir,
        "--repo",
        "bpals-test/second",
        "--endpoint",
        &hub.url,
        "--allow-demo",
        "--retries",
        "3",
        "--timeout",
        "5",
        "--deadline",
        "3",
    ];
    let (output, took) = bounded_run(&args, limit);
    let err = String::from_utf8_lossy(&output.stderr);
    eprintln!("cut after {took:?}: {err}");
    assert!(!output.status.success() && took.as_secs() < 12, "{took:?}: {err}");
    assert!(err.contains("committing to") && err.contains("was still answering") && err.contains("at the deadline, 3 s"), "{err}");
}
