//! With the `libtorch` feature, gives this crate's test binaries an rpath to libtorch, so they run
//! without LD_LIBRARY_PATH (the tool's build.rs does the same for its binaries).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // torch-sys (links = "tch") reports where it found libtorch.
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
