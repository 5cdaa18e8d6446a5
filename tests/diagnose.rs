//! S2 (Diagnose) through the command line with the fixture scorer: the release carries the
//! location and signs columns after S1's, the generation stage caches, resumes and merges
//! sharded runs, the release verifies and diffs against S1b, and the card shows S2 as built.

mod common;

use common::*;
use predicates::str::contains;

fn diagnose_columns(release: &std::path::Path) -> Vec<String> {
    let file = std::fs::File::open(release.join("data/full-00000-of-00001.parquet")).unwrap();
    let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
    use parquet::file::reader::FileReader;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    schema.root_schema().get_fields().iter().map(|f| f.name().to_string()).collect()
}

#[test]
fn an_s2_release_adds_location_and_signs_after_every_s1_column() {
    let s = Scratch::new();
    let a = build(&fixture_s2(), &s.path("s2"), &s.cache(), &[]).success();
    let log = stderr(&a);
    assert!(log.contains("generate: grounding answers for") && log.contains("0 from the cache"), "{log}");
    assert!(log.contains("eval: location on"), "{log}");
    let columns = diagnose_columns(&s.path("s2"));
    let s1: Vec<&str> = bpals_release::shard::PAIR_COLUMNS.iter().map(|c| c.name).collect();
    let s2: Vec<&str> = bpals_release::shard::DIAGNOSE_COLUMNS.iter().map(|c| c.name).collect();
    assert_eq!(columns, [s1, s2].concat());
    bin().arg("verify").arg(s.path("s2")).assert().success();
    assert!(s.path("s2/location_eval.json").is_file() && s.path("s2/plots/full-box-iou.png").is_file());

    let card = std::fs::read_to_string(s.path("s2/README.md")).unwrap();
    assert!(card.contains("## Diagnose (S2): location and observable signs"), "the card has an S2 section");
    assert!(card.contains("| `box_status` | string, nullable |"), "the schema documents the new columns");
    assert!(card.contains("| S2 | Diagnose |") && card.contains("| tentative | builds it |"), "the roadmap shows S2 as built");
    assert!(card_row(&card, "S3").ends_with("| builds it |"), "S3 is built too");
    assert!(card.contains("fixture stand-in"), "the card says the scorer is a fixture");

    // `eval --boxes` reads the shards back and gets the build's own location evaluation.
    let sample = repo().join("fixtures/sample");
    let e = bin()
        .arg("eval")
        .arg(s.path("s2"))
        .arg("--boxes")
        .arg(sample.join("BBox_List_2017.csv"))
        .arg("--images")
        .arg(sample.join("images"))
        .assert()
        .success();
    let from_shards: serde_json::Value = serde_json::from_str(&stdout(&e)).unwrap();
    let in_build: serde_json::Value = serde_json::from_slice(&std::fs::read(s.path("s2/location_eval.json")).unwrap()).unwrap();
    assert_eq!(from_shards["per_finding"], in_build["per_finding"]);
    assert_eq!(from_shards["overall"], in_build["overall"]);
    assert!(from_shards["overall"]["boxes"].as_u64().unwrap() > 50, "{from_shards}");

    // S1 columns are unchanged: the diff against S1b finds no row that moved.
    build(&fixture_s1b(), &s.path("s1b"), &s.cache(), &[]).success();
    let d = bin().arg("diff").arg(s.path("s1b")).arg(s.path("s2")).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&d)).unwrap();
    assert_eq!(report["changed_rows"], 0, "{report}");
    assert_eq!(report["overall"]["mean_abs_confidence_change"], 0.0, "{report}");

    // An S1 release has no location to evaluate, and eval needs something to evaluate against.
    let e = bin().arg("eval").arg(s.path("s1b")).arg("--boxes").arg(sample.join("BBox_List_2017.csv")).assert().failure();
    assert!(stderr(&e).contains("has no S2 location columns"), "{}", stderr(&e));
    let e = bin().arg("eval").arg(s.path("s2")).assert().failure();
    assert!(stderr(&e).contains("--gold"), "{}", stderr(&e));
}

#[test]
fn sharded_and_interrupted_generation_merges_into_the_same_bytes() {
    let s = Scratch::new();
    build(&fixture_s2(), &s.path("plain"), &s.path("cache-plain"), &[]).success();
    for k in 0..2 {
        bin()
            .arg("infer")
            .arg(fixture_s2())
            .args(["--shard", &format!("{k}/2"), "--no-progress", "--cache-dir"])
            .arg(s.path("cache-shared"))
            .assert()
            .success()
            .stdout(contains("grounding answers:"));
    }
    // A killed run: some answers never written, one half-written temp file left behind.
    let answers = s.path("cache-shared/generations-v2");
    let mut entries: Vec<_> = files_under(&answers);
    entries.sort();
    let removed = entries.len() / 3;
    for f in entries.iter().take(removed) {
        std::fs::remove_file(f).unwrap();
    }
    std::fs::write(entries[removed].parent().unwrap().join(".tmpKILLED"), "{\"key\": \"trunc").unwrap();
    let a = build(&fixture_s2(), &s.path("merged"), &s.path("cache-shared"), &[]).success();
    let log = stderr(&a);
    assert!(log.contains(&format!("{} from the cache, {removed} decoded", entries.len() - removed)), "{log}");
    assert!(log.contains(", 0 scored"), "scores all came from the shards: {log}");
    assert_eq!(tree_digest(&s.path("plain")), tree_digest(&s.path("merged")));
}
