//! `features` and `label-issues` end to end on the embedded sample, with the fixture scorer (whose
//! features are a hash of each image: the path is real, the vectors mean nothing). The rules' and
//! the probes' numbers are checked against cleanlab and scikit-learn in
//! tests/python/test_confident_learning.py; the engine's own features in tests/vlm_cli.rs.

mod common;

use common::*;

fn sample_data_entry() -> std::path::PathBuf {
    repo().join("fixtures/sample/Data_Entry_2017_v2020.csv")
}

fn label_issues(s: &Scratch, features: &std::path::Path, out: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin()
        .arg("label-issues")
        .arg("--data-entry")
        .arg(sample_data_entry())
        .arg("--features")
        .arg(features)
        .arg("--out")
        .arg(s.path(out))
        .args(extra)
        .assert()
}

/// `features` on the fixture S1a into `out`, through the scratch's cache; what it printed.
fn write_features(s: &Scratch, out: &std::path::Path) -> String {
    let a = bin().arg("features").arg(fixture_s1a()).arg("--out").arg(out).arg("--cache-dir").arg(s.cache()).arg("--no-progress").assert();
    stdout(&a.success())
}

#[test]
fn features_then_label_issues_run_on_the_sample_and_repeat_to_the_byte() {
    let s = Scratch::new();
    let features = s.path("features.parquet");
    let out = write_features(&s, &features);
    assert!(out.contains("x 16 features (vision_tower_mean"), "{out}");
    assert!(out.contains("carry no information"), "the fixture's features must say what they are: {out}");
    assert!(out.contains("640 computed, 0 from the cache"), "{out}");
    // A second run reads the cache and writes the same bytes.
    let again = s.path("again.parquet");
    let said = write_features(&s, &again);
    assert!(said.contains("0 computed, 640 from the cache"), "{said}");
    assert_eq!(std::fs::read(&features).unwrap(), std::fs::read(&again).unwrap());
    // A damaged entry is set aside, said, and computed again.
    let entry = files_under(&s.cache().join("features-v1")).into_iter().find(|p| p.extension().is_some_and(|e| e == "json")).unwrap();
    std::fs::write(&entry, b"{\"not\": \"an entry\"}").unwrap();
    let said = write_features(&s, &again);
    assert!(said.contains("1 computed, 639 from the cache") && said.contains("cache: "), "{said}");
    assert_eq!(std::fs::read(&features).unwrap(), std::fs::read(&again).unwrap());

    let flags = ["--findings", "Effusion,No Finding", "--folds", "3", "--grid", "0.1,1"];
    let first = label_issues(&s, &features, "first", &flags).success();
    let table = stdout(&first);
    assert!(table.contains("Effusion") && table.contains("No Finding"), "{table}");
    // Findings run on separate threads: the bytes do not depend on how many.
    let second = bin()
        .env("RAYON_NUM_THREADS", "1")
        .arg("label-issues")
        .arg("--data-entry")
        .arg(sample_data_entry())
        .arg("--features")
        .arg(&features)
        .arg("--out")
        .arg(s.path("second"))
        .args(flags)
        .assert()
        .success();
    assert_eq!(stdout(&second).replace("second", "first"), table);
    assert_eq!(tree_digest(&s.path("first")), tree_digest(&s.path("second")));

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(s.path("first/label_issues.json")).unwrap()).unwrap();
    assert_eq!(report["format"], "bpals-release/label-issues/1");
    assert_eq!(report["probes"]["folds"], 3);
    let effusion = &report["findings"][0];
    assert_eq!(effusion["probes"]["chosen_c"].as_array().unwrap().len(), 3);
    assert!(effusion["rules"]["thresholds"][1].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_settings_and_inputs_are_refused_before_anything_is_written() {
    let s = Scratch::new();
    let empty = s.write("empty.parquet", "");
    for (flags, message) in [
        (vec!["--folds", "2"], "folds is 2: expected 3 to 20"),
        (vec!["--grid", "1,0.1"], "ascending"),
        (vec!["--grid", "0,1"], "positive, finite"),
        (vec!["--findings", "Efusion"], "unknown finding \"Efusion\""),
        (vec![], "empty.parquet: not a readable Parquet file"),
    ] {
        let a = label_issues(&s, &empty, "out", &flags).failure();
        assert!(stderr(&a).contains(message), "{flags:?}: {}", stderr(&a));
        assert!(!s.path("out").exists());
    }
    let missing = label_issues(&s, &s.path("nowhere.parquet"), "out", &[]).failure();
    assert!(stderr(&missing).contains("cannot read") && stderr(&missing).contains("nowhere.parquet"), "{}", stderr(&missing));
    let both =
        bin().args(["label-issues", "--data-entry", "x", "--features", "a", "--probabilities", "b", "--out", "o"]).assert().failure();
    assert!(stderr(&both).contains("cannot be used with"), "{}", stderr(&both));
}

/// Every record batch of the Parquet shards directly in `dir` (not its subfolders).
fn record_batches(dir: &std::path::Path) -> Vec<arrow_array::RecordBatch> {
    files_under(dir)
        .into_iter()
        .filter(|p| p.parent() == Some(dir))
        .flat_map(|shard| {
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&shard).unwrap())
                .unwrap()
                .build()
                .unwrap()
                .map(|batch| batch.unwrap())
        })
        .collect()
}

/// A pair row's `image_index`, `label`, `nih_label`, `cl_confidence`, `cl_label_issue`,
/// `agreement` and `trust_class`.
type ConfidentCells = (String, String, bool, Option<f64>, Option<bool>, f64, String);

/// Every pair row's [`ConfidentCells`].
fn confident_columns(release: &std::path::Path) -> Vec<ConfidentCells> {
    use arrow_array::{Array, BooleanArray, Float64Array, StringArray};
    let mut rows = Vec::new();
    for batch in record_batches(&release.join("data")) {
        let column = |name: &str| batch.column_by_name(name).unwrap_or_else(|| panic!("no column {name}")).clone();
        let (image, label) = (column("image_index"), column("label"));
        let (image, label) = (image.as_any().downcast_ref::<StringArray>().unwrap(), label.as_any().downcast_ref::<StringArray>().unwrap());
        let (nih, p, issue) = (column("nih_label"), column("cl_confidence"), column("cl_label_issue"));
        let nih = nih.as_any().downcast_ref::<BooleanArray>().unwrap();
        let (agreement, class) = (column("agreement"), column("trust_class"));
        let agreement = agreement.as_any().downcast_ref::<Float64Array>().unwrap();
        let class = class.as_any().downcast_ref::<StringArray>().unwrap();
        let p = p.as_any().downcast_ref::<Float64Array>().unwrap();
        let issue = issue.as_any().downcast_ref::<BooleanArray>().unwrap();
        for i in 0..batch.num_rows() {
            rows.push((
                image.value(i).to_string(),
                label.value(i).to_string(),
                nih.value(i),
                (!p.is_null(i)).then(|| p.value(i)),
                (!issue.is_null(i)).then(|| issue.value(i)),
                agreement.value(i),
                class.value(i).to_string(),
            ));
        }
    }
    rows
}

/// Every image row's `cl_false_labels` and `cl_omissions`, by image.
fn image_issue_columns(release: &std::path::Path) -> std::collections::BTreeMap<String, (Vec<String>, Vec<String>)> {
    use arrow_array::{Array, ListArray, StringArray};
    let mut out = std::collections::BTreeMap::new();
    for batch in record_batches(&release.join("data/images")) {
        let image = batch.column_by_name("image_index").unwrap().clone();
        let image = image.as_any().downcast_ref::<StringArray>().unwrap();
        let list = |name: &str, i: usize| -> Vec<String> {
            let column = batch.column_by_name(name).unwrap_or_else(|| panic!("no column {name}"));
            let values = column.as_any().downcast_ref::<ListArray>().unwrap().value(i);
            values.as_any().downcast_ref::<StringArray>().unwrap().iter().map(|v| v.unwrap().to_string()).collect()
        };
        for i in 0..batch.num_rows() {
            out.insert(image.value(i).to_string(), (list("cl_false_labels", i), list("cl_omissions", i)));
        }
    }
    out
}

const CONFIDENT_SIGNAL: &str = "signal:\n  confident_learning:\n    folds: 3\n    grid: [0.1, 1]\n";

/// `signal.confident_learning` in a spec: the build probes every image it scored, each pair row
/// gets the probe's view of NIH's label beside the zero-shot one, the card a table per finding,
/// and the release the probes' report; it verifies, and the bytes do not depend on --jobs. The
/// fixture's features mean nothing: this is the path, not the figures (those are the demo's).
#[test]
fn a_build_asked_for_confident_learning_carries_both_views() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "cl.yaml", CONFIDENT_SIGNAL);
    let a = build(&spec, &s.path("one"), &s.cache(), &["--jobs", "2"]).success();
    let log = stderr(&a);
    // The scoring pass keeps its features: the confident view reads them back, none computed.
    assert!(log.contains("infer: the features of 640 images kept from their scoring pass"), "{log}");
    assert!(log.contains("features: 640 images x 16 (vision_tower_mean), 640 from the cache, 0 computed"), "{log}");
    assert!(log.contains("confident learning: ") && log.contains("(3 folds by patient)"), "{log}");
    bin().arg("verify").arg(s.path("one")).assert().success();

    let rows = confident_columns(&s.path("one"));
    assert!(!rows.is_empty());
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(s.path("one/label_issues.json")).unwrap()).unwrap();
    assert_eq!(report["probes"]["folds"], 3);
    let mut flagged = std::collections::BTreeSet::new();
    for f in report["findings"].as_array().unwrap() {
        for issue in f["issues"].as_array().unwrap() {
            flagged.insert((issue["image_index"].as_str().unwrap().to_string(), f["finding"].as_str().unwrap().to_string()));
        }
    }
    let probed: std::collections::BTreeSet<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rules"].is_object())
        .map(|f| f["finding"].as_str().unwrap().to_string())
        .collect();
    for (image, label, _, p, issue, ..) in &rows {
        if probed.contains(label) {
            let p = p.unwrap_or_else(|| panic!("{image} {label}: no cl_confidence"));
            assert!((0.0..=1.0).contains(&p), "{image} {label}: {p}");
            assert_eq!(issue.unwrap(), flagged.contains(&(image.clone(), label.clone())), "{image} {label}");
        } else {
            assert_eq!((*p, *issue), (None, None), "{label} has no probe");
        }
    }
    assert!(rows.iter().any(|r| r.4 == Some(true)), "some label is named an issue");

    // The image table carries each image's issues, split by what NIH said.
    let mut expected: std::collections::BTreeMap<String, (Vec<String>, Vec<String>)> = Default::default();
    for f in report["findings"].as_array().unwrap().iter().filter(|f| f["finding"] != "No Finding") {
        for issue in f["issues"].as_array().unwrap() {
            let entry = expected.entry(issue["image_index"].as_str().unwrap().to_string()).or_default();
            let list = if issue["nih_label"].as_bool().unwrap() { &mut entry.0 } else { &mut entry.1 };
            list.push(f["finding"].as_str().unwrap().to_string());
        }
    }
    let table = image_issue_columns(&s.path("one"));
    assert_eq!(table.len(), 640, "every image has its row");
    let with_issues: std::collections::BTreeMap<String, (Vec<String>, Vec<String>)> =
        table.into_iter().filter(|(_, (a, b))| !a.is_empty() || !b.is_empty()).collect();
    assert_eq!(with_issues, expected);
    assert!(expected.values().any(|(false_labels, _)| !false_labels.is_empty()), "some image has a label named false");

    // Both views set the class: the answers' class (by agreement) moves only at its extremes.
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(s.path("one/build.lock")).unwrap()).unwrap();
    let threshold = |key: &str| lock["spec"]["signal"][key].as_f64().unwrap();
    let (trusted, review, suspect) =
        (threshold("trusted_min_agreement"), threshold("review_min_agreement"), threshold("suspect_min_agreement"));
    let mut moved = [0usize; 2];
    for (image, label, _, _, issue, agreement, class) in &rows {
        let answers = match *agreement {
            a if a >= trusted => "trusted",
            a if a >= review => "review",
            a if a >= suspect => "suspect",
            _ => "likely_mislabeled",
        };
        let expected = match (answers, *issue) {
            ("likely_mislabeled", Some(false)) => "suspect",
            ("trusted", Some(true)) => "review",
            (class, _) => class,
        };
        assert_eq!(class, expected, "{image} {label}: answers say {answers}, cl_label_issue {issue:?}");
        moved[0] += usize::from(answers == "likely_mislabeled" && class != answers);
        moved[1] += usize::from(answers == "trusted" && class != answers);
    }
    assert!(moved[0] > 0 && moved[1] > 0, "both rules were exercised: {moved:?}");

    // `eval` compares the views. Gold that contradicts NIH exactly where confident learning names
    // an issue: its verdict is then perfect, and the answers' is what the thresholds alone say.
    let mut gold = String::from("image_index,label,value\n");
    let mut answers_doubt = 0;
    for (image, label, nih, _, issue, agreement, _) in &rows {
        if let Some(issue) = issue {
            gold.push_str(&format!("{image},{label},{}\n", u8::from(nih != issue)));
            answers_doubt += usize::from(*agreement < suspect);
        }
    }
    let gold = s.write("gold.csv", &gold);
    let a = bin().arg("eval").arg(s.path("one")).arg("--gold").arg(&gold).args(["--bootstrap", "50"]).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let views = &report["views"];
    let verdict = |view: &str| views[view]["mislabel"]["by_class"][0].clone();
    assert_eq!(verdict("confident_learning")["classes"], "cl_label_issue");
    assert_eq!(
        (verdict("confident_learning")["precision"].as_f64(), verdict("confident_learning")["recall"].as_f64()),
        (Some(1.0), Some(1.0))
    );
    assert_eq!(verdict("answers")["classes"], "likely_mislabeled");
    assert_eq!(verdict("answers")["flagged"].as_u64(), Some(answers_doubt as u64));
    let shipped = rows.iter().filter(|r| r.4.is_some() && r.6 == "likely_mislabeled").count();
    assert_eq!(verdict("both")["flagged"].as_u64(), Some(shipped as u64));
    assert!(views["stacked"]["auroc"].is_number() && views["per_label"].as_object().unwrap().len() >= 2, "{views}");

    // `review plan` ranks by either view or both.
    let issues = rows.iter().filter(|r| r.4 == Some(true)).count();
    let plan = |rank_by: &str| -> serde_json::Value {
        let out = s.path(&format!("plan-{rank_by}.json"));
        let args = ["--budget", "40", "--control-share", "0", "--rank-by", rank_by];
        bin().args(["review", "plan"]).arg(s.path("one")).args(args).arg("--out").arg(&out).assert().success();
        serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
    };
    let by_probes = plan("confident-learning");
    assert_eq!(by_probes["rank_by"], "confident_learning");
    assert_eq!(by_probes["summary"]["by_tier"]["cl_label_issue"].as_u64(), Some(issues.min(40) as u64), "{}", by_probes["summary"]);
    let by_answers = plan("answers");
    assert_eq!(by_answers["rank_by"], "answers");
    let likely = by_answers["summary"]["by_tier"]["likely_mislabeled"].as_u64().unwrap_or(0) as usize;
    let answers_likely = rows.iter().filter(|r| r.5 < suspect).count();
    assert_eq!(likely, answers_likely.min(40), "the answers alone class by the thresholds");
    let both = plan("both");
    assert!(both.get("rank_by").is_none(), "the default is not written: plans before the choice read the same");
    let reasons: Vec<&str> = both["rows"].as_array().unwrap().iter().map(|r| r["reason"].as_str().unwrap()).collect();
    assert!(reasons.iter().any(|r| r.contains("confident learning's")), "{reasons:?}");

    let card = std::fs::read_to_string(s.path("one/README.md")).unwrap();
    assert!(card.contains("### A second view: confident learning over NIH's own labels"), "{card}");
    assert!(card.contains("these probes carry no") && card.contains("`cl_confidence`"), "the fixture's features are said to mean nothing");
    let croissant = std::fs::read_to_string(s.path("one/croissant.json")).unwrap();
    assert!(croissant.contains("cl_confidence") && croissant.contains("cl_label_issue"));

    // One thread, features from the cache: the same bytes.
    let a = build(&spec, &s.path("two"), &s.cache(), &["--jobs", "1"]).success();
    assert!(stderr(&a).contains("640 from the cache, 0 computed"), "{}", stderr(&a));
    assert_eq!(tree_digest(&s.path("one")), tree_digest(&s.path("two")));
}

#[test]
fn a_release_without_confident_learning_cannot_be_ranked_by_it() {
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("s1a"), &s.cache(), &[]).success();
    let a = bin()
        .args(["review", "plan"])
        .arg(s.path("s1a"))
        .args(["--budget", "10", "--rank-by", "confident-learning", "--out"])
        .arg(s.path("plan.json"))
        .assert()
        .failure();
    assert!(stderr(&a).contains("no view of confident learning to rank by (no cl_confidence)"), "{}", stderr(&a));
    assert!(!s.path("plan.json").exists());
}

/// `calibrate --joint` on a release with confident learning fits a rule over the answers and
/// the probes; a spec naming it builds a release whose classes follow the rule where a finding
/// has a probe, whose card states it, and whose evaluation cross-fits the rows it was fitted on.
/// The rule is refused by a spec without confident learning, and under other probes.
#[test]
fn a_rule_fitted_over_both_views_sets_the_classes() {
    let s = Scratch::new();
    let spec = derived_spec(&s, "cl.yaml", CONFIDENT_SIGNAL);
    let (release, rule) = (s.path("cl"), s.path("rule.json"));
    build(&spec, &release, &s.cache(), &[]).success();
    let truth = repo().join("fixtures/sample/truth.csv");
    let calibrate = bin().arg("calibrate").arg(&release).arg("--gold").arg(&truth).arg("--joint").arg("--out").arg(&rule).assert();
    let said = stdout(&calibrate.success());
    assert!(said.contains("wrote the joint rule of the answers and confident learning (release s1a against truth.csv"), "{said}");
    let table: serde_json::Value = serde_json::from_slice(&std::fs::read(&rule).unwrap()).unwrap();
    assert_eq!(table["second_view"], "confident_learning");
    assert!(table["scorers"]["confident_learning_sha256"].is_string(), "{table}");

    let fitted_spec = s.write("fitted.yaml", &format!("extends: {}\nsignal:\n  joint_rule: {}\n", spec.display(), rule.display()));
    let fitted = s.path("fitted");
    build(&fitted_spec, &fitted, &s.cache(), &[]).success();
    bin().arg("verify").arg(&fitted).assert().success();
    // The lock carries the rule: an audit rebuilds the same bytes.
    let audit = bin().args(["rebuild", "--audit"]).arg(&fitted).arg("--spec").arg(&fitted_spec).assert().success();
    assert!(stdout(&audit).contains("PASS: every file is identical"), "{}", stdout(&audit));
    let rule_table = bpals_release::signal::joint_rule::JointRule::read_with_bytes(&rule).unwrap().0;
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(fitted.join("build.lock")).unwrap()).unwrap();
    let threshold = |key: &str| lock["spec"]["signal"][key].as_f64().unwrap();
    let (trusted, review, suspect) =
        (threshold("trusted_min_agreement"), threshold("review_min_agreement"), threshold("suspect_min_agreement"));
    let (before, after) = (confident_columns(&release), confident_columns(&fitted));
    assert_eq!(before.len(), after.len());
    let mut changed = 0;
    for (was, (image, label, nih, p, _, agreement, class)) in before.iter().zip(&after) {
        assert_eq!((&was.0, &was.1, was.5), (image, label, *agreement), "the answers' columns stay the answers'");
        let Some(p) = *p else {
            assert_eq!(&was.6, class, "{image} {label}: no probe, the answers' class");
            continue;
        };
        let present = |v: f64| if *nih { v } else { 1.0 - v };
        let joint = rule_table.apply(label, present(*agreement), present(p));
        let expected = match present(joint) {
            a if a >= trusted => "trusted",
            a if a >= review => "review",
            a if a >= suspect => "suspect",
            _ => "likely_mislabeled",
        };
        assert_eq!(class, expected, "{image} {label}");
        changed += usize::from(&was.6 != class);
    }
    assert!(changed > 0, "the rule moved some class");
    let card = std::fs::read_to_string(fitted.join("README.md")).unwrap();
    assert!(card.contains("**The views' rule.**") && card.contains("rule.json`"), "{card}");
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(fitted.join("eval.json")).unwrap()).unwrap();
    assert!(eval["joint_rule"]["cross_fitted_rows"].as_u64().unwrap() > 0, "{}", eval["joint_rule"]);

    // Without confident learning the rule has no second view; under other probes, other probabilities.
    let without = s.write("without.yaml", &format!("extends: {}\nsignal:\n  joint_rule: {}\n", fixture_s1a().display(), rule.display()));
    let err = stderr(&build(&without, &s.path("without"), &s.cache(), &[]).failure());
    assert!(err.contains("signal.joint_rule") && err.contains("nor signal.confident_learning"), "{err}");
    let other = s.write(
        "other.yaml",
        &format!("extends: {}\nsignal:\n  confident_learning:\n    folds: 4\n  joint_rule: {}\n", fixture_s1a().display(), rule.display()),
    );
    let err = stderr(&build(&other, &s.path("other"), &s.cache(), &[]).failure());
    assert!(err.contains("was fitted on other scores") && err.contains("with confident learning"), "{err}");
    // A two-family rule (no `second_view`) in a one-family spec is refused by what it combines.
    let mut family_rule = table.clone();
    family_rule.as_object_mut().unwrap().remove("second_view");
    let family_file = s.write("family-rule.json", &serde_json::to_string(&family_rule).unwrap());
    let family = s.write("family.yaml", &format!("extends: {}\nsignal:\n  joint_rule: {}\n", spec.display(), family_file.display()));
    let err = stderr(&build(&family, &s.path("family"), &s.cache(), &[]).failure());
    assert!(err.contains("combines two families") && err.contains("no second_opinion"), "{err}");
    assert!(!s.path("without").exists() && !s.path("other").exists() && !s.path("family").exists());
}

/// `features` chooses the vector the probes read: build.lock and the card say which, and each
/// definition has its own cache entries (a build under the other reads none of them).
#[test]
fn the_features_definition_is_the_specs_and_keeps_its_own_cache_entries() {
    let s = Scratch::new();
    let tower = derived_spec(&s, "tower.yaml", CONFIDENT_SIGNAL);
    let log = stderr(&build(&tower, &s.path("tower"), &s.cache(), &[]).success());
    assert!(log.contains("(vision_tower_mean), 640 from the cache, 0 computed"), "{log}");
    let lock = std::fs::read_to_string(s.path("tower/build.lock")).unwrap();
    assert!(!lock.contains("\"features\""), "the default is not written, so earlier releases keep their bytes");

    let decoder = derived_spec(&s, "decoder.yaml", &format!("{CONFIDENT_SIGNAL}    features: decoder_prefix_end\n"));
    let log = stderr(&build(&decoder, &s.path("decoder"), &s.cache(), &[]).success());
    // The scores come from the cache, so no scoring pass kept these: all computed.
    assert!(log.contains("(decoder_prefix_end), 0 from the cache, 640 computed"), "{log}");
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(s.path("decoder/build.lock")).unwrap()).unwrap();
    assert_eq!(lock["spec"]["signal"]["confident_learning"]["features"], "decoder_prefix_end");
    let card = std::fs::read_to_string(s.path("decoder/README.md")).unwrap();
    assert!(card.contains("decoder_prefix_end"), "the card names the features");
    let issues = |dir: &str| std::fs::read(s.path(&format!("{dir}/label_issues.json"))).unwrap();
    assert_ne!(issues("tower"), issues("decoder"), "other vectors, other probes");
    bin().arg("verify").arg(s.path("decoder")).assert().success();
}

#[test]
fn confident_learning_settings_are_checked_with_their_key() {
    let s = Scratch::new();
    for (yaml, expected) in [
        ("signal:\n  confident_learning:\n    folds: 2\n", "folds is 2: expected 3 to 20"),
        ("signal:\n  confident_learning:\n    grid: [1, 0.1]\n", "ascending"),
        ("signal:\n  confident_learning:\n    grid: []\n", "at least one positive"),
        ("signal:\n  confident_learning:\n    fold: 5\n", "unknown field `fold`"),
        ("signal:\n  confident_learning:\n    features: tower\n", "unknown variant `tower`"),
    ] {
        let spec = derived_spec(&s, "bad.yaml", yaml);
        let err = stderr(&build(&spec, &s.path("out"), &s.cache(), &[]).failure());
        assert!(err.contains("confident_learning") && err.contains(expected), "{yaml}: {err}");
        assert!(!s.path("out").exists());
    }
}
