//! `access sync` and `access report` against the loopback fake Hub: paid requests accepted,
//! unpaid left pending, ended and refunded licenses revoked, reruns that change nothing, faults
//! that change nothing either, a ledger whose chain verifies and whose totals match the file.

mod common;
#[path = "fake_hub/mod.rs"]
mod fake_hub;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use fake_hub::{FakeHub, Fault};

const TOKEN: &str = "hf_fakeACCESStoken0123456789";
const REPO: &str = "bpals-test/cxr14-bpals-standard";
const TODAY: &str = "2026-11-23";

/// alice and bob asked and paid; carol asked and did not; erin paid without asking; frank's
/// license ended on 2026-06-01; gina paid, then was refunded.
const PAYMENTS: &str = "\
order_id,hf_username,tier,amount,currency,paid_date
A-1001,alice,standard,1200.00,USD,2026-07-20
A-1002,Bob,standard,1100.00,EUR,2026-08-03
A-1003,erin,enterprise,25000.00,USD,2026-09-30
A-0901,frank,standard,1200.00,USD,2025-06-01
A-1004,gina,standard,1200.00,USD,2026-10-02
A-1005,gina,standard,-1200.00,USD,2026-10-20
";

fn hub_with_requests() -> FakeHub {
    let hub = FakeHub::start(Some(TOKEN));
    hub.create_gated(REPO);
    for user in ["alice", "bob", "carol"] {
        hub.request_access(REPO, user);
    }
    for user in ["frank", "gina", "staff-member"] {
        hub.set_access(REPO, user, "accepted");
    }
    hub
}

/// `access sync specs/s1b.yaml` against the fake, with the token set and the day fixed (to
/// TODAY unless `extra` gives --as-of).
fn sync(hub: &FakeHub, s: &Scratch, payments: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    let today: &[&str] = if extra.contains(&"--as-of") { &[] } else { &["--as-of", TODAY] };
    bin()
        .env("HF_TOKEN", TOKEN)
        .env("HF_HOME", s.path("hf-home"))
        .args(["access", "sync"])
        .arg(spec("s1b.yaml"))
        .arg("--payments")
        .arg(payments)
        .arg("--ledger")
        .arg(s.path("ledger.jsonl"))
        .args(["--repo", REPO, "--endpoint", &hub.url])
        .args(today)
        .args(extra)
        .assert()
}

/// A snapshot of what a person sees, with the scratch folder and the fake's port filtered out.
fn snapshot(s: &Scratch, name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    for (pattern, replacement) in path_filters(s) {
        settings.add_filter(&pattern, replacement);
    }
    settings.add_filter(r"http://127\.0\.0\.1:\d+", "[HUB]");
    settings.bind(|| insta::assert_snapshot!(name, text));
}

fn state_changes(hub: &FakeHub) -> usize {
    hub.count(&format!("POST /api/datasets/{REPO}/user-access-request/"))
}

fn expected_access() -> BTreeMap<String, String> {
    [
        ("alice", "accepted"),
        ("bob", "accepted"),
        ("carol", "pending"),
        ("erin", "accepted"),
        ("frank", "rejected"),
        ("gina", "rejected"),
        ("staff-member", "accepted"),
    ]
    .into_iter()
    .map(|(u, s)| (u.to_string(), s.to_string()))
    .collect()
}

#[test]
fn paid_requests_are_accepted_unpaid_left_pending_ended_and_refunded_revoked_and_a_rerun_changes_nothing() {
    let s = Scratch::new();
    let payments = s.write("payments.csv", PAYMENTS);
    let hub = hub_with_requests();

    let dry = sync(&hub, &s, &payments, &["--dry-run"]).success();
    let plan = stdout(&dry);
    assert!(plan.contains("dry run: 5 change(s) planned"), "{plan}");
    assert_eq!(state_changes(&hub), 0, "a dry run changes nothing");
    assert!(!s.path("ledger.jsonl").exists(), "a dry run writes no ledger");

    let a = sync(&hub, &s, &payments, &[]).success();
    let out = stdout(&a) + &stderr(&a);
    snapshot(&s, "access_sync", &format!("{}--- stderr ---\n{}", stdout(&a), stderr(&a)));
    for line in [
        "accept  alice: standard license, access ends 2027-07-20 (order A-1001)",
        "accept  bob: standard license, access ends 2027-08-03 (order A-1002)",
        "grant   erin: enterprise license, perpetual (order A-1003)",
        "revoke  frank: license ended 2026-06-01 (order A-0901)",
        "revoke  gina: order A-1004 refunded (A-1005)",
        "carol: left pending: no payment on file",
        "staff-member: left accepted: no payment on file",
        "5 change(s) made",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert_eq!(hub.access(REPO), expected_access());
    assert_eq!(state_changes(&hub), 5);
    assert!(!out.contains(TOKEN), "the token is never printed");
    let ledger = std::fs::read_to_string(s.path("ledger.jsonl")).unwrap();
    assert_eq!(ledger.lines().count(), 6, "one line per sale and refund");
    assert!(!ledger.contains(TOKEN));
    assert!(hub.state.lock().unwrap().auth_headers.iter().all(|h| h == &format!("Bearer {TOKEN}")), "every call carries the token");

    let again = sync(&hub, &s, &payments, &[]).success();
    assert!(stdout(&again).contains("added 0 line(s)") && stdout(&again).contains("nothing to change"), "{}", stdout(&again));
    assert_eq!(state_changes(&hub), 5, "a rerun makes no request that changes state");
    assert_eq!(std::fs::read_to_string(s.path("ledger.jsonl")).unwrap(), ledger, "a rerun adds no ledger line");

    // A year on, alice's license has ended; bob's too. erin's is perpetual.
    let later = sync(&hub, &s, &payments, &["--as-of", "2027-09-01"]).success();
    let text = stdout(&later);
    assert!(text.contains("revoke  alice: license ended 2027-07-20") && text.contains("revoke  bob: license ended 2027-08-03"), "{text}");
    assert_eq!(hub.access(REPO)["erin"], "accepted");
}

#[test]
fn the_ledger_verifies_and_its_totals_match_the_payments_file() {
    let s = Scratch::new();
    let payments = s.write("payments.csv", PAYMENTS);
    let hub = hub_with_requests();
    sync(&hub, &s, &payments, &[]).success();

    let report = |extra: &[&str]| bin().args(["access", "report", "--ledger"]).arg(s.path("ledger.jsonl")).args(extra).assert();
    let json: serde_json::Value = serde_json::from_str(&stdout(&report(&["--json"]).success())).unwrap();
    // The same totals, straight from the CSV: (month, currency) -> (net, pledge at 1%).
    let mut expected: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for line in PAYMENTS.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let amount: f64 = f[3].parse().unwrap();
        let pledge = if f[5] >= "2026-07-15" || amount < 0.0 { amount * 0.01 } else { 0.0 };
        let t = expected.entry((f[5][..7].to_string(), f[4].to_string())).or_default();
        t.0 += amount;
        t.1 += pledge;
    }
    let got: BTreeMap<(String, String), (f64, f64)> = json["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let n = |k: &str| t[k].as_str().unwrap().parse::<f64>().unwrap();
            ((t["period"].as_str().unwrap().into(), t["currency"].as_str().unwrap().into()), (n("net"), n("pledge")))
        })
        .collect();
    assert_eq!(got.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
    for (k, (net, pledge)) in &expected {
        assert!((got[k].0 - net).abs() < 1e-9 && (got[k].1 - pledge).abs() < 1e-9, "{k:?}: {:?} against {net}, {pledge}", got[k]);
    }
    // frank's 2025 sale came before the pledge began: 0%. gina's refund takes her pledge back.
    let text = stdout(&report(&["--period", "year"]).success());
    snapshot(&s, "access_report", &text);
    assert!(
        text.contains("chain verified")
            && text.contains("2025     USD      1       0        1200.00         0.00        1200.00         0.00"),
        "{text}"
    );

    // An edited line breaks the chain, and the report says where.
    let ledger = std::fs::read_to_string(s.path("ledger.jsonl")).unwrap();
    std::fs::write(s.path("ledger.jsonl"), ledger.replacen("\"amount\":\"1100.00\"", "\"amount\":\"110.00\"", 1)).unwrap();
    let err = stderr(&report(&[]).failure());
    assert!(err.contains("ledger.jsonl line") && err.contains("hash does not match"), "{err}");
    // And sync refuses to build on it.
    let err = stderr(&sync(&hub, &s, &payments, &[]).failure());
    assert!(err.contains("hash does not match"), "{err}");
}

/// Two syncs at once (a cron job and a person, each with its own export) used to each read the
/// ledger and write it back whole: both said "added 1 line(s)" and the ledger kept one sale. Now
/// the second is refused while the first holds the ledger, naming its pid; run again, it adds
/// its sale, and the ledger holds both, its chain verified.
#[test]
fn two_syncs_at_once_lose_no_sale() {
    let s = Scratch::new();
    let header = PAYMENTS.lines().next().unwrap();
    let one = s.write("one.csv", &format!("{header}\nA-1001,alice,standard,1200.00,USD,2026-07-20\n"));
    let two = s.write("two.csv", &format!("{header}\nA-1002,Bob,standard,1100.00,EUR,2026-08-03\n"));
    let hub = hub_with_requests();
    // The first sync's first listing of access requests takes 4 s: it holds the ledger that long.
    hub.inject("access-list", Fault::Slow(std::time::Duration::from_secs(4)));
    let mut first = std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"));
    first
        .env("HF_TOKEN", TOKEN)
        .env("HF_HOME", s.path("hf-home"))
        .args(["access", "sync"])
        .arg(spec("s1b.yaml"))
        .arg("--payments")
        .arg(&one)
        .arg("--ledger")
        .arg(s.path("ledger.jsonl"))
        .args(["--repo", REPO, "--endpoint", &hub.url, "--as-of", TODAY])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let first = first.spawn().unwrap();
    let lock = s.path(".ledger.jsonl.lock");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&lock).map_or(true, |pid| pid.trim() != first.id().to_string()) {
        assert!(started.elapsed().as_secs() < 30, "the first sync never took the ledger");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let err = stderr(&sync(&hub, &s, &two, &[]).failure());
    assert!(err.contains(&format!("another bpals-release (pid {}) is adding to it", first.id())), "{err}");
    let done = first.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(!lock.exists(), "the lock file goes with the sync");
    sync(&hub, &s, &two, &[]).success();
    let ledger = std::fs::read_to_string(s.path("ledger.jsonl")).unwrap();
    assert!(ledger.contains("\"A-1001\"") && ledger.contains("\"A-1002\"") && ledger.lines().count() == 2, "{ledger}");
    let report = stdout(&bin().args(["access", "report", "--ledger"]).arg(s.path("ledger.jsonl")).assert().success());
    assert!(report.contains("chain verified"), "{report}");
}

/// A link planted at the ledger's lock file (to the ledger itself, or to any other file), or at
/// the ledger's path: the sync is refused naming the link, and no file changes. The lock used to
/// be opened through the link and truncated: the ledger became the syncing process's pid.
#[test]
fn links_at_the_ledger_or_its_lock_are_refused_and_change_nothing() {
    let s = Scratch::new();
    let payments = s.write("payments.csv", PAYMENTS);
    let hub = hub_with_requests();
    sync(&hub, &s, &payments, &[]).success();
    let ledger = std::fs::read_to_string(s.path("ledger.jsonl")).unwrap();
    let canary = s.write("canary.txt", "not the tool's\n");
    let header = PAYMENTS.lines().next().unwrap();
    let more = s.write("more.csv", &format!("{header}\nA-1099,zoe,standard,900.00,USD,2026-11-01\n"));
    let lock = s.path(".ledger.jsonl.lock");
    for target in [s.path("ledger.jsonl"), canary.clone()] {
        std::os::unix::fs::symlink(&target, &lock).unwrap();
        let err = stderr(&sync(&hub, &s, &more, &[]).failure());
        assert!(err.contains(".ledger.jsonl.lock is a symbolic link") && err.contains("remove it yourself"), "{err}");
        std::fs::remove_file(&lock).unwrap();
    }
    std::fs::hard_link(&canary, &lock).unwrap();
    let err = stderr(&sync(&hub, &s, &more, &[]).failure());
    assert!(err.contains("has 2 names"), "{err}");
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(std::fs::read_to_string(s.path("ledger.jsonl")).unwrap(), ledger, "the ledger keeps every line");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "not the tool's\n");

    // The ledger's own path a link: refused, not replaced by a file of its own.
    let elsewhere = s.path("elsewhere.jsonl");
    std::fs::rename(s.path("ledger.jsonl"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, s.path("ledger.jsonl")).unwrap();
    let err = stderr(&sync(&hub, &s, &more, &[]).failure());
    assert!(err.contains("is a symbolic link (to ") && err.contains("name the ledger file itself"), "{err}");
    assert!(std::fs::symlink_metadata(s.path("ledger.jsonl")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), ledger);
    assert!(!lock.exists());
}

#[test]
fn faults_on_every_access_route_leave_the_same_access_as_a_clean_run() {
    let s = Scratch::new();
    let payments = s.write("payments.csv", PAYMENTS);
    let hub = hub_with_requests();
    hub.inject("access-list", Fault::Drop);
    hub.inject("access-list", Fault::Status(503));
    hub.inject("access-handle", Fault::Status(429));
    hub.inject("access-handle", Fault::StatusAfterApply(500));
    hub.inject("access-grant", Fault::StatusAfterApply(502));
    hub.inject("access-handle", Fault::Slow(std::time::Duration::from_millis(300)));
    let a = sync(&hub, &s, &payments, &["--retries", "3"]).success();
    let err = stderr(&a);
    assert!(err.contains("retrying"), "{err}");
    assert!(!err.contains(TOKEN) && !stdout(&a).contains(TOKEN));
    assert_eq!(hub.access(REPO), expected_access());

    // Retries exhausted part-way: it says what was done, and a rerun finishes the job.
    let s2 = Scratch::new();
    let hub2 = hub_with_requests();
    for _ in 0..3 {
        hub2.inject("access-grant", Fault::Status(500));
    }
    let err = stderr(&sync(&hub2, &s2, &payments, &["--retries", "1"]).failure());
    assert!(err.contains("of 5 access changes were made before this one failed; rerun to finish"), "{err}");
    assert!(err.contains("granting erin access") && err.contains("answered 500"), "{err}");
    assert!(s2.path("ledger.jsonl").exists(), "sales are recorded before access changes");
    sync(&hub2, &s2, &payments, &["--retries", "1"]).success();
    assert_eq!(hub2.access(REPO), expected_access());
}

#[test]
fn bad_payment_rows_stop_the_run_before_anything_changes() {
    let hub = hub_with_requests();
    for (row, expected) in [
        ("A-2001,dora,gold,100.00,USD,2026-11-01", "line 2: tier \"gold\" is not one of the spec's tiers"),
        ("A-2001,,standard,100.00,USD,2026-11-01", "line 2: hf_username is empty"),
        ("A-2001,dora,standard,,USD,2026-11-01", "line 2: currency USD is given without an amount"),
        (
            "A-1001,dora,standard,100.00,USD,2026-11-01\nA-1001,dora,standard,100.00,USD,2026-11-02",
            "line 3: order id \"A-1001\" was already used on line 2",
        ),
        ("A-2001,dora,standard,-100.00,USD,2026-11-01", "line 2: refund A-2001 (-100.00 USD) matches no earlier standard sale to dora"),
        ("A-2001,dora,standard,100.00,USD,2026-12-01", "line 2: paid_date 2026-12-01 is after the day judged (2026-11-23)"),
    ] {
        let s = Scratch::new();
        let payments = s.write("payments.csv", &format!("order_id,hf_username,tier,amount,currency,paid_date\n{row}\n"));
        let err = stderr(&sync(&hub, &s, &payments, &[]).failure());
        assert!(err.contains("payments.csv") && err.contains(expected), "{row}: {err}");
        assert_eq!(err.matches(expected).count(), 1, "{row}: the message is said once: {err}");
        assert!(!s.path("ledger.jsonl").exists(), "{row}: no ledger line is written");
    }
    assert_eq!(state_changes(&hub), 0, "no bad file grants anything");
}

#[test]
fn a_trial_spec_or_an_ungated_repo_is_refused() {
    let s = Scratch::new();
    let payments = s.write("payments.csv", PAYMENTS);
    let hub = FakeHub::start(Some(TOKEN));
    let trial = bin()
        .args(["access", "sync"])
        .arg(spec("s1a.yaml"))
        .arg("--payments")
        .arg(&payments)
        .args(["--endpoint", &hub.url])
        .assert()
        .failure();
    assert!(stderr(&trial).contains("release.tier is trial"), "{}", stderr(&trial));
    hub.create_public(REPO);
    let err = stderr(&sync(&hub, &s, &payments, &[]).failure());
    assert!(err.contains("not gated"), "{err}");
}

#[test]
fn a_stripe_export_syncs_like_the_native_file() {
    let s = Scratch::new();
    let stripe = s.write(
        "stripe.csv",
        "id,Created (UTC),Amount,Amount Refunded,Currency,Status,hf_username (metadata),tier (metadata)\n\
         ch_1,2026-07-20 10:11:12,\"1,200.00\",0.00,usd,Paid,alice,standard\n\
         ch_2,2026-08-03 09:00:00,1100.00,0.00,eur,Paid,Bob,standard\n\
         ch_3,2026-08-04 09:00:00,1100.00,0.00,eur,Failed,carol,standard\n\
         ch_4,2026-10-02 09:00:00,1200.00,1200.00,usd,Refunded,gina,standard\n",
    );
    let hub = hub_with_requests();
    let a = sync(&hub, &s, &stripe, &[]).success();
    assert!(stdout(&a).contains("skipped, not payments: 1 Failed"), "{}", stdout(&a));
    let access = hub.access(REPO);
    assert_eq!((access["alice"].as_str(), access["bob"].as_str(), access["carol"].as_str()), ("accepted", "accepted", "pending"));
    assert_eq!(access["gina"], "rejected");
}

/// A listing longer than any real one is refused before it is held whole, by its announced
/// length, naming the server, the route and the cap; no access changes, no sale is lost.
#[test]
fn an_oversized_listing_is_refused_by_its_length() {
    let s = Scratch::new();
    let payments = s.write("payments.csv", PAYMENTS);
    let hub = hub_with_requests();
    let before = hub.access(REPO);
    hub.inject("access-list", Fault::Pad { bytes: 40 * 1024 * 1024, announced: true });
    let err = stderr(&sync(&hub, &s, &payments, &["--retries", "3"]).failure());
    assert!(err.contains(&hub.url) && err.contains("/user-access-request/"), "the server and the route: {err}");
    assert!(err.contains("it announces") && err.contains("above the cap of 33554432 bytes"), "{err}");
    assert!(!err.contains("retrying"), "a cap is not a transient failure: {err}");
    assert_eq!(hub.access(REPO), before);
}

/// A Hub that drips its answer a byte a second never trips a read's timeout; the call's
/// deadline ends the sync there, and the ledger's lock goes with it.
#[test]
fn a_dripping_hub_holds_the_ledger_no_longer_than_the_deadline() {
    let s = Scratch::new();
    let payments = s.write("payments.csv", PAYMENTS);
    let hub = hub_with_requests();
    hub.inject("access-list", Fault::Drip { status: 200, every: std::time::Duration::from_secs(1) });
    let started = std::time::Instant::now();
    let err = stderr(&sync(&hub, &s, &payments, &["--timeout", "5", "--deadline", "2"]).failure());
    let took = started.elapsed();
    assert!(took.as_secs() < 10, "{took:?}: {err}");
    assert!(err.contains("was still answering") && err.contains("at the deadline, 2 s"), "{err}");
    assert!(!s.path(".ledger.jsonl.lock").exists(), "the lock went with the sync");
    sync(&hub, &s, &payments, &[]).success();
}
