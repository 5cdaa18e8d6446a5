//! Snapshots of `--help`. The sample build's dataset card is snapshotted in vlm_build.rs, since
//! that build runs the VLM engine.

mod common;

use common::*;

#[test]
fn help_text() {
    let a = bin().arg("--help").assert().success();
    insta::assert_snapshot!("help", stdout(&a));
    let a = bin().args(["build", "--help"]).assert().success();
    insta::assert_snapshot!("build_help", stdout(&a));
    for command in ["publish", "verify", "sign", "rebuild", "diff", "review"] {
        let a = bin().args([command, "--help"]).assert().success();
        insta::assert_snapshot!(format!("{command}_help"), stdout(&a));
    }
    for command in ["plan", "export", "import"] {
        let a = bin().args(["review", command, "--help"]).assert().success();
        insta::assert_snapshot!(format!("review_{command}_help"), stdout(&a));
    }
}

#[test]
fn completions_and_man_pages_come_from_the_same_definitions() {
    for shell in ["bash", "zsh", "fish"] {
        let a = bin().args(["completions", shell]).assert().success();
        let script = stdout(&a);
        assert!(script.contains("bpals-release") && script.contains("public-key") && script.contains("sign-key"), "{shell}");
    }
    let s = Scratch::new();
    let out = s.path("man1");
    bin().arg("man").arg("--out").arg(&out).assert().success();
    let page = std::fs::read_to_string(out.join("bpals-release-verify.1")).unwrap();
    assert!(page.contains(".TH bpals-release-verify 1") && page.contains("require\\-signature"), "{page}");
    assert!(out.join("bpals-release.1").is_file() && out.join("bpals-release-build.1").is_file());
}
