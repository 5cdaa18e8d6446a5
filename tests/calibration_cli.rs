//! `calibrate` -> a spec naming the file -> a build that uses it -> `eval --calibration`.

mod common;

use std::fmt::Write;

use common::*;

#[test]
fn a_calibration_fitted_on_gold_flows_into_the_build_and_the_eval() {
    let s = Scratch::new();
    let first = s.path("s1b");
    build(&fixture_s1b(), &first, &s.cache(), &[]).success();
    // A gold that agrees with the model only 60% of the time: the model is overconfident.
    let (_, rows) = bpals_release::eval::read_release_rows(&first).unwrap();
    let mut csv = String::from("image_index,label,value\n");
    for (i, r) in rows.iter().filter(|r| r.label != "No Finding").enumerate() {
        let says = r.confidence >= 0.5;
        writeln!(csv, "{},{},{}", r.image_index, r.label, u8::from(if i % 5 < 3 { says } else { !says })).unwrap();
    }
    let gold = s.write("gold.csv", &csv);
    let calibration = s.path("calibration.json");
    bin().arg("calibrate").arg(&first).arg("--gold").arg(&gold).arg("--out").arg(&calibration).assert().success();
    let table: serde_json::Value = serde_json::from_slice(&std::fs::read(&calibration).unwrap()).unwrap();
    assert_eq!(table["format"], "bpals-calibration/1");
    assert_eq!(table["method"], "platt");

    // Eval reports ECE and Brier after calibration, and calibration helps on this gold.
    let a = bin()
        .arg("eval")
        .arg(&first)
        .arg("--gold")
        .arg(&gold)
        .args(["--bootstrap", "50", "--calibration"])
        .arg(&calibration)
        .assert()
        .success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let before = report["calibration"]["brier"].as_f64().unwrap();
    let after = report["calibration"]["after_calibration"]["brier"].as_f64().unwrap();
    assert!(after < before, "in-sample Platt scaling lowers the Brier score: {before} -> {after}");

    // A spec that names the file builds with calibrated confidences, and says so.
    let calibrated_spec =
        s.write("calibrated.yaml", &format!("extends: {}\nsignal:\n  calibration: calibration.json\n", fixture_s1b().display()));
    let second = s.path("calibrated");
    build(&calibrated_spec, &second, &s.cache(), &[]).success();
    let card = std::fs::read_to_string(second.join("README.md")).unwrap();
    assert!(card.contains("`confidence` is calibrated per label: platt scaling"), "the card states the calibration");
    let lock =
        |dir: &std::path::Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(dir.join("build.lock")).unwrap()).unwrap() };
    assert_ne!(lock(&first)["spec_sha256"], lock(&second)["spec_sha256"]);
    assert_eq!(lock(&second)["spec"]["signal"]["calibration"]["sha256"].as_str().unwrap().len(), 64);
    let (_, calibrated) = bpals_release::eval::read_release_rows(&second).unwrap();
    assert_eq!(calibrated.len(), rows.len());
    assert!(calibrated.iter().zip(&rows).any(|(c, r)| (c.confidence - r.confidence).abs() > 1e-6), "confidences changed");

    // A broken calibration file is refused at resolve time, naming the key.
    std::fs::write(&calibration, "{\"format\": \"something else\"}").unwrap();
    let a = build(&calibrated_spec, &s.path("bad"), &s.cache(), &[]).failure();
    assert!(stderr(&a).contains("key `signal.calibration`"), "{}", stderr(&a));
}

/// `calibrate --out` inside the release it reads is refused before any work (the file would make
/// the release fail `verify`), and the release keeps its bytes.
#[test]
fn a_calibration_written_into_its_release_is_refused() {
    let s = Scratch::new();
    let release = s.path("s1b");
    build(&fixture_s1b(), &release, &s.cache(), &[]).success();
    let before = tree_digest(&release);
    let gold = repo().join("fixtures/sample/truth.csv");
    for joint in [false, true] {
        let mut cmd = bin();
        cmd.arg("calibrate").arg(&release).arg("--gold").arg(&gold).arg("--out").arg(release.join("rule.json"));
        if joint {
            cmd.arg("--joint");
        }
        let err = stderr(&cmd.assert().failure());
        assert!(err.contains("is inside the release") && err.contains("write it beside the release"), "{err}");
    }
    assert_eq!(tree_digest(&release), before);
    bin().arg("verify").arg(&release).assert().success();
}

/// A reader that closes early (`bpals-release ... | head`): the command ends on SIGPIPE, as Unix
/// tools do, with no panic on stderr.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"))
        .args(["completions", "bash"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}: {err}", out.status);
}
