//! Releases built by the native engine on the embedded sample: on part of it with the tiny
//! random-weight model (it says so, it is deterministic, its shipped logits are the engine's),
//! and on all of it with the tiny trained model of the README's first command, which finds the
//! sample's planted label errors.
#![cfg(feature = "vlm")]

mod common;

use common::*;

fn vlm_spec(s: &Scratch) -> std::path::PathBuf {
    let model = repo().join("fixtures/vlm/qwen2_vl");
    derived_spec(
        s,
        "vlm.yaml",
        &format!(
            "selection:\n  curated_images: 24\n  expected_rows: 33\nmodel:\n  backend: qwen2vl\n  path: {}\n  id: bpals/tiny-qwen2-vl\n  revision: fixture-v1\n  weight_license: apache-2.0\n  demo_weights: random\n",
            model.display()
        ),
    )
}

#[test]
fn the_engine_builds_a_labelled_deterministic_release() {
    let s = Scratch::new();
    let spec = vlm_spec(&s);
    let one = s.path("one");
    let a = build(&spec, &one, &s.path("cache-1"), &["--jobs", "1"]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("DEMO BUILD") && text.contains("random weights"), "{text}");
    assert!(text.contains("scored by the qwen2vl engine"), "{text}");
    let two = s.path("two");
    build(&spec, &two, &s.path("cache-2"), &["--jobs", "2"]).success();
    assert_eq!(tree_digest(&one), tree_digest(&two), "the engine's scores do not depend on --jobs");
    bin().arg("verify").arg(&one).assert().success();

    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(one.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock["scorer"]["backend"], "qwen2vl");
    assert_eq!(lock["scorer"]["weights_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(lock["scorer"]["preprocessing"]["dtype"], "Float");

    // The logits in the shard are what `probe` gives for the same image and question (within
    // 1e-5: the build scores 48 questions in one batch, probe one).
    let (_, rows) = bpals_release::eval::read_release_rows(&one).unwrap();
    let row = &rows[0];
    let spec_text: serde_json::Value = lock["spec"].clone();
    let question = spec_text["prompts"]["labels"][&row.label][0].as_str().unwrap().to_string();
    let image = repo().join("fixtures/sample/images").join(&row.image_index);
    let a = bin()
        .args(["probe", "--model", repo().join("fixtures/vlm/qwen2_vl").to_str().unwrap(), "--question", &question, "--image"])
        .arg(&image)
        .assert()
        .success();
    let probe: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let close = |key: &str, shipped: f32| (probe["questions"][0][key].as_f64().unwrap() - f64::from(shipped)).abs() <= 1e-5;
    assert!(close("logit_yes", row.logit_yes[0]) && close("logit_no", row.logit_no[0]), "{}: {probe}", row.image_index);

    // An auditor's rebuild reruns the engine and gets every byte back.
    let a = bin().args(["rebuild", "--audit", "--spec"]).arg(&spec).arg(&one).arg("--scratch").arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("PASS: every file is identical, byte for byte"), "{}", stdout(&a));
}

/// A Qwen3-VL checkpoint in the published layout (two shards and an index) under the family-
/// neutral backend name: the release verifies, audits byte for byte, and its lock names the
/// family and the backend.
#[test]
fn a_qwen3_vl_release_builds_verifies_and_audits() {
    let s = Scratch::new();
    let model = repo().join("fixtures/vlm/qwen3_vl");
    let spec = derived_spec(
        &s,
        "qwen3.yaml",
        &format!(
            "selection:\n  curated_images: 12\n  expected_rows: 15\nmodel:\n  backend: native\n  path: {}\n  id: bpals/tiny-qwen3-vl\n  revision: fixture-v1\n  weight_license: apache-2.0\n  demo_weights: random\n",
            model.display()
        ),
    );
    let out = s.path("qwen3");
    let a = build(&spec, &out, &s.cache(), &["--jobs", "2"]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("scored by the native engine") && text.contains("DEMO BUILD"), "{text}");
    bin().arg("verify").arg(&out).assert().success();
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock["scorer"]["backend"], "native");
    assert_eq!(lock["scorer"]["preprocessing"]["family"], "qwen3_vl");
    assert_eq!(lock["scorer"]["preprocessing"]["patch_size"], 16);
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.contains("(native backend, **random weights, no medical information**)"), "{card}");
    let a = bin().args(["rebuild", "--audit", "--spec"]).arg(&spec).arg(&out).arg("--scratch").arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("PASS: every file is identical, byte for byte"), "{}", stdout(&a));
}

/// Three images a pass (DeepStack's features stacked per image): the whole build, two sharded
/// `infer` runs and a build at `--jobs 1` give the same bytes; the lock records the pass, an
/// auditor's rebuild repeats it from the lock, and one image a pass is another scorer whose
/// scores differ from these in the last bits only.
#[test]
fn images_scored_three_a_pass_are_the_same_bytes_however_the_passes_fall() {
    let s = Scratch::new();
    let model = repo().join("fixtures/vlm/qwen3_vl");
    let spec = derived_spec(
        &s,
        "passes.yaml",
        &format!(
            "selection:\n  curated_images: 10\n  expected_rows: 13\nmodel:\n  backend: native\n  path: {}\n  id: bpals/tiny-qwen3-vl\n  revision: fixture-v1\n  weight_license: apache-2.0\n  demo_weights: random\n  images_per_pass: 3\n",
            model.display()
        ),
    );
    let whole = s.path("whole");
    build(&spec, &whole, &s.path("cache-whole"), &["--jobs", "2"]).success();
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(whole.join("build.lock")).unwrap()).unwrap();
    assert_eq!(
        lock["scorer"]["preprocessing"]["scoring"],
        serde_json::json!({"prefix": "shared", "images_per_pass": 3, "arithmetic": "cpu-2"})
    );
    let single = s.path("single");
    build(&spec, &single, &s.path("cache-single"), &["--jobs", "1"]).success();
    assert_eq!(tree_digest(&whole), tree_digest(&single), "the passes do not depend on --jobs");
    for k in 0..2 {
        bin()
            .arg("infer")
            .arg(&spec)
            .args(["--shard", &format!("{k}/2"), "--no-progress", "--cache-dir"])
            .arg(s.path("cache-shards"))
            .assert()
            .success();
    }
    let merged = s.path("merged");
    let a = build(&spec, &merged, &s.path("cache-shards"), &[]).success();
    assert!(stderr(&a).contains(", 0 scored"), "scores all came from the shards: {}", stderr(&a));
    assert_eq!(tree_digest(&whole), tree_digest(&merged), "two shards' passes give the whole build's bytes");

    // One image a pass: another scorer (a fresh cache key), the same scores to 1e-5.
    let one = s.path("one");
    build(&spec, &one, &s.path("cache-shards"), &["--images-per-pass", "1"]).success();
    let lock_one: serde_json::Value = serde_json::from_slice(&std::fs::read(one.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock_one["scorer"]["preprocessing"]["scoring"]["images_per_pass"], 1);
    let ((_, a), (_, b)) = (bpals_release::eval::read_release_rows(&whole).unwrap(), bpals_release::eval::read_release_rows(&one).unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert!((x.logit_yes[0] - y.logit_yes[0]).abs() <= 1e-5 && (x.logit_no[0] - y.logit_no[0]).abs() <= 1e-5, "{}", x.image_index);
    }
    // The audit takes the pass from the lock, whatever the spec says.
    let a = bin().args(["rebuild", "--audit", "--spec"]).arg(&spec).arg(&one).arg("--scratch").arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("PASS: every file is identical, byte for byte"), "{}", stdout(&a));
}

/// A Qwen3.5 checkpoint (hybrid linear attention, published layout) through S2: the grounding
/// answers come from batched decoding that carries each row's linear-attention state; sharded
/// `infer` runs merge into the same bytes as one build; the release verifies and audits.
#[test]
fn a_qwen3_5_s2_release_merges_sharded_runs_and_audits() {
    let s = Scratch::new();
    let model = repo().join("fixtures/vlm/qwen3_5");
    // specs/s2.yaml with a Qwen3.5 grounding prompt, shorter answers, ten images, this model.
    let s2 = std::fs::read_to_string(repo().join("specs/s2.yaml")).unwrap();
    let ground = "      qwen2_5_vl: \"Locate the {finding} in this chest X-ray, output its bbox coordinates using JSON format.\"\n";
    assert!(s2.contains(ground) && s2.contains("    max_new_tokens: 48\n"));
    let text = s2
        .replace("extends: s1b.yaml", &format!("extends: {}", repo().join("specs/s1b.yaml").display()))
        .replace(ground, &format!("{ground}{}", ground.replace("qwen2_5_vl", "qwen3_5")))
        .replace("    max_new_tokens: 48\n", "    max_new_tokens: 12\n");
    let overrides = format!(
        "selection:\n  curated_images: 10\n  expected_rows: 13\nmodel:\n  backend: native\n  path: {}\n  id: bpals/tiny-qwen3.5\n  revision: fixture-v1\n  weight_license: apache-2.0\n  demo_weights: random\n",
        model.display()
    );
    let spec = s.write("qwen3_5-s2.yaml", &format!("{text}\n{overrides}"));
    let plain = s.path("plain");
    let a = build(&spec, &plain, &s.path("cache-plain"), &["--jobs", "2"]).success();
    let log = stdout(&a) + &stderr(&a);
    assert!(log.contains("decoded by the native engine"), "{log}");
    bin().arg("verify").arg(&plain).assert().success();
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(plain.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock["scorer"]["preprocessing"]["family"], "qwen3_5");

    for k in 0..2 {
        bin()
            .arg("infer")
            .arg(&spec)
            .args(["--shard", &format!("{k}/2"), "--no-progress", "--cache-dir"])
            .arg(s.path("cache-shared"))
            .assert()
            .success();
    }
    let merged = s.path("merged");
    let a = build(&spec, &merged, &s.path("cache-shared"), &[]).success();
    assert!(stderr(&a).contains(", 0 scored"), "scores all came from the shards: {}", stderr(&a));
    assert_eq!(tree_digest(&plain), tree_digest(&merged));

    let a = bin().args(["rebuild", "--audit", "--spec"]).arg(&spec).arg(&plain).arg("--scratch").arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("PASS: every file is identical, byte for byte"), "{}", stdout(&a));
}

/// The README's main job: `build specs/s1a.yaml` on a fresh clone runs the engine on the tiny
/// trained model over the whole embedded sample, finds the planted label errors, says it is a
/// demo, verifies, and publish refuses it.
#[test]
fn the_sample_build_finds_the_planted_errors_and_is_refused_by_publish() {
    let s = Scratch::new();
    let out = s.path("s1a");
    let a = build(&spec("s1a.yaml"), &out, &s.cache(), &[]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("640 scored by the qwen2vl engine"), "{text}");
    assert!(
        text.contains("DEMO BUILD") && text.contains("bpals/tiny-qwen2-vl-synthetic is a tiny model trained on synthetic images"),
        "{text}"
    );
    bin().arg("verify").arg(&out).assert().success();
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    insta::assert_snapshot!("s1a_card", card);
    assert!(card.contains("## Evaluation against the synthetic sample's planted truth"), "{card}");
    assert!(card.contains("a tiny model trained on synthetic images, no medical information"), "{card}");

    // The planted errors, found: `eval --gold truth.csv` (a generic gold file), and the same
    // figures in the card's own evaluation.
    let a = bin().arg("eval").arg(&out).arg("--gold").arg(repo().join("fixtures/sample/truth.csv")).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let in_card: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    assert_eq!(report["per_label"], in_card["per_label"]);
    assert_eq!(report["mislabel_detection"], in_card["mislabel_detection"]);
    let aurocs: Vec<f64> = report["per_label"].as_object().unwrap().values().filter_map(|m| m["auroc"].as_f64()).collect();
    let mean_auroc = aurocs.iter().sum::<f64>() / aurocs.len() as f64;
    let class =
        |name: &str| report["mislabel_detection"]["by_class"].as_array().unwrap().iter().find(|c| c["classes"] == name).unwrap().clone();
    let likely = class("likely_mislabeled");
    let (precision, recall) = (likely["precision"].as_f64().unwrap(), likely["recall"].as_f64().unwrap());
    eprintln!(
        "s1a on the sample: mean per-label AUROC {mean_auroc:.3} over {} labels; likely_mislabeled precision {precision:.3}, recall {recall:.3} ({} of {} rows mislabeled)",
        aurocs.len(),
        report["mislabel_detection"]["mislabeled"],
        report["mislabel_detection"]["n"]
    );
    assert!(aurocs.len() >= 5, "{report}");
    assert!(mean_auroc >= 0.9, "mean per-label AUROC {mean_auroc:.3}");
    assert!(precision >= 0.6 && recall >= 0.5, "likely_mislabeled precision {precision:.3}, recall {recall:.3}");

    // The review loop's promise: at a budget of 10% of rows, the rows `review plan` chooses hold at
    // least 4 times the label errors of random rows (the sample's truth stands in for reviewers).
    let plan = s.path("plan.json");
    bin().args(["review", "plan"]).arg(&out).args(["--budget", "10%", "--out"]).arg(&plan).assert().success();
    let a = bin()
        .arg("eval")
        .arg(&out)
        .arg("--gold")
        .arg(repo().join("fixtures/sample/truth.csv"))
        .arg("--review-plan")
        .arg(&plan)
        .assert()
        .success();
    let review = serde_json::from_str::<serde_json::Value>(&stdout(&a)).unwrap()["review"].clone();
    let (efficiency, ci) = (review["lift_over_split"].as_f64().unwrap(), &review["lift_over_split_ci95"]);
    eprintln!(
        "s1a review plan at 10%: {} errors in {} chosen rows, {} in {} control rows, split rate {:.1} per 100; relabel efficiency {efficiency:.2}x {ci} against the split, {} {} against the control",
        review["targeted"]["errors"], review["targeted"]["reviewed"], review["control"]["errors"], review["control"]["reviewed"],
        review["split"]["errors_per_100"].as_f64().unwrap(), review["lift"], review["lift_ci95"]
    );
    assert!(efficiency >= 4.0 && ci[0].as_f64().unwrap() > 2.0, "relabel efficiency {efficiency} {ci}");

    // Not degenerate: `trusted` is the largest class, and every class and flag has rows.
    let counts = signal_summary(&card, "trial");
    let rows_of = |name: &str| counts.get(name).copied().unwrap_or(0);
    for name in ["trusted", "review", "suspect", "likely_mislabeled", "hard_case", "low_consistency", "support_device_confounder"] {
        assert!(rows_of(name) > 0, "no `{name}` rows: {counts:?}");
    }
    assert!(["review", "suspect", "likely_mislabeled"].iter().all(|c| rows_of("trusted") > rows_of(c)), "{counts:?}");

    // The auditor's rebuild finds the spec from the lock (specs/s1a.yaml, from the repo root).
    let a = bin().current_dir(repo()).arg("rebuild").arg(&out).args(["--audit", "--scratch"]).arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("max |diff| 0.000e0") && stdout(&a).contains("PASS"), "{}", stdout(&a));

    let a = bin().env("HF_TOKEN", "hf_unused").args(["publish", "--dry-run"]).arg(&out).assert().failure();
    assert!(
        stderr(&a).contains("refusing to publish: this is a demo build") && stderr(&a).contains("trained on synthetic images"),
        "{}",
        stderr(&a)
    );
}

/// The two-family demo (specs/second-opinion/s1a-gemma4.yaml): the tiny Qwen2-VL and the tiny
/// Gemma 4 score the whole sample; the release builds, verifies, carries both families and the
/// joint classes, and its evaluation compares each family alone with both on the planted errors.
/// On forty images, it is the same bytes across --jobs and shards, and `rebuild --audit` passes.
#[test]
fn the_two_family_demo_builds_compares_its_families_and_audits() {
    let s = Scratch::new();
    let spec = repo().join("specs/second-opinion/s1a-gemma4.yaml");
    let out = s.path("two-families");
    let a = build(&spec, &out, &s.cache(), &[]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(
        text.contains("infer (second opinion): 0 images from the cache, 640 scored by the native engine bpals/tiny-gemma4-synthetic"),
        "{text}"
    );
    assert!(!text.contains("one lineage's errors are correlated"), "two families: {text}");
    bin().arg("verify").arg(&out).assert().success();
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock["second_scorer"]["preprocessing"]["family"], "gemma4");
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.contains("| Second opinion | `bpals/tiny-gemma4-synthetic`") && card.contains("gemma4 alone"), "{card}");

    // Each family alone and both, on the sample's planted errors (the build's own evaluation).
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    let view = |name: &str| {
        let m = &eval["families"][name];
        let likely = m["mislabel"]["by_class"].as_array().unwrap().iter().find(|c| c["classes"] == "likely_mislabeled").unwrap().clone();
        let n = m["mislabel"]["n"].as_u64().unwrap() as usize;
        let lift =
            m["mislabel"]["at_k"].as_array().unwrap().iter().find(|k| k[0].as_u64() == Some(n.div_ceil(10) as u64)).map(|k| k[2].clone());
        eprintln!(
            "{name}: AUROC {:.3}, mislabel AP {:.3}, likely_mislabeled {} rows, precision {}, recall {}, Lift@10% {}",
            m["auroc"].as_f64().unwrap(),
            m["mislabel"]["ap"].as_f64().unwrap(),
            likely["flagged"],
            likely["precision"],
            likely["recall"],
            lift.unwrap_or_default()
        );
        (m["auroc"].as_f64().unwrap(), likely["precision"].as_f64().unwrap_or(0.0))
    };
    let (primary, second, joint) = (view("primary"), view("second"), view("joint"));
    // Both families learned the sample: each ranks its findings well above chance.
    assert!(primary.0 >= 0.85 && second.0 >= 0.7, "AUROC: Qwen2-VL {}, Gemma 4 {}", primary.0, second.0);
    // Requiring both families to doubt NIH makes likely_mislabeled at least as precise as the
    // weaker family's alone.
    assert!(joint.1 >= primary.1.min(second.1), "likely_mislabeled precision: joint {} against {primary:?} {second:?}", joint.1);

    // A joint rule fitted on half the planted truth (every other image) and judged on the other
    // half: never worse than the better family alone, where the mean is.
    let (fit_half, held_out) = (s.path("truth-fit.csv"), s.path("truth-held-out.csv"));
    write_truth_halves(&fit_half, &held_out);
    let rule = s.path("joint-rule.json");
    let a = bin().arg("calibrate").arg(&out).arg("--gold").arg(&fit_half).arg("--joint").arg("--out").arg(&rule).assert().success();
    eprintln!("{}", stdout(&a));
    let fitted_spec = s.write("fitted.yaml", &format!("extends: {}\nsignal:\n  joint_rule: {}\n", spec.display(), rule.display()));
    let fitted = s.path("fitted");
    let a = build(&fitted_spec, &fitted, &s.cache(), &[]).success();
    assert!(stderr(&a).contains("infer (second opinion): 640 images from the cache, 0 scored"), "{}", stderr(&a));
    bin().arg("verify").arg(&fitted).assert().success();
    let held_out_figures = |release: &std::path::Path| -> serde_json::Value {
        let a = bin().arg("eval").arg(release).arg("--gold").arg(&held_out).args(["--bootstrap", "10"]).assert().success();
        serde_json::from_str(&stdout(&a)).unwrap()
    };
    let (mean_rule, fitted_rule) = (held_out_figures(&out), held_out_figures(&fitted));
    assert_eq!(fitted_rule["joint_rule"]["cross_fitted_rows"], 0, "the held-out half shares no image with the fit");
    let figures = |e: &serde_json::Value, view: &str| {
        (e["families"][view]["auroc"].as_f64().unwrap(), e["families"][view]["mislabel"]["ap"].as_f64().unwrap())
    };
    for (name, e) in [("mean rule", &mean_rule), ("fitted rule", &fitted_rule)] {
        eprintln!(
            "held-out half, {name}: primary {:?}, second {:?}, joint {:?}; disagreement {}",
            figures(e, "primary"),
            figures(e, "second"),
            figures(e, "joint"),
            e["families"]["disagreement"]
        );
    }
    let (best_auroc, best_ap) = {
        let (p, s) = (figures(&fitted_rule, "primary"), figures(&fitted_rule, "second"));
        (p.0.max(s.0), p.1.max(s.1))
    };
    let joint = figures(&fitted_rule, "joint");
    assert!(joint.0 >= best_auroc && joint.1 >= best_ap, "held out: joint {joint:?} against the better family's ({best_auroc}, {best_ap})");
    let card = std::fs::read_to_string(fitted.join("README.md")).unwrap();
    assert!(card.contains("**The joint rule.**") && !card.contains("only when both\nfamilies doubt NIH"), "{card}");

    // Forty images: the same bytes from one process, from shards on two, and on an audit's rerun.
    let small = s.write("small.yaml", &format!("extends: {}\nselection:\n  curated_images: 40\n  expected_rows: null\n", spec.display()));
    let plain = s.path("plain");
    build(&small, &plain, &s.path("cache-plain"), &["--jobs", "2"]).success();
    for k in 0..2 {
        bin()
            .arg("infer")
            .arg(&small)
            .args(["--shard", &format!("{k}/2"), "--no-progress", "--cache-dir"])
            .arg(s.path("cache-shared"))
            .assert()
            .success();
    }
    let merged = s.path("merged");
    let a = build(&small, &merged, &s.path("cache-shared"), &["--jobs", "1"]).success();
    assert!(stderr(&a).contains("infer (second opinion): 40 images from the cache, 0 scored"), "{}", stderr(&a));
    assert_eq!(tree_digest(&plain), tree_digest(&merged));
    let a = bin().args(["rebuild", "--audit", "--spec"]).arg(&small).arg(&plain).arg("--scratch").arg(s.path("audit")).assert().success();
    assert!(stdout(&a).contains("PASS: every file is identical, byte for byte"), "{}", stdout(&a));
}

/// The sample's planted truth (a gold file as it is) in two halves: every other image (sorted
/// by name) in the first, the rest in the second, each under truth.csv's own header.
fn write_truth_halves(first: &std::path::Path, second: &std::path::Path) {
    let truth = std::fs::read_to_string(repo().join("fixtures/sample/truth.csv")).unwrap();
    let (header, rows) = truth.split_once('\n').unwrap();
    let mut images: Vec<&str> = rows.lines().map(|l| l.split(',').next().unwrap()).collect();
    images.dedup();
    let first_half: std::collections::BTreeSet<&str> = images.iter().step_by(2).copied().collect();
    let (mut a, mut b) = (format!("{header}\n"), format!("{header}\n"));
    for line in rows.lines() {
        let half = if first_half.contains(line.split(',').next().unwrap()) { &mut a } else { &mut b };
        half.push_str(line);
        half.push('\n');
    }
    std::fs::write(first, a).unwrap();
    std::fs::write(second, b).unwrap();
}

/// Rows per trust class and flag in the card's signal summary of one split.
fn signal_summary(card: &str, split: &str) -> std::collections::BTreeMap<String, usize> {
    let section = card.split(&format!("### Signal summary: `{split}` split")).nth(1).expect("the split's summary");
    let section = section.split("| label |").next().unwrap();
    section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_string(), cells.get(2)?.parse().ok()?))
        })
        .collect()
}

/// `build specs/s2.yaml` on the sample: the trained model's boxes, decoded in batches and mapped
/// back through the resize grid, beat the finding's mean box against the drawn boxes, and its
/// zones are mostly right; the release verifies and its card shows the S2 section.
///
/// Then `build specs/s4.yaml` (and so S3) over the same score cache, as a publisher climbing the
/// tiers would: S4 asks S2's questions, so it takes S2's scores and grounding answers from the
/// cache, scoring and decoding none of them again. Every row gets an answer and every image a
/// report through the real generation path; the release verifies, and the card states the parse
/// rate. The sample's tiny model was trained on yes/no answers, boxes and short reports, never on
/// the `<think>`/`<answer>` format: its S3 answers do not parse, and the card must say so rather
/// than present them as a check.
#[test]
fn the_s2_then_s4_sample_builds_locate_findings_and_write_reasoning_and_reports() {
    let s = Scratch::new();
    // `scripts/test` names one score cache for the sample builds of every lane (this test and the
    // Python readers' S2 and S4), so the suite scores the sample's S2 once; a release's bytes do
    // not depend on what the cache held. Alone, the test scores into its own.
    let cache = std::env::var_os("BPALS_SAMPLE_SCORE_CACHE").map_or_else(|| s.cache(), std::path::PathBuf::from);
    let out = s.path("s2");
    let a = build(&spec("s2.yaml"), &out, &cache, &["--jobs", "2"]).success();
    let log = stderr(&a);
    assert!(log.contains("decoded by the qwen2vl engine"), "{log}");
    bin().arg("verify").arg(&out).assert().success();
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("location_eval.json")).unwrap()).unwrap();
    let all = &eval["overall"];
    let (model, baseline) = (&all["model"], &all["baseline"]);
    let at = |s: &serde_json::Value, key: &str, k: usize| s[key][k].as_f64().unwrap();
    eprintln!(
        "s2 on the sample: {} reference boxes; IoU > 0.5 model {:.2} vs mean box {:.2}; mean IoU {:.3} vs {:.3}; side accuracy {}, zone accuracy {}",
        all["boxes"], at(model, "iou_above", 2), at(baseline, "iou_above", 2), model["mean_iou"], baseline["mean_iou"], all["side_accuracy"], all["zone_accuracy"]
    );
    assert!(all["boxes"].as_u64().unwrap() >= 80, "{all}");
    assert!(at(model, "iou_above", 2) >= at(baseline, "iou_above", 2) + 0.25, "{all}");
    assert!(model["mean_iou"].as_f64().unwrap() >= baseline["mean_iou"].as_f64().unwrap() + 0.15, "{all}");
    assert!(all["model_boxed"].as_u64().unwrap() * 10 >= all["boxes"].as_u64().unwrap() * 9, "nearly every answer holds a box: {all}");
    assert!(all["zone_accuracy"].as_f64().unwrap() >= 0.5, "{all}");
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.contains("## Diagnose (S2)") && card.contains("![Boxes on sample images](plots/full-sample-boxes.png)"), "{card}");

    let out = s.path("s4");
    let a = build(&spec("s4.yaml"), &out, &cache, &["--jobs", "2"]).success();
    let log = stderr(&a);
    let scoring = log.lines().find(|l| l.starts_with("infer: ")).unwrap_or_default();
    assert!(scoring.contains("640 images from the cache, 0 scored"), "S4 asks S2's questions and takes S2's scores: {log}");
    let grounding = log.lines().find(|l| l.starts_with("generate: grounding answers")).unwrap_or_default();
    assert!(grounding.contains("from the cache, 0 decoded"), "S4 takes S2's grounding answers from the cache: {log}");
    assert!(
        log.contains("generate: reasoning for the rows of 640 images") && log.contains("generate: a report for each of 640 images"),
        "{log}"
    );
    bin().arg("verify").arg(&out).assert().success();
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    let parse_line = card_row(&card, "answers that parse");
    let reports_line = card_row(&card, "NIH's findings");
    eprintln!("s4 on the sample with the trained tiny model: {parse_line}; report against NIH: {reports_line}");
    let parsed: f64 = parse_line.split('(').nth(1).and_then(|p| p.split('%').next()).unwrap().parse().unwrap();
    if parsed < 95.0 {
        assert!(card.contains("Fewer than 95% of the answers parse"), "the card says the S3 answers are not a check");
    }
    assert!(card.contains("## Report (S4)") && card.contains("never NIH"), "{card}");

    // The reports against the sample's drawn truth (what the images show, not NIH's noisy labels).
    let truth = drawn_truth();
    let (mut tp, mut fp, mut fneg) = (0usize, 0usize, 0usize);
    for (image, said) in report_findings(&out.join("data/images/full-00000-of-00001.parquet")) {
        let drawn = truth.get(&image).cloned().unwrap_or_default();
        tp += said.iter().filter(|f| drawn.contains(*f)).count();
        fp += said.iter().filter(|f| !drawn.contains(*f)).count();
        fneg += drawn.iter().filter(|f| !said.contains(*f)).count();
    }
    let (precision, recall) = (tp as f64 / (tp + fp) as f64, tp as f64 / (tp + fneg) as f64);
    eprintln!("s4 reports against the drawn truth: precision {precision:.3}, recall {recall:.3} ({tp} true findings)");
    assert!(precision >= 0.55 && recall >= 0.45, "the trained model's reports follow the images: {precision} / {recall}");
}

/// Per image, the findings the sample's generator drew (fixtures/sample/truth.csv).
fn drawn_truth() -> std::collections::HashMap<String, Vec<String>> {
    let text = std::fs::read_to_string(repo().join("fixtures/sample/truth.csv")).unwrap();
    let mut out: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[2] == "1" && f[1] != "No Finding" {
            out.entry(f[0].to_string()).or_default().push(f[1].to_string());
        }
    }
    out
}

/// (image_index, report_findings) of every row of an S4 image shard.
fn report_findings(file: &std::path::Path) -> Vec<(String, Vec<String>)> {
    use parquet::file::reader::FileReader;
    use parquet::record::{ListAccessor, RowAccessor};
    let reader = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(file).unwrap()).unwrap();
    let names: Vec<String> =
        reader.metadata().file_metadata().schema_descr_ptr().root_schema().get_fields().iter().map(|f| f.name().to_string()).collect();
    let at = |name: &str| names.iter().position(|n| n == name).unwrap();
    let (image, findings) = (at("image_index"), at("report_findings"));
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            let list = row.get_list(findings).unwrap();
            (row.get_string(image).unwrap().clone(), (0..list.len()).map(|k| list.get_string(k).unwrap().clone()).collect())
        })
        .collect()
}

/// A second opinion with the primary model's weights (under another id, say) would score every
/// image twice and let the card claim two models: refused before any image is scored, naming
/// the spec and the digest.
#[test]
fn a_second_opinion_with_the_primarys_weights_is_refused() {
    let s = Scratch::new();
    let model = repo().join("fixtures/vlm/trained/qwen2_vl");
    let spec = s.write(
        "same.yaml",
        &format!(
            "extends: {}\nsecond_opinion:\n  backend: native\n  path: {}\n  id: someone/renamed-copy\n  revision: v1\n  weight_license: apache-2.0\n  demo_weights: synthetic\n",
            spec("s1a.yaml").display(),
            model.display()
        ),
    );
    let err = stderr(&build(&spec, &s.path("out"), &s.cache(), &[]).failure());
    assert!(err.contains("second_opinion names the same weights as model") && err.contains("same.yaml"), "{err}");
    assert!(!s.path("out").exists(), "nothing is written");
}

/// `--images-per-pass` reaches a native second opinion as it reaches the model: its scorer's
/// identity, and so its scores' key, changes with it (it used to stay at 1, silently).
#[test]
fn images_per_pass_applies_to_the_second_opinion_too() {
    let s = Scratch::new();
    let plan = |extra: &[&str]| -> serde_json::Value {
        let a = bin()
            .arg("build")
            .arg(spec("second-opinion/s1a-gemma4.yaml"))
            .args(["--dry-run", "--json", "--out"])
            .arg(s.path("out"))
            .arg("--cache-dir")
            .arg(s.cache())
            .args(extra)
            .assert()
            .success();
        serde_json::from_str(&stdout(&a)).unwrap()
    };
    let (one, two) = (plan(&[]), plan(&["--images-per-pass", "2"]));
    let key =
        |p: &serde_json::Value, stage: &str| p["stages"].as_array().unwrap().iter().find(|s| s["stage"] == stage).map(|s| s["key"].clone());
    assert!(key(&one, "infer_second_opinion").is_some(), "{one}");
    assert_ne!(key(&one, "infer_second_opinion"), key(&two, "infer_second_opinion"));
    assert_ne!(key(&one, "infer"), key(&two, "infer"));
}
