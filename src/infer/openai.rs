//! The `openai` backend: scores and answers through any OpenAI-compatible server (vLLM, SGLang)
//! serving the model, instead of the native engine.
//!
//! Each question is one chat completion in the native engine's message layout: a single user
//! message holding the image (a base64 PNG data URL) then the question. Its yes/no score comes
//! from the first answer token's logprobs of "Yes" and "No"; their difference is the native
//! engine's logit difference (the normaliser cancels), so `p_yes` means the same thing. With
//! `model.answer_token_ids` the request also restricts the answer to those two tokens (vLLM's
//! `allowed_token_ids`), so both are always listed; without it a server that lists only some
//! of the top tokens may hide one, which is an error naming the fix.
//!
//! Every request carries `chat_template_kwargs` with `enable_thinking` (the convention vLLM,
//! SGLang and llama.cpp's server share): off for scores and grounding, the spec's
//! `model.thinking` for S3 and S4. A server that ignores it and answers a yes/no question inside
//! a reasoning block is an error naming the served model, never a score.
//!
//! The scorer is synchronous, like every [`Scorer`], but keeps a tokio runtime of its own: the
//! questions of an image go out together, and one semaphore bounds the requests in flight
//! across every worker thread (`model.concurrency`, `--concurrency`). Requests are retried on
//! 429 (after its Retry-After), 5xx, timeouts and dropped connections. The API key comes from
//! OPENAI_API_KEY and is never printed: [`redact`] strips it from any text.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::{Answer, DecodingSettings, ImageAnswers, ImageInput, InferError, Scorer, ScorerIdentity, YesNo};
use crate::hub::retry::{self, Backoff};
use crate::release_spec::{Backend, ModelSpec, Question, ServedModel, ServerKind};
use bpals_vlm::chat_template::{THINKING_SWITCH, THINK_CLOSE, THINK_OPEN};
use bpals_vlm::Thinking;

/// The environment variable the API key is read from.
pub const API_KEY_VAR: &str = "OPENAI_API_KEY";
/// Attempts after the first, on transient failures.
const RETRIES: usize = 6;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How far above 0 a server's logprob may round (a token of probability 1 in float arithmetic).
const LOGPROB_ROUNDING: f64 = 1e-4;
/// The bias `logit_bias` puts on both answer tokens (servers without `allowed_token_ids`).
const LOGIT_BIAS: f64 = 100.0;
/// The most tokens an OpenAI-compatible server lists per position.
const TOP_LOGPROBS: usize = 20;
/// The answer tokens, as the native engine reads them (the first token of each word).
const YES: &str = "Yes";
const NO: &str = "No";
/// The Qwen processors' pixel bounds, when the spec gives none (what the server resizes to).
const DEFAULT_MIN_PIXELS: u64 = 56 * 56;
const DEFAULT_MAX_PIXELS: u64 = 28 * 28 * 16384;

/// Replaces the API key, wherever it appears in `text`, with a fixed marker.
/// Replaces the API key, as it was set and as it is sent (trimmed), with a fixed marker.
pub fn redact(text: &str) -> String {
    let Ok(raw) = std::env::var(API_KEY_VAR) else { return text.to_string() };
    let mut out = text.to_string();
    for form in [raw.as_str(), raw.trim()] {
        if form.len() >= 4 {
            out = out.replace(form, "[api key redacted]");
        }
    }
    out
}

/// The API key trimmed as it is sent; one with whitespace inside is refused (never printed).
fn api_key() -> Result<Option<String>, InferError> {
    let Some(key) = std::env::var(API_KEY_VAR).ok().map(|k| k.trim().to_string()).filter(|k| !k.is_empty()) else {
        return Ok(None);
    };
    if key.chars().any(char::is_whitespace) {
        return Err(fail(format!("{API_KEY_VAR} has whitespace inside the key (after its ends are trimmed): set it to the key alone")));
    }
    Ok(Some(key))
}

pub struct OpenAiScorer {
    identity: ScorerIdentity,
    served: ServedModel,
    model_id: String,
    /// The name requests ask for and answers must carry: `model.served_name`, else the id.
    requested: String,
    family: &'static str,
    pixels: (u64, u64),
    client: reqwest::Client,
    api_key: Option<String>,
    limit: Arc<Semaphore>,
    /// The first request that gave up on the server, retries spent: every later request fails
    /// at once with it, so a build whose server went away stops in seconds, not after every
    /// image in flight has spent its own retries.
    first_give_up: Arc<std::sync::OnceLock<String>>,
    runtime: tokio::runtime::Runtime,
}

fn fail(message: impl Into<String>) -> InferError {
    InferError::Scorer { backend: "openai".into(), message: redact(&message.into()) }
}

impl OpenAiScorer {
    pub fn connect(model: &ModelSpec) -> Result<OpenAiScorer, InferError> {
        let served = model.served.clone().ok_or_else(|| fail("model.endpoint is not set"))?;
        let family = bpals_vlm::Family::from_name(&served.family).ok_or_else(|| fail(format!("unknown family {}", served.family)))?.name();
        let client = reqwest::Client::builder()
            .user_agent(format!("{}/{}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(served.timeout_s))
            .timeout(Duration::from_secs(served.timeout_s))
            // Never on to another address: the request carries the image, and the lock names
            // the endpoint the spec gave.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| fail(format!("building the HTTP client: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| fail(format!("starting the request runtime: {e}")))?;
        let pixels = (model.min_pixels.unwrap_or(DEFAULT_MIN_PIXELS), model.max_pixels.unwrap_or(DEFAULT_MAX_PIXELS));
        let identity = ScorerIdentity {
            backend: Backend::Openai,
            model_id: model.id.clone(),
            revision: model.revision.clone(),
            commit: None,
            weights_sha256: None,
            fixture: false,
            preprocessing: json!({
                "api": "openai chat completions",
                "message": "one user message: the image (PNG, base64 data URL), then the question",
                "answer": "first-token logprobs of \"Yes\" and \"No\"",
                "answer_token_ids": served.answer_token_ids,
                "server": served.server,
                "answer_restriction": served.answer_token_ids.map(|_| served.server.restriction()),
                "chat_template_kwargs": chat_template_kwargs(Thinking::Off),
                "family": family,
                "min_pixels": pixels.0,
                "max_pixels": pixels.1,
            }),
            generation: None,
        };
        Ok(OpenAiScorer {
            identity,
            limit: Arc::new(Semaphore::new(served.concurrency)),
            first_give_up: Arc::default(),
            requested: served.served_name.clone().unwrap_or_else(|| model.id.clone()),
            served,
            model_id: model.id.clone(),
            family,
            pixels,
            client,
            api_key: api_key()?,
            runtime,
        })
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.served.endpoint)
    }

    /// The request body for `text` about the image at `data_url`.
    fn body(&self, data_url: &str, text: &str, max_tokens: usize, yes_no: bool, thinking: Thinking) -> Value {
        let mut body = json!({
            "model": self.requested,
            "messages": [{ "role": "user", "content": [
                { "type": "image_url", "image_url": { "url": data_url } },
                { "type": "text", "text": text },
            ]}],
            "max_tokens": max_tokens,
            "temperature": 0,
            // Qwen2-VL's box markers are special tokens: keep them in generated text.
            "skip_special_tokens": false,
            "chat_template_kwargs": chat_template_kwargs(thinking),
        });
        if yes_no {
            body["logprobs"] = json!(true);
            body["top_logprobs"] = json!(TOP_LOGPROBS);
            if let Some([yes, no]) = self.served.answer_token_ids {
                match self.served.server {
                    ServerKind::Vllm => body["allowed_token_ids"] = json!([yes, no]),
                    // The same bias on both tokens lifts them into the listed logprobs and leaves
                    // their difference, the score, as it was.
                    ServerKind::Sglang | ServerKind::LlamaCpp => {
                        body["logit_bias"] = json!({ yes.to_string(): LOGIT_BIAS, no.to_string(): LOGIT_BIAS })
                    }
                }
            }
        }
        body
    }

    /// Posts `body`, retrying transient failures; the answer's JSON.
    async fn post(&self, body: &Value, what: &str) -> Result<Value, InferError> {
        let _permit = self.limit.acquire().await.map_err(|_| fail("the request limiter closed"))?;
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF, MAX_BACKOFF * 6);
        let give_up = |message: String| {
            let first = self.first_give_up.get_or_init(|| message.clone());
            fail(if *first == message { message } else { format!("{what}: not retried, as an earlier request gave up: {first}") })
        };
        for attempt in 0..=RETRIES {
            if let Some(first) = self.first_give_up.get() {
                return Err(fail(format!("{what}: not sent, as an earlier request gave up: {first}")));
            }
            let mut request = self.client.post(self.url()).json(body);
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            let last = attempt == RETRIES;
            let retry_after = match request.send().await {
                Ok(response) => {
                    let (status, retry_after) = (response.status(), retry::retry_after(response.headers()));
                    if status.is_redirection() {
                        let to = response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("nowhere named");
                        return Err(fail(format!(
                            "{what}: the server answered {status}, redirecting to {to}; a request (and its image) is never sent \
                             on to another address: set model.endpoint to where the model is served"
                        )));
                    }
                    match capped_text(response).await {
                        Err(Body::TooLarge(size)) => {
                            return Err(fail(format!(
                                "{what}: the server's answer is {size}, over the {} MiB a chat completion may take; refused \
                                 without reading the rest",
                                MAX_ANSWER_BYTES >> 20
                            )))
                        }
                        Ok(text) if status.is_success() => {
                            let answer =
                                serde_json::from_str(&text).map_err(|e| fail(format!("{what}: the server's answer is not JSON: {e}")))?;
                            return self.check_model(answer, what);
                        }
                        Ok(text) if retry::is_transient(status) => {
                            if last {
                                return Err(give_up(format!(
                                    "{what}: the server answered {status} {RETRIES} times over: {}",
                                    short(&text)
                                )));
                            }
                            retry_after
                        }
                        Ok(text) => return Err(fail(format!("{what}: the server answered {status}: {}", short(&text)))),
                        Err(Body::Broken(e)) if last => return Err(give_up(format!("{what}: the answer broke off {}", gave_up(&e)))),
                        Err(Body::Broken(_)) => None,
                    }
                }
                Err(e) if last => return Err(give_up(format!("{what}: {}", gave_up(&e)))),
                Err(_) => None,
            };
            tokio::time::sleep(backoff.pause(retry_after)).await;
        }
        unreachable!("the last attempt returns")
    }

    /// An answer is the asked model's, by the name it carries: a server that routes the
    /// request to another model (or names none) is refused, never scored.
    fn check_model(&self, answer: Value, what: &str) -> Result<Value, InferError> {
        match answer.get("model").and_then(Value::as_str) {
            Some(name) if name == self.requested => Ok(answer),
            named => Err(fail(format!(
                "{what}: the request asked for model {:?} and the answer is from {}: refused. If the server serves this model \
                 under another name, set model.served_name to it",
                self.requested,
                named.map_or("no model it names".to_string(), |n| format!("{n:?}")),
            ))),
        }
    }

    /// One yes/no score from a chat completion's first-token logprobs.
    fn yes_no(&self, answer: &Value, what: &str) -> Result<YesNo, InferError> {
        let model = &self.model_id;
        let first = answer["choices"][0]["logprobs"]["content"][0]["token"].as_str().unwrap_or("");
        let content = answer["choices"][0]["message"]["content"].as_str().unwrap_or("");
        if first.trim_start().starts_with(THINK_OPEN) || content.trim_start().starts_with(THINK_OPEN) {
            return Err(self.thinking_error(what));
        }
        let listed = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"].as_array().ok_or_else(|| {
            fail(format!(
                "{what}: the server's model {model} answered without first-token logprobs: it must honour `logprobs` and \
                     `top_logprobs` on chat completions (see the server table in the guide)"
            ))
        })?;
        let find = |token: &str| listed.iter().find(|t| t["token"] == token).map(|t| &t["logprob"]);
        match (find(YES), find(NO)) {
            (Some(yes), Some(no)) => Ok(YesNo { logit_yes: self.logprob(yes, YES, what)?, logit_no: self.logprob(no, NO, what)? }),
            (yes, _) => Err(fail(format!(
                "{what}: the server's model {model} lists no {:?} among its {} first-token logprobs: set model.answer_token_ids to \
                 the tokenizer's ids of \"Yes\" and \"No\" (sent as {}), or raise the server's logprobs cap (vLLM \
                 --max-logprobs)",
                if yes.is_none() { YES } else { NO },
                listed.len(),
                self.served.server.restriction()
            ))),
        }
    }

    /// A listed token's logprob, checked: a number (not a string or null) and never above 0, as
    /// no log-probability is (up to a server's rounding, `LOGPROB_ROUNDING`).
    fn logprob(&self, value: &Value, token: &str, what: &str) -> Result<f32, InferError> {
        let model = &self.model_id;
        let Some(logprob) = value.as_f64() else {
            return Err(fail(format!("{what}: the server's model {model} gave {token:?} the logprob {value}, which is not a number")));
        };
        if logprob > LOGPROB_ROUNDING {
            return Err(fail(format!(
                "{what}: the server's model {model} gave {token:?} the logprob {logprob}, above 0: a log-probability never is, \
                 so the server is reporting something else (raw logits?); nothing was cached"
            )));
        }
        Ok(logprob as f32)
    }

    /// The served model opened a reasoning block where it should answer.
    fn thinking_error(&self, what: &str) -> InferError {
        fail(format!(
            "{what}: the server's model {} answered inside a reasoning block ({THINK_OPEN}) although the request set \
             chat_template_kwargs {THINKING_SWITCH}=false: a score read there is read mid-thought. Serve the model with a chat \
             template that honours {THINKING_SWITCH} (and no reasoning parser), or choose a checkpoint without thinking",
            self.model_id
        ))
    }

    fn data_url(image: &ImageInput<'_>) -> String {
        format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(image.bytes))
    }
}

/// The chat template variables a request sets (see the module's doc).
fn chat_template_kwargs(thinking: Thinking) -> Value {
    json!({ THINKING_SWITCH: thinking == Thinking::On })
}

/// The most bytes one answer may have: a chat completion with its logprobs, or a generated
/// report, is kilobytes; a server that sends gigabytes would take the build's memory with it.
const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Why an answer's body was not read.
enum Body {
    /// Declared or found larger than [`MAX_ANSWER_BYTES`] (a description of the size): final.
    TooLarge(String),
    /// The connection broke off: retried like any transient failure.
    Broken(reqwest::Error),
}

/// The answer's body as text, at most [`MAX_ANSWER_BYTES`]: a declared length above it is
/// refused before anything is read, and a body that passes it while streaming is dropped there.
async fn capped_text(mut response: reqwest::Response) -> Result<String, Body> {
    if let Some(declared) = response.content_length().filter(|n| *n > MAX_ANSWER_BYTES as u64) {
        return Err(Body::TooLarge(format!("declared as {declared} bytes")));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Body::Broken)? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(Body::TooLarge(format!("more than {MAX_ANSWER_BYTES} bytes")));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A request error with its causes ("connection refused" is a source, not the message), after
/// the retries.
fn gave_up(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    format!("{text} (gave up after {RETRIES} retries)")
}

/// A server's error text, one line and short (it may echo the request).
fn short(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    line.chars().take(300).collect()
}

impl Scorer for OpenAiScorer {
    fn identity(&self) -> &ScorerIdentity {
        &self.identity
    }

    fn score(&self, image: &ImageInput<'_>, questions: &[Question]) -> Result<Vec<YesNo>, InferError> {
        let url = Self::data_url(image);
        let asks = questions.iter().map(|q| async {
            let what = format!("image {}, question {}", image.name, q.id);
            let answer = self.post(&self.body(&url, &q.text, 1, true, Thinking::Off), &what).await?;
            self.yes_no(&answer, &what)
        });
        self.runtime.block_on(futures::future::join_all(asks)).into_iter().collect()
    }

    fn generate(
        &self,
        images: &[ImageInput<'_>],
        prompts: &[&[String]],
        settings: &DecodingSettings,
    ) -> Result<Vec<ImageAnswers>, InferError> {
        let urls: Vec<String> = images.iter().map(Self::data_url).collect();
        // Every prompt of every image goes out together; the semaphore bounds them.
        let asks = images.iter().zip(&urls).zip(prompts).map(|((image, url), prompts)| {
            futures::future::try_join_all(prompts.iter().enumerate().map(move |(i, prompt)| async move {
                let what = format!("image {}, prompt {i}", image.name);
                let body = self.body(url, prompt, settings.max_new_tokens, false, settings.thinking);
                let answer = self.post(&body, &what).await?;
                let choice = &answer["choices"][0];
                let text = choice["message"]["content"].as_str().ok_or_else(|| fail(format!("{what}: the answer has no text")))?;
                // With thinking off a `<think>` in the text is the model's own writing (S3's prompts
                // ask for that format). With it on, a server with a reasoning parser returns the
                // block apart: put it back where the model wrote it.
                let text = match (settings.thinking, choice["message"]["reasoning_content"].as_str()) {
                    (Thinking::On, Some(reasoning)) => format!("{THINK_OPEN}{reasoning}{THINK_CLOSE}{text}"),
                    _ => text.to_string(),
                };
                let new_tokens = answer["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize;
                Ok::<_, InferError>(Answer { text, new_tokens, truncated: choice["finish_reason"] == "length" })
            }))
        });
        let answered = self.runtime.block_on(futures::future::try_join_all(asks))?;
        images
            .iter()
            .zip(answered)
            .map(|(image, answers)| {
                let (w, h) = (image.image.width(), image.image.height());
                // The frame the server's model saw: the processor's resize, as the spec's pixel bounds give it.
                let resized = bpals_vlm::preprocess::smart_resize(h as usize, w as usize, 28, self.pixels.0, self.pixels.1)
                    .map_err(|e| fail(format!("image {}: {e}", image.name)))?;
                Ok(ImageAnswers { original: (w, h), resized, answers })
            })
            .collect()
    }

    fn family(&self) -> &'static str {
        self.family
    }
}
