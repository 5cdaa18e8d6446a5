//! The CPU kernels libtorch runs, pinned to one code path so that the engine's logits are the
//! same bits on every x86-64 machine with AVX2.
//!
//! libtorch chooses its kernels by the processor it finds: ATen's vectorized ops (softmax,
//! norms, attention) by vector width, MKL's matrix products by a branch per instruction set
//! (and, unless told otherwise, by the alignment of its inputs), oneDNN's by the widest ISA.
//! Each choice changes the last bits of a sum. Left alone, the sample release built on an
//! AVX-512 machine differed from one built on an AVX2 machine, and a build could drift by about
//! 1e-5 from its own rebuild. Pinned, every AVX2 machine takes the same path, and MKL's strict
//! mode makes its results independent of memory alignment.
//!
//! Each variable is set only when unset, before libtorch reads it (at its first kernel), so a
//! user who wants the widest kernels can still ask for them, at the cost of reproducibility.

use serde::Serialize;

/// The variables and the values they are pinned to.
pub const PINS: [(&str, &str); 3] = [
    // ATen's runtime dispatch: default, avx2 or avx512.
    ("ATEN_CPU_CAPABILITY", "avx2"),
    // MKL's Conditional Numerical Reproducibility: the AVX2 branch, strict about alignment.
    ("MKL_CBWR", "AVX2,STRICT"),
    // oneDNN's widest instruction set.
    ("ONEDNN_MAX_CPU_ISA", "AVX2"),
];

/// Sets each of [`PINS`] that the environment does not set already. Call it first thing in
/// `main`, while the process has one thread: libtorch has not started and nothing else reads
/// the environment.
pub fn pin() {
    for (name, value) in PINS {
        if std::env::var_os(name).is_none() {
            std::env::set_var(name, value);
        }
    }
}

/// Each pinned variable and its value in this process, and whether it is the pinned one.
#[derive(Debug, Clone, Serialize)]
pub struct KernelSetting {
    pub variable: &'static str,
    pub value: Option<String>,
    pub reproducible: bool,
}

pub fn settings() -> Vec<KernelSetting> {
    PINS.iter()
        .map(|(variable, pinned)| {
            let value = std::env::var(variable).ok();
            KernelSetting { variable, reproducible: value.as_deref() == Some(*pinned), value }
        })
        .collect()
}
