//! Records the git commit the tool is built from, for build.lock; with the `vlm` feature, also
//! gives the binaries an rpath to libtorch so they run without LD_LIBRARY_PATH.
use std::process::Command;

fn main() {
    watch_git();
    println!("cargo:rerun-if-env-changed=BPALS_GIT_COMMIT");
    let commit = std::env::var("BPALS_GIT_COMMIT").ok().or_else(|| {
        let head = Command::new("git").args(["rev-parse", "HEAD"]).output().ok()?;
        if !head.status.success() {
            return None;
        }
        let mut commit = String::from_utf8(head.stdout).ok()?.trim().to_string();
        // --no-optional-locks: a plain `git status` may rewrite .git/index to refresh it (it does
        // in a fresh clone), which would make the next cargo build rerun this script and
        // recompile the crate for nothing.
        let dirty = Command::new("git").args(["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]).output().ok()?;
        if !dirty.stdout.is_empty() {
            commit.push_str("+dirty");
        }
        Some(commit)
    });
    println!("cargo:rustc-env=BPALS_GIT_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));

    // torch-sys (links = "tch") reports where it found libtorch.
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        // The PyTorch wheel it came from says its version beside it (torch/version.py), for
        // `doctor`: which libtorch the binary was built against.
        let version = std::path::Path::new(&lib).parent().map(|torch| torch.join("version.py"));
        let text = version.and_then(|path| std::fs::read_to_string(path).ok()).unwrap_or_default();
        let built = text.lines().find_map(|l| l.strip_prefix("__version__ = ")).map(|v| v.trim().trim_matches('\'').to_string());
        println!("cargo:rustc-env=BPALS_LIBTORCH_BUILT={}", built.unwrap_or_else(|| "unknown".into()));
    }
}

/// Reruns this script when the commit or the tree's state may have changed: HEAD (a checkout),
/// the branch HEAD names (a commit moves the branch, not HEAD), packed refs, and the index (a
/// staged change). Only files that exist are named: cargo reruns a script for a missing one
/// on every build.
fn watch_git() {
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
        String::from_utf8(out.stdout).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
    };
    // The common directory holds the refs; a worktree's own git directory holds its HEAD and index.
    let (Some(git_dir), Some(common)) =
        (git(&["rev-parse", "--absolute-git-dir"]), git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]))
    else {
        // No repository (a source archive), or a git older than 2.31: the paths of a plain clone.
        println!("cargo:rerun-if-changed=.git/HEAD");
        println!("cargo:rerun-if-changed=.git/index");
        return;
    };
    let common = std::path::Path::new(&common);
    let mut watched = vec![std::path::Path::new(&git_dir).join("HEAD"), std::path::Path::new(&git_dir).join("index")];
    watched.push(common.join("packed-refs"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(branch));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
