//! Gemma 4's attention: queries, keys and values RMS-normalised per head (values without a
//! weight), no 1/sqrt(d) scale; on a KV-shared layer no keys or values of its own, those of the
//! last earlier layer of its type instead. Over a cache, or for question rows after prefixes held
//! once ([`shared_prefix`]).

use tch::Tensor;

use super::norm::Norm;
use super::Gemma4Layer;
use crate::cache::LayerCache;
use crate::config::TextConfig;
use crate::error::VlmError;
use crate::layers::{attention, Linear, Turn};
use crate::part_clock::timed;
use crate::real_tokens::{rows_of, tokens_of, LastTokens, RealTokens};
use crate::shared_prefix::{self, Prefix};
use crate::weights::Weights;

/// A layer's attention.
pub(super) struct Attention {
    q: Linear,
    q_norm: Norm,
    /// None on a KV-shared layer.
    pub(super) kv: Option<KeyValue>,
    o: Linear,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

pub(super) struct KeyValue {
    k: Linear,
    /// None with `attention_k_eq_v`: the key projection's output is the values'.
    v: Option<Linear>,
    k_norm: Norm,
    v_norm: Norm,
}

impl Attention {
    pub(super) fn load(w: &Weights, prefix: &str, cfg: &TextConfig, layer: &Gemma4Layer) -> Result<Attention, VlmError> {
        let h = cfg.hidden_size as i64;
        let (heads, kv_heads, d) = (cfg.num_attention_heads as i64, layer.kv_heads as i64, layer.head_dim as i64);
        let eps = cfg.rms_norm_eps;
        let at = |name: &str| format!("{prefix}.{name}");
        let kv = if layer.kv_from.is_some() {
            None
        } else {
            Some(KeyValue {
                k: Linear::load(w, &at("k_proj"), h, kv_heads * d, false)?,
                v: if layer.k_eq_v { None } else { Some(Linear::load(w, &at("v_proj"), h, kv_heads * d, false)?) },
                k_norm: Norm::load(w, &at("k_norm"), d, eps)?,
                v_norm: Norm::unscaled(eps),
            })
        };
        Ok(Attention {
            q: Linear::load(w, &at("q_proj"), h, heads * d, false)?,
            q_norm: Norm::load(w, &at("q_norm"), d, eps)?,
            kv,
            o: Linear::load(w, &at("o_proj"), heads * d, h, false)?,
            heads,
            kv_heads,
            head_dim: d,
        })
    }

    /// `x` (batch, seq, hidden) -> (batch, seq, hidden). An own layer appends its keys and values
    /// to `slot`; a shared one reads `shared` (the source layer's, already updated).
    pub(super) fn forward(
        &self,
        x: &Tensor,
        rotary: &Turn,
        mask: &Tensor,
        slot: &mut LayerCache,
        shared: Option<(Tensor, Tensor)>,
    ) -> Tensor {
        let q = self.queries(x, rotary, None);
        let (k, v) = match (&self.kv, shared) {
            (_, Some(kv)) => kv,
            (Some(_), None) => self.append_keys_values(x, rotary, slot),
            (None, None) => unreachable!("a KV-shared layer is always given its source's keys and values"),
        };
        let groups = self.heads / self.kv_heads;
        let out = timed("attention: over the cache", || {
            let k = k.repeat_interleave_self_int(groups, 1, None);
            let v = v.repeat_interleave_self_int(groups, 1, None);
            attention(&q, &k, &v, Some(mask), 1.0)
        });
        self.output(&out, None)
    }

    /// An own layer's keys and values for `x`, appended to `slot`; all the slot holds returned.
    /// What [`Self::forward`] keeps, and all a prefix's last such layer computes.
    pub(super) fn append_keys_values(&self, x: &Tensor, rotary: &Turn, slot: &mut LayerCache) -> (Tensor, Tensor) {
        let own = self.kv.as_ref().expect("a layer with keys and values of its own");
        let (k, v) = self.keys_values(own, x, rotary, None);
        slot.append(k, v)
    }

    /// [`Self::forward`] for rows after prefixes held once ([`shared_prefix`]): the rows' own
    /// keys and values are not kept in the cache but returned (a KV-shared layer after this one
    /// reads them), or, on a KV-shared layer, given as `shared` with the source layer's prefix.
    /// Where `real` says which tokens of the rows are real, `x` and the output hold those alone
    /// (1, tokens, hidden); the queries, keys and values are laid out in rows. With `last`, `x`
    /// holds each row's last token alone (`real` that layout) and the keys and values are given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_shared(
        &self,
        x: &Tensor,
        rotary: &Turn,
        prefix: &Prefix<'_>,
        suffix_mask: &Tensor,
        shared: Option<(Tensor, Tensor)>,
        real: Option<&RealTokens>,
        last: Option<&LastTokens>,
    ) -> (Tensor, Option<(Tensor, Tensor)>) {
        let q = self.queries(x, rotary, real);
        let (k, v) = match (&self.kv, shared) {
            (_, Some(kv)) => kv,
            (Some(own), None) => self.keys_values(own, x, rotary, real),
            (None, None) => unreachable!("a KV-shared layer is always given its source's keys and values"),
        };
        let out = match last {
            // The attention's shapes as for every token (a CPU's bits kept), its output at the last.
            Some(last) => last.gather(&shared_prefix::attention(&last.spread(&q), prefix, &k, &v, suffix_mask, 1.0)),
            None => shared_prefix::attention(&q, prefix, &k, &v, suffix_mask, 1.0),
        };
        (self.output(&out, real), self.kv.as_ref().map(|_| (k, v)))
    }

    /// Queries (batch, heads, seq, head_dim), normed per head and turned; in rows where `real`
    /// says which tokens of `x` are real.
    fn queries(&self, x: &Tensor, rotary: &Turn, real: Option<&RealTokens>) -> Tensor {
        timed("attention: projections in, norms, rotary", || {
            let (b, s) = (x.size()[0], x.size()[1]);
            let q = self.q_norm.forward(&self.q.forward(x).view([b, s, self.heads, self.head_dim]));
            rotary.apply(&rows_of(real, q).transpose(1, 2))
        })
    }

    /// This layer's own keys (normed, turned) and values (normed), (batch, kv_heads, seq,
    /// head_dim); in rows where `real` says which tokens of `x` are real.
    pub(super) fn keys_values(&self, own: &KeyValue, x: &Tensor, rotary: &Turn, real: Option<&RealTokens>) -> (Tensor, Tensor) {
        timed("attention: projections in, norms, rotary", || {
            let (b, s) = (x.size()[0], x.size()[1]);
            let heads_of = |t: Tensor| t.view([b, s, self.kv_heads, self.head_dim]);
            let raw_k = heads_of(own.k.forward(x));
            let raw_v = match &own.v {
                Some(v) => heads_of(v.forward(x)),
                None => raw_k.shallow_clone(),
            };
            let [k, v] = [own.k_norm.forward(&raw_k), own.v_norm.forward(&raw_v)].map(|t| rows_of(real, t).transpose(1, 2));
            (rotary.apply(&k), v)
        })
    }

    /// Attention's output (batch, heads, seq, head_dim) projected back: (batch, seq, hidden), or
    /// the real tokens alone (1, tokens, hidden) where `real` says which they are.
    fn output(&self, out: &Tensor, real: Option<&RealTokens>) -> Tensor {
        let (b, s) = (out.size()[0], out.size()[2]);
        let out = tokens_of(real, out.transpose(1, 2).reshape([b, s, self.heads * self.head_dim]));
        timed("attention: projection out", || self.o.forward(&out))
    }
}
