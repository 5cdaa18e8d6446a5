//! The guide's command examples run, so they cannot go stale. Every ```console block in the
//! book (docs/src, in SUMMARY.md's order) is a shell session: a line starting `$ ` is a command
//! (a trailing `\` continues it on a line starting `> `), and the lines after it, up to the next command, are its
//! expected standard output, matched by snapbox's rules: `[..]` stands for the rest of a line's
//! text up to what follows it, a line `...` for any number of lines. Commands run in bash, in
//! one workspace laid out as a clone is: `specs/` and `fixtures/` of this checkout, with
//! `bpals-release` on the PATH and a score cache of its own. Each must exit 0; standard error
//! is shown only when something fails.
//!
//! The book's first session builds the demo release with the VLM engine, so this runs with the
//! `vlm` feature. Blocks that use `$NIH` need NIH's real metadata (`scripts/fetch-real-nih.sh`):
//! `scripts/test` points `BPALS_REAL_NIH` at it; without it they are skipped, except under CI,
//! where that is a failure.
#![cfg(feature = "vlm")]

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// A documented command: its line in the page, the command and its expected output.
struct Example {
    line: usize,
    command: String,
    expected: String,
}

/// The ```console blocks of a page, in order, each as its commands.
fn sessions(page: &Path) -> Vec<Vec<Example>> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        if line.trim() != "```console" {
            continue;
        }
        let mut session: Vec<Example> = Vec::new();
        let mut continuing = false;
        for (n, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            if let Some(command) = line.strip_prefix("$ ") {
                session.push(Example { line: n + 1, command: command.to_string(), expected: String::new() });
            } else if continuing {
                // A continued command's lines start with the shell's `> ` prompt.
                let line = line.strip_prefix("> ").unwrap_or(line);
                session.last_mut().unwrap().command.push_str(&format!("\n{line}"));
            } else if let Some(example) = session.last_mut() {
                example.expected.push_str(line);
                example.expected.push('\n');
            } else {
                panic!("{}:{}: a console block starts with a line that is not a `$ ` command", page.display(), n + 1);
            }
            continuing = line.ends_with('\\') && session.last().is_some_and(|e| e.expected.is_empty());
        }
        out.push(session);
    }
    out
}

/// The book's pages in SUMMARY.md's order.
fn book_pages() -> Vec<PathBuf> {
    let summary = std::fs::read_to_string(docs_src().join("SUMMARY.md")).unwrap();
    links(&summary).iter().map(|target| docs_src().join(target)).collect()
}

#[test]
fn every_console_example_in_the_guide_runs_as_shown() {
    let real_nih = std::env::var_os("BPALS_REAL_NIH").map(PathBuf::from);
    let s = Scratch::new();
    let workspace = s.path("clone");
    std::fs::create_dir_all(&workspace).unwrap();
    for folder in ["specs", "fixtures"] {
        std::os::unix::fs::symlink(repo().join(folder), workspace.join(folder)).unwrap();
    }
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_bpals-release")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let assert = snapbox::Assert::new();
    let mut ran = 0;
    let mut failures = Vec::new();
    for page in book_pages() {
        for session in sessions(&page) {
            let needs_nih = session.iter().any(|e| e.command.contains("$NIH"));
            if needs_nih && real_nih.is_none() {
                let place = format!("{}:{}", page.display(), session[0].line);
                assert!(std::env::var_os("CI").is_none(), "{place} needs BPALS_REAL_NIH, which CI sets");
                eprintln!("skipped (no BPALS_REAL_NIH): {place}");
                continue;
            }
            for Example { line, command, expected } in &session {
                let mut run = std::process::Command::new("bash");
                run.args(["-o", "pipefail", "-c", command])
                    .current_dir(&workspace)
                    .env("PATH", &path)
                    .env("BPALS_CACHE_DIR", s.path("cache"))
                    .env_remove("BPALS_NIH_ROOT")
                    .env_remove("BPALS_NIH_IMAGES");
                if let Some(nih) = &real_nih {
                    run.env("NIH", nih);
                }
                let output = run.output().unwrap();
                ran += 1;
                let place = format!("{}:{line} `{command}`", page.strip_prefix(repo()).unwrap().display());
                if !output.status.success() {
                    failures.push(format!("{place} exited {}:\n{}", output.status, String::from_utf8_lossy(&output.stderr)));
                    continue;
                }
                let actual = snapbox::Data::text(String::from_utf8_lossy(&output.stdout).into_owned());
                if let Err(e) = assert.try_eq(None, actual, snapbox::Data::text(expected.clone())) {
                    failures.push(format!("{place}: its output differs from the guide's:\n{e}"));
                }
            }
        }
    }
    assert!(ran >= 6, "only {ran} documented commands ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
