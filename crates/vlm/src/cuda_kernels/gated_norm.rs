//! A linear-attention layer's gated norm (`crates/vlm/src/cuda_kernels/gated_norm.cu`): the delta rule's
//! output cast, normed over each head and gated, in one pass where libtorch's form takes five
//! kernels.

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{in_precision, strided, CudaKernels, KernelSpec};

/// bf16's, then f32's: a token's heads and their norms, in no more than the shared memory every
/// GPU gives a block unasked.
pub(super) const GATED_NORM: [KernelSpec; 2] = [
    KernelSpec { file: "gated_norm", name: "gated_norm_bf16", shared_bytes: 48 * 1024 },
    KernelSpec { file: "gated_norm", name: "gated_norm_f32", shared_bytes: 48 * 1024 },
];

/// The shared memory a block takes for a token of `heads` heads of `dv`.
fn shared_bytes(heads: i64, dv: i64) -> i64 {
    4 * (heads * (dv + 1) + heads)
}

impl CudaKernels {
    /// Whether the gated-norm kernel takes `heads` heads of `dv` in this precision.
    pub fn takes_gated_norm(heads: i64, dv: i64, kind: Kind) -> bool {
        matches!(kind, Kind::BFloat16 | Kind::Float) && heads > 0 && dv > 0 && shared_bytes(heads, dv) <= GATED_NORM[0].shared_bytes
    }

    /// The delta rule's output `out` (rows, s, heads, dv; f32, any strides) in the precision of the
    /// gate `z` (rows, s, heads, dv), RMSNorm over each head times `weight` (dv), times SiLU(z).
    pub fn gated_norm(&self, out: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
        let size = out.size();
        let (rows, s, heads, dv) = (size[0], size[1], size[2], size[3]);
        let kind = z.kind();
        assert!(Self::takes_gated_norm(heads, dv, kind) && out.kind() == Kind::Float, "a gated norm the kernel does not take");
        if out.numel() == 0 {
            return Tensor::empty([rows, s, heads, dv], (kind, z.device())); // no blocks to launch
        }
        // The output is read through its strides (the delta rule's, heads moved).
        let (out, stride) = strided(out);
        let (z, weight) = (z.contiguous(), weight.to_kind(kind).contiguous());
        let result = Tensor::empty([rows, s, heads, dv], (kind, z.device()));
        let kernel = in_precision(&GATED_NORM, kind);
        let numbers = [s as c_int, heads as c_int, dv as c_int, stride[0], stride[1], stride[2]];
        let grid = (s as c_uint, rows as c_uint);
        self.launch(kernel, grid, shared_bytes(heads, dv), &[&out, &z, &weight, &result], &numbers, &[eps as f32]);
        result
    }
}
