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
    for command in ["publish", "verify", "sign", "rebuild", "diff"] {
        let a = bin().args([command, "--help"]).assert().success();
        insta::assert_snapshot!(format!("{command}_help"), stdout(&a));
    }
}
