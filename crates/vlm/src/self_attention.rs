//! Grouped-query self-attention as the Qwen families' decoder runs it: the attention layers of
//! Qwen2, Qwen3 and Qwen3.5 (q/k norms, biases, gated output where the family has them), with
//! multimodal rotary positions, over a cache, a copied prefix or a prefix held once.

use tch::Tensor;

use super::cache::LayerCache;
use super::config::TextConfig;
use super::error::VlmError;
use super::layers::{attention, Linear, RmsNorm, Turn};
use super::part_clock::timed;
use super::real_tokens::{rows_of, tokens_of, LastTokens, RealTokens};
use super::shared_prefix;
use super::weights::Weights;

/// How grouped-query attention meets its shared key/value heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionPath {
    /// Each key/value head repeated for its query heads, as transformers does: the scoring path,
    /// whose logits the release records.
    Repeated,
    /// For one new token per row, the query heads folded onto their key/value head: the same
    /// arithmetic without copying the cache (decoding).
    FoldedGroups,
    /// Every row's suffix after its image's prefix, which the cache holds once (one row per
    /// image): attention in two parts merged exactly ([`shared_prefix`]); the mask covers the
    /// suffix alone, and the suffixes' keys are not kept (scoring reads one pass). `fused`: the
    /// prefix part through libtorch's fused kernel ([`shared_prefix::PrefixAttention::Fused`]).
    SharedPrefix { fused: bool },
}

/// Grouped-query self-attention with rotary positions (and, in Qwen3, each head's queries and
/// keys normalised first; in Qwen3.5, the output gated by a sigmoid of a second half of the query
/// projection). Each call appends its keys and values to the layer's slot of the cache and
/// attends over all of them.
pub(super) struct SelfAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    gated: bool,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl SelfAttention {
    pub(super) fn load(w: &Weights, prefix: &str, cfg: &TextConfig) -> Result<SelfAttention, VlmError> {
        let h = cfg.hidden_size as i64;
        let (heads, kv_heads, head_dim) = (cfg.num_attention_heads as i64, cfg.num_key_value_heads as i64, cfg.head_dim() as i64);
        let at = |name: &str| format!("{prefix}.{name}");
        let (bias, o_bias) = (cfg.variant.qkv_bias, cfg.variant.o_bias);
        let qk_norm = if cfg.variant.qk_norm {
            Some((RmsNorm::load_decoder(w, &at("q_norm"), head_dim, cfg)?, RmsNorm::load_decoder(w, &at("k_norm"), head_dim, cfg)?))
        } else {
            None
        };
        let gated = cfg.variant.gated_attention;
        Ok(SelfAttention {
            q: Linear::load(w, &at("q_proj"), h, heads * head_dim * if gated { 2 } else { 1 }, bias)?,
            k: Linear::load(w, &at("k_proj"), h, kv_heads * head_dim, bias)?,
            v: Linear::load(w, &at("v_proj"), h, kv_heads * head_dim, bias)?,
            o: Linear::load(w, &at("o_proj"), heads * head_dim, h, o_bias)?,
            qk_norm,
            gated,
            heads,
            kv_heads,
            head_dim,
        })
    }

    /// `x` (batch, seq, hidden) -> (batch, seq, hidden); or, where `real` says which tokens of
    /// the rows are real, their tokens alone (1, tokens, hidden) both ways, the projections made
    /// on those only.
    pub(super) fn forward(
        &self,
        x: &Tensor,
        rotary: &Rotary,
        mask: &Tensor,
        slot: &mut LayerCache,
        path: AttentionPath,
        real: Option<&RealTokens>,
    ) -> Tensor {
        let (queries, keys_values) =
            timed("attention: projections in, norms, rotary", || (self.queries(x, rotary, real), self.keys_values(x, rotary, real)));
        self.attend(queries, keys_values, mask, slot, path, real, None)
    }

    /// Attention of `queries` (and their gate) over the slot and `keys_values`, projected out;
    /// the layouts as [`Self::forward`]'s. With `last`, the queries (and the output) are each
    /// row's last token's alone, in the layout of the stream narrowed to those (`real`); the
    /// keys, every token's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend(
        &self,
        (q, gate): (Tensor, Option<Tensor>),
        (k, v): (Tensor, Tensor),
        mask: &Tensor,
        slot: &mut LayerCache,
        path: AttentionPath,
        real: Option<&RealTokens>,
        last: Option<&LastTokens>,
    ) -> Tensor {
        let scale = (self.head_dim as f64).powf(-0.5);
        let q = last.map_or(q.shallow_clone(), |last| last.spread(&q));
        let out = match (&*slot, path) {
            // The prefix stays in the slot, once; the suffixes' own keys are not kept.
            (LayerCache::Attention(pk, pv), AttentionPath::SharedPrefix { fused }) => {
                let queries = shared_prefix::chosen_queries(real, last);
                shared_prefix::attention(&q, &shared_prefix::Prefix { k: pk, v: pv, mask: None, fused, queries }, &k, &v, mask, scale)
            }
            _ => timed("attention: over the cache", || self.attend_appended(q, k, v, mask, slot, path, scale)),
        };
        let out = last.map_or(out.shallow_clone(), |last| last.gather(&out));
        let (rows, seq) = (out.size()[0], out.size()[2]);
        let out = tokens_of(real, out.transpose(1, 2).reshape([rows, seq, self.heads * self.head_dim]));
        timed("attention: projection out", || match gate {
            Some(gate) => self.o.forward(&(out * gate.sigmoid())),
            None => self.o.forward(&out),
        })
    }

    /// Only what [`Self::forward`] leaves in the slot: `x`'s keys and values appended, no
    /// queries, no attention, nothing projected out (the last layer of a prefix whose cache
    /// alone is read after).
    pub(super) fn append_keys_values(&self, x: &Tensor, rotary: &Rotary, slot: &mut LayerCache) {
        let (k, v) = timed("attention: projections in, norms, rotary", || self.keys_values(x, rotary, None));
        let _ = slot.append(k, v);
    }

    /// Queries (batch, heads, seq, head_dim), normed per head where the family does and turned,
    /// and Qwen3.5's gate (batch, seq, heads x head_dim); in rows where `real` says which tokens
    /// of `x` are real.
    pub(super) fn queries(&self, x: &Tensor, rotary: &Rotary, real: Option<&RealTokens>) -> (Tensor, Option<Tensor>) {
        let (b, s) = (x.size()[0], x.size()[1]);
        // (batch, seq, heads, head_dim): the heads' norms run on this layout, where a head's
        // values are already together (a GPU's fused norm then copies nothing), and the heads
        // move to dimension 1 after, in rows.
        let (q, gate) = if self.gated {
            // Gated: each head's projection is its queries then its gate.
            let both = self.q.forward(x).view([b, s, self.heads, 2 * self.head_dim]);
            (
                both.narrow(-1, 0, self.head_dim),
                Some(both.narrow(-1, self.head_dim, self.head_dim).reshape([b, s, self.heads * self.head_dim])),
            )
        } else {
            (self.q.forward(x).view([b, s, self.heads, self.head_dim]), None)
        };
        let q = match &self.qk_norm {
            Some((q_norm, _)) => q_norm.forward(&q),
            None => q,
        };
        (rotary.apply(&rows_of(real, q).transpose(1, 2)), gate)
    }

    /// Keys (normed per head where the family does, turned) and values, (batch, kv_heads, seq,
    /// head_dim); in rows where `real` says which tokens of `x` are real.
    pub(super) fn keys_values(&self, x: &Tensor, rotary: &Rotary, real: Option<&RealTokens>) -> (Tensor, Tensor) {
        let (b, s) = (x.size()[0], x.size()[1]);
        let heads_of = |t: Tensor| t.view([b, s, self.kv_heads, self.head_dim]);
        let k = heads_of(self.k.forward(x));
        let k = match &self.qk_norm {
            Some((_, k_norm)) => k_norm.forward(&k),
            None => k,
        };
        let [k, v] = [k, heads_of(self.v.forward(x))].map(|t| rows_of(real, t).transpose(1, 2));
        (rotary.apply(&k), v)
    }

    /// Appends `k` and `v` to the slot and attends over all it holds.
    #[allow(clippy::too_many_arguments)]
    fn attend_appended(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: &Tensor,
        slot: &mut LayerCache,
        path: AttentionPath,
        scale: f64,
    ) -> Tensor {
        let (b, s) = (q.size()[0], q.size()[2]);
        let (k, v) = slot.append(k, v);
        // Each key/value head serves `groups` query heads.
        let groups = self.heads / self.kv_heads;
        if path == AttentionPath::FoldedGroups && s == 1 {
            // One new token: a key/value head's query heads become its queries, so the cache is
            // read in place instead of copied `groups` times (decoding is memory-bound).
            let q = q.view([b, self.kv_heads, groups, self.head_dim]);
            attention(&q, &k, &v, Some(mask), scale).view([b, self.heads, 1, self.head_dim])
        } else {
            let k = k.repeat_interleave_self_int(groups, 1, None);
            let v = v.repeat_interleave_self_int(groups, 1, None);
            attention(&q, &k, &v, Some(mask), scale)
        }
    }
}

/// The rotary angles of one forward pass, (batch, 1, seq, rotary_dim), f32.
pub(super) struct Rotary(pub(super) Turn);

impl Rotary {
    /// Turns the first rotary_dim dimensions of each head; the rest pass (partial rotary).
    pub(super) fn apply(&self, x: &Tensor) -> Tensor {
        let (dim, turned) = (x.size()[3], self.0.width());
        if turned == dim {
            return self.0.apply(x);
        }
        Tensor::cat(&[self.0.apply(&x.narrow(-1, 0, turned)), x.narrow(-1, turned, dim - turned)], -1)
    }
}
