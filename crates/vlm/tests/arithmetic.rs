//! The CPU's arithmetic revision (`bpals_vlm::arithmetic::CPU`) names the bits it makes: the committed
//! fixture models' yes/no logits, scored as a build scores them (the prefix held once, one CPU
//! thread, passes of one image and of three), are kept in `fixtures/vlm/arithmetic-cpu.json`
//! under the revision that made them. A change to the engine that changes them must raise the
//! revision, or scores cached by the old engine would be mixed into new builds.
//!
//! After raising it, record the new bits: `BPALS_RECORD_ARITHMETIC=1 cargo test -p bpals-vlm --features libtorch --test arithmetic`.
//! The record is this test's output; the models are the committed fixtures (written by
//! fixtures/vlm/gen_tiny_*.py and train_tiny.py), the images their goldens' own.
#![cfg(feature = "libtorch")]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bpals_vlm::arithmetic;
use bpals_vlm::model::{PassImage, VlModel};
use bpals_vlm::{pixels, ModelDir, Thinking, YesNo};
use common::repo;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind};

/// The fixtures whose weights are committed (the mixture-of-experts and Gemma 4 fixtures are
/// written at test time by transformers' initialisers, whose bits are not this engine's to pin).
const FIXTURES: [&str; 7] = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_untied", "qwen3_5", "qwen3_5_untied", "trained/qwen2_vl"];

const QUESTIONS: [&str; 3] =
    ["Is there a pleural effusion in this chest X-ray?", "Does this radiograph show cardiomegaly?", "Is a chest tube visible?"];

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Record {
    /// `bpals_vlm::arithmetic::CPU` when these bits were recorded.
    revision: u32,
    /// Per fixture, per pass size: each score's yes and no logits as f32 bits, in hex.
    logits: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

fn record_path() -> PathBuf {
    repo().join("fixtures/vlm/arithmetic-cpu.json")
}

/// The image a fixture is scored on: the 1024 x 1024 NIH stand-in where the fixture has one,
/// the trained model's own NIH-like image, or else its tall odd-sized one.
fn image_of(model: &Path) -> image::DynamicImage {
    let goldens = model.join("goldens");
    let name = ["nih-1024.png", "00000001_001.png", "tall-77x123.png"].into_iter().find(|n| goldens.join(n).is_file()).unwrap();
    image::open(goldens.join(name)).unwrap()
}

/// Two images (one and its mirror image) times [`QUESTIONS`], scored in passes of `per_pass`.
fn logit_bits(model_path: &Path, per_pass: usize) -> Vec<String> {
    let dir = ModelDir::open(model_path).unwrap();
    let model = VlModel::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let answer = dir.answer_token_ids().unwrap();
    let image = image_of(model_path);
    let encoded: Vec<_> = [image.clone(), image.fliph()]
        .iter()
        .map(|image| {
            let (pixels, grid) = pixels::pixel_values(image, &dir.preprocessor, Device::Cpu).unwrap();
            (model.encode_image(&pixels, grid), grid)
        })
        .collect();
    let prompts: Vec<Vec<Vec<u32>>> = encoded
        .iter()
        .map(|(_, grid)| QUESTIONS.iter().map(|q| dir.prompt(q, *grid, Thinking::Off).unwrap().input_ids).collect())
        .collect();
    let images: Vec<PassImage> =
        encoded.iter().zip(&prompts).map(|((features, grid), prompts)| PassImage { prompts, features, grid: *grid }).collect();
    let scores: Vec<YesNo> = images.chunks(per_pass).flat_map(|pass| model.score_pass(pass, answer, per_pass).unwrap().concat()).collect();
    scores.iter().flat_map(|s| [s.logit_yes, s.logit_no]).map(|x| format!("{:08x}", x.to_bits())).collect()
}

fn as_f32(hex: &str) -> f32 {
    f32::from_bits(u32::from_str_radix(hex, 16).unwrap())
}

#[test]
fn the_cpu_arithmetic_revision_names_the_bits_it_makes() {
    tch::set_num_threads(1);
    let mut now = Record { revision: arithmetic::CPU, logits: BTreeMap::new() };
    for fixture in FIXTURES {
        let path = repo().join("fixtures/vlm").join(fixture);
        let passes = [1, 3].map(|n| (format!("pass_of_{n}"), logit_bits(&path, n)));
        now.logits.insert(fixture.to_string(), passes.into_iter().collect());
    }
    if std::env::var_os("BPALS_RECORD_ARITHMETIC").is_some() {
        std::fs::write(record_path(), serde_json::to_string_pretty(&now).unwrap() + "\n").unwrap();
        eprintln!("recorded revision {} in {}", now.revision, record_path().display());
        return;
    }
    let text = std::fs::read_to_string(record_path()).unwrap();
    let recorded: Record = serde_json::from_str(&text).unwrap();
    let mut changed = Vec::new();
    for (fixture, passes) in &now.logits {
        for (pass, bits) in passes {
            let before = recorded.logits.get(fixture).and_then(|p| p.get(pass));
            if before != Some(bits) {
                let most = before
                    .map(|b| b.iter().zip(bits).map(|(x, y)| (as_f32(x) - as_f32(y)).abs()).fold(0f32, f32::max))
                    .map_or("no record".to_string(), |d| format!("up to {d:.3e}"));
                changed.push(format!("{fixture} {pass}: {most}"));
            }
        }
    }
    if recorded.revision == now.revision {
        assert!(
            changed.is_empty(),
            "the engine's CPU arithmetic changed these scores' bits ({}), but its revision is still {}: raise \
             vlm::arithmetic::CPU (the change alters every CPU release's bytes: say so in the commit and the changelog), \
             then record the new bits with BPALS_RECORD_ARITHMETIC=1 cargo test -p bpals-vlm --features libtorch --test arithmetic",
            changed.join("; "),
            now.revision
        );
    } else {
        panic!(
            "vlm::arithmetic::CPU is {}, but {} holds revision {}'s bits: record this revision's with \
             BPALS_RECORD_ARITHMETIC=1 cargo test -p bpals-vlm --features libtorch --test arithmetic",
            now.revision,
            record_path().display(),
            recorded.revision
        );
    }
}
