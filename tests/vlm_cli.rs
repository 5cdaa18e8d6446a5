//! `probe`, `describe` and `doctor` on the tiny fixture models, and the errors a user meets.
#![cfg(feature = "vlm")]

mod common;

use common::*;
use std::path::Path;

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
    // --repeat answers the same, and times every run.
    let a = bin()
        .args([
            "probe",
            "--model",
            &model("qwen2_vl"),
            "--image",
            &image("qwen2_vl", "tall-77x123.png"),
            "--device",
            "cpu",
            "--repeat",
            "3",
        ])
        .args(questions.iter().flat_map(|q| ["--question", q]))
        .assert()
        .success();
    let repeated: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(repeated["questions"], r["questions"]);
    let runs = repeated["runs_ms"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let t = &repeated["timing_ms"];
    let best = t["preprocess"].as_f64().unwrap() + t["vision"].as_f64().unwrap() + t["text"].as_f64().unwrap();
    // Exact: serde_json parses floats with float_roundtrip, so the sum reads back to the bit.
    assert!(runs.iter().all(|ms| ms.as_f64().unwrap() >= best), "timing_ms is the fastest run: {best} against {runs:?}");
    assert!(runs.iter().any(|ms| ms.as_f64().unwrap() == best), "timing_ms is one of the runs: {best} against {runs:?}");
    assert!(r.get("runs_ms").is_none(), "one run reports no runs_ms");

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
        stderr(&a)
            .contains("model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape [128, 64]; config.json implies [96, 64]"),
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
    let a = bin().env("HF_TOKEN", "hf_secretDOCTORtoken123").args(["doctor", "--json"]).arg(spec("s1a.yaml")).assert().success();
    let out = stdout(&a);
    assert!(!out.contains("hf_secretDOCTORtoken123"));
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["libtorch"]["built_against"], "2.13.0+cu130", "the PyTorch of scripts/requirements-torch.txt");
    assert!(r["libtorch"]["loaded_from"].as_str().unwrap().ends_with("torch/lib"), "{r}");
    assert_eq!(r["libtorch"]["version"], r["libtorch"]["built_against"]);
    assert_eq!(r["next_command"], format!("bpals-release build {}", spec("s1a.yaml").display()));

    // In words, by default: the engine, libtorch and where it came from, the GPU, what a GPU run
    // lacks, and the next command; never the token.
    let a = bin().env("HF_TOKEN", "hf_secretDOCTORtoken123").arg("doctor").arg(spec("s1a.yaml")).assert().success();
    let words = stdout(&a);
    assert!(!words.contains("hf_secretDOCTORtoken123"));
    assert!(words.contains("with the VLM engine") && words.contains("libtorch 2.13.0+cu130 from "), "{words}");
    assert!(words.contains("this binary was built against 2.13.0+cu130"), "{words}");
    assert!(words.contains("GPU: none visible to libtorch") && words.contains("missing for a GPU run: a GPU"), "{words}");
    assert!(words.contains("Hub token: HF_TOKEN") && words.contains("Spec's model: bpals/tiny-qwen2-vl-synthetic@trained-v1"), "{words}");
    assert!(words.trim_end().ends_with(&format!("  bpals-release build {}", spec("s1a.yaml").display())), "{words}");
    assert_eq!(r["vlm_feature"], true);
    assert_eq!(r["hub_token"], "HF_TOKEN");
    assert_eq!(r["libtorch"]["dtypes"][0], serde_json::json!(["f32", true]));
    assert_eq!(r["model"]["backend"], "qwen2vl");
    assert_eq!(
        r["engine_families"],
        serde_json::json!(["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "gemma4"])
    );
    assert!(r["model"]["local_dir"].as_str().unwrap().ends_with("fixtures/vlm/trained/qwen2_vl"), "{r}");
    assert!(r["next_step"].as_str().unwrap().len() > 10);
}

/// Qwen3-VL in the published layout: probe on the sharded checkpoint with an NIH-size image
/// (16-pixel patches: 64 x 64 patches, 1,024 image tokens), describe on the untied one.
#[test]
fn probe_and_describe_run_qwen3_vl() {
    probe_and_describe("qwen3_vl");
}

/// What a broken or unsupported checkpoint says: the file and the key.
#[test]
fn unsupported_and_broken_qwen3_vl_checkpoints_are_named() {
    let s = Scratch::new();
    let probe = |dir: &std::path::Path| probe_failure(dir, "qwen3_vl");
    let broken = |name: &str, change: &dyn Fn(&std::path::Path)| broken_copy(&s, "qwen3_vl", name, change);

    let omni = broken("omni", &|d| edit_config(d, &|v| v["model_type"] = "qwen3_omni_moe".into()));
    let err = probe(&omni);
    assert!(err.contains("config.json: key `model_type`: \"qwen3_omni_moe\""), "{err}");
    assert!(err.contains("it runs qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5, qwen3_vl_moe, qwen3_5_moe, gemma4"), "{err}");
    // A dense config relabelled as the mixture of experts names the key it lacks.
    let moe = broken("moe", &|d| edit_config(d, &|v| v["model_type"] = "qwen3_vl_moe".into()));
    let err = probe(&moe);
    assert!(err.contains("config.json: key `text_config.num_experts`: missing"), "{err}");

    let no_head_dim = broken("no-head-dim", &|d| edit_config(d, &|v| drop(v["text_config"].as_object_mut().unwrap().remove("head_dim"))));
    let err = probe(&no_head_dim);
    assert!(err.contains("config.json: key `text_config.head_dim`: missing"), "{err}");

    let no_deepstack = broken("no-deepstack", &|d| {
        edit_config(d, &|v| drop(v["vision_config"].as_object_mut().unwrap().remove("deepstack_visual_indexes")))
    });
    let err = probe(&no_deepstack);
    assert!(err.contains("config.json: key `vision_config.deepstack_visual_indexes`: missing"), "{err}");

    let missing_shard = broken("missing-shard", &|d| std::fs::remove_file(d.join("model-00002-of-00002.safetensors")).unwrap());
    let err = probe(&missing_shard);
    assert!(
        err.contains("model.safetensors.index.json: weight_map names model-00002-of-00002.safetensors, which is not in the directory"),
        "{err}"
    );

    // A wider vision MLP in the config than in the shards: the shard holding the tensor is named.
    let wrong_shape = broken("wrong-shape", &|d| edit_config(d, &|v| v["vision_config"]["intermediate_size"] = 40.into()));
    let err = probe(&wrong_shape);
    assert!(
        err.contains(
            "-of-00002.safetensors: tensor visual.blocks.0.mlp.linear_fc1.weight has shape [48, 32]; config.json implies [40, 32]"
        ),
        "{err}"
    );
}

/// Qwen3.5 in the published layout: probe on the sharded checkpoint with the NIH-size image
/// (1,024 image tokens through the hybrid decoder), describe on the untied one.
#[test]
fn probe_and_describe_run_qwen3_5() {
    probe_and_describe("qwen3_5");
}

/// Qwen3.5's own ways to be broken: a dense config labelled as the MoE, a layer kind the engine does not know, a
/// convolution kernel the weights contradict, a missing decay parameter.
#[test]
fn unsupported_and_broken_qwen3_5_checkpoints_are_named() {
    let s = Scratch::new();
    let probe = |dir: &std::path::Path| probe_failure(dir, "qwen3_5");
    let broken = |name: &str, change: &dyn Fn(&std::path::Path)| broken_copy(&s, "qwen3_5_untied", name, change);

    let err = probe(&broken("moe", &|d| edit_config(d, &|v| v["model_type"] = "qwen3_5_moe".into())));
    assert!(err.contains("config.json: key `text_config.num_experts`: missing"), "{err}");

    let err = probe(&broken("layer-type", &|d| edit_config(d, &|v| v["text_config"]["layer_types"][2] = "sliding_attention".into())));
    assert!(
        err.contains("config.json: key `text_config.layer_types`: entry 2 is \"sliding_attention\": expected \"linear_attention\" or \"full_attention\""),
        "{err}"
    );

    let err = probe(&broken("kernel", &|d| edit_config(d, &|v| v["text_config"]["linear_conv_kernel_dim"] = 3.into())));
    assert!(
        err.contains(
            "model.safetensors: tensor model.layers.0.linear_attn.conv1d.weight has shape [96, 1, 4]; config.json implies [96, 1, 3]"
        ),
        "{err}"
    );

    // The weights without layer 0's A_log: the checkpoint file and the tensor are named.
    let err = probe(&broken("no-a-log", &|d| {
        let file = d.join("model.safetensors");
        let tensors: Vec<(String, tch::Tensor)> = tch::Tensor::read_safetensors(&file)
            .unwrap()
            .into_iter()
            .filter(|(name, _)| name != "model.language_model.layers.0.linear_attn.A_log")
            .collect();
        tch::Tensor::write_safetensors(&tensors, &file).unwrap();
    }));
    assert!(err.contains("model.safetensors) has no tensor model.layers.0.linear_attn.A_log"), "{err}");
}

/// Runs `probe` on a model directory expected to be refused; returns its stderr.
fn probe_failure(dir: &std::path::Path, image_of: &str) -> String {
    let a = bin()
        .args(["probe", "--model"])
        .arg(dir)
        .args(["--question", "Is it?", "--image", &image(image_of, "odd-201x59.png")])
        .assert()
        .failure();
    stderr(&a)
}

/// A copy of a fixture model in the scratch folder, changed by `change`.
fn broken_copy(s: &Scratch, fixture: &str, name: &str, change: &dyn Fn(&std::path::Path)) -> std::path::PathBuf {
    let dir = s.path(name);
    copy_tree(&repo().join("fixtures/vlm").join(fixture), &dir);
    change(&dir);
    dir
}

/// Rewrites a model directory's config.json through `f`.
fn edit_config(dir: &std::path::Path, f: &dyn Fn(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// `probe` of a family's sharded fixture on its 1024 x 1024 golden image gives transformers'
/// yes/no logits within 1e-4 (1,024 image tokens); `describe` on its untied fixture runs.
fn probe_and_describe(family: &str) {
    let a = bin()
        .args(["probe", "--model", &model(family), "--image", &image(family, "nih-1024.png")])
        .args(["--question", "Is there a pleural effusion in this chest X-ray?"])
        .assert()
        .success();
    let r: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(r["model"]["family"], family);
    assert_eq!(r["image"]["grid_thw"], serde_json::json!([1, 64, 64]));
    assert_eq!(r["image"]["image_tokens"], 1024);
    let goldens: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo().join("fixtures/vlm").join(family).join("goldens/goldens.json")).unwrap()).unwrap();
    let want = &goldens["cases"][0]["yes_no_logits"];
    for (key, i) in [("logit_yes", 0), ("logit_no", 1)] {
        let (got, want) = (r["questions"][0][key].as_f64().unwrap(), want[i].as_f64().unwrap());
        assert!((got - want).abs() < 1e-4, "{key}: {got} vs transformers {want}");
    }

    let untied = format!("{family}_untied");
    let a = bin()
        .args(["describe", "--model", &model(&untied), "--image", &image(&untied, "tall-77x123.png")])
        .args(["--prompt", "Describe the findings.", "--max-new-tokens", "6"])
        .assert()
        .success();
    let r: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(r["model"]["family"], family);
    assert_eq!(r["new_tokens"], 6);
}

/// The bench commands read a model's image settings from either file a checkpoint ships:
/// `preprocessor_config.json`, or Gemma 4's `processor_config.json`, which holds them as
/// `image_processor` (transformers 5 writes it so); an error there names the nested key.
#[test]
fn bench_prep_reads_a_processor_config_as_its_preprocessor() {
    let s = Scratch::new();
    let flat = repo().join("benches/configs/gemma4_e4b.preprocessor.json");
    let settings: serde_json::Value = serde_json::from_slice(&std::fs::read(&flat).unwrap()).unwrap();
    let nested = s.path("processor_config.json");
    std::fs::write(&nested, serde_json::json!({"processor_class": "Gemma4Processor", "image_processor": settings}).to_string()).unwrap();
    let prep = |file: &std::path::Path| {
        bin().args(["bench", "prep", "--images", "1", "--size", "256", "--threads", "1", "--preprocessor"]).arg(file).assert()
    };
    let report = |a: assert_cmd::assert::Assert| {
        let r: serde_json::Value = serde_json::from_str(&stdout(&a.success())).unwrap();
        (r["resized"].clone(), r["image_tokens"].clone())
    };
    let from_nested = report(prep(&nested));
    assert_eq!(from_nested, report(prep(&flat)));
    assert_eq!(from_nested.1, 256);

    std::fs::write(&nested, r#"{"image_processor": {"patch_size": 16}}"#).unwrap();
    let err = stderr(&prep(&nested).failure());
    assert!(err.contains("processor_config.json: key image_processor.min_pixels"), "{err}");
}

/// `features` on the sample with the engine, for each definition: one vector per selected image
/// as wide as the decoder, finite, the same bytes whatever `--jobs`; and with confident learning
/// in the spec, the scoring pass keeps the same bits a features pass computes.
#[test]
fn features_of_each_definition_repeat_to_the_byte_and_are_kept_by_scoring() {
    for definition in ["vision_tower_mean", "decoder_prefix_end"] {
        features_repeat_and_are_kept(definition);
    }
}

fn features_repeat_and_are_kept(definition: &str) {
    let s = Scratch::new();
    let features = |spec: &Path, out: &str, cache: &Path, extra: &[&str]| {
        let a = bin()
            .arg("features")
            .arg(spec)
            .arg("--out")
            .arg(s.path(out))
            .args(["--no-progress", "--cache-dir"])
            .arg(cache)
            .args(extra)
            .assert()
            .success();
        stdout(&a)
    };
    let said = features(&spec("s1a.yaml"), "a.parquet", &s.cache(), &["--definition", definition, "--jobs", "2"]);
    let hidden = {
        let config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(repo().join("fixtures/vlm/trained/qwen2_vl/config.json")).unwrap()).unwrap();
        config["text_config"]["hidden_size"].as_u64().unwrap()
    };
    assert!(said.contains(&format!("640 images x {hidden} features ({definition}")), "{said}");
    features(&spec("s1a.yaml"), "b.parquet", &s.path("other-cache"), &["--definition", definition, "--jobs", "1"]);
    assert_eq!(std::fs::read(s.path("a.parquet")).unwrap(), std::fs::read(s.path("b.parquet")).unwrap(), "{definition}");

    // With confident learning in the spec, the scoring pass keeps its images' features: the same
    // bits as a features pass computes (here for one shard's images, through a cache of its own).
    let cl_spec = s
        .write("cl.yaml", &format!("extends: {}\nsignal:\n  confident_learning: {{features: {definition}}}\n", spec("s1a.yaml").display()));
    let cache = s.path("scoring-cache");
    let infer = bin().arg("infer").arg(&cl_spec).args(["--shard", "1/20", "--no-progress", "--cache-dir"]).arg(&cache).assert().success();
    let said = features(&cl_spec, "c.parquet", &cache, &[]);
    let from_cache: usize = said.split(" from the cache").next().and_then(|t| t.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(from_cache > 0 && from_cache < 640, "one shard's features come from its scoring pass: {said}\n{}", stderr(&infer));
    assert_eq!(std::fs::read(s.path("a.parquet")).unwrap(), std::fs::read(s.path("c.parquet")).unwrap(), "{definition}");
}
