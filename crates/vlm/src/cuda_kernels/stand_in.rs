//! The suite's stand-in for the CUDA driver (`crates/vlm/tests/kernels/`), which runs the kernels' own source
//! on the CPU: built from every `.cpp` there, with a fake cubin for each kernel.

use std::path::{Path, PathBuf};

use super::{CudaKernels, KERNELS};

/// The stand-in driver built into `scratch`, and an empty folder for cubins beside it.
pub fn driver(scratch: &Path) -> (PathBuf, PathBuf) {
    let (library, cubins) = (scratch.join("libcuda-standin.so"), scratch.join("cubins"));
    std::fs::create_dir(&cubins).unwrap();
    let sources_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels");
    let mut sources: Vec<PathBuf> =
        std::fs::read_dir(&sources_dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "cpp")).collect();
    sources.sort();
    let built = std::process::Command::new("c++")
        .args(["-std=c++20", "-O2", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .args(&sources)
        .output()
        .expect("a C++ compiler (c++) for the stand-in driver");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    (library, cubins)
}

/// The stand-in driver, and the kernels loaded through it from fake cubins.
pub fn kernels(scratch: &Path) -> (PathBuf, CudaKernels) {
    let (library, cubins) = driver(scratch);
    write_cubins(&cubins, &[]);
    let kernels = CudaKernels::load(&library, &cubins, 0).unwrap();
    (library, kernels)
}

/// A fake cubin in `cubins` for each kernel file but those named in `except` (`delta_rule_within`).
pub fn write_cubins(cubins: &Path, except: &[&str]) {
    for kernel in KERNELS.iter().filter(|k| !except.contains(&k.file)) {
        std::fs::write(cubins.join(format!("{}.sm_90.cubin", kernel.file)), b"FAKE-CUBIN").unwrap();
    }
}

/// How many kernels the stand-in driver at `library` has run.
pub fn launches(library: &Path) -> i32 {
    // SAFETY: the stand-in's own counter, `int standin_launches(void)`.
    unsafe {
        let standin = libloading::Library::new(library).unwrap();
        let count = standin.get::<unsafe extern "C" fn() -> i32>(b"standin_launches\0").unwrap();
        count()
    }
}
