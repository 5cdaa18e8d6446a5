//! Helpers shared by the integration tests: run the binary in isolation and compare trees.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub mod limits;
use sha2::{Digest, Sha256};

/// insta filters that replace the scratch folder and the repository's path in a snapshot.
pub fn path_filters(scratch: &Scratch) -> [(String, &'static str); 2] {
    [(regex::escape(&scratch.path("").display().to_string()), "[SCRATCH]/"), (regex::escape(&repo().display().to_string()), "[REPO]")]
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The guide's sources (an mdBook).
pub fn docs_src() -> PathBuf {
    repo().join("docs/src")
}

/// `[text](target)` links in Markdown, outside code blocks.
pub fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

pub fn spec(name: &str) -> PathBuf {
    repo().join("specs").join(name)
}

/// S1a with the fixture scorer in place of the VLM engine: for tests of the stages around
/// inference, which need releases quickly (and build without libtorch).
pub fn fixture_s1a() -> PathBuf {
    repo().join("tests/specs/s1a-fixture-scorer.yaml")
}

/// S1b with the fixture scorer (see [`fixture_s1a`]).
pub fn fixture_s1b() -> PathBuf {
    repo().join("tests/specs/s1b-fixture-scorer.yaml")
}

/// The binary, with no environment that could point it at real data or a shared cache.
pub fn bin() -> Command {
    let mut cmd = Command::cargo_bin("bpals-release").expect("binary is built");
    cmd.env_remove("BPALS_NIH_ROOT").env_remove("BPALS_NIH_IMAGES").env_remove("BPALS_CACHE_DIR");
    cmd
}

/// A scratch folder with `out/` and `cache/` paths for one build.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch { dir: tempfile::tempdir().expect("temp dir") }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    pub fn cache(&self) -> PathBuf {
        self.path("cache")
    }
    /// Writes a file (creating folders) and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// `build SPEC --out OUT --cache-dir CACHE --no-progress` plus extra args.
pub fn build(spec: &Path, out: &Path, cache: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin().arg("build").arg(spec).arg("--out").arg(out).arg("--cache-dir").arg(cache).arg("--no-progress").args(extra).assert()
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// sha256 of every file under `dir`, by relative path.
pub fn tree_digest(dir: &Path) -> BTreeMap<String, String> {
    files_under(dir)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().replace('\\', "/");
            (rel, hex::encode(Sha256::digest(std::fs::read(&p).unwrap())))
        })
        .collect()
}

pub fn stderr(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

pub fn stdout(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stdout).into_owned()
}

/// The card table row that starts with `| {name} |`; a missing row fails the test by name.
pub fn card_row<'a>(card: &'a str, name: &str) -> &'a str {
    let start = format!("| {name} |");
    card.lines().find(|l| l.starts_with(&start)).unwrap_or_else(|| panic!("the card has no `{name}` row"))
}

/// Copies the embedded sample into the scratch folder so a test can damage it.
pub fn copy_sample(scratch: &Scratch) -> PathBuf {
    let dst = scratch.path("sample");
    copy_dir(&repo().join("fixtures/sample"), &dst);
    dst
}

fn copy_dir(src: &Path, dst: &Path) {
    for file in files_under(src) {
        let target = dst.join(file.strip_prefix(src).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&file, &target).unwrap();
    }
}

/// A spec in the scratch folder that extends [`fixture_s1a`] and overrides some YAML.
pub fn derived_spec(scratch: &Scratch, name: &str, extra_yaml: &str) -> PathBuf {
    let text = format!("extends: {}\n{extra_yaml}", fixture_s1a().display());
    scratch.write(name, &text)
}

/// Copies a release directory (files only, recursively).
pub fn copy_tree(from: &Path, to: &Path) {
    for (rel, _) in tree_digest(from) {
        let target = to.join(&rel);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(from.join(&rel), target).unwrap();
    }
}

/// S2 with the fixture scorer (see [`fixture_s1a`]).
pub fn fixture_s2() -> PathBuf {
    repo().join("tests/specs/s2-fixture-scorer.yaml")
}

/// `publish DIR --repo REPO --endpoint HUB --allow-demo --retries 0` with `token` set, against
/// a fake Hub at `endpoint`.
pub fn publish_to(endpoint: &str, token: &str, repo: &str, dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin()
        .env("HF_TOKEN", token)
        .env("HF_HOME", dir.parent().unwrap().join("hf-home"))
        .arg("publish")
        .arg(dir)
        .args(["--repo", repo, "--endpoint", endpoint, "--allow-demo", "--retries", "0"])
        .args(extra)
        .assert()
}

/// A logit pair as the score cache stores it.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct CachedYesNo {
    pub logit_yes: f32,
    pub logit_no: f32,
}

/// A score-cache entry as stored (`scores-v2`): the content sealed with its key's digest and its
/// own. Mirrors the tool's format so tests can write an entry the cache takes as genuine.
#[derive(serde::Serialize, serde::Deserialize)]
struct SealedScores {
    key: String,
    content_sha256: String,
    content: ScoreContent,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ScoreContent {
    image: String,
    image_sha256: String,
    question_ids: Vec<String>,
    scores: Vec<CachedYesNo>,
}

/// Rewrites every score-cache entry under `cache` through `edit`, resealed: what a scorer on
/// other hardware would have cached (the audit's drift), not a damaged entry.
pub fn reseal_score_entries(cache: &Path, edit: impl Fn(&mut Vec<CachedYesNo>)) {
    let entries = files_under(&cache.join("scores-v2")).into_iter().filter(|p| p.extension().is_some_and(|e| e == "json"));
    for entry in entries {
        let mut sealed: SealedScores = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
        edit(&mut sealed.content.scores);
        sealed.content_sha256 = hex::encode(Sha256::digest(serde_json::to_vec(&sealed.content).unwrap()));
        std::fs::write(&entry, serde_json::to_vec(&sealed).unwrap()).unwrap();
    }
}

/// Each row's `reasoning_text` and `reasoning_answer`, in row order.
pub fn reasoning_columns(shard: &Path) -> Vec<(String, Option<String>)> {
    use arrow_array::{Array, StringArray};
    let file = std::fs::File::open(shard).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let column = |name: &str| batch.column_by_name(name).unwrap().as_any().downcast_ref::<StringArray>().unwrap().clone();
        let (text, answer) = (column("reasoning_text"), column("reasoning_answer"));
        for i in 0..batch.num_rows() {
            rows.push((text.value(i).to_string(), (!answer.is_null(i)).then(|| answer.value(i).to_string())));
        }
    }
    rows
}
