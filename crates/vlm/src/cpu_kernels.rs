//! The CPU kernels libtorch runs, pinned to one code path so that the engine's logits are the
//! same bits on every x86-64 machine with AVX2, Intel's and AMD's alike.
//!
//! libtorch chooses its kernels by the processor it finds: ATen's vectorized ops (softmax,
//! norms, attention) by vector width, oneDNN's by the widest ISA, and MKL's matrix products and
//! vector math (`exp`, `log`) by a branch per instruction set *and vendor*. Each choice changes
//! the last bits of a sum. MKL's reproducibility branches for AVX2 and wider are Intel's only:
//! on an AMD processor MKL takes its `AUTO` branch instead, so `MKL_CBWR=AVX2` gave one set of
//! bits on Intel machines and another on AMD ones (found by running the same probe natively and
//! under `qemu-x86_64 -cpu Haswell-v4` and `-cpu EPYC-Rome-v2`: `scripts/cross-cpu.py`).
//! `COMPATIBLE` (SSE2 code without approximate reciprocals) is the one branch every x86-64
//! processor takes alike; it costs about half of MKL's f32 GEMM speed on the CPU, where the
//! engine only runs demos and tests (see the guide's engine page for the measurements).
//!
//! Unlike the AVX2 branch, `COMPATIBLE` is reproducible only at a fixed thread count: the
//! engine scores with one libtorch thread per worker, so `--jobs` and the core count never
//! change a byte.
//!
//! Each variable is set only when unset, before libtorch reads it (at its first kernel), so a
//! user who wants the widest kernels can still ask for them, at the cost of reproducibility;
//! the values in force enter the scorer's identity, so scores made under other kernels are never
//! mixed with these.

use serde::Serialize;
use std::sync::Once;

/// The variables and the values they are pinned to. `.cargo/config.toml` sets the same for the
/// processes cargo runs (tests, benches), before their first thread; a test checks they agree.
pub const PINS: [(&str, &str); 3] = [
    // ATen's runtime dispatch: default, avx2 or avx512.
    ("ATEN_CPU_CAPABILITY", "avx2"),
    // MKL's Conditional Numerical Reproducibility: the branch Intel and AMD processors take alike.
    ("MKL_CBWR", "COMPATIBLE"),
    // oneDNN's widest instruction set.
    ("ONEDNN_MAX_CPU_ISA", "AVX2"),
];

/// Sets each of [`PINS`] that the environment does not set already, once per process. `main`
/// calls it first thing, while the process has one thread; the engine calls it again when it
/// loads a model, for a program that uses the library without the binary's `main`. libtorch
/// reads the variables at its first kernel, so a pin after that comes too late: call it before
/// anything touches a tensor.
pub fn pin() {
    static PINNED: Once = Once::new();
    PINNED.call_once(|| {
        for (name, value) in PINS {
            if std::env::var_os(name).is_none() {
                std::env::set_var(name, value);
            }
        }
    });
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

/// The kernel settings in force, as the scorer's identity records them for a CPU run: each
/// variable and its value (null where unset).
pub fn identity() -> serde_json::Value {
    settings().into_iter().map(|s| (s.variable.to_string(), s.value.into())).collect::<serde_json::Map<_, _>>().into()
}

/// One setting as the tool names it to a reader: `VARIABLE=value`, or `VARIABLE unset`.
pub fn shown(variable: &str, value: Option<&str>) -> String {
    match value {
        Some(value) => format!("{variable}={value}"),
        None => format!("{variable} unset"),
    }
}

/// The settings of a scorer identity's `cpu_kernels` (as [`identity`] records them) that are not
/// the pins, each as `VARIABLE=value` (`VARIABLE unset` where it was): empty where every one is
/// pinned, or where the identity records none (a GPU run, another backend).
pub fn unpinned(kernels: &serde_json::Value) -> Vec<String> {
    let Some(recorded) = kernels.as_object() else { return Vec::new() };
    PINS.iter()
        .filter_map(|(variable, pinned)| match recorded.get(*variable).and_then(|v| v.as_str()) {
            Some(value) if value == *pinned => None,
            value => Some(shown(variable, value)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpinned_settings_are_named_with_their_values() {
        pin();
        assert_eq!(unpinned(&identity()), Vec::<String>::new(), "the tests run under the pins");
        let auto = serde_json::json!({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AUTO", "ONEDNN_MAX_CPU_ISA": null});
        assert_eq!(unpinned(&auto), vec!["MKL_CBWR=AUTO".to_string(), "ONEDNN_MAX_CPU_ISA unset".to_string()]);
        assert!(unpinned(&serde_json::Value::Null).is_empty(), "a GPU run records no CPU kernels");
    }

    /// `.cargo/config.toml` (the tests' and benches' pins) and `scripts/cross-cpu.py` (the
    /// diagnosis) repeat [`PINS`]; they must say the same.
    #[test]
    fn the_pins_are_the_same_everywhere_they_are_written() {
        let root = crate::repository();
        let cargo = std::fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
        let script = std::fs::read_to_string(root.join("scripts/cross-cpu.py")).unwrap();
        for (name, value) in PINS {
            assert!(cargo.lines().any(|l| l == format!("{name} = \"{value}\"")), ".cargo/config.toml does not pin {name}={value}");
            assert!(script.contains(&format!("\"{name}\": \"{value}\"")), "scripts/cross-cpu.py does not pin {name}={value}");
        }
    }

    /// The library's tests run under the pins (cargo sets them before the process starts), as
    /// the binary does; an environment that overrides one is reported, not silently tested.
    #[test]
    fn the_tests_run_under_the_pins() {
        pin();
        let off: Vec<_> = settings().into_iter().filter(|s| !s.reproducible).collect();
        assert!(off.is_empty(), "not pinned in this test process: {off:?}");
        assert_eq!(identity()["MKL_CBWR"], "COMPATIBLE");
    }
}
