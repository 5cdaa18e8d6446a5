//! The text decoder the families share: Qwen2 and Qwen3 layers (grouped-query attention,
//! RMSNorm, gated SiLU MLP) with multimodal rotary positions (M-RoPE), a KV cache, and DeepStack's
//! image features added after the first layers. Where Qwen3 differs (q/k norms, no q/k/v bias,
//! an explicit head width, interleaved M-RoPE) the family's [`TextVariant`] says so.
//!
//! [`TextVariant`]: super::config::TextVariant

use tch::{Kind, Tensor};

use super::config::TextConfig;
use super::error::VlmError;
use super::layers::{apply_rotary, attention, GatedMlp, Linear, RmsNorm};
use super::weights::Weights;

/// Grouped-query self-attention with rotary positions (and, in Qwen3, each head's queries and
/// keys normalised first). Each call appends its keys and values to the layer's slot of the KV
/// cache and attends over all of them.
struct SelfAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl SelfAttention {
    fn load(w: &Weights, prefix: &str, cfg: &TextConfig) -> Result<SelfAttention, VlmError> {
        let h = cfg.hidden_size as i64;
        let (heads, kv_heads, head_dim) = (cfg.num_attention_heads as i64, cfg.num_key_value_heads as i64, cfg.head_dim() as i64);
        let at = |name: &str| format!("{prefix}.{name}");
        let (bias, o_bias) = (cfg.variant.qkv_bias, cfg.variant.o_bias);
        let qk_norm = if cfg.variant.qk_norm {
            Some((
                RmsNorm::load(w, &at("q_norm"), head_dim, cfg.rms_norm_eps)?,
                RmsNorm::load(w, &at("k_norm"), head_dim, cfg.rms_norm_eps)?,
            ))
        } else {
            None
        };
        Ok(SelfAttention {
            q: Linear::load(w, &at("q_proj"), h, heads * head_dim, bias)?,
            k: Linear::load(w, &at("k_proj"), h, kv_heads * head_dim, bias)?,
            v: Linear::load(w, &at("v_proj"), h, kv_heads * head_dim, bias)?,
            o: Linear::load(w, &at("o_proj"), heads * head_dim, h, o_bias)?,
            qk_norm,
            heads,
            kv_heads,
            head_dim,
        })
    }

    /// `x` (batch, seq, hidden) -> (batch, seq, hidden).
    fn forward(&self, x: &Tensor, rotary: &Rotary, mask: &Tensor, slot: &mut Option<(Tensor, Tensor)>, path: AttentionPath) -> Tensor {
        let (b, s) = (x.size()[0], x.size()[1]);
        let split_heads = |t: Tensor, heads: i64| t.view([b, s, heads, self.head_dim]).transpose(1, 2);
        let (q, k) = (split_heads(self.q.forward(x), self.heads), split_heads(self.k.forward(x), self.kv_heads));
        let (q, k) = match &self.qk_norm {
            Some((q_norm, k_norm)) => (q_norm.forward(&q), k_norm.forward(&k)),
            None => (q, k),
        };
        let (q, k) = (rotary.apply(&q), rotary.apply(&k));
        let v = split_heads(self.v.forward(x), self.kv_heads);
        let (k, v) = match slot.take() {
            Some((pk, pv)) => (Tensor::cat(&[pk, k], 2), Tensor::cat(&[pv, v], 2)),
            None => (k, v),
        };
        *slot = Some((k.shallow_clone(), v.shallow_clone()));
        // Each key/value head serves `groups` query heads.
        let groups = self.heads / self.kv_heads;
        let scale = (self.head_dim as f64).powf(-0.5);
        let out = if path == AttentionPath::FoldedGroups && s == 1 {
            // One new token: a key/value head's query heads become its queries, so the cache is
            // read in place instead of copied `groups` times (decoding is memory-bound).
            let q = q.view([b, self.kv_heads, groups, self.head_dim]);
            attention(&q, &k, &v, Some(mask), scale).view([b, self.heads, 1, self.head_dim])
        } else {
            let k = k.repeat_interleave_self_int(groups, 1, None);
            let v = v.repeat_interleave_self_int(groups, 1, None);
            attention(&q, &k, &v, Some(mask), scale)
        };
        self.o.forward(&out.transpose(1, 2).reshape([b, s, self.heads * self.head_dim]))
    }
}

/// How grouped-query attention meets its shared key/value heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionPath {
    /// Each key/value head repeated for its query heads, as transformers does: the scoring path,
    /// whose logits the release records.
    Repeated,
    /// For one new token per row, the query heads folded onto their key/value head: the same
    /// arithmetic without copying the cache (decoding).
    FoldedGroups,
}

/// One Qwen2 decoder layer: pre-norm attention and pre-norm gated MLP, each added back.
struct DecoderLayer {
    input_norm: RmsNorm,
    attn: SelfAttention,
    post_norm: RmsNorm,
    mlp: GatedMlp,
}

impl DecoderLayer {
    fn load(w: &Weights, prefix: &str, cfg: &TextConfig) -> Result<DecoderLayer, VlmError> {
        let (h, i) = (cfg.hidden_size as i64, cfg.intermediate_size as i64);
        let at = |name: &str| format!("{prefix}.{name}");
        Ok(DecoderLayer {
            input_norm: RmsNorm::load(w, &at("input_layernorm"), h, cfg.rms_norm_eps)?,
            attn: SelfAttention::load(w, &at("self_attn"), cfg)?,
            post_norm: RmsNorm::load(w, &at("post_attention_layernorm"), h, cfg.rms_norm_eps)?,
            mlp: GatedMlp::load(w, &at("mlp"), h, i, false)?,
        })
    }

    fn forward(&self, x: &Tensor, rotary: &Rotary, mask: &Tensor, slot: &mut Option<(Tensor, Tensor)>, path: AttentionPath) -> Tensor {
        let x = x + self.attn.forward(&self.input_norm.forward(x), rotary, mask, slot, path);
        &x + self.mlp.forward(&self.post_norm.forward(&x))
    }
}

/// cos and sin of the rotary angles for one forward pass: (batch, 1, seq, head_dim), f32.
struct Rotary {
    cos: Tensor,
    sin: Tensor,
}

impl Rotary {
    fn apply(&self, x: &Tensor) -> Tensor {
        apply_rotary(x, &self.cos, &self.sin)
    }
}

pub struct TextModel {
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Tensor,
    inv_freq: Tensor,
    /// For each rotary frequency, the position axis it turns with: 0 time, 1 height, 2 width.
    rope_axes: Tensor,
}

/// DeepStack features for one forward pass: the `layers[i].size(0)` sequence positions from
/// `start` (the image's) get `layers[i]` added after decoder layer i.
pub struct Deepstack {
    pub start: i64,
    pub layers: Vec<Tensor>,
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

    /// Applies `f` to every layer's keys and values.
    fn map(&self, f: impl Fn(&Tensor) -> Tensor) -> KvCache {
        KvCache { layers: self.layers.iter().map(|l| l.as_ref().map(|(k, v)| (f(k), f(v)))).collect() }
    }

    /// The cache zero-padded along the sequence to `len` positions (a key mask must hide them).
    pub fn padded(&self, len: i64) -> KvCache {
        let extra = len - self.len();
        if extra <= 0 {
            return self.map(Tensor::shallow_clone);
        }
        self.map(|t| t.constant_pad_nd([0, 0, 0, extra]))
    }

    /// Only the batch rows at `rows` (a 1-d int64 tensor), in that order.
    pub fn select_rows(&self, rows: &Tensor) -> KvCache {
        self.map(|t| t.index_select(0, rows))
    }

    /// Caches of the same length stacked along the batch.
    pub fn concat(caches: &[KvCache]) -> KvCache {
        let depth = caches.first().map_or(0, |c| c.layers.len());
        let layers = (0..depth)
            .map(|l| {
                let parts: Option<Vec<&(Tensor, Tensor)>> = caches.iter().map(|c| c.layers[l].as_ref()).collect();
                parts.map(|parts| {
                    let keys: Vec<&Tensor> = parts.iter().map(|(k, _)| k).collect();
                    let values: Vec<&Tensor> = parts.iter().map(|(_, v)| v).collect();
                    (Tensor::cat(&keys, 0), Tensor::cat(&values, 0))
                })
            })
            .collect();
        KvCache { layers }
    }

    /// The same cache repeated `n` times along the batch (one copy per question).
    pub fn expand(&self, n: i64) -> KvCache {
        self.map(|t| t.expand([n, -1, -1, -1], false).contiguous())
    }
}

impl TextModel {
    pub fn load(w: &Weights, cfg: &TextConfig) -> Result<TextModel, VlmError> {
        let (h, v) = (cfg.hidden_size as i64, cfg.vocab_size as i64);
        let head_dim = cfg.head_dim() as i64;
        let embed_tokens = w.get("model.embed_tokens.weight", &[v, h])?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| DecoderLayer::load(w, &format!("model.layers.{l}"), cfg))
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
        let rope_axes = Tensor::from_slice(&mrope_axes(&cfg.mrope_section, cfg.variant.mrope_interleaved)).to_device(device);
        Ok(TextModel { embed_tokens, layers, norm: RmsNorm::load(w, "model.norm", h, cfg.rms_norm_eps)?, lm_head, inv_freq, rope_axes })
    }

    pub fn embed(&self, ids: &Tensor) -> Tensor {
        self.embed_tokens.index_select(0, &ids.flatten(0, -1)).view([ids.size()[0], ids.size()[1], -1])
    }

    /// cos and sin for positions (3, batch, seq): each rotary frequency takes its angle from the
    /// temporal, height or width position, as `rope_axes` says.
    fn rotary(&self, positions: &Tensor) -> Rotary {
        let angles = positions.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq; // (3, b, s, d/2)
        let (b, s, half) = (angles.size()[1], angles.size()[2], angles.size()[3]);
        let axes = self.rope_axes.view([1, 1, 1, half]).expand([1, b, s, half], false);
        let half = angles.gather(0, &axes, false).squeeze_dim(0);
        let full = Tensor::cat(&[&half, &half], -1).unsqueeze(1);
        Rotary { cos: full.cos().to_kind(Kind::Float), sin: full.sin().to_kind(Kind::Float) }
    }

    /// Runs `embeds` (batch, seq, hidden) at `positions` (3, batch, seq) after what `cache` holds,
    /// causally, and returns the final hidden states (batch, seq, hidden).
    pub fn forward(&self, embeds: &Tensor, positions: &Tensor, cache: &mut KvCache, deepstack: Option<&Deepstack>) -> Tensor {
        let mask = causal_mask(embeds.size()[1], cache.len(), embeds.kind(), embeds.device());
        self.forward_masked(embeds, positions, cache, &mask, AttentionPath::Repeated, deepstack)
    }

    /// [`Self::forward`] with an explicit additive mask, (batch or 1, 1, seq, cached + seq): the
    /// batched decoder hides each row's padding with it.
    pub fn forward_masked(
        &self,
        embeds: &Tensor,
        positions: &Tensor,
        cache: &mut KvCache,
        mask: &Tensor,
        path: AttentionPath,
        deepstack: Option<&Deepstack>,
    ) -> Tensor {
        let rotary = self.rotary(positions);
        if cache.layers.len() < self.layers.len() {
            cache.layers.resize_with(self.layers.len(), || None);
        }
        let mut x = embeds.shallow_clone();
        for (index, (layer, slot)) in self.layers.iter().zip(cache.layers.iter_mut()).enumerate() {
            x = layer.forward(&x, &rotary, mask, slot, path);
            if let Some(features) = deepstack.and_then(|d| d.layers.get(index).map(|f| (d.start, f))) {
                x = add_rows(&x, features.0, features.1);
            }
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

/// `x` (batch, seq, hidden) with `rows` (n, hidden) added at sequence positions start..start + n.
fn add_rows(x: &Tensor, start: i64, rows: &Tensor) -> Tensor {
    let (n, seq) = (rows.size()[0], x.size()[1]);
    let added = x.narrow(1, start, n) + rows.to_kind(x.kind()).unsqueeze(0);
    Tensor::cat(&[x.narrow(1, 0, start), added, x.narrow(1, start + n, seq - start - n)], 1)
}

/// For each of the head_dim / 2 rotary frequencies, the M-RoPE axis it takes its angle from:
/// contiguous runs of `section` (Qwen2-VL), or time, height and width in turn while each axis
/// has frequencies left, the rest time (Qwen3-VL's interleaved layout).
fn mrope_axes(section: &[usize], interleaved: bool) -> Vec<i64> {
    if !interleaved {
        return section.iter().enumerate().flat_map(|(axis, &len)| std::iter::repeat_n(axis as i64 % 3, len)).collect();
    }
    let half: usize = section.iter().sum();
    let axis = |j: usize| match j % 3 {
        1 if j < 3 * section[1] => 1,
        2 if j < 3 * section[2] => 2,
        _ => 0,
    };
    (0..half).map(axis).collect()
}

/// Additive mask for `seq` new queries after `past` cached positions: query i (absolute
/// position past + i) sees keys 0..=past + i. Shape (1, 1, seq, past + seq).
fn causal_mask(seq: i64, past: i64, kind: Kind, device: tch::Device) -> Tensor {
    let mask = Tensor::ones([seq, past + seq], (Kind::Float, device)).triu(past + 1) * f64::from(f32::MIN);
    mask.to_kind(kind).view([1, 1, seq, past + seq])
}

#[cfg(test)]
mod tests {
    #[test]
    fn mrope_axes_in_sections_and_interleaved() {
        assert_eq!(super::mrope_axes(&[2, 3, 3], false), vec![0, 0, 1, 1, 1, 2, 2, 2]);
        // Qwen3-VL's [24, 20, 20] over 64 frequencies: t h w t h w ... until h and w run out at 60.
        let axes = super::mrope_axes(&[24, 20, 20], true);
        assert_eq!(&axes[..7], &[0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(&axes[58..], &[1, 2, 0, 0, 0, 0]);
        for axis in 0..3 {
            assert_eq!(axes.iter().filter(|&&a| a == axis).count(), [24, 20, 20][axis as usize]);
        }
    }
}
