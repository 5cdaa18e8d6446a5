//! Publishing to a loopback fake of the Hub: publish, re-publish, remote verify, download and
//! compare, injected faults, refusals, and the token never printed.

mod common;
#[path = "fake_hub/mod.rs"]
mod fake_hub;

use std::path::{Path, PathBuf};

use common::*;
use fake_hub::{FakeHub, Fault};

const TOKEN: &str = "hf_fakeTOKENvalue0123456789";
const REPO: &str = "bpals-test/cxr14-bpals";

/// The sample built again as version 1.1.0: a new release of the same id.
fn version_1_1(s: &Scratch) -> PathBuf {
    let bumped = s.write("bumped.yaml", &format!("extends: {}\nrelease:\n  version: 1.1.0\n", fixture_s1a().display()));
    let v2 = s.path("v2");
    build(&bumped, &v2, &s.cache(), &[]).success();
    v2
}

fn sample(s: &Scratch) -> PathBuf {
    let out = s.path("s1a");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    out
}

/// `publish DIR --repo REPO --endpoint HUB --allow-demo --retries 0` with the token set.
fn publish(hub: &FakeHub, dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    publish_to(&hub.url, TOKEN, REPO, dir, extra)
}

#[test]
fn publish_then_verify_remotely_then_download_every_byte() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    let a = publish(&hub, &dir, &[]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("DEMO BUILD"), "{text}");
    assert!(text.contains("token: from HF_TOKEN"), "{text}");
    assert_eq!(hub.release_commits(REPO), 1);
    let repo = hub.repo(REPO).unwrap();
    assert_eq!(repo.tags.get("s1a-v1.0.0"), Some(&repo.head().sha));
    assert!(!repo.private && repo.gated.is_none(), "the trial tier is public");
    let v =
        bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", &format!("{REPO}@s1a-v1.0.0"), "--endpoint", &hub.url]).assert().success();
    assert!(stdout(&v).starts_with("ok: release s1a 1.0.0"), "{}", stdout(&v));
    let back = s.path("downloaded");
    bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", REPO, "--endpoint", &hub.url, "--download"]).arg(&back).assert().success();
    assert_eq!(tree_digest(&back), tree_digest(&dir), "every byte comes back");
}

#[test]
fn a_dry_run_changes_nothing_and_publishing_again_makes_no_commit() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    let a = publish(&hub, &dir, &["--dry-run"]).success();
    let plan = stderr(&a);
    assert!(plan.contains("new repo, public") && plan.contains("tag s1a-v1.0.0 will name the release commit"), "{plan}");
    assert!(plan.lines().any(|l| l.starts_with("  new ") && l.ends_with("data/trial-00000-of-00001.parquet")), "{plan}");
    assert!(hub.repo(REPO).is_none(), "a dry run creates nothing");
    assert!(stdout(&a).contains("dry run: nothing was changed"));

    publish(&hub, &dir, &[]).success();
    let first = hub.repo(REPO).unwrap();
    let a = publish(&hub, &dir, &[]).success();
    let text = stderr(&a);
    assert!(text.contains("no commit") && text.contains("tag s1a-v1.0.0 exists at"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("  new ") || l.starts_with("  changed ")), "every file is unchanged:\n{text}");
    assert!(text.contains("0 new (0 bytes), 0 changed (0 bytes), 12 unchanged, 0 removed"), "{text}");
    let again = hub.repo(REPO).unwrap();
    assert_eq!(again.commits.len(), first.commits.len(), "no second commit");
    assert_eq!(again.tags, first.tags);
    assert_eq!(hub.count("POST /api/datasets/bpals-test/cxr14-bpals/commit"), 1);
}

/// Runs one publish with `fault` injected on `route`, then a clean rerun, and checks the Hub
/// ends with exactly one release commit and one tag, and never showed a partial release.
fn fault_then_rerun(route: &str, fault: Fault, retries: &str, first_succeeds: bool) {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    hub.inject(route, fault.clone());
    let a = bin()
        .env("HF_TOKEN", TOKEN)
        .arg("publish")
        .arg(&dir)
        .args(["--repo", REPO, "--endpoint", &hub.url, "--allow-demo", "--retries", retries])
        .assert();
    let first = a.get_output().status.success();
    assert_eq!(first, first_succeeds, "{route} {fault:?}: {}", stderr(&a));
    if !first {
        assert!(stderr(&a).contains("error:"), "{}", stderr(&a));
        // A refused commit says where main stands: moved (the lost answer's commit landed) or not.
        let err = stderr(&a);
        if matches!(fault, Fault::StatusAfterApply(_)) {
            assert!(err.contains("main has moved from") && !err.contains("nothing of this commit landed"), "{err}");
        } else if err.contains("committing") {
            assert!(err.contains("main is still at") || err.contains("main has moved from"), "{err}");
        }
        // Main holds either nothing of the release or all of it.
        if let Some(repo) = hub.repo(REPO) {
            let files = &repo.head().files;
            let manifest = std::fs::read(dir.join("manifest.json")).unwrap();
            assert!(files.len() == 1 || files.get("manifest.json") == Some(&manifest), "{route}: partial release {:?}", files.keys());
        }
        publish(&hub, &dir, &[]).success();
    }
    let repo = hub.repo(REPO).unwrap();
    assert_eq!(hub.release_commits(REPO), 1, "{route} {fault:?}: exactly one release commit");
    assert_eq!(repo.tags.len(), 1, "{route} {fault:?}: exactly one tag");
    assert_eq!(repo.tags["s1a-v1.0.0"], repo.head().sha);
    bin().args(["verify", "--remote", &format!("{REPO}@s1a-v1.0.0"), "--endpoint", &hub.url]).env("HF_TOKEN", TOKEN).assert().success();
}

#[test]
fn a_5xx_before_the_commit_leaves_nothing_and_a_rerun_completes() {
    fault_then_rerun("commit", Fault::Status(500), "0", false);
}

#[test]
fn a_commit_applied_but_unanswered_is_not_applied_twice() {
    // The retry names the old head as parent and is refused; the rerun finds the files and tags.
    fault_then_rerun("commit", Fault::StatusAfterApply(502), "2", false);
}

#[test]
fn a_dropped_connection_during_the_commit_is_recovered_by_a_rerun() {
    fault_then_rerun("commit", Fault::Drop, "0", false);
}

#[test]
fn a_transient_5xx_is_retried_within_one_run() {
    fault_then_rerun("commit", Fault::Status(503), "3", true);
}

#[test]
fn a_slow_hub_is_waited_for() {
    fault_then_rerun("preupload", Fault::Slow(std::time::Duration::from_millis(1500)), "0", true);
}

#[test]
fn a_failed_tag_is_created_by_the_rerun_without_a_new_commit() {
    fault_then_rerun("tag", Fault::Status(500), "0", false);
}

#[test]
fn demo_builds_unverified_releases_and_missing_tokens_are_refused() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    // A demo build without --allow-demo, naming why it is a demo.
    let a = bin().env("HF_TOKEN", TOKEN).arg("publish").arg(&dir).args(["--repo", REPO, "--endpoint", &hub.url]).assert().failure();
    assert!(
        stderr(&a).contains("refusing to publish: this is a demo build") && stderr(&a).contains("embedded synthetic sample"),
        "{}",
        stderr(&a)
    );
    // --allow-demo never reaches the public Hub (refused before any request).
    for endpoint in ["https://huggingface.co", "https://huggingface.co/"] {
        let a = bin()
            .env("HF_TOKEN", TOKEN)
            .arg("publish")
            .arg(&dir)
            .args(["--repo", REPO, "--allow-demo", "--endpoint", endpoint])
            .assert()
            .failure();
        assert!(stderr(&a).contains("needs an --endpoint other than the public Hub"), "{}", stderr(&a));
    }
    let a = bin()
        .env("HF_TOKEN", TOKEN)
        .env_remove("HF_ENDPOINT")
        .arg("publish")
        .arg(&dir)
        .args(["--repo", REPO, "--allow-demo"])
        .assert()
        .failure();
    assert!(stderr(&a).contains("public Hub"), "the default endpoint is the public Hub: {}", stderr(&a));
    // No token.
    let a = bin()
        .env_remove("HF_TOKEN")
        .env("HF_HOME", s.path("empty-hf-home"))
        .arg("publish")
        .arg(&dir)
        .args(["--repo", REPO, "--endpoint", &hub.url, "--allow-demo"])
        .assert()
        .failure();
    assert!(stderr(&a).contains("no Hub token: set HF_TOKEN"), "{}", stderr(&a));
    // A release that does not verify, naming the file.
    let tampered = s.path("tampered");
    copy_tree(&dir, &tampered);
    std::fs::write(tampered.join("LICENSE.md"), "edited\n").unwrap();
    let a = publish(&hub, &tampered, &[]).failure();
    assert!(stderr(&a).contains("does not verify") && stderr(&a).contains("LICENSE.md"), "{}", stderr(&a));
    assert!(hub.repo(REPO).is_none(), "nothing reached the Hub");
    assert_eq!(hub.count(""), 0, "not a single request");
}

#[test]
fn a_commercial_tier_goes_to_a_gated_repo() {
    let s = Scratch::new();
    let dir = s.path("s1b");
    build(&fixture_s1b(), &dir, &s.cache(), &[]).success();
    let hub = FakeHub::start(Some(TOKEN));
    publish(&hub, &dir, &[]).success();
    let repo = hub.repo(REPO).unwrap();
    assert_eq!(repo.gated.as_deref(), Some("manual"), "s1b's spec says gated");
    assert!(repo.tags.contains_key("s1b-v1.0.0"));
    // A gated repo needs the token to read: verify --remote without it is refused by the Hub.
    let a = bin()
        .env_remove("HF_TOKEN")
        .env("HF_HOME", s.path("nohome"))
        .args(["verify", "--remote", REPO, "--endpoint", &hub.url])
        .assert()
        .failure();
    assert!(stderr(&a).contains("Authentication required") || stderr(&a).contains("401"), "{}", stderr(&a));
}

#[test]
fn a_new_version_is_a_second_commit_and_a_published_version_never_changes() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    publish(&hub, &dir, &[]).success();
    let v1 = hub.repo(REPO).unwrap().head().sha.clone();

    // Same version, different content: refused.
    let changed = s.write("changed.yaml", &format!("extends: {}\nsignal:\n  trusted_min_agreement: 0.8\n", fixture_s1a().display()));
    let same_version = s.path("same-version");
    build(&changed, &same_version, &s.cache(), &[]).success();
    let a = publish(&hub, &same_version, &[]).failure();
    assert!(stderr(&a).contains("tag s1a-v1.0.0 already names commit") && stderr(&a).contains("bump release.version"), "{}", stderr(&a));
    assert_eq!(hub.release_commits(REPO), 1);

    // A new version: one more commit with only the changed files, a second tag; v1 stays.
    let bumped = s.write(
        "bumped.yaml",
        &format!("extends: {}\nrelease:\n  version: 1.1.0\nsignal:\n  trusted_min_agreement: 0.8\n", fixture_s1a().display()),
    );
    let v2 = s.path("v2");
    build(&bumped, &v2, &s.cache(), &[]).success();
    let a = publish(&hub, &v2, &[]).success();
    assert!(stderr(&a).contains("unchanged") && stderr(&a).contains("changed "), "{}", stderr(&a));
    let repo = hub.repo(REPO).unwrap();
    assert_eq!(hub.release_commits(REPO), 2);
    assert_eq!(repo.tags["s1a-v1.0.0"], v1);
    assert_eq!(repo.tags["s1a-v1.1.0"], repo.head().sha);
    bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", &format!("{REPO}@s1a-v1.0.0"), "--endpoint", &hub.url]).assert().success();
}

#[test]
fn verify_remote_names_changed_missing_and_extra_files() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    publish(&hub, &dir, &[]).success();
    hub.tamper(REPO, "data/trial-00000-of-00001.parquet", Some(b"not the shard"));
    hub.tamper(REPO, "README.md", Some(b"a different card\n"));
    hub.tamper(REPO, "LICENSE.md", None);
    hub.tamper(REPO, "notes.txt", Some(b"extra\n"));
    let a = bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", REPO, "--endpoint", &hub.url]).assert().failure();
    let out = stdout(&a);
    assert!(out.contains("FAILED: release s1a"), "{out}");
    assert!(out.contains("changed: data/trial-00000-of-00001.parquet has 13 bytes"), "{out}");
    assert!(out.contains("changed: README.md has 17 bytes"), "{out}");
    assert!(out.contains("missing: LICENSE.md"), "{out}");
    assert!(out.contains("extra (not in the manifest): notes.txt"), "{out}");
    // The tag still names the release as published, and it verifies.
    bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", &format!("{REPO}@s1a-v1.0.0"), "--endpoint", &hub.url]).assert().success();
    let a = bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", "not-a-repo", "--endpoint", &hub.url]).assert().failure();
    assert!(stderr(&a).contains("\"not-a-repo\" is not a repo id"), "{}", stderr(&a));
}

#[test]
fn the_token_never_appears_in_any_output_or_file() {
    let s = Scratch::new();
    let dir = s.path("s1a");
    let hub = FakeHub::start(Some(TOKEN));
    let mut outputs = Vec::new();
    let mut run = |args: &[&str], token: &str| {
        let a = bin().env("HF_TOKEN", token).env("RUST_LOG", "trace").args(args).assert();
        outputs.push((args.join(" "), stdout(&a) + &stderr(&a)));
    };
    let d = dir.to_str().unwrap();
    let cache = s.cache();
    let c = cache.to_str().unwrap();
    let s1a = fixture_s1a();
    run(&["build", s1a.to_str().unwrap(), "--out", d, "--cache-dir", c, "--no-progress"], TOKEN);
    run(&["build", s1a.to_str().unwrap(), "--out", d, "--cache-dir", c, "--dry-run"], TOKEN);
    run(&["verify", d], TOKEN);
    run(&["publish", d, "--repo", REPO, "--endpoint", &hub.url, "--allow-demo", "--dry-run"], TOKEN);
    run(&["publish", d, "--repo", REPO, "--endpoint", &hub.url, "--allow-demo", "--retries", "0"], TOKEN);
    run(&["verify", "--remote", REPO, "--endpoint", &hub.url], TOKEN);
    run(&["verify", "--remote", REPO, "--endpoint", &hub.url, "--json"], TOKEN);
    let back = s.path("back");
    run(&["verify", "--remote", REPO, "--endpoint", &hub.url, "--download", back.to_str().unwrap()], TOKEN);
    run(&["diff", d, back.to_str().unwrap()], TOKEN);
    let scratch = s.path("audit");
    run(&["rebuild", d, "--audit", "--spec", s1a.to_str().unwrap(), "--cache-dir", c, "--scratch", scratch.to_str().unwrap()], TOKEN);
    run(&["eval", d, "--gold", "/nonexistent/gold.csv"], TOKEN);
    // A wrong token: the fake echoes the Authorization header back in its 401 body.
    let wrong = "hf_wrongTOKENvalue9876543210";
    run(&["publish", d, "--repo", "bpals-test/other", "--endpoint", &hub.url, "--allow-demo", "--retries", "0"], wrong);
    let (_, last) = outputs.last().unwrap();
    assert!(last.contains("401 Unauthorized") && last.contains("[token redacted]"), "the echo is redacted: {last}");
    for (command, text) in &outputs {
        assert!(!text.contains(TOKEN) && !text.contains(wrong), "`{command}` printed the token:\n{text}");
    }
    assert!(hub.state.lock().unwrap().auth_headers.iter().any(|h| h == &format!("Bearer {TOKEN}")), "the client did send it");
    for (path, _) in tree_digest(&dir) {
        let bytes = std::fs::read(dir.join(&path)).unwrap();
        assert!(!bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()), "{path} holds the token");
    }
}

/// HF_TOKEN set with spaces or a newline around it (pasted, or `$(cat file)`): it is sent
/// trimmed, so publishing works (hf-hub, reading it raw, used to send no Authorization header
/// at all), and a server that echoes the header back has every form of it redacted. A token
/// with whitespace inside is refused, naming HF_TOKEN and never printing it.
#[test]
fn a_token_with_spaces_around_it_is_sent_trimmed_and_never_printed() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    publish_to(&hub.url, &format!("  {TOKEN}\n"), REPO, &dir, &[]).success();
    let sent = hub.state.lock().unwrap().auth_headers.clone();
    assert!(!sent.is_empty() && sent.iter().all(|h| h == &format!("Bearer {TOKEN}")), "{sent:?}");

    let wrong = "hf_wrongTOKENvalue9876543210";
    let a = publish_to(&hub.url, &format!(" {wrong} "), "bpals-test/other", &dir, &[]).failure();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("[token redacted]") && !text.contains(wrong), "{text}");

    let a = publish_to(&hub.url, "hf_inside SPACEtoken0123", REPO, &dir, &[]).failure();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("the Hub token from HF_TOKEN has whitespace inside it"), "{text}");
    assert!(!text.contains("hf_inside") && !text.contains("SPACEtoken0123"), "{text}");
}

#[test]
fn a_timed_out_commit_that_lands_later_is_not_duplicated() {
    // The Hub stalls 3 s before applying the commit; the client gives up after 1 s. The commit
    // lands anyway; the rerun finds the files on main and only tags.
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    hub.inject("commit", Fault::StallThenApply(std::time::Duration::from_secs(3)));
    let a = publish(&hub, &dir, &["--timeout", "1"]).failure();
    assert!(stderr(&a).contains("committing to") && stderr(&a).contains("run publish again"), "{}", stderr(&a));
    std::thread::sleep(std::time::Duration::from_secs(3));
    let a = publish(&hub, &dir, &[]).success();
    assert!(stderr(&a).contains("no commit"), "{}", stderr(&a));
    let repo = hub.repo(REPO).unwrap();
    assert_eq!(hub.release_commits(REPO), 1);
    assert_eq!(repo.tags["s1a-v1.0.0"], repo.head().sha);
}

/// `verify --remote` without `--download` takes each LFS file's sha256 from the Hub's ETag: it
/// says so in its ok line, and a Hub serving other bytes under the old ETag is caught only by
/// `--download`, which hashes every byte.
#[test]
fn verify_remote_says_what_it_trusted_and_download_catches_swapped_bytes() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    publish(&hub, &dir, &[]).success();
    let shard = "data/trial-00000-of-00001.parquet";
    let mut bytes = std::fs::read(dir.join(shard)).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    hub.swap_bytes_keeping_etag(REPO, shard, &bytes);
    let a = bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", REPO, "--endpoint", &hub.url]).assert().success();
    let out = stdout(&a);
    assert!(out.starts_with("ok: release s1a 1.0.0") && out.contains("by the sha256 the Hub states for them"), "{out}");
    assert!(out.contains("not downloaded") && out.contains("trusts the Hub") && out.contains("--download"), "{out}");
    let back = s.path("downloaded");
    let a =
        bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", REPO, "--endpoint", &hub.url, "--download"]).arg(&back).assert().failure();
    let out = stdout(&a);
    assert!(out.contains("FAILED: release s1a") && out.contains(shard), "{out}");
}

/// A Hub that sends more bytes than its tree listing says a file holds is refused, whether it
/// announces the length (refused before reading) or streams without one (refused once past the
/// listed size); a download leaves nothing behind.
#[test]
fn verify_remote_refuses_files_longer_than_the_tree_lists() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    publish(&hub, &dir, &[]).success();
    let verify =
        |extra: &[&str]| bin().env("HF_TOKEN", TOKEN).args(["verify", "--remote", REPO, "--endpoint", &hub.url]).args(extra).assert();

    hub.inject("resolve", Fault::Pad { bytes: 1 << 20, announced: true });
    let err = stderr(&verify(&[]).failure());
    assert!(err.contains(&hub.url) && err.contains(&format!("{REPO}@")), "the server and the route: {err}");
    assert!(err.contains("/manifest.json is refused: it announces") && err.contains("above the cap of"), "{err}");
    hub.inject("resolve", Fault::Pad { bytes: 1 << 20, announced: false });
    let err = stderr(&verify(&[]).failure());
    assert!(err.contains("/manifest.json is refused: it sent more than that"), "{err}");

    // The manifest as it is, then the first file streamed longer than listed.
    let back = s.path("downloaded");
    hub.inject("resolve", Fault::Pad { bytes: 0, announced: true });
    hub.inject("resolve", Fault::Pad { bytes: 4096, announced: false });
    let err = stderr(&verify(&["--download", back.to_str().unwrap()]).failure());
    assert!(err.contains("is refused: it sent more than that"), "{err}");
    let left: Vec<_> = std::fs::read_dir(s.dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(!back.exists() || std::fs::read_dir(&back).unwrap().next().is_none(), "nothing half-written: {left:?}");
    // The same Hub, honest again: the download completes and checks.
    verify(&["--download", back.to_str().unwrap()]).success();
}

/// A commit id the Hub misreports is never tagged: publish reads main back first, refuses, and
/// a rerun (main already holding the release) tags the real commit.
#[test]
fn a_misreported_commit_is_not_tagged() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    publish(&hub, &dir, &[]).success();
    let v1 = hub.repo(REPO).unwrap().head().sha.clone();
    let v2 = version_1_1(&s);
    hub.inject("commit", Fault::WrongCommitOid);
    let err = stderr(&publish(&hub, &v2, &[]).failure());
    let head = hub.repo(REPO).unwrap().head().sha.clone();
    assert_ne!(head, v1, "the commit itself landed");
    assert!(err.contains(&format!("the release commit is {}", &v1[..12])) && err.contains("not tagged"), "{err}");
    assert!(!hub.repo(REPO).unwrap().tags.contains_key("s1a-v1.1.0"));
    let out = stderr(&publish(&hub, &v2, &[]).success());
    assert!(out.contains("no commit"), "{out}");
    assert_eq!(hub.repo(REPO).unwrap().tags["s1a-v1.1.0"], head);
}

/// Files on main that no bpals manifest lists are someone else's: publish lists them and
/// stops, unless told to replace them.
#[test]
fn foreign_files_on_main_are_listed_and_kept_unless_replacing_them_is_asked() {
    let s = Scratch::new();
    let dir = sample(&s);
    let hub = FakeHub::start(Some(TOKEN));
    publish(&hub, &dir, &[]).success();
    hub.tamper(REPO, "notebooks/analysis.ipynb", Some(b"{}"));
    let v2 = version_1_1(&s);
    let before = hub.repo(REPO).unwrap().head().sha.clone();
    for extra in [&["--dry-run"][..], &[]] {
        let err = stderr(&publish(&hub, &v2, extra).failure());
        assert!(err.contains("holds 1 file that no bpals release lists") && err.contains("  notebooks/analysis.ipynb"), "{err}");
        assert!(err.contains("--replace-foreign-files"), "{err}");
        assert_eq!(hub.repo(REPO).unwrap().head().sha, before, "nothing committed");
    }
    // A repo holding no bpals release at all: every file it would delete is foreign.
    hub.tamper(REPO, "manifest.json", None);
    let err = stderr(&publish(&hub, &v2, &[]).failure());
    assert!(err.contains("  notebooks/analysis.ipynb"), "{err}");
    let out = stderr(&publish(&hub, &v2, &["--replace-foreign-files"]).success());
    assert!(out.contains("deletes 1 file that no bpals release lists"), "{out}");
    assert!(!hub.repo(REPO).unwrap().head().files.contains_key("notebooks/analysis.ipynb"));
}
