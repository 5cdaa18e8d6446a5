//! The tiny models trained on synthetic images (fixtures/vlm/train_tiny.py) do what the demo
//! needs, through the native engine: they reason in `<think>`/`<answer>` form, and their boxes,
//! in each family's native format, land on the findings the sample draws.
#![cfg(feature = "vlm")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use bpals_vlm::engine::{DeviceChoice, DtypeChoice, Engine, EngineOptions};
use bpals_vlm::grounding::{BoxStatus, ImageBox};
use bpals_vlm::Thinking;
use common::*;

fn trained(family: &str) -> PathBuf {
    repo().join("fixtures/vlm/trained").join(family)
}

fn engine(family: &str) -> Engine {
    let options =
        EngineOptions { device: DeviceChoice::Cpu, dtype: DtypeChoice::F32, min_pixels: None, max_pixels: None, allow_cpu: false };
    Engine::open(&trained(family), &options).unwrap()
}

/// The task prompts the model was trained on (its training.json).
fn training(family: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(trained(family).join("training.json")).unwrap()).unwrap()
}

/// (image, label) -> drawn box, from the sample's truth_boxes.csv.
fn drawn_boxes() -> BTreeMap<(String, String), ImageBox> {
    let text = std::fs::read_to_string(repo().join("fixtures/sample/truth_boxes.csv")).unwrap();
    let mut boxes = BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[2].is_empty() {
            continue; // a support device: no box
        }
        let v: Vec<f64> = f[2..6].iter().map(|x| x.parse().unwrap()).collect();
        boxes.insert((f[0].to_string(), f[1].to_string()), ImageBox { label: None, x1: v[0], y1: v[1], x2: v[0] + v[2], y2: v[1] + v[3] });
    }
    boxes
}

fn grounding_lands_on_the_drawn_findings(family: &str) {
    let engine = engine(family);
    let t = training(family);
    let prompt = t["prompts"]["ground"][family].as_str().unwrap();
    let boxes = drawn_boxes();
    // Images with exactly one drawn finding, so the question has one right answer.
    let mut per_image: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (image, label) in boxes.keys() {
        per_image.entry(image).or_default().push(label);
    }
    let cases: Vec<(&str, &str)> = per_image.iter().filter(|(_, l)| l.len() == 1).map(|(i, l)| (*i, l[0])).take(24).collect();
    assert!(cases.len() >= 20, "{} single-finding images", cases.len());
    // A box that is missing, malformed or outside the image counts as IoU 0.
    let (mut ious, mut ok) = (Vec::new(), 0);
    for (image, label) in cases {
        let words = t["finding_words"][label].as_str().unwrap();
        let path = repo().join("fixtures/sample/images").join(image);
        let report = engine.describe(&path, &prompt.replace("{finding}", words), 64, Thinking::Off).unwrap();
        let native = match family {
            "qwen2_vl" => report.response.contains("<|box_start|>("),
            _ => report.response.contains("\"bbox_2d\": ["),
        };
        assert!(native, "{image} {label}: not the family's format: {:?}", report.response);
        let drawn = &boxes[&(image.to_string(), label.to_string())];
        if report.grounding.status == BoxStatus::Ok {
            ok += 1;
            ious.push(report.grounding.boxes[0].iou(drawn));
        } else {
            ious.push(0.0);
        }
    }
    let mean = ious.iter().sum::<f64>() / ious.len() as f64;
    eprintln!("{family}: mean IoU {mean:.3} of the model's box with the drawn one over {} images ({ok} boxes ok)", ious.len());
    assert!(ok * 10 >= ious.len() * 8, "{family}: only {ok} of {} answers hold a box inside the image", ious.len());
    assert!(mean >= 0.5, "{family}: mean IoU {mean:.3}: {ious:?}");
}

#[test]
fn qwen2_vl_boxes_land_on_the_drawn_findings() {
    grounding_lands_on_the_drawn_findings("qwen2_vl");
}

#[test]
fn qwen2_5_vl_boxes_land_on_the_drawn_findings() {
    grounding_lands_on_the_drawn_findings("qwen2_5_vl");
}

/// Reasoning: every answer is well-formed `<think>...</think><answer>...</answer>`, and the
/// answer's findings match the drawn ones (mean Jaccard, the NV-Reason-CXR reward).
fn reasoning_names_the_drawn_findings(family: &str) {
    let engine = engine(family);
    let prompt = training(family)["prompts"]["reason"].as_str().unwrap().to_string();
    let truth = std::fs::read_to_string(repo().join("fixtures/sample/truth.csv")).unwrap();
    let mut drawn: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for line in truth.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let entry = drawn.entry(f[0]).or_default();
        if f[2] == "1" {
            entry.insert(f[1]);
        }
    }
    let mut scores = Vec::new();
    for (image, findings) in drawn.iter().take(24) {
        let r = engine.describe(&repo().join("fixtures/sample/images").join(image), &prompt, 96, Thinking::Off).unwrap();
        let well_formed = r.response.starts_with("<think>") && r.response.contains("</think><answer>") && r.response.ends_with("</answer>");
        assert!(well_formed && !r.truncated_by_max_new_tokens, "{image}: {:?}", r.response);
        assert!(!r.think.as_deref().unwrap_or_default().is_empty(), "{image}: {:?}", r.response);
        let said: BTreeSet<&str> = r.answer.as_deref().unwrap().split(", ").collect();
        scores.push(said.intersection(findings).count() as f64 / said.union(findings).count() as f64);
    }
    let mean = scores.iter().sum::<f64>() / scores.len() as f64;
    eprintln!("{family}: mean Jaccard {mean:.3} of the answered findings with the drawn ones over {} images", scores.len());
    assert!(mean >= 0.6, "{family}: mean Jaccard {mean:.3}: {scores:?}");
}

#[test]
fn qwen2_vl_reasons_about_what_is_drawn() {
    reasoning_names_the_drawn_findings("qwen2_vl");
}

#[test]
fn qwen2_5_vl_reasons_about_what_is_drawn() {
    reasoning_names_the_drawn_findings("qwen2_5_vl");
}

/// `describe` from the CLI: the reasoning split into its sections, a box in the family's format,
/// and a report paragraph.
#[test]
fn describe_prints_reasoning_boxes_and_reports() {
    let image = repo().join("fixtures/sample/images/00000001_001.png");
    let describe = |family: &str, prompt: &str| -> serde_json::Value {
        let a =
            bin().args(["describe", "--model"]).arg(trained(family)).args(["--prompt", prompt, "--image"]).arg(&image).assert().success();
        serde_json::from_str(&stdout(&a)).unwrap()
    };
    for family in ["qwen2_vl", "qwen2_5_vl"] {
        let t = training(family);
        let r = describe(family, t["prompts"]["reason"].as_str().unwrap());
        assert!(r["think"].as_str().is_some_and(|s| !s.is_empty()) && r["answer"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        let r = describe(family, &t["prompts"]["ground"][family].as_str().unwrap().replace("{finding}", "enlarged heart"));
        assert_eq!(r["grounding"]["status"], "ok", "{r}");
        let native = if family == "qwen2_vl" { "<|box_start|>(" } else { "\"bbox_2d\": [" };
        assert!(r["response"].as_str().unwrap().contains(native), "{r}");
        let r = describe(family, t["prompts"]["report"].as_str().unwrap());
        let response = r["response"].as_str().unwrap();
        assert!(response.starts_with("FINDINGS: ") && response.contains(" IMPRESSION: "), "{response}");
        assert_eq!(r["truncated_by_max_new_tokens"], false, "{r}");
    }
}

/// Batched decoding (several images, several prompts each, mixed lengths) gives the same tokens
/// as decoding each prompt alone, in f32 on the CPU.
fn batched_generation_equals_one_at_a_time(family: &str) {
    use bpals_vlm::generate::{GenerationImage, GenerationPrompt};
    use bpals_vlm::pixels;
    let engine = engine(family);
    let (dir, model) = (&engine.dir, &engine.model);
    let t = training(family);
    let ground = t["prompts"]["ground"][family].as_str().unwrap();
    let texts = [
        ground.replace("{finding}", "pleural effusion"),
        ground.replace("{finding}", "nodule"),
        t["prompts"]["reason"].as_str().unwrap().to_string(),
        "Is the heart enlarged?".to_string(),
    ];
    let images = ["00000001_000.png", "00000002_000.png", "00000005_000.png"];
    let mut encoded = Vec::new();
    for name in images {
        let image = image::open(repo().join("fixtures/sample/images").join(name)).unwrap();
        let (pixel_values, grid) = pixels::pixel_values(&image, &dir.preprocessor, model.device).unwrap();
        encoded.push((model.encode_image(&pixel_values, grid), grid));
    }
    let batch: Vec<GenerationImage> = encoded.iter().map(|(e, g)| GenerationImage { features: e, grid: *g }).collect();
    // Every image gets a different subset of the prompts, so prefixes and suffixes are ragged.
    let mut ids = Vec::new();
    for (i, (_, grid)) in encoded.iter().enumerate() {
        for text in texts.iter().skip(i % 2) {
            ids.push((i, dir.prompt(text, *grid, Thinking::Off).unwrap().input_ids));
        }
    }
    let prompts: Vec<GenerationPrompt> = ids.iter().map(|(i, p)| GenerationPrompt { image: *i, ids: p }).collect();
    let stop = dir.stop_token_ids();
    let together = model.generate_batch(&batch, &prompts, 40, &stop).unwrap();
    assert_eq!(together.len(), prompts.len());
    for (prompt, batched) in prompts.iter().zip(&together) {
        let one = GenerationPrompt { image: 0, ids: prompt.ids };
        let alone = model.generate_batch(&batch[prompt.image..=prompt.image], &[one], 40, &stop).unwrap().remove(0);
        assert_eq!(batched, &alone, "image {} prompt of {} tokens", prompt.image, prompt.ids.len());
    }
    assert!(together.iter().any(|g| !g.truncated) && together.iter().any(|g| g.tokens.len() > 10), "{together:?}");
}

#[test]
fn batched_generation_equals_one_at_a_time_qwen2_vl() {
    batched_generation_equals_one_at_a_time("qwen2_vl");
}

#[test]
fn batched_generation_equals_one_at_a_time_qwen2_5_vl() {
    batched_generation_equals_one_at_a_time("qwen2_5_vl");
}
