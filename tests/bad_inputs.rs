//! Bad input gets a clear error naming the file, the line or key, and what was expected, with
//! each cause said once; and no bad input ever leaves a release directory behind. Every error is
//! snapshotted (tests/snapshots/bad_inputs__*.snap), so a change to what a user reads shows in
//! review.

mod common;

use common::*;

/// Fails if a cause appears twice in the `error:` line (as when an error's message repeats its
/// source: "...: No such file or directory (os error 2): No such file or directory (os error
/// 2)"), then snapshots the whole stderr as `name`, the scratch and repository paths filtered.
fn checked(s: &Scratch, name: &str, stderr: String) -> String {
    let line = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no `error:` line in {stderr}"));
    let causes: Vec<&str> = line.trim_start_matches("error: ").split(": ").map(str::trim).collect();
    for (i, cause) in causes.iter().enumerate() {
        assert!(!causes[i + 1..].contains(cause), "the cause {cause:?} is said more than once: {line}");
    }
    let mut settings = insta::Settings::clone_current();
    for (pattern, replacement) in path_filters(s) {
        settings.add_filter(&pattern, replacement);
    }
    settings.bind(|| insta::assert_snapshot!(name, stderr));
    stderr
}

/// Runs a build that must fail; returns stderr (checked) and checks no release appeared.
fn failing_build(s: &Scratch, spec: &std::path::Path) -> String {
    let out = s.path("out");
    let a = build(spec, &out, &s.cache(), &[]).failure();
    assert!(!out.exists(), "a failed build leaves no release directory");
    let leftovers: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".out"))
        .collect();
    assert!(leftovers.is_empty(), "no staging directory is left: {leftovers:?}");
    let name = spec.file_stem().unwrap().to_string_lossy().replace('.', "_");
    checked(s, &format!("build_{name}"), stderr(&a))
}

#[test]
fn malformed_yaml_names_file_and_line() {
    let s = Scratch::new();
    let spec = s.write("bad.yaml", "release:\n  id: s1a\n  title: [unclosed\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("bad.yaml"), "{err}");
    assert!(err.contains("line 3") || err.contains(":3:") || err.contains("3 |"), "{err}");
}

#[test]
fn unknown_keys_are_errors_with_a_position() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "typo.yaml", "signal:\n  tau: 3.0\n  trusted_min_agreemnt: 0.8\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("typo.yaml"), "{err}");
    assert!(err.contains("trusted_min_agreemnt"), "{err}");
    assert!(err.contains("unknown field"), "{err}");
    assert!(err.contains("4"), "line of the key: {err}");
}

#[test]
fn wrong_types_and_bad_values_name_the_key() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "types.yaml", "selection:\n  curated_images: many\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("types.yaml") && err.contains("curated_images"), "{err}");

    let spec = derived_spec(&s, "tier.yaml", "release:\n  tier: platinum\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("platinum") && err.contains("tier.yaml"), "{err}");

    let spec = derived_spec(&s, "date.yaml", "release:\n  date: 26/05/2026\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("date.yaml:3: key `release.date`"), "{err}");
    assert!(err.contains("YYYY-MM-DD"), "{err}");

    let spec = derived_spec(&s, "thresholds.yaml", "signal:\n  review_min_agreement: 0.9\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("trusted_min_agreement > review_min_agreement"), "{err}");

    let spec = derived_spec(&s, "prob.yaml", "signal:\n  hard_case_margin: 1.5\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("prob.yaml:3: key `signal.hard_case_margin`"), "{err}");
}

#[test]
fn missing_keys_name_the_chain() {
    let s = Scratch::new();
    let spec = s.write("lonely.yaml", "release:\n  id: x\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("release.name") && err.contains("required"), "{err}");
}

#[test]
fn extends_cycles_are_reported() {
    let s = Scratch::new();
    s.write("a.yaml", "extends: b.yaml\n");
    let a = s.path("a.yaml");
    s.write("b.yaml", "extends: a.yaml\n");
    let err = failing_build(&s, &a);
    assert!(err.contains("cycle"), "{err}");
}

#[test]
fn paths_must_stay_inside_their_roots() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "escape.yaml", "source:\n  data_entry: ../../etc/passwd\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("source.data_entry") && err.contains("inside its root"), "{err}");
}

#[test]
fn unset_variables_without_default_are_errors() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "var.yaml", "source:\n  root: ${BPALS_TEST_SURELY_UNSET}\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("BPALS_TEST_SURELY_UNSET is not set"), "{err}");
}

#[test]
fn gates_refuse_before_any_work() {
    let s = Scratch::new();
    // A non-commercial model cannot back a commercial tier.
    let spec = derived_spec(&s, "nc.yaml", "release:\n  tier: standard\nmodel:\n  backend: fixture\n  weight_license: qwen-research\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("tier-license") && err.contains("qwen-research"), "{err}");
    // A publishable build refuses the sample and the fixture scorer.
    let out = s.path("pub");
    let a = build(&fixture_s1a(), &out, &s.cache(), &["--publishable"]).failure();
    let err = checked(&s, "build_publishable", stderr(&a));
    assert!(err.contains("embedded synthetic sample") && err.contains("fixture scorer"), "{err}");
    assert!(!s.cache().exists(), "nothing was scored");
}

#[test]
fn a_qwen2vl_model_that_is_not_on_this_machine_is_refused_offline() {
    let s = Scratch::new();
    let spec = derived_spec(
        &s,
        "vlm.yaml",
        "model:\n  backend: qwen2vl\n  id: Qwen/Qwen2-VL-2B-Instruct\n  revision: main\n  weight_license: apache-2.0\n",
    );
    // Offline (HF_HUB_OFFLINE) with an empty Hugging Face cache: refused, naming the way out.
    let out = s.path("out");
    let a = bin()
        .env("HF_HUB_CACHE", s.path("empty-hf-cache"))
        .env("HF_HUB_OFFLINE", "1")
        .arg("build")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .arg("--cache-dir")
        .arg(s.cache())
        .assert()
        .failure();
    let err = stderr(&a);
    if cfg!(feature = "vlm") {
        checked(&s, "build_offline_model", err.clone());
        assert!(err.contains("Qwen/Qwen2-VL-2B-Instruct@main is not in the Hugging Face cache") && err.contains("offline"), "{err}");
        assert!(err.contains("hf download Qwen/Qwen2-VL-2B-Instruct --revision main"), "{err}");
    } else {
        assert!(err.contains("without the `vlm` feature") && err.contains("scripts/bpals-release"), "{err}");
    }
    assert!(!out.exists());
    let spec = derived_spec(
        &s,
        "vlm2.yaml",
        "model:\n  backend: qwen2vl\n  path: no-such-model\n  id: x/y\n  revision: v1\n  weight_license: apache-2.0\n",
    );
    let err = failing_build(&s, &spec);
    assert!(err.contains("key `model.path`") && err.contains("no-such-model is not a directory"), "{err}");
}

#[test]
fn wrong_input_checksums_are_errors() {
    let s = Scratch::new();
    let sample = copy_sample(&s);
    let marker = sample.join("sample.json");
    let text = std::fs::read_to_string(&marker).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["sha256"]["BBox_List_2017.csv"] = serde_json::Value::from("0".repeat(64));
    std::fs::write(&marker, serde_json::to_string(&v).unwrap()).unwrap();
    let spec = derived_spec(&s, "sum.yaml", &format!("source:\n  root: {}\n", sample.display()));
    let err = failing_build(&s, &spec);
    assert!(err.contains("BBox_List_2017.csv") && err.contains("sha256 mismatch"), "{err}");
    // A marker that is not JSON names the key that points at it, the file and the parse error.
    std::fs::write(&marker, "{\"embedded_sample\": tru").unwrap();
    let spec = derived_spec(&s, "marker.yaml", &format!("source:\n  root: {}\n", sample.display()));
    let err = failing_build(&s, &spec);
    assert!(err.contains("key `source.root`") && err.contains("sample.json is not a sample marker: EOF while parsing"), "{err}");
}

#[test]
fn bad_metadata_rows_name_the_line() {
    let s = Scratch::new();
    let sample = copy_sample(&s);
    let path = sample.join("Data_Entry_2017_v2020.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut fields: Vec<String> = lines[10].split(',').map(String::from).collect();
    fields[1] = "Infiltrate".into(); // BBox_List's spelling: not valid in the data entry file
    lines[10] = fields.join(",");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    // The sample pins its own hashes: drop the marker to reach the parser.
    std::fs::remove_file(sample.join("sample.json")).unwrap();
    let spec = derived_spec(&s, "rows.yaml", &format!("source:\n  root: {}\n", sample.display()));
    let err = failing_build(&s, &spec);
    assert!(err.contains("Data_Entry_2017_v2020.csv:11:"), "{err}");
    assert!(err.contains("unknown finding label \"Infiltrate\""), "{err}");
}

#[test]
fn truncated_and_missing_images_are_named() {
    let s = Scratch::new();
    let sample = copy_sample(&s);
    let victim = sample.join("images/00000001_000.png");
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();
    let spec = derived_spec(&s, "png.yaml", &format!("source:\n  root: {}\n", sample.display()));
    let err = failing_build(&s, &spec);
    assert!(err.contains("00000001_000.png") && err.contains("not a readable PNG"), "{err}");

    std::fs::remove_file(&victim).unwrap();
    let spec = derived_spec(&s, "png-missing.yaml", &format!("source:\n  root: {}\n", sample.display()));
    let err = failing_build(&s, &spec);
    assert!(err.contains("00000001_000.png") && err.contains("cannot read"), "{err}");
}

#[test]
fn corrupt_cache_entries_are_recomputed_not_trusted() {
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("ref"), &s.cache(), &[]).success();
    // Garble every cache entry.
    let entries = files_under(&s.cache());
    for entry in &entries {
        std::fs::write(entry, b"{not json").unwrap();
    }
    let garbled = entries.len();
    assert!(garbled > 0);
    let a = build(&fixture_s1a(), &s.path("again"), &s.cache(), &[]).success();
    assert!(stderr(&a).contains("infer: 0 images from the cache"), "{}", stderr(&a));
    assert_eq!(tree_digest(&s.path("ref")), tree_digest(&s.path("again")));
}

/// A link planted at the lock file beside `build --out` (to a file the build must not touch):
/// the build is refused before any work, naming the lock, and the linked file keeps its bytes.
/// The lock used to be opened through the link and truncated to the builder's pid.
#[test]
fn a_link_at_the_out_folders_lock_is_refused_and_followed_nowhere() {
    let s = Scratch::new();
    let canary = s.write("canary.txt", "not the tool's\n");
    std::os::unix::fs::symlink(&canary, s.path(".release.lock")).unwrap();
    let a = build(&fixture_s1a(), &s.path("release"), &s.cache(), &[]).failure();
    let err = stderr(&a);
    assert!(err.contains(".release.lock is a symbolic link") && err.contains("remove it yourself"), "{err}");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "not the tool's\n");
    assert!(!s.path("release").exists());
}

#[test]
fn verify_rejects_a_folder_without_a_manifest() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("empty")).unwrap();
    let a = bin().arg("verify").arg(s.path("empty")).assert().failure();
    let err = checked(&s, "verify_no_manifest", stderr(&a));
    assert!(err.contains("manifest.json"), "{err}");
    s.write("broken/manifest.json", "{\"format\": 1");
    let a = bin().arg("verify").arg(s.path("broken")).assert().failure();
    let err = checked(&s, "verify_broken_manifest", stderr(&a));
    assert!(err.contains("not a valid manifest"), "{err}");
}

/// The commands that read files a user names, each given a missing or broken one: the error
/// names the file and says each cause once.
#[test]
fn every_command_names_the_file_it_could_not_use() {
    let s = Scratch::new();
    let release = s.path("release");
    build(&fixture_s1a(), &release, &s.cache(), &[]).success();
    let fails = |args: &[&std::ffi::OsStr]| {
        let name: Vec<String> = args.iter().take(2).map(|a| a.to_string_lossy().rsplit('/').next().unwrap().to_string()).collect();
        let name = format!("{}_{}", name.join("_"), args.len()).replace(['.', ' '], "_");
        checked(&s, &name, stderr(&bin().args(args).assert().failure()))
    };
    let os = |t: &str| std::ffi::OsString::from(t);
    let missing = s.path("missing");
    let (release, missing) = (release.as_os_str().to_owned(), missing.as_os_str().to_owned());

    let err = fails(&[&os("eval"), &release, &os("--gold"), &os("/nonexistent.csv")]);
    assert!(err.contains("cannot read gold file /nonexistent.csv: No such file"), "{err}");
    let gold = s.write("gold.csv", "image_index,label,value\n00000001_000.png,Effusion,1\n");
    let err = fails(&[&os("eval"), &missing, &os("--gold"), gold.as_os_str()]);
    assert!(err.contains("cannot read") && err.contains("manifest.json"), "{err}");
    let broken = s.write("calibration.json", "{\"format\": \"bpals-calibration/1\"");
    let err = fails(&[&os("eval"), &release, &os("--gold"), gold.as_os_str(), &os("--calibration"), broken.as_os_str()]);
    assert!(err.contains("calibration.json is not a calibration file"), "{err}");
    let out = s.path("calibration-out.json");
    let err = fails(&[&os("calibrate"), &missing, &os("--gold"), gold.as_os_str(), &os("--out"), out.as_os_str()]);
    assert!(err.contains("manifest.json"), "{err}");
    let err = fails(&[&os("diff"), &release, &missing]);
    assert!(err.contains("missing/manifest.json"), "{err}");
    let err = fails(&[&os("rebuild"), &missing, &os("--audit")]);
    assert!(err.contains("missing/build.lock"), "{err}");
    let err = fails(&[&os("publish"), &missing, &os("--dry-run")]);
    assert!(err.contains("missing/manifest.json"), "{err}");
    let err = fails(&[&os("source"), &os("--data-entry"), &missing]);
    assert!(err.contains("cannot read") && err.contains("missing"), "{err}");
    let err = fails(&[&os("verify"), &os("--remote"), &os("not a repo")]);
    assert!(err.contains("\"not a repo\" is not a repo id"), "{err}");

    // A spec that names a calibration file or a gold file that is not there points at its key.
    let spec = derived_spec(&s, "calibrated.yaml", "signal:\n  calibration: nowhere.json\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("calibrated.yaml:3: key `signal.calibration`") && err.contains("nowhere.json"), "{err}");
    let spec = derived_spec(&s, "judged.yaml", "evaluation:\n  gold: nowhere.csv\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("judged.yaml:3: key `evaluation.gold`") && err.contains("nowhere.csv"), "{err}");
    let spec = derived_spec(&s, "badcal.yaml", "signal:\n  calibration: calibration.json\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("key `signal.calibration`") && err.contains("is not a calibration file"), "{err}");
}

/// S2's prompt sections are checked at resolve: each error names the file, the key and what was
/// expected, and an addition without its section (or the reverse) is refused.
#[test]
fn s2_prompt_sections_name_the_key_at_fault() {
    let s = Scratch::new();
    let s2 = |name: &str, yaml: &str| s.write(name, &format!("extends: {}\n{yaml}", fixture_s2().display()));
    let cases = [
        ("s2_unknown_finding.yaml", "prompts:\n  location:\n    findings: {Nodul: nodule}\n", "unknown finding \"Nodul\""),
        ("s2_no_placeholder.yaml", "prompts:\n  signs:\n    question: Is there a sign?\n    vocabulary: {Nodule: [a round opacity]}\n", "no {sign} placeholder"),
        ("s2_unknown_family.yaml", "prompts:\n  location:\n    findings: {Nodule: nodule}\n    side: \"{finding} {side}\"\n    zone: \"{finding} {zone}\"\n    ground: {llava: \"Find the {finding}.\"}\n", "unknown model family \"llava\""),
        ("s2_bad_bounds.yaml", "prompts:\n  location:\n    findings: {Nodule: nodule}\n    side: \"{finding} {side}\"\n    zone: \"{finding} {zone}\"\n    ground: {qwen2_vl: \"Find the {finding}.\"}\n    zone_bounds: [0.6, 0.3]\n", "expected two fractions"),
    ];
    for (name, yaml, expected) in cases {
        let err = failing_build(&s, &s2(name, yaml));
        assert!(err.contains(name) && err.contains(expected), "{name}: {err}");
    }
    // An addition without its section, and a section without its addition.
    let bare = s.write("s2_no_section.yaml", &format!("extends: {}\nadditions: [lesion_location]\n", fixture_s1b().display()));
    let err = failing_build(&s, &bare);
    assert!(err.contains("lesion location (S2) needs a prompts.location section"), "{err}");
    let stray = derived_spec(
        &s,
        "s2_stray_location.yaml",
        "prompts:\n  signs:\n    question: \"Is there {sign}?\"\n    vocabulary: {Nodule: [a round opacity]}\n",
    );
    let err = failing_build(&s, &stray);
    assert!(err.contains("prompts.signs") && err.contains("additions does not list observable signs"), "{err}");
}

#[test]
fn a_curated_list_that_is_wrong_is_named_with_what_was_expected() {
    let s = Scratch::new();
    // The sample without its marker reads as a real source: the spec's list applies.
    let sample = copy_sample(&s);
    std::fs::remove_file(sample.join("sample.json")).unwrap();
    let names: Vec<String> = std::fs::read_to_string(sample.join("Data_Entry_2017_v2020.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .take(5)
        .map(|l| l.split(',').next().unwrap().to_string())
        .collect();
    let case = |name: &str, list: &str, pin: Option<&str>, curated: usize| {
        let list_path = s.write(&format!("{name}.txt"), list);
        let pin = pin.map_or_else(|| bpals_release::hashing::sha256_file(&list_path).unwrap().0, str::to_string);
        let yaml = format!(
            "source:\n  root: {}\nselection:\n  images: {}\n  images_sha256: {pin}\n  curated_images: {curated}\n",
            sample.display(),
            list_path.display()
        );
        failing_build(&s, &derived_spec(&s, &format!("{name}.yaml"), &yaml))
    };
    let good = format!("# a list\n{}\n", names.join("\n"));
    let err = case("list_pin", &good, Some(&"0".repeat(64)), 5);
    assert!(err.contains("key `selection.images`") && err.contains("sha256 mismatch: selection.images_sha256 pins 0000"), "{err}");
    let err = case("list_size", &good, None, 4);
    assert!(err.contains("the curated list (selection.images) has 5 images but selection.curated_images says 4"), "{err}");
    let err = case("list_unknown", &format!("{good}99999999_000.png\n"), None, 6);
    assert!(err.contains("the curated list (selection.images) names 99999999_000.png, which is not in the data entry file"), "{err}");
    let err = case("list_twice", &format!("{good}{}\n", names[0]), None, 6);
    assert!(err.contains("line 7") && err.contains("is already on line 2"), "{err}");
    let err = case("list_garbage", "not an image\n", None, 1);
    assert!(err.contains("line 1: \"not an image\" is not an NIH image name"), "{err}");
}

/// A spec's words reach the card as text: a bidirectional override is refused when the spec is
/// read (it shows one title and stores another), and HTML or a `javascript:` link in a title
/// or a question is written so that it renders as the characters it is.
#[test]
fn spec_text_cannot_put_html_links_or_reordered_text_into_the_card() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "bidi.yaml", "release:\n  title: \"Trial release \u{202E}txet desrever\"\n");
    let err = failing_build(&s, &spec);
    assert!(err.contains("key `release.title`") && err.contains("U+202E") && err.contains("bidirectional"), "{err}");

    let hostile = "<script>alert(1)</script> [docs](javascript:alert(1)) <img src=x onerror=alert(1)>";
    let spec = derived_spec(&s, "html.yaml", &format!("release:\n  title: \"{hostile}\"\n"));
    let out = s.path("html");
    build(&spec, &out, &s.cache(), &[]).success();
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    let body = card.split("\n---\n").nth(1).unwrap();
    assert!(!body.contains("<script>") && !body.contains("<img") && !body.contains("](javascript:"), "{}", &body[..400]);
    assert!(
        body.contains("# &lt;script>alert(1)&lt;/script> [docs]\\(javascript:alert(1)) &lt;img src=x onerror=alert(1)>"),
        "{}",
        &body[..400]
    );
}
