//! The `openai` backend against a loopback fake of an OpenAI-compatible server: scores are what
//! the server's logprobs imply, requests go out concurrently (bounded), faults leave the release
//! byte-identical, a hidden answer token is a clear error, and the API key is never printed. S2,
//! S3 and S4 generation go through the same server.

mod common;
#[path = "fake_openai/mod.rs"]
mod fake_openai;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use common::*;
use fake_openai::{FakeOpenAi, Fault};

const KEY: &str = "sk-fakeOPENAIkey0123456789";

/// Images per test build: a slice of the sample keeps 57 requests per image quick.
const IMAGES: usize = 48;

/// S1a (or S2) on 48 of the sample's images, with the model behind the fake server.
fn served_spec(s: &Scratch, name: &str, parent: &Path, server: &FakeOpenAi, concurrency: usize) -> PathBuf {
    let yaml = format!(
        "extends: {}\nselection:\n  curated_images: {IMAGES}\n  expected_rows: null\n\
         model:\n  backend: openai\n  id: Qwen/Qwen2-VL-7B-Instruct\n  revision: served-2026-11\n  weight_license: apache-2.0\n  \
         endpoint: {}\n  family: qwen2_vl\n  concurrency: {concurrency}\n  timeout_s: 5\n",
        parent.display(),
        server.url
    );
    s.write(name, &yaml)
}

/// [`served_spec`] on two images: for the checks that need a request, not a release.
fn two_image_spec(s: &Scratch, server: &FakeOpenAi, concurrency: usize) -> PathBuf {
    let full = std::fs::read_to_string(served_spec(s, "served.yaml", &fixture_s1a(), server, concurrency)).unwrap();
    s.write("two-images.yaml", &full.replace(&format!("curated_images: {IMAGES}"), "curated_images: 2"))
}

fn served_build(spec: &Path, out: &Path, cache: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin()
        .env("OPENAI_API_KEY", KEY)
        .arg("build")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--no-progress")
        .args(extra)
        .assert()
}

/// Every score cache entry under `cache`: image name -> (question id -> (logit_yes, logit_no)).
fn cached_scores(cache: &Path) -> BTreeMap<String, BTreeMap<String, (f32, f32)>> {
    let mut out = BTreeMap::new();
    for file in files_under(cache).into_iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let sealed: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let entry = &sealed["content"];
        let (Some(image), Some(ids), Some(scores)) =
            (entry["image"].as_str(), entry["question_ids"].as_array(), entry["scores"].as_array())
        else {
            continue; // a generation entry
        };
        let per_question = ids
            .iter()
            .zip(scores)
            .map(|(id, s)| {
                (id.as_str().unwrap().to_string(), (s["logit_yes"].as_f64().unwrap() as f32, s["logit_no"].as_f64().unwrap() as f32))
            })
            .collect();
        out.insert(image.to_string(), per_question);
    }
    out
}

#[test]
fn scores_are_what_the_servers_logprobs_imply_with_requests_in_flight_together() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = served_spec(&s, "served.yaml", &fixture_s1a(), &server, 8);
    let a = served_build(&spec, &s.path("out"), &s.cache(), &[]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("the OpenAI-compatible server"), "{text}");

    let questions = bpals_release::release_spec::load(&spec).unwrap().prompts.questions();
    let by_id: BTreeMap<&str, &str> = questions.iter().map(|q| (q.id.as_str(), q.text.as_str())).collect();
    let scores = cached_scores(&s.cache());
    assert_eq!(scores.len(), IMAGES, "every curated image was scored");
    let mut checked = 0;
    for (image, per_question) in &scores {
        let bytes = std::fs::read(repo().join("fixtures/sample/images").join(image)).unwrap();
        let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes));
        assert_eq!(per_question.len(), questions.len());
        for (id, got) in per_question {
            let (yes, no) = fake_openai::logprobs_for(&url, by_id[id.as_str()]);
            assert_eq!(*got, (yes as f32, no as f32), "{image} {id}");
            checked += 1;
        }
    }
    assert_eq!(checked, IMAGES * questions.len());
    let state = server.state.lock().unwrap();
    assert_eq!(state.requests, checked, "one request per question");
    assert!(state.max_in_flight > 1 && state.max_in_flight <= 8, "bounded concurrency: {} in flight at most", state.max_in_flight);
    assert!(state.auth_headers.iter().all(|h| h == &format!("Bearer {KEY}")), "every request carries the key");
    let body = &state.bodies[0];
    assert_eq!(
        (body["max_tokens"].as_u64(), body["logprobs"].as_bool(), body["model"].as_str()),
        (Some(1), Some(true), Some("Qwen/Qwen2-VL-7B-Instruct"))
    );
    drop(state);

    // The card and build.lock say what scored the release; the key is nowhere.
    let lock = std::fs::read_to_string(s.path("out/build.lock")).unwrap();
    assert!(lock.contains("\"backend\": \"openai\"") && lock.contains(&server.url), "the lock pins the backend and the endpoint");
    for (file, _) in tree_digest(&s.path("out")) {
        let bytes = std::fs::read(s.path("out").join(&file)).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(KEY), "{file} holds the key");
    }
    assert!(!text.contains(KEY));

    // --concurrency overrides the spec.
    let one = FakeOpenAi::start();
    let spec = served_spec(&s, "one.yaml", &fixture_s1a(), &one, 8);
    served_build(&spec, &s.path("one"), &s.path("cache-one"), &["--concurrency", "1", "--jobs", "2"]).success();
    assert_eq!(one.state.lock().unwrap().max_in_flight, 1);
}

#[test]
fn server_faults_leave_the_release_byte_identical() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = served_spec(&s, "served.yaml", &fixture_s1a(), &server, 4);
    served_build(&spec, &s.path("clean"), &s.path("cache-clean"), &[]).success();
    server.inject(&[
        Fault::Status(500),
        Fault::Status(429),
        Fault::Drop,
        Fault::Status(503),
        Fault::Slow(std::time::Duration::from_millis(300)),
        Fault::Status(502),
    ]);
    served_build(&spec, &s.path("faulty"), &s.path("cache-faulty"), &[]).success();
    assert_eq!(tree_digest(&s.path("faulty")), tree_digest(&s.path("clean")), "faults change no byte");

    // An audit reruns inference against the endpoint and compares every byte.
    let before = server.state.lock().unwrap().requests;
    let a = bin()
        .env("OPENAI_API_KEY", KEY)
        .arg("rebuild")
        .arg(s.path("clean"))
        .arg("--audit")
        .arg("--spec")
        .arg(&spec)
        .arg("--scratch")
        .arg(s.path("audit"))
        .assert()
        .success();
    assert!(server.state.lock().unwrap().requests > before, "the audit asked the server again");
    assert!(stdout(&a).contains("identical"), "{}", stdout(&a));
}

/// A server that redirects the request elsewhere, or answers with more than a chat completion
/// can hold (declared or streamed), stops the build with that cause: the image is never sent
/// on, and no answer is read past the cap (8 MiB).
#[test]
fn a_redirect_or_an_oversized_answer_stops_the_build() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = two_image_spec(&s, &server, 1);
    let other = FakeOpenAi::start();
    let elsewhere = other.url.clone() + "/chat/completions";
    for (fault, expected) in [
        (Fault::Redirect(elsewhere.clone()), format!("the server answered 307 Temporary Redirect, redirecting to {elsewhere}")),
        (Fault::HugeDeclared, "the server's answer is declared as 10000000000 bytes, over the 8 MiB".to_string()),
        (Fault::HugeStreamed, "the server's answer is more than 8388608 bytes, over the 8 MiB".to_string()),
    ] {
        server.inject(&[fault]);
        let out = s.path("out");
        let a = served_build(&spec, &out, &s.path(&format!("cache-{}", expected.len())), &["--jobs", "1"]);
        let err = stderr(&a.failure());
        assert!(err.contains(&expected), "{expected}: {err}");
        assert!(!out.exists(), "no release is left behind");
    }
    assert_eq!(other.state.lock().unwrap().requests, 0, "the redirect was not followed");
}

/// OPENAI_API_KEY with spaces or a newline around it is sent trimmed; one with whitespace
/// inside is refused, naming the variable and never printing the key.
#[test]
fn an_api_key_with_spaces_around_it_is_sent_trimmed_and_one_with_spaces_inside_refused() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = two_image_spec(&s, &server, 2);
    let build = |key: &str, out: &str| {
        bin()
            .env("OPENAI_API_KEY", key)
            .arg("build")
            .arg(&spec)
            .arg("--out")
            .arg(s.path(out))
            .arg("--cache-dir")
            .arg(s.path(out).with_extension("cache"))
            .arg("--no-progress")
            .assert()
    };
    build(&format!(" {KEY}\n"), "padded").success();
    let state = server.state.lock().unwrap();
    assert!(!state.auth_headers.is_empty() && state.auth_headers.iter().all(|h| h == &format!("Bearer {KEY}")), "{:?}", state.auth_headers);
    drop(state);
    let a = build("sk-inside SPACEkey0123", "inside").failure();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("OPENAI_API_KEY has whitespace inside the key"), "{text}");
    assert!(!text.contains("sk-inside") && !text.contains("SPACEkey0123"), "{text}");
}

#[test]
fn a_hidden_answer_token_and_a_refused_request_are_clear_errors_that_never_show_the_key() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    server.state.lock().unwrap().hide_no = true;
    let spec = served_spec(&s, "served.yaml", &fixture_s1a(), &server, 4);
    let err = stderr(&served_build(&spec, &s.path("out"), &s.cache(), &[]).failure());
    assert!(err.contains("model Qwen/Qwen2-VL-7B-Instruct lists no \"No\" among its 19 first-token logprobs"), "{err}");
    assert!(err.contains("model.answer_token_ids") && err.contains("(sent as allowed_token_ids)"), "{err}");
    assert!(!s.path("out").exists(), "no release is left behind");

    // A logprob no score can hold: the first image's first question stops the build, named,
    // before any row is written or cached.
    {
        let mut state = server.state.lock().unwrap();
        (state.hide_no, state.overflowing_no) = (false, true);
    }
    let err = stderr(&served_build(&spec, &s.path("out"), &s.path("cache-inf"), &[]).failure());
    assert!(err.contains("model Qwen/Qwen2-VL-7B-Instruct (openai backend) answered logit_yes") && err.contains("logit_no -inf"), "{err}");
    assert!(err.contains(".png, question Atelectasis#0"), "{err}");
    assert!(err.contains("The server sent it") && !err.contains("model.dtype"), "the advice is the server's, not the spec's dtype: {err}");
    assert!(!s.path("out").exists(), "no release is left behind");
    let cache = s.path("cache-inf");
    assert!(!cache.exists() || cached_scores(&cache).is_empty(), "no score is cached");
    server.state.lock().unwrap().overflowing_no = false;

    // A logprob above 0, or one that is not a number: named with its real cause, nothing cached.
    for (bad, expected) in [
        (serde_json::json!(50.0), "gave \"No\" the logprob 50, above 0"),
        (serde_json::json!("-0.5"), "gave \"No\" the logprob \"-0.5\", which is not a number"),
        (serde_json::Value::Null, "gave \"No\" the logprob null, which is not a number"),
    ] {
        server.state.lock().unwrap().bad_no = Some(bad);
        let cache = s.path("cache-bad");
        let err = stderr(&served_build(&spec, &s.path("out"), &cache, &[]).failure());
        assert!(err.contains(expected), "{err}");
        assert!(!s.path("out").exists() && (!cache.exists() || cached_scores(&cache).is_empty()), "nothing is written or cached");
    }
    server.state.lock().unwrap().bad_no = None;

    // A server that ignores `logprobs`: named, and no release.
    {
        let mut state = server.state.lock().unwrap();
        (state.hide_no, state.no_logprobs) = (false, true);
    }
    let err = stderr(&served_build(&spec, &s.path("out"), &s.path("cache-nolp"), &[]).failure());
    assert!(err.contains("model Qwen/Qwen2-VL-7B-Instruct answered without first-token logprobs"), "{err}");
    assert!(!s.path("out").exists(), "no release is left behind");
    server.state.lock().unwrap().no_logprobs = false;

    // llama.cpp's server has no allowed_token_ids: the answer tokens go as an equal logit_bias.
    let llama = s.write("llama.yaml", &format!("extends: {}\nmodel:\n  server: llama-cpp\n  answer_token_ids: [11, 12]\n", spec.display()));
    let before = server.state.lock().unwrap().bodies.len();
    served_build(&llama, &s.path("out-llama"), &s.path("cache-llama"), &["--jobs", "1"]).success();
    let state = server.state.lock().unwrap();
    let scoring: Vec<_> = state.bodies[before..].iter().filter(|b| b["logprobs"] == true).collect();
    assert!(!scoring.is_empty());
    assert!(scoring
        .iter()
        .all(|b| b["logit_bias"] == serde_json::json!({"11": 100.0, "12": 100.0}) && b.get("allowed_token_ids").is_none()));
    drop(state);
    let lock = std::fs::read_to_string(s.path("out-llama/build.lock")).unwrap();
    assert!(lock.contains("\"server\": \"llama-cpp\"") && lock.contains("\"answer_restriction\": \"logit_bias\""), "{lock}");

    // A 400 echoes the Authorization header back: the key is redacted from the error.
    server.state.lock().unwrap().hide_no = false;
    server.inject(&[Fault::Status(400)]);
    let err = stderr(&served_build(&spec, &s.path("out"), &s.path("cache2"), &["--jobs", "1", "--concurrency", "1"]).failure());
    assert!(err.contains("the server answered 400") && err.contains("[api key redacted]"), "{err}");
    assert!(!err.contains(KEY), "{err}");
}

#[test]
fn s2_answers_come_from_the_server_with_special_tokens_kept() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = served_spec(&s, "s2.yaml", &fixture_s2(), &server, 8);
    served_build(&spec, &s.path("out"), &s.cache(), &[]).success();
    let state = server.state.lock().unwrap();
    let generation: Vec<_> = state.bodies.iter().filter(|b| b["logprobs"] != true).collect();
    assert!(!generation.is_empty(), "grounding prompts go to the server");
    assert!(generation.iter().all(|b| b["max_tokens"] == 48 && b["skip_special_tokens"] == false && b["temperature"] == 0));
    drop(state);
    let card = std::fs::read_to_string(s.path("out/README.md")).unwrap();
    assert!(
        card.contains("| `ok` |"),
        "the server's boxes parse:\n{}",
        card.lines().filter(|l| l.contains("box")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn s3_reasoning_and_s4_reports_come_from_the_server_and_faults_change_no_byte() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = served_spec(&s, "s4.yaml", &repo().join("tests/specs/s4-fixture-scorer.yaml"), &server, 8);
    served_build(&spec, &s.path("clean"), &s.path("cache-clean"), &[]).success();
    {
        let state = server.state.lock().unwrap();
        let text = |b: &&serde_json::Value| b["messages"][0]["content"][1]["text"].as_str().unwrap_or("").to_string();
        let asked = |needle: &str| state.bodies.iter().filter(|b| text(b).contains(needle)).collect::<Vec<_>>();
        let (reasoning, reports) = (asked("Think first"), asked("Write a short report"));
        assert_eq!((reasoning.len(), reports.len()), (IMAGES, IMAGES), "one reasoning and one report request per image");
        assert!(reasoning.iter().chain(&reports).all(|b| b["max_tokens"] == 96 && b["temperature"] == 0));
    }
    let card = std::fs::read_to_string(s.path("clean/README.md")).unwrap();
    let parsed = card_row(&card, "answers that parse");
    assert!(parsed.ends_with("(100.0%) |"), "the server's reasoning parses: {parsed}");
    assert!(card.contains("## Report (S4): report-style text per image"));

    // Faults during generation only: the scores come from a copy of the clean cache.
    copy_tree(&s.path("cache-clean"), &s.path("cache-faulty"));
    std::fs::remove_dir_all(s.path("cache-faulty/generations-v2")).unwrap();
    let before = server.state.lock().unwrap().requests;
    server.inject(&[
        Fault::Status(503),
        Fault::Drop,
        Fault::Status(429),
        Fault::Slow(std::time::Duration::from_millis(300)),
        Fault::Status(500),
    ]);
    let a = served_build(&spec, &s.path("faulty"), &s.path("cache-faulty"), &[]).success();
    let asked = server.state.lock().unwrap().requests - before;
    assert!(asked > 2 * IMAGES, "every image is asked again, some more than once: {asked}");
    assert!(stderr(&a).contains("0 from the cache"), "{}", stderr(&a));
    assert_eq!(tree_digest(&s.path("faulty")), tree_digest(&s.path("clean")), "faults change no byte");
}

#[test]
fn every_request_sets_the_thinking_switch_and_a_model_that_thinks_anyway_is_refused() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = served_spec(&s, "served.yaml", &fixture_s1a(), &server, 8);
    served_build(&spec, &s.path("out"), &s.cache(), &[]).success();
    let lock = std::fs::read_to_string(s.path("out/build.lock")).unwrap();
    assert!(lock.contains("\"chat_template_kwargs\"") && lock.contains("\"enable_thinking\": false"), "the lock records what was sent");
    {
        let state = server.state.lock().unwrap();
        let kwargs: std::collections::BTreeSet<String> = state.bodies.iter().map(|b| b["chat_template_kwargs"].to_string()).collect();
        assert_eq!(kwargs.into_iter().collect::<Vec<_>>(), [r#"{"enable_thinking":false}"#], "every score request turns thinking off");
    }

    // A server that thinks whatever the request says: its first token opens a reasoning block.
    server.state.lock().unwrap().ignores_thinking_switch = true;
    let err = stderr(&served_build(&spec, &s.path("out2"), &s.path("cache2"), &[]).failure());
    assert!(err.contains("the server's model Qwen/Qwen2-VL-7B-Instruct answered inside a reasoning block (<think>)"), "{err}");
    assert!(err.contains("although the request set chat_template_kwargs enable_thinking=false: a score"), "{err}");
    assert!(!s.path("out2").exists(), "no release is left behind");
}

#[test]
fn s3_with_thinking_on_reads_the_block_as_reasoning_and_what_follows_as_the_answer() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let served = served_spec(&s, "s3.yaml", &repo().join("tests/specs/s4-fixture-scorer.yaml"), &server, 8);
    let spec = s.write("thinking.yaml", &format!("extends: {}\nmodel:\n  thinking: on\n", served.display()));
    served_build(&spec, &s.path("inline"), &s.path("cache-inline"), &[]).success();
    {
        let state = server.state.lock().unwrap();
        let text = |b: &serde_json::Value| b["messages"][0]["content"][1]["text"].as_str().unwrap_or("").to_string();
        for body in &state.bodies {
            let on = text(body).contains("Think first") || text(body).contains("Write a short report");
            assert_eq!(body["chat_template_kwargs"]["enable_thinking"], on, "{}", text(body));
        }
    }
    let rows = reasoning_columns(&s.path("inline/data/full-00000-of-00001.parquet"));
    assert!(!rows.is_empty());
    for (text, answer) in &rows {
        assert!(text.starts_with("Served thinking") && !text.contains("<think>"), "the reasoning is the block's text: {text:?}");
        let answer = answer.as_deref().unwrap_or_default();
        assert!(!answer.is_empty() && !answer.contains("think"), "the answer is what follows the block: {answer:?}");
    }
    let card = std::fs::read_to_string(s.path("inline/README.md")).unwrap();
    assert!(card_row(&card, "answers that parse").ends_with("(100.0%) |"), "{}", card_row(&card, "answers that parse"));

    // The same answers from a server with a reasoning parser (the block apart): the same bytes.
    server.state.lock().unwrap().reasoning_parser = true;
    served_build(&spec, &s.path("parsed"), &s.path("cache-parsed"), &[]).success();
    assert_eq!(tree_digest(&s.path("parsed")), tree_digest(&s.path("inline")));
}

/// An answer from another model than the one asked for (a server that routes the request, or a
/// proxy in front of several models) is refused, as is one that names none; a spec whose server
/// serves the model under another name says so (`model.served_name`), which the requests ask
/// for, the answers must carry, and the lock records.
#[test]
fn an_answer_from_another_model_is_refused_and_a_served_name_is_asked_for_and_locked() {
    let s = Scratch::new();
    let server = FakeOpenAi::start();
    let spec = two_image_spec(&s, &server, 2);
    for (claimed, expected) in [
        (Some("meta-llama/Llama-3.2-11B-Vision".to_string()), "the answer is from \"meta-llama/Llama-3.2-11B-Vision\""),
        (None, "the answer is from no model it names"),
    ] {
        server.state.lock().unwrap().answers_as = Some(claimed);
        let cache = s.path("cache-other");
        let err = stderr(&served_build(&spec, &s.path("out"), &cache, &[]).failure());
        assert!(err.contains("asked for model \"Qwen/Qwen2-VL-7B-Instruct\"") && err.contains(expected), "{err}");
        assert!(err.contains("set model.served_name"), "{err}");
        assert!(!s.path("out").exists() && (!cache.exists() || cached_scores(&cache).is_empty()), "nothing is written or cached");
    }

    // The server's own name for the model: asked for, required, recorded.
    server.state.lock().unwrap().answers_as = Some(Some("qwen2-vl-7b".into()));
    let named = s.write("named.yaml", &format!("extends: {}\nmodel:\n  served_name: qwen2-vl-7b\n", spec.display()));
    served_build(&named, &s.path("named"), &s.path("cache-named"), &[]).success();
    assert!(server.state.lock().unwrap().bodies.iter().rev().take(3).all(|b| b["model"] == "qwen2-vl-7b"));
    let lock = std::fs::read_to_string(s.path("named/build.lock")).unwrap();
    assert!(lock.contains("\"served_name\": \"qwen2-vl-7b\""), "{lock}");
    let plain = served_build(&spec, &s.path("plain"), &s.path("cache-plain"), &[]).failure();
    assert!(stderr(&plain).contains("the answer is from \"qwen2-vl-7b\""), "{}", stderr(&plain));
    server.state.lock().unwrap().answers_as = None;
    served_build(&spec, &s.path("plain"), &s.path("cache-plain"), &[]).success();
    let lock = std::fs::read_to_string(s.path("plain/build.lock")).unwrap();
    assert!(!lock.contains("served_name"), "left out where not set: {lock}");
}
