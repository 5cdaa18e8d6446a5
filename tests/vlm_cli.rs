//! `probe`, `describe` and `doctor` on the tiny fixture models, and the errors a user meets.
#![cfg(feature = "vlm")]

mod common;

use common::*;

fn model(family: &str) -> String {
    repo().join("fixtures/vlm").join(family).display().to_string()
}

fn image(family: &str, name: &str) -> String {
    repo().join("fixtures/vlm").join(family).join("goldens").join(name).display().to_string()
}

#[test]
fn probe_scores_every_question_and_describe_answers() {
    let questions = ["Is there a pleural effusion in this chest X-ray?", "Does this radiograph show cardiomegaly?"];
    let a = bin()
        .args(["probe", "--model", &model("qwen2_vl"), "--image", &image("qwen2_vl", "tall-77x123.png"), "--device", "cpu"])
        .args(questions.iter().flat_map(|q| ["--question", q]))
        .assert()
        .success();
    let r: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(r["model"]["family"], "qwen2_vl");
    assert_eq!(r["model"]["dtype"], "Float", "auto is f32 on the CPU");
    assert_eq!(r["image"]["grid_thw"], serde_json::json!([1, 8, 6]));
    let qs = r["questions"].as_array().unwrap();
    assert_eq!(qs.len(), 2);
    for q in qs {
        let (y, n, p) = (q["logit_yes"].as_f64().unwrap(), q["logit_no"].as_f64().unwrap(), q["p_yes"].as_f64().unwrap());
        assert!((p - 1.0 / (1.0 + (n - y).exp())).abs() < 1e-6, "p_yes is the softmax over the two logits");
    }

    let a = bin()
        .args([
            "describe",
            "--model",
            &model("qwen2_5_vl"),
            "--image",
            &image("qwen2_5_vl", "odd-201x59.png"),
            "--prompt",
            "Describe the findings.",
            "--max-new-tokens",
            "5",
        ])
        .assert()
        .success();
    let r: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(r["model"]["family"], "qwen2_5_vl");
    assert_eq!(r["new_tokens"], 5);
    assert_eq!(r["truncated_by_max_new_tokens"], true);
    assert!(r["response"].is_string() && r["think"].is_null());
}

#[test]
fn bad_images_and_models_get_clear_errors() {
    let s = Scratch::new();
    let png = std::fs::read(image("qwen2_vl", "wide-150x90.png")).unwrap();
    let truncated = s.path("truncated.png");
    std::fs::write(&truncated, &png[..png.len() / 2]).unwrap();
    let a = bin().args(["probe", "--model", &model("qwen2_vl"), "--question", "Is it?", "--image"]).arg(&truncated).assert().failure();
    assert!(stderr(&a).contains("truncated.png: not a decodable image"), "{}", stderr(&a));

    let thin = s.path("thin.png");
    image::GrayImage::new(1, 300).save(&thin).unwrap();
    let a = bin().args(["probe", "--model", &model("qwen2_vl"), "--question", "Is it?", "--image"]).arg(&thin).assert().failure();
    assert!(stderr(&a).contains("aspect ratio 300.0"), "{}", stderr(&a));

    let a = bin()
        .args(["probe", "--model"])
        .arg(s.path("nowhere"))
        .args(["--question", "Is it?", "--image", &image("qwen2_vl", "wide-150x90.png")])
        .assert()
        .failure();
    assert!(stderr(&a).contains("nowhere: no such directory"), "{}", stderr(&a));

    // A weight whose shape disagrees with the config is named.
    let broken = s.path("broken");
    copy_tree(&repo().join("fixtures/vlm/qwen2_vl"), &broken);
    let config = broken.join("config.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    v["text_config"]["intermediate_size"] = 96.into();
    std::fs::write(&config, serde_json::to_vec(&v).unwrap()).unwrap();
    let a = bin()
        .args(["probe", "--model"])
        .arg(&broken)
        .args(["--question", "Is it?", "--image", &image("qwen2_vl", "wide-150x90.png")])
        .assert()
        .failure();
    assert!(
        stderr(&a).contains("tensor model.layers.0.mlp.gate_proj.weight has shape [128, 64]; the config implies [96, 64]"),
        "{}",
        stderr(&a)
    );

    let out = bin()
        .args([
            "probe",
            "--model",
            &model("qwen2_vl"),
            "--device",
            "cuda",
            "--question",
            "Is it?",
            "--image",
            &image("qwen2_vl", "wide-150x90.png"),
        ])
        .assert();
    if !out.get_output().status.success() {
        assert!(stderr(&out).contains("libtorch sees no CUDA device"), "{}", stderr(&out));
    }
}

#[test]
fn doctor_reports_the_machine_and_never_the_token() {
    let a = bin().env("HF_TOKEN", "hf_secretDOCTORtoken123").args(["doctor"]).arg(spec("s1a.yaml")).assert().success();
    let out = stdout(&a);
    assert!(!out.contains("hf_secretDOCTORtoken123"));
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["vlm_feature"], true);
    assert_eq!(r["hub_token"], "HF_TOKEN");
    assert_eq!(r["libtorch"]["dtypes"][0], serde_json::json!(["f32", true]));
    assert_eq!(r["model"]["backend"], "qwen2vl");
    assert!(r["model"]["local_dir"].as_str().unwrap().ends_with("fixtures/vlm/trained/qwen2_vl"), "{r}");
    assert!(r["next_step"].as_str().unwrap().len() > 10);
}
