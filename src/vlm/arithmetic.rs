//! The engine's arithmetic revisions: one number per kind of device, raised by any change to the
//! engine that changes a score's bits there (another kernel, another order of sums, another
//! rounding), and by nothing else.
//!
//! The revision of the device a build scores on is in the scorer's identity, so it keys the score
//! cache and build.lock records it: scores made by an older engine are never mixed into a build
//! by a newer one, and an auditor who rebuilds with another tool can see whether the two engines
//! do the same arithmetic. On the CPU the suite enforces it: `tests/arithmetic.rs` keeps the
//! committed fixtures' logit bits under the revision that made them, and fails when the bits
//! change and the revision does not. No GPU runs in the suite, so a change to the GPU's arithmetic
//! raises [`CUDA`] by hand.
//!
//! Needs no libtorch: an audit compares a lock's revision with this tool's.

/// The CPU's arithmetic (f32 and half precision, under the kernel pins of `cpu_kernels`).
pub const CPU: u32 = 1;

/// A CUDA device's arithmetic (libtorch's kernels there, the fused prefix kernel included). 2:
/// the delta rule's prefix outputs are two products over all its chunks, whose batch cuBLAS may
/// give other kernels than one chunk's.
pub const CUDA: u32 = 2;

/// The revision as the identity records it: `cpu-1`, `cuda-2`.
pub fn revision(cuda: bool) -> String {
    if cuda {
        format!("cuda-{CUDA}")
    } else {
        format!("cpu-{CPU}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_revision_names_its_device() {
        assert_eq!(super::revision(false), format!("cpu-{}", super::CPU));
        assert_eq!(super::revision(true), format!("cuda-{}", super::CUDA));
    }
}
