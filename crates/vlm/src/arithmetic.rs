//! The engine's arithmetic revisions: one number per kind of device, raised by any change to the
//! engine that changes a score's bits there (another kernel, another order of sums, another
//! rounding), and by nothing else.
//!
//! The revision of the device a build scores on is in the scorer's identity, so it keys the score
//! cache and build.lock records it: scores made by an older engine are never mixed into a build
//! by a newer one, and an auditor who rebuilds with another tool can see whether the two engines
//! do the same arithmetic. On the CPU the suite enforces it: `crates/vlm/tests/arithmetic.rs` keeps the
//! committed fixtures' logit bits under the revision that made them, and fails when the bits
//! change and the revision does not. No GPU runs in the suite, so a change to the GPU's arithmetic
//! raises [`CUDA`] by hand.
//!
//! Needs no libtorch: an audit compares a lock's revision with this tool's.

/// The CPU's arithmetic (f32 and half precision, under the kernel pins of `cpu_kernels`). 2: the
/// prefix part of the questions' attention runs on each real token once (`vlm::prefix_queries`);
/// a query the old padded layout put in a product's last rows (computed by another path) may move
/// in its last bits. The recorded fixtures and the demo release keep theirs.
pub const CPU: u32 = 2;

/// A CUDA device's arithmetic (libtorch's kernels there, the fused prefix kernel included). 2:
/// the delta rule's prefix outputs are two products over all its chunks, whose batch cuBLAS may
/// give other kernels than one chunk's. 3: the questions' projections, norms and MLPs run on
/// their real tokens only (`vlm::real_tokens`), products of other row counts, for which cuBLAS
/// may choose other kernels (the CPU keeps every bit). 4: from the last layer whose keys, values
/// or state a later token reads, the questions' projections and MLPs run on each question's last
/// token alone, again products of other row counts (the CPU keeps every bit). 5: the tokens an
/// image's questions begin alike with go through the token-wise parts once, products of fewer
/// rows (the CPU keeps every bit). 6: the prefix part of the questions' attention runs on each
/// real token once and, where the questions run their last tokens alone, on those alone
/// (`vlm::prefix_queries`): the fused kernel over fewer queries (on the CPU, [`CPU`] 2).
pub const CUDA: u32 = 6;

/// The engine's own CUDA kernels (`vlm::cuda_kernels`), where [`CUDA_KERNELS_ENV`] asks for
/// them: their sums run in orders of their own, so they add to a CUDA revision. 2: the delta
/// rule's preparation within chunks joined its pass across them; 3: the linear layers' inputs
/// (convolution, SiLU, norms); 4: the experts' router and weighted sum (their grouping moves
/// bytes only), the linear layers' gated norm and the decoders' RMSNorm; 5: the questions'
/// attention to their own tokens and its merge with the prefix's part; 6: the gated MLPs'
/// activation.
pub const CUDA_KERNELS: u32 = 6;

/// Names the folder of the engine's own CUDA kernels (cubins), which asks for them.
pub const CUDA_KERNELS_ENV: &str = "BPALS_CUDA_KERNELS";

/// The cubins' folder, where [`CUDA_KERNELS_ENV`] names one: what asks for the kernels, read
/// here (no libtorch needed) so the revision and the engine agree on it.
pub fn cuda_kernels_folder() -> Option<std::path::PathBuf> {
    std::env::var_os(CUDA_KERNELS_ENV).filter(|v| !v.is_empty()).map(std::path::PathBuf::from)
}

/// The revision as the identity records it: `cpu-2`, `cuda-6`, `cuda-6+kernels-6`.
pub fn revision(cuda: bool) -> String {
    revision_of(cuda, cuda_kernels_folder().is_some())
}

fn revision_of(cuda: bool, kernels: bool) -> String {
    match (cuda, kernels) {
        (false, _) => format!("cpu-{CPU}"),
        (true, false) => format!("cuda-{CUDA}"),
        (true, true) => format!("cuda-{CUDA}+kernels-{CUDA_KERNELS}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_revision_names_its_device_and_the_engines_own_kernels() {
        assert_eq!(super::revision_of(false, false), format!("cpu-{}", super::CPU));
        assert_eq!(super::revision_of(false, true), format!("cpu-{}", super::CPU), "a CPU runs none of them");
        assert_eq!(super::revision_of(true, false), format!("cuda-{}", super::CUDA));
        assert_eq!(super::revision_of(true, true), format!("cuda-{}+kernels-{}", super::CUDA, super::CUDA_KERNELS));
    }
}
