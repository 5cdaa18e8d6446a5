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
    /// An attention layer's new keys and values, (batch, kv_heads, seq, head_dim), kept after
    /// those the slot holds; all of them returned.
    pub fn append(&mut self, k: Tensor, v: Tensor) -> (Tensor, Tensor) {
        let (k, v) = match std::mem::take(self) {
            LayerCache::Attention(pk, pv) => (Tensor::cat(&[pk, k], 2), Tensor::cat(&[pv, v], 2)),
            _ => (k, v),
        };
        *self = LayerCache::Attention(k.shallow_clone(), v.shallow_clone());
        (k, v)
    }

    /// The slot's tensors, in a fixed order per variant.
    pub(super) fn tensors(&self) -> Vec<&Tensor> {
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

#[cfg(test)]
pub(super) mod tests {
    use serde_json::{json, Value};
    use tch::{Device, Kind, Tensor};

    use super::DecoderCache;
    use crate::checkpoint::ModelConfig;
    use crate::families::TextModel;
    use crate::flops::tests::bench_json;
    use crate::weights::Weights;

    /// Every kind of decoder, as [`small_text`]'s arguments: Qwen's last layer full attention
    /// (8 layers of Qwen3.5's pattern) or linear (7), dense or experts, and Gemma 4's, with and
    /// without KV-shared layers after the last with keys and values of its own.
    pub(crate) const SMALL_DECODERS: [(&str, usize, usize); 9] = [
        ("qwen2_5_vl_7b", 3, 0),
        ("qwen3_vl_8b", 3, 0),
        ("qwen3_5_9b", 8, 0),
        ("qwen3_5_9b", 7, 0),
        ("qwen3_vl_30b_a3b", 3, 0),
        ("qwen3_6_35b_a3b", 4, 0),
        ("gemma4_31b", 6, 0),
        ("gemma4_26b_a4b", 6, 0),
        ("gemma4_e4b", 12, 4),
    ];

    /// A full-size architecture of benches/configs with its text decoder made small: `layers`
    /// layers of the published pattern (the last `kv_shared` of them reading earlier layers'
    /// keys and values, on Gemma 4 E4B), every width but a head's and the vocabulary's (the
    /// special tokens are in it) narrowed, and Gemma 4's sliding window shorter than the test's
    /// sequence.
    pub(crate) fn small_text(name: &str, layers: usize, kv_shared: usize) -> ModelConfig {
        let mut root = bench_json(&format!("{name}.config.json"));
        let text = if root.get("text_config").is_some() { &mut root["text_config"] } else { &mut root };
        let small = [
            // Two heads of the published head width (Qwen2.5-VL derives its width from these).
            ("hidden_size", json!(256)),
            ("num_attention_heads", json!(2)),
            ("num_key_value_heads", json!(1)),
            ("num_global_key_value_heads", json!(1)),
            ("intermediate_size", json!(96)),
            ("linear_num_key_heads", json!(2)),
            ("linear_num_value_heads", json!(4)),
            ("linear_key_head_dim", json!(16)),
            ("linear_value_head_dim", json!(16)),
            ("num_experts", json!(8)),
            ("num_experts_per_tok", json!(2)),
            ("top_k_experts", json!(2)),
            ("moe_intermediate_size", json!(16)),
            ("shared_expert_intermediate_size", json!(16)),
            ("hidden_size_per_layer_input", json!(8)),
            ("sliding_window", json!(6)),
            ("num_kv_shared_layers", json!(kv_shared)),
        ];
        for (key, value) in small {
            if text.get(key).is_some_and(|v| v != &json!(0)) || key == "num_kv_shared_layers" && text.get(key).is_some() {
                text[key] = value;
            }
        }
        text["num_hidden_layers"] = json!(layers);
        if let Some(types) = text.get_mut("layer_types").and_then(Value::as_array_mut) {
            types.truncate(layers);
        }
        if let Some(out) = root.get_mut("vision_config").and_then(|v| v.get_mut("out_hidden_size")) {
            *out = json!(256);
        }
        ModelConfig::from_json(&root).unwrap()
    }

    /// Every tensor of every slot, each bit.
    fn same_cache(a: &DecoderCache, b: &DecoderCache) -> bool {
        a.layers.len() == b.layers.len()
            && a.layers.iter().zip(&b.layers).all(|(a, b)| {
                let (a, b) = (a.tensors(), b.tensors());
                a.len() == b.len() && a.iter().zip(&b).all(|(a, b)| a.size() == b.size() && a.equal(b))
            })
    }

    /// A prefix run only as far as its cache needs leaves the cache a whole pass leaves, to the
    /// bit, on every kind of decoder: Qwen's last layer full attention or linear, dense or
    /// experts, and Gemma 4's with and without KV-shared layers after the last that keeps any.
    #[test]
    fn a_prefix_filled_for_its_cache_leaves_the_whole_passes_cache() {
        for (name, layers, kv_shared) in SMALL_DECODERS {
            let config = small_text(name, layers, kv_shared);
            let weights = Weights::random(Device::Cpu, Kind::Float, !config.text.tie_word_embeddings, 7);
            let text = TextModel::load(config.family, &weights, &config.text, config.image_token_id).unwrap();
            let ids = Tensor::randint(512, [2, 20], (Kind::Int64, Device::Cpu));
            let input = text.embed(&ids);
            let positions = Tensor::arange(20, (Kind::Int64, Device::Cpu)).view([1, 1, 20]).expand([3, 2, 20], false);
            let (mut whole, mut filled) = (DecoderCache::default(), DecoderCache::default());
            let _ = text.forward(&input, &positions, &mut whole, None);
            text.fill_cache(&input, &positions, &mut filled, None);
            assert!(same_cache(&whole, &filled), "{name}, {layers} layers: the filled cache differs");
            // The filled cache also serves a second call after it, as generation makes one.
            let more = text.embed(&ids.narrow(1, 0, 3));
            let next = Tensor::arange_start(20, 23, (Kind::Int64, Device::Cpu)).view([1, 1, 3]).expand([3, 2, 3], false);
            let (a, b) = (text.forward(&more, &next, &mut whole, None), text.forward(&more, &next, &mut filled, None));
            assert!(a.equal(&b), "{name}, {layers} layers: the step after the filled cache differs");
        }
    }
}
