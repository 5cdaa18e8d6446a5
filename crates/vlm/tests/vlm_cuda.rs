//! The engine on a CUDA device against the CPU, on the fixture models: f32 on the GPU must match
//! f32 on the CPU closely (the same arithmetic, other kernels), and bf16 on the GPU must stay
//! within a stated tolerance of it. Needs a GPU: benches/gpu.sh runs these with `--ignored`.
#![cfg(feature = "libtorch")]

mod common;

use std::path::PathBuf;

use bpals_vlm::engine::{DeviceChoice, DtypeChoice, Engine, EngineOptions};
use common::*;

/// f32 on the GPU against f32 on the CPU: kernel order only.
const F32_TOLERANCE: f64 = 1e-3;
/// bf16 (8 bits of mantissa) against f32, on the yes-minus-no logit margin and on p_yes.
const BF16_MARGIN_TOLERANCE: f64 = 0.15;
const BF16_P_YES_TOLERANCE: f64 = 0.03;

const QUESTIONS: [&str; 4] = [
    "Is there a pleural effusion in this chest X-ray?",
    "Is there cardiomegaly in this chest X-ray?",
    "Is there a pneumothorax in this chest X-ray?",
    "Is there a mass in this chest X-ray?",
];

fn models() -> Vec<PathBuf> {
    let vlm = repo().join("fixtures/vlm");
    let mut models: Vec<PathBuf> = ["qwen2_vl", "qwen2_5_vl"].iter().flat_map(|f| [vlm.join(f), vlm.join("trained").join(f)]).collect();
    models.extend(["qwen3_vl", "qwen3_vl_untied", "qwen3_5", "qwen3_5_untied"].map(|f| vlm.join(f)));
    models
}

/// The golden images of the model's family (Qwen3-VL's include a 1024 x 1024 one).
fn images(model: &std::path::Path) -> Vec<PathBuf> {
    let family = model.file_name().unwrap();
    let goldens = repo().join("fixtures/vlm").join(family).join("goldens");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&goldens).unwrap().map(|e| e.unwrap().path()).collect();
    names.retain(|p| p.extension().is_some_and(|e| e == "png"));
    names.sort();
    names
}

/// (margin, p_yes) per image and question.
fn scores(model: &std::path::Path, device: DeviceChoice, dtype: DtypeChoice) -> Vec<(f64, f64)> {
    let options = EngineOptions { device, dtype, min_pixels: None, max_pixels: None, allow_cpu: false };
    let engine = Engine::open(model, &options).unwrap();
    let questions: Vec<String> = QUESTIONS.iter().map(|q| q.to_string()).collect();
    images(model)
        .iter()
        .flat_map(|image| engine.probe(image, &questions).unwrap().questions)
        .map(|a| (f64::from(a.answer.logit_yes - a.answer.logit_no), a.p_yes))
        .collect()
}

fn worst(a: &[(f64, f64)], b: &[(f64, f64)]) -> (f64, f64) {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold((0.0, 0.0), |(m, p), (x, y)| (f64::max(m, (x.0 - y.0).abs()), f64::max(p, (x.1 - y.1).abs())))
}

#[test]
#[ignore = "needs a CUDA device: benches/gpu.sh runs it"]
fn cuda_f32_matches_the_cpu_and_bf16_stays_within_tolerance() {
    assert!(tch::Cuda::is_available(), "libtorch sees no CUDA device");
    for model in models() {
        let cpu = scores(&model, DeviceChoice::Cpu, DtypeChoice::F32);
        let (margin, p_yes) = worst(&cpu, &scores(&model, DeviceChoice::Cuda, DtypeChoice::F32));
        println!("{}: cuda f32 vs cpu f32: margin {margin:.2e}, p_yes {p_yes:.2e}", model.display());
        assert!(margin <= F32_TOLERANCE && p_yes <= F32_TOLERANCE, "{}: f32 drifts {margin} / {p_yes}", model.display());
        let (margin, p_yes) = worst(&cpu, &scores(&model, DeviceChoice::Cuda, DtypeChoice::Bf16));
        println!("{}: cuda bf16 vs cpu f32: margin {margin:.3}, p_yes {p_yes:.3}", model.display());
        assert!(
            margin <= BF16_MARGIN_TOLERANCE && p_yes <= BF16_P_YES_TOLERANCE,
            "{}: bf16 drifts {margin} / {p_yes} (tolerance {BF16_MARGIN_TOLERANCE} / {BF16_P_YES_TOLERANCE})",
            model.display()
        );
    }
}
