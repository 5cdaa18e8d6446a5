//! The release contract across processors: the engine scores a few images of the embedded
//! sample natively and again under Debian's `qemu-x86_64` presenting the other vendor's CPU
//! model (an Intel Haswell on an AMD host, an AMD EPYC Rome on an Intel one), and the two
//! releases are identical byte for byte. qemu's CPU model changes what libtorch and MKL see when
//! they choose their kernels (the vendor string, the instruction sets, the cache sizes), so a
//! kernel chosen by vendor or by cache size shows here as a different shard.
//!
//! Needs `qemu-x86_64` (Debian's `qemu-user`, which `.ci/run` installs). Elsewhere the test says
//! it was skipped; in CI (`CI` set) a missing qemu fails it. `BPALS_CROSS_CPU_MODELS=A,B` names
//! the CPU models to present instead (`qemu-x86_64 -cpu help` lists them).
#![cfg(feature = "vlm")]

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// The other vendor's CPU model, both with AVX2 and FMA and without AVX-512 (qemu 7.2 emulates
/// no AVX-512): what the kernel pins choose on either vendor.
fn other_vendor_models() -> Vec<String> {
    if let Ok(list) = std::env::var("BPALS_CROSS_CPU_MODELS") {
        return list.split(',').map(str::to_string).collect();
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let amd = cpuinfo.lines().any(|l| l.starts_with("vendor_id") && l.contains("AuthenticAMD"));
    vec![if amd { "Haswell-v4" } else { "EPYC-Rome-v2" }.to_string()]
}

fn qemu() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("qemu-x86_64")).find(|p| p.is_file())
}

/// The README's sample build on its first curated image (two questions over one prefix: the
/// vision tower, the prefill and the questions' pass each once), with the trained tiny model, in
/// f32 (the CPU's default) and in bf16 (whose kernels an AVX-512 machine would otherwise run
/// with its own bf16 instructions). One image, not three: every image is the same shape, so more
/// choose no other kernel, and each costs about 45 s under qemu's emulated floating point.
fn small_specs(s: &Scratch) -> Vec<(&'static str, PathBuf)> {
    let small = format!("extends: {}\nselection:\n  curated_images: 1\n  expected_rows: 2\n", spec("s1a.yaml").display());
    ["f32", "bf16"]
        .into_iter()
        .map(|dtype| (dtype, s.write(&format!("cross-cpu-{dtype}.yaml"), &format!("{small}model:\n  dtype: {dtype}\n"))))
        .collect()
}

fn build_under(qemu_cpu: Option<(&Path, &str)>, spec: &Path, out: &Path, cache: &Path) {
    let engine = assert_cmd::cargo::cargo_bin("bpals-release");
    let mut cmd = match qemu_cpu {
        Some((qemu, cpu)) => {
            let mut c = std::process::Command::new(qemu);
            c.args(["-cpu", cpu]).arg(&engine);
            c
        }
        None => std::process::Command::new(&engine),
    };
    cmd.env_remove("BPALS_NIH_ROOT").env_remove("BPALS_NIH_IMAGES").env_remove("BPALS_CACHE_DIR");
    cmd.arg("build").arg(spec).arg("--out").arg(out).arg("--cache-dir").arg(cache).args(["--no-progress", "--jobs", "1"]);
    let done = cmd.output().expect("the engine runs");
    let on = qemu_cpu.map_or("natively".to_string(), |(_, cpu)| format!("under qemu-x86_64 -cpu {cpu}"));
    assert!(done.status.success(), "the build {on} failed:\n{}", String::from_utf8_lossy(&done.stderr));
}

#[test]
fn the_engine_writes_the_same_release_on_the_other_vendors_cpu() {
    let Some(qemu) = qemu() else {
        assert!(std::env::var_os("CI").is_none(), "qemu-x86_64 is required in CI (Debian's qemu-user)");
        eprintln!("skipped: no qemu-x86_64 on PATH (apt-get install qemu-user)");
        return;
    };
    let s = Scratch::new();
    // Each dtype's builds are one core's work (`--jobs 1`, one libtorch thread) and qemu's
    // emulated floating point makes them minutes long: the two dtypes run side by side.
    std::thread::scope(|scope| {
        for (dtype, spec) in small_specs(&s) {
            let (s, qemu) = (&s, &qemu);
            scope.spawn(move || same_release_under_qemu(s, qemu, dtype, &spec));
        }
    });
}

/// The release of `spec` built natively, then under qemu as each other vendor's CPU model: the
/// same files, byte for byte.
fn same_release_under_qemu(s: &Scratch, qemu: &Path, dtype: &str, spec: &Path) {
    let native = s.path(&format!("native-{dtype}"));
    build_under(None, spec, &native, &s.path(&format!("cache-native-{dtype}")));
    let expected = tree_digest(&native);
    for cpu in other_vendor_models() {
        let out = s.path(&format!("{cpu}-{dtype}"));
        let started = std::time::Instant::now();
        build_under(Some((qemu, &cpu)), spec, &out, &s.path(&format!("cache-{cpu}-{dtype}")));
        eprintln!("{dtype}: built under qemu-x86_64 -cpu {cpu} in {:.0} s", started.elapsed().as_secs_f64());
        let got = tree_digest(&out);
        let differ: Vec<_> = expected.iter().filter(|(file, digest)| got.get(*file) != Some(digest)).map(|(file, _)| file).collect();
        assert!(differ.is_empty(), "{dtype} as {cpu}: these files differ from the native build: {differ:?}");
        assert_eq!(got.len(), expected.len(), "{dtype} as {cpu}: the release has other files");
    }
}
