//! The full-size architectures of benches/configs (Qwen2.5-VL-7B, Qwen3-VL-8B, the mixtures of
//! experts Qwen3-VL-30B-A3B and Qwen3.6-35B-A3B, and Gemma 4 E4B, 26B-A4B and 31B) on the CPU, cut to two text layers and two
//! vision blocks with every width kept (`bench scoring --layers 2`): the real shapes
//! (151,936-token vocabulary, 4,096-wide decoder, DeepStack mergers, 128 and 256 experts) run on
//! every machine, not only where a GPU is lent. About 10 s and 7 GB per dense model, up to 11 GB
//! for the widest MoE slice; one at a time.
#![cfg(feature = "vlm")]

mod common;

use common::*;

#[test]
fn full_size_slices_score_on_the_cpu() {
    // (config, image tokens of a 256 x 256 image, parameters of the slice and its active
    // parameters, in billions)
    for (name, tokens, billions, active) in [
        ("qwen3_vl_8b", 64, 1.7..1.9, 1.7..1.9),
        ("qwen2_5_vl_7b", 81, 1.5..1.8, 1.5..1.8),
        ("qwen3_vl_30b_a3b", 64, 1.9..2.1, 0.8..0.95),
        ("qwen3_6_35b_a3b", 64, 2.6..2.9, 1.1..1.3),
        // Gemma 4 resizes the 256-pixel image up to its 280-token budget: 768 x 768, 256 tokens.
        ("gemma4_e4b", 256, 1.0..1.1, 1.0..1.1),
        ("gemma4_26b_a4b", 256, 2.4..2.5, 1.0..1.05),
        ("gemma4_31b", 256, 2.45..2.55, 2.45..2.55),
    ] {
        let configs = repo().join("benches/configs");
        let a = bin()
            .args(["bench", "scoring"])
            .arg("--config")
            .arg(configs.join(format!("{name}.config.json")))
            .arg("--preprocessor")
            .arg(configs.join(format!("{name}.preprocessor.json")))
            .args(["--device", "cpu", "--layers", "2", "--images", "1", "--warmup", "0", "--size", "256", "--questions", "3"])
            .assert()
            .success();
        let r: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
        assert_eq!((r["text_layers"].as_u64(), r["vision_blocks"].as_u64()), (Some(2), Some(2)), "{name}: {r}");
        assert_eq!(r["image_tokens"], tokens, "{name}: {r}");
        let parameters = r["parameters"].as_f64().unwrap() / 1e9;
        assert!(billions.contains(&parameters), "{name}: {parameters}B parameters");
        let active_parameters = r["active_parameters"].as_f64().unwrap() / 1e9;
        assert!(active.contains(&active_parameters), "{name}: {active_parameters}B active parameters");
        assert!(r["tflop_per_image"].as_f64().unwrap() > 0.0 && r["images_per_second"].as_f64().unwrap() > 0.0, "{name}: {r}");
    }
}
