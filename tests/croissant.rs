//! `croissant.json` (MLCommons Croissant 1.1 with RAI 1.0): in every release and its manifest,
//! byte-identical across rebuilds and sharded builds, with the publisher's words from the spec
//! and the build's facts. mlcroissant itself reads it in tests/python/test_croissant.py.

mod common;

use std::path::Path;

use common::*;

fn croissant(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("croissant.json")).unwrap()).unwrap()
}

#[test]
fn every_release_carries_it_in_its_manifest_and_the_card_links_it() {
    let s = Scratch::new();
    let out = s.path("out");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let listed: Vec<&str> = manifest["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(listed.contains(&"croissant.json"));
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.contains("Croissant metadata: [`croissant.json`](croissant.json)"));

    let doc = croissant(&out);
    assert_eq!(doc["conformsTo"], serde_json::json!(["http://mlcommons.org/croissant/1.1", "http://mlcommons.org/croissant/RAI/1.0"]));
    assert_eq!(doc["license"], "https://spdx.org/licenses/CC-BY-NC-4.0.html", "the trial tier's license");
    assert_eq!(doc["datePublished"], "2026-05-26", "the spec's date, never the clock");
    assert!(doc["rai:dataCollection"].as_str().unwrap().starts_with("No new images or reports were collected."), "the publisher's words");
    assert!(doc["rai:machineAnnotationTools"][0].as_str().unwrap().starts_with("bpals/fixture-scorer at revision v1"));
    assert!(doc["description"].as_str().unwrap().contains("DEMO BUILD"), "a demo says so");
    // Every shard as a FileObject with the manifest's digest, and one record set per table and split.
    let digests: std::collections::BTreeMap<&str, &str> =
        manifest["files"].as_array().unwrap().iter().map(|f| (f["path"].as_str().unwrap(), f["sha256"].as_str().unwrap())).collect();
    let objects: Vec<&serde_json::Value> =
        doc["distribution"].as_array().unwrap().iter().filter(|d| d["@type"] == "cr:FileObject").collect();
    for object in &objects {
        assert_eq!(digests[object["contentUrl"].as_str().unwrap()], object["sha256"].as_str().unwrap());
    }
    assert_eq!(objects.len(), listed.iter().filter(|p| p.ends_with(".parquet")).count() + 1, "the shards and images.sha256");
    let record_sets: Vec<&str> = doc["recordSet"].as_array().unwrap().iter().map(|r| r["@id"].as_str().unwrap()).collect();
    assert_eq!(record_sets, ["default_trial", "images_trial"]);
}

#[test]
fn the_file_is_byte_identical_across_rebuilds_and_sharded_builds() {
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("one"), &s.path("cache-one"), &["--jobs", "1"]).success();
    build(&fixture_s1a(), &s.path("two"), &s.path("cache-two"), &["--jobs", "2"]).success();
    for k in 0..2 {
        bin()
            .arg("infer")
            .arg(fixture_s1a())
            .args(["--shard", &format!("{k}/2"), "--no-progress", "--cache-dir"])
            .arg(s.path("shared"))
            .assert()
            .success();
    }
    build(&fixture_s1a(), &s.path("merged"), &s.path("shared"), &[]).success();
    let bytes = |name: &str| std::fs::read(s.path(name).join("croissant.json")).unwrap();
    assert_eq!(bytes("one"), bytes("two"));
    assert_eq!(bytes("one"), bytes("merged"));
}

#[test]
fn a_demo_without_the_publishers_words_says_so_and_a_publishable_build_is_refused() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "unset.yaml", "croissant: null\n");
    let a = build(&spec, &s.path("demo"), &s.cache(), &[]).success();
    assert!(stderr(&a).contains("croissant.json lacks the publisher's Responsible-AI words: set croissant.data_collection,"));
    let doc = croissant(&s.path("demo"));
    assert!(doc["rai:dataBiases"].as_str().unwrap().starts_with("Not written by the publisher yet"));
    let err = stderr(&build(&spec, &s.path("real"), &s.cache(), &["--publishable"]).failure());
    assert!(err.contains("gate `publishable`") && err.contains("croissant.personal_sensitive_information"), "{err}");
    assert!(!s.path("real").exists());
}

#[test]
fn bad_rai_words_are_errors_naming_the_key() {
    let s = Scratch::new();
    let cases = [
        // The parser's error points at the file, line and column, and quotes the key's line.
        ("type.yaml", "croissant:\n  data_collection_type: 5\n", "type.yaml:3:25"),
        ("list.yaml", "croissant:\n  data_biases: [one, two]\n", "list.yaml:3:"),
        ("empty.yaml", "croissant:\n  data_limitations: \"  \"\n", "key `croissant.data_limitations`: must not be empty"),
        ("unknown.yaml", "croissant:\n  data_colection: typo\n", "unknown field `data_colection`"),
    ];
    for (name, yaml, expected) in cases {
        let err = stderr(&build(&derived_spec(&s, name, yaml), &s.path("out"), &s.cache(), &[]).failure());
        let key = yaml.lines().nth(1).unwrap().split(':').next().unwrap().trim();
        assert!(err.contains(expected) && err.contains(key), "{name}: {err}");
        assert!(!s.path("out").exists(), "nothing written");
    }
}
