//! The native engine against transformers on the tiny fixture models (f32, CPU): pixel values,
//! image embeddings (and DeepStack features), last-position logits, greedy tokens, shared-prefix
//! scoring against separate runs, and batched decoding against one prompt at a time. Goldens:
//! fixtures/vlm/gen_tiny_models.py (Qwen2-VL, Qwen2.5-VL), gen_tiny_qwen3_vl.py (Qwen3-VL:
//! a 1024 x 1024 stand-in for an NIH image, odd sizes, 40 greedy tokens) and gen_tiny_qwen3_5.py
//! (Qwen3.5's hybrid decoder on the same images). The mixture-of-experts models are written at
//! test time by gen_tiny_moe.py (nothing of them is committed), with the python3 on PATH that
//! has the pinned transformers (scripts/test puts its environment first).
#![cfg(feature = "libtorch")]

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use bpals_vlm::generate::{Generated, GenerationImage, GenerationPrompt};
use bpals_vlm::model::{PassImage, VlModel};
use bpals_vlm::real_tokens::SuffixRows;
use bpals_vlm::shared_prefix::PrefixAttention;
use bpals_vlm::stage_clock::StageClock;
use bpals_vlm::{pixels, ImageFeatures, ModelDir, Thinking, YesNo};
use common::*;
use tch::{Device, Kind, Tensor};

fn fixture(family: &str) -> PathBuf {
    repo().join("fixtures/vlm").join(family)
}

/// The mixture-of-experts fixtures, written once per run of this test binary (about 20 s), or
/// taken from `BPALS_MOE_FIXTURES` where a run already wrote them there.
fn moe_fixture(family: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("BPALS_MOE_FIXTURES") {
            return PathBuf::from(dir);
        }
        // One folder, written afresh each run: no copies pile up in the target folder.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("moe-fixtures");
        let _ = std::fs::remove_dir_all(&dir);
        let run = std::process::Command::new("python3")
            .arg(repo().join("fixtures/vlm/gen_tiny_moe.py"))
            .arg(&dir)
            .output()
            .expect("python3 (run the suite through scripts/test, which puts its environment first on PATH)");
        assert!(
            run.status.success(),
            "fixtures/vlm/gen_tiny_moe.py failed (it needs fixtures/vlm/requirements.txt's transformers): {}",
            String::from_utf8_lossy(&run.stderr)
        );
        dir
    });
    dir.join(family)
}

/// Gemma 4's published chat template as llama.cpp ships it, in the pinned llama-cpp-python sdist
/// (`BPALS_LLAMA_CPP_SRC`, which scripts/test sets, or fetched into its cache by
/// scripts/fetch-llama-cpp-sdist.sh).
fn gemma4_template() -> PathBuf {
    let src = match std::env::var_os("BPALS_LLAMA_CPP_SRC") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let run = std::process::Command::new("bash").arg(repo().join("scripts/fetch-llama-cpp-sdist.sh")).output().expect("bash");
            assert!(run.status.success(), "scripts/fetch-llama-cpp-sdist.sh failed: {}", String::from_utf8_lossy(&run.stderr));
            PathBuf::from(String::from_utf8(run.stdout).unwrap().trim())
        }
    };
    src.join("models/templates/google-gemma-4-31B-it.jinja")
}

/// The Gemma 4 fixtures, written once per run of this test binary by gen_tiny_gemma4.py with the
/// published template (or taken from `BPALS_GEMMA4_FIXTURES`).
fn gemma4_fixture(name: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("BPALS_GEMMA4_FIXTURES") {
            return PathBuf::from(dir);
        }
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gemma4-fixtures");
        let _ = std::fs::remove_dir_all(&dir);
        let run = std::process::Command::new("python3")
            .arg(repo().join("fixtures/vlm/gen_tiny_gemma4.py"))
            .arg(&dir)
            .arg(gemma4_template())
            .output()
            .expect("python3 (run the suite through scripts/test, which puts its environment first on PATH)");
        assert!(run.status.success(), "fixtures/vlm/gen_tiny_gemma4.py failed: {}", String::from_utf8_lossy(&run.stderr));
        dir
    });
    dir.join(name)
}

fn goldens_at(model: &std::path::Path) -> (serde_json::Value, HashMap<String, Tensor>) {
    let dir = model.join("goldens");
    let json = serde_json::from_slice(&std::fs::read(dir.join("goldens.json")).unwrap()).unwrap();
    let tensors = Tensor::read_safetensors(dir.join("goldens.safetensors")).unwrap().into_iter().collect();
    (json, tensors)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// How far `ours` is from the golden `key`: whole, or for a large golden (see
/// fixtures/vlm/gen_tiny_models.py, thin_goldens) its sampled rows, and every row's sum divided by
/// the row's length (so one tolerance serves both); None when there is no such golden.
fn golden_diff(t: &HashMap<String, Tensor>, key: &str, ours: &Tensor) -> Option<f64> {
    if let Some(whole) = t.get(key) {
        return Some(max_diff(ours, whole));
    }
    let sampled = t.get(&format!("{key}.sampled"))?;
    let stride = t[&format!("{key}.stride")].int64_value(&[0]);
    let mut d = max_diff(&ours.slice(0, 0, None, stride), sampled);
    if let Some(sums) = t.get(&format!("{key}.row_sums")) {
        let width = ours.size()[1] as f64;
        d = d.max(max_diff(&ours.to_kind(Kind::Double).sum_dim_intlist(1, false, Kind::Double), sums) / width);
    }
    Some(d)
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn qwen2_vl_matches_transformers() {
    parity("qwen2_vl");
}

#[test]
fn qwen2_5_vl_matches_transformers() {
    parity("qwen2_5_vl");
}

/// The trained tiny models (fixtures/vlm/train_tiny.py), on sample images, with longer greedy
/// generations that stop at the end of the turn.
#[test]
fn trained_qwen2_vl_matches_transformers() {
    parity("trained/qwen2_vl");
}

#[test]
fn trained_qwen2_5_vl_matches_transformers() {
    parity("trained/qwen2_5_vl");
}

/// Tied embeddings, two weight shards and an index, DeepStack at two vision blocks.
#[test]
fn qwen3_vl_matches_transformers() {
    parity("qwen3_vl");
}

/// Its own lm_head, one weight file.
#[test]
fn qwen3_vl_untied_matches_transformers() {
    parity("qwen3_vl_untied");
}

/// Hybrid decoder: linear, full, linear, linear; tied; two shards.
#[test]
fn qwen3_5_matches_transformers() {
    parity("qwen3_5");
}

/// The published layer pattern (three linear, one full); its own lm_head.
#[test]
fn qwen3_5_untied_matches_transformers() {
    parity("qwen3_5_untied");
}

/// Qwen3-VL-MoE, a sparse MLP in every layer (8 experts, top 2), expert tensors fused and
/// transposed as the published checkpoints store them.
#[test]
fn qwen3_vl_moe_matches_transformers() {
    parity_at(&moe_fixture("qwen3_vl_moe"));
}

/// Sparse in two layers of three (16 experts, top 4), fused as transformers saves them.
#[test]
fn qwen3_vl_moe_on_some_layers_matches_transformers() {
    parity_at(&moe_fixture("qwen3_vl_moe_some"));
}

/// Qwen3.5-MoE: the hybrid decoder, a sparse MLP in every layer beside the shared expert, one
/// tensor per expert as published.
#[test]
fn qwen3_5_moe_matches_transformers() {
    parity_at(&moe_fixture("qwen3_5_moe"));
}

/// Gemma 4, dense: sliding and full layers with their own head widths and rotary settings,
/// keys as values on the full layers, a window shorter than the prompt, image tokens attending
/// both ways on the sliding layers, soft-capped logits; clipped linears in the vision tower.
#[test]
fn gemma4_matches_transformers() {
    parity_at(&gemma4_fixture("gemma4_dense"));
}

/// Gemma 4 as E2B/E4B: per-layer input embeddings, the last layers sharing earlier layers' keys
/// and values, the double-wide MLP on those.
#[test]
fn gemma4_per_layer_inputs_and_shared_kv_match_transformers() {
    parity_at(&gemma4_fixture("gemma4_ple"));
}

/// Gemma 4 as 26B-A4B: a routed mixture of experts beside every layer's dense MLP.
#[test]
fn gemma4_moe_matches_transformers() {
    parity_at(&gemma4_fixture("gemma4_moe"));
}

/// The unit roundoff of a floating-point kind (half the gap from 1 to the next number): 2^-8 for
/// bf16's 8 significant bits, 2^-11 for f16's 11, 2^-24 for f32's.
fn unit_roundoff(kind: Kind) -> f64 {
    match kind {
        Kind::BFloat16 => 2f64.powi(-8),
        Kind::Half => 2f64.powi(-11),
        _ => 2f64.powi(-24),
    }
}

/// How far a yes/no logit computed in `kind` may be from the f32 one, derived from the precision
/// and the logits' scale rather than tuned to a result: every layer rounds its output to `kind`
/// (a relative error of u each), the roundings of `layers` layers add up as a random walk
/// (sqrt(layers) u), and the logits carry that relative error at their own scale (`scale`: the
/// standard deviation of the f32 logits over the vocabulary; logits are defined up to a shift).
/// MARGIN covers what the walk leaves out (the weights' own rounding, several roundings per
/// layer, a router choosing another expert): one constant for every family and both precisions,
/// so f16's tolerance is bf16's over 8. Measured on these fixtures, the worst case uses 0.72 of
/// it (Gemma 4's mixture of experts in f16), Gemma 4's dense model in bf16 0.27 (0.52 with an
/// AVX-512 machine's own bf16 instructions, unpinned: another rounding, not a wrong kernel).
fn half_precision_tolerance(kind: Kind, scale: f64, layers: usize) -> f64 {
    const MARGIN: f64 = 64.0;
    MARGIN * unit_roundoff(kind) * (layers as f64).sqrt() * scale
}

/// Every family in bf16 and f16 (as on a GPU) against transformers' f32 goldens, within the
/// tolerance its precision allows (see `half_precision_tolerance`). Gemma 4 fills its masks in
/// f32 and converts (the most negative f32 overflows a half-precision fill). The kernel pins
/// hold here as in the binary (`.cargo/config.toml`), so the bits are the same on every CPU.
#[test]
fn half_precision_scores_stay_within_what_their_precision_allows() {
    let mut models: Vec<PathBuf> = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "trained/qwen2_vl"].map(fixture).into();
    models.extend(["gemma4_dense", "gemma4_ple", "gemma4_moe"].map(gemma4_fixture));
    for path in models {
        let dir = ModelDir::open(&path).unwrap();
        let (g, t) = goldens_at(&path);
        let case = &g["cases"][0];
        let name = case["name"].as_str().unwrap();
        let scale = t[&format!("{name}.last_logits")].to_kind(Kind::Double).std(true).double_value(&[]);
        let layers = dir.config.text.num_hidden_layers + dir.config.vision.depth;
        let image = image::open(path.join("goldens").join(case["image"].as_str().unwrap())).unwrap();
        let answer = dir.answer_token_ids().unwrap();
        let golden = &case["yes_no_logits"];
        for kind in [Kind::BFloat16, Kind::Half] {
            let model = VlModel::load(&dir, Device::Cpu, kind).unwrap();
            let (pixels, grid) = pixels::pixel_values(&image, &dir.preprocessor, Device::Cpu).unwrap();
            let features = model.encode_image(&pixels.to_kind(kind), grid);
            let prompt = dir.prompt(case["question"].as_str().unwrap(), grid, Thinking::Off).unwrap().input_ids;
            let s = model.score(&[prompt], &features, grid, answer).unwrap().remove(0);
            let d = (f64::from(s.logit_yes) - golden[0].as_f64().unwrap())
                .abs()
                .max((f64::from(s.logit_no) - golden[1].as_f64().unwrap()).abs());
            let tolerance = half_precision_tolerance(kind, scale, layers);
            eprintln!(
                "{} {kind:?}: {d:.3e} from f32, {:.2} of the tolerance {tolerance:.3e} (logit scale {scale:.3}, {layers} layers)",
                path.display(),
                d / tolerance
            );
            assert!(
                d <= tolerance,
                "{} {kind:?}: yes/no logits {s:?} are {d} from the f32 goldens {golden}, over {tolerance}",
                path.display()
            );
        }
    }
}

/// Gemma 4 embeds every media placeholder as the pad token, in the main embedding and the
/// per-layer inputs, as transformers does on every step (a generated `<|audio|>` included): a
/// prompt holding the video or audio placeholder scores exactly as one holding the pad token
/// there, and another token does not. A question holding one is refused by name, as
/// transformers' processor refuses it.
#[test]
fn gemma4_embeds_media_placeholders_as_padding_and_refuses_them_in_a_question() {
    let path = gemma4_fixture("gemma4_ple");
    let dir = ModelDir::open(&path).unwrap();
    let model = VlModel::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let (g, _) = goldens_at(&path);
    let case = &g["cases"][0];
    let image = image::open(path.join("goldens").join(case["image"].as_str().unwrap())).unwrap();
    let (pixels, grid) = pixels::pixel_values(&image, &dir.preprocessor, Device::Cpu).unwrap();
    let features = model.encode_image(&pixels, grid);
    let prompt = dir.prompt(case["question"].as_str().unwrap(), grid, Thinking::Off).unwrap().input_ids;
    let others = &dir.config.text.other_media_token_ids;
    assert_eq!(others.len(), 2, "the fixture has video and audio placeholders");
    let with = |id: u32| {
        let mut ids = prompt.clone();
        ids.insert(ids.len() - 3, id);
        model.last_logits(&ids, &features, grid).unwrap()
    };
    // The pad token as the checkpoint's file names it.
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(path.join("config.json")).unwrap()).unwrap();
    let pad = config["text_config"]["pad_token_id"].as_u64().expect("the fixture names its pad token") as u32;
    let padded = with(pad);
    for &id in others {
        assert!(with(id).equal(&padded), "placeholder {id} embeds as the pad token");
    }
    assert!(!with(prompt[prompt.len() - 2]).equal(&padded), "another token embeds as itself");
    for placeholder in ["<|audio|>", "<|video|>"] {
        let err = dir.prompt(&format!("Is {placeholder} in this X-ray?"), grid, Thinking::Off).unwrap_err().to_string();
        assert!(err.contains(&format!("the prompt holds {placeholder} (id ")) && err.contains("remove it from the question"), "{err}");
    }
}

/// Rows of different images and prompt lengths decode together as each would alone: their
/// caches are padded to one length, and a hybrid model's linear states must skip the padding.
#[test]
fn rows_of_different_images_decode_together_as_alone() {
    for family in ["qwen3_5", "qwen3_vl"] {
        let dir = ModelDir::open(&fixture(family)).unwrap();
        let model = VlModel::load(&dir, Device::Cpu, Kind::Float).unwrap();
        let encoded: Vec<_> = ["odd-201x59.png", "tall-77x123.png"]
            .iter()
            .map(|file| {
                let image = image::open(fixture(family).join("goldens").join(file)).unwrap();
                let (pixels, grid) = pixels::pixel_values(&image, &dir.preprocessor, Device::Cpu).unwrap();
                (model.encode_image(&pixels, grid), grid)
            })
            .collect();
        let images: Vec<GenerationImage> = encoded.iter().map(|(features, grid)| GenerationImage { features, grid: *grid }).collect();
        let questions = ["Effusion?", "Does this radiograph show an enlarged cardiac silhouette or a widened mediastinum?", "Describe it."];
        let prompts: Vec<(usize, Vec<u32>)> = (0..4)
            .map(|i| (i % 2, dir.prompt(questions[i % questions.len()], images[i % 2].grid, Thinking::Off).unwrap().input_ids))
            .collect();
        let requests: Vec<GenerationPrompt> = prompts.iter().map(|(image, ids)| GenerationPrompt { image: *image, ids }).collect();
        let batched = model.generate_batch(&images, &requests, 10, &[]).unwrap();
        for (request, together) in requests.iter().zip(&batched) {
            let alone = model.generate_batch(&images, std::slice::from_ref(request), 10, &[]).unwrap().remove(0);
            assert_eq!(together, &alone, "{family}: a batched row differs from its run alone");
        }
    }
}

/// The vision tower's features of an image do not depend on what shares its pass either: every
/// tower runs a pass's images together, and an image alone (padded to the pass), in a pass of three or in either half, the same bits; and within 1e-5
/// of the image through the tower by itself. An image of another size goes through on its own.
#[test]
fn the_vision_tower_gives_an_image_the_same_features_in_any_pass() {
    tch::set_num_threads(1);
    let towers = [fixture("qwen2_vl"), fixture("qwen2_5_vl"), fixture("qwen3_vl"), fixture("qwen3_5"), gemma4_fixture("gemma4_dense")];
    for path in towers {
        let dir = ModelDir::open(&path).unwrap();
        let model = VlModel::load(&dir, Device::Cpu, Kind::Float).unwrap();
        let tall = image::open(path.join("goldens/tall-77x123.png")).unwrap();
        let odd = image::open(path.join("goldens/odd-201x59.png")).unwrap();
        let inputs: Vec<_> = [tall.clone(), tall.fliph(), tall.flipv(), odd]
            .iter()
            .map(|image| pixels::pixel_values(image, &dir.preprocessor, Device::Cpu).unwrap())
            .collect();
        let refs: Vec<_> = inputs.iter().map(|(pixels, grid)| (pixels, *grid)).collect();
        let bits = |f: &ImageFeatures| {
            let mut all = vec![f.embeds.shallow_clone()];
            all.extend(f.deepstack.iter().map(|t| t.shallow_clone()));
            all.iter().flat_map(|t| Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()).map(f32::to_bits).collect::<Vec<_>>()
        };
        let together = model.encode_pass(&refs, 3);
        let mut halves = model.encode_pass(&refs[..2], 3);
        halves.extend(model.encode_pass(&refs[2..], 3));
        for (k, input) in refs.iter().enumerate() {
            let alone = model.encode_pass(std::slice::from_ref(input), 3).remove(0);
            let differ = |a: Vec<u32>, b: Vec<u32>| a.iter().zip(&b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
            let alone_differ = differ(bits(&alone), bits(&together[k]));
            assert_eq!(alone_differ, 0, "{}: image {k} alone and in a pass of three: {alone_differ} values differ", path.display());
            let half_differ = differ(bits(&halves[k]), bits(&together[k]));
            assert_eq!(half_differ, 0, "{}: image {k} in half the images: {half_differ} values differ", path.display());
            let by_itself = model.encode_image(input.0, input.1);
            let d = (&by_itself.embeds - &together[k].embeds).abs().max().double_value(&[]);
            assert!(d <= 1e-5, "{}: image {k}'s embeddings through the tower by itself differ by {d}", path.display());
            assert_eq!(by_itself.deepstack.len(), together[k].deepstack.len());
        }
    }
}

/// An image's scores do not depend on what shares its pass: alone, in a pass of three, or in
/// either half of the images (two shards), the same bits, every pass padded to three images.
/// An image of another size goes in a pass of its own. One CPU thread, as a build scores.
#[test]
fn a_pass_of_several_images_scores_each_image_as_alone() {
    tch::set_num_threads(1);
    let families = [
        fixture("qwen2_5_vl"),
        fixture("qwen3_vl"),
        fixture("qwen3_5"),
        moe_fixture("qwen3_vl_moe"),
        moe_fixture("qwen3_5_moe"),
        // Sliding windows of 16 over prefixes of dozens of tokens, KV-shared layers, experts.
        gemma4_fixture("gemma4_dense"),
        gemma4_fixture("gemma4_ple"),
        gemma4_fixture("gemma4_moe"),
    ];
    for path in families {
        let dir = ModelDir::open(&path).unwrap();
        let model = VlModel::load(&dir, Device::Cpu, Kind::Float).unwrap();
        let answer = dir.answer_token_ids().unwrap();
        // Three images of one size (an image and its mirror images) and one of another.
        let tall = image::open(path.join("goldens/tall-77x123.png")).unwrap();
        let odd = image::open(path.join("goldens/odd-201x59.png")).unwrap();
        let encoded: Vec<_> = [tall.clone(), tall.fliph(), tall.flipv(), odd]
            .iter()
            .map(|image| {
                let (pixels, grid) = pixels::pixel_values(image, &dir.preprocessor, Device::Cpu).unwrap();
                (model.encode_image(&pixels, grid), grid)
            })
            .collect();
        // Two begin alike ("Is there a"), and so share their first tokens' work.
        let questions = [
            "Is there a pleural effusion in this chest X-ray?",
            "Does this radiograph show cardiomegaly?",
            "Is a chest tube visible?",
            "Is there a pneumothorax?",
        ];
        let prompts: Vec<Vec<Vec<u32>>> = encoded
            .iter()
            .map(|(_, grid)| questions.iter().map(|q| dir.prompt(q, *grid, Thinking::Off).unwrap().input_ids).collect())
            .collect();
        let images: Vec<PassImage> =
            encoded.iter().zip(&prompts).map(|((features, grid), prompts)| PassImage { prompts, features, grid: *grid }).collect();
        let together = model.score_pass(&images, answer, 3).unwrap();
        let bits = |scores: &[YesNo]| scores.iter().flat_map(|s| [s.logit_yes.to_bits(), s.logit_no.to_bits()]).collect::<Vec<_>>();
        for (k, image) in images.iter().enumerate() {
            let alone = model.score_pass(std::slice::from_ref(image), answer, 3).unwrap().remove(0);
            assert_eq!(bits(&alone), bits(&together[k]), "{}: image {k} alone and in a pass of three", path.display());
            // A pass of one image held once is the copied path's arithmetic, up to the order of sums.
            let copied = model.score(image.prompts, image.features, image.grid, answer).unwrap();
            for (a, b) in alone.iter().zip(&copied) {
                assert!(
                    (a.logit_yes - b.logit_yes).abs() <= 1e-5 && (a.logit_no - b.logit_no).abs() <= 1e-5,
                    "{}: {a:?} vs {b:?}",
                    path.display()
                );
            }
        }
        let halves = [model.score_pass(&images[..2], answer, 3).unwrap(), model.score_pass(&images[2..], answer, 3).unwrap()].concat();
        assert_eq!(halves.iter().map(|s| bits(s)).collect::<Vec<_>>(), together.iter().map(|s| bits(s)).collect::<Vec<_>>());
        // The fused kernel keeps each image's bits whatever shares its pass too.
        let fused =
            model.score_pass_with(&images, answer, 3, PrefixAttention::Fused, SuffixRows::Deduplicated, &mut StageClock::off()).unwrap();
        for (k, image) in images.iter().enumerate() {
            let alone = model
                .score_pass_with(
                    std::slice::from_ref(image),
                    answer,
                    3,
                    PrefixAttention::Fused,
                    SuffixRows::Deduplicated,
                    &mut StageClock::off(),
                )
                .unwrap()
                .remove(0);
            assert_eq!(bits(&alone), bits(&fused[k]), "{}: fused, image {k} alone and in a pass of three", path.display());
        }
        // The questions padded to the longest between the layers' attention, as before, and
        // their real tokens each their own: the same bits as the tokens they begin alike with
        // held once, both ways of the prefix part.
        let lengths: Vec<usize> = prompts[0].iter().map(Vec::len).collect();
        assert!(lengths.iter().any(|&l| l != lengths[0]), "{}: questions of one length pad nothing: {lengths:?}", path.display());
        for (method, deduplicated) in [(PrefixAttention::Shared, &together), (PrefixAttention::Fused, &fused)] {
            for rows in [SuffixRows::Padded, SuffixRows::Packed] {
                let other = model.score_pass_with(&images, answer, 3, method, rows, &mut StageClock::off()).unwrap();
                assert_eq!(
                    other.iter().map(|s| bits(s)).collect::<Vec<_>>(),
                    deduplicated.iter().map(|s| bits(s)).collect::<Vec<_>>(),
                    "{}: {}, {} rows against deduplicated",
                    path.display(),
                    method.name(),
                    rows.name()
                );
            }
        }
        eprintln!("{}: 4 images x 4 questions, the same bits alone, in a pass of three and in halves", path.display());
    }
}

fn parity(family: &str) {
    parity_at(&fixture(family));
}

fn parity_at(path: &std::path::Path) {
    let family = path.file_name().unwrap().to_str().unwrap();
    let dir = ModelDir::open(path).unwrap();
    let model = VlModel::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let (g, t) = goldens_at(path);
    let answer = dir.answer_token_ids().unwrap();
    for case in g["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let image = image::open(path.join("goldens").join(case["image"].as_str().unwrap())).unwrap();
        let (pixels, grid) = pixels::pixel_values(&image, &dir.preprocessor, Device::Cpu).unwrap();
        let d = golden_diff(&t, &format!("{name}.pixel_values"), &pixels).unwrap();
        assert!(d <= 1e-5, "{name}: pixel values differ by {d}");
        assert_eq!(ids(&case["image_grid_thw"]), [grid.0 as u32, grid.1 as u32, grid.2 as u32], "{name}: patch grid");

        let features = model.encode_image(&pixels, grid);
        let d = golden_diff(&t, &format!("{name}.image_embeds"), &features.embeds).unwrap();
        assert!(d <= 1e-4, "{name}: image embeddings differ by {d}");
        let has = |key: String| t.contains_key(&key) || t.contains_key(&format!("{key}.sampled"));
        let goldens = (0..).take_while(|k| has(format!("{name}.deepstack.{k}"))).count();
        assert_eq!(features.deepstack.len(), goldens, "{name}: DeepStack features");
        for (k, ours) in features.deepstack.iter().enumerate() {
            let d = golden_diff(&t, &format!("{name}.deepstack.{k}"), ours).unwrap();
            assert!(d <= 1e-4, "{name}: DeepStack feature {k} differs by {d}");
        }

        let prompt = ids(&case["input_ids"]);
        let question = case["question"].as_str().unwrap();
        assert_eq!(dir.prompt(question, grid, Thinking::Off).unwrap().input_ids, prompt, "{name}: prompt ids");
        // The template renders as transformers renders it, thinking off and on.
        assert_eq!(dir.template.render(question, Thinking::Off).unwrap(), case["prompt"].as_str().unwrap(), "{name}: prompt");
        if let Some(thinking) = case["prompt_thinking"].as_str() {
            assert_eq!(dir.template.render(question, Thinking::On).unwrap(), thinking, "{name}: prompt, thinking on");
        }
        let logits = model.last_logits(&prompt, &features, grid).unwrap();
        let d = max_diff(&logits, &t[&format!("{name}.last_logits")]);
        eprintln!("{family} {name}: last-position logits within {d:.1e} of transformers");
        assert!(d <= 1e-4, "{name}: last-position logits differ by {d}");

        // transformers stops at the end of the turn and keeps that token; so does the engine.
        let max_new = case["max_new_tokens"].as_u64().unwrap_or(8) as usize;
        let image = GenerationImage { features: &features, grid };
        let one = GenerationPrompt { image: 0, ids: &prompt };
        let Generated { tokens, truncated } = model.generate_batch(&[image], &[one], max_new, &dir.stop_token_ids()).unwrap().remove(0);
        let expected = ids(&case["greedy_tokens"]);
        assert_eq!(tokens, expected, "{name}: greedy tokens");
        assert_eq!(truncated, !expected.last().is_some_and(|t| dir.stop_token_ids().contains(t)), "{name}: truncation");

        // Many questions over one image prefix equal separate single-question runs.
        // Two begin alike ("Is there a"), and so share their first tokens' work.
        let questions = [
            "Is there a pleural effusion in this chest X-ray?",
            "Does this radiograph show cardiomegaly?",
            "Is a chest tube visible?",
            "Is there a pneumothorax?",
        ];
        let prompts: Vec<Vec<u32>> = questions.iter().map(|q| dir.prompt(q, grid, Thinking::Off).unwrap().input_ids).collect();
        let shared = model.score(&prompts, &features, grid, answer).unwrap();
        // Attention sums the same terms either way. Linear attention's chunks start where each
        // call starts, so the prefix run alone cuts the sequence at other places than one pass:
        // the same sums in another order, at the f32 floor of these random models (about 5e-5
        // from an f64 run of transformers itself).
        let limit = if dir.config.text.linear.is_some() { 1e-4 } else { 1e-5 };
        for (p, s) in prompts.iter().zip(&shared) {
            let alone = model.last_logits(p, &features, grid).unwrap();
            let (y, n) = (alone.double_value(&[i64::from(answer.0)]), alone.double_value(&[i64::from(answer.1)]));
            assert!(
                (f64::from(s.logit_yes) - y).abs() <= limit && (f64::from(s.logit_no) - n).abs() <= limit,
                "{name}: shared {s:?} vs alone ({y}, {n})"
            );
        }
        // The prefix held once instead of copied per question: the same logits within 1e-5 (the
        // softmax's sums in another order), Gemma 4's sliding windows and shared layers included.
        // The fused kernel for the prefix part likewise.
        for method in [PrefixAttention::Shared, PrefixAttention::Fused] {
            let once = model.score_with(&prompts, &features, grid, answer, method, &mut StageClock::off()).unwrap();
            let worst = shared
                .iter()
                .zip(&once)
                .map(|(a, b)| (a.logit_yes - b.logit_yes).abs().max((a.logit_no - b.logit_no).abs()))
                .fold(0.0f32, f32::max);
            eprintln!("{family} {name}: prefix held once ({}), logits within {worst:.1e} of the copied prefix", method.name());
            assert!(worst <= 1e-5, "{name}: {} prefix attention differs by {worst}", method.name());
        }

        // Those prompts decoded as one batch equal each decoded alone.
        let image = GenerationImage { features: &features, grid };
        let requests: Vec<GenerationPrompt> = prompts.iter().map(|p| GenerationPrompt { image: 0, ids: p }).collect();
        let batched = model.generate_batch(std::slice::from_ref(&image), &requests, 12, &[]).unwrap();
        for (request, together) in requests.iter().zip(&batched) {
            let alone = model.generate_batch(std::slice::from_ref(&image), std::slice::from_ref(request), 12, &[]).unwrap().remove(0);
            assert_eq!(together, &alone, "{name}: batched decoding differs from one at a time");
        }
    }
}
