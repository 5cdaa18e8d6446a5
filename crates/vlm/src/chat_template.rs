//! A model's chat template, rendered the way transformers renders it, with the variables the tool
//! means.
//!
//! Qwen3, Qwen3.5 and Gemma 4 templates have a reasoning switch, `enable_thinking`: left unset,
//! Qwen3.5's generation prompt opens a `<think>` block, and a yes/no score read there is read
//! mid-thought. Each family marks its reasoning its own way ([`ReasoningBlock`]): Qwen's
//! `<think>` block, Gemma 4's thought channel (`<|channel>thought` ... `<channel|>`).
//! So every render passes `enable_thinking` explicitly ([`Thinking`]); when the template opens a
//! block anyway, or reads a reasoning switch under another name, the model is refused when its
//! directory is opened, before any image is read.
//!
//! The published templates call Python's string methods (`startswith`, `split`, ...), which
//! transformers' Jinja has: minijinja-contrib's Python compatibility layer provides them.

use std::collections::BTreeSet;

use minijinja::{context, Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

use super::error::VlmError;

/// The one reasoning switch the tool knows and sets (Qwen3's, Qwen3.5's and their successors').
pub const THINKING_SWITCH: &str = "enable_thinking";
/// The reasoning block's markers in the Qwen families.
pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// How a family's turn marks its reasoning: the block opens with `open` and ends at `close`; a
/// turn starts at `turn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasoningBlock {
    pub open: &'static str,
    pub close: &'static str,
    pub turn: &'static str,
}

/// The reasoning blocks of the families the engine runs. A model's turn opens with its own
/// family's marker, so a turn is read by whichever block it opens.
pub const REASONING_BLOCKS: [ReasoningBlock; 2] = [
    // Qwen3, Qwen3.5 and their MoE models.
    ReasoningBlock { open: THINK_OPEN, close: THINK_CLOSE, turn: "<|im_start|>" },
    // Gemma 4: the thought channel (llama.cpp's published google-gemma-4-31B-it.jinja).
    ReasoningBlock { open: "<|channel>thought", close: "<channel|>", turn: "<|turn>" },
];
/// A question used to try the template when it is compiled.
const TRIAL_QUESTION: &str = "Is there a finding?";

/// What one render of a template may spend. A template is a program shipped with a checkpoint:
/// these stop a loop that never ends, a prompt of gigabytes and a string that doubles itself.
/// The published Qwen templates use a few thousand steps, under 2 KiB of output and well under
/// a megabyte of heap for the tool's one-message conversation.
pub struct TemplateLimits;

impl TemplateLimits {
    /// Template steps (minijinja's fuel): about a tenth of a second of work.
    pub const FUEL: u64 = 1_000_000;
    /// Bytes of rendered prompt.
    pub const OUTPUT: usize = 1 << 20;
    /// Bytes of heap one render may allocate; past it the process ends (see `heap_budget.rs`).
    pub const MEMORY: usize = 64 << 20;
}

/// Whether the model may reason before it answers. Scores and grounding boxes are always read
/// with thinking off; generation (S3, S4) follows the spec's `model.thinking`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    #[default]
    Off,
    On,
}

impl Thinking {
    pub fn is_off(&self) -> bool {
        *self == Thinking::Off
    }
}

/// A model's chat template, compiled once, rendered as transformers does (trim_blocks,
/// lstrip_blocks, its `raise_exception` helper, Python's string methods).
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The file it came from (a path), for errors.
    source_file: String,
    /// The variables the template reads besides the messages and the generation prompt flag.
    reads: BTreeSet<String>,
    /// The tokenizer's `bos_token` and `eos_token`, which transformers passes to every template
    /// (Gemma 4's starts with `{{ bos_token }}`); None where the tokenizer has none.
    bos_token: Option<String>,
    eos_token: Option<String>,
}

/// Variables every chat template reads that are not switches.
const CONVERSATION: [&str; 2] = ["messages", "add_generation_prompt"];

impl ChatTemplate {
    /// Compiles `template` and checks that the tool can close its reasoning block: it reads no
    /// reasoning switch but `enable_thinking`, and with thinking off its generation prompt does
    /// not end inside an open reasoning block.
    pub fn compile(template: String, source_file: String) -> Result<ChatTemplate, VlmError> {
        let mut env = Environment::new();
        env.set_fuel(Some(TemplateLimits::FUEL));
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned("chat", template).map_err(|e| fail(&source_file, e))?;
        let reads = env
            .get_template("chat")
            .map_err(|e| fail(&source_file, e))?
            .undeclared_variables(false)
            .into_iter()
            .filter(|v| !CONVERSATION.contains(&v.as_str()))
            .collect();
        let template = ChatTemplate { env, source_file, reads, bos_token: None, eos_token: None };
        template.check_switches()?;
        Ok(template)
    }

    /// The template with the tokenizer's special tokens to render (see `bos_token`).
    pub fn with_special_tokens(mut self, bos_token: Option<String>, eos_token: Option<String>) -> ChatTemplate {
        self.bos_token = bos_token;
        self.eos_token = eos_token;
        self
    }

    /// The variables the template reads (besides the conversation): what `doctor` shows.
    pub fn reads(&self) -> impl Iterator<Item = &str> {
        self.reads.iter().map(String::as_str)
    }

    /// Whether the template reads `enable_thinking`.
    pub fn has_thinking_switch(&self) -> bool {
        self.reads.contains(THINKING_SWITCH)
    }

    /// The variables the tool sets that this template reads, as build.lock and `probe` record
    /// them: empty for a template without a switch, so such a model's identity is what it was.
    pub fn variables(&self, thinking: Thinking) -> serde_json::Map<String, serde_json::Value> {
        let mut set = serde_json::Map::new();
        if self.has_thinking_switch() {
            set.insert(THINKING_SWITCH.into(), (thinking == Thinking::On).into());
        }
        set
    }

    /// One user message holding the image then `question`, and the generation prompt.
    pub fn render(&self, question: &str, thinking: Thinking) -> Result<String, VlmError> {
        let messages = vec![context! {
            role => "user",
            content => vec![context! { type => "image" }, context! { type => "text", text => question }],
        }];
        let template = self.env.get_template("chat").map_err(|e| fail(&self.source_file, e))?;
        let context = context! {
            messages,
            add_generation_prompt => true,
            enable_thinking => thinking == Thinking::On,
            bos_token => self.bos_token.as_deref().unwrap_or_default(),
            eos_token => self.eos_token.as_deref().unwrap_or_default(),
        };
        let out_of_memory = format!(
            "chat template from {}: rendering one prompt took more than {} MiB of memory; the model is refused \
             (does the template grow a string without end?)",
            self.source_file,
            TemplateLimits::MEMORY >> 20
        );
        let mut out = CappedOutput { text: Vec::new(), cap: TemplateLimits::OUTPUT, over: false };
        let rendered = crate::heap_budget::with_budget(TemplateLimits::MEMORY, &out_of_memory, || {
            template.render_captured_to(context, &mut out).map(|_| ())
        });
        match rendered {
            Ok(_) => String::from_utf8(out.text).map_err(|_| self.refused("rendered text that is not UTF-8".into())),
            Err(_) if out.over => Err(self.refused(format!(
                "rendered more than {} KiB for one question, the limit (a prompt is a few hundred bytes)",
                TemplateLimits::OUTPUT >> 10
            ))),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => {
                Err(self.refused(format!("ran past {} steps for one prompt, the limit (does it loop without end?)", TemplateLimits::FUEL)))
            }
            Err(e) => Err(fail(&self.source_file, e)),
        }
    }

    fn refused(&self, message: String) -> VlmError {
        VlmError::Template { source_file: self.source_file.clone(), message: format!("{message}; the model is refused") }
    }

    fn check_switches(&self) -> Result<(), VlmError> {
        let unknown: Vec<&str> = self
            .reads()
            .filter(|v| *v != THINKING_SWITCH && ["think", "reason"].iter().any(|w| v.to_ascii_lowercase().contains(w)))
            .collect();
        if !unknown.is_empty() {
            return Err(VlmError::Template {
                source_file: self.source_file.clone(),
                message: format!(
                    "reads {}, a reasoning switch this tool does not know (it sets only {THINKING_SWITCH}, from the spec's \
                     model.thinking for generation and off for scores): the scores could be read mid-thought, so the model is refused",
                    unknown.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ")
                ),
            });
        }
        let trial = self.render(TRIAL_QUESTION, Thinking::Off)?;
        if let Some(block) = block_left_open(&trial) {
            let why = if self.has_thinking_switch() {
                format!("even with {THINKING_SWITCH}=false")
            } else {
                format!("and it has no {THINKING_SWITCH} switch")
            };
            return Err(VlmError::Template {
                source_file: self.source_file.clone(),
                message: format!(
                    "its generation prompt ends inside an open {} block {why}: every yes/no score would be read at \
                     the first token of the model's reasoning, not of its answer; choose a checkpoint (spec key model.id or \
                     model.path) whose template can close the block",
                    block.open
                ),
            });
        }
        Ok(())
    }
}

/// Whether `prompt`'s last turn (the generation prompt) leaves a reasoning block open: the
/// model's next token is then reasoning.
pub fn ends_inside_reasoning(prompt: &str) -> bool {
    block_left_open(prompt).is_some()
}

/// The reasoning block `prompt`'s last turn opens and does not close, if any.
pub fn block_left_open(prompt: &str) -> Option<ReasoningBlock> {
    REASONING_BLOCKS.into_iter().find(|b| {
        let last_turn = prompt.rfind(b.turn).map_or(prompt, |at| &prompt[at..]);
        match (last_turn.rfind(b.open), last_turn.rfind(b.close)) {
            (Some(open), Some(close)) => open > close,
            (Some(_), None) => true,
            _ => false,
        }
    })
}

/// With thinking on, the model's turn after the reasoning marker it opens with (written by the
/// chat template or by the model), and the block's close marker; None with thinking off or a
/// turn that opens no block.
pub fn opened_block(turn: &str, thinking: Thinking) -> Option<(&str, &'static str)> {
    if thinking == Thinking::Off {
        return None;
    }
    let turn = turn.trim_start();
    REASONING_BLOCKS.iter().find_map(|b| turn.strip_prefix(b.open).map(|rest| (rest, b.close)))
}

/// The model's turn without its reasoning block (thinking on, the block closed), or the whole
/// turn (thinking off, or no block); None when the block never closed.
pub fn after_reasoning(turn: &str, thinking: Thinking) -> Option<&str> {
    match opened_block(turn, thinking) {
        Some((rest, close)) => rest.split_once(close).map(|(_, after)| after),
        None => Some(turn),
    }
}

/// The rendered prompt, refused past `cap` bytes.
struct CappedOutput {
    text: Vec<u8>,
    cap: usize,
    over: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.text.len() + bytes.len() > self.cap {
            self.over = true;
            return Err(std::io::Error::other("the rendered prompt is over its size limit"));
        }
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn fail(source_file: &str, e: Error) -> VlmError {
    VlmError::Template { source_file: source_file.into(), message: format!("{e:#}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generation prompt of Qwen3.5's published template, as this project's own words.
    const SWITCHED: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}{% if c.type == 'image' %}\
        <|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}\
        {% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}\
        <think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";

    fn compile(t: &str) -> Result<ChatTemplate, VlmError> {
        ChatTemplate::compile(t.into(), "chat_template.jinja".into())
    }

    #[test]
    fn the_switch_is_set_explicitly_and_recorded_only_where_read() {
        let t = compile(SWITCHED).unwrap();
        assert!(t.render("Q?", Thinking::Off).unwrap().ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(t.render("Q?", Thinking::On).unwrap().ends_with("<|im_start|>assistant\n<think>\n"));
        assert_eq!(serde_json::Value::from(t.variables(Thinking::Off)), serde_json::json!({"enable_thinking": false}));
        let plain = compile("{% for m in messages %}{{ m.role }}<|image_pad|>{% endfor %}").unwrap();
        assert!(plain.variables(Thinking::On).is_empty(), "a template without the switch records nothing");
    }

    #[test]
    fn python_string_methods_render() {
        let t = compile("{% if 'abc'.startswith('a') and 'abc'.endswith('c') %}{{ ' x '.strip() }}{% endif %}").unwrap();
        assert_eq!(t.render("Q?", Thinking::Off).unwrap(), "x");
    }

    #[test]
    fn a_template_that_cannot_close_its_block_is_refused() {
        let always = compile("<|im_start|>user\n<|image_pad|><|im_end|>\n<|im_start|>assistant\n<think>\n").err().unwrap().to_string();
        assert!(always.contains("chat_template.jinja") && always.contains("no enable_thinking switch"), "{always}");
        let unknown = compile("{% if thinking_mode %}<think>{% endif %}{% if reasoning_effort %}x{% endif %}").err().unwrap().to_string();
        assert!(unknown.contains("`reasoning_effort`, `thinking_mode`") && unknown.contains("model.thinking"), "{unknown}");
    }

    #[test]
    fn a_template_runs_under_a_step_limit_and_an_output_cap() {
        let endless = compile("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}<|image_pad|>")
            .err()
            .unwrap()
            .to_string();
        assert!(endless.contains("chat_template.jinja") && endless.contains("1000000 steps"), "{endless}");
        let long = compile("{% for i in range(5000) %}{{ 'x' * 1000 }}{% endfor %}<|image_pad|>").err().unwrap().to_string();
        assert!(long.contains("chat_template.jinja") && long.contains("more than 1024 KiB"), "{long}");
    }

    #[test]
    fn an_open_block_is_found_in_the_last_turn_only() {
        assert!(ends_inside_reasoning("<|im_start|>assistant\n<think>\n"));
        assert!(!ends_inside_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!ends_inside_reasoning("<|im_start|>user\n<think>\n<|im_end|>\n<|im_start|>assistant\n"));
    }

    #[test]
    fn gemma4s_thought_channel_is_its_reasoning_block() {
        // Gemma 4's generation prompts (llama.cpp's google-gemma-4-31B-it.jinja): thinking off
        // closes an empty channel; a prompt left inside one would be refused.
        assert!(!ends_inside_reasoning("<|turn>user\nQ?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"));
        assert!(!ends_inside_reasoning("<|turn>system\n<|think|>\n<turn|>\n<|turn>user\nQ?<turn|>\n<|turn>model\n"));
        assert!(ends_inside_reasoning("<|turn>user\nQ?<turn|>\n<|turn>model\n<|channel>thought\n"));
        let turn = "<|channel>thought\nThe angle is blunted.<channel|>Yes.";
        assert_eq!(opened_block(turn, Thinking::On), Some(("\nThe angle is blunted.<channel|>Yes.", "<channel|>")));
        assert_eq!(after_reasoning(turn, Thinking::On), Some("Yes."));
        assert_eq!(after_reasoning(turn, Thinking::Off), Some(turn));
        assert_eq!(after_reasoning("<|channel>thought\nstill thinking", Thinking::On), None);
    }
}
