//! A release built by the native engine (the tiny random-weight fixture model) on part of the
//! embedded sample: it says so, it is deterministic, and its shipped logits are the engine's.
#![cfg(feature = "vlm")]

mod common;

use common::*;

fn vlm_spec(s: &Scratch) -> std::path::PathBuf {
    let model = repo().join("fixtures/vlm/qwen2_vl");
    derived_spec(
        s,
        "vlm.yaml",
        &format!(
            "selection:\n  curated_images: 24\n  expected_rows: 31\nmodel:\n  backend: qwen2vl\n  path: {}\n  id: bpals/tiny-qwen2-vl\n  revision: fixture-v1\n  weight_license: apache-2.0\n  random_weights: true\n",
            model.display()
        ),
    )
}

#[test]
fn the_engine_builds_a_labelled_deterministic_release() {
    let s = Scratch::new();
    let spec = vlm_spec(&s);
    let one = s.path("one");
    let a = build(&spec, &one, &s.path("cache-1"), &["--jobs", "1"]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("DEMO BUILD") && text.contains("random weights"), "{text}");
    assert!(text.contains("scored by the qwen2vl engine"), "{text}");
    let two = s.path("two");
    build(&spec, &two, &s.path("cache-2"), &["--jobs", "2"]).success();
    assert_eq!(tree_digest(&one), tree_digest(&two), "the engine's scores do not depend on --jobs");
    bin().arg("verify").arg(&one).assert().success();

    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(one.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock["scorer"]["backend"], "qwen2vl");
    assert_eq!(lock["scorer"]["weights_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(lock["scorer"]["preprocessing"]["dtype"], "Float");

    // The logits in the shard are what `probe` gives for the same image and question (within
    // 1e-5: the build scores 48 questions in one batch, probe one).
    let (_, rows) = bpals_release::eval::read_release_rows(&one).unwrap();
    let row = &rows[0];
    let spec_text: serde_json::Value = lock["spec"].clone();
    let question = spec_text["prompts"]["labels"][&row.label][0].as_str().unwrap().to_string();
    let image = repo().join("fixtures/sample/images").join(&row.image_index);
    let a = bin()
        .args(["probe", "--model", repo().join("fixtures/vlm/qwen2_vl").to_str().unwrap(), "--question", &question, "--image"])
        .arg(&image)
        .assert()
        .success();
    let probe: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let close = |key: &str, shipped: f32| (probe["questions"][0][key].as_f64().unwrap() - f64::from(shipped)).abs() <= 1e-5;
    assert!(close("logit_yes", row.logit_yes[0]) && close("logit_no", row.logit_no[0]), "{}: {probe}", row.image_index);

    // An auditor's rebuild reruns the engine and gets every byte back.
    let a = bin().args(["rebuild", "--audit", "--spec"]).arg(&spec).arg(&one).arg("--scratch").arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("PASS: every file is identical, byte for byte"), "{}", stdout(&a));
}

/// The README's main job: `build specs/s1a.yaml` on a fresh clone runs the engine on the tiny
/// random-weight model over the whole embedded sample, says so, verifies, and publish refuses it.
#[test]
fn the_sample_build_runs_the_engine_and_is_refused_by_publish() {
    let s = Scratch::new();
    let out = s.path("s1a");
    let a = build(&spec("s1a.yaml"), &out, &s.cache(), &[]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("640 scored by the qwen2vl engine"), "{text}");
    assert!(text.contains("DEMO BUILD") && text.contains("bpals/tiny-qwen2-vl has random weights"), "{text}");
    bin().arg("verify").arg(&out).assert().success();
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    insta::assert_snapshot!("s1a_card", card);

    // The auditor's rebuild finds the spec from the lock (specs/s1a.yaml, from the repo root).
    let a = bin().current_dir(repo()).arg("rebuild").arg(&out).args(["--audit", "--scratch"]).arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("max |diff| 0.000e0") && stdout(&a).contains("PASS"), "{}", stdout(&a));

    let a = bin().env("HF_TOKEN", "hf_unused").args(["publish", "--dry-run"]).arg(&out).assert().failure();
    assert!(stderr(&a).contains("refusing to publish: this is a demo build") && stderr(&a).contains("random weights"), "{}", stderr(&a));
}
