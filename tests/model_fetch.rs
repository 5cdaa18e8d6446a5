//! A spec naming a Hub model by id and revision: the build fetches it into the Hugging Face
//! cache (from the loopback fake Hub), pins the commit in build.lock and hashes the weights
//! once; `--offline` never touches the network.
#![cfg(feature = "vlm")]

mod common;
#[path = "fake_hub/mod.rs"]
mod fake_hub;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use fake_hub::{FakeHub, Fault};

const MODEL: &str = "bpals-test/tiny-qwen2-vl";
const TOKEN: &str = "hf_modelFETCHsecret42";

/// The tiny fixture model's files, as a model repo holds them, plus a README and a subfolder
/// the engine never reads.
fn model_files() -> BTreeMap<String, Vec<u8>> {
    let dir = repo().join("fixtures/vlm/qwen2_vl");
    let mut files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.insert("README.md".into(), b"# tiny\n".to_vec());
    files.insert("onnx/config.json".into(), b"{}".to_vec());
    files.insert("onnx/model.safetensors".into(), vec![0; 64]);
    files
}

fn hub_spec(s: &Scratch, revision: &str) -> std::path::PathBuf {
    derived_spec(
        s,
        &format!("hub-{revision}.yaml"),
        &format!(
            "selection:\n  curated_images: 12\n  expected_rows: 15\nmodel:\n  backend: qwen2vl\n  id: {MODEL}\n  revision: {revision}\n  weight_license: apache-2.0\n  demo_weights: random\n"
        ),
    )
}

/// `build` against the fake Hub, with its own Hugging Face cache and a token in the environment.
fn hub_build(s: &Scratch, hub: &FakeHub, spec: &Path, out: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin()
        .env("HF_ENDPOINT", &hub.url)
        .env("HF_HUB_CACHE", s.path("hf-cache"))
        .env("HF_TOKEN", TOKEN)
        .env_remove("HF_HUB_OFFLINE")
        .arg("build")
        .arg(spec)
        .arg("--out")
        .arg(s.path(out))
        .arg("--cache-dir")
        .arg(s.cache())
        .arg("--no-progress")
        .args(extra)
        .assert()
}

#[test]
fn a_hub_model_is_fetched_once_pinned_in_the_lock_and_offline_never_calls_out() {
    let s = Scratch::new();
    let hub = FakeHub::start(None);
    let commit = hub.seed_model(MODEL, model_files());
    let spec = hub_spec(&s, "main");

    // Offline with an empty cache: refused before any request.
    let a = hub_build(&s, &hub, &spec, "offline-first", &["--offline"]).failure();
    let err = stderr(&a);
    assert!(err.contains("not in the Hugging Face cache") && err.contains("offline") && err.contains("hf download"), "{err}");
    assert_eq!(hub.state.lock().unwrap().requests.len(), 0, "offline made requests");

    // Online: fetched, built, pinned.
    let a = hub_build(&s, &hub, &spec, "one", &[]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains(&format!("fetching it into {}", s.path("hf-cache").display())), "{text}");
    assert!(text.contains("revision \"main\" is a branch or tag"), "an unpinned revision is a demo reason: {text}");
    assert!(!text.contains(TOKEN));
    let lock: serde_json::Value = serde_json::from_slice(&std::fs::read(s.path("one/build.lock")).unwrap()).unwrap();
    assert_eq!(lock["scorer"]["commit"], commit.as_str());
    assert_eq!(lock["scorer"]["model_id"], MODEL);
    let snapshot = s.path("hf-cache").join("models--bpals-test--tiny-qwen2-vl/snapshots").join(&commit);
    assert!(snapshot.join("model.safetensors").is_file() && snapshot.join("tokenizer.json").is_file());
    assert!(!snapshot.join("README.md").exists() && !snapshot.join("onnx").exists(), "only the files the engine reads");
    assert_eq!(std::fs::read_dir(s.cache().join("file-digests-v2")).unwrap().count(), 1, "the weights' digest is cached");

    // Offline again: served from the Hugging Face cache, no request, the same bytes.
    let before = hub.state.lock().unwrap().requests.len();
    hub_build(&s, &hub, &spec, "two", &["--offline"]).success();
    assert_eq!(hub.state.lock().unwrap().requests.len(), before, "an offline build made requests");
    assert_eq!(tree_digest(&s.path("one")), tree_digest(&s.path("two")));

    // Pinned to the commit itself: the same model, found in the cache without the network.
    let pinned = hub_spec(&s, &commit);
    let a = hub_build(&s, &hub, &pinned, "three", &["--offline"]).success();
    assert!(!(stdout(&a) + &stderr(&a)).contains("branch or tag"));

    // An interrupted fetch (the weights missing) is no snapshot: offline refuses, online completes it.
    std::fs::remove_file(snapshot.join("model.safetensors")).unwrap();
    let a = hub_build(&s, &hub, &spec, "four", &["--offline"]).failure();
    assert!(stderr(&a).contains("not in the Hugging Face cache"), "{}", stderr(&a));
    hub_build(&s, &hub, &spec, "five", &[]).success();
    assert_eq!(tree_digest(&s.path("one")), tree_digest(&s.path("five")));
}

#[test]
fn a_missing_model_or_revision_is_a_clear_error() {
    let s = Scratch::new();
    let hub = FakeHub::start(None);
    hub.seed_model(MODEL, model_files());
    let a = hub_build(&s, &hub, &hub_spec(&s, "no-such-branch"), "out", &[]).failure();
    let err = stderr(&a);
    assert!(err.contains(&format!("fetching model {MODEL}@no-such-branch from {}", hub.url)), "{err}");
    assert!(!s.path("out").exists(), "a failed build leaves no release");

    let spec = derived_spec(
        &s,
        "nobody.yaml",
        "model:\n  backend: qwen2vl\n  id: nobody/nothing\n  revision: main\n  weight_license: apache-2.0\n  demo_weights: random\n",
    );
    let a = hub_build(&s, &hub, &spec, "out", &[]).failure();
    assert!(stderr(&a).contains("fetching model nobody/nothing@main"), "{}", stderr(&a));
    assert!(!stderr(&a).contains(TOKEN));
}

#[test]
fn probe_takes_a_model_id_and_fetches_it_once() {
    let s = Scratch::new();
    let hub = FakeHub::start(None);
    let commit = hub.seed_model(MODEL, model_files());
    let image = repo().join("fixtures/vlm/qwen2_vl/goldens/square-112.png");
    let probe = |model: &str, extra: &[&str]| {
        bin()
            .env("HF_ENDPOINT", &hub.url)
            .env("HF_HUB_CACHE", s.path("hf-cache"))
            .env_remove("HF_HUB_OFFLINE")
            .args(["probe", "--model", model, "--question", "Is the heart enlarged?", "--image"])
            .arg(&image)
            .args(extra)
            .assert()
    };
    let a = probe(&format!("{MODEL}@{commit}"), &["--offline"]).failure();
    assert!(stderr(&a).contains("not in the Hugging Face cache"), "{}", stderr(&a));
    let fetched: serde_json::Value = serde_json::from_str(&stdout(&probe(MODEL, &[]).success())).unwrap();
    let requests = hub.state.lock().unwrap().requests.len();
    let cached: serde_json::Value = serde_json::from_str(&stdout(&probe(&format!("{MODEL}@{commit}"), &["--offline"]).success())).unwrap();
    assert_eq!(hub.state.lock().unwrap().requests.len(), requests);
    assert_eq!(fetched["questions"], cached["questions"]);
    let local: serde_json::Value =
        serde_json::from_str(&stdout(&probe(repo().join("fixtures/vlm/qwen2_vl").to_str().unwrap(), &[]).success())).unwrap();
    assert_eq!(local["questions"], cached["questions"], "the fetched model is the fixture model");

    let a = probe("./no-such-model", &[]).failure();
    assert!(stderr(&a).contains("--model ./no-such-model: no such directory, and not a model id"), "{}", stderr(&a));
}

/// The model's revision and listing are read under the tool's cap for JSON, and each file under
/// the size its listing gave it (hf-hub streams it to disk): a Hub that answers without end is
/// refused, naming the route and the cap, and the next honest fetch completes.
#[test]
fn a_hubs_endless_answers_are_cut_in_a_model_fetch() {
    let s = Scratch::new();
    let hub = FakeHub::start(None);
    hub.seed_model(MODEL, model_files());
    let spec = hub_spec(&s, "main");
    hub.inject("info", Fault::Huge { status: 200, bytes: 4 << 30, announced: false });
    let err = stderr(&hub_build(&s, &hub, &spec, "out", &[]).failure());
    assert!(err.contains(&format!("/api/models/{MODEL}/revision/main")) && err.contains("above the cap of 67108864"), "{err}");

    hub.inject("resolve", Fault::Pad { bytes: 16 << 20, announced: false });
    let err = stderr(&hub_build(&s, &hub, &spec, "out", &[]).failure());
    assert!(err.contains(&hub.url) && err.contains("is refused: it sent more than that"), "{err}");
    assert!(!s.path("out").exists(), "a failed build leaves no release");

    hub_build(&s, &hub, &spec, "out", &[]).success();
}
