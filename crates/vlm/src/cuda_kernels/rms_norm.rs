//! A decoder's RMSNorm over the hidden size (`crates/vlm/src/cuda_kernels/rms_norm.cu`): a row read once and
//! written once, where libtorch's form casts it to f32, norms, scales and casts it back.

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{CudaKernels, KernelSpec, THREADS};

/// The narrowest row the kernel takes: a block a row keeps its threads busy from the hidden
/// size up; the heads' norms (128 to 256 wide) stay with libtorch's fused kernel.
const MIN_WIDTH: i64 = 1024;

/// x and out in bf16 with a weight in bf16, then in f32 (Qwen3.5's `1 + w`); x, out and weight in
/// f32.
pub(super) const RMS_NORM: [KernelSpec; 3] = [
    KernelSpec { file: "rms_norm", name: "rms_norm_bf16", shared_bytes: 4 * THREADS as i64 },
    KernelSpec { file: "rms_norm", name: "rms_norm_bf16_weight_f32", shared_bytes: 4 * THREADS as i64 },
    KernelSpec { file: "rms_norm", name: "rms_norm_f32", shared_bytes: 4 * THREADS as i64 },
];

impl CudaKernels {
    /// Whether the kernel takes rows `x` (.., width) with a weight in `weight_kind`: bf16 rows with
    /// a bf16 or f32 weight, f32 rows with an f32 weight, of the hidden size's width.
    pub fn takes_rms_norm(x: &Tensor, weight_kind: Kind) -> bool {
        let width = x.size().last().copied().unwrap_or(0);
        let kinds = matches!((x.kind(), weight_kind), (Kind::BFloat16, Kind::BFloat16 | Kind::Float) | (Kind::Float, Kind::Float));
        kinds && width >= MIN_WIDTH && x.numel() > 0
    }

    /// `x` (.., width) times (mean(x^2) + eps)^-1/2 over each row, in f32, times `weight`
    /// (width): in f32 and rounded once where the weight is f32, else rounded, then scaled in
    /// the model's precision. The same shape and precision as `x`.
    pub fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
        assert!(Self::takes_rms_norm(x, weight.kind()), "a norm the kernel does not take: {:?} {:?}", x.size(), x.kind());
        let width = *x.size().last().expect("a row");
        let (x, weight) = (x.contiguous(), weight.contiguous());
        let out = Tensor::empty(x.size(), (x.kind(), x.device()));
        let which = match (x.kind(), weight.kind()) {
            (Kind::BFloat16, Kind::BFloat16) => 0,
            (Kind::BFloat16, _) => 1,
            _ => 2,
        };
        let rows = x.numel() as i64 / width;
        self.launch(&RMS_NORM[which], (rows as c_uint, 1), 4 * THREADS as i64, &[&x, &weight, &out], &[width as c_int], &[eps as f32]);
        out
    }
}
