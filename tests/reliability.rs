//! What the tool promises when it meets ordinary misuse and hostile or concurrent use (the
//! guide's "Reliability" page): it never deletes or overwrites a file it did not make, one build
//! at a time writes a release folder, `verify` reads regular files inside the release only, a
//! damaged cache entry is caught and computed again, and user-named files are read as regular
//! files under a size cap. Each test is named after what it protects.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

fn verify(dir: &Path) -> assert_cmd::assert::Assert {
    bin().arg("verify").arg(dir).timeout(Duration::from_secs(60)).assert()
}

/// A release of the fixture-scored demo in `s`, and its cache.
fn release(s: &Scratch, name: &str) -> PathBuf {
    let out = s.path(name);
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    out
}

fn hidden_siblings(dir: &Path) -> Vec<String> {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with(&format!(".{name}.")))
        .collect()
}

#[test]
fn out_never_replaces_a_folder_that_is_not_a_release() {
    let s = Scratch::new();
    let theirs = s.write("theirs/notes.txt", "a user's file");
    let err = stderr(&build(&fixture_s1a(), &s.path("theirs"), &s.cache(), &[]).failure());
    assert!(
        err.contains("--out")
            && err.contains("holds 1 file and no manifest.json: it is not a release this tool wrote")
            && err.contains("delete it yourself"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "a user's file");
    assert!(!s.cache().exists(), "refused before any work: nothing was scored");
}

#[test]
fn no_command_overwrites_a_file_or_folder_it_did_not_write() {
    let s = Scratch::new();
    let release = release(&s, "release");
    let theirs = s.write("mine/notes.txt", "a user's file");
    // bench replaces its --out folder: only one holding an earlier bench's shards.
    let a = bin()
        .args(["bench", "pipeline"])
        .arg(fixture_s1a())
        .arg("--data-entry")
        .arg(repo().join("fixtures/sample/Data_Entry_2017_v2020.csv"))
        .arg("--out")
        .arg(s.path("mine"))
        .assert()
        .failure();
    assert!(stderr(&a).contains("holds 1 file a bench did not write (such as notes.txt)"), "{}", stderr(&a));
    // One-file writers overwrite only what they wrote before.
    let gold = s.write("gold.csv", "image_index,label,value\n00000001_000.png,Effusion,1\n");
    let a = bin().arg("calibrate").arg(&release).arg("--gold").arg(&gold).arg("--out").arg(&theirs).assert().failure();
    assert!(stderr(&a).contains("exists and is not a calibration this tool wrote"), "{}", stderr(&a));
    let a = bin().args(["review", "plan"]).arg(&release).args(["--budget", "10"]).arg("--out").arg(&theirs).assert().failure();
    assert!(stderr(&a).contains("exists and is not a review plan this tool wrote"), "{}", stderr(&a));
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "a user's file");
    // ... and do overwrite their own.
    let plan = s.path("plan.json");
    for _ in 0..2 {
        bin().args(["review", "plan"]).arg(&release).args(["--budget", "10"]).arg("--out").arg(&plan).assert().success();
    }
}

#[test]
fn a_release_is_replaced_only_while_it_holds_nothing_but_its_files() {
    let s = Scratch::new();
    let out = release(&s, "out");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    std::fs::write(out.join("my-notes.md"), "mine").unwrap();
    let err = stderr(&build(&fixture_s1a(), &out, &s.cache(), &[]).failure());
    assert!(err.contains("files its manifest does not list: my-notes.md"), "{err}");
    assert_eq!(std::fs::read_to_string(out.join("my-notes.md")).unwrap(), "mine");
}

#[test]
fn out_may_not_overlap_the_source_root_the_cache_the_spec_or_the_current_folder() {
    let s = Scratch::new();
    let sample = copy_sample(&s);
    let spec = derived_spec(&s, "specs/own.yaml", &format!("source:\n  root: {}\n", sample.display()));
    std::fs::create_dir_all(s.cache()).unwrap();
    let cases = [
        (sample.clone(), "is the source root"),
        (sample.join("images/out"), "is inside the source root"),
        (s.cache(), "is the cache"),
        (s.path("specs"), "holds the spec"),
        (s.path("."), "holds the source root"),
    ];
    for (out, expected) in cases {
        let err = stderr(&build(&spec, &out, &s.cache(), &[]).failure());
        assert!(err.contains(expected), "--out {}: {err}", out.display());
    }
    let here = s.path("here");
    std::fs::create_dir_all(&here).unwrap();
    let a = bin().current_dir(&here).arg("build").arg(&spec).args(["--out", ".", "--no-progress", "--cache-dir"]).arg(s.cache()).assert();
    assert!(stderr(&a.failure()).contains("--out .: is or holds the current folder"));
    assert_eq!(files_under(&sample).len(), files_under(&repo().join("fixtures/sample")).len(), "the sample is untouched");
}

/// Many staggered pairs of builds into one folder: the second either waits its turn (it starts
/// after the first finished) or is refused naming the first's pid; the release left is always
/// byte-identical to a clean build's, and no staging folder or lock is left behind.
#[test]
fn two_builds_into_one_out_never_leave_a_release_that_differs_from_a_clean_build() {
    let s = Scratch::new();
    let clean = tree_digest(&release(&s, "clean"));
    let out = s.path("contended");
    let spawn = || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"))
            .arg("build")
            .arg(fixture_s1a())
            .arg("--out")
            .arg(&out)
            .arg("--cache-dir")
            .arg(s.cache())
            .args(["--no-progress", "--jobs", "1"])
            .env_remove("BPALS_NIH_ROOT")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (mut refused, mut both) = (0, 0);
    for stagger_ms in [0u64, 1, 2, 5, 10, 20, 40, 80, 120, 200, 300, 500] {
        let first = spawn();
        std::thread::sleep(Duration::from_millis(stagger_ms));
        let second = spawn();
        let outputs = [first.wait_with_output().unwrap(), second.wait_with_output().unwrap()];
        let ok = outputs.iter().filter(|o| o.status.success()).count();
        assert!(ok >= 1, "one of the two builds always finishes");
        for o in outputs.iter().filter(|o| !o.status.success()) {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("another bpals-release (pid"), "a build fails only because the other holds the folder: {err}");
        }
        refused += usize::from(ok == 1);
        both += usize::from(ok == 2);
        verify(&out).success();
        assert_eq!(tree_digest(&out), clean, "stagger {stagger_ms} ms: the release equals a clean build");
        assert_eq!(hidden_siblings(&out), Vec::<String>::new(), "no staging folder or lock is left");
    }
    eprintln!("{refused} pairs overlapped (one refused), {both} ran one after the other");
    assert!(refused > 0, "at least one pair overlapped, or the test proved nothing");
}

#[test]
fn verify_reads_only_regular_files_inside_the_release() {
    let s = Scratch::new();
    let original = release(&s, "original");
    let fresh = |name: &str| {
        let dir = s.path(name);
        copy_tree(&original, &dir);
        dir
    };
    // A link to a file outside the release, with that file's very bytes.
    let linked = fresh("linked");
    let outside = s.path("outside-LICENSE.md");
    std::fs::rename(linked.join("LICENSE.md"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, linked.join("LICENSE.md")).unwrap();
    let out = stdout(&verify(&linked).failure());
    assert!(out.contains("not a regular file: LICENSE.md is a symbolic link"), "{out}");
    // A FIFO and a link to /dev/zero: reported, never read (no hang).
    let special = fresh("special");
    std::fs::remove_file(special.join("LICENSE.md")).unwrap();
    mkfifo(&special.join("LICENSE.md"));
    std::fs::remove_file(special.join("README.md")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", special.join("README.md")).unwrap();
    let out = stdout(&verify(&special).failure());
    assert!(out.contains("LICENSE.md is a FIFO (named pipe)") && out.contains("README.md is a symbolic link"), "{out}");
    // The manifest itself as a link.
    let manifest_link = fresh("manifest-link");
    std::fs::rename(manifest_link.join("manifest.json"), s.path("manifest-elsewhere.json")).unwrap();
    std::os::unix::fs::symlink(s.path("manifest-elsewhere.json"), manifest_link.join("manifest.json")).unwrap();
    let err = stderr(&verify(&manifest_link).failure());
    assert!(err.contains("manifest.json") && err.contains("symbolic link, not a regular file"), "{err}");
    // A duplicate entry and a path out of the release.
    let listed = fresh("listed");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(listed.join("manifest.json")).unwrap()).unwrap();
    let files = manifest["files"].as_array_mut().unwrap();
    let count = files.len();
    let mut escape = files[0].clone();
    escape["path"] = "../outside-LICENSE.md".into();
    files.push(files[0].clone());
    files.push(escape);
    std::fs::write(listed.join("manifest.json"), serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let out = stdout(&verify(&listed).failure());
    assert!(
        out.contains("listed twice in the manifest") && out.contains("not a path inside the release: \"../outside-LICENSE.md\""),
        "{out}"
    );
    assert!(!out.contains(&format!("{} files", count + 1)), "a duplicate is not counted as a file: {out}");
}

#[test]
fn a_junk_signature_is_not_called_a_signature() {
    let s = Scratch::new();
    let out = release(&s, "out");
    std::fs::write(out.join("release.sig"), "not a signature").unwrap();
    let text = stdout(&verify(&out).failure());
    assert!(text.contains("FAILED: release.sig is not a Sigstore bundle") && !text.contains("the release is signed"), "{text}");
}

/// Every score-cache entry, as a faulty writer or an editor would leave it: valid JSON with
/// other scores.
fn edit_score_entries(cache: &Path) -> usize {
    let entries: Vec<PathBuf> =
        files_under(&cache.join("scores-v2")).into_iter().filter(|p| p.extension().is_some_and(|e| e == "json")).collect();
    for entry in &entries {
        let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(entry).unwrap()).unwrap();
        let first = &mut json["content"]["scores"][0]["logit_yes"];
        *first = serde_json::json!(first.as_f64().unwrap() + 3.0);
        std::fs::write(entry, serde_json::to_vec(&json).unwrap()).unwrap();
    }
    entries.len()
}

#[test]
fn an_edited_cache_entry_is_caught_set_aside_and_the_release_equals_a_clean_build() {
    let s = Scratch::new();
    let clean = tree_digest(&release(&s, "clean"));
    let edited = edit_score_entries(&s.cache());
    assert!(edited > 0);
    let out = s.path("again");
    let err = stderr(&build(&fixture_s1a(), &out, &s.cache(), &[]).success());
    assert_eq!(err.matches("failed its check").count(), edited, "each edited entry is reported: {err}");
    assert!(
        err.contains("set aside and computed again") && err.contains(&format!("infer: 0 images from the cache, {edited} scored")),
        "{err}"
    );
    assert_eq!(tree_digest(&out), clean, "the release equals a clean build's, byte for byte");
    assert_eq!(files_under(&s.cache().join("scores-v2/set-aside")).len(), edited, "kept for a look");
    // The recomputed entries are good again.
    let err = stderr(&build(&fixture_s1a(), &s.path("third"), &s.cache(), &[]).success());
    assert!(!err.contains("failed its check") && err.contains(&format!("infer: {edited} images from the cache")), "{err}");
}

#[test]
fn special_and_oversized_spec_files_are_refused_without_blocking() {
    let s = Scratch::new();
    let run = |spec: &Path| stderr(&bin().arg("build").arg(spec).arg("--dry-run").timeout(Duration::from_secs(60)).assert().failure());
    // `extends` naming a FIFO, and a link to /dev/zero named like a spec.
    mkfifo(&s.path("pipe.yaml"));
    let err = run(&s.write("fifo-parent.yaml", "extends: pipe.yaml\n"));
    assert!(err.contains("pipe.yaml") && err.contains("FIFO (named pipe), not a regular file"), "{err}");
    std::os::unix::fs::symlink("/dev/zero", s.path("zero.yaml")).unwrap();
    let err = run(&s.write("zero-parent.yaml", "extends: zero.yaml\n"));
    assert!(err.contains("is a device, not a regular file"), "{err}");
    // A file that is not a spec is not parsed, so its lines are never printed.
    let err = run(&s.write("passwd.yaml", "extends: /etc/passwd\n"));
    assert!(err.contains("key `extends`") && err.contains("is not a spec file") && !err.contains("root:"), "{err}");
    // A 50 MB spec is refused by its size.
    let big = s.path("big.yaml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(50 << 20))).unwrap();
    let err = run(&big);
    assert!(err.contains("over the limit of 1048576 bytes for a spec file"), "{err}");
}

#[test]
fn a_fifo_beside_the_root_spec_does_not_block_the_roadmap() {
    let s = Scratch::new();
    // A root spec of the scratch folder's own (the roadmap scans the root spec's folder).
    // A copy of specs/s1a.yaml whose relative paths point back into the repository.
    let specs = repo().join("specs");
    let own = std::fs::read_to_string(specs.join("s1a.yaml"))
        .unwrap()
        .replace("${BPALS_NIH_ROOT:-../fixtures/sample}", &repo().join("fixtures/sample").display().to_string())
        .replace("images: curated/", &format!("images: {}/curated/", specs.display()))
        .replace("path: ../fixtures/", &format!("path: {}/fixtures/", repo().display()))
        .replace("templates: ../templates", &format!("templates: {}/templates", repo().display()));
    s.write("specs/s1a.yaml", &own);
    let child = s.write(
        "specs/child.yaml",
        "extends: s1a.yaml\nmodel:\n  backend: fixture\n  id: bpals/fixture-scorer\n  revision: v1\n  weight_license: none\n",
    );
    mkfifo(&s.path("specs/zz.yaml"));
    let a = bin()
        .arg("build")
        .arg(&child)
        .arg("--out")
        .arg(s.path("out"))
        .arg("--cache-dir")
        .arg(s.cache())
        .arg("--no-progress")
        .timeout(Duration::from_secs(120))
        .assert();
    let a = a.success();
    assert!(!stderr(&a).contains("zz.yaml"), "a FIFO is not a spec: skipped without a word");
}

#[test]
fn spec_values_are_checked_where_they_are_set() {
    let s = Scratch::new();
    let err = |name: &str, yaml: &str| stderr(&build(&derived_spec(&s, name, yaml), &s.path("out"), &s.cache(), &[]).failure());
    let e = err("date.yaml", "release:\n  date: 2026-02-30\n");
    assert!(e.contains("date.yaml:3: key `release.date`") && e.contains("expected a date"), "{e}");
    let e = err("trial.yaml", "selection:\n  trial:\n    rows: 0\n");
    assert!(e.contains("trial.yaml:4: key `selection.trial.rows`: must be at least 1"), "{e}");
    let e = err("groups.yaml", "output:\n  row_group_rows: 0\n");
    assert!(e.contains("groups.yaml:3: key `output.row_group_rows`: must be at least 1"), "{e}");
    assert!(!s.path("out").exists());
}
