//! Scoring throughput of a full-size model that is not on the machine: the real config, seeded
//! random weights made on the device, synthetic images, and a release's worth of questions per
//! image. Reports images and prefill tokens per second and the model FLOP utilisation (MFU)
//! against the device's dense peak. `bpals-release bench scoring`; benches/gpu.sh runs it on the
//! Qwen2.5-VL-7B config.
//!
//! FLOPs are counted from the config, the way MFU is usually reported: 2 per multiply-add of
//! every linear layer, plus attention's two matrix products over the context each token sees
//! (causal, the shared image prefix once, and Qwen2.5-VL's vision windows). Norms, rotary
//! embeddings and softmax are left out, so the figure is slightly conservative.

use std::time::Instant;

use image::{DynamicImage, GrayImage, Luma};
use serde::Serialize;
use tch::{Device, Kind};

use super::checkpoint::ModelConfig;
use super::config::{LayerKind, PreprocessorConfig};
use super::error::VlmError;
use super::families::Family;
use super::model::{PassImage, VlModel};
use super::pixels;
use super::shared_prefix::PrefixAttention;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScoringBench {
    pub images: usize,
    /// Width and height of the synthetic images (NIH's are 1024 x 1024).
    pub size: u32,
    pub questions: usize,
    /// Tokens per question after the shared prefix: the question and the chat template's tail.
    pub question_tokens: usize,
    /// Images run first and not timed (kernel selection, allocator warm-up).
    pub warmup: usize,
    /// The device's dense peak in TFLOP/s for the dtype, for MFU (None: not reported).
    pub peak_tflops: Option<f64>,
    /// Images in the release to project a run time for (the baseline: 4,628).
    pub project_images: usize,
    /// How the questions meet the image prefix (the copied path releases are scored by, or the
    /// prefix held once).
    pub prefix_attention: PrefixAttention,
    /// Images scored in one pass (the shared path; 1 with the copied one).
    pub images_per_pass: usize,
    /// After timing, score the first pass's images each alone (padded to the pass) and compare
    /// their bits with the pass's.
    pub check_invariance: bool,
}

#[derive(Debug, Serialize)]
pub struct ScoringBenchReport {
    pub family: Family,
    /// `copied` or `shared`.
    pub prefix_attention: &'static str,
    pub images_per_pass: usize,
    pub text_layers: usize,
    pub vision_blocks: usize,
    pub device: String,
    pub dtype: String,
    pub parameters: i64,
    /// The parameters one token goes through (all but the unchosen experts of a sparse model):
    /// what the FLOPs are counted from.
    pub active_parameters: i64,
    pub image_size: u32,
    pub grid_thw: (usize, usize, usize),
    pub vision_patches: usize,
    pub image_tokens: usize,
    pub questions: usize,
    pub prefill_tokens_per_image: usize,
    pub tflop_per_image: f64,
    pub images_timed: usize,
    /// Resizing and normalising one image on one CPU thread (the runner spreads it over --jobs
    /// threads, outside the engine lock, so it overlaps the device's work).
    pub preprocess_ms_per_image: f64,
    /// Vision tower and scoring of every question, per image, on the device.
    pub device_ms_per_image: f64,
    pub images_per_second: f64,
    pub prefill_tokens_per_second: f64,
    pub achieved_tflops: f64,
    pub peak_tflops: Option<f64>,
    pub mfu: Option<f64>,
    pub project_images: usize,
    /// At the measured rate.
    pub projected_seconds: f64,
    /// At the peak (the roofline of compute), when a peak was given.
    pub roofline_seconds: Option<f64>,
    /// Whether every score of the first pass's images was the same bits alone as in the pass.
    pub invariance: Option<Invariance>,
}

/// Images of the first pass (its first, middle and last) scored in the pass and each alone,
/// compared bit for bit.
#[derive(Debug, Serialize)]
pub struct Invariance {
    pub images: usize,
    pub scores: usize,
    /// Alone in a pass padded to the pass's size (the build's way): same bits as in the pass.
    pub identical_padded: bool,
    pub max_abs_logit_diff_padded: f32,
    /// Alone in a pass of one (other shapes): same bits as in the pass.
    pub identical_unpadded: bool,
    pub max_abs_logit_diff_unpadded: f32,
}

/// A deterministic grey image with structure at every scale (so no kernel sees constant input).
fn synthetic_image(size: u32, seed: u32) -> DynamicImage {
    DynamicImage::ImageLuma8(GrayImage::from_fn(size, size, |x, y| {
        let v = (x.wrapping_mul(31) ^ y.wrapping_mul(17)).wrapping_add(seed.wrapping_mul(97)) % 251;
        Luma([v as u8])
    }))
}

/// The architecture cut to `layers` text layers and as many vision blocks, every width kept: the
/// full-size shapes on a machine that cannot hold the whole model (`bench scoring --layers`).
/// Block indexes (full attention, DeepStack) map proportionally into the slice, so a Qwen3-VL
/// slice keeps DeepStack.
pub fn slice(config: &ModelConfig, layers: usize) -> ModelConfig {
    let mut c = config.clone();
    let depth = c.vision.depth;
    if layers == 0 || (layers >= depth && layers >= c.text.num_hidden_layers) {
        return c;
    }
    let blocks = layers.min(depth);
    let map = |indexes: &[usize]| {
        let mut mapped: Vec<usize> = indexes.iter().map(|&i| i * blocks / depth).collect();
        mapped.dedup();
        mapped
    };
    c.vision.fullatt_block_indexes = map(&c.vision.fullatt_block_indexes);
    c.vision.deepstack_visual_indexes = map(&c.vision.deepstack_visual_indexes);
    c.vision.deepstack_visual_indexes.truncate(layers.min(c.text.num_hidden_layers));
    c.vision.depth = blocks;
    c.text.num_hidden_layers = layers.min(c.text.num_hidden_layers);
    // A hybrid stack's slice keeps both layer kinds: its first layers, the last made full
    // attention if none of them is.
    c.text.layer_types.truncate(c.text.num_hidden_layers);
    let hybrid = config.text.layer_types.contains(&LayerKind::LinearAttention);
    if hybrid && c.text.layer_types.len() >= 2 && !c.text.layer_types.contains(&LayerKind::FullAttention) {
        *c.text.layer_types.last_mut().expect("two or more") = LayerKind::FullAttention;
    }
    if let Some(moe) = &mut c.text.moe {
        moe.sparse_layers.truncate(c.text.num_hidden_layers);
    }
    // Gemma 4's slice: its first layers, the last made a full-attention layer (with the full
    // layers' shape) if none is, each computing its own keys and values.
    if let (Some(g), Some(full)) = (&mut c.text.gemma4, config.text.gemma4.as_ref().and_then(|g| g.layers.iter().find(|l| !l.sliding))) {
        g.layers.truncate(c.text.num_hidden_layers);
        if !g.layers.iter().any(|l| !l.sliding) {
            *g.layers.last_mut().expect("one or more layers") = full.clone();
        }
        for layer in &mut g.layers {
            layer.kv_from = None;
            layer.double_wide = false;
        }
    }
    c
}

/// The parameters one token goes through: all of a dense model's; in a sparse model, all but
/// the experts the router does not choose (each sparse layer runs k of its E experts).
pub fn active_parameters(config: &ModelConfig, parameters: i64) -> i64 {
    let t = &config.text;
    let Some(moe) = &t.moe else { return parameters };
    let expert = 3 * t.hidden_size as i64 * moe.moe_intermediate_size as i64;
    let idle = (moe.num_experts - moe.num_experts_per_tok) as i64 * expert;
    parameters - moe.sparse_layers.iter().filter(|&&s| s).count() as i64 * idle
}

/// Prompt ids in the layout the chat template gives: a fixed prefix, the image run, then each
/// question's own tokens (its first token differs, so the shared prefix ends at the image).
fn prompts(config: &ModelConfig, image_tokens: usize, questions: usize, question_tokens: usize) -> Vec<Vec<u32>> {
    let vocab = config.text.vocab_size as u32;
    let filler = |i: usize| 10 + (i as u32 * 7919) % (vocab - 20);
    let mut prefix: Vec<u32> = (0..14).map(filler).collect();
    prefix.push(config.vision_start_token_id);
    prefix.extend(std::iter::repeat_n(config.image_token_id, image_tokens));
    prefix.push(config.vision_end_token_id);
    (0..questions)
        .map(|q| {
            let mut ids = prefix.clone();
            ids.extend((0..question_tokens.max(1)).map(|t| filler(1000 + q * question_tokens + t)));
            ids
        })
        .collect()
}

/// Dense FLOPs of scoring one image: the vision tower over `patches`, the text prefix of
/// `prefix` tokens once, then `questions` suffixes of `suffix` tokens and their answer logits.
pub fn flops_per_image(config: &ModelConfig, patches: usize, prefix: usize, questions: usize, suffix: usize) -> f64 {
    if config.family == Family::Gemma4 {
        return gemma4_flops_per_image(config, patches, prefix, questions, suffix);
    }
    let v = &config.vision;
    let (d, i) = (v.hidden_size as f64, v.intermediate_size as f64);
    let mlp = match config.family {
        Family::Qwen25Vl => 3.0 * d * i, // gate, up, down
        _ => 2.0 * d * i,                // fc1, fc2
    };
    let block_linear = 4.0 * d * d + mlp; // qkv and the output projection, then the MLP
    let patches_f = patches as f64;
    let window = v.window_size.map(|w| {
        let side = (w / v.patch_size / v.spatial_merge_size * v.spatial_merge_size) as f64;
        (side * side).min(patches_f)
    });
    let mut vision = 2.0 * patches_f * (3.0 * (v.temporal_patch_size * v.patch_size * v.patch_size) as f64) * d; // patch embedding
    for block in 0..v.depth {
        let context = match window {
            Some(w) if !v.fullatt_block_indexes.contains(&block) => w,
            _ => patches_f,
        };
        vision += 2.0 * patches_f * block_linear + 4.0 * patches_f * context * d;
    }
    let merged = patches_f / (v.spatial_merge_size * v.spatial_merge_size) as f64;
    let m = d * (v.spatial_merge_size * v.spatial_merge_size) as f64;
    // The merger, and Qwen3-VL's DeepStack mergers (the same shape, one per index).
    let mergers = (1 + v.deepstack_visual_indexes.len()) as f64;
    vision += mergers * 2.0 * merged * (m * m + m * v.out_hidden_size as f64);

    let t = &config.text;
    let h = t.hidden_size as f64;
    // The query heads' width: hidden_size in Qwen2, heads x head_dim in Qwen3 (4,096 in the 8B).
    let q = (t.num_attention_heads * t.head_dim()) as f64;
    let kv = (t.num_key_value_heads * t.head_dim()) as f64;
    let gate = if t.variant.gated_attention { 2.0 } else { 1.0 }; // Qwen3.5's q_proj also makes the gate
    let full_layers = t.layer_types.iter().filter(|&&k| k == LayerKind::FullAttention).count() as f64;
    let linear_layers = t.layer_types.len() as f64 - full_layers;
    let full = 2.0 * (gate * h * q + 2.0 * h * kv + q * h);
    // A Gated DeltaNet layer per token: its projections (qkv, z, b, a, out), the convolution, and
    // the delta rule's reads and writes of each value head's state as the recurrent form does them.
    let linear = t.linear.map_or(0.0, |l| {
        let (kd, vd, heads) = (l.key_dim() as f64, l.value_dim() as f64, l.num_value_heads as f64);
        let projections = 2.0 * h * (2.0 * kd + vd + vd + 2.0 * heads) + 2.0 * vd * h;
        let conv = 2.0 * l.conv_dim() as f64 * l.conv_kernel_dim as f64;
        // Per value head: decay the state, read k^T S, write k delta^T, read q^T S (1 + 2 + 2 + 2).
        let rule = 7.0 * heads * (l.key_head_dim * l.value_head_dim) as f64;
        projections + conv + rule
    });
    // The MLPs a token goes through: a dense layer's, or in a sparse layer the router, its
    // top-k experts and the shared expert (the active parameters, not all the experts).
    let dense_mlp = 2.0 * 3.0 * h * t.intermediate_size as f64;
    let mlps: f64 = (0..t.num_hidden_layers)
        .map(|l| match &t.moe {
            Some(m) if m.sparse_layers[l] => {
                let shared = m.shared_expert_intermediate_size.map_or(0.0, |s| 2.0 * (3.0 * h * s as f64 + h));
                2.0 * h * m.num_experts as f64 + m.num_experts_per_tok as f64 * 2.0 * 3.0 * h * m.moe_intermediate_size as f64 + shared
            }
            _ => dense_mlp,
        })
        .sum();
    let per_token = full_layers * full + linear_layers * linear + mlps;
    let attention = |context_sum: f64| 4.0 * full_layers * q * context_sum;
    let (p, s, n) = (prefix as f64, suffix as f64, questions as f64);
    let prefix_flops = p * per_token + attention(p * (p + 1.0) / 2.0);
    let suffix_flops = n * (s * per_token + attention(s * p + s * (s + 1.0) / 2.0));
    let logits = n * 2.0 * h * t.vocab_size as f64;
    vision + prefix_flops + suffix_flops + logits
}

/// [`flops_per_image`] for Gemma 4: its tower (q/k/v/o and a gated MLP per block, no merger but
/// the projection of the pooled tokens) and its decoder (per layer its own head width and key
/// and value heads, none on a KV-shared layer; the dense MLP, doubled where wide, and the routed
/// experts; the per-layer inputs; attention over at most the sliding window on sliding layers).
fn gemma4_flops_per_image(config: &ModelConfig, patches: usize, prefix: usize, questions: usize, suffix: usize) -> f64 {
    let v = &config.vision;
    let gv = v.gemma4.as_ref().expect("a Gemma 4 vision config");
    let (d, i, p) = (v.hidden_size as f64, v.intermediate_size as f64, patches as f64);
    let attn_width = (v.num_heads * gv.head_dim) as f64;
    let kv_width = (gv.kv_heads * gv.head_dim) as f64;
    let block = 2.0 * (2.0 * d * attn_width + 2.0 * d * kv_width + 3.0 * d * i);
    let tokens = p / (v.spatial_merge_size * v.spatial_merge_size) as f64;
    let vision = 2.0 * p * 3.0 * (v.patch_size * v.patch_size) as f64 * d
        + v.depth as f64 * (p * block + 4.0 * p * p * attn_width)
        + 2.0 * tokens * d * v.out_hidden_size as f64;

    let t = &config.text;
    let g = t.gemma4.as_ref().expect("a Gemma 4 text config");
    let h = t.hidden_size as f64;
    let heads = t.num_attention_heads as f64;
    let window = g.sliding_window as f64;
    // Per token: each layer's projections and MLPs; per (query, key) pair: 4 x the query width.
    let mut per_token = 0.0;
    let mut pair_width = (0.0, 0.0); // (sliding layers, full layers): summed query widths
    for layer in &g.layers {
        let q = heads * layer.head_dim as f64;
        let kv = (layer.kv_heads * layer.head_dim) as f64;
        let kv_projections = match (layer.kv_from, layer.k_eq_v) {
            (Some(_), _) => 0.0,
            (None, true) => 1.0,
            (None, false) => 2.0,
        };
        let mlp = 3.0 * h * t.intermediate_size as f64 * if layer.double_wide { 2.0 } else { 1.0 };
        let experts = t
            .moe
            .as_ref()
            .map_or(0.0, |m| h * m.num_experts as f64 + m.num_experts_per_tok as f64 * 3.0 * h * m.moe_intermediate_size as f64);
        let per_layer = g.per_layer_input.map_or(0.0, |(width, _)| 2.0 * h * width as f64);
        per_token += 2.0 * (2.0 * h * q + kv_projections * h * kv + mlp + experts + per_layer);
        if layer.sliding {
            pair_width.0 += q;
        } else {
            pair_width.1 += q;
        }
    }
    per_token += g.per_layer_input.map_or(0.0, |(width, _)| 2.0 * h * (g.layers.len() * width) as f64);
    // Keys seen by queries at positions from..to (0-based), summed; capped at the window.
    let seen = |from: f64, to: f64, cap: f64| -> f64 {
        let mut total = 0.0;
        let mut k = from;
        while k < to {
            total += (k + 1.0).min(cap);
            k += 1.0;
        }
        total
    };
    let (pf, s, n) = (prefix as f64, suffix as f64, questions as f64);
    let attention = |from: f64, to: f64| 4.0 * (pair_width.0 * seen(from, to, window) + pair_width.1 * seen(from, to, f64::INFINITY));
    let prefix_flops = pf * per_token + attention(0.0, pf);
    let suffix_flops = n * (s * per_token + attention(pf, pf + s));
    let logits = n * 2.0 * h * t.vocab_size as f64;
    vision + prefix_flops + suffix_flops + logits
}

/// Runs the benchmark on a model with random weights.
pub fn run(
    config: &ModelConfig,
    preprocessor: &PreprocessorConfig,
    device: Device,
    kind: Kind,
    bench: &ScoringBench,
) -> Result<ScoringBenchReport, VlmError> {
    let model = VlModel::random(config, device, kind, 0)?;
    let vocab = config.text.vocab_size as u32;
    let answer = (vocab - 1, vocab - 2);
    // Whole passes: the warm-up's and the timed images', each rounded up.
    let pass = bench.images_per_pass.max(1);
    let total = (bench.warmup.div_ceil(pass) + bench.images.max(1).div_ceil(pass)) * pass;

    let start = Instant::now();
    let inputs = (0..total)
        .map(|k| pixels::pixel_values(&synthetic_image(bench.size, k as u32), preprocessor, device))
        .collect::<Result<Vec<_>, _>>()?;
    let preprocess_ms = start.elapsed().as_secs_f64() * 1000.0 / total as f64;
    let grid = inputs[0].1;
    let patches = grid.0 * grid.1 * grid.2;
    let image_tokens = patches / (config.vision.spatial_merge_size * config.vision.spatial_merge_size);
    let ids = prompts(config, image_tokens, bench.questions, bench.question_tokens);
    let prefix = 14 + 2 + image_tokens;

    let pass = bench.images_per_pass.max(1);
    if pass > 1 && bench.prefix_attention == PrefixAttention::Copied {
        return Err(VlmError::Input("several images per pass need the prefix held once (--prefix-attention shared or fused)".into()));
    }
    let warmup_passes = bench.warmup.div_ceil(pass);
    let mut timed = Instant::now();
    for (k, chunk) in inputs.chunks(pass).enumerate() {
        if k == warmup_passes {
            timed = Instant::now();
        }
        // The scores come back to the host, so the device's work is done when this returns.
        if pass == 1 {
            let (values, grid) = &chunk[0];
            model.score_with(&ids, &model.encode_image(values, *grid), *grid, answer, bench.prefix_attention)?;
        } else {
            let features: Vec<_> = chunk.iter().map(|(values, grid)| model.encode_image(values, *grid)).collect();
            let images: Vec<PassImage<'_>> =
                features.iter().zip(chunk).map(|(f, (_, grid))| PassImage { prompts: &ids, features: f, grid: *grid }).collect();
            model.score_pass_with(&images, answer, pass, bench.prefix_attention)?;
        }
    }
    let seconds = timed.elapsed().as_secs_f64();
    let images = inputs.len() - warmup_passes * pass;
    let invariance = if bench.check_invariance {
        Some(invariance(&model, &inputs[..pass.min(inputs.len())], &ids, answer, pass, bench.prefix_attention)?)
    } else {
        None
    };
    let per_image = seconds / images as f64;
    let flops = flops_per_image(config, patches, prefix, bench.questions, bench.question_tokens);
    let prefill_tokens = prefix + bench.questions * bench.question_tokens;
    let achieved = flops / per_image / 1e12;
    Ok(ScoringBenchReport {
        family: config.family,
        prefix_attention: bench.prefix_attention.name(),
        images_per_pass: pass,
        text_layers: config.text.num_hidden_layers,
        vision_blocks: config.vision.depth,
        device: format!("{device:?}"),
        dtype: format!("{kind:?}"),
        parameters: model.parameters(),
        active_parameters: active_parameters(config, model.parameters()),
        image_size: bench.size,
        grid_thw: grid,
        vision_patches: patches,
        image_tokens,
        questions: bench.questions,
        prefill_tokens_per_image: prefill_tokens,
        tflop_per_image: flops / 1e12,
        images_timed: images,
        preprocess_ms_per_image: preprocess_ms,
        device_ms_per_image: per_image * 1000.0,
        images_per_second: 1.0 / per_image,
        prefill_tokens_per_second: prefill_tokens as f64 / per_image,
        achieved_tflops: achieved,
        peak_tflops: bench.peak_tflops,
        mfu: bench.peak_tflops.map(|peak| achieved / peak),
        project_images: bench.project_images,
        projected_seconds: per_image * bench.project_images as f64,
        roofline_seconds: bench.peak_tflops.map(|peak| flops * bench.project_images as f64 / (peak * 1e12)),
        invariance,
    })
}

/// Scores `inputs` in one pass of `pass` images, then its first, middle and last image alone
/// (padded to `pass`, and in a pass of one), and compares the bits.
fn invariance(
    model: &VlModel,
    inputs: &[(tch::Tensor, (usize, usize, usize))],
    ids: &[Vec<u32>],
    answer: (u32, u32),
    pass: usize,
    method: PrefixAttention,
) -> Result<Invariance, VlmError> {
    // A build scores on the CPU with one thread per worker, as here: a product split over
    // threads may split its sums by how many rows it has.
    if model.device == Device::Cpu {
        tch::set_num_threads(1);
    }
    let features: Vec<_> = inputs.iter().map(|(values, grid)| model.encode_image(values, *grid)).collect();
    let images: Vec<PassImage<'_>> =
        features.iter().zip(inputs).map(|(f, (_, grid))| PassImage { prompts: ids, features: f, grid: *grid }).collect();
    let together = model.score_pass_with(&images, answer, pass, method)?;
    let (mut padded, mut unpadded) = (0f32, 0f32);
    let (mut same_padded, mut same_unpadded, mut scores) = (true, true, 0);
    // The first, a middle and the last image of the pass: each place in it, at a third of the cost.
    let mut places: Vec<usize> = vec![0, images.len() / 2, images.len() - 1];
    places.dedup();
    for (image, in_pass) in places.iter().map(|&k| (&images[k], &together[k])) {
        for (alone_in, diff, same) in [(pass, &mut padded, &mut same_padded), (1, &mut unpadded, &mut same_unpadded)] {
            let alone = model.score_pass_with(std::slice::from_ref(image), answer, alone_in, method)?.remove(0);
            for (a, b) in alone.iter().zip(in_pass) {
                *same &= a.logit_yes.to_bits() == b.logit_yes.to_bits() && a.logit_no.to_bits() == b.logit_no.to_bits();
                *diff = diff.max((a.logit_yes - b.logit_yes).abs()).max((a.logit_no - b.logit_no).abs());
            }
        }
        scores += in_pass.len();
    }
    Ok(Invariance {
        images: places.len(),
        scores,
        identical_padded: same_padded,
        max_abs_logit_diff_padded: padded,
        identical_unpadded: same_unpadded,
        max_abs_logit_diff_unpadded: unpadded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(family: &str) -> ModelConfig {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/vlm").join(family).join("config.json");
        ModelConfig::from_json(&serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn flops_grow_with_every_input_and_count_the_linear_layers() {
        let c = config("qwen2_5_vl");
        let base = flops_per_image(&c, 256, 80, 10, 20);
        assert!(flops_per_image(&c, 512, 80, 10, 20) > base);
        assert!(flops_per_image(&c, 256, 160, 10, 20) > base);
        assert!(flops_per_image(&c, 256, 80, 20, 20) > base);
        // One text token with no context is 2 x the text linear weights (the logits aside).
        let t = &c.text;
        let (h, kv) = (t.hidden_size as f64, (t.num_key_value_heads * t.head_dim()) as f64);
        let linear = t.num_hidden_layers as f64 * (2.0 * h * h + 2.0 * h * kv + 3.0 * h * t.intermediate_size as f64);
        let one = flops_per_image(&c, 0, 1, 0, 0);
        assert!((one - (2.0 * linear + 4.0 * t.num_hidden_layers as f64 * h)).abs() < 1e-6, "{one} vs {linear}");
    }

    fn bench_config(name: &str) -> (ModelConfig, PreprocessorConfig) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/configs");
        let read = |file: String| serde_json::from_slice::<serde_json::Value>(&std::fs::read(dir.join(file)).unwrap()).unwrap();
        (
            ModelConfig::from_json(&read(format!("{name}.config.json"))).unwrap(),
            PreprocessorConfig::from_json(&read(format!("{name}.preprocessor.json"))).unwrap(),
        )
    }

    /// benches/configs holds Qwen3-VL-8B's architecture; its FLOPs per 1024 x 1024 image with 57
    /// questions, pinned to the closed form worked out separately: vision 5.798 TFLOP (27 blocks
    /// over 4,096 patches, the merger and three DeepStack mergers), text 34.690 TFLOP (36 layers,
    /// 1,040 prefix tokens, 57 x 24 suffix tokens, 57 answer rows of the LM head).
    #[test]
    fn the_qwen3_vl_benchmark_config_is_the_8b_and_its_flops_are_pinned() {
        let (c, pre) = bench_config("qwen3_vl_8b");
        assert_eq!((c.family, pre.patch_size, pre.factor(), pre.max_pixels), (Family::Qwen3Vl, 16, 32, 16_777_216));
        assert_eq!((c.text.head_dim, c.vision.deepstack_visual_indexes.as_slice()), (128, &[8, 16, 24][..]));
        let t = &c.text;
        let text_linear = flops_per_image(&c, 0, 1, 0, 0) / 2.0 - 2.0 * t.num_hidden_layers as f64 * 4096.0;
        assert!((text_linear - 6.945767424e9).abs() < 1.0, "{text_linear}");
        let flops = flops_per_image(&c, 64 * 64, 16 + 1024, 57, 24);
        assert!((flops - 40488189296640.0).abs() / flops < 1e-12, "{flops}");
        // DeepStack's three mergers: 4 x 2 x 1,024 x (4,608² + 4,608 x 4,096) of the vision part.
        let mut no_deepstack = c.clone();
        no_deepstack.vision.deepstack_visual_indexes.clear();
        let deepstack = flops - flops_per_image(&no_deepstack, 64 * 64, 16 + 1024, 57, 24);
        assert!((deepstack - 3.0 * 2.0 * 1024.0 * (4608.0 * 4608.0 + 4608.0 * 4096.0)).abs() < 1.0, "{deepstack}");
    }

    /// Qwen3.5-9B's architecture and its FLOPs per 1024 x 1024 image with 57 questions, pinned to
    /// a closed form worked out separately: per text token 13.927 GFLOP (8 gated-attention layers
    /// at 117.4 MFLOP, 24 Gated DeltaNet layers at 138.5 MFLOP with their convolution and delta
    /// rule, 32 MLPs at 302.0 MFLOP); vision 5.551 TFLOP (no DeepStack); text 33.911 TFLOP.
    #[test]
    fn the_qwen3_5_benchmark_config_is_the_9b_and_its_flops_are_pinned() {
        let (c, pre) = bench_config("qwen3_5_9b");
        assert_eq!((c.family, pre.factor()), (Family::Qwen35, 32));
        let t = &c.text;
        assert_eq!((t.head_dim, t.rotary_dim, t.variant.gated_attention), (256, 64, true));
        let full = t.layer_types.iter().filter(|&&k| k == LayerKind::FullAttention).count();
        assert_eq!((t.layer_types.len(), full), (32, 8));
        assert!(c.vision.deepstack_visual_indexes.is_empty());
        let one = flops_per_image(&c, 0, 1, 0, 0);
        assert!((one - (13926662144.0 + 4.0 * 8.0 * 4096.0)).abs() < 1.0, "{one}");
        let flops = flops_per_image(&c, 64 * 64, 16 + 1024, 57, 24);
        assert!((flops - 39462506070016.0).abs() / flops < 1e-12, "{flops}");
    }

    /// Two layers each, the widths kept; the block indexes follow into the slice.
    #[test]
    fn slices_keep_the_widths_and_map_the_block_indexes() {
        let (c, _) = bench_config("qwen3_vl_8b");
        let s = slice(&c, 2);
        assert_eq!((s.text.num_hidden_layers, s.vision.depth, s.text.hidden_size, s.vision.hidden_size), (2, 2, 4096, 1152));
        assert_eq!(s.vision.deepstack_visual_indexes, vec![0, 1]);
        let (c, _) = bench_config("qwen2_5_vl_7b");
        assert_eq!(slice(&c, 2).vision.fullatt_block_indexes, vec![0, 1]);
        assert_eq!(slice(&c, 0), c);
        // A hybrid stack's slice keeps one layer of each kind.
        let (c, _) = bench_config("qwen3_5_9b");
        assert_eq!(slice(&c, 2).text.layer_types, vec![LayerKind::LinearAttention, LayerKind::FullAttention]);
    }

    /// benches/configs holds the 7B's real architecture: about 7.6B parameters, 6.5B of them in
    /// the text decoder's linear layers, and about 40 TFLOP to score a 1024 x 1024 image.
    #[test]
    fn the_benchmark_config_is_the_7b() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/configs");
        let c = ModelConfig::from_json(&serde_json::from_slice(&std::fs::read(dir.join("qwen2_5_vl_7b.config.json")).unwrap()).unwrap())
            .unwrap();
        let pre = PreprocessorConfig::from_json(
            &serde_json::from_slice(&std::fs::read(dir.join("qwen2_5_vl_7b.preprocessor.json")).unwrap()).unwrap(),
        )
        .unwrap();
        assert_eq!((c.family, pre.patch_size, pre.max_pixels), (Family::Qwen25Vl, 14, 12845056));
        let t = &c.text;
        let text_linear = flops_per_image(&c, 0, 1, 0, 0) / 2.0 - 2.0 * t.num_hidden_layers as f64 * t.hidden_size as f64;
        assert!((6.4e9..6.6e9).contains(&text_linear), "{text_linear}");
        // 1036 x 1036 after resizing: 74 x 74 patches, 1,369 image tokens.
        let tflop = flops_per_image(&c, 74 * 74, 16 + 1369, 57, 24) / 1e12;
        assert!((30.0..60.0).contains(&tflop), "{tflop}");
    }

    #[test]
    fn random_model_scores_on_the_cpu() {
        let c = config("qwen2_vl");
        let pre = PreprocessorConfig::from_json(
            &serde_json::from_slice(
                &std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/vlm/qwen2_vl/preprocessor_config.json"))
                    .unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        let bench = ScoringBench {
            images: 2,
            size: 112,
            questions: 5,
            question_tokens: 6,
            warmup: 1,
            peak_tflops: Some(1.0),
            prefix_attention: PrefixAttention::Copied,
            images_per_pass: 1,
            check_invariance: false,
            project_images: 4628,
        };
        let r = run(&c, &pre, Device::Cpu, Kind::Float, &bench).unwrap();
        assert_eq!(r.image_tokens * 4, r.vision_patches);
        assert_eq!(r.prefill_tokens_per_image, 16 + r.image_tokens + 5 * 6);
        assert!(r.parameters > 0 && r.images_per_second > 0.0 && r.mfu.unwrap() > 0.0);
        assert!((r.projected_seconds - 4628.0 / r.images_per_second).abs() < 1e-6);
    }
}
