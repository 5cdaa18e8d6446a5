//! What loading a checkpoint costs in memory: a scaled-down Qwen3.5-MoE of about 420 MB (one
//! tensor per expert, as published; written by fixtures/vlm/gen_tiny_moe.py --scaled with the
//! python3 on PATH that has the pinned transformers) must load with peak resident memory within
//! 1.2 times its weights above what the same command costs on a tiny model. Reading a whole
//! file and then copying its tensors out of it, as tch's read_safetensors does, costs twice.
#![cfg(feature = "vlm")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::limits::run_limited;
use common::*;

fn peak_of_probe(model: &std::path::Path) -> u64 {
    let image = repo().join("fixtures/vlm/qwen3_5/goldens/tall-77x123.png");
    let mut probe = Command::new(assert_cmd::cargo::cargo_bin("bpals-release"));
    probe
        .args(["probe", "--device", "cpu", "--dtype", "f32", "--question", "Is there an effusion?", "--model"])
        .arg(model)
        .arg("--image")
        .arg(image);
    let run = run_limited(probe, Duration::from_secs(300), 4 << 30);
    assert_eq!(run.code, Some(0), "probe of {} failed: {}", model.display(), run.stderr);
    run.peak_rss
}

#[test]
fn a_checkpoint_loads_holding_its_weights_once() {
    let s = Scratch::new();
    let model = s.path("scaled-qwen3_5_moe");
    let made = Command::new("python3")
        .arg(repo().join("fixtures/vlm/gen_tiny_moe.py"))
        .arg("--scaled")
        .arg(&model)
        .output()
        .expect("python3 (run the suite through scripts/test, which puts its environment first on PATH)");
    assert!(made.status.success(), "gen_tiny_moe.py --scaled failed: {}", String::from_utf8_lossy(&made.stderr));
    let weights: u64 = std::fs::read_dir(&model)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(weights > 300 << 20, "the scaled model is only {weights} bytes");

    let baseline = peak_of_probe(&repo().join("fixtures/vlm/qwen3_5"));
    let peak = peak_of_probe(&model);
    let above = peak.saturating_sub(baseline);
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "weights {:.0} MiB; probe peak {:.0} MiB, {:.0} MiB on the tiny model: {:.0} MiB above it, {:.2}x the weights",
        mib(weights),
        mib(peak),
        mib(baseline),
        mib(above),
        above as f64 / weights as f64
    );
    assert!(
        above as f64 <= 1.2 * weights as f64,
        "loading took {:.0} MiB above the process for {:.0} MiB of weights",
        mib(above),
        mib(weights)
    );
}
