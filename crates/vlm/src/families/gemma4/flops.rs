//! What scoring an image on Gemma 4 costs in FLOPs, for `bench scoring`'s MFU: its decoder is not
//! the shared one's shape, so the shared count (`crate::flops`) hands it here.

use super::{Gemma4Text, Gemma4Vision};
use crate::config::{TextConfig, VisionConfig};
use crate::flops::{question_linear, ImageFlops, QuestionLayers};

/// FLOPs of scoring one image on Gemma 4, as `flops_as_run` counts them for the Qwen families: its tower (q/k/v/o and a gated MLP per block, no merger but
/// the projection of the pooled tokens) and its decoder (per layer its own head width and key
/// and value heads, none on a KV-shared layer; the dense MLP, doubled where wide, and the routed
/// experts; the per-layer inputs; attention over at most the sliding window on sliding layers).
#[allow(clippy::too_many_arguments)]
pub(crate) fn per_image(
    text: &TextConfig,
    vision: &VisionConfig,
    patches: usize,
    prefix: usize,
    questions: usize,
    suffix: usize,
    layers: QuestionLayers,
    shared: usize,
) -> ImageFlops {
    let v = vision;
    let gv = v.own.get::<Gemma4Vision>().expect("a Gemma 4 vision config");
    let (d, i, p) = (v.hidden_size as f64, v.intermediate_size as f64, patches as f64);
    let attn_width = (v.num_heads * gv.head_dim) as f64;
    let kv_width = (gv.kv_heads * gv.head_dim) as f64;
    let block = 2.0 * (2.0 * d * attn_width + 2.0 * d * kv_width + 3.0 * d * i);
    let tokens = p / (v.spatial_merge_size * v.spatial_merge_size) as f64;
    let vision = 2.0 * p * 3.0 * (v.patch_size * v.patch_size) as f64 * d
        + v.depth as f64 * (p * block + 4.0 * p * p * attn_width)
        + 2.0 * tokens * d * v.out_hidden_size as f64;

    let t = text;
    let g = t.own.get::<Gemma4Text>().expect("a Gemma 4 text config");
    let h = t.hidden_size as f64;
    let heads = t.num_attention_heads as f64;
    let window = g.sliding_window as f64;
    // Per token, each layer's projections and MLPs; per (query, key) pair, 4 x its query width.
    // A prefix stops at the last layer with keys and values of its own, and at them.
    let last_own = g.layers.iter().rposition(|l| l.kv_from.is_none());
    let mut per_token = 0.0;
    let mut prefix_per_token = 0.0;
    let mut pair_width = (0.0, 0.0); // (sliding layers, full layers): summed query widths
    let mut prefix_pair_width = (0.0, 0.0);
    // The layers where the questions run their last tokens alone: from the last with keys and
    // values of its own.
    let mut narrowed_pair_width = (0.0, 0.0);
    for (index, layer) in g.layers.iter().enumerate() {
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
        let whole = 2.0 * (2.0 * h * q + kv_projections * h * kv + mlp + experts + per_layer);
        per_token += whole;
        let widths = if layer.sliding { &mut pair_width.0 } else { &mut pair_width.1 };
        *widths += q;
        if layers == QuestionLayers::LastTokens && last_own.is_some_and(|last| index >= last) {
            let widths = if layer.sliding { &mut narrowed_pair_width.0 } else { &mut narrowed_pair_width.1 };
            *widths += q;
        }
        match last_own {
            Some(last) if index < last => {
                prefix_per_token += whole;
                let widths = if layer.sliding { &mut prefix_pair_width.0 } else { &mut prefix_pair_width.1 };
                *widths += q;
            }
            Some(last) if index == last => prefix_per_token += 2.0 * kv_projections * h * kv,
            _ => {}
        }
    }
    let per_layer_inputs = g.per_layer_input.map_or(0.0, |(width, _)| 2.0 * h * (g.layers.len() * width) as f64);
    per_token += per_layer_inputs;
    prefix_per_token += per_layer_inputs;
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
    let attention =
        |widths: (f64, f64), from: f64, to: f64| 4.0 * (widths.0 * seen(from, to, window) + widths.1 * seen(from, to, f64::INFINITY));
    let prefix_flops = pf * prefix_per_token + attention(prefix_pair_width, 0.0, pf);
    // One query's attention to the prefix at position k (past it) over the layers of `widths`:
    // all of it on full layers, what the window reaches on sliding ones.
    let prefix_part = |widths: (f64, f64), k: f64| 4.0 * (widths.0 * (pf + window - 1.0 - k).clamp(0.0, pf) + widths.1 * pf);
    // Where the questions run their last tokens alone, the others do not meet the prefix.
    let left_out: f64 = (0..(suffix.saturating_sub(1))).map(|i| prefix_part(narrowed_pair_width, pf + i as f64)).sum();
    let suffix_flops = n * (question_linear(s, per_token, prefix_per_token, layers) + attention(pair_width, pf, pf + s) - left_out);
    // A shared token's parts as far as the cache, and its attention to the prefix outside the
    // narrowed layers (taken at a question's first place: a shared token is one of its first).
    let shared_part = prefix_part((pair_width.0 - narrowed_pair_width.0, pair_width.1 - narrowed_pair_width.1), pf);
    let saved = shared as f64 * (prefix_per_token + shared_part);
    let logits = n * 2.0 * h * t.vocab_size as f64;
    ImageFlops { vision, prefix: prefix_flops, questions: suffix_flops - saved + logits }
}
