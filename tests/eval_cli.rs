//! `bpals-release eval` on a built release, with gold labels whose answers are known.

mod common;

use std::fmt::Write;

use common::*;

/// Builds the S1b sample (full + trial splits) and returns its directory.
fn release(s: &Scratch) -> std::path::PathBuf {
    let out = s.path("s1b");
    build(&fixture_s1b(), &out, &s.cache(), &[]).success();
    out
}

#[test]
fn gold_that_thresholds_the_confidence_gives_perfect_scores() {
    let s = Scratch::new();
    let out = release(&s);
    let (split, rows) = bpals_release::eval::read_release_rows(&out).unwrap();
    assert_eq!(split, "full");
    // Gold says "present" exactly where the model's confidence is at least 0.5.
    let mut csv = String::from("image_index,label,value\n");
    for r in rows.iter().filter(|r| r.label != "No Finding") {
        writeln!(csv, "{},{},{}", r.image_index, r.label, u8::from(r.confidence >= 0.5)).unwrap();
    }
    let gold = s.write("gold.csv", &csv);
    let md = s.path("eval.md");
    let a =
        bin().arg("eval").arg(&out).arg("--gold").arg(&gold).arg("--bootstrap").arg("200").arg("--markdown").arg(&md).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["matched"], report["gold_judgements"]);
    let per_label = report["per_label"].as_object().unwrap();
    assert!(per_label.len() >= 10, "most findings are judged");
    for (label, m) in per_label {
        for key in ["n", "prevalence", "auroc", "auprc", "auroc_ci95", "auprc_ci95"] {
            assert!(m.get(key).is_some(), "{label}: {key}");
        }
        if let Some(auroc) = m["auroc"].as_f64() {
            assert_eq!(auroc, 1.0, "{label}: the gold thresholds the confidence");
            assert_eq!(m["auprc"].as_f64().unwrap(), 1.0, "{label}");
        }
    }
    // NIH asserts every row's label (row policy nih_asserted); the gold contradicts it exactly
    // where confidence < 0.5, which is where agreement is lowest: perfect mislabel detection.
    let d = &report["mislabel_detection"];
    assert!(d["mislabeled"].as_u64().unwrap() > 0);
    assert_eq!(d["ap"].as_f64().unwrap(), 1.0);
    assert_eq!(d["at_k"][0][1].as_f64().unwrap(), 1.0, "precision@K at K = mislabeled");
    assert!(report["strata"]["view_PA"]["n"].as_u64().unwrap() > 0);
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("## Evaluation against expert labels") && md.contains("| Effusion |"), "{md}");
}

#[test]
fn bad_gold_files_name_the_line() {
    let s = Scratch::new();
    let out = release(&s);
    let cases = [
        ("header.csv", "image,label,value\n", "header is"),
        ("label.csv", "image_index,label,value\n00000001_000.png,Infiltrate,1\n", "gold/label.csv:2: label \"Infiltrate\""),
        ("value.csv", "image_index,label,value\n00000001_000.png,Mass,yes\n", "value.csv:2: value \"yes\""),
        ("dup.csv", "image_index,label,value\n00000001_000.png,Mass,1\n00000001_000.png,Mass,0\n", "dup.csv:3:"),
        ("nomatch.csv", "image_index,label,value\n99999999_000.png,Mass,1\n", "matches a row"),
    ];
    for (name, text, expected) in cases {
        let gold = s.write(&format!("gold/{name}"), text);
        let a = bin().arg("eval").arg(&out).arg("--gold").arg(&gold).assert().failure();
        assert!(stderr(&a).contains(expected), "{name}: {}", stderr(&a));
    }
    // A resample count with no bound would be a run with no end: refused by the parser.
    let gold = s.write("gold/ok.csv", "image_index,label,value\n00000001_000.png,Mass,1\n");
    let a = bin().arg("eval").arg(&out).arg("--gold").arg(&gold).args(["--bootstrap", "1000000000"]).assert().failure();
    assert!(stderr(&a).contains("is more than the 100000 that --bootstrap takes"), "{}", stderr(&a));
}

#[test]
fn a_spec_that_names_a_gold_file_puts_the_evaluation_in_the_card() {
    let s = Scratch::new();
    let out = release(&s);
    let (_, rows) = bpals_release::eval::read_release_rows(&out).unwrap();
    let mut csv = String::from("image_index,label,value\n");
    for r in rows.iter().filter(|r| r.label != "No Finding") {
        writeln!(csv, "{},{},{}", r.image_index, r.label, u8::from(r.confidence >= 0.5)).unwrap();
    }
    s.write("gold.csv", &csv);
    let evaluated = s.write("evaluated.yaml", &format!("extends: {}\nevaluation:\n  gold: gold.csv\n", fixture_s1b().display()));
    let second = s.path("evaluated");
    build(&evaluated, &second, &s.cache(), &[]).success();
    let card = std::fs::read_to_string(second.join("README.md")).unwrap();
    assert!(card.contains("## Evaluation against expert labels"), "the card carries the evaluation");
    assert!(!card.contains("No evaluation against expert relabels has been run"));
    // The reliability diagram draws this gold's curve (a build on the sample draws the sample's
    // truth): its caption names the gold and its pixels change.
    assert!(card.contains("and against expert labels (") && card.contains(" judgements, orange)"), "{card}");
    let plot = "plots/full-reliability.png";
    assert_ne!(std::fs::read(second.join(plot)).unwrap(), std::fs::read(out.join(plot)).unwrap());
    // The same numbers as `eval` on the published files, and eval.json is in the manifest.
    let a = bin().arg("eval").arg(&out).arg("--gold").arg(s.path("gold.csv")).assert().success();
    let standalone: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let built: serde_json::Value = serde_json::from_slice(&std::fs::read(second.join("eval.json")).unwrap()).unwrap();
    assert_eq!(built["per_label"], standalone["per_label"]);
    assert_eq!(built["mislabel_detection"], standalone["mislabel_detection"]);
    bin().arg("verify").arg(&second).assert().success();
    // A malformed gold file is refused at resolve time, naming the key and the line.
    s.write("gold.csv", "image_index,label,value\n00000001_000.png,Mass,maybe\n");
    let a = build(&evaluated, &s.path("bad"), &s.cache(), &[]).failure();
    assert!(stderr(&a).contains("key `evaluation.gold`") && stderr(&a).contains("gold.csv:2"), "{}", stderr(&a));
}
