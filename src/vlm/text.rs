//! The text decoder both families share: Qwen2 layers (grouped-query attention with q/k/v
//! biases, RMSNorm, gated SiLU MLP) with multimodal rotary positions (M-RoPE), and a KV cache.
// `x = x + y` on purpose: `+=` on a tch tensor adds in place, and `x` may share storage with
// the caller's input.
#![allow(clippy::assign_op_pattern)]

use tch::{Kind, Tensor};

use super::config::TextConfig;
use super::layers::{apply_rotary, attention, Linear, RmsNorm};
use super::model_dir::VlmError;
use super::weights::Weights;

struct Layer {
    input_norm: RmsNorm,
    post_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
}

pub struct TextModel {
    embed_tokens: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Tensor,
    inv_freq: Tensor,
    cfg: TextConfig,
}

/// Keys and values of every layer for the positions seen so far: (batch, kv_heads, seq, head_dim).
#[derive(Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    pub fn len(&self) -> i64 {
        self.layers.first().and_then(|l| l.as_ref()).map_or(0, |(k, _)| k.size()[2])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same cache repeated `n` times along the batch (one copy per question).
    pub fn expand(&self, n: i64) -> KvCache {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                l.as_ref().map(|(k, v)| (k.expand([n, -1, -1, -1], false).contiguous(), v.expand([n, -1, -1, -1], false).contiguous()))
            })
            .collect();
        KvCache { layers }
    }
}

impl TextModel {
    pub fn load(w: &Weights, cfg: &TextConfig) -> Result<TextModel, VlmError> {
        let (h, i, v) = (cfg.hidden_size as i64, cfg.intermediate_size as i64, cfg.vocab_size as i64);
        let head_dim = cfg.head_dim() as i64;
        let (q_out, kv_out) = (cfg.num_attention_heads as i64 * head_dim, cfg.num_key_value_heads as i64 * head_dim);
        let embed_tokens = w.get("model.embed_tokens.weight", &[v, h])?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let at = |name: &str| format!("model.layers.{l}.{name}");
                Ok(Layer {
                    input_norm: RmsNorm::load(w, &at("input_layernorm"), h, cfg.rms_norm_eps)?,
                    post_norm: RmsNorm::load(w, &at("post_attention_layernorm"), h, cfg.rms_norm_eps)?,
                    q: Linear::load(w, &at("self_attn.q_proj"), h, q_out, true)?,
                    k: Linear::load(w, &at("self_attn.k_proj"), h, kv_out, true)?,
                    v: Linear::load(w, &at("self_attn.v_proj"), h, kv_out, true)?,
                    o: Linear::load(w, &at("self_attn.o_proj"), q_out, h, false)?,
                    gate: Linear::load(w, &at("mlp.gate_proj"), h, i, false)?,
                    up: Linear::load(w, &at("mlp.up_proj"), h, i, false)?,
                    down: Linear::load(w, &at("mlp.down_proj"), i, h, false)?,
                })
            })
            .collect::<Result<Vec<_>, VlmError>>()?;
        // Tied checkpoints (2B/3B) have no lm_head.weight: the embedding matrix serves.
        let lm_head = if w.has("lm_head.weight") {
            w.get("lm_head.weight", &[v, h])?
        } else if cfg.tie_word_embeddings {
            embed_tokens.shallow_clone()
        } else {
            return Err(VlmError::Input("the checkpoint has no lm_head.weight and the config does not tie word embeddings".into()));
        };
        let device = embed_tokens.device();
        let exponents = Tensor::arange_start_step(0, head_dim, 2, (Kind::Int64, device)).to_kind(Kind::Float) / head_dim as f64;
        let inv_freq = Tensor::from(cfg.rope_theta as f32).to_device(device).pow(&exponents).reciprocal();
        Ok(TextModel {
            embed_tokens,
            layers,
            norm: RmsNorm::load(w, "model.norm", h, cfg.rms_norm_eps)?,
            lm_head,
            inv_freq,
            cfg: cfg.clone(),
        })
    }

    pub fn embed(&self, ids: &Tensor) -> Tensor {
        self.embed_tokens.index_select(0, &ids.flatten(0, -1)).view([ids.size()[0], ids.size()[1], -1])
    }

    /// cos and sin for positions (3, batch, seq): each rotary frequency takes its angle from the
    /// temporal, height or width position according to `mrope_section`. Shape (batch, 1, seq, head_dim).
    fn rotary(&self, positions: &Tensor) -> (Tensor, Tensor) {
        let angles = positions.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq; // (3, b, s, d/2)
        let mut parts = Vec::new();
        let mut start = 0i64;
        for (i, &len) in self.cfg.mrope_section.iter().enumerate() {
            parts.push(angles.get(i as i64 % 3).narrow(-1, start, len as i64));
            start += len as i64;
        }
        let half = Tensor::cat(&parts, -1);
        let full = Tensor::cat(&[&half, &half], -1).unsqueeze(1);
        (full.cos(), full.sin())
    }

    /// Runs `embeds` (batch, seq, hidden) at `positions` (3, batch, seq) after what `cache` holds,
    /// causally, and returns the final hidden states (batch, seq, hidden).
    pub fn forward(&self, embeds: &Tensor, positions: &Tensor, cache: &mut KvCache) -> Tensor {
        let (b, s) = (embeds.size()[0], embeds.size()[1]);
        let past = cache.len();
        let (heads, kv_heads, head_dim) =
            (self.cfg.num_attention_heads as i64, self.cfg.num_key_value_heads as i64, self.cfg.head_dim() as i64);
        let (cos, sin) = self.rotary(positions);
        let cos = cos.to_kind(Kind::Float);
        let sin = sin.to_kind(Kind::Float);
        // Query i (absolute position past + i) sees keys 0..=past + i.
        let mask = Tensor::ones([s, past + s], (Kind::Float, embeds.device())).triu(past + 1) * f64::from(f32::MIN);
        let mask = mask.to_kind(embeds.kind()).view([1, 1, s, past + s]);
        if cache.layers.len() < self.layers.len() {
            cache.layers.resize_with(self.layers.len(), || None);
        }
        let mut x = embeds.shallow_clone();
        for (layer, slot) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let h = layer.input_norm.forward(&x);
            let q = layer.q.forward(&h).view([b, s, heads, head_dim]).transpose(1, 2);
            let k = layer.k.forward(&h).view([b, s, kv_heads, head_dim]).transpose(1, 2);
            let v = layer.v.forward(&h).view([b, s, kv_heads, head_dim]).transpose(1, 2);
            let q = apply_rotary(&q, &cos, &sin);
            let k = apply_rotary(&k, &cos, &sin);
            let (k, v) = match slot.take() {
                Some((pk, pv)) => (Tensor::cat(&[pk, k], 2), Tensor::cat(&[pv, v], 2)),
                None => (k, v),
            };
            *slot = Some((k.shallow_clone(), v.shallow_clone()));
            let groups = heads / kv_heads;
            let k = k.repeat_interleave_self_int(groups, 1, None);
            let v = v.repeat_interleave_self_int(groups, 1, None);
            let out = attention(&q, &k, &v, Some(&mask), (head_dim as f64).powf(-0.5)).transpose(1, 2).reshape([b, s, heads * head_dim]);
            x = x + layer.o.forward(&out);
            let h = layer.post_norm.forward(&x);
            x = x + layer.down.forward(&(layer.gate.forward(&h).silu() * layer.up.forward(&h)));
        }
        self.norm.forward(&x)
    }

    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear(&self.lm_head, None::<&Tensor>)
    }

    /// The logits of two tokens only, (rows, 2), from hidden states (rows, hidden).
    pub fn answer_logits(&self, hidden: &Tensor, (yes, no): (u32, u32)) -> Tensor {
        let ids = Tensor::from_slice(&[i64::from(yes), i64::from(no)]).to_device(self.lm_head.device());
        hidden.linear(&self.lm_head.index_select(0, &ids), None::<&Tensor>)
    }
}
