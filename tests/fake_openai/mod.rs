//! A loopback fake of an OpenAI-compatible server (the chat-completions route vLLM and SGLang
//! serve), for the `openai` backend's tests: served by axum on 127.0.0.1 inside the test process.
//!
//! Its answers are a pure function of the request ([`logprobs_for`], [`text_for`]), so a test can
//! say what every score must be. Faults can be queued: a status (with Retry-After for 429), a
//! dropped connection, a slow answer. It counts requests in flight, records the Authorization
//! headers, and echoes the header in its error bodies, as a careless server might.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use sha2::Digest as _;

#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status (and, for 429, `Retry-After: 1`).
    Status(u16),
    /// Send headers, then break the body.
    Drop,
    /// Wait, then answer normally.
    Slow(Duration),
    /// Answer 307 Temporary Redirect to this URL (which would get the POST, image and all).
    Redirect(String),
    /// Declare a 10 GB body (`Content-Length`) and send a few bytes of it.
    HugeDeclared,
    /// Stream 64 MiB of JSON whitespace with no declared length (bounded, so the test ends).
    HugeStreamed,
}

#[derive(Default)]
pub struct ServerState {
    faults: Vec<Fault>,
    pub requests: usize,
    pub in_flight: usize,
    pub max_in_flight: usize,
    pub auth_headers: Vec<String>,
    /// List only the "Yes" token's logprob (a server with a low logprobs cap).
    pub hide_no: bool,
    /// Give "No" a logprob of -1e39: a number in JSON, but none a 32-bit score can hold (a
    /// server's overflow, or a broken model behind it).
    pub overflowing_no: bool,
    /// Give "No" this as its logprob instead (+50, a string, null: what a broken server sends).
    pub bad_no: Option<Value>,
    /// Every request body, in order.
    pub bodies: Vec<Value>,
    /// The model an answer names: unset, the one asked for; `Some(Some(name))`, another (a
    /// server routing to another model); `Some(None)`, none.
    pub answers_as: Option<Option<String>>,
    /// Answer a logprobs request without logprobs (a server that ignores the parameter).
    pub no_logprobs: bool,
    /// A served model whose template thinks whatever `chat_template_kwargs` says (a yes/no
    /// answer then starts with `<think>`).
    pub ignores_thinking_switch: bool,
    /// A server started with a reasoning parser: a thinking answer's block comes back in
    /// `reasoning_content`, apart from `content`.
    pub reasoning_parser: bool,
}

pub struct FakeOpenAi {
    /// Base URL, ending in /v1.
    pub url: String,
    pub state: Arc<Mutex<ServerState>>,
    _runtime: tokio::runtime::Runtime,
}

type Shared = Arc<Mutex<ServerState>>;

impl FakeOpenAi {
    pub fn start() -> FakeOpenAi {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let state: Shared = Arc::new(Mutex::new(ServerState::default()));
        let app = Router::new().route("/v1/chat/completions", post(chat)).with_state(state.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeOpenAi { url, state, _runtime: runtime }
    }

    /// Queues faults for the next requests, in order.
    pub fn inject(&self, faults: &[Fault]) {
        self.state.lock().unwrap().faults.extend_from_slice(faults);
    }
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

/// The logprobs of "Yes" and "No" this server gives for `question` about the image at `data_url`.
pub fn logprobs_for(data_url: &str, question: &str) -> (f64, f64) {
    let d = digest(&["yes-no", data_url, question]);
    let at = |i: usize| f64::from(u16::from_le_bytes([d[i], d[i + 1]]) % 900) / 100.0;
    (-0.01 - at(0), -0.01 - at(2))
}

/// The text this server generates for `prompt` about the image at `data_url`, in the format the
/// prompt asks for: a `<think>`/`<answer>` pair for a prompt that says "think" (S3), a few report
/// sentences for one that asks for a report (S4), and a Qwen2-VL box otherwise (S2).
pub fn text_for(data_url: &str, prompt: &str) -> String {
    let d = digest(&["text", data_url, prompt]);
    let at = |i: usize, span: u16| u16::from_le_bytes([d[i], d[i + 1]]) % span;
    let lower = prompt.to_lowercase();
    if lower.contains("think") {
        let seen: Vec<&str> = ["Effusion", "Cardiomegaly", "Atelectasis", "Mass"]
            .iter()
            .enumerate()
            .filter(|(k, _)| at(2 * k, 2) == 0)
            .map(|(_, f)| *f)
            .collect();
        let answer = if seen.is_empty() { "No Finding".to_string() } else { seen.join(", ") };
        return format!("<think>Served reasoning {}: both lungs were inspected.</think><answer>{answer}</answer>", at(10, 1000));
    }
    if lower.contains("report") {
        const SENTENCES: [&str; 6] = [
            "Small right pleural effusion.",
            "The heart is enlarged.",
            "There is no pneumothorax.",
            "Left basilar atelectasis.",
            "A mass is seen in the right upper lobe.",
            "Clear lungs.",
        ];
        return (0..2).map(|k| SENTENCES[usize::from(at(2 * k, 6))]).collect::<Vec<_>>().join(" ");
    }
    let (x1, y1) = (100 + at(0, 500), 100 + at(2, 500));
    format!("<|box_start|>({x1},{y1}),({},{})<|box_end|>", x1 + 60 + at(4, 300), y1 + 60 + at(6, 300))
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": { "message": message } }))).into_response()
}

async fn chat(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let fault = {
        let mut s = state.lock().unwrap();
        s.requests += 1;
        s.auth_headers.push(auth.clone());
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        (!s.faults.is_empty()).then(|| s.faults.remove(0))
    };
    // Let concurrent requests overlap, so in-flight counts mean something.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let plain = matches!(fault, None | Some(Fault::Slow(_)));
    let response = answer(&state, &auth, &body, fault).await;
    state.lock().unwrap().in_flight -= 1;
    if plain && response.status().is_success() {
        return name_the_model(&state, &body, response).await;
    }
    response
}

/// Adds the `model` an OpenAI-compatible server puts in every answer: the name asked for (as
/// vLLM and llama-server echo it), or the one the test makes the server claim.
async fn name_the_model(state: &Shared, request: &[u8], response: Response) -> Response {
    let asked = serde_json::from_slice::<Value>(request).ok().and_then(|r| r["model"].as_str().map(str::to_string));
    let claimed = state.lock().unwrap().answers_as.clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let mut answer: Value = serde_json::from_slice(&bytes).unwrap();
    match claimed {
        Some(Some(name)) => answer["model"] = json!(name),
        Some(None) => {}
        None => answer["model"] = json!(asked),
    }
    Json(answer).into_response()
}

async fn answer(state: &Shared, auth: &str, body: &[u8], fault: Option<Fault>) -> Response {
    match fault {
        Some(Fault::Status(429)) => {
            return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], Json(json!({ "error": { "message": "slow down" } })))
                .into_response()
        }
        Some(Fault::Status(code)) => return error(StatusCode::from_u16(code).unwrap(), &format!("injected fault (request had {auth})")),
        Some(Fault::Drop) => {
            let body = Body::from_stream(futures::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected drop"))
            }));
            return Response::builder().status(200).header("content-type", "application/json").body(body).unwrap();
        }
        Some(Fault::Slow(d)) => tokio::time::sleep(d).await,
        Some(Fault::Redirect(to)) => return Response::builder().status(307).header("location", to).body(Body::empty()).unwrap(),
        Some(Fault::HugeDeclared) => {
            // A few bytes, then a pause (hyper sends the headers when the body waits) that the
            // client is not expected to sit through.
            let start = futures::stream::once(async { Ok::<Bytes, std::io::Error>(Bytes::from_static(b"{\"choices\":")) });
            let pause = futures::stream::once(async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Err::<Bytes, std::io::Error>(std::io::Error::other("the fake's declared body never comes"))
            });
            let body = Body::from_stream(futures::StreamExt::chain(start, pause));
            return Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .header("content-length", "10000000000")
                .body(body)
                .unwrap();
        }
        Some(Fault::HugeStreamed) => {
            let chunk = Bytes::from(vec![b' '; 1 << 20]);
            let body = Body::from_stream(futures::stream::iter((0..64).map(move |_| Ok::<Bytes, std::io::Error>(chunk.clone()))));
            return Response::builder().status(200).header("content-type", "application/json").body(body).unwrap();
        }
        None => {}
    }
    let Ok(request) = serde_json::from_slice::<Value>(body) else { return error(StatusCode::BAD_REQUEST, "not JSON") };
    state.lock().unwrap().bodies.push(request.clone());
    let content = &request["messages"][0]["content"];
    let (Some(url), Some(text)) = (content[0]["image_url"]["url"].as_str(), content[1]["text"].as_str()) else {
        return error(StatusCode::BAD_REQUEST, &format!("expected one user message: an image_url, then text (Authorization: {auth})"));
    };
    if request["temperature"] != 0 {
        return error(StatusCode::BAD_REQUEST, "the tests expect greedy decoding");
    }
    let thinking = request["chat_template_kwargs"]["enable_thinking"] == true;
    let ignores_switch = state.lock().unwrap().ignores_thinking_switch;
    if request["logprobs"] == true && ignores_switch {
        let top: Vec<Value> = (0..20)
            .map(|i| json!({ "token": if i == 0 { "<think>".to_string() } else { format!("filler{i}") }, "logprob": -0.1 - f64::from(i) }))
            .collect();
        return Json(json!({
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": "<think>" }, "finish_reason": "length",
                "logprobs": { "content": [{ "token": "<think>", "logprob": -0.1, "top_logprobs": top }] } }],
            "usage": { "completion_tokens": 1 },
        }))
        .into_response();
    }
    if request["logprobs"] == true {
        let (yes, no) = logprobs_for(url, text);
        let mut top = vec![json!({ "token": "Yes", "logprob": yes })];
        let bad_no = state.lock().unwrap().bad_no.clone();
        if let Some(bad) = bad_no {
            top.push(json!({ "token": "No", "logprob": bad }));
        } else if state.lock().unwrap().overflowing_no {
            top.push(json!({ "token": "No", "logprob": -1e39 }));
        } else if !state.lock().unwrap().hide_no {
            top.push(json!({ "token": "No", "logprob": no }));
        }
        for i in 0..18 {
            top.push(json!({ "token": format!("filler{i}"), "logprob": -12.0 - f64::from(i) }));
        }
        let first = if yes >= no { "Yes" } else { "No" };
        if state.lock().unwrap().no_logprobs {
            return Json(json!({
                "choices": [{ "index": 0, "message": { "role": "assistant", "content": first }, "finish_reason": "length" }],
                "usage": { "completion_tokens": 1 },
            }))
            .into_response();
        }
        return Json(json!({
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": first }, "finish_reason": "length",
                "logprobs": { "content": [{ "token": first, "logprob": yes.max(no), "top_logprobs": top }] } }],
            "usage": { "completion_tokens": 1 },
        }))
        .into_response();
    }
    if thinking {
        // The template's block, then the answer: a findings list (what text_for's S3 answer holds).
        let reasoning = format!("Served thinking {}: the costophrenic angles were compared.", &hex::encode(digest(&[url, text]))[..6]);
        let answer = text_for(url, text);
        let listed = answer.split("<answer>").nth(1).and_then(|a| a.split("</answer>").next()).unwrap_or(&answer).to_string();
        let message = if state.lock().unwrap().reasoning_parser {
            json!({ "role": "assistant", "reasoning_content": format!("\n{reasoning}\n"), "content": format!("\n\n{listed}") })
        } else {
            json!({ "role": "assistant", "content": format!("<think>\n{reasoning}\n</think>\n\n{listed}") })
        };
        return Json(
            json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }], "usage": { "completion_tokens": 40 } }),
        )
        .into_response();
    }
    let answer = text_for(url, text);
    let max = request["max_tokens"].as_u64().unwrap_or(16) as usize;
    // One "token" per 4 characters, cut at max_tokens.
    let tokens = answer.len().div_ceil(4);
    let (content, finish, used) = if tokens > max { (answer[..max * 4].to_string(), "length", max) } else { (answer, "stop", tokens) };
    Json(json!({
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": content }, "finish_reason": finish }],
        "usage": { "completion_tokens": used },
    }))
    .into_response()
}
