//! The questions' attention to their own tokens, merged with their attention to the image's prefix
//! (`crates/vlm/src/cuda_kernels/suffix_attention.cu`): one pass after libtorch's fused prefix kernel, where
//! libtorch's form of [`crate::shared_prefix`] takes some twenty kernels and six f32 round
//! trips the size of every question's output.

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{in_precision, strided, CudaKernels, KernelSpec};

/// bf16's, then f32's: a query head of a question, its keys and values staged, in at most this
/// much shared memory (every GPU the cubins are made for gives a block 96 KiB when asked).
pub(super) const SUFFIX_ATTENTION: [KernelSpec; 2] = [
    KernelSpec { file: "suffix_attention", name: "suffix_attention_bf16", shared_bytes: 96 * 1024 },
    KernelSpec { file: "suffix_attention", name: "suffix_attention_f32", shared_bytes: 96 * 1024 },
];

/// The shared memory a block takes for `s` tokens a question of heads `d` wide: the scores and
/// each query's maximum and sum in f32, then the queries and keys (each row padded by one 4-byte
/// word) and the values in the model's precision.
fn shared_bytes(s: i64, d: i64, kind: Kind) -> i64 {
    let element = if kind == Kind::Float { 4 } else { 2 };
    4 * (s * s + 2 * s) + element * (2 * s * (d + 4 / element) + s * d)
}

impl CudaKernels {
    /// Whether the kernel takes questions of `s` tokens, heads `d` wide, in this precision.
    pub fn takes_suffix_attention(s: i64, d: i64, kind: Kind) -> bool {
        matches!(kind, Kind::BFloat16 | Kind::Float) && s > 0 && d > 0 && shared_bytes(s, d, kind) <= SUFFIX_ATTENTION[0].shared_bytes
    }

    /// Softmax attention of the questions' queries `q` (rows, heads, s, d) over their own keys and
    /// values `k`, `v` (rows, kv_heads, s, d) under the additive `mask` (s, s), merged by
    /// log-sum-exp with their attention over the prefix, `prefix` (images, kv_heads, rows /
    /// images * heads / kv_heads * s, d: the queries stacked as `shared_prefix` stacks them) and
    /// its log-sum-exp `lse` (images, kv_heads, at least that many; f32). (rows, heads, s, d) in
    /// `q`'s precision, its heads moved (the storage is (rows, s, heads, d), as the projection out
    /// reads it).
    #[allow(clippy::too_many_arguments)]
    pub fn suffix_attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, prefix: &Tensor, lse: &Tensor, mask: &Tensor, scale: f64) -> Tensor {
        let (rows, heads, s, d) = (q.size()[0], q.size()[1], q.size()[2], q.size()[3]);
        let (images, kv_heads, kind) = (prefix.size()[0], k.size()[1], q.kind());
        assert!(Self::takes_suffix_attention(s, d, kind), "questions the kernel does not take: {s} tokens, heads {d} wide, {kind:?}");
        assert!(
            [k.kind(), v.kind(), prefix.kind()].iter().all(|&k| k == kind) && lse.kind() == Kind::Float && mask.size() == [s, s],
            "the suffix attention's operands: {:?} {:?} {:?}, log-sum-exp {:?}, mask {:?}",
            k.kind(),
            v.kind(),
            prefix.kind(),
            lse.kind(),
            mask.size()
        );
        let result = Tensor::empty([rows, s, heads, d], (kind, q.device()));
        if result.numel() == 0 {
            return result.permute([0, 2, 1, 3]); // no blocks to launch
        }
        let ((q, qs), (k, ks), (v, vs), (prefix, ps)) = (strided(q), strided(k), strided(v), strided(prefix));
        let (lse, ls) = strided(&lse.unsqueeze(-1));
        let mask = mask.to_kind(Kind::Float).contiguous();
        let kernel = in_precision(&SUFFIX_ATTENTION, kind);
        let (groups, rows_per_image) = (heads / kv_heads, rows / images);
        let numbers = [s, d, heads, groups, rows_per_image]
            .map(|x| x as c_int)
            .into_iter()
            .chain(qs)
            .chain(ks)
            .chain(vs)
            .chain(ps)
            .chain(ls)
            .collect::<Vec<_>>();
        let tensors = [&q, &k, &v, &prefix, &lse, &mask, &result];
        self.launch(kernel, (heads as c_uint, rows as c_uint), shared_bytes(s, d, kind), &tensors, &numbers, &[scale as f32]);
        result.permute([0, 2, 1, 3])
    }
}
