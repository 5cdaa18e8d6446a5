//! A second opinion (`second_opinion:` in the spec), built with the fixture scorer on both sides:
//! the release's columns, classes, lock, card, evaluation and diff; its bytes across --jobs and
//! shards; the spec's errors. The real two-family demo (tiny Qwen2-VL and tiny Gemma 4) is built
//! in tests/vlm_build.rs.

mod common;

use common::*;

fn second_opinion_spec() -> std::path::PathBuf {
    repo().join("tests/specs/s1a-fixture-second-opinion.yaml")
}

fn pair_shard(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join("data/trial-00000-of-00001.parquet")
}

#[test]
fn a_two_scorer_release_carries_both_families_and_the_joint_signal() {
    let s = Scratch::new();
    let (one, two) = (s.path("one"), s.path("two"));
    build(&fixture_s1a(), &one, &s.cache(), &[]).success();
    let out = build(&second_opinion_spec(), &two, &s.cache(), &[]).success();
    let text = stderr(&out);
    assert!(text.contains("second_opinion: scores come from the fixture scorer"), "a demo reason of its own: {text}");
    bin().arg("verify").arg(&two).assert().success();

    // The second opinion's columns come after every other, whose names stay in place.
    let schema = |dir: &std::path::Path| -> Vec<String> {
        let file = std::fs::File::open(pair_shard(dir)).unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
        use parquet::file::reader::FileReader;
        reader.metadata().file_metadata().schema_descr().root_schema().get_fields().iter().map(|f| f.name().to_string()).collect()
    };
    let (a, b) = (schema(&one), schema(&two));
    assert_eq!(&b[..a.len()], &a[..]);
    assert_eq!(
        &b[a.len()..],
        [
            "primary_confidence",
            "primary_trust_class",
            "second_confidence",
            "second_trust_class",
            "second_question_logit_yes",
            "second_question_logit_no",
            "family_agreement"
        ]
    );

    // Identical scorers: each family's view is the one-model release's, and so is the joint row.
    let (_, rows_one) = bpals_release::eval::read_release_rows(&one).unwrap();
    let (_, rows_two) = bpals_release::eval::read_release_rows(&two).unwrap();
    for (x, y) in rows_one.iter().zip(&rows_two) {
        let f = y.families.as_ref().expect("both views");
        assert_eq!((f.primary_confidence, f.second_confidence), (x.confidence, x.confidence));
        assert_eq!((&f.primary_trust_class, &y.trust_class), (&x.trust_class, &x.trust_class));
        assert!((y.confidence - x.confidence).abs() < 1e-12 && !y.flags.iter().any(|f| f == "families_disagree"));
    }

    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(two.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock["second_scorer"]["model_id"], "bpals/fixture-scorer-second");
    assert!(lock["stage_keys"]["infer_second_opinion"].is_string());
    let lock_one: serde_json::Value = serde_json::from_slice(&std::fs::read(one.join("build.lock")).unwrap()).unwrap();
    assert!(lock_one.get("second_scorer").is_none() && lock_one["stage_keys"].get("infer_second_opinion").is_none());

    let card = std::fs::read_to_string(two.join("README.md")).unwrap();
    assert!(card.contains("| Second opinion | `bpals/fixture-scorer-second`"), "{card}");
    assert!(card.contains("a row is `likely_mislabeled` only when both") && card.contains("| `families_disagree` |"), "{card}");
    assert!(card.contains("### Each family alone and together: `trial` split"), "{card}");
    assert!(card.contains("| primary model |") && card.contains("| both (the release) |"), "the evaluation compares the views: {card}");
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(two.join("eval.json")).unwrap()).unwrap();
    assert_eq!(eval["families"]["primary"]["auroc"], eval["families"]["joint"]["auroc"]);
    let eval_one: serde_json::Value = serde_json::from_slice(&std::fs::read(one.join("eval.json")).unwrap()).unwrap();
    assert!(eval_one.get("families").is_none());

    // diff sees each side's families against each other.
    let out = bin().arg("diff").arg(&one).arg(&two).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(report.get("families_a").is_none());
    assert_eq!(report["families_b"]["kappa"], 1.0);
    assert_eq!(report["changed_rows"], 0);
    assert!(report["overall"].get("second_max_abs_logit_change").is_none(), "side A has one model: {}", report["overall"]);
    // Two two-model releases: the second model's logits are compared as well.
    let out = bin().arg("diff").arg(&two).arg(&two).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["overall"]["second_max_abs_logit_change"], 0.0, "{}", report["overall"]);
}

#[test]
fn a_two_scorer_release_is_the_same_bytes_across_jobs_and_shards() {
    let s = Scratch::new();
    let spec = second_opinion_spec();
    let one = s.path("one");
    build(&spec, &one, &s.path("cache-one"), &["--jobs", "1"]).success();
    let sharded = s.path("cache-sharded");
    for k in ["0/2", "1/2"] {
        bin().arg("infer").arg(&spec).args(["--shard", k, "--cache-dir"]).arg(&sharded).arg("--no-progress").assert().success();
    }
    let two = s.path("two");
    let out = build(&spec, &two, &sharded, &["--jobs", "2"]).success();
    assert!(stderr(&out).contains("infer (second opinion): 640 images from the cache, 0 scored"), "{}", stderr(&out));
    let digest = |d: &std::path::Path| {
        let mut t = tree_digest(d);
        t.remove("build.lock");
        t.remove("manifest.json");
        t
    };
    assert_eq!(digest(&one), digest(&two));
}

#[test]
fn the_dry_run_plans_the_second_opinion() {
    let s = Scratch::new();
    let out = bin().arg("build").arg(second_opinion_spec()).arg("--dry-run").arg("--cache-dir").arg(s.cache()).assert().success();
    let text = stdout(&out);
    assert!(text.contains("infer_second_opinion") && text.contains("0/640 images cached, 640 to score with the fixture scorer"), "{text}");
}

#[test]
fn second_opinion_keys_are_checked_like_the_models() {
    let s = Scratch::new();
    let unknown = s.write(
        "unknown.yaml",
        &format!(
            "extends: {}\nsecond_opinion:\n  backend: fixture\n  id: x\n  revision: v1\n  weight_license: none\n  colour: red\n",
            fixture_s1a().display()
        ),
    );
    let err = stderr(&bin().arg("build").arg(&unknown).arg("--dry-run").assert().failure());
    assert!(err.contains("colour") && err.contains("unknown.yaml"), "{err}");
    let missing = s.write(
        "missing.yaml",
        &format!("extends: {}\nsecond_opinion:\n  backend: fixture\n  id: x\n  revision: v1\n", fixture_s1a().display()),
    );
    let err = stderr(&bin().arg("build").arg(&missing).arg("--dry-run").assert().failure());
    assert!(err.contains("second_opinion.weight_license"), "{err}");
    let served = s.write(
        "served.yaml",
        &format!(
            "extends: {}\nsecond_opinion:\n  backend: fixture\n  id: x\n  revision: v1\n  weight_license: none\n  endpoint: http://x/v1\n",
            fixture_s1a().display()
        ),
    );
    let err = stderr(&bin().arg("build").arg(&served).arg("--dry-run").assert().failure());
    assert!(err.contains("second_opinion.endpoint") && err.contains("is for second_opinion.backend openai only"), "{err}");
}

/// The sample's planted truth, which reads as a generic gold file.
fn truth_gold() -> std::path::PathBuf {
    repo().join("fixtures/sample/truth.csv")
}

/// `calibrate --joint` fits a rule from a two-family release; a spec naming it builds a release
/// whose lock, provenance, card and evaluation carry it, whose fitted rows the evaluation
/// cross-fits, and whose bytes do not depend on --jobs.
#[test]
fn a_fitted_joint_rule_is_locked_stated_and_cross_fitted() {
    let s = Scratch::new();
    let (two, gold, rule) = (s.path("two"), truth_gold(), s.path("rule.json"));
    build(&second_opinion_spec(), &two, &s.cache(), &[]).success();
    let out = bin().arg("calibrate").arg(&two).arg("--gold").arg(&gold).arg("--joint").arg("--out").arg(&rule).assert().success();
    let text = stdout(&out);
    assert!(
        text.contains("wrote the joint rule of the two families (release s1a against truth.csv, 640 images)")
            && text.contains("all labels pooled: 776 reads"),
        "{text}"
    );
    let table: serde_json::Value = serde_json::from_slice(&std::fs::read(&rule).unwrap()).unwrap();
    assert_eq!(table["format"], "bpals-joint-rule/1");
    assert_eq!(table["labels"].as_object().unwrap().len(), 15);

    let spec =
        s.write("fitted.yaml", &format!("extends: {}\nsignal:\n  joint_rule: {}\n", second_opinion_spec().display(), rule.display()));
    let (fitted, again) = (s.path("fitted"), s.path("again"));
    build(&spec, &fitted, &s.cache(), &["--jobs", "1"]).success();
    build(&spec, &again, &s.cache(), &["--jobs", "2"]).success();
    assert_eq!(tree_digest(&fitted), tree_digest(&again));
    bin().arg("verify").arg(&fitted).assert().success();
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(fitted.join("build.lock")).unwrap()).unwrap();
    assert_eq!(lock["spec"]["signal"]["joint_rule"]["rule"], table, "the lock carries the whole rule");
    let lock_two: serde_json::Value = serde_json::from_slice(&std::fs::read(two.join("build.lock")).unwrap()).unwrap();
    assert!(lock_two["spec"]["signal"].get("joint_rule").is_none(), "a release without a rule keeps its lock");

    // The joint confidence is the rule applied to the shipped family confidences.
    let rule_table = bpals_release::signal::joint_rule::JointRule::read_with_bytes(&rule).unwrap().0;
    let (_, rows) = bpals_release::eval::read_release_rows(&fitted).unwrap();
    for r in &rows {
        let f = r.families.as_ref().unwrap();
        assert_eq!(r.confidence, rule_table.apply(&r.label, f.primary_confidence, f.second_confidence), "{r:?}");
    }

    let card = std::fs::read_to_string(fitted.join("README.md")).unwrap();
    assert!(card.contains("**The joint rule.**") && card.contains("rule.json`") && card.contains("judged\nout-of-fold"), "{card}");
    assert!(card.contains("**Where the families disagree**") && card.contains("| label | AUROC, primary model |"), "{card}");
    let card_two = std::fs::read_to_string(two.join("README.md")).unwrap();
    assert!(!card_two.contains("joint rule") && !card_two.contains("Where the families disagree"), "{card_two}");

    // Every judged row is of an image the rule was fitted on: all are cross-fitted.
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(fitted.join("eval.json")).unwrap()).unwrap();
    assert_eq!((eval["joint_rule"]["cross_fitted_rows"].as_u64(), eval["joint_rule"]["held_out_rows"].as_u64()), (Some(776), Some(0)));
    let out = bin().arg("eval").arg(&fitted).arg("--gold").arg(&gold).args(["--bootstrap", "10"]).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["joint_rule"]["cross_fitted_rows"], 776);
    assert_eq!(report["families"]["joint"]["auroc"], eval["families"]["joint"]["auroc"], "eval reads the rule from build.lock");

    // A rule that is not the fit of these reads (here its weights doubled: fitted on other
    // scores, say) is not judged by a refit: the card's and eval.json's figures are those of the
    // confidences the release ships. They used to be the refit's, whatever the rule shipped.
    let mut foreign = table.clone();
    let double = |entry: &mut serde_json::Value| {
        if let Some(w) = entry["weights"].as_object_mut() {
            for v in w.values_mut() {
                *v = serde_json::json!(v.as_f64().unwrap() * 2.0);
            }
        }
    };
    double(&mut foreign["pooled"]);
    foreign["labels"].as_object_mut().unwrap().values_mut().for_each(double);
    let foreign_rule = s.write("foreign.json", &foreign.to_string());
    let spec = s.write(
        "foreign.yaml",
        &format!("extends: {}\nsignal:\n  joint_rule: {}\n", second_opinion_spec().display(), foreign_rule.display()),
    );
    let shipped = s.path("foreign");
    build(&spec, &shipped, &s.cache(), &[]).success();
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(shipped.join("eval.json")).unwrap()).unwrap();
    assert_eq!((eval["joint_rule"]["cross_fitted_rows"].as_u64(), eval["joint_rule"]["held_out_rows"].as_u64()), (Some(0), Some(776)));
    let truth: std::collections::HashMap<(String, String), bool> = std::fs::read_to_string(&gold)
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            ((f[0].to_string(), f[1].to_string()), f[2] == "1")
        })
        .collect();
    let (_, rows) = bpals_release::eval::read_release_rows(&shipped).unwrap();
    let judged: Vec<(f64, bool)> =
        rows.iter().filter_map(|r| truth.get(&(r.image_index.clone(), r.label.clone())).map(|&t| (r.confidence, t))).collect();
    assert_eq!(judged.len(), 776);
    let (pos, neg): (Vec<_>, Vec<_>) = judged.iter().partition(|(_, t)| *t);
    let wins: f64 = pos
        .iter()
        .flat_map(|(p, _)| {
            neg.iter().map(move |(n, _)| {
                if p > n {
                    1.0
                } else if p == n {
                    0.5
                } else {
                    0.0
                }
            })
        })
        .sum();
    let shipped_auroc = wins / (pos.len() * neg.len()) as f64;
    let reported = eval["families"]["joint"]["auroc"].as_f64().unwrap();
    assert!((reported - shipped_auroc).abs() < 1e-9, "eval.json says {reported}, the shipped confidences give {shipped_auroc}");
}

#[test]
fn a_joint_rule_needs_two_families_and_a_rule_file() {
    let s = Scratch::new();
    let (one, gold) = (s.path("one"), truth_gold());
    build(&fixture_s1a(), &one, &s.cache(), &[]).success();
    let err = stderr(
        &bin().arg("calibrate").arg(&one).arg("--gold").arg(&gold).arg("--joint").arg("--out").arg(s.path("r.json")).assert().failure(),
    );
    assert!(err.contains("has one model and no confident learning: a joint rule combines the two families"), "{err}");
    assert!(!s.path("r.json").exists(), "nothing written");

    let rule = s.write("rule.json", "{\"format\": \"bpals-joint-rule/1\", \"pooled\": 1}");
    let alone = s.write("alone.yaml", &format!("extends: {}\nsignal:\n  joint_rule: rule.json\n", fixture_s1a().display()));
    let err = stderr(&bin().arg("build").arg(&alone).arg("--dry-run").assert().failure());
    assert!(err.contains("alone.yaml") && err.contains("signal.joint_rule") && err.contains("asks neither a second_opinion"), "{err}");
    let spec = s.write("two.yaml", &format!("extends: {}\nsignal:\n  joint_rule: rule.json\n", second_opinion_spec().display()));
    let err = stderr(&bin().arg("build").arg(&spec).arg("--dry-run").assert().failure());
    assert!(
        err.contains("signal.joint_rule") && err.contains(&rule.display().to_string()) && err.contains("is not a joint rule file"),
        "{err}"
    );
    std::fs::write(&rule, "{\"format\": \"bpals-calibration/1\"}").unwrap();
    let err = stderr(&bin().arg("build").arg(&spec).arg("--dry-run").assert().failure());
    assert!(err.contains("expected \"bpals-joint-rule/1\""), "{err}");
    std::fs::remove_file(&rule).unwrap();
    let err = stderr(&bin().arg("build").arg(&spec).arg("--dry-run").assert().failure());
    assert!(err.contains("cannot read") && err.contains("rule.json"), "{err}");
}
