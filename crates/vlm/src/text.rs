//! The text decoder the families share: Qwen2, Qwen3 and Qwen3.5 layers (grouped-query
//! attention or, in Qwen3.5's hybrid stack, Gated DeltaNet linear attention; RMSNorm; gated SiLU
//! MLP, or a sparse mixture of experts in the MoE families) with multimodal rotary positions (M-RoPE), a cache, and DeepStack's image features added
//! after the first layers. Where a family differs (q/k norms, biases, an explicit head width,
//! interleaved or partial M-RoPE, gated attention, zero-centred norms) its [`TextVariant`] and
//! `layer_types` say so.
//! The attention layers are `self_attention`'s; the questions' last layers may run on each
//! question's last token alone (`real_tokens`).
//!
//! [`TextVariant`]: super::config::TextVariant

use tch::{Kind, Tensor};

pub use super::cache::DecoderCache;
use super::cache::LayerCache;
use super::config::{LayerKind, TextConfig};
pub use super::decoder_input::Embedded;
use super::error::VlmError;
use super::families::qwen3_5::linear_attention::GatedDeltaNet;
use super::layers::{self, GatedMlp, RmsNorm, Turn};
use super::moe::SparseMoe;
use super::part_clock::timed;
use super::real_tokens::{rows_of, tokens_of, LastTokens, QuestionRows, RealTokens};
pub use super::self_attention::AttentionPath;
use super::self_attention::{Rotary, SelfAttention};
use super::weights::Weights;

/// How a layer mixes tokens.
enum Mixer {
    Attention(SelfAttention),
    Linear(GatedDeltaNet),
}

/// A layer's MLP: dense, or a sparse mixture of experts.
enum Mlp {
    Dense(GatedMlp),
    Sparse(SparseMoe),
}

impl Mlp {
    fn forward(&self, x: &Tensor) -> Tensor {
        match self {
            Mlp::Dense(mlp) => timed("mlp", || mlp.forward(x)),
            Mlp::Sparse(moe) => timed("experts", || moe.forward(x)),
        }
    }
}

/// One decoder layer: pre-norm token mixing and pre-norm MLP, each added back.
struct DecoderLayer {
    input_norm: RmsNorm,
    mixer: Mixer,
    post_norm: RmsNorm,
    mlp: Mlp,
}

/// What one forward pass gives every layer beside its input.
struct Step<'a> {
    rotary: &'a Rotary,
    mask: &'a Tensor,
    path: AttentionPath,
    /// (batch, seq): which new tokens are real, for the linear layers' states.
    valid: Option<&'a Tensor>,
    /// Where the residual stream holds only the rows' real tokens: which they are.
    real: Option<&'a RealTokens>,
}

impl DecoderLayer {
    fn load(w: &Weights, prefix: &str, cfg: &TextConfig, index: usize) -> Result<DecoderLayer, VlmError> {
        let (h, i) = (cfg.hidden_size as i64, cfg.intermediate_size as i64);
        let kind = cfg.layer_types[index];
        let at = |name: &str| format!("{prefix}.{name}");
        let mixer = match (kind, cfg.linear) {
            (LayerKind::FullAttention, _) => Mixer::Attention(SelfAttention::load(w, &at("self_attn"), cfg)?),
            (LayerKind::LinearAttention, Some(shape)) => Mixer::Linear(GatedDeltaNet::load(w, &at("linear_attn"), cfg, shape)?),
            (LayerKind::LinearAttention, None) => {
                return Err(VlmError::Input(format!("{prefix} is a linear-attention layer but the config gives no linear_* shapes")))
            }
        };
        Ok(DecoderLayer {
            input_norm: RmsNorm::load_decoder(w, &at("input_layernorm"), h, cfg)?,
            mixer,
            post_norm: RmsNorm::load_decoder(w, &at("post_attention_layernorm"), h, cfg)?,
            mlp: match &cfg.moe {
                Some(moe) if moe.sparse_layers[index] => Mlp::Sparse(SparseMoe::load(w, &at("mlp"), h, moe)?),
                _ => Mlp::Dense(GatedMlp::load(w, &at("mlp"), h, i, false)?),
            },
        })
    }

    /// `x` (batch, seq, hidden), or only its real tokens (1, tokens, hidden) where `step.real`
    /// says which they are: the mixer then lays out in rows what reads rows.
    fn forward(&self, x: &Tensor, step: &Step<'_>, slot: &mut LayerCache) -> Tensor {
        let normed = timed("norms", || self.input_norm.forward(x));
        let mixed = self.mix(&normed, step, slot);
        let x = x + mixed;
        let normed = timed("norms", || self.post_norm.forward(&x));
        &x + self.mlp.forward(&normed)
    }

    /// Only what [`Self::forward`] leaves in `slot`: an attention layer's keys and values, a
    /// linear layer's state; its output and MLP are not made.
    fn fill_cache(&self, x: &Tensor, step: &Step<'_>, slot: &mut LayerCache) {
        let normed = timed("norms", || self.input_norm.forward(x));
        match &self.mixer {
            Mixer::Attention(attn) => timed("attention", || attn.append_keys_values(&normed, step.rotary, slot)),
            Mixer::Linear(_) => {
                let _ = self.mix(&normed, step, slot);
            }
        }
    }

    /// [`Self::forward`] for a pass's questions where the stream narrows to each row's last token
    /// (turned by `last_rotary`): keys and values (or a linear layer's mixing) from every token
    /// as `step` runs them, the rest from the last tokens alone. Returns the narrowed stream (1,
    /// rows + spare, hidden).
    fn forward_narrowing(&self, x: &Tensor, step: &Step<'_>, last_rotary: &Rotary, last: &LastTokens, slot: &mut LayerCache) -> Tensor {
        let normed = timed("norms", || self.input_norm.forward(x));
        let mixed = match &self.mixer {
            Mixer::Attention(attn) => timed("attention", || {
                let narrowed = Some(last.narrowed());
                let (queries, keys_values) = timed("attention: projections in, norms, rotary", || {
                    (attn.queries(&last.pick(&normed), last_rotary, narrowed), attn.keys_values(&normed, step.rotary, step.real))
                });
                attn.attend(queries, keys_values, step.mask, slot, step.path, narrowed, Some(last))
            }),
            Mixer::Linear(_) => last.pick(&self.mix(&normed, step, slot)),
        };
        let x = last.pick(x) + mixed;
        let normed = timed("norms", || self.post_norm.forward(&x));
        &x + self.mlp.forward(&normed)
    }

    /// The layer's token mixing, `normed` in the residual stream's layout.
    fn mix(&self, normed: &Tensor, step: &Step<'_>, slot: &mut LayerCache) -> Tensor {
        match &self.mixer {
            Mixer::Attention(attn) => timed("attention", || attn.forward(normed, step.rotary, step.mask, slot, step.path, step.real)),
            Mixer::Linear(linear) => timed("linear attention", || {
                let mut state = match std::mem::take(slot) {
                    LayerCache::Linear(state) => Some(state),
                    _ => None,
                };
                if matches!(step.path, AttentionPath::SharedPrefix { .. }) {
                    // The questions read their image's state in place; the cache keeps the
                    // prefix's, and the questions' own states are never made.
                    let out = match &state {
                        Some(prefix) => linear.forward_after_prefix(normed, prefix, step.real),
                        None => {
                            let rows = rows_of(step.real, normed.shallow_clone());
                            tokens_of(step.real, linear.forward(&rows, &mut None, step.valid))
                        }
                    };
                    *slot = state.map_or(LayerCache::Empty, LayerCache::Linear);
                    out
                } else {
                    let out = linear.forward(normed, &mut state, step.valid);
                    *slot = state.map_or(LayerCache::Empty, LayerCache::Linear);
                    out
                }
            }),
        }
    }
}

/// The decoder the Qwen families share.
pub struct SharedDecoder {
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Tensor,
    inv_freq: Tensor,
    /// For each rotary frequency, the position axis it turns with: 0 time, 1 height, 2 width.
    rope_axes: Tensor,
}

/// DeepStack features for one forward pass: the image's sequence positions from `start` get
/// `layers[i]` added after decoder layer i, (tokens, hidden) for every row alike or (batch,
/// tokens, hidden) row by row (a pass of several images).
pub struct Deepstack {
    pub start: i64,
    pub layers: Vec<Tensor>,
}

impl SharedDecoder {
    pub fn load(w: &Weights, cfg: &TextConfig) -> Result<SharedDecoder, VlmError> {
        let (h, v) = (cfg.hidden_size as i64, cfg.vocab_size as i64);
        let rotary_dim = cfg.rotary_dim as i64;
        let embed_tokens = w.get("model.embed_tokens.weight", &[v, h])?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| DecoderLayer::load(w, &format!("model.layers.{l}"), cfg, l))
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
        let exponents = Tensor::arange_start_step(0, rotary_dim, 2, (Kind::Int64, device)).to_kind(Kind::Float) / rotary_dim as f64;
        let inv_freq = Tensor::from(cfg.rope_theta as f32).to_device(device).pow(&exponents).reciprocal();
        let rope_axes = Tensor::from_slice(&mrope_axes(&cfg.mrope_section, cfg.variant.mrope_interleaved)).to_device(device);
        Ok(SharedDecoder { embed_tokens, layers, norm: RmsNorm::load_decoder(w, "model.norm", h, cfg)?, lm_head, inv_freq, rope_axes })
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
        Rotary(Turn::new(full.cos().to_kind(Kind::Float), &full.sin().to_kind(Kind::Float)))
    }

    /// See [`crate::families::TextModel::forward_masked`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward_masked(
        &self,
        embeds: &Tensor,
        positions: &Tensor,
        cache: &mut DecoderCache,
        mask: &Tensor,
        path: AttentionPath,
        valid: Option<&Tensor>,
        deepstack: Option<&Deepstack>,
    ) -> Tensor {
        let rotary = self.rotary(positions);
        self.forward_steps(embeds, cache, &Step { rotary: &rotary, mask, path, valid, real: None }, deepstack)
    }

    /// Every row of `embeds` after its image's prefix ([`crate::families::TextModel::forward_shared_prefix`]),
    /// the residual stream holding only the real tokens where `rows` says which they are, and
    /// where it narrows, in the last layer, each row's last token alone.
    pub(crate) fn forward_shared_prefix(
        &self,
        embeds: &Tensor,
        positions: &Tensor,
        cache: &mut DecoderCache,
        mask: &Tensor,
        fused: bool,
        rows: &QuestionRows,
    ) -> Tensor {
        let (real, last, path) = (rows.real.as_ref(), &rows.last, AttentionPath::SharedPrefix { fused });
        let rotary = self.rotary(positions);
        let step = Step { rotary: &rotary, mask, path, valid: None, real };
        let narrow_at = self.layers.len().checked_sub(1).filter(|_| rows.narrows);
        let x = self.run_layers(narrow_at.unwrap_or(self.layers.len()), tokens_of(real, embeds.shallow_clone()), cache, &step, None);
        let narrowed = match narrow_at {
            Some(index) => {
                let last_rotary = self.rotary(&last.pick_in_rows(positions));
                self.norm.forward(&self.layers[index].forward_narrowing(&x, &step, &last_rotary, last, &mut cache.layers[index]))
            }
            None => last.pick(&self.norm.forward(&x)),
        };
        last.rows_alone(&narrowed)
    }

    /// See [`crate::families::TextModel::fill_cache`]: every layer but the last whole, the last up to its slot.
    pub(crate) fn fill_cache(
        &self,
        embeds: &Tensor,
        positions: &Tensor,
        cache: &mut DecoderCache,
        mask: &Tensor,
        deepstack: Option<&Deepstack>,
    ) {
        let rotary = self.rotary(positions);
        let step = Step { rotary: &rotary, mask, path: AttentionPath::Repeated, valid: None, real: None };
        let Some(last) = self.layers.len().checked_sub(1) else { return };
        let x = self.run_layers(last, embeds.shallow_clone(), cache, &step, deepstack);
        self.layers[last].fill_cache(&x, &step, &mut cache.layers[last]);
    }

    /// `embeds` (batch, seq, hidden) through every layer and the final norm, as `step` says.
    fn forward_steps(&self, embeds: &Tensor, cache: &mut DecoderCache, step: &Step<'_>, deepstack: Option<&Deepstack>) -> Tensor {
        assert!(step.real.is_none() || deepstack.is_none(), "DeepStack adds to rows, which a packed stream does not keep");
        let x = self.run_layers(self.layers.len(), tokens_of(step.real, embeds.shallow_clone()), cache, step, deepstack);
        rows_of(step.real, self.norm.forward(&x))
    }

    /// `x` through the first `count` layers, DeepStack's features added after theirs.
    fn run_layers(&self, count: usize, mut x: Tensor, cache: &mut DecoderCache, step: &Step<'_>, deepstack: Option<&Deepstack>) -> Tensor {
        if cache.layers.len() < self.layers.len() {
            cache.layers.resize_with(self.layers.len(), LayerCache::default);
        }
        for (index, (layer, slot)) in self.layers.iter().zip(cache.layers.iter_mut()).take(count).enumerate() {
            x = layer.forward(&x, step, slot);
            if let Some(features) = deepstack.and_then(|d| d.layers.get(index).map(|f| (d.start, f))) {
                x = add_rows(&x, features.0, features.1);
            }
        }
        x
    }

    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear(&self.lm_head, None::<&Tensor>)
    }

    /// The logits of two tokens only, (rows, 2), from hidden states (rows, hidden).
    pub fn answer_logits(&self, hidden: &Tensor, answer: (u32, u32)) -> Tensor {
        layers::answer_logits(hidden, &self.lm_head, answer)
    }
}

/// `x` (batch, seq, hidden) with `rows` (n, hidden) or (batch, n, hidden) added at sequence
/// positions start..start + n.
fn add_rows(x: &Tensor, start: i64, rows: &Tensor) -> Tensor {
    let rows = if rows.dim() == 2 { rows.unsqueeze(0) } else { rows.shallow_clone() };
    let (n, seq) = (rows.size()[1], x.size()[1]);
    let added = x.narrow(1, start, n) + rows.to_kind(x.kind());
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
pub(crate) fn causal_mask(seq: i64, past: i64, kind: Kind, device: tch::Device) -> Tensor {
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
