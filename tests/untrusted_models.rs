//! Model directories are untrusted input: a checkpoint, its configs, its chat template and its
//! tokenizer come from whoever published them. Each case here is a copy of a fixture model
//! with one file edited, run through `probe` under a time limit and a memory limit: every one
//! must end with a clear error (exit 1 or 2, one line naming the file and the key, tensor or
//! limit, no panic), in seconds, without swelling. Most cases are the ways a run ended badly
//! before (a NaN that hung `build`, gigabytes of upscaling, an endless template, an integer
//! tensor read as floats, a panic inside libtorch); the rest held up then and are kept so.
//!
//! The edited files are the fixtures' own (fixtures/vlm/: the trained tiny Qwen2-VL in the
//! published Qwen2-VL layout, the Qwen2.5-VL and Qwen3-VL fixtures in transformers 5's), so
//! every file format here is the one their generators wrote with transformers.
//!
//! The second half: every file that shapes a score is in the scorer's identity, so an edit to
//! any of them rescores and changes build.lock.
#![cfg(feature = "vlm")]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::limits::{run_limited, Limited};
use common::*;
use serde_json::{json, Value};

/// Time and resident memory one `probe` of a tiny model may take before it is killed; a clean
/// one takes about a second and 200 MB.
const TIME_LIMIT: Duration = Duration::from_secs(60);
const MEMORY_LIMIT: u64 = 1536 << 20;
/// What a refused model may reach: the engine loaded, the model read, the refusal made.
const MEMORY_EXPECTED: u64 = 1 << 30;

fn trained_qwen2_vl() -> PathBuf {
    repo().join("fixtures/vlm/trained/qwen2_vl")
}

fn image() -> PathBuf {
    repo().join("fixtures/sample/images/00000001_000.png")
}

fn edit_json(dir: &Path, file: &str, edit: impl Fn(&mut Value)) {
    let path = dir.join(file);
    let mut value: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, serde_json::to_vec(&value).unwrap()).unwrap();
}

fn write(dir: &Path, file: &str, bytes: impl AsRef<[u8]>) {
    std::fs::write(dir.join(file), bytes).unwrap();
}

/// Rewrites `model.safetensors`: its JSON header and its data, edited (the header re-padded to
/// eight bytes as the format asks).
fn edit_safetensors(dir: &Path, edit: impl Fn(&mut Value, &mut Vec<u8>)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut data = bytes[8 + n..].to_vec();
    edit(&mut header, &mut data);
    let mut head = serde_json::to_vec(&header).unwrap();
    head.resize(head.len().div_ceil(8) * 8, b' ');
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend(head);
    out.extend(data);
    std::fs::write(path, out).unwrap();
}

/// Sets one tensor's bytes to `value` (f32) throughout.
fn fill_tensor(header: &Value, data: &mut [u8], name: &str, value: f32) {
    let offsets = &header[name]["data_offsets"];
    let (start, end) = (offsets[0].as_u64().unwrap() as usize, offsets[1].as_u64().unwrap() as usize);
    for chunk in data[start..end].chunks_exact_mut(4) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
}

fn probe(dir: &Path) -> Limited {
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"));
    command.args(["probe", "--device", "cpu", "--question", "Is there an effusion?", "--model"]).arg(dir).arg("--image").arg(image());
    command.env_remove("BPALS_CACHE_DIR").env("HF_HUB_OFFLINE", "1");
    run_limited(command, TIME_LIMIT, MEMORY_LIMIT)
}

type Edit = Box<dyn Fn(&Path)>;

/// One broken copy of `base`, and what its error must say.
struct Case {
    name: &'static str,
    base: PathBuf,
    edit: Edit,
    says: &'static [&'static str],
}

fn case(name: &'static str, edit: impl Fn(&Path) + 'static, says: &'static [&'static str]) -> Case {
    Case { name, base: trained_qwen2_vl(), edit: Box::new(edit), says }
}

fn config(name: &'static str, edit: impl Fn(&mut Value) + 'static, says: &'static [&'static str]) -> Case {
    case(name, move |d| edit_json(d, "config.json", &edit), says)
}

fn preprocessor(name: &'static str, edit: impl Fn(&mut Value) + 'static, says: &'static [&'static str]) -> Case {
    case(name, move |d| edit_json(d, "preprocessor_config.json", &edit), says)
}

/// A chat template: `prefix` before the model's own.
fn template(name: &'static str, prefix: &'static str, says: &'static [&'static str]) -> Case {
    case(
        name,
        move |d| {
            let own = std::fs::read_to_string(d.join("chat_template.jinja")).unwrap();
            write(d, "chat_template.jinja", format!("{prefix}{own}"));
        },
        says,
    )
}

/// Runs each case and collects what went wrong, so one run reports every failing case.
fn run_table(cases: Vec<Case>) {
    let s = Scratch::new();
    let mut wrong = Vec::new();
    for c in cases {
        let dir = s.path(c.name);
        copy_tree(&c.base, &dir);
        (c.edit)(&dir);
        let run = probe(&dir);
        let first_line = run.stderr.lines().find(|l| l.starts_with("error")).unwrap_or("").to_string();
        let missing: Vec<&&str> = c.says.iter().filter(|w| !first_line.contains(**w)).collect();
        if !run.failed_cleanly() || !missing.is_empty() || run.peak_rss > MEMORY_EXPECTED {
            wrong.push(format!(
                "{}: exit {:?}, {}, {:.1} s, {} MiB; error line lacks {missing:?}\n  stderr: {}",
                c.name,
                run.code,
                run.killed.as_deref().unwrap_or("not killed"),
                run.elapsed.as_secs_f64(),
                run.peak_rss >> 20,
                run.stderr.trim().lines().take(4).collect::<Vec<_>>().join("\n          ")
            ));
        }
    }
    assert!(wrong.is_empty(), "{} case(s) did not fail cleanly:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn broken_configs_are_refused_with_the_key() {
    run_table(vec![
        // Before: a NaN in every score; `build` then spun forever in its metrics.
        config("eps-negative", |v| v["text_config"]["rms_norm_eps"] = json!(-1), &["config.json", "rms_norm_eps", "above 0"]),
        config("eps-zero", |v| v["text_config"]["rms_norm_eps"] = json!(0.0), &["config.json", "rms_norm_eps"]),
        config("eps-text", |v| v["text_config"]["rms_norm_eps"] = json!("abc"), &["config.json", "rms_norm_eps", "expected a number"]),
        config("rope-zero", |v| v["text_config"]["rope_parameters"]["rope_theta"] = json!(0), &["config.json", "rope_theta"]),
        config("rope-negative", |v| v["text_config"]["rope_parameters"]["rope_theta"] = json!(-5), &["config.json", "rope_theta"]),
        // Sizes that divide by zero, overflow or allocate without end.
        config("hidden-zero", |v| v["text_config"]["hidden_size"] = json!(0), &["config.json", "hidden_size"]),
        config(
            "hidden-huge",
            |v| v["text_config"]["hidden_size"] = json!(1u64 << 40),
            &["config.json", "hidden_size", "more than any model has"],
        ),
        config(
            "layers-huge",
            |v| v["text_config"]["num_hidden_layers"] = json!(1_000_000_000_000u64),
            &["config.json", "num_hidden_layers"],
        ),
        config("mlp-ratio-overflow", |v| v["vision_config"]["mlp_ratio"] = json!(1u64 << 62), &["config.json", "mlp_ratio"]),
        config(
            "intermediate-large",
            |v| v["text_config"]["intermediate_size"] = json!(1 << 20),
            &["model.safetensors", "config.json implies"],
        ),
        config("vision-heads-zero", |v| v["vision_config"]["num_heads"] = json!(0), &["config.json", "vision_config.num_heads"]),
        config("kv-heads", |v| v["text_config"]["num_key_value_heads"] = json!(3), &["config.json", "num_key_value_heads"]),
        config("in-channels", |v| v["vision_config"]["in_channels"] = json!(1), &["config.json", "in_channels", "3 channels"]),
        config("vision-temporal-zero", |v| v["vision_config"]["temporal_patch_size"] = json!(0), &["config.json", "temporal_patch_size"]),
        // Token ids: 2^40 used to wrap to 0 on its way to 32 bits.
        config("image-token-huge", |v| v["image_token_id"] = json!(1u64 << 40), &["config.json", "image_token_id"]),
        config(
            "vision-start-outside",
            |v| v["vision_start_token_id"] = json!(100_000),
            &["config.json", "vision_start_token_id", "vocab_size"],
        ),
        config(
            "context-short",
            |v| v["text_config"]["max_position_embeddings"] = json!(10),
            &["max_position_embeddings", "model.max_pixels"],
        ),
        config("mrope", |v| v["text_config"]["rope_parameters"]["mrope_section"] = json!([2, 2, 2]), &["config.json", "mrope_section"]),
        config("text-config-number", |v| v["text_config"] = json!(5), &["config.json"]),
        config("family-unknown", |v| v["model_type"] = json!("llava"), &["config.json", "model_type"]),
        Case {
            name: "window-zero",
            base: repo().join("fixtures/vlm/qwen2_5_vl"),
            edit: Box::new(|d| edit_json(d, "config.json", |v| v["vision_config"]["window_size"] = json!(0))),
            says: &["config.json", "window_size"],
        },
        Case {
            name: "positions-not-square",
            base: repo().join("fixtures/vlm/qwen3_vl"),
            edit: Box::new(|d| edit_json(d, "config.json", |v| v["vision_config"]["num_position_embeddings"] = json!(10))),
            says: &["config.json", "num_position_embeddings"],
        },
    ]);
}

#[test]
fn broken_preprocessor_configs_are_refused_with_the_key() {
    run_table(vec![
        // Before: 10 to 15 GB resident within 30 s, upscaling every image to 4e8 pixels.
        preprocessor(
            "pixels-huge",
            |v| v["size"] = json!({"shortest_edge": 400_000_000u64, "longest_edge": 1_000_000_000u64}),
            &["preprocessor_config.json", "size.longest_edge", "8192 x 8192"],
        ),
        preprocessor(
            "upscale-past-context",
            |v| v["size"] = json!({"shortest_edge": 1u64 << 25, "longest_edge": 1u64 << 26}),
            &["preprocessor_config.json", "size.shortest_edge", "max_position_embeddings"],
        ),
        preprocessor("min-below-a-token", |v| v["size"]["shortest_edge"] = json!(1), &["preprocessor_config.json", "one merged token"]),
        preprocessor("min-above-max", |v| v["size"]["shortest_edge"] = json!(60_000), &["preprocessor_config.json", "size.longest_edge"]),
        // Before: a panic inside libtorch (exit 101, a backtrace).
        preprocessor("temporal-zero", |v| v["temporal_patch_size"] = json!(0), &["preprocessor_config.json", "temporal_patch_size"]),
        preprocessor(
            "temporal-three",
            |v| v["temporal_patch_size"] = json!(3),
            &["preprocessor_config.json", "temporal_patch_size", "disagrees"],
        ),
        preprocessor("patch-size", |v| v["patch_size"] = json!(7), &["preprocessor_config.json", "patch_size", "disagrees"]),
        preprocessor("merge-zero", |v| v["merge_size"] = json!(0), &["preprocessor_config.json", "merge_size"]),
        preprocessor("std-zero", |v| v["image_std"] = json!([0, 0, 0]), &["preprocessor_config.json", "image_std"]),
        preprocessor("mean-text", |v| v["image_mean"] = json!(["a", 1, 2]), &["preprocessor_config.json", "image_mean"]),
        preprocessor("rescale-zero", |v| v["rescale_factor"] = json!(0), &["preprocessor_config.json", "rescale_factor"]),
        preprocessor("rescale-negative", |v| v["rescale_factor"] = json!(-1.0), &["preprocessor_config.json", "rescale_factor"]),
    ]);
}

#[test]
fn hostile_templates_tokenizers_and_generation_configs_are_refused() {
    run_table(vec![
        // Before: 10^10 steps, running for hours.
        template(
            "template-endless",
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            &["chat_template.jinja", "1000000 steps"],
        ),
        // Before: 2.8 GB resident. Ends the process with exit code 2.
        template(
            "template-doubling",
            "{% set ns = namespace(s='0123456789abcdefghij') %}{% for i in range(27) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            &["chat_template.jinja", "64 MiB"],
        ),
        template("template-output", "{{ 'x' * 2000000 }}", &["chat_template.jinja", "1024 KiB"]),
        template("template-include", "{% include '/etc/passwd' %}", &["chat_template.jinja"]),
        template("template-syntax", "{% for %}", &["chat_template.jinja", "syntax error"]),
        template("template-raises", "{{ raise_exception('this template refuses') }}", &["chat_template.jinja", "this template refuses"]),
        case("template-no-image", |d| write(d, "chat_template.jinja", "{{ messages[0].role }}"), &["chat_template.jinja", "<|image_pad|>"]),
        case(
            "tokenizer-truncated",
            |d| {
                let bytes = std::fs::read(d.join("tokenizer.json")).unwrap();
                write(d, "tokenizer.json", &bytes[..bytes.len() / 2]);
            },
            &["tokenizer.json", "not a tokenizer"],
        ),
        case("generation-config-not-json", |d| write(d, "generation_config.json", "{nope"), &["generation_config.json", "not valid JSON"]),
    ]);
}

#[test]
fn broken_weights_are_refused_with_the_tensor() {
    run_table(vec![
        // Before: the same bytes read as integers, p_yes 0.478 instead of 0.00145, exit 0.
        case("norm-i32", |d| edit_safetensors(d, |h, _| h["model.norm.weight"]["dtype"] = json!("I32")), &["model.norm.weight", "I32"]),
        // Before: a panic with a backtrace.
        case(
            "embedding-i32",
            |d| edit_safetensors(d, |h, _| h["model.embed_tokens.weight"]["dtype"] = json!("I32")),
            &["model.embed_tokens.weight", "I32"],
        ),
        // Before: `probe` exited 0 with p_yes null.
        case(
            "weights-nan",
            |d| edit_safetensors(d, |h, data| fill_tensor(h, data, "model.norm.weight", f32::NAN)),
            &["logit_yes NaN", "question \"Is there an effusion?\""],
        ),
        case(
            "weights-infinite",
            |d| edit_safetensors(d, |h, data| fill_tensor(h, data, "model.norm.weight", f32::INFINITY)),
            &["NaN or infinite"],
        ),
        case(
            "header-2-to-the-42",
            |d| {
                let mut bytes = std::fs::read(d.join("model.safetensors")).unwrap();
                bytes[..8].copy_from_slice(&(1u64 << 42).to_le_bytes());
                write(d, "model.safetensors", bytes);
            },
            &["model.safetensors", "not readable safetensors"],
        ),
        case(
            "weights-truncated",
            |d| {
                let bytes = std::fs::read(d.join("model.safetensors")).unwrap();
                write(d, "model.safetensors", &bytes[..bytes.len() / 2]);
            },
            &["model.safetensors", "not readable safetensors"],
        ),
        case(
            "shape-overflow",
            |d| edit_safetensors(d, |h, _| h["model.norm.weight"]["shape"] = json!([1u64 << 62, 1u64 << 62])),
            &["model.safetensors", "not readable safetensors"],
        ),
        case(
            "offsets-past-the-end",
            |d| edit_safetensors(d, |h, _| h["model.norm.weight"]["data_offsets"] = json!([0, 1u64 << 40])),
            &["model.safetensors", "not readable safetensors"],
        ),
        case("weights-missing", |d| std::fs::remove_file(d.join("model.safetensors")).unwrap(), &["no weights"]),
    ]);
}

/// The build side of a NaN: the first score that is not a number stops the build with one line
/// naming the image, the question and the model, before any row is written. Before, `build`
/// printed "infer: 40 scored" and spun at 100% CPU.
#[test]
fn a_build_whose_model_computes_nan_fails_in_seconds() {
    let s = Scratch::new();
    let model = s.path("nan-model");
    copy_tree(&trained_qwen2_vl(), &model);
    edit_safetensors(&model, |h, data| fill_tensor(h, data, "model.norm.weight", f32::NAN));
    let spec = engine_spec(&s, &model);
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"));
    command.arg("build").arg(&spec).arg("--out").arg(s.path("out")).arg("--cache-dir").arg(s.cache()).arg("--no-progress");
    command.env_remove("BPALS_CACHE_DIR");
    let run = run_limited(command, TIME_LIMIT, MEMORY_LIMIT);
    assert!(run.failed_cleanly(), "{run:?}");
    let error: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(error.len(), 1, "{}", run.stderr);
    assert!(
        error[0].contains("logit_yes NaN") && error[0].contains(".png, question") && error[0].contains("bpals/tiny-qwen2-vl"),
        "{}",
        error[0]
    );
    assert!(!s.path("out").exists(), "no release");
}

/// A small release of the sample scored by the model in `dir`.
fn engine_spec(s: &Scratch, dir: &Path) -> PathBuf {
    derived_spec(
        s,
        "engine.yaml",
        &format!(
            "selection:\n  curated_images: 12\n  expected_rows: 15\nmodel:\n  backend: qwen2vl\n  path: {}\n  id: bpals/tiny-qwen2-vl-synthetic\n  revision: trained-v1\n  weight_license: apache-2.0\n  demo_weights: synthetic\n",
            dir.display()
        ),
    )
}

fn lock(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("build.lock")).unwrap()).unwrap()
}

/// Every file that shapes a score is in the scorer's identity: edited in turn, each one
/// rescores the images and changes build.lock. generation_config.json shapes only generated
/// answers: it changes the lock and leaves the cached scores alone. Before, an edited
/// config.json (rope_theta 10000 -> 3, p_yes 0.0047 instead of 0.00066) reused the cached
/// scores, wrote identical shards, and passed `verify` and `rebuild --audit`.
#[test]
fn every_file_that_shapes_a_score_is_in_the_identity() {
    let s = Scratch::new();
    let model = s.path("model");
    copy_tree(&trained_qwen2_vl(), &model);
    let spec = engine_spec(&s, &model);
    let cache = s.cache();
    let first = s.path("first");
    let a = build(&spec, &first, &cache, &[]).success();
    let said = stdout(&a) + &stderr(&a);
    assert!(said.contains("0 images from the cache, 12 scored"), "{said}");
    let mut locks = vec![("unedited", lock(&first))];

    type FileEdit = Box<dyn Fn(&Path)>;
    let edits: Vec<(&str, FileEdit, bool)> = vec![
        (
            "config.json",
            Box::new(|d: &Path| edit_json(d, "config.json", |v| v["text_config"]["rope_parameters"]["rope_theta"] = json!(3.0))),
            true,
        ),
        (
            "preprocessor_config.json",
            Box::new(|d: &Path| edit_json(d, "preprocessor_config.json", |v| v["rescale_factor"] = json!(0.004))),
            true,
        ),
        (
            "chat_template.jinja",
            Box::new(|d: &Path| {
                let own = std::fs::read_to_string(d.join("chat_template.jinja")).unwrap();
                write(d, "chat_template.jinja", format!("{{# a comment #}}{own}"));
            }),
            true,
        ),
        (
            "tokenizer.json",
            Box::new(|d: &Path| {
                // The same tokenizer in other bytes: written on one line, where the file is
                // pretty-printed.
                let v: Value = serde_json::from_slice(&std::fs::read(d.join("tokenizer.json")).unwrap()).unwrap();
                write(d, "tokenizer.json", serde_json::to_vec(&v).unwrap());
            }),
            true,
        ),
        (
            "model.safetensors",
            Box::new(|d: &Path| edit_safetensors(d, |h, _| h["__metadata__"] = json!({"format": "pt", "edited": "yes"}))),
            true,
        ),
        ("generation_config.json", Box::new(|d: &Path| edit_json(d, "generation_config.json", |v| v["eos_token_id"] = json!(3))), false),
    ];
    for (file, edit, rescores) in edits {
        edit(&model);
        let out = s.path(&format!("after-{file}"));
        let a = build(&spec, &out, &cache, &[]).success();
        let said = stdout(&a) + &stderr(&a);
        let expected = if rescores { "0 images from the cache, 12 scored" } else { "12 images from the cache, 0 scored" };
        assert!(said.contains(expected), "after editing {file}: {said}");
        let this = lock(&out);
        for (earlier, other) in &locks {
            assert_ne!(this["scorer"], other["scorer"], "after editing {file}, the lock's scorer equals the one {earlier} gave");
        }
        assert_eq!(this["scorer_sha256"] != locks.last().unwrap().1["scorer_sha256"], rescores, "{file}: the score key");
        locks.push((file, this));
    }
}
