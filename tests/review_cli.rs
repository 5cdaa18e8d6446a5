//! `bpals-release review`: a plan on the sample, its Label Studio export, an import of answers in
//! Label Studio's JSON export layout, the lift in `eval` and in the card, and the bad inputs.
//! (The round trip through a real Label Studio server is tests/python/test_label_studio.py.)

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

fn release(s: &Scratch) -> PathBuf {
    let out = s.path("s1a");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    out
}

fn truth() -> PathBuf {
    repo().join("fixtures/sample/truth.csv")
}

fn plan(s: &Scratch, release: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = s.path(name);
    bin().args(["review", "plan"]).arg(release).args(["--budget", "10%", "--out"]).arg(&out).args(extra).assert().success();
    out
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn export(s: &Scratch, release: &Path, plan: &Path, extra: &[&str]) -> PathBuf {
    let out = s.path("ls");
    bin()
        .args(["review", "export"])
        .arg(release)
        .arg("--plan")
        .arg(plan)
        .arg("--images")
        .arg(repo().join("fixtures/sample/images"))
        .arg("--out")
        .arg(&out)
        .args(extra)
        .assert()
        .success();
    out
}

/// The sample's truth for one row: 1 if the finding is present.
fn truth_of(image: &str, label: &str) -> bool {
    let text = std::fs::read_to_string(truth()).unwrap();
    text.lines().any(|l| l.starts_with(&format!("{image},{label},1,")))
}

/// What Label Studio's JSON export holds after reviewers answered `tasks` (as tests/python's
/// round trip does it through the real server): `answer(reviewer, image, label)` gives each answer.
fn answered(tasks: &Value, reviewers: &[&str], answer: impl Fn(usize, &str, &str) -> &'static str) -> Value {
    let tasks = tasks.as_array().unwrap();
    let exported: Vec<Value> = tasks
        .iter()
        .enumerate()
        .map(|(t, task)| {
            let data = &task["data"];
            let image = data["image_index"].as_str().unwrap();
            let annotations: Vec<Value> = reviewers
                .iter()
                .enumerate()
                .map(|(r, _)| {
                    let result: Vec<Value> = data["questions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .enumerate()
                        .map(|(i, q)| {
                            json!({"from_name": format!("answer_{i}"), "to_name": "image", "type": "choices",
                                   "value": {"choices": [answer(r, image, q["label"].as_str().unwrap())]}})
                        })
                        .collect();
                    json!({"id": t * 10 + r, "completed_by": r + 1, "result": result, "was_cancelled": false,
                           "created_at": "2026-11-25T10:00:00Z", "updated_at": "2026-11-25T10:00:00Z"})
                })
                .collect();
            json!({"id": t + 1, "data": data, "annotations": annotations})
        })
        .collect();
    Value::Array(exported)
}

#[test]
fn a_plan_on_the_sample_finds_errors_at_several_times_the_random_rate() {
    let s = Scratch::new();
    let out = release(&s);
    let plan_path = plan(&s, &out, "plan.json", &[]);
    let p = read_json(&plan_path);
    let rows = p["rows"].as_array().unwrap();
    let split_rows = p["split_rows"].as_u64().unwrap() as usize;
    assert_eq!(rows.len(), (split_rows as f64 * 0.1).round() as usize, "a 10% budget");
    assert_eq!(p["summary"]["control"].as_u64().unwrap() as usize, (rows.len() as f64 * 0.2).round() as usize);
    assert!(rows.iter().all(|r| !r["reason"].as_str().unwrap().is_empty()));
    // Grouped by image: an image's rows are next to each other.
    let images: Vec<&str> = rows.iter().map(|r| r["image_index"].as_str().unwrap()).collect();
    let mut sorted = images.clone();
    sorted.sort();
    assert_eq!(images, sorted);
    let csv = std::fs::read_to_string(plan_path.with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    // The same seed gives the same plan, byte for byte; another seed another control.
    let again = plan(&s, &out, "again.json", &[]);
    assert_eq!(std::fs::read(&plan_path).unwrap(), std::fs::read(&again).unwrap());
    let other = read_json(&plan(&s, &out, "other.json", &["--seed", "7"]));
    let control = |p: &Value| -> Vec<String> {
        p["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["arm"] == "control")
            .map(|r| format!("{}{}", r["image_index"], r["label"]))
            .collect()
    };
    assert_ne!(control(&p), control(&other));

    // The sample's truth stands in for the reviewers: the errors per arm, counted here from the
    // truth, are the report's. (The fixture scorer knows nothing of the truth, so its lift is
    // modest; the demo's trained model is held to 4x in tests/vlm_build.rs.)
    let a = bin()
        .arg("eval")
        .arg(&out)
        .arg("--gold")
        .arg(truth())
        .arg("--review-plan")
        .arg(&plan_path)
        .args(["--bootstrap", "300"])
        .assert()
        .success();
    let report: Value = serde_json::from_str(&stdout(&a)).unwrap();
    let review = &report["review"];
    for arm in ["targeted", "control"] {
        let planned: Vec<&Value> = rows.iter().filter(|r| r["arm"] == arm).collect();
        let errors = planned
            .iter()
            .filter(|r| truth_of(r["image_index"].as_str().unwrap(), r["label"].as_str().unwrap()) != r["nih_label"].as_bool().unwrap())
            .count();
        assert_eq!(review[arm]["reviewed"].as_u64().unwrap() as usize, planned.len(), "{arm}");
        assert_eq!(review[arm]["errors"].as_u64().unwrap() as usize, errors, "{arm}");
    }
    assert_eq!(review["split"]["reviewed"].as_u64().unwrap() as usize, split_rows);
    let (per_100, split_per_100) =
        (review["targeted"]["errors_per_100"].as_f64().unwrap(), review["split"]["errors_per_100"].as_f64().unwrap());
    assert!((review["lift_over_split"].as_f64().unwrap() - per_100 / split_per_100).abs() < 1e-9);
    assert!(per_100 > split_per_100, "the signal's doubt finds more errors than random review: {per_100} against {split_per_100}");
}

#[test]
fn export_and_import_round_trip_with_two_reviewers() {
    let s = Scratch::new();
    let out = release(&s);
    let plan_path = plan(&s, &out, "plan.json", &[]);
    let p = read_json(&plan_path);
    let ls = export(&s, &out, &plan_path, &[]);
    let tasks = read_json(&ls.join("tasks.json"));
    let config = std::fs::read_to_string(ls.join("labeling-config.xml")).unwrap();
    assert!(config.contains(r#"<Repeater on="$questions""#) && config.contains(r#"name="answer_{{idx}}""#));
    let images: std::collections::BTreeSet<&str> =
        p["rows"].as_array().unwrap().iter().map(|r| r["image_index"].as_str().unwrap()).collect();
    assert_eq!(tasks.as_array().unwrap().len(), images.len(), "one task per image");
    let first = &tasks[0]["data"];
    assert!(first["image"].as_str().unwrap().starts_with("/data/local-files/?d="), "{}", first["image"]);
    assert!(!first["questions"][0]["prompt"].as_str().unwrap().contains("model"), "the model's opinion is hidden by default");
    let shown = read_json(&export(&s, &out, &plan_path, &["--show-model"]).join("tasks.json"));
    assert!(shown[0]["data"]["questions"][0]["prompt"].as_str().unwrap().contains("The model's confidence"));

    // Reviewer 1 answers the truth; reviewer 2 too, except "uncertain" on every fifth image's rows
    // and the opposite answer on every seventh.
    let mut export_json = answered(&tasks, &["r1", "r2"], |r, image, label| {
        let n: usize = image[..8].parse().unwrap();
        let t = truth_of(image, label);
        match (r, n.is_multiple_of(5), n.is_multiple_of(7)) {
            (1, true, _) => "uncertain",
            (1, _, true) => {
                if t {
                    "absent"
                } else {
                    "present"
                }
            }
            _ => {
                if t {
                    "present"
                } else {
                    "absent"
                }
            }
        }
    });
    // A third task skipped by reviewer 1 (cancelled), then answered; reviewer 1 changes an answer
    // on the first task (a later annotation supersedes the earlier).
    let cancelled = json!({"id": 9001, "completed_by": 1, "result": [], "was_cancelled": true, "updated_at": "2026-11-25T09:00:00Z"});
    export_json[2]["annotations"].as_array_mut().unwrap().push(cancelled);
    let mut early = export_json[0]["annotations"][0].clone();
    early["updated_at"] = json!("2026-11-25T08:00:00Z");
    early["result"][0]["value"]["choices"] = json!(["uncertain"]);
    export_json[0]["annotations"].as_array_mut().unwrap().push(early);
    let export_path = s.write("export.json", &serde_json::to_string(&export_json).unwrap());

    let gold = s.path("gold.csv");
    let a = bin()
        .args(["review", "import"])
        .arg(&export_path)
        .arg("--plan")
        .arg(&plan_path)
        .arg("--out")
        .arg(&gold)
        .arg("--json")
        .assert()
        .success();
    let report: Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["tasks"].as_u64().unwrap() as usize, images.len());
    assert_eq!(report["cancelled_annotations"], 1);
    assert_eq!(report["superseded_annotations"], 1);
    assert_eq!(report["reviewers"].as_object().unwrap().len(), 2);
    assert!(report["tied_rows"].as_u64().unwrap() > 0, "reviewer 2 contradicts reviewer 1 on some rows");
    let kappa = report["agreement"]["fleiss_kappa"].as_f64().unwrap();
    assert!(kappa > 0.0 && kappa < 1.0, "kappa {kappa}");
    assert!(gold.with_extension("report.json").is_file());
    // Every gold row agrees with the truth: where the reviewers disagreed there is no verdict.
    let text = std::fs::read_to_string(&gold).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), report["gold_rows"].as_u64().unwrap() as usize);
    for line in &rows {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[2] == "1", truth_of(f[0], f[1]), "{line}");
    }
    // The imported gold evaluates with the plan: the rows it judged are reviewed.
    let a = bin()
        .arg("eval")
        .arg(&out)
        .arg("--gold")
        .arg(&gold)
        .arg("--review-plan")
        .arg(&plan_path)
        .args(["--bootstrap", "100"])
        .assert()
        .success();
    let eval: Value = serde_json::from_str(&stdout(&a)).unwrap();
    let reviewed = eval["review"]["targeted"]["reviewed"].as_u64().unwrap() + eval["review"]["control"]["reviewed"].as_u64().unwrap();
    assert_eq!(reviewed as usize, rows.len());
    assert!(eval["review"].get("split").is_none(), "the gold judges only the plan's rows");
}

#[test]
fn a_build_with_the_reviewed_gold_reports_the_lift_in_its_card() {
    let s = Scratch::new();
    let out = release(&s);
    let plan_path = plan(&s, &out, "plan.json", &[]);
    let yaml = format!("evaluation:\n  gold: {}\n  review_plan: {}\n", truth().display(), plan_path.display());
    let spec = derived_spec(&s, "reviewed.yaml", &yaml);
    let rebuilt = s.path("reviewed");
    build(&spec, &rebuilt, &s.cache(), &[]).success();
    let card = std::fs::read_to_string(rebuilt.join("README.md")).unwrap();
    assert!(card.contains("**Expert review** of the rows in review plan `plan.json`"), "the card names the plan");
    assert!(card_row(&card, "chosen by the signal").contains(" | "));
    bin().arg("verify").arg(&rebuilt).assert().success();

    // A review plan without gold labels is named as the mistake.
    let spec = derived_spec(&s, "plan-only.yaml", &format!("evaluation:\n  review_plan: {}\n", plan_path.display()));
    let a = build(&spec, &s.path("x"), &s.cache(), &[]).failure();
    assert!(stderr(&a).contains("evaluation.review_plan"), "{}", stderr(&a));
}

#[test]
fn bad_inputs_are_named_and_nothing_is_half_written() {
    let s = Scratch::new();
    let out = release(&s);
    let plan_path = plan(&s, &out, "plan.json", &[]);
    let fails = |args: &[&std::ffi::OsStr]| stderr(&bin().args(args).assert().failure());

    // A budget larger than the split.
    let err = fails(&[
        "review".as_ref(),
        "plan".as_ref(),
        out.as_os_str(),
        "--budget".as_ref(),
        "100000".as_ref(),
        "--out".as_ref(),
        s.path("big.json").as_os_str(),
    ]);
    assert!(err.contains("a budget of 100000 rows is more than the `trial` split holds"), "{err}");
    assert!(!s.path("big.json").exists());
    let err = fails(&[
        "review".as_ref(),
        "plan".as_ref(),
        out.as_os_str(),
        "--budget".as_ref(),
        "10".as_ref(),
        "--split".as_ref(),
        "full".as_ref(),
    ]);
    assert!(err.contains("has no `full` split (it has: trial)"), "{err}");

    // A plan made for another build of the release.
    let other = s.path("other");
    copy_tree(&out, &other);
    let manifest = other.join("manifest.json");
    let mut bytes = std::fs::read(&manifest).unwrap();
    bytes.push(b'\n');
    std::fs::write(&manifest, bytes).unwrap();
    let ls = s.path("ls-other");
    let images = repo().join("fixtures/sample/images");
    let err = fails(&[
        "review".as_ref(),
        "export".as_ref(),
        other.as_os_str(),
        "--plan".as_ref(),
        plan_path.as_os_str(),
        "--images".as_ref(),
        images.as_os_str(),
        "--out".as_ref(),
        ls.as_os_str(),
    ]);
    assert!(err.contains("the plan was made for release s1a 1.0.0") && err.contains("is another build"), "{err}");
    assert!(!ls.exists());
    // A hand-edited digest, too short to abbreviate, is named as it is.
    let mut edited = read_json(&plan_path);
    edited["release_manifest_sha256"] = json!("abc");
    let edited = s.write("edited.json", &edited.to_string());
    let err = fails(&[
        "review".as_ref(),
        "export".as_ref(),
        out.as_os_str(),
        "--plan".as_ref(),
        edited.as_os_str(),
        "--images".as_ref(),
        images.as_os_str(),
        "--out".as_ref(),
        ls.as_os_str(),
    ]);
    assert!(err.contains("(manifest abc), but") && err.contains("is another build"), "{err}");

    // Images missing under --images.
    let empty = s.path("no-images");
    std::fs::create_dir_all(&empty).unwrap();
    let err = fails(&[
        "review".as_ref(),
        "export".as_ref(),
        out.as_os_str(),
        "--plan".as_ref(),
        plan_path.as_os_str(),
        "--images".as_ref(),
        empty.as_os_str(),
        "--out".as_ref(),
        ls.as_os_str(),
    ]);
    assert!(err.contains("of the plan's") && err.contains("images are missing under"), "{err}");
    assert!(!ls.exists());

    // Exports that are not this plan's Label Studio JSON.
    let gold = s.path("gold.csv");
    let import = |file: &Path| {
        fails(&[
            "review".as_ref(),
            "import".as_ref(),
            file.as_os_str(),
            "--plan".as_ref(),
            plan_path.as_os_str(),
            "--out".as_ref(),
            gold.as_os_str(),
        ])
    };
    let other_project = s.write("other-project.json", r#"[{"id": 1, "data": {"image": "x.png"}, "annotations": []}]"#);
    assert!(import(&other_project).contains("was not written by `bpals-release review export`"));
    let csv = s.write("export.csv", "id,image,answer_0\n1,x.png,present\n");
    assert!(import(&csv).contains("this is a CSV or TSV export; export the project from Label Studio as JSON"));
    let coco = s.write("coco.json", r#"{"images": [], "annotations": [], "categories": [], "info": {}}"#);
    assert!(import(&coco).contains("this is a COCO export"));
    let ls = export(&s, &out, &plan_path, &[]);
    let err = import(&ls.join("tasks.json"));
    assert!(err.contains("this is the task list `review export` wrote"), "{err}");
    let exported = answered(&read_json(&ls.join("tasks.json")), &["r1"], |_, _, _| "present");
    let mut tasks = exported.clone();
    tasks[0]["data"]["bpals"]["plan_sha256"] = json!("f".repeat(64));
    let foreign = s.write("foreign.json", &tasks.to_string());
    let err = import(&foreign);
    assert!(err.contains("its tasks were exported from another plan"), "{err}");
    let mut tasks = exported.clone();
    tasks[0]["data"]["bpals"]["labels"][0] = json!("Hernia");
    tasks[0]["data"]["image_index"] = json!("99999999_000.png");
    let stray = s.write("stray.json", &tasks.to_string());
    assert!(import(&stray).contains("which the plan does not hold"));
    assert!(!gold.exists(), "no gold file after a refused import");

    // A plan for another release in eval.
    let truth = truth();
    let mut p = read_json(&plan_path);
    p["release_id"] = json!("s1b");
    let renamed = s.write("renamed.json", &p.to_string());
    let err =
        fails(&["eval".as_ref(), out.as_os_str(), "--gold".as_ref(), truth.as_os_str(), "--review-plan".as_ref(), renamed.as_os_str()]);
    assert!(err.contains("it was made for release s1b, not s1a"), "{err}");
}

/// Reviewers' exports are untrusted: with or without a plan, image names follow NIH's rule,
/// labels come from the vocabulary, each task and each row is answered once per reviewer, and
/// the release's digest is present, well formed and the plan's; the gold CSV opens in a
/// spreadsheet without running anything.
#[test]
fn hostile_exports_are_refused_with_or_without_a_plan() {
    let s = Scratch::new();
    let out = release(&s);
    let plan_path = plan(&s, &out, "plan.json", &[]);
    let ls = export(&s, &out, &plan_path, &[]);
    let exported = answered(&read_json(&ls.join("tasks.json")), &["r1"], |_, _, _| "present");
    let gold = s.path("gold.csv");
    let import = |name: &str, tasks: &Value, with_plan: bool| {
        let file = s.write(name, &tasks.to_string());
        let mut cmd = bin();
        cmd.args(["review", "import"]).arg(&file).arg("--out").arg(&gold);
        if with_plan {
            cmd.arg("--plan").arg(&plan_path);
        }
        cmd.assert()
    };
    let refused = |name: &str, tasks: &Value, with_plan: bool| {
        let err = stderr(&import(name, tasks, with_plan).failure());
        assert!(!gold.exists(), "{name}: no gold file after a refused import");
        err
    };
    for with_plan in [false, true] {
        let mut t = exported.clone();
        t[0]["data"]["image_index"] = json!("=HYPERLINK(\"http://example.com\",\"x\")");
        let err = refused("formula-image.json", &t, with_plan);
        assert!(err.contains("is not an NIH image name"), "{err}");

        let mut t = exported.clone();
        t[0]["data"]["bpals"]["labels"][0] = json!("=1+2");
        let err = refused("formula-label.json", &t, with_plan);
        assert!(err.contains("label \"=1+2\" is not one of NIH ChestX-ray14's 15 labels"), "{err}");

        let mut t = exported.clone();
        let copy = t[0].clone();
        t.as_array_mut().unwrap().push(copy);
        let err = refused("duplicate-task.json", &t, with_plan);
        assert!(err.contains("appears twice"), "{err}");

        let mut t = exported.clone();
        let mut copy = t[0].clone();
        copy["id"] = json!(999);
        t.as_array_mut().unwrap().push(copy);
        let err = refused("same-rows.json", &t, with_plan);
        assert!(err.contains("task 999 asks about") && err.contains("one answer per row and reviewer"), "{err}");

        let mut t = exported.clone();
        let again = t[0]["annotations"][0]["result"][0].clone();
        t[0]["annotations"][0]["result"].as_array_mut().unwrap().push(again);
        let err = refused("answered-twice.json", &t, with_plan);
        assert!(err.contains("`answer_0` is answered twice"), "{err}");

        for digest in [json!("0".repeat(64)), json!("abc"), Value::Null] {
            let mut t = exported.clone();
            for task in t.as_array_mut().unwrap() {
                task["data"]["bpals"]["release_manifest_sha256"] = digest.clone();
            }
            let err = refused("digest.json", &t, with_plan);
            assert!(err.contains("bpals.release_manifest_sha256"), "{digest}: {err}");
        }
    }
    // Another release's tasks under this plan: a well-formed digest, not the plan's.
    let mut t = exported.clone();
    for task in t.as_array_mut().unwrap() {
        task["data"]["bpals"]["release_manifest_sha256"] = json!("e".repeat(64));
    }
    let err = refused("other-release.json", &t, true);
    assert!(err.contains("its tasks name release manifest eeeeeeeeeeee") && err.contains("was planned on release s1a"), "{err}");

    // What passes writes cells a spreadsheet takes as text.
    import("good.json", &exported, false).success();
    let text = std::fs::read_to_string(&gold).unwrap();
    assert!(text.lines().count() > 1, "{text}");
    for cell in text.lines().flat_map(|l| l.split(',')) {
        assert!(!cell.starts_with(['=', '+', '-', '@', '\t', '\r']), "{cell:?}");
    }
}
