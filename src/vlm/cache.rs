//! What the decoder carries between calls, per layer and batch row: the keys and values of an
//! attention layer (they grow with the sequence) or the fixed-size states of a linear-attention
//! layer. The engine's tricks work on whole caches: a shared image prefix is copied per question
//! (`expand`), caches of different images are padded and stacked (`padded`, `concat`), and rows
//! that finish decoding leave (`select_rows`).

use tch::Tensor;

use super::families::qwen3_5::linear_attention::LinearState;

/// One layer's slot.
#[derive(Default)]
pub enum LayerCache {
    /// Nothing seen yet.
    #[default]
    Empty,
    /// Keys and values, (batch, kv_heads, seq, head_dim).
    Attention(Tensor, Tensor),
    /// A linear-attention layer's convolution inputs and recurrent state.
    Linear(LinearState),
}

impl LayerCache {
    /// The slot's tensors, in a fixed order per variant.
    fn tensors(&self) -> Vec<&Tensor> {
        match self {
            LayerCache::Empty => Vec::new(),
            LayerCache::Attention(k, v) => vec![k, v],
            LayerCache::Linear(state) => vec![&state.conv, &state.recurrent],
        }
    }

    /// A slot of this one's variant holding `tensors`, in the order [`Self::tensors`] gives.
    fn with_tensors(&self, tensors: Vec<Tensor>) -> LayerCache {
        let mut tensors = tensors.into_iter();
        let mut next = || tensors.next().expect("one tensor per slot of the variant");
        match self {
            LayerCache::Empty => LayerCache::Empty,
            LayerCache::Attention(..) => LayerCache::Attention(next(), next()),
            LayerCache::Linear(_) => LayerCache::Linear(LinearState { conv: next(), recurrent: next() }),
        }
    }

    /// Applies `f` to every tensor of the slot.
    fn map(&self, f: impl Fn(&Tensor) -> Tensor) -> LayerCache {
        self.with_tensors(self.tensors().into_iter().map(f).collect())
    }
}

#[derive(Default)]
pub struct DecoderCache {
    pub(super) layers: Vec<LayerCache>,
}

impl DecoderCache {
    /// Positions seen so far: the sequence length of the attention layers' keys.
    pub fn len(&self) -> i64 {
        self.layers
            .iter()
            .find_map(|l| match l {
                LayerCache::Attention(k, _) => Some(k.size()[2]),
                _ => None,
            })
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn map(&self, f: impl Fn(&Tensor) -> Tensor) -> DecoderCache {
        DecoderCache { layers: self.layers.iter().map(|l| l.map(&f)).collect() }
    }

    /// Keys and values zero-padded along the sequence to `len` positions (a key mask must hide
    /// them); linear states have no sequence axis and stay as they are.
    pub fn padded(&self, len: i64) -> DecoderCache {
        let extra = len - self.len();
        let layers = self
            .layers
            .iter()
            .map(|l| match l {
                LayerCache::Attention(k, v) if extra > 0 => {
                    LayerCache::Attention(k.constant_pad_nd([0, 0, 0, extra]), v.constant_pad_nd([0, 0, 0, extra]))
                }
                other => other.map(Tensor::shallow_clone),
            })
            .collect();
        DecoderCache { layers }
    }

    /// Only the batch rows at `rows` (a 1-d int64 tensor), in that order.
    pub fn select_rows(&self, rows: &Tensor) -> DecoderCache {
        self.map(|t| t.index_select(0, rows))
    }

    /// Caches of the same shape but for the batch, stacked along the batch. A layer whose slots
    /// are not all of one variant is left empty.
    pub fn concat(caches: &[DecoderCache]) -> DecoderCache {
        let depth = caches.first().map_or(0, |c| c.layers.len());
        let layers = (0..depth)
            .map(|l| {
                let first = &caches[0].layers[l];
                let same = caches.iter().all(|c| std::mem::discriminant(&c.layers[l]) == std::mem::discriminant(first));
                if !same {
                    return LayerCache::Empty;
                }
                let slots: Vec<Vec<&Tensor>> = caches.iter().map(|c| c.layers[l].tensors()).collect();
                let stacked = (0..slots[0].len()).map(|i| Tensor::cat(&slots.iter().map(|t| t[i]).collect::<Vec<_>>(), 0)).collect();
                first.with_tensors(stacked)
            })
            .collect();
        DecoderCache { layers }
    }

    /// For rows over each row of this prefix (one row per image) without copying it: every
    /// slot stays as it is. The attention layers' keys and values are read once by all of an
    /// image's rows ([`super::shared_prefix`]); a linear layer repeats its small per-row state for
    /// the rows when it runs, one layer at a time, and drops it after.
    pub fn shared(&self) -> DecoderCache {
        self.map(Tensor::shallow_clone)
    }

    /// The same cache repeated `n` times along the batch (one copy per question).
    pub fn expand(&self, n: i64) -> DecoderCache {
        self.map(|t| repeat_rows(t, n))
    }
}

/// A one-row tensor repeated `n` times along its first axis, contiguous.
fn repeat_rows(t: &Tensor, n: i64) -> Tensor {
    let mut size = vec![-1; t.dim()];
    size[0] = n;
    t.expand(size.as_slice(), false).contiguous()
}
