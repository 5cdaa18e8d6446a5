//! `rebuild --audit`: an unmodified release passes; any changed byte fails, naming the file;
//! rerun inference with drifted scores is judged against the spec's tolerance.

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn sample(s: &Scratch) -> PathBuf {
    let out = s.path("s1a");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    out
}

/// `rebuild DIR --audit --spec <the fixture-scored s1a>` (unless `extra` names another spec),
/// run from the repo root, rebuilding beside DIR (a failed audit keeps its rebuild for
/// inspection). Finding the spec from the lock is tested on the real s1a in vlm_build.rs.
fn audit(dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    let scratch = dir.with_file_name(format!("{}-audit", dir.file_name().unwrap().to_string_lossy()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut cmd = bin();
    cmd.current_dir(repo()).arg("rebuild").arg(dir).arg("--audit").arg("--scratch").arg(&scratch);
    if !extra.contains(&"--spec") {
        cmd.arg("--spec").arg(fixture_s1a());
    }
    cmd.args(extra).assert()
}

/// Adds `yes` and `no` to every cached logit of every image, as a scorer on other hardware would
/// have scored them: each entry resealed, so the cache takes it as genuine.
fn perturb_cache(cache: &Path, yes: f32, no: f32) {
    reseal_score_entries(cache, |scores| {
        for s in scores {
            s.logit_yes += yes;
            s.logit_no += no;
        }
    });
}

#[test]
fn an_unmodified_release_rebuilds_byte_for_byte_with_inference_rerun() {
    let s = Scratch::new();
    let dir = sample(&s);
    let a = audit(&dir, &[]).success();
    let out = stdout(&a);
    assert!(out.contains("inference: rerun in a fresh cache"), "{out}");
    assert!(out.contains("max |diff| 0.000e0"), "{out}");
    assert!(out.contains("PASS: every file is identical, byte for byte"), "{out}");
    let a = audit(&dir, &["--json"]).success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["pass"], true);
    assert!(report["files"].as_array().unwrap().iter().all(|f| f["status"] == "identical"));
}

#[test]
fn any_changed_byte_fails_naming_the_file() {
    let s = Scratch::new();
    let dir = sample(&s);
    for (file, why) in
        [("README.md", "differs although every raw score is identical"), ("LICENSE.md", "differs, and it does not depend on scores")]
    {
        let copy = s.path(&format!("edited-{file}"));
        copy_tree(&dir, &copy);
        let mut bytes = std::fs::read(copy.join(file)).unwrap();
        bytes[10] ^= 1;
        std::fs::write(copy.join(file), bytes).unwrap();
        let a = audit(&copy, &["--reuse-cache", s.cache().to_str().unwrap()]).failure();
        let out = stdout(&a);
        assert!(out.contains(&format!("differs: {file}")) && out.contains(&format!("{file}: {why}")) && out.contains("FAIL"), "{out}");
    }
    // A shard changed in place is caught too, and a file the rebuild does not make.
    let copy = s.path("extra");
    copy_tree(&dir, &copy);
    std::fs::write(copy.join("notes.txt"), "added by hand\n").unwrap();
    let a = audit(&copy, &["--reuse-cache", s.cache().to_str().unwrap()]).failure();
    assert!(stdout(&a).contains("notes.txt: in the release, not produced by the rebuild"), "{}", stdout(&a));
}

#[test]
fn drift_within_tolerance_passes_and_class_changes_fail() {
    let s = Scratch::new();
    let dir = sample(&s);
    // Both logits move by the same 5e-4: p_yes is unchanged, the raw scores drift.
    let small = s.path("small-drift");
    copy_tree(&s.cache(), &small);
    perturb_cache(&small, 5e-4, 5e-4);
    let a = audit(&dir, &["--reuse-cache", small.to_str().unwrap(), "--json"]).success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let max = report["drift"]["max_abs"].as_f64().unwrap();
    assert!((max - 5e-4).abs() < 2e-5, "max drift {max}");
    assert_eq!(report["drift"]["tolerance"], 1e-3);
    assert!(report["class_changes"].as_array().unwrap().is_empty());
    let differs: Vec<&str> =
        report["files"].as_array().unwrap().iter().filter(|f| f["status"] == "differs").map(|f| f["path"].as_str().unwrap()).collect();
    assert!(differs.contains(&"data/trial-00000-of-00001.parquet") && !differs.contains(&"LICENSE.md"), "{differs:?}");

    // A real shift of the yes logits: drift above tolerance and rows that change class.
    let large = s.path("large-drift");
    copy_tree(&s.cache(), &large);
    perturb_cache(&large, 2.0, 0.0);
    let a = audit(&dir, &["--reuse-cache", large.to_str().unwrap()]).failure();
    let out = stdout(&a);
    assert!(out.contains("max |diff| 2.000e0") && out.contains("above the tolerance 1.000e-3"), "{out}");
    assert!(out.contains("rows changed trust class") && out.contains("trust class changed on"), "{out}");
    assert!(out.contains("likely_mislabeled -> ") || out.contains("suspect -> "), "{out}");
}

#[test]
fn a_different_or_missing_spec_is_reported() {
    let s = Scratch::new();
    let dir = sample(&s);
    let a = audit(&dir, &["--spec", spec("s1b.yaml").to_str().unwrap()]).failure();
    let out = stdout(&a);
    assert!(out.contains("differs from the lock: release.id") && out.contains("cannot be rebuilt from it"), "{out}");
    let a = bin().current_dir(s.dir.path()).arg("rebuild").arg(&dir).arg("--audit").assert().failure();
    assert!(
        stderr(&a).contains("cannot find the spec s1a-fixture-scorer.yaml") && stderr(&a).contains("pass --spec PATH"),
        "{}",
        stderr(&a)
    );
}

/// A lock whose scorer records a pass size no build makes (here 2^62, which used to hang the
/// padding loop, and 0): the audit fails naming the lock and the value, before any rebuild.
#[test]
fn a_lock_with_a_pass_size_no_build_makes_fails_the_audit() {
    let s = Scratch::new();
    let dir = sample(&s);
    for value in [serde_json::json!(1u64 << 62), serde_json::json!(0), serde_json::json!("8")] {
        let copy = s.path(&format!("pass-{value}"));
        copy_tree(&dir, &copy);
        let path = copy.join("build.lock");
        let mut lock: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        lock["scorer"]["preprocessing"] = serde_json::json!({"scoring": {"images_per_pass": value}});
        std::fs::write(&path, serde_json::to_string_pretty(&lock).unwrap()).unwrap();
        let a = audit(&copy, &[]).failure();
        let err = stderr(&a);
        assert!(err.contains(&format!("build.lock records images_per_pass {value}, which no build makes")), "{err}");
    }
}
