//! A Qwen mixture of experts' router after its linear layer (`crates/vlm/src/cuda_kernels/router.cu`): each
//! token's softmax, top k and renormalised weights in one launch, where libtorch's form takes
//! five kernels over the pass.

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{in_precision, CudaKernels, KernelSpec, THREADS};

/// bf16's, then f32's.
pub(super) const ROUTER: [KernelSpec; 2] = [
    KernelSpec { file: "router", name: "router_top_k_bf16", shared_bytes: 0 },
    KernelSpec { file: "router", name: "router_top_k_f32", shared_bytes: 0 },
];

impl CudaKernels {
    /// Whether the router kernel takes these logits (tokens, experts): bf16 or f32, k of them
    /// chosen from more than k.
    pub fn takes_router(logits: &Tensor, k: i64) -> bool {
        let size = logits.size();
        matches!(logits.kind(), Kind::BFloat16 | Kind::Float) && size.len() == 2 && size[0] > 0 && (1..=size[1]).contains(&k)
    }

    /// Each token's `k` most probable experts from its router `logits` (tokens, experts), most
    /// probable first (of equal logits the lower expert first), and their softmax probabilities,
    /// renormalised to sum to one where `renormalize`: (weights in the logits' precision, chosen
    /// int64), each (tokens, k).
    pub fn router_top_k(&self, logits: &Tensor, k: i64, renormalize: bool) -> (Tensor, Tensor) {
        assert!(Self::takes_router(logits, k), "logits the kernel does not take: {:?} {:?}", logits.size(), logits.kind());
        let (tokens, experts) = (logits.size()[0], logits.size()[1]);
        let logits = logits.contiguous();
        let kind = logits.kind();
        let weights = Tensor::empty([tokens, k], (kind, logits.device()));
        let chosen = Tensor::empty([tokens, k], (Kind::Int64, logits.device()));
        let blocks = (tokens + THREADS as i64 - 1) / THREADS as i64;
        let numbers = [tokens, experts, k, i64::from(renormalize)].map(|x| x as c_int);
        self.launch(in_precision(&ROUTER, kind), (blocks as c_uint, 1), 0, &[&logits, &weights, &chosen], &numbers, &[]);
        (weights, chosen)
    }
}
