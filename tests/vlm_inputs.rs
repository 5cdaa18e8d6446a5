//! The model-directory side of the VLM against transformers' own outputs on the tiny fixture
//! models (fixtures/vlm/gen_tiny_models.py): config layouts, image sizes, the rendered prompt,
//! its token ids and the M-RoPE position ids.

mod common;

use std::path::PathBuf;

use bpals_vlm::{self as vlm, ChatTemplateSource, ModelDir, Thinking};
use common::*;

fn fixture(family: &str) -> PathBuf {
    repo().join("fixtures/vlm").join(family)
}

fn goldens(family: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixture(family).join("goldens/goldens.json")).unwrap()).unwrap()
}

#[test]
fn both_families_load_with_their_templates_from_different_files() {
    let a = ModelDir::open(&fixture("qwen2_vl")).unwrap();
    assert_eq!(a.config.family.name(), "qwen2_vl");
    assert_eq!(a.chat_template_source, ChatTemplateSource::ChatTemplateJson);
    assert_eq!((a.config.vision.hidden_size, a.config.vision.intermediate_size, a.config.vision.out_hidden_size), (32, 64, 64));
    assert!(a.config.text.tie_word_embeddings);
    let b = ModelDir::open(&fixture("qwen2_5_vl")).unwrap();
    assert_eq!(b.config.family.name(), "qwen2_5_vl");
    assert_eq!(b.chat_template_source, ChatTemplateSource::ChatTemplateJinja);
    assert_eq!(b.config.vision.window_size, Some(56));
    assert_eq!(b.config.vision.fullatt_block_indexes, vec![1, 3]);
    assert_eq!(b.weights.len(), 1);
}

#[test]
fn the_flat_hub_layout_reads_as_the_nested_one() {
    let read =
        |name: &str| -> serde_json::Value { serde_json::from_slice(&std::fs::read(fixture("qwen2_vl").join(name)).unwrap()).unwrap() };
    let nested = vlm::ModelConfig::from_json(&read("config.json")).unwrap();
    let flat = vlm::ModelConfig::from_json(&read("config.flat.json")).unwrap();
    assert_eq!(nested, flat);
    assert_eq!(nested.text.mrope_section, vec![2, 3, 3]);
}

#[test]
fn sizes_prompts_token_ids_and_positions_match_transformers() {
    for family in ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"] {
        let dir = ModelDir::open(&fixture(family)).unwrap();
        let g = goldens(family);
        let (yes, no) = dir.answer_token_ids().unwrap();
        assert_eq!(
            (yes as u64, no as u64),
            (g["answer_token_ids"]["Yes"].as_u64().unwrap(), g["answer_token_ids"]["No"].as_u64().unwrap())
        );
        for case in g["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let image = image::open(fixture(family).join("goldens").join(case["image"].as_str().unwrap())).unwrap();
            let p = &dir.preprocessor;
            let (h, w) =
                vlm::preprocess::smart_resize(image.height() as usize, image.width() as usize, p.factor(), p.min_pixels, p.max_pixels)
                    .unwrap();
            let grid: Vec<usize> = case["image_grid_thw"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
            assert_eq!((1, h / p.patch_size, w / p.patch_size), (grid[0], grid[1], grid[2]), "{family} {name}: resized size");

            let prompt = dir.prompt(case["question"].as_str().unwrap(), (grid[0], grid[1], grid[2]), Thinking::Off).unwrap();
            assert_eq!(prompt.text, case["prompt"].as_str().unwrap(), "{family} {name}: rendered template");
            let expected: Vec<u32> = case["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(prompt.input_ids, expected, "{family} {name}: token ids");

            let (positions, _) = vlm::rope::position_ids(
                &prompt.input_ids,
                dir.config.image_token_id,
                &[(grid[0], grid[1], grid[2])],
                dir.config.vision.spatial_merge_size,
            )
            .unwrap();
            for (axis, want) in case["position_ids"].as_array().unwrap().iter().enumerate() {
                let want: Vec<i64> = want.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
                assert_eq!(positions[axis], want, "{family} {name}: position ids, axis {axis}");
            }
        }
    }
}

#[test]
fn bad_model_directories_say_what_is_wrong() {
    let s = Scratch::new();
    let base = fixture("qwen2_vl");
    let case = |name: &str, edit: &dyn Fn(&std::path::Path)| -> String {
        let dir = s.path(name);
        copy_tree(&base, &dir);
        edit(&dir);
        match ModelDir::open(&dir) {
            Ok(_) => panic!("{name}: opened"),
            Err(e) => e.to_string(),
        }
    };
    let edit_config = |dir: &std::path::Path, f: &dyn Fn(&mut serde_json::Value)| {
        let path = dir.join("config.json");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
    };
    let e = case("no-config", &|d| std::fs::remove_file(d.join("config.json")).unwrap());
    assert!(e.contains("no config.json"), "{e}");
    let e = case("arch", &|d| {
        edit_config(d, &|v| {
            v["model_type"] = "llava".into();
            v["architectures"] = serde_json::json!(["LlavaForConditionalGeneration"]);
        })
    });
    assert!(
        e.contains("key `model_type`")
            && e.contains("\"llava\"")
            && e.contains("runs qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5, qwen3_vl_moe, qwen3_5_moe"),
        "{e}"
    );
    let e = case("mrope", &|d| edit_config(d, &|v| v["text_config"]["rope_parameters"]["mrope_section"] = serde_json::json!([2, 2, 2])));
    assert!(e.contains("key `mrope_section`") && e.contains("expected head_dim / 2 = 8"), "{e}");
    let e = case("no-weights", &|d| std::fs::remove_file(d.join("model.safetensors")).unwrap());
    assert!(e.contains("no weights") && e.contains("model.safetensors.index.json"), "{e}");
    let e = case("shard", &|d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(d.join("model.safetensors.index.json"), r#"{"weight_map": {"a": "model-00001-of-00002.safetensors"}}"#).unwrap();
    });
    assert!(e.contains("weight_map names model-00001-of-00002.safetensors"), "{e}");
    let e = case("template", &|d| {
        std::fs::remove_file(d.join("chat_template.json")).unwrap();
        let tc = d.join("tokenizer_config.json");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&tc).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("chat_template");
        std::fs::write(tc, serde_json::to_vec(&v).unwrap()).unwrap();
    });
    assert!(e.contains("no chat template"), "{e}");
    let e = case("tokenizer", &|d| std::fs::write(d.join("tokenizer.json"), "{ not json").unwrap());
    assert!(e.contains("tokenizer.json: not a tokenizer"), "{e}");
    let e = case("image-token", &|d| edit_config(d, &|v| v["image_token_id"] = serde_json::json!(7)));
    assert!(e.contains("tokenizer.json: <|image_pad|> is token") && e.contains("expected config.json's image_token_id 7"), "{e}");
    let e = case("preproc", &|d| std::fs::write(d.join("preprocessor_config.json"), r#"{"patch_size": 14}"#).unwrap());
    assert!(e.contains("preprocessor_config.json: key `min_pixels`"), "{e}");
}

/// A copy of the Qwen2.5-VL fixture whose chat_template.jinja is `template`.
fn with_template(s: &Scratch, name: &str, template: &str) -> PathBuf {
    let dir = s.path(name);
    copy_tree(&fixture("qwen2_5_vl"), &dir);
    std::fs::write(dir.join("chat_template.jinja"), template).unwrap();
    dir
}

/// The fixture's own template with a Qwen3.5-style generation prompt (this project's words).
const SWITCHED: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}{% if c.type == 'image' %}\
    <|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}\
    {% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}\
    <think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

#[test]
fn a_template_with_a_thinking_switch_is_rendered_with_it_off_for_scores() {
    let s = Scratch::new();
    let dir = ModelDir::open(&with_template(&s, "model", SWITCHED)).unwrap();
    let off = dir.prompt("Is there an effusion?", (1, 2, 2), Thinking::Off).unwrap();
    assert!(off.text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n") && !off.opens_reasoning, "{:?}", off.text);
    let on = dir.prompt("Is there an effusion?", (1, 2, 2), Thinking::On).unwrap();
    assert!(on.text.ends_with("<|im_start|>assistant\n<think>\n") && on.opens_reasoning, "{:?}", on.text);
    assert_ne!(off.input_ids, on.input_ids);

    // doctor --model shows what the template reads and what the tool sets.
    let a =
        bin().args(["doctor", "--json", "--model"]).arg(s.path("model")).args(["--question", "Is there an effusion?"]).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let m = &report["model_dir"];
    assert_eq!((m["family"].as_str(), m["template_reads"].clone()), (Some("qwen2_5_vl"), serde_json::json!(["enable_thinking"])));
    assert_eq!(
        (m["sets_for_scores"].clone(), m["sets_for_thinking_on"].clone()),
        (serde_json::json!({"enable_thinking": false}), serde_json::json!({"enable_thinking": true}))
    );
    assert_eq!(m["prompts"][0]["input_ids"], serde_json::json!(off.input_ids), "the engine's prompt, one image token");
    assert_eq!(m["prompts"][1]["text"].as_str(), Some(on.text.as_str()));
}

#[test]
fn a_template_the_tool_cannot_close_is_refused_naming_the_file_and_the_key() {
    let s = Scratch::new();
    let always_open = SWITCHED.replace("enable_thinking is defined and enable_thinking is false", "false");
    let err = ModelDir::open(&with_template(&s, "open", &always_open)).err().unwrap().to_string();
    assert!(err.contains("open/chat_template.jinja") && err.contains("ends inside an open <think> block"), "{err}");
    assert!(err.contains("model.id or model.path"), "{err}");

    let unknown = SWITCHED.replace("enable_thinking is defined and enable_thinking is false", "not thinking_mode");
    let err = ModelDir::open(&with_template(&s, "unknown", &unknown)).err().unwrap().to_string();
    assert!(err.contains("unknown/chat_template.jinja") && err.contains("reads `thinking_mode`, a reasoning switch"), "{err}");
    assert!(err.contains("model.thinking"), "{err}");
    // The command line says the same, before any image is read.
    let a = bin().arg("doctor").arg("--model").arg(s.path("unknown")).assert().failure();
    assert!(stderr(&a).contains("thinking_mode"), "{}", stderr(&a));
}
