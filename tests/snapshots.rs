//! Snapshots of human-facing output: the dataset card of the sample build and `--help`.

mod common;

use common::*;

#[test]
fn help_text() {
    let a = bin().arg("--help").assert().success();
    insta::assert_snapshot!("help", stdout(&a));
    let a = bin().args(["build", "--help"]).assert().success();
    insta::assert_snapshot!("build_help", stdout(&a));
    for command in ["publish", "verify", "rebuild", "diff"] {
        let a = bin().args([command, "--help"]).assert().success();
        insta::assert_snapshot!(format!("{command}_help"), stdout(&a));
    }
}

#[test]
fn sample_card() {
    let s = Scratch::new();
    let out = s.path("s1a");
    build(&spec("s1a.yaml"), &out, &s.cache(), &[]).success();
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    insta::assert_snapshot!("s1a_card", card);
}
