//! Gemma 4's text decoder, as transformers 5.23 computes it (`Gemma4TextModel`).
//!
//! A layer: RMSNorm, attention, RMSNorm, add; RMSNorm, MLP (beside a routed mixture of experts
//! in 26B-A4B), RMSNorm, add; then, in E2B/E4B, its slice of the per-layer input embeddings
//! gated in; the whole scaled by the layer's stored scalar. Attention has no 1/sqrt(d) scale:
//! queries and keys are RMS-normalised per head instead (values too, without a weight). Sliding
//! layers see the last `sliding_window` positions; full layers have their own head width and
//! rotary settings, and with `attention_k_eq_v` their key projection serves as values. The last
//! `num_kv_shared_layers` layers compute no keys or values: they attend over those of the last
//! earlier layer of their type. Logits are soft-capped.

use tch::{Kind, Tensor};

use super::attention::Attention;
use super::norm::Norm;
use super::{Gemma4Text, RopeSettings};
use crate::cache::{DecoderCache, LayerCache};
use crate::config::TextConfig;
use crate::decoder_input::Embedded;
use crate::error::VlmError;
use crate::families::OwnDecoder;
use crate::layers::{self, GatedMlp, Linear, Turn};
use crate::moe::Experts;
use crate::part_clock::timed;
use crate::real_tokens::{tokens_of, LastTokens, QuestionRows, RealTokens};
use crate::shared_prefix::{self, Prefix};
use crate::weights::Weights;

/// One layer type's rotary angles, (batch, 1, seq, head_dim), f32.
type Rotary = Turn;

/// A layer type's inverse frequencies (head_dim / 2). `proportional` turns the first
/// partial x head_dim / 2 frequencies, with exponents over the whole head, the rest at zero.
fn inverse_frequencies(rope: RopeSettings, head_dim: i64, device: tch::Device) -> Tensor {
    let turned = (rope.partial * head_dim as f64 / 2.0).floor() as i64;
    let exponents = Tensor::arange_start_step(0, 2 * turned, 2, (Kind::Int64, device)).to_kind(Kind::Float) / head_dim as f64;
    let inv = Tensor::from(rope.theta as f32).to_device(device).pow(&exponents).reciprocal();
    let still = head_dim / 2 - turned;
    if still == 0 {
        inv
    } else {
        Tensor::cat(&[inv, Tensor::zeros([still], (Kind::Float, device))], 0)
    }
}

fn rotary(inv_freq: &Tensor, positions: &Tensor) -> Rotary {
    let angles = positions.to_kind(Kind::Float).unsqueeze(-1) * inv_freq; // (b, s, d/2)
    let full = Tensor::cat(&[&angles, &angles], -1).unsqueeze(1);
    Turn::new(full.cos(), &full.sin())
}

/// 26B-A4B's routed experts beside the dense MLP: the router reads the layer's input (the
/// residual stream, not the MLP's normed input), RMS-normalised without a weight, scaled per
/// channel and by hidden^-1/2; softmax in f32, top k renormalised, then each expert's own scale.
struct Routed {
    norm: Norm,
    scale: Tensor,
    proj: Linear,
    per_expert_scale: Tensor,
    top_k: i64,
    root: f64,
    experts: Experts,
    pre_norm: Norm,
    post_norm: Norm,
    post_mlp_norm: Norm,
}

impl Routed {
    fn forward(&self, residual: &Tensor, mlp_out: &Tensor) -> Tensor {
        let shape = residual.size();
        let flat = residual.reshape([-1, shape[2]]);
        let (weights, chosen) = timed("experts: router", || {
            let scaled = self.norm.forward(&flat) * &self.scale * self.root;
            let probs = self.proj.forward(&scaled).softmax(-1, Kind::Float);
            let (weights, chosen) = probs.topk(self.top_k, -1, true, true);
            let weights = &weights / weights.sum_dim_intlist(-1, true, Kind::Float);
            (weights * self.per_expert_scale.index_select(0, &chosen.flatten(0, -1)).view_as(&chosen), chosen)
        });
        let routed = self.experts.forward(&self.pre_norm.forward(&flat), &weights, &chosen).view(shape.as_slice());
        self.post_mlp_norm.forward(mlp_out) + self.post_norm.forward(&routed)
    }
}

struct DecoderLayer {
    attn: Attention,
    input_norm: Norm,
    post_attention_norm: Norm,
    pre_mlp_norm: Norm,
    post_mlp_norm: Norm,
    mlp: GatedMlp,
    routed: Option<Routed>,
    /// E2B/E4B: the gate and projection of this layer's per-layer input, and their norm.
    per_layer: Option<(Linear, Linear, Norm)>,
    scalar: Option<Tensor>,
    sliding: bool,
    kv_from: Option<usize>,
}

impl DecoderLayer {
    fn load(w: &Weights, prefix: &str, cfg: &TextConfig, g: &Gemma4Text, index: usize) -> Result<DecoderLayer, VlmError> {
        let layer = &g.layers[index];
        let (h, eps) = (cfg.hidden_size as i64, cfg.rms_norm_eps);
        let at = |name: &str| format!("{prefix}.{name}");
        let width = cfg.intermediate_size as i64 * if layer.double_wide { 2 } else { 1 };
        let routed = match &cfg.moe {
            Some(moe) => Some(Routed {
                norm: Norm::unscaled(eps),
                scale: w.get(&at("router.scale"), &[h])?,
                proj: Linear::load(w, &at("router.proj"), h, moe.num_experts as i64, false)?,
                per_expert_scale: w.get(&at("router.per_expert_scale"), &[moe.num_experts as i64])?,
                top_k: moe.num_experts_per_tok as i64,
                root: (h as f64).powf(-0.5),
                experts: Experts::load(w, &at("experts"), h, moe, true)?,
                pre_norm: Norm::load(w, &at("pre_feedforward_layernorm_2"), h, eps)?,
                post_norm: Norm::load(w, &at("post_feedforward_layernorm_2"), h, eps)?,
                post_mlp_norm: Norm::load(w, &at("post_feedforward_layernorm_1"), h, eps)?,
            }),
            None => None,
        };
        let per_layer = match g.per_layer_input {
            Some((p, _)) => Some((
                Linear::load(w, &at("per_layer_input_gate"), h, p as i64, false)?,
                Linear::load(w, &at("per_layer_projection"), p as i64, h, false)?,
                Norm::load(w, &at("post_per_layer_input_norm"), h, eps)?,
            )),
            None => None,
        };
        Ok(DecoderLayer {
            attn: Attention::load(w, &at("self_attn"), cfg, layer)?,
            input_norm: Norm::load(w, &at("input_layernorm"), h, eps)?,
            post_attention_norm: Norm::load(w, &at("post_attention_layernorm"), h, eps)?,
            pre_mlp_norm: Norm::load(w, &at("pre_feedforward_layernorm"), h, eps)?,
            post_mlp_norm: Norm::load(w, &at("post_feedforward_layernorm"), h, eps)?,
            mlp: GatedMlp::load_gelu_tanh(w, &at("mlp"), h, width)?,
            routed,
            per_layer,
            // A buffer transformers saves with the weights; one where a file leaves it out.
            scalar: if w.has(&at("layer_scalar")) { Some(w.get(&at("layer_scalar"), &[1])?) } else { None },
            sliding: layer.sliding,
            kv_from: layer.kv_from,
        })
    }

    /// The layer around its attention, which `attend` runs on the normed input: `x` (batch, seq,
    /// hidden), or only the real tokens of its rows (1, tokens, hidden), `per_layer_input` then
    /// theirs alone too.
    fn forward(&self, x: &Tensor, per_layer_input: Option<&Tensor>, attend: impl FnOnce(&Attention, &Tensor) -> Tensor) -> Tensor {
        let attended = timed("attention", || attend(&self.attn, &self.input_norm.forward(x)));
        let x = x + self.post_attention_norm.forward(&attended);
        let mlp = timed("mlp", || self.mlp.forward(&self.pre_mlp_norm.forward(&x)));
        let mlp = match &self.routed {
            Some(routed) => timed("experts", || routed.forward(&x, &mlp)),
            None => mlp,
        };
        let mut x = &x + self.post_mlp_norm.forward(&mlp);
        if let (Some((gate, projection, norm)), Some(input)) = (&self.per_layer, per_layer_input) {
            let gated = gate.forward(&x).gelu("tanh") * input;
            x = &x + norm.forward(&projection.forward(&gated));
        }
        match &self.scalar {
            Some(scalar) => x * scalar,
            None => x,
        }
    }
}

/// The per-layer input embeddings of E2B/E4B: a token's own slice per layer, plus a projection
/// of its input embedding, normed, the two averaged (times 2^-1/2).
struct PerLayerInputs {
    embed: Tensor,
    scale: f64,
    projection: Linear,
    norm: Norm,
    layers: i64,
    width: i64,
}

pub struct Gemma4Decoder {
    embed_tokens: Tensor,
    embed_scale: f64,
    per_layer: Option<PerLayerInputs>,
    layers: Vec<DecoderLayer>,
    norm: Norm,
    lm_head: Tensor,
    softcap: Option<f64>,
    sliding_freq: Tensor,
    full_freq: Tensor,
    window: i64,
    bidirectional_vision: bool,
    /// Image placeholders take the padding token's per-layer embeddings, as transformers does.
    image_token_id: i64,
    /// The video and audio placeholders, embedded as the pad token like the image's.
    media_token_ids: Vec<i64>,
    pad_token_id: i64,
}

impl Gemma4Decoder {
    pub fn load(w: &Weights, cfg: &TextConfig, image_token_id: u32) -> Result<Gemma4Decoder, VlmError> {
        let g = cfg.own.get::<Gemma4Text>().ok_or_else(|| VlmError::Input("Gemma 4's decoder needs its text config".into()))?;
        let (h, v, eps) = (cfg.hidden_size as i64, cfg.vocab_size as i64, cfg.rms_norm_eps);
        // Weights names "model.language_model.*" as "model.*" (see `weights::normalize`).
        let p = "model";
        let embed_tokens = w.get(&format!("{p}.embed_tokens.weight"), &[v, h])?;
        let per_layer = match g.per_layer_input {
            Some((width, vocab)) => {
                let (width, layers) = (width as i64, cfg.num_hidden_layers as i64);
                Some(PerLayerInputs {
                    embed: w.get(&format!("{p}.embed_tokens_per_layer.weight"), &[vocab as i64, layers * width])?,
                    scale: round_to(embed_tokens.kind(), (width as f64).sqrt()),
                    projection: Linear::load(w, &format!("{p}.per_layer_model_projection"), h, layers * width, false)?,
                    norm: Norm::load(w, &format!("{p}.per_layer_projection_norm"), width, eps)?,
                    layers,
                    width,
                })
            }
            None => None,
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| DecoderLayer::load(w, &format!("{p}.layers.{l}"), cfg, g, l))
            .collect::<Result<Vec<_>, VlmError>>()?;
        let lm_head = if w.has("lm_head.weight") && !cfg.tie_word_embeddings {
            w.get("lm_head.weight", &[v, h])?
        } else {
            embed_tokens.shallow_clone()
        };
        let device = embed_tokens.device();
        let head_of = |sliding: bool| g.layers.iter().find(|l| l.sliding == sliding).map_or(cfg.head_dim, |l| l.head_dim) as i64;
        Ok(Gemma4Decoder {
            embed_scale: round_to(embed_tokens.kind(), (h as f64).sqrt()),
            embed_tokens,
            per_layer,
            layers,
            norm: Norm::load(w, &format!("{p}.norm"), h, eps)?,
            lm_head,
            softcap: g.final_logit_softcapping,
            sliding_freq: inverse_frequencies(g.sliding_rope, head_of(true), device),
            full_freq: inverse_frequencies(g.full_rope, head_of(false), device),
            window: g.sliding_window as i64,
            bidirectional_vision: g.bidirectional_vision,
            image_token_id: i64::from(image_token_id),
            pad_token_id: i64::from(g.pad_token_id),
            media_token_ids: cfg.other_media_token_ids.iter().map(|&id| i64::from(id)).collect(),
        })
    }

    fn per_layer_inputs(&self, input: &Embedded) -> Option<Tensor> {
        let p = self.per_layer.as_ref()?;
        let (b, s) = (input.embeds.size()[0], input.embeds.size()[1]);
        let h = input.embeds.size()[2] as f64;
        let projected = p.projection.forward(&input.embeds) * h.powf(-0.5);
        let projected = p.norm.forward(&projected.view([b, s, p.layers, p.width]));
        let own = input.per_layer.as_ref().expect("Gemma 4's embed gives per-layer embeddings");
        Some((projected + own) * 2f64.powf(-0.5))
    }

    /// The sliding layers' mask: `mask` (the causal one, with any padding) with all but the
    /// last `sliding_window` keys each query sees hidden. The keys a query sees are its row's
    /// real tokens up to itself, one position apart whatever padding lies between them in the
    /// cache, so the window counts them from the end. With bidirectional vision and an image in
    /// this chunk (a prefix, one row, no padding), the image's tokens also see each other both
    /// ways, the window still applying.
    fn sliding_mask(&self, mask: &Tensor, past: i64, seq: i64, image_span: Option<(i64, i64)>) -> Tensor {
        let device = mask.device();
        let hidden = f64::from(f32::MIN);
        if let Some((start, end)) = image_span.filter(|_| self.bidirectional_vision) {
            let q = Tensor::arange_start(past, past + seq, (Kind::Int64, device)).view([seq, 1]);
            let k = Tensor::arange(past + seq, (Kind::Int64, device)).view([1, past + seq]);
            let (start, end) = (past + start, past + end);
            let in_image = |t: &Tensor| t.ge(start).logical_and(&t.lt(end));
            let within = k.gt_tensor(&(&q - self.window));
            let visible = k.le_tensor(&q).logical_or(&in_image(&q).logical_and(&in_image(&k))).logical_and(&within);
            // Filled in f32 (the most negative f32 overflows a bf16 fill), then converted: -inf.
            let shape = [1, 1, seq, past + seq];
            return Tensor::zeros(shape, (Kind::Float, device))
                .masked_fill(&visible.logical_not().view(shape), hidden)
                .to_kind(mask.kind());
        }
        let sees = mask.to_kind(Kind::Float).gt(hidden / 2.0);
        // For each key, how many keys the query sees from it to the end.
        let from_end = sees.flip([-1]).cumsum(-1, Kind::Int64).flip([-1]);
        mask.to_kind(Kind::Float).masked_fill(&from_end.gt(self.window), hidden).to_kind(mask.kind())
    }

    /// The layers of [`Self::forward_masked`]: every one whole, or with `until`, those before it
    /// whole and `until` only as far as its keys and values; the residual stream after.
    fn run_layers(&self, input: &Embedded, positions: &Tensor, cache: &mut DecoderCache, mask: &Tensor, until: Option<usize>) -> Tensor {
        let seq = input.embeds.size()[1];
        let past = cache.len();
        let positions = positions.get(0);
        let (sliding_rotary, full_rotary) = (rotary(&self.sliding_freq, &positions), rotary(&self.full_freq, &positions));
        let sliding_mask = self.sliding_mask(mask, past, seq, input.image_span);
        let per_layer = self.per_layer_inputs(input);
        if cache.layers.len() < self.layers.len() {
            cache.layers.resize_with(self.layers.len(), LayerCache::default);
        }
        let mut x = input.embeds.shallow_clone();
        for (index, layer) in self.layers.iter().enumerate() {
            let (rotary, mask) = if layer.sliding { (&sliding_rotary, &sliding_mask) } else { (&full_rotary, mask) };
            if until == Some(index) {
                let slot = &mut cache.layers[index];
                let _ = timed("attention", || layer.attn.append_keys_values(&layer.input_norm.forward(&x), rotary, slot));
                break;
            }
            let shared = layer.kv_from.map(|source| match &cache.layers[source] {
                LayerCache::Attention(k, v) => (k.shallow_clone(), v.shallow_clone()),
                _ => unreachable!("the source layer ran before this one"),
            });
            let own = per_layer.as_ref().map(|p| p.select(2, index as i64));
            let slot = &mut cache.layers[index];
            x = layer.forward(&x, own.as_ref(), |attn, normed| attn.forward(normed, rotary, mask, slot, shared));
        }
        x
    }

    /// The sliding window for rows after a prefix of `past` tokens: what each of the rows' `seq`
    /// queries sees of the prefix (seq, past) and of its own row (`suffix_mask` narrowed), as
    /// additive f32 masks. Query i sits at `past + i`; a key `sliding_window` or more behind it
    /// is hidden, as [`Self::sliding_mask`] hides it for the same rows run after a copied prefix.
    fn window_masks(&self, past: i64, seq: i64, suffix_mask: &Tensor) -> (Tensor, Tensor) {
        let device = suffix_mask.device();
        let hidden = f64::from(f32::MIN);
        let query = Tensor::arange_start(past, past + seq, (Kind::Int64, device)).view([seq, 1]);
        let too_far = |keys: Tensor| (&query - keys).ge(self.window);
        let prefix_keys = Tensor::arange(past, (Kind::Int64, device)).view([1, past]);
        let prefix = Tensor::zeros([seq, past], (Kind::Float, device)).masked_fill(&too_far(prefix_keys), hidden);
        let own_keys = Tensor::arange_start(past, past + seq, (Kind::Int64, device)).view([1, seq]);
        let suffix = suffix_mask.to_kind(Kind::Float).view([seq, seq]).masked_fill(&too_far(own_keys), hidden);
        // Kept in f32: a hidden key is the most negative f32, never -inf, so a query that sees
        // none of the prefix still gives that part a finite maximum (and zero weight).
        (prefix, suffix)
    }

    fn softcap(&self, logits: Tensor) -> Tensor {
        match self.softcap {
            Some(cap) => (logits / cap).tanh() * cap,
            None => logits,
        }
    }

}

/// The calls the registry's [`TextModel`](crate::families::TextModel) hands Gemma 4's decoder.
impl OwnDecoder for Gemma4Decoder {
    /// Token embeddings times sqrt(hidden) (rounded to the weights' type, as transformers does),
    /// and each token's per-layer embeddings where the model has them.
    fn embed(&self, ids: &Tensor) -> Embedded {
        let (b, s) = (ids.size()[0], ids.size()[1]);
        // Every media placeholder (image, video, audio) embeds as the pad token, in the main
        // embedding and the per-layer inputs, as transformers does on every step (a generated
        // `<|audio|>` included); the image's positions then take the image's features.
        let media = self.media_token_ids.iter().fold(ids.eq(self.image_token_id), |m, &id| m.logical_or(&ids.eq(id)));
        let ids = ids.where_scalarother(&media.logical_not(), self.pad_token_id);
        let embeds = self.embed_tokens.index_select(0, &ids.flatten(0, -1)).view([b, s, -1]) * self.embed_scale;
        let per_layer =
            self.per_layer.as_ref().map(|p| p.embed.index_select(0, &ids.flatten(0, -1)).view([b, s, p.layers, p.width]) * p.scale);
        Embedded { embeds, per_layer, image_span: None }
    }

    /// Runs `input` at `positions` (3, batch, seq; the first axis is the position) after what
    /// `cache` holds, under `mask` (batch or 1, 1, seq, cached + seq), and returns the final
    /// hidden states (batch, seq, hidden).
    fn forward_masked(&self, input: &Embedded, positions: &Tensor, cache: &mut DecoderCache, mask: &Tensor) -> Tensor {
        self.norm.forward(&self.run_layers(input, positions, cache, mask, None))
    }

    /// [`Self::forward_masked`] only as far as the cache needs: up to the last layer with keys
    /// and values of its own, and of that one only them. The KV-shared layers after it (18 of
    /// E4B's 42) keep nothing, so they do not run.
    fn fill_cache(&self, input: &Embedded, positions: &Tensor, cache: &mut DecoderCache, mask: &Tensor) {
        if let Some(last) = self.layers.iter().rposition(|l| l.kv_from.is_none()) {
            let _ = self.run_layers(input, positions, cache, mask, Some(last));
        }
    }

    /// Runs every row of `input` after the prefixes `cache` holds (one per image, the rows image
    /// by image), each read once by its image's rows ([`shared_prefix`]); `cache` comes from
    /// [`DecoderCache::shared`] and is left as it was. `suffix_mask` (seq, seq) is the rows'
    /// causal mask. A sliding layer's query at prefix length + i sees only the prefix keys less
    /// than `sliding_window` behind it; a KV-shared layer reads its source layer's prefix from
    /// the cache and its rows' keys from this pass. `fused`: the prefix part through libtorch's
    /// fused kernel. `rows`: which of the rows' tokens are real, where some are padding (only
    /// those go through the projections, norms and MLPs), and whether the stream narrows to each
    /// row's last token at the last layer with keys and values of its own: no later layer reads
    /// the other tokens (on E4B, the last 18 of 42 layers run on one token a row). Returns the
    /// final hidden state of each row's last token, (rows, hidden).
    fn forward_shared_prefix(
        &self,
        input: &Embedded,
        positions: &Tensor,
        cache: &mut DecoderCache,
        suffix_mask: &Tensor,
        fused: bool,
        rows: &QuestionRows,
    ) -> Tensor {
        let (seq, past, last) = (input.embeds.size()[1], cache.len(), &rows.last);
        let real = rows.real.as_ref();
        let (window_prefix, window_suffix) = self.window_masks(past, seq, suffix_mask);
        let every = Attending::new(self, &positions.get(0), real, None);
        let narrow_at = self.layers.iter().rposition(|l| l.kv_from.is_none()).filter(|_| rows.narrows);
        let narrowed = narrow_at.map(|_| Attending::new(self, &last.pick_in_rows(positions).get(0), Some(last.narrowed()), Some(last)));
        let mut at = &every;
        let mut per_layer = self.per_layer_inputs(input).map(|p| tokens_of(real, p));
        // The rows' own keys and values, kept only where a later layer reads them: a whole stack
        // of them would take gigabytes at many images a pass.
        let read_later: Vec<bool> = (0..self.layers.len()).map(|i| self.layers.iter().any(|l| l.kv_from == Some(i))).collect();
        let mut rows_kv: Vec<Option<(Tensor, Tensor)>> = (0..self.layers.len()).map(|_| None).collect();
        let mut x = tokens_of(real, input.embeds.shallow_clone());
        for (index, layer) in self.layers.iter().enumerate() {
            let source = layer.kv_from.unwrap_or(index);
            let LayerCache::Attention(k, v) = &cache.layers[source] else { unreachable!("every layer's prefix was prefilled") };
            let mut shared =
                layer.kv_from.map(|s| rows_kv[s].as_ref().map(|(k, v)| (k.shallow_clone(), v.shallow_clone())).expect("ran before"));
            if let (Some(narrowed), true) = (&narrowed, narrow_at == Some(index)) {
                // This layer's keys and values from every token, for it and the KV-shared layers
                // after it; the rest of it, and every layer after, from each row's last token.
                let own = layer.attn.kv.as_ref().expect("the last layer with keys and values of its own");
                let normed = timed("norms", || layer.input_norm.forward(&x));
                shared = Some(layer.attn.keys_values(own, &normed, every.rotary(layer.sliding), real));
                x = last.pick(&x);
                per_layer = per_layer.map(|p| last.pick(&p));
                at = narrowed;
            }
            let (rotary, mask) = (at.rotary(layer.sliding), if layer.sliding { &window_suffix } else { suffix_mask });
            let queries = shared_prefix::chosen_queries(at.real, at.last);
            let prefix = Prefix { k, v, mask: layer.sliding.then_some(&window_prefix), fused, queries };
            let own = per_layer.as_ref().map(|p| p.select(2, index as i64));
            let mut kept = None;
            x = layer.forward(&x, own.as_ref(), |attn, normed| {
                let (out, kv) = attn.forward_shared(normed, rotary, &prefix, mask, shared, at.real, at.last);
                kept = kv;
                out
            });
            if read_later[index] {
                rows_kv[index] = kept;
            }
        }
        match narrow_at {
            Some(_) => last.rows_alone(&self.norm.forward(&x)),
            None => last.rows_alone(&last.pick(&self.norm.forward(&x))),
        }
    }

    fn logits(&self, hidden: &Tensor) -> Tensor {
        self.softcap(hidden.linear(&self.lm_head, None::<&Tensor>))
    }

    /// The soft-capped logits of two tokens only, (rows, 2).
    fn answer_logits(&self, hidden: &Tensor, answer: (u32, u32)) -> Tensor {
        self.softcap(layers::answer_logits(hidden, &self.lm_head, answer))
    }
}

/// How a questions' pass turns and lays out its queries: for every token of the rows, or, where
/// the stream has narrowed, for each row's last.
struct Attending<'a> {
    sliding_rotary: Rotary,
    full_rotary: Rotary,
    real: Option<&'a RealTokens>,
    last: Option<&'a LastTokens>,
}

impl<'a> Attending<'a> {
    /// For queries at `positions` (rows, queries).
    fn new(decoder: &Gemma4Decoder, positions: &Tensor, real: Option<&'a RealTokens>, last: Option<&'a LastTokens>) -> Attending<'a> {
        let (sliding_rotary, full_rotary) = (rotary(&decoder.sliding_freq, positions), rotary(&decoder.full_freq, positions));
        Attending { sliding_rotary, full_rotary, real, last }
    }

    fn rotary(&self, sliding: bool) -> &Rotary {
        if sliding {
            &self.sliding_rotary
        } else {
            &self.full_rotary
        }
    }
}

/// `value` as the weights' type holds it (transformers multiplies by sqrt(hidden) cast to it:
/// 55.4256 becomes 55.5 in bf16).
fn round_to(kind: Kind, value: f64) -> f64 {
    Tensor::from(value as f32).to_kind(kind).to_kind(Kind::Double).double_value(&[])
}
