//! `bpals-release source`: correct counts on both official variants, and clear errors.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;

fn summary(data_entry: &str, extra: &[&str]) -> serde_json::Value {
    let sample = repo().join("fixtures/sample");
    let a = bin().arg("source").arg("--data-entry").arg(sample.join(data_entry)).args(extra).assert().success();
    serde_json::from_str(&stdout(&a)).expect("JSON on stdout")
}

/// Counts computed here by the simplest possible reading of the file, to check the real parser.
fn naive_counts(data_entry: &str) -> (usize, usize, BTreeMap<String, u64>) {
    let text = std::fs::read_to_string(repo().join("fixtures/sample").join(data_entry)).unwrap();
    let mut patients = BTreeSet::new();
    let mut labels = BTreeMap::new();
    let mut images = 0;
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.trim_end_matches('\r').split(',').collect();
        images += 1;
        patients.insert(f[3].trim_start_matches('0').to_string());
        for l in f[1].split('|') {
            *labels.entry(l.to_string()).or_insert(0u64) += 1;
        }
    }
    (images, patients.len(), labels)
}

#[test]
fn counts_match_on_both_variants() {
    for variant in ["Data_Entry_2017.csv", "Data_Entry_2017_v2020.csv"] {
        let s = summary(variant, &[]);
        let (images, patients, labels) = naive_counts(variant);
        assert_eq!(s["images"].as_u64().unwrap() as usize, images, "{variant}");
        assert_eq!(s["patients"].as_u64().unwrap() as usize, patients, "{variant}");
        for (label, n) in &labels {
            assert_eq!(s["labels"][label].as_u64().unwrap(), *n, "{variant} {label}");
        }
        assert_eq!(s["label_rows"].as_u64().unwrap(), labels.values().sum::<u64>());
        let views: u64 = s["view_positions"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(views as usize, images);
        let sexes: u64 = s["sexes"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(sexes as usize, images);
    }
    // The 2017 file has the implausible ages the 2020 revision corrected.
    assert!(summary("Data_Entry_2017.csv", &[])["age"]["max"].as_u64().unwrap() > 300);
    assert!(summary("Data_Entry_2017_v2020.csv", &[])["age"]["max"].as_u64().unwrap() <= 100);
}

#[test]
fn boxes_and_splits_are_counted() {
    let sample = repo().join("fixtures/sample");
    let s = summary(
        "Data_Entry_2017_v2020.csv",
        &[
            "--bbox",
            sample.join("BBox_List_2017.csv").to_str().unwrap(),
            "--train-val-list",
            sample.join("train_val_list.txt").to_str().unwrap(),
            "--test-list",
            sample.join("test_list.txt").to_str().unwrap(),
        ],
    );
    let bbox_lines =
        std::fs::read_to_string(sample.join("BBox_List_2017.csv")).unwrap().lines().skip(1).filter(|l| !l.trim().is_empty()).count();
    assert_eq!(s["boxes"]["total"].as_u64().unwrap() as usize, bbox_lines);
    assert!(s["boxes"]["per_finding"].get("Infiltrate").is_none(), "Infiltrate is normalised");
    let count = |f: &str| std::fs::read_to_string(sample.join(f)).unwrap().lines().filter(|l| !l.trim().is_empty()).count() as u64;
    assert_eq!(s["splits"]["train_val"].as_u64().unwrap(), count("train_val_list.txt"));
    assert_eq!(s["splits"]["test"].as_u64().unwrap(), count("test_list.txt"));
    assert_eq!(s["splits"]["unassigned"].as_u64().unwrap(), 0);
    assert_eq!(s["inputs"].as_object().unwrap().len(), 4);
}

#[test]
fn line_endings_and_trailing_columns_do_not_matter() {
    let s = Scratch::new();
    let src = std::fs::read_to_string(repo().join("fixtures/sample/Data_Entry_2017_v2020.csv")).unwrap();
    let crlf_trailing: String = src.lines().map(|l| format!("{l},,\r\n")).collect();
    let path = s.write("crlf.csv", &crlf_trailing);
    let a = bin().arg("source").arg("--data-entry").arg(&path).assert().success();
    let got: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let want = summary("Data_Entry_2017_v2020.csv", &[]);
    assert_eq!(got["labels"], want["labels"]);
    assert_eq!(got["patients"], want["patients"]);
}

#[test]
fn bad_files_get_clear_errors() {
    let s = Scratch::new();
    let header = "Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position,OriginalImage[Width,Height],OriginalImagePixelSpacing[x,y]\n";
    let cases = [
        (
            "short.csv",
            format!("{header}00000001_000.png,Mass,0,1,58,M\n"),
            "short.csv:2: expected 11 fields (image to pixel spacing), found 6",
        ),
        (
            "dup.csv",
            format!("{header}00000001_000.png,Mass,0,1,58,M,PA,1,1,0.1,0.1\n00000001_000.png,Mass,0,1,58,M,PA,1,1,0.1,0.1\n"),
            "appears twice (first on line 2)",
        ),
        ("age.csv", format!("{header}00000001_000.png,Mass,0,1,old,M,PA,1,1,0.1,0.1\n"), "age.csv:2: patient age \"old\""),
        ("view.csv", format!("{header}00000001_000.png,Mass,0,1,58,M,LL,1,1,0.1,0.1\n"), "view position \"LL\""),
        ("header.csv", "Image,Labels\n".to_string(), "bad header"),
        ("empty.csv", String::new(), "the file is empty"),
    ];
    for (name, text, expected) in cases {
        let path = s.write(name, &text);
        let a = bin().arg("source").arg("--data-entry").arg(&path).assert().failure();
        assert!(stderr(&a).contains(expected), "{name}: {}", stderr(&a));
    }
    let a = bin().arg("source").arg("--data-entry").arg(s.path("nope.csv")).assert().failure();
    assert!(stderr(&a).contains("nope.csv"), "{}", stderr(&a));
}
