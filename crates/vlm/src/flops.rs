//! FLOPs of scoring one image, counted from a model's config the way MFU is usually reported: 2
//! per multiply-add of every linear layer, plus attention's two matrix products over the context
//! each token sees (causal, the shared image prefix once, and Qwen2.5-VL's vision windows). Norms,
//! rotary embeddings and softmax are left out, so the figure is slightly conservative. It counts
//! the work scoring needs, as the engine does it: the prefix is read through its cache alone, so
//! it stops at the last layer that keeps anything and, in that layer, at what it keeps; and the
//! answers read each question's last token alone, so from that layer on (its keys, values or
//! state aside) a question's projections and MLPs run on that token only. (Attention there still
//! runs at every query's shape, the others' queries zeros, which keeps the CPU's bits: it is
//! counted whole.)

use super::checkpoint::ModelConfig;
use super::config::LayerKind;

/// The dense FLOPs of scoring one image, by stage: the vision tower, the prefix (the prompt up to
/// the questions, the image in it), and the questions (the answers' two rows of the LM head
/// counted with them).
#[derive(Debug, Clone, Copy)]
pub struct ImageFlops {
    pub vision: f64,
    pub prefix: f64,
    pub questions: f64,
}

impl ImageFlops {
    pub fn total(&self) -> f64 {
        self.vision + self.prefix + self.questions
    }
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

/// Dense FLOPs of scoring one image: the vision tower over `patches`, the text prefix of
/// `prefix` tokens once, then `questions` suffixes of `suffix` tokens and their answer logits.
/// (The tests' reference: a run counts what it did with [`flops_as_run`].)
#[cfg(test)]
fn flops_per_image(config: &ModelConfig, patches: usize, prefix: usize, questions: usize, suffix: usize) -> f64 {
    flops_by_stage(config, patches, prefix, questions, suffix).total()
}

/// [`flops_per_image`], stage by stage.
#[cfg(test)]
fn flops_by_stage(config: &ModelConfig, patches: usize, prefix: usize, questions: usize, suffix: usize) -> ImageFlops {
    flops_as_run(config, patches, prefix, questions, suffix, QuestionLayers::LastTokens, 0)
}

/// How a question's tokens go through the layers after the last one whose keys, values or state
/// a later token reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuestionLayers {
    /// Every token through every layer (the copied path, and questions padded to the longest).
    Whole,
    /// Only each question's last token, which the answer reads (how releases are scored).
    LastTokens,
}

/// [`flops_by_stage`], the questions' last layers as `layers` says, and `shared` of the
/// questions' tokens held once for several questions that begin alike (their token-wise parts
/// as far as the cache go once; attention and a linear layer's convolution and state still read
/// them in every row). Attention's prefix part (a query's products with the prefix's keys and
/// values) is counted as the engine runs it: once for a shared token, and in the layers that run
/// the questions' last tokens alone, for those alone.
pub fn flops_as_run(
    config: &ModelConfig,
    patches: usize,
    prefix: usize,
    questions: usize,
    suffix: usize,
    layers: QuestionLayers,
    shared: usize,
) -> ImageFlops {
    if let Some(count) = config.family.architecture().own_flops() {
        return count(&config.text, &config.vision, patches, prefix, questions, suffix, layers, shared);
    }
    let v = &config.vision;
    let (d, i) = (v.hidden_size as f64, v.intermediate_size as f64);
    // gate, up and down, or fc1 and fc2
    let mlp = if config.family.architecture().gated_vision_mlp() { 3.0 * d * i } else { 2.0 * d * i };
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
    let full = 2.0 * (gate * h * q + 2.0 * h * kv + q * h);
    // A Gated DeltaNet layer per token: its projections (qkv, z, b, a, out), the convolution, and
    // the delta rule's reads and writes of each value head's state as the recurrent form does them.
    // What of it reads the row (the convolution and the rule), and the rest.
    let (linear_rows, linear_tokens) = t.linear.map_or((0.0, 0.0), |l| {
        let (kd, vd, heads) = (l.key_dim() as f64, l.value_dim() as f64, l.num_value_heads as f64);
        let projections = 2.0 * h * (2.0 * kd + vd + vd + 2.0 * heads) + 2.0 * vd * h;
        let conv = 2.0 * l.conv_dim() as f64 * l.conv_kernel_dim as f64;
        // Per value head: decay the state, read k^T S, write k delta^T, read q^T S (1 + 2 + 2 + 2).
        let rule = 7.0 * heads * (l.key_head_dim * l.value_head_dim) as f64;
        (conv + rule, projections)
    });
    let linear = linear_rows + linear_tokens;
    let linear_layers = t.layer_types.iter().filter(|&&k| k == LayerKind::LinearAttention).count() as f64;
    // The MLP a token goes through: a dense layer's, or in a sparse layer the router, its top-k
    // experts and the shared expert (the active parameters, not all the experts).
    let dense_mlp = 2.0 * 3.0 * h * t.intermediate_size as f64;
    let mlp = |l: usize| match &t.moe {
        Some(m) if m.sparse_layers[l] => {
            let shared = m.shared_expert_intermediate_size.map_or(0.0, |s| 2.0 * (3.0 * h * s as f64 + h));
            2.0 * h * m.num_experts as f64 + m.num_experts_per_tok as f64 * 2.0 * 3.0 * h * m.moe_intermediate_size as f64 + shared
        }
        _ => dense_mlp,
    };
    let mixer = |kind: LayerKind| if kind == LayerKind::FullAttention { full } else { linear };
    let per_token: f64 = t.layer_types.iter().enumerate().map(|(l, &kind)| mixer(kind) + mlp(l)).sum();
    // The prefix stops its last layer at what that layer keeps: an attention layer's keys and
    // values, a linear layer's state (its whole mixer).
    let (last, last_kind) = (t.layer_types.len().saturating_sub(1), t.layer_types.last().copied());
    let (prefix_per_token, prefix_full_layers) = match last_kind {
        Some(LayerKind::FullAttention) => (per_token - full - mlp(last) + 2.0 * 2.0 * h * kv, full_layers - 1.0),
        Some(LayerKind::LinearAttention) => (per_token - mlp(last), full_layers),
        None => (0.0, 0.0),
    };
    let (p, s, n) = (prefix as f64, suffix as f64, questions as f64);
    let prefix_flops = p * prefix_per_token + 4.0 * prefix_full_layers * q * p * (p + 1.0) / 2.0;
    // One query's attention to the prefix in a full-attention layer; in the last layer, where the
    // questions run their last tokens alone, only those meet it.
    let prefix_part = 4.0 * q * p;
    let narrowed_full = f64::from(layers == QuestionLayers::LastTokens && last_kind == Some(LayerKind::FullAttention));
    let suffix_flops = n
        * (question_linear(s, per_token, prefix_per_token, layers) + 4.0 * full_layers * q * (s * p + s * (s + 1.0) / 2.0)
            - narrowed_full * (s - 1.0).max(0.0) * prefix_part);
    // A shared token's parts as far as the cache, but those that read its row (every linear
    // layer's, which all come before the cache ends), and its attention to the prefix.
    let saved = shared as f64 * (prefix_per_token - linear_layers * linear_rows + (full_layers - narrowed_full) * prefix_part);
    let logits = n * 2.0 * h * t.vocab_size as f64;
    ImageFlops { vision, prefix: prefix_flops, questions: suffix_flops - saved + logits }
}

/// A question's linear FLOPs (attention's products aside) for its `s` tokens: every token
/// through every layer, or, where only the last token goes on, every token as far as a
/// prefix's token goes (`up_to_cache` a token) and the last one the rest of the way.
pub(crate) fn question_linear(s: f64, per_token: f64, up_to_cache: f64, layers: QuestionLayers) -> f64 {
    match layers {
        QuestionLayers::Whole => s * per_token,
        QuestionLayers::LastTokens => s * up_to_cache + (per_token - up_to_cache),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::PreprocessorConfig;

    fn fixture_json(family: &str, file: &str) -> serde_json::Value {
        let path = crate::repository().join("fixtures/vlm").join(family).join(file);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// A fixture model's config.
    pub fn config(family: &str) -> ModelConfig {
        ModelConfig::from_json(&fixture_json(family, "config.json")).unwrap()
    }

    /// A fixture model's preprocessor config (for the engine's throughput tests).
    #[cfg(feature = "libtorch")]
    pub fn preprocessor(family: &str) -> PreprocessorConfig {
        PreprocessorConfig::from_json(&fixture_json(family, "preprocessor_config.json")).unwrap()
    }

    /// A file of benches/configs (`NAME.config.json`, `NAME.preprocessor.json`), as JSON.
    pub fn bench_json(file: &str) -> serde_json::Value {
        let path = crate::repository().join("benches/configs").join(file);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// A full-size architecture of benches/configs and its preprocessor.
    pub fn bench_config(name: &str) -> (ModelConfig, PreprocessorConfig) {
        (
            ModelConfig::from_json(&bench_json(&format!("{name}.config.json"))).unwrap(),
            PreprocessorConfig::from_json(&bench_json(&format!("{name}.preprocessor.json"))).unwrap(),
        )
    }

    #[test]
    fn flops_grow_with_every_input_and_count_the_linear_layers() {
        let c = config("qwen2_5_vl");
        let base = flops_per_image(&c, 256, 80, 10, 20);
        assert!(flops_per_image(&c, 512, 80, 10, 20) > base);
        assert!(flops_per_image(&c, 256, 160, 10, 20) > base);
        assert!(flops_per_image(&c, 256, 80, 20, 20) > base);
        // One question token with no context is 2 x the text linear weights (the logits aside).
        let t = &c.text;
        let (h, kv) = (t.hidden_size as f64, (t.num_key_value_heads * t.head_dim()) as f64);
        let layer = 2.0 * h * h + 2.0 * h * kv + 3.0 * h * t.intermediate_size as f64;
        let layers = t.num_hidden_layers as f64;
        let one = one_question_token(&c);
        assert!((one - (2.0 * layers * layer + 4.0 * layers * h)).abs() < 1e-6, "{one} vs {layer}");
        // One prefix token stops at the last layer's keys and values.
        let prefix = flops_by_stage(&c, 0, 1, 0, 0).prefix;
        let expected = 2.0 * (layers - 1.0) * layer + 4.0 * (layers - 1.0) * h + 2.0 * 2.0 * h * kv;
        assert!((prefix - expected).abs() < 1e-6, "{prefix} vs {expected}");
    }

    /// The FLOPs of one question token after no prefix, its answer's logits left out: every
    /// layer's, whole.
    fn one_question_token(c: &ModelConfig) -> f64 {
        flops_by_stage(c, 0, 0, 1, 1).questions - 2.0 * c.text.hidden_size as f64 * c.text.vocab_size as f64
    }

    /// A prefix stops at what its cache keeps: a hybrid's last linear layer whole but for its
    /// MLP, and Gemma 4 E4B's 18 KV-shared layers not at all.
    #[test]
    fn a_prefix_is_counted_to_its_cache() {
        let (mut c, _) = bench_config("qwen3_5_9b");
        c.text.layer_types.push(LayerKind::LinearAttention);
        c.text.num_hidden_layers += 1;
        let t = &c.text;
        let mlp = 2.0 * 3.0 * t.hidden_size as f64 * t.intermediate_size as f64;
        // One key for each of the 8 full-attention layers' queries.
        let context = 4.0 * 8.0 * (t.num_attention_heads * t.head_dim) as f64;
        let whole = one_question_token(&c) - context;
        let prefix = flops_by_stage(&c, 0, 1, 0, 0).prefix;
        assert!((prefix - (whole - mlp + context)).abs() < 1.0, "{prefix} vs {whole}");

        let (e4b, _) = bench_config("gemma4_e4b");
        let g = e4b.text.own.get::<crate::families::gemma4::Gemma4Text>().unwrap();
        assert_eq!(g.layers.iter().filter(|l| l.kv_from.is_some()).count(), 18);
        let prefix = flops_by_stage(&e4b, 0, 100, 0, 0).prefix;
        let question = flops_by_stage(&e4b, 0, 0, 100, 1).questions - 100.0 * 2.0 * 2560.0 * 262144.0;
        // Per token, the prefix does the 23 whole layers and a 24th's keys and values of 42.
        assert!((0.50..0.60).contains(&(prefix / question)), "{prefix} / {question}");
    }

    /// benches/configs holds Qwen3-VL-8B's architecture; its FLOPs per 1024 x 1024 image with 57
    /// questions, pinned to the closed form worked out separately: vision 5.798 TFLOP (27 blocks
    /// over 4,096 patches, the merger and three DeepStack mergers), text 33.814 TFLOP (36 layers,
    /// 1,040 prefix tokens through 35 of them and the last one's keys and values, 57 x 24 suffix
    /// tokens likewise, then each question's last token through the rest of the last layer (its
    /// query and output projections and MLP, 369.1 MFLOP, and alone of its question's tokens
    /// there, its attention to the prefix), 57 answer rows of the LM head).
    #[test]
    fn the_qwen3_vl_benchmark_config_is_the_8b_and_its_flops_are_pinned() {
        let (c, pre) = bench_config("qwen3_vl_8b");
        assert_eq!((c.family.name(), pre.patch_size, pre.factor(), pre.max_pixels), ("qwen3_vl", 16, 32, 16_777_216));
        assert_eq!((c.text.head_dim, c.vision.deepstack_visual_indexes.as_slice()), (128, &[8, 16, 24][..]));
        let t = &c.text;
        let text_linear = one_question_token(&c) / 2.0 - 2.0 * t.num_hidden_layers as f64 * 4096.0;
        assert!((text_linear - 6.945767424e9).abs() < 1.0, "{text_linear}");
        let flops = flops_per_image(&c, 64 * 64, 16 + 1024, 57, 24);
        assert!((flops - 39589230542848.0).abs() / flops < 1e-12, "{flops}");
        // DeepStack's three mergers: 4 x 2 x 1,024 x (4,608² + 4,608 x 4,096) of the vision part.
        let mut no_deepstack = c.clone();
        no_deepstack.vision.deepstack_visual_indexes.clear();
        let deepstack = flops - flops_per_image(&no_deepstack, 64 * 64, 16 + 1024, 57, 24);
        assert!((deepstack - 3.0 * 2.0 * 1024.0 * (4608.0 * 4608.0 + 4608.0 * 4096.0)).abs() < 1.0, "{deepstack}");
    }

    /// Qwen3.5-9B's architecture and its FLOPs per 1024 x 1024 image with 57 questions, pinned to
    /// a closed form worked out separately: per text token 13.927 GFLOP (8 gated-attention layers
    /// at 117.4 MFLOP, 24 Gated DeltaNet layers at 138.5 MFLOP with their convolution and delta
    /// rule, 32 MLPs at 302.0 MFLOP); vision 5.551 TFLOP (no DeepStack); text 32.956 TFLOP (the
    /// prefix's 1,040 tokens and the questions' 57 x 24 through 31 layers and the last one's keys
    /// and values; each question's last token through the rest of it, 402.7 MFLOP, and alone of
    /// its question's tokens there, its attention to the prefix).
    #[test]
    fn the_qwen3_5_benchmark_config_is_the_9b_and_its_flops_are_pinned() {
        let (c, pre) = bench_config("qwen3_5_9b");
        assert_eq!((c.family.name(), pre.factor()), ("qwen3_5", 32));
        let t = &c.text;
        assert_eq!((t.head_dim, t.rotary_dim, t.variant.gated_attention), (256, 64, true));
        let full = t.layer_types.iter().filter(|&&k| k == LayerKind::FullAttention).count();
        assert_eq!((t.layer_types.len(), full), (32, 8));
        assert!(c.vision.deepstack_visual_indexes.is_empty());
        let one = one_question_token(&c);
        assert!((one - (13926662144.0 + 4.0 * 8.0 * 4096.0)).abs() < 1.0, "{one}");
        let flops = flops_per_image(&c, 64 * 64, 16 + 1024, 57, 24);
        assert!((flops - 38484660846592.0).abs() / flops < 1e-12, "{flops}");
    }

    /// A question's tokens all go as far as a prefix's (the last layer's keys and values; on
    /// Gemma 4 E4B, the 24th layer's of 42); only its last token goes the rest of the way.
    #[test]
    fn only_a_questions_last_token_runs_the_last_layers() {
        let question = |c: &ModelConfig, s: usize, layers| flops_as_run(c, 0, 0, 1, s, layers, 0).questions;
        let (c, _) = bench_config("qwen3_vl_8b");
        // The last layer's query and output projections (4,096 x 4,096 each) and MLP.
        let rest = 2.0 * 2.0 * 4096.0 * 4096.0 + 2.0 * 3.0 * 4096.0 * 12288.0;
        let saved = question(&c, 24, QuestionLayers::Whole) - question(&c, 24, QuestionLayers::LastTokens);
        assert!((saved - 23.0 * rest).abs() < 1.0, "{saved} vs {}", 23.0 * rest);
        assert_eq!(question(&c, 1, QuestionLayers::Whole), question(&c, 1, QuestionLayers::LastTokens));

        // E4B: 18 KV-shared layers and most of the 24th run on one token of a question's 24.
        let (e4b, _) = bench_config("gemma4_e4b");
        let logits = 2.0 * 2560.0 * 262144.0;
        let [whole, last] = [QuestionLayers::Whole, QuestionLayers::LastTokens].map(|l| question(&e4b, 24, l) - logits);
        let share = 1.0 - last / whole;
        assert!((0.38..0.44).contains(&share), "{share}");
        assert_eq!(flops_as_run(&e4b, 0, 1000, 0, 0, QuestionLayers::Whole, 0).prefix, flops_by_stage(&e4b, 0, 1000, 0, 0).prefix);
    }

    /// benches/configs holds the 7B's real architecture: about 7.6B parameters, 6.5B of them in
    /// the text decoder's linear layers, and about 40 TFLOP to score a 1024 x 1024 image.
    #[test]
    fn the_benchmark_config_is_the_7b() {
        let (c, pre) = bench_config("qwen2_5_vl_7b");
        assert_eq!((c.family.name(), pre.patch_size, pre.max_pixels), ("qwen2_5_vl", 14, 12845056));
        let t = &c.text;
        let text_linear = one_question_token(&c) / 2.0 - 2.0 * t.num_hidden_layers as f64 * t.hidden_size as f64;
        assert!((6.4e9..6.6e9).contains(&text_linear), "{text_linear}");
        // 1036 x 1036 after resizing: 74 x 74 patches, 1,369 image tokens.
        let tflop = flops_per_image(&c, 74 * 74, 16 + 1369, 57, 24) / 1e12;
        assert!((30.0..60.0).contains(&tflop), "{tflop}");
    }
}
