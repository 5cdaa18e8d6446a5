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
    /// Applies `f` to every tensor of the slot.
    fn map(&self, f: impl Fn(&Tensor) -> Tensor) -> LayerCache {
        match self {
            LayerCache::Empty => LayerCache::Empty,
            LayerCache::Attention(k, v) => LayerCache::Attention(f(k), f(v)),
            LayerCache::Linear(state) => LayerCache::Linear(state.map(f)),
        }
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

    /// Caches of the same shape but for the batch, stacked along the batch.
    pub fn concat(caches: &[DecoderCache]) -> DecoderCache {
        let depth = caches.first().map_or(0, |c| c.layers.len());
        let cat = |pick: &dyn Fn(&LayerCache) -> Option<&Tensor>, l: usize| -> Option<Tensor> {
            let parts: Option<Vec<&Tensor>> = caches.iter().map(|c| pick(&c.layers[l])).collect();
            parts.map(|parts| Tensor::cat(&parts, 0))
        };
        let layers = (0..depth)
            .map(|l| match &caches[0].layers[l] {
                LayerCache::Empty => LayerCache::Empty,
                LayerCache::Attention(..) => {
                    let keys = cat(&|c| if let LayerCache::Attention(k, _) = c { Some(k) } else { None }, l);
                    let values = cat(&|c| if let LayerCache::Attention(_, v) = c { Some(v) } else { None }, l);
                    match (keys, values) {
                        (Some(k), Some(v)) => LayerCache::Attention(k, v),
                        _ => LayerCache::Empty,
                    }
                }
                LayerCache::Linear(_) => {
                    let conv = cat(&|c| if let LayerCache::Linear(s) = c { Some(&s.conv) } else { None }, l);
                    let recurrent = cat(&|c| if let LayerCache::Linear(s) = c { Some(&s.recurrent) } else { None }, l);
                    match (conv, recurrent) {
                        (Some(conv), Some(recurrent)) => LayerCache::Linear(LinearState { conv, recurrent }),
                        _ => LayerCache::Empty,
                    }
                }
            })
            .collect();
        DecoderCache { layers }
    }

    /// The same cache repeated `n` times along the batch (one copy per question).
    pub fn expand(&self, n: i64) -> DecoderCache {
        self.map(|t| {
            let mut size = vec![-1; t.dim()];
            size[0] = n;
            t.expand(size.as_slice(), false).contiguous()
        })
    }
}
