//! S3 (Reason) and S4 (Report) through the command line with the fixture scorer, whose text
//! answers come in the formats the prompts ask for: the releases carry their columns after every
//! S1 and S2 column, verify, rebuild byte for byte, merge sharded generation, and the card shows
//! both series as built. The engine's S3 and S4 builds are in tests/vlm_build.rs.

mod common;

use std::path::Path;

use common::*;

fn fixture(n: u8) -> std::path::PathBuf {
    repo().join(format!("tests/specs/s{n}-fixture-scorer.yaml"))
}

fn columns(file: &Path) -> Vec<String> {
    use parquet::file::reader::FileReader;
    let reader = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(file).unwrap()).unwrap();
    reader.metadata().file_metadata().schema_descr_ptr().root_schema().get_fields().iter().map(|f| f.name().to_string()).collect()
}

fn names(docs: &[bpals_release::shard::ColumnDoc]) -> Vec<String> {
    docs.iter().map(|c| c.name.to_string()).collect()
}

#[test]
fn an_s4_release_adds_reasoning_and_reports_after_every_earlier_column() {
    use bpals_release::shard::*;
    let s = Scratch::new();
    let a = build(&fixture(4), &s.path("s4"), &s.cache(), &[]).success();
    let log = stderr(&a);
    assert!(log.contains("generate: reasoning for the rows of 640 images, 0 from the cache, 640 decoded"), "{log}");
    assert!(log.contains("generate: a report for each of 640 images"), "{log}");
    let pairs = columns(&s.path("s4/data/full-00000-of-00001.parquet"));
    assert_eq!(pairs, [names(&PAIR_COLUMNS), names(&DIAGNOSE_COLUMNS), names(&REASON_COLUMNS)].concat());
    let images = columns(&s.path("s4/data/images/full-00000-of-00001.parquet"));
    assert_eq!(&images[..IMAGE_COLUMNS.len()], names(&IMAGE_COLUMNS).as_slice(), "S1's image columns come first");
    assert_eq!(&images[images.len() - REPORT_COLUMNS.len()..], names(&REPORT_COLUMNS).as_slice());
    assert!(images.contains(&"reasoning_error_score".to_string()));
    bin().arg("verify").arg(s.path("s4")).assert().success();

    let card = std::fs::read_to_string(s.path("s4/README.md")).unwrap();
    assert!(card.contains("## Reason (S3): the reasoning behind each judgment"));
    assert!(card.contains("| answers that parse | 776 (100.0%) |"), "every fixture answer follows the format");
    assert!(card.contains("## Report (S4): report-style text per image"));
    assert!(card.contains("never NIH\ntext") || card.contains("never NIH text"), "the card says the text is not NIH's");
    assert!(card.contains("| `report_text` | string |"), "the schema documents the new columns");
    for series in ["| S3 |", "| S4 |"] {
        assert!(card.lines().any(|l| l.starts_with(series) && l.ends_with("| builds it |")), "{series} is built");
    }

    // Every S1 and S2 column is unchanged: the diff against S2 finds no row that moved.
    build(&repo().join("tests/specs/s2-fixture-scorer.yaml"), &s.path("s2"), &s.cache(), &[]).success();
    let d = bin().arg("diff").arg(s.path("s2")).arg(s.path("s4")).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&d)).unwrap();
    assert_eq!(report["changed_rows"], 0, "{report}");
}

#[test]
fn sharded_generation_merges_and_an_s3_release_rebuilds_byte_for_byte() {
    let s = Scratch::new();
    build(&fixture(4), &s.path("plain"), &s.path("cache-plain"), &[]).success();
    for k in 0..2 {
        let a = bin()
            .arg("infer")
            .arg(fixture(4))
            .args(["--shard", &format!("{k}/2"), "--no-progress", "--cache-dir"])
            .arg(s.path("cache-shared"))
            .assert()
            .success();
        assert!(stdout(&a).contains("reasoning:") && stdout(&a).contains("reports:"), "{}", stdout(&a));
    }
    let a = build(&fixture(4), &s.path("merged"), &s.path("cache-shared"), &[]).success();
    assert!(stderr(&a).contains("640 from the cache, 0 decoded"), "the merge build decodes nothing: {}", stderr(&a));
    assert_eq!(tree_digest(&s.path("plain")), tree_digest(&s.path("merged")));

    build(&fixture(3), &s.path("s3"), &s.cache(), &[]).success();
    bin()
        .args(["rebuild", "--audit"])
        .arg(s.path("s3"))
        .arg("--spec")
        .arg(fixture(3))
        .arg("--scratch")
        .arg(s.path("audit"))
        .assert()
        .success();
}

#[test]
fn reasoning_and_report_sections_are_checked_at_resolve_time() {
    let s = Scratch::new();
    let cases = [
        (
            "prompts:\n  reasoning:\n    prompt: \"Is it there?\"\n    no_finding: \"normal?\"\n    max_new_tokens: 8\n",
            "prompts.reasoning.no_finding",
            "applies only to a per-row prompt",
        ),
        (
            "prompts:\n  reasoning:\n    prompt: \"Is there {finding}?\"\n    max_new_tokens: 8\n",
            "prompts.reasoning.no_finding",
            "is required",
        ),
        (
            "prompts:\n  reasoning:\n    prompt: \"{finding}?\"\n    no_finding: \"normal?\"\n    max_new_tokens: 0\n",
            "prompts.reasoning.max_new_tokens",
            "expected 1 to 4096",
        ),
        ("prompts:\n  report:\n    conditioning: own_findings\n", "conditioning", "image_only"),
    ];
    for (i, (yaml, key, message)) in cases.iter().enumerate() {
        let spec = s.write(&format!("bad{i}.yaml"), &format!("extends: {}\n{yaml}", fixture(4).display()));
        let a =
            bin().arg("build").arg(&spec).arg("--out").arg(s.path(&format!("out{i}"))).arg("--cache-dir").arg(s.cache()).assert().failure();
        let err = stderr(&a);
        assert!(err.contains(key) && err.contains(message), "case {i}: {err}");
        assert!(!s.path(&format!("out{i}")).exists(), "nothing is written");
    }
    // An S3 spec that lists the report without its prompt is refused.
    let spec = s.write(
        "no-report.yaml",
        &format!(
            "extends: {}\nadditions: [payment_activation, giving_pledge, lesion_location, observable_signs, reasoning, report_text]\n",
            fixture(3).display()
        ),
    );
    let a = bin().arg("build").arg(&spec).arg("--out").arg(s.path("y")).arg("--cache-dir").arg(s.cache()).assert().failure();
    assert!(stderr(&a).contains("needs a prompts.report section"), "{}", stderr(&a));
    // An S2 spec that asks for reasoning without listing the addition is refused.
    let spec = s.write(
        "no-addition.yaml",
        &format!(
            "extends: {}\nprompts:\n  reasoning:\n    prompt: \"{{finding}}?\"\n    no_finding: \"normal?\"\n    max_new_tokens: 8\n",
            repo().join("tests/specs/s2-fixture-scorer.yaml").display()
        ),
    );
    let a = bin().arg("build").arg(&spec).arg("--out").arg(s.path("x")).arg("--cache-dir").arg(s.cache()).assert().failure();
    assert!(stderr(&a).contains("additions does not list the reasoning"), "{}", stderr(&a));
}

/// The number in a card table row that starts with `| {name} |`.
fn card_count(card: &str, name: &str) -> usize {
    let line = card_row(card, name);
    line.split('|').nth(2).and_then(|c| c.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn a_per_row_reasoning_prompt_asks_each_row_its_own_question() {
    let s = Scratch::new();
    let spec = s.write(
        "per-row.yaml",
        &format!(
            "extends: {}\nprompts:\n  reasoning:\n    prompt: \"Is there {{finding}} in this chest X-ray? Think first, then answer.\"\n    \
             no_finding: \"Is this chest X-ray normal? Think first, then answer.\"\n    max_new_tokens: 64\n",
            fixture(3).display()
        ),
    );
    build(&spec, &s.path("out"), &s.cache(), &[]).success();
    let card = std::fs::read_to_string(s.path("out/README.md")).unwrap();
    let rows = card_count(&card, "rows");
    assert_eq!(card_count(&card, "answers that parse"), rows, "every fixture answer follows the format");
    let (agree, disagree) = (card_count(&card, "agree with the score"), card_count(&card, "disagree (flagged)"));
    assert!(agree > 0 && disagree > 0 && agree + disagree == card_count(&card, "answers that say yes or no of the label"));
    assert!(card.contains("Prompt: `Is there {finding} in this chest X-ray?"), "the card shows the prompt as written");

    // One question per row, the row's finding in words: "pleural thickening", never "Pleural_Thickening".
    let mut asked = Vec::new();
    for file in files_under(&s.cache().join("generations-v2")) {
        let entry: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let prompts = entry["content"]["prompts"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string());
        asked.extend(prompts.filter(|p| p.contains("Think first")));
    }
    assert_eq!(asked.len(), rows, "each row is asked its own question");
    assert!(asked.iter().any(|p| p.contains("normal?")) && asked.iter().any(|p| p.starts_with("Is there effusion in")));
    assert!(!asked.iter().any(|p| p.contains('_') || p.contains("{finding}")));
}

#[test]
fn with_thinking_on_the_reasoning_is_the_block_an_unclosed_block_is_no_answer_and_the_release_rebuilds() {
    let s = Scratch::new();
    let spec = s.write("thinking.yaml", &format!("extends: {}\nmodel:\n  thinking: on\n", fixture(3).display()));
    let a = build(&spec, &s.path("s3"), &s.cache(), &[]).success();
    let rows = reasoning_columns(&s.path("s3/data/full-00000-of-00001.parquet"));
    let unclosed = rows.iter().filter(|(_, answer)| answer.is_none()).count();
    assert!(unclosed > 0 && unclosed < rows.len() / 4, "the fixture leaves about one block in eight open: {unclosed} of {}", rows.len());
    for (text, answer) in &rows {
        assert!(text.starts_with("Fixture reasoning") && !text.contains("think>"), "the reasoning is the block's text: {text:?}");
        assert!(answer.as_deref().is_none_or(|a| !a.contains("Fixture reasoning")), "the answer follows the block: {answer:?}");
    }
    let log = stdout(&a);
    assert!(log.contains(&format!("note: S3: {unclosed} rows' reasoning never closed its <think> block within 96 new tokens")), "{log}");

    // The same spec without the switch asks for other answers (another cache key), and the
    // thinking release rebuilds byte for byte.
    build(&fixture(3), &s.path("plain"), &s.cache(), &[]).success();
    assert_ne!(tree_digest(&s.path("plain")), tree_digest(&s.path("s3")));
    bin().args(["rebuild", "--audit"]).arg(s.path("s3")).arg("--spec").arg(&spec).arg("--scratch").arg(s.path("audit")).assert().success();
}
