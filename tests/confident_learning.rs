//! `features` and `label-issues` end to end on the embedded sample, with the fixture scorer (whose
//! features are a hash of each image: the path is real, the vectors mean nothing). The rules' and
//! the probes' numbers are checked against cleanlab and scikit-learn in
//! tests/python/test_confident_learning.py; the engine's own features in tests/vlm_cli.rs.

mod common;

use common::*;

fn sample_data_entry() -> std::path::PathBuf {
    repo().join("fixtures/sample/Data_Entry_2017_v2020.csv")
}

fn label_issues(s: &Scratch, features: &std::path::Path, out: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin()
        .arg("label-issues")
        .arg("--data-entry")
        .arg(sample_data_entry())
        .arg("--features")
        .arg(features)
        .arg("--out")
        .arg(s.path(out))
        .args(extra)
        .assert()
}

/// `features` on the fixture S1a into `out`, through the scratch's cache; what it printed.
fn write_features(s: &Scratch, out: &std::path::Path) -> String {
    let a = bin().arg("features").arg(fixture_s1a()).arg("--out").arg(out).arg("--cache-dir").arg(s.cache()).arg("--no-progress").assert();
    stdout(&a.success())
}

#[test]
fn features_then_label_issues_run_on_the_sample_and_repeat_to_the_byte() {
    let s = Scratch::new();
    let features = s.path("features.parquet");
    let out = write_features(&s, &features);
    assert!(out.contains("x 16 features (vision_tower_mean"), "{out}");
    assert!(out.contains("carry no information"), "the fixture's features must say what they are: {out}");
    assert!(out.contains("640 computed, 0 from the cache"), "{out}");
    // A second run reads the cache and writes the same bytes.
    let again = s.path("again.parquet");
    let said = write_features(&s, &again);
    assert!(said.contains("0 computed, 640 from the cache"), "{said}");
    assert_eq!(std::fs::read(&features).unwrap(), std::fs::read(&again).unwrap());
    // A damaged entry is set aside, said, and computed again.
    let entry = files_under(&s.cache().join("features-v1")).into_iter().find(|p| p.extension().is_some_and(|e| e == "json")).unwrap();
    std::fs::write(&entry, b"{\"not\": \"an entry\"}").unwrap();
    let said = write_features(&s, &again);
    assert!(said.contains("1 computed, 639 from the cache") && said.contains("cache: "), "{said}");
    assert_eq!(std::fs::read(&features).unwrap(), std::fs::read(&again).unwrap());

    let flags = ["--findings", "Effusion,No Finding", "--folds", "3", "--grid", "0.1,1"];
    let first = label_issues(&s, &features, "first", &flags).success();
    let table = stdout(&first);
    assert!(table.contains("Effusion") && table.contains("No Finding"), "{table}");
    // Findings run on separate threads: the bytes do not depend on how many.
    let second = bin()
        .env("RAYON_NUM_THREADS", "1")
        .arg("label-issues")
        .arg("--data-entry")
        .arg(sample_data_entry())
        .arg("--features")
        .arg(&features)
        .arg("--out")
        .arg(s.path("second"))
        .args(flags)
        .assert()
        .success();
    assert_eq!(stdout(&second).replace("second", "first"), table);
    assert_eq!(tree_digest(&s.path("first")), tree_digest(&s.path("second")));

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(s.path("first/label_issues.json")).unwrap()).unwrap();
    assert_eq!(report["format"], "bpals-release/label-issues/1");
    assert_eq!(report["probes"]["folds"], 3);
    let effusion = &report["findings"][0];
    assert_eq!(effusion["probes"]["chosen_c"].as_array().unwrap().len(), 3);
    assert!(effusion["rules"]["thresholds"][1].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_settings_and_inputs_are_refused_before_anything_is_written() {
    let s = Scratch::new();
    let empty = s.write("empty.parquet", "");
    for (flags, message) in [
        (vec!["--folds", "2"], "folds is 2: expected 3 to 20"),
        (vec!["--grid", "1,0.1"], "ascending"),
        (vec!["--grid", "0,1"], "positive, finite"),
        (vec!["--findings", "Efusion"], "unknown finding \"Efusion\""),
        (vec![], "empty.parquet: not a readable Parquet file"),
    ] {
        let a = label_issues(&s, &empty, "out", &flags).failure();
        assert!(stderr(&a).contains(message), "{flags:?}: {}", stderr(&a));
        assert!(!s.path("out").exists());
    }
    let missing = label_issues(&s, &s.path("nowhere.parquet"), "out", &[]).failure();
    assert!(stderr(&missing).contains("cannot read") && stderr(&missing).contains("nowhere.parquet"), "{}", stderr(&missing));
    let both =
        bin().args(["label-issues", "--data-entry", "x", "--features", "a", "--probabilities", "b", "--out", "o"]).assert().failure();
    assert!(stderr(&both).contains("cannot be used with"), "{}", stderr(&both));
}
