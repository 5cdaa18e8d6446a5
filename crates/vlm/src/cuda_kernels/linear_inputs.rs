//! A linear-attention layer's inputs to the delta rule (`crates/vlm/src/cuda_kernels/linear_inputs.cu`): its
//! convolution, SiLU and norms in one pass over the projection, where libtorch's form takes some
//! ten.

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{in_precision, CudaKernels, KernelSpec};
use crate::config::LinearAttentionConfig;

/// A linear layer's inputs, one kernel a precision: a token's channels and its heads' norms, in
/// no more than the shared memory every GPU gives a block unasked.
pub(super) const LINEAR_INPUTS: [KernelSpec; 2] = [
    KernelSpec { file: "linear_inputs", name: "linear_inputs_bf16", shared_bytes: 48 * 1024 },
    KernelSpec { file: "linear_inputs", name: "linear_inputs_f32", shared_bytes: 48 * 1024 },
];

impl CudaKernels {
    /// Whether the linear-inputs kernel takes a layer of this shape in this precision: bf16 or
    /// f32, whole value heads a key head, a token's channels and norms in 48 KiB.
    pub fn takes_linear_inputs(shape: &LinearAttentionConfig, kind: Kind) -> bool {
        let (channels, key_heads) = (shape.conv_dim(), shape.num_key_heads);
        matches!(kind, Kind::BFloat16 | Kind::Float)
            && key_heads > 0
            && shape.num_value_heads.is_multiple_of(key_heads)
            && shape.conv_kernel_dim >= 1
            && 4 * (channels + 2 * key_heads) <= 48 * 1024
    }

    /// A linear-attention layer's inputs to the delta rule: the causal depthwise convolution of
    /// `mixed` (rows, s, channels) after `previous` (rows, channels, kernel - 1) by `weight`
    /// (channels, 1, kernel), its SiLU, and the queries (L2-normalised, times `q_scale`), keys
    /// (L2-normalised) and values split into heads, each key head repeated for its value heads:
    /// q, k (rows, value heads, s, key_head_dim) and v (.., value_head_dim), in f32.
    pub fn linear_inputs(
        &self,
        mixed: &Tensor,
        previous: &Tensor,
        weight: &Tensor,
        shape: &LinearAttentionConfig,
        q_scale: f64,
    ) -> (Tensor, Tensor, Tensor) {
        let (rows, s, channels) = (mixed.size()[0], mixed.size()[1], mixed.size()[2]);
        let taps = shape.conv_kernel_dim as i64;
        assert!(Self::takes_linear_inputs(shape, mixed.kind()) && channels == shape.conv_dim() as i64, "a layer the kernel does not take");
        let [mixed, previous, weight] = [mixed, previous, weight].map(|t| t.to_kind(mixed.kind()).contiguous());
        assert_eq!((previous.size(), weight.numel()), (vec![rows, channels, taps - 1], (channels * taps) as usize));
        let (kh, vh, dk, dv) =
            (shape.num_key_heads as i64, shape.num_value_heads as i64, shape.key_head_dim as i64, shape.value_head_dim as i64);
        let options = (Kind::Float, mixed.device());
        let (q, k, v) = (
            Tensor::empty([rows, vh, s, dk], options),
            Tensor::empty([rows, vh, s, dk], options),
            Tensor::empty([rows, vh, s, dv], options),
        );
        let numbers = [s, kh, vh, dk, dv, taps].map(|x| x as c_int);
        let shared = 4 * (channels + 2 * kh);
        let grid = (s as c_uint, rows as c_uint);
        let kernel = in_precision(&LINEAR_INPUTS, mixed.kind());
        self.launch(kernel, grid, shared, &[&mixed, &previous, &weight, &q, &k, &v], &numbers, &[q_scale as f32]);
        (q, k, v)
    }
}
