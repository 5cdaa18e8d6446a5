//! The committed specs carry the product facts, compose with `extends`, and gate correctly.

mod common;

use bpals_release::release_spec::{self, Split, Status, Tier, Visibility};
use common::*;

fn load(name: &str) -> Result<release_spec::ReleaseSpec, release_spec::SpecError> {
    release_spec::load_with_env(&spec(name), |_| None)
}

#[test]
fn s1a_and_s1b_carry_the_facts() {
    let a = load("s1a.yaml").unwrap();
    assert_eq!((a.release.id.as_str(), a.release.date.as_str()), ("s1a", "2026-05-26"));
    assert_eq!((a.release.status, a.release.tier), (Status::Confirmed, Tier::Trial));
    assert_eq!(a.selection.curated_images, 4628);
    assert_eq!(a.selection.expected_rows, Some(6598));
    assert_eq!(a.selection.trial.as_ref().unwrap().rows, 1000);
    assert_eq!(a.output.splits, vec![Split::Trial]);
    assert_eq!(a.publish.visibility, Visibility::Public);
    assert!(!a.source.embedded_sample, "the spec alone has not looked at its source root");
    let resolved = bpals_release::inputs::resolve(a.clone()).unwrap();
    assert!(resolved.source.embedded_sample, "no BPALS_NIH_ROOT: the sample");
    assert_eq!(a.signal.tau, 3.0);

    let b = load("s1b.yaml").unwrap();
    assert_eq!((b.release.id.as_str(), b.release.date.as_str()), ("s1b", "2026-07-15"));
    assert_eq!(b.release.tier, Tier::Standard);
    assert_eq!(b.output.splits, vec![Split::Full, Split::Trial]);
    assert_eq!(b.publish.visibility, Visibility::Gated);
    // Inherited from s1a, resolved against s1a's folder.
    assert_eq!(b.prompts.hash(), a.prompts.hash());
    assert_eq!(b.source.root, a.source.root);
    assert_eq!(b.publish.tag_for(&b.release), "s1b-v1.0.0");
}

/// The commented real-model example: Qwen3-VL-8B in the native engine, nothing of S1a's demo
/// model inherited, and not publishable until its revision is a commit.
#[test]
fn the_qwen3_vl_example_names_a_real_model() {
    let q = load("models/qwen3-vl-8b.yaml").unwrap();
    assert_eq!(q.model.backend, release_spec::Backend::Native);
    assert_eq!((q.model.id.as_str(), q.model.weight_license.as_str()), ("Qwen/Qwen3-VL-8B-Instruct", "apache-2.0"));
    assert!(q.model.path.is_none() && q.model.demo_weights.is_none(), "S1a's tiny model is not inherited");
    assert_eq!(q.prompts.hash(), load("s1a.yaml").unwrap().prompts.hash());
}

#[test]
fn the_qwen3_5_example_names_a_real_model() {
    let q = load("models/qwen3.5-9b.yaml").unwrap();
    assert_eq!(q.model.backend, release_spec::Backend::Native);
    assert_eq!((q.model.id.as_str(), q.model.weight_license.as_str()), ("Qwen/Qwen3.5-9B", "apache-2.0"));
    assert!(q.model.path.is_none() && q.model.demo_weights.is_none(), "S1a's tiny model is not inherited");
    assert_eq!(q.prompts.hash(), load("s1a.yaml").unwrap().prompts.hash());
}

#[test]
fn s3_and_s4_resolve_with_their_prompts() {
    let s3 = load("s3.yaml").unwrap();
    let reasoning = s3.prompts.reasoning.as_ref().expect("S3 asks for reasoning");
    assert!(!reasoning.per_row(), "the sample's question is about the whole image");
    assert!(s3.prompts.report.is_none() && s3.prompts.location.is_some(), "S3 extends S2, not S4");
    let s4 = load("s4.yaml").unwrap();
    assert_eq!(s4.prompts.report.as_ref().map(|r| r.conditioning), Some(release_spec::narrative::Conditioning::ImageOnly));
    let s2 = load("s2.yaml").unwrap();
    assert_ne!(s3.prompts.hash(), s2.prompts.hash(), "the reasoning prompt is part of the prompt set");
    // The scores depend on the questions alone: S3 and S4 ask S2's, so they share its scores.
    assert_eq!(s3.prompts.questions_hash(), s2.prompts.questions_hash());
    assert_eq!(s4.prompts.questions_hash(), s2.prompts.questions_hash());
    assert_ne!(s2.prompts.questions_hash(), load("s1b.yaml").unwrap().prompts.questions_hash(), "S2 adds side and zone questions");
}

#[test]
fn the_series_lists_every_release_in_date_order() {
    let series = release_spec::series::load_series(&repo().join("specs")).unwrap();
    let ids: Vec<&str> = series.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["s1a", "s1b", "s2", "s3", "s4"]);
    assert_eq!(series[2].status, Status::Tentative);
}

#[test]
fn an_env_var_points_the_source_elsewhere() {
    let s = release_spec::load_with_env(&spec("s1a.yaml"), |name| (name == "BPALS_NIH_ROOT").then(|| "/data/nih".to_string())).unwrap();
    assert_eq!(s.source.root, std::path::PathBuf::from("/data/nih"));
    assert_eq!(s.source.root_as_written, "/data/nih");
    assert!(!s.source.embedded_sample);
    let reasons = release_spec::gates::demo_reasons(&s);
    assert!(reasons.iter().any(|r| r.contains("no pinned sha256")), "{reasons:?}");
}

#[test]
fn the_spec_hash_ignores_the_machine_but_not_the_content() {
    let resolve = |spec| bpals_release::inputs::resolve(spec).unwrap();
    let a = resolve(load("s1a.yaml").unwrap());
    let b = resolve(release_spec::load_with_env(&spec("s1a.yaml"), |_| None).unwrap());
    assert_eq!(a.hash(), b.hash());
    let s = Scratch::new();
    let tweaked = derived_spec(&s, "tweak.yaml", "signal:\n  tau: 2.0\n");
    let c = resolve(release_spec::load_with_env(&tweaked, |_| None).unwrap());
    assert_ne!(a.hash(), c.hash());
}

#[test]
fn a_spec_that_names_another_model_inherits_none_of_the_parents_model_identity() {
    let s = Scratch::new();
    let base = release_spec::load_with_env(&spec("s1a.yaml"), |_| None).unwrap();
    assert_eq!(base.model.path.as_deref(), Some("../fixtures/vlm/trained/qwen2_vl"));
    assert_eq!(base.model.demo_weights, Some(release_spec::DemoWeights::Synthetic));
    // Swapping in a hub model drops the local path (and so the tiny fixture) and needs its own revision.
    let byo = s.write(
        "byo.yaml",
        &format!("extends: {}\nmodel:\n  id: Qwen/Qwen2-VL-2B-Instruct\n  weight_license: apache-2.0\n", spec("s1a.yaml").display()),
    );
    let err = release_spec::load_with_env(&byo, |_| None).unwrap_err().to_string();
    assert!(err.contains("model.revision"), "{err}");
    // Keys that are not the model's identity are still inherited.
    let dtype = s.write("dtype.yaml", &format!("extends: {}\nmodel:\n  dtype: f32\n", spec("s1a.yaml").display()));
    let m = release_spec::load_with_env(&dtype, |_| None).unwrap().model;
    assert_eq!(
        (m.id.as_str(), m.path.is_some(), m.demo_weights),
        ("bpals/tiny-qwen2-vl-synthetic", true, Some(release_spec::DemoWeights::Synthetic))
    );
}

#[test]
fn the_pledge_schedule_comes_with_the_giving_pledge_addition_on_a_commercial_tier() {
    let b = load("s1b.yaml").unwrap();
    let pledge = b.pledge.as_ref().expect("s1b carries the pledge");
    assert_eq!(pledge.step_on(&b.release.date).map(|s| s.percent), Some(1.0), "1% from S1b on");
    assert_eq!(pledge.goal_percent, Some(10.0));
    assert!(load("s1a.yaml").unwrap().pledge.is_none());

    let s = Scratch::new();
    let from_s1b = |name: &str, yaml: &str| {
        let path = s.write(name, &format!("extends: {}\n{yaml}", spec("s1b.yaml").display()));
        release_spec::load_with_env(&path, |_| None).map_err(|e| e.to_string())
    };
    let err = from_s1b("no_addition.yaml", "additions: [payment_activation]\n").unwrap_err();
    assert!(err.contains("pledge") && err.contains("is set but additions does not list the 1% giving pledge"), "{err}");
    let err = from_s1b("trial.yaml", "release:\n  tier: trial\n").unwrap_err();
    assert!(err.contains("only sales carry a pledge"), "{err}");
    let err = from_s1b(
        "backwards.yaml",
        "pledge:\n  schedule:\n    - { from: 2027-01-01, percent: 2 }\n    - { from: 2026-07-15, percent: 3 }\n",
    )
    .unwrap_err();
    assert!(err.contains("schedule[1].from: 2026-07-15 does not come after"), "{err}");
    let err = from_s1b("typo.yaml", "pledge:\n  schedule:\n    - { from: 2027-01-01, rate: 2 }\n").unwrap_err();
    assert!(err.contains("rate"), "{err}");
    let path = s.write("bare.yaml", &format!("extends: {}\nadditions: [giving_pledge]\n", spec("s1a.yaml").display()));
    let err = release_spec::load_with_env(&path, |_| None).unwrap_err().to_string();
    assert!(err.contains("needs a pledge section"), "{err}");
}

#[test]
fn the_openai_backend_needs_its_endpoint_and_family_and_no_other_backend_takes_them() {
    let s = Scratch::new();
    let err = |name: &str, yaml: &str| {
        let path = derived_spec(&s, name, yaml);
        release_spec::load_with_env(&path, |_| None).map(|_| ()).unwrap_err().to_string()
    };
    let served = "model:\n  backend: openai\n  id: Qwen/Qwen2-VL-7B-Instruct\n  revision: r1\n  weight_license: apache-2.0\n";
    assert!(err("no_endpoint.yaml", served).contains("model.endpoint"));
    let e = err("bad_endpoint.yaml", &format!("{served}  endpoint: http://host:8000\n  family: qwen2_vl\n"));
    assert!(e.contains("expected the server's base URL, http(s)://HOST[:PORT]/v1"), "{e}");
    let e = err("no_family.yaml", &format!("{served}  endpoint: http://host:8000/v1\n"));
    assert!(e.contains("model.family"), "{e}");
    let e = err("bad_family.yaml", &format!("{served}  endpoint: http://host:8000/v1\n  family: llava\n"));
    assert!(e.contains("\"llava\": expected one of qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5, qwen3_vl_moe, qwen3_5_moe"), "{e}");
    let e = err("engine_endpoint.yaml", "model:\n  endpoint: http://host:8000/v1\n");
    assert!(e.contains("model.endpoint") && e.contains("is for model.backend openai only"), "{e}");
    let ok = derived_spec(&s, "ok.yaml", &format!("{served}  endpoint: http://host:8000/v1/\n  family: qwen2_5_vl\n"));
    let spec = release_spec::load_with_env(&ok, |_| None).unwrap();
    let served = spec.model.served.unwrap();
    assert_eq!((served.endpoint.as_str(), served.concurrency, served.timeout_s), ("http://host:8000/v1", 16, 120));
}

/// `model.images_per_pass` is the native engine's, at least 1, out of the spec's hash (the
/// scorer's identity records it), and `--images-per-pass` is refused for another backend.
#[test]
fn images_per_pass_is_the_native_engines_and_stays_out_of_the_spec_hash() {
    let s = Scratch::new();
    let load = |name: &str, yaml: &str| release_spec::load_with_env(&derived_spec(&s, name, yaml), |_| None);
    // The fixture spec's scorer is the fixture backend.
    let e = load("fixture.yaml", "model:\n  images_per_pass: 4\n").map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("model.images_per_pass") && e.contains("is for model.backend native only"), "{e}");
    let native = format!(
        "model:\n  backend: native\n  path: {}\n  id: a/b\n  revision: r1\n  weight_license: apache-2.0\n",
        repo().join("fixtures/vlm/qwen2_vl").display()
    );
    let e = load("zero.yaml", &format!("{native}  images_per_pass: 0\n")).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("model.images_per_pass") && e.contains("must be at least 1"), "{e}");
    let (one, eight) = (load("one.yaml", &native).unwrap(), load("eight.yaml", &format!("{native}  images_per_pass: 8\n")).unwrap());
    assert_eq!((one.model.images_per_pass, eight.model.images_per_pass), (1, 8));
    let resolve = |spec| bpals_release::inputs::resolve(spec).unwrap();
    assert_eq!(resolve(one).hash(), resolve(eight).hash());
    let a = bin().arg("build").arg(fixture_s1a()).args(["--images-per-pass", "2", "--out"]).arg(s.path("out")).assert().failure();
    assert!(stderr(&a).contains("--images-per-pass is for the native engine; no model of this spec is native"), "{}", stderr(&a));
    // Bounded: a pass of 2^64 - 1 images used to overflow its padding, 10^6 to ask for 470 GB.
    let e = load("huge.yaml", &format!("{native}  images_per_pass: 257\n")).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("model.images_per_pass") && e.contains("at most 256 images fit a pass"), "{e}");
    assert!(load("most.yaml", &format!("{native}  images_per_pass: 256\n")).is_ok());
    let native_spec = derived_spec(&s, "native.yaml", &native);
    for (n, says) in
        [("0", "--images-per-pass must be at least 1"), ("18446744073709551615", "--images-per-pass is 18446744073709551615; at most 256")]
    {
        let a = bin().arg("build").arg(&native_spec).args(["--images-per-pass", n, "--out"]).arg(s.path("out")).assert().failure();
        let err = stderr(&a);
        assert!(err.contains(says) && !err.contains("model.backend"), "{n}: {err}");
    }
    assert!(!s.path("out").exists());
}

/// Every leaf key the committed S1b chain sets, as `key: null` in a child spec.
fn leaf_keys() -> Vec<String> {
    fn walk(value: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        if let serde_json::Value::Object(map) = value {
            for (key, v) in map {
                let path = format!("{prefix}{key}");
                match v {
                    serde_json::Value::Object(m) if !m.is_empty() && !is_map_value(&path) => walk(v, &format!("{path}."), out),
                    _ => out.push(path),
                }
            }
        }
    }
    let mut keys = Vec::new();
    for name in ["s1a.yaml", "s1b.yaml"] {
        let text = std::fs::read_to_string(spec(name)).unwrap();
        walk(&serde_saphyr::from_str::<serde_json::Value>(&text).unwrap(), "", &mut keys);
    }
    keys.retain(|k| k != "extends");
    keys.sort();
    keys.dedup();
    keys
}

/// Keys whose value is a map of the user's names (labels, files): one value, not a section.
fn is_map_value(path: &str) -> bool {
    ["source.sha256", "selection.trial.quotas", "prompts.labels", "prompts.support_devices", "prompts.location", "prompts.signs"]
        .contains(&path)
}

/// `a.b.c` set to null, as nested YAML under `extends: s1b.yaml`.
fn child_unsetting(s: &Scratch, key: &str) -> std::path::PathBuf {
    let mut yaml = format!("extends: {}\n", spec("s1b.yaml").display());
    for (depth, part) in key.split('.').enumerate() {
        yaml.push_str(&"  ".repeat(depth));
        yaml.push_str(part);
        yaml.push_str(if depth + 1 == key.split('.').count() { ": null\n" } else { ":\n" });
    }
    s.write(&format!("{}.yaml", key.replace('.', "-")), &yaml)
}

/// Keys S1a or S1b writes with the value they would take by default anyway: unsetting them
/// leaves the same value.
const WRITTEN_AS_DEFAULT: [&str; 23] = [
    "audit.logit_tolerance",
    "card.template",
    "model.device",
    "model.dtype",
    "output.compression",
    "output.compression_level",
    "output.row_group_rows",
    "output.rows_per_shard",
    "prompts.labels",
    "prompts.support_devices",
    "publish.tag",
    "selection.rows",
    "selection.views",
    "signal.calibration",
    "signal.device_present_min",
    "signal.finding_present_min",
    "signal.hard_case_margin",
    "signal.low_consistency_below",
    "signal.review_min_agreement",
    "signal.suspect_min_agreement",
    "signal.tau",
    "signal.trusted_min_agreement",
    "source.sha256",
];

/// Keys whose null breaks a rule that ties them to another key; the error names the rule.
const TIED: [(&str, &str); 4] = [
    ("additions", "does not list the 1% giving pledge"),
    ("selection.images_sha256", "names a list but selection.images_sha256 does not pin it"),
    ("source.test_list", "train_val_list and test_list go together"),
    ("source.train_val_list", "train_val_list and test_list go together"),
];

#[test]
fn null_in_a_child_spec_unsets_every_optional_key_and_is_refused_on_required_ones() {
    let s = Scratch::new();
    let parent = release_spec::load_with_env(&spec("s1b.yaml"), |_| None).unwrap();
    let parent_json = serde_json::to_value(&parent).unwrap();
    let (mut unset, mut required) = (0, 0);
    for key in leaf_keys() {
        let path = child_unsetting(&s, &key);
        match release_spec::load_with_env(&path, |_| None) {
            Ok(child) => {
                unset += 1;
                // The resolved spec renames one key.
                let resolved = if key == "source.sha256" { "source.expected_sha256" } else { key.as_str() };
                let pointer = format!("/{}", resolved.replace('.', "/"));
                let child_json = serde_json::to_value(&child).unwrap();
                let (before, after) = (parent_json.pointer(&pointer), child_json.pointer(&pointer));
                if WRITTEN_AS_DEFAULT.contains(&key.as_str()) {
                    assert_eq!(before, after, "{key}: s1a writes its default");
                } else {
                    assert_ne!(before, after, "{key}: null must drop the inherited value, not keep it");
                }
            }
            Err(e) => {
                let message = e.to_string();
                if let Some((_, rule)) = TIED.iter().find(|(k, _)| *k == key) {
                    assert!(message.contains(rule), "{key}: {message}");
                } else {
                    required += 1;
                    let at = format!("{}:", path.display());
                    assert!(message.starts_with(&at), "{key}: the error points at the child's line: {message}");
                    assert!(message.contains(&format!("key `{key}`: is null, but the key is required")), "{key}: {message}");
                }
            }
        }
    }
    assert!(unset >= 20 && required >= 20, "{unset} optional and {required} required keys checked");
}

#[test]
fn a_child_that_unsets_the_curated_list_takes_every_image() {
    let s = Scratch::new();
    let yaml =
        format!("extends: {}\nselection:\n  images: null\n  curated_images: 112120\n  expected_rows: null\n", spec("s1a.yaml").display());
    let child = release_spec::load_with_env(&s.write("all.yaml", &yaml), |_| None).unwrap();
    assert!(child.selection.images.is_none(), "the curated list and its pin are both dropped");
    assert_eq!(child.selection.curated_images, 112120);
    assert_eq!(child.selection.expected_rows, None);
    // A section set to null is dropped whole: optional ones default, required ones are refused.
    let yaml = format!("extends: {}\nrelease: null\n", spec("s1a.yaml").display());
    let err = release_spec::load_with_env(&s.write("norelease.yaml", &yaml), |_| None).unwrap_err().to_string();
    assert!(err.contains("key `release"), "{err}");
}

#[test]
fn every_yaml_spelling_of_null_on_a_required_key_is_named_as_null() {
    let s = Scratch::new();
    for (name, value) in [("word", " null"), ("tilde", " ~"), ("empty", "")] {
        let yaml = format!("extends: {}\nrelease:\n  title:{value}\n", spec("s1a.yaml").display());
        let path = s.write(&format!("{name}.yaml"), &yaml);
        let err = release_spec::load_with_env(&path, |_| None).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:3", path.display())), "{name}: the child's line: {err}");
        assert!(err.contains("key `release.title`: is null, but the key is required"), "{name}: {err}");
    }
}
