//! The guide (docs/, an mdBook) and the README cannot go stale: every page is in the summary,
//! every relative link and anchor resolves, no internal issue numbers, and every key the spec
//! accepts is documented in the spec reference (the key lists come from the spec parser's own
//! "expected one of" errors, so a new key fails here until it is documented).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;

fn pages() -> Vec<PathBuf> {
    files_under(&docs_src()).into_iter().filter(|p| p.extension().is_some_and(|x| x == "md")).collect()
}

/// mdBook's anchor for a heading: lowercase, spaces to dashes, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    text.lines().filter(|l| l.starts_with('#')).map(|l| slug(l.trim_start_matches('#'))).collect()
}

fn check_links(file: &Path, problems: &mut Vec<String>) {
    let text = std::fs::read_to_string(file).unwrap();
    for link in links(&text) {
        if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
        let target = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
        if !target.exists() {
            problems.push(format!("{}: link {link} names a missing file", file.display()));
        } else if !anchor.is_empty() && target.is_file() && !anchors(&std::fs::read_to_string(&target).unwrap()).contains(anchor) {
            problems.push(format!("{}: link {link} names a missing heading", file.display()));
        }
    }
}

#[test]
fn every_page_is_in_the_summary_and_every_link_resolves() {
    let summary = std::fs::read_to_string(docs_src().join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary).iter().map(|l| docs_src().join(l)).collect();
    let mut problems = Vec::new();
    for page in pages() {
        if page.file_name().unwrap() != "SUMMARY.md" && !listed.contains(&page) {
            problems.push(format!("{} is not in SUMMARY.md", page.display()));
        }
        check_links(&page, &mut problems);
    }
    check_links(&repo().join("README.md"), &mut problems);
    check_links(&repo().join("CHANGELOG.md"), &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn user_docs_carry_no_internal_issue_numbers() {
    let pattern = regex::Regex::new(r"(?i)\bissues? #?\d+").unwrap();
    for file in pages().into_iter().chain([repo().join("README.md"), repo().join("CHANGELOG.md")]) {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!pattern.is_match(&text), "{}: {:?}", file.display(), pattern.find(&text).map(|m| m.as_str()));
    }
}

/// The keys a spec section accepts, from the parser's own error for an unknown one.
fn accepted_keys(yaml: &str) -> Vec<String> {
    let err = bpals_release::release_spec::parse_layer(Path::new("probe.yaml"), yaml).unwrap_err().to_string();
    let list = err.split("expected one of").nth(1).unwrap_or_else(|| panic!("no key list in: {err}"));
    let list = list.split('\n').next().unwrap();
    list.split(',').map(|k| k.trim().trim_matches('`').to_string()).filter(|k| !k.is_empty()).collect()
}

#[test]
fn every_spec_key_is_in_the_spec_reference() {
    let reference = std::fs::read_to_string(docs_src().join("reference/spec.md")).unwrap();
    let sections = accepted_keys("zz_unknown_section: 1\n");
    assert!(sections.len() >= 12, "{sections:?}");
    let mut undocumented = Vec::new();
    for section in sections.iter().filter(|s| *s != "extends") {
        let row = reference.lines().find(|l| l.starts_with(&format!("| `{section}` |")));
        let Some(row) = row else {
            undocumented.push(format!("section {section} has no row"));
            continue;
        };
        if section == "additions" {
            continue;
        }
        for key in accepted_keys(&format!("{section}:\n  zz_unknown_key: 1\n")) {
            // A nested section is documented by its keys: `trial.rows`.
            if !row.contains(&format!("`{key}`")) && !row.contains(&format!("`{key}.")) {
                undocumented.push(format!("{section}.{key}"));
            }
        }
    }
    assert!(undocumented.is_empty(), "keys the spec accepts but docs/src/reference/spec.md does not document: {undocumented:?}");
}
