//! What each command prints, as a person sees it: stdout and stderr of build, build --dry-run,
//! verify, publish --dry-run, rebuild --audit, diff and source, and the card, snapshotted on the
//! fixture-scored sample (so this runs without libtorch too). Paths, the fake Hub's port and
//! whatever depends on the tool's own commit are filtered out.

mod common;
#[path = "fake_hub/mod.rs"]
mod fake_hub;

use common::*;

const TOKEN: &str = "hf_fakeTOKENvalue0123456789";

/// stdout, then stderr under a marker when there is any.
fn output(a: &assert_cmd::assert::Assert) -> String {
    let (out, err) = (stdout(a), stderr(a));
    if err.is_empty() {
        out
    } else {
        format!("{out}--- stderr ---\n{err}")
    }
}

#[test]
fn each_command_says_what_it_did() {
    let s = Scratch::new();
    let mut settings = insta::Settings::clone_current();
    for (pattern, replacement) in path_filters(&s) {
        settings.add_filter(&pattern, replacement);
    }
    settings.add_filter(r"http://127\.0\.0\.1:\d+", "[HUB]");
    // build.lock names the tool's commit, and manifest.json lists build.lock's digest.
    settings.add_filter(r"(?m)^.*(build\.lock|manifest\.json).*$", "  [$1: depends on the tool's commit]");
    settings.add_filter(r"new \(\d+ bytes\)", "new ([BYTES] bytes)");
    settings.add_filter(r"\((?:[0-9a-f]{7,40}|unknown)(?:\+dirty)?\)", "([COMMIT])");
    settings.add_filter(r"bpals-release \d+\.\d+\.\d+", "bpals-release [VERSION]");
    let _guard = settings.bind_to_scope();

    let out = s.path("s1a");
    let cache = s.cache();
    let a = build(&fixture_s1a(), &out, &cache, &[]).success();
    insta::assert_snapshot!("build", output(&a));
    insta::assert_snapshot!("card", std::fs::read_to_string(out.join("README.md")).unwrap());

    let a = build(&fixture_s1a(), &s.path("planned"), &cache, &["--dry-run"]).success();
    insta::assert_snapshot!("build_dry_run", output(&a));

    let a = bin().arg("verify").arg(&out).assert().success();
    insta::assert_snapshot!("verify", output(&a));

    let hub = fake_hub::FakeHub::start(Some(TOKEN));
    let a = bin()
        .env("HF_TOKEN", TOKEN)
        .env("HF_HOME", s.path("hf-home"))
        .arg("publish")
        .arg(&out)
        .args(["--repo", "bpals-test/cxr14-bpals", "--endpoint", &hub.url, "--allow-demo", "--dry-run"])
        .assert()
        .success();
    insta::assert_snapshot!("publish_dry_run", output(&a));

    let a = bin()
        .arg("rebuild")
        .arg(&out)
        .args(["--audit", "--jobs", "2", "--spec"])
        .arg(fixture_s1a())
        .arg("--scratch")
        .arg(s.path("audit"))
        .assert()
        .success();
    insta::assert_snapshot!("rebuild_audit", output(&a));

    let other = derived_spec(&s, "tau.yaml", "signal:\n  trusted_min_agreement: 0.8\n");
    build(&other, &s.path("stricter"), &cache, &[]).success();
    let a = bin().arg("diff").arg(&out).arg(s.path("stricter")).args(["--top", "3"]).assert().success();
    insta::assert_snapshot!("diff", output(&a));

    let sample = repo().join("fixtures/sample");
    let a = bin()
        .arg("source")
        .arg("--data-entry")
        .arg(sample.join("Data_Entry_2017.csv"))
        .arg("--bbox")
        .arg(sample.join("BBox_List_2017.csv"))
        .arg("--train-val-list")
        .arg(sample.join("train_val_list.txt"))
        .arg("--test-list")
        .arg(sample.join("test_list.txt"))
        .assert()
        .success();
    insta::assert_snapshot!("source", output(&a));
}

#[test]
fn the_benchmarks_are_one_group_and_the_old_names_still_run_hidden() {
    let help = stdout(&bin().arg("--help").assert().success());
    assert!(help.contains("bench ") && !help.contains("bench-labeler") && !help.contains("bench-scoring"), "{help}");
    let group = stdout(&bin().args(["bench", "--help"]).assert().success());
    for sub in ["pipeline", "generation", "scoring", "labeler"] {
        assert!(group.lines().any(|l| l.trim_start().starts_with(sub)), "bench {sub}: {group}");
    }
    // The old name runs the new command, and says so.
    let a = bin().args(["bench-labeler", "--openi", "/nonexistent/openi"]).assert().failure();
    assert!(stderr(&a).contains("note: `bench-labeler` is now `bench labeler`"), "{}", stderr(&a));
    let b = bin().args(["bench", "labeler", "--openi", "/nonexistent/openi"]).assert().failure();
    assert_eq!(stderr(&a).lines().skip(1).collect::<Vec<_>>(), stderr(&b).lines().collect::<Vec<_>>(), "the same command runs");
}
