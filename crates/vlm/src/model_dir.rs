//! A Hugging Face model directory, checked as a whole before anything is computed: the config,
//! the preprocessor config, the tokenizer, the chat template (wherever the checkpoint keeps it)
//! and the weight files (one file, or shards listed by an index).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use super::chat_template::{ChatTemplate, Thinking};
use super::checkpoint::ModelConfig;
use super::config::{ConfigError, PreprocessorConfig};
use super::error::VlmError;
use super::prompt::{Prompt, PromptParts};

/// Where the chat template was found, in the order they are looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatTemplateSource {
    ChatTemplateJinja,
    ChatTemplateJson,
    TokenizerConfig,
}

impl ChatTemplateSource {
    pub fn file(self) -> &'static str {
        match self {
            ChatTemplateSource::ChatTemplateJinja => "chat_template.jinja",
            ChatTemplateSource::ChatTemplateJson => "chat_template.json",
            ChatTemplateSource::TokenizerConfig => "tokenizer_config.json",
        }
    }
}

pub struct ModelDir {
    pub path: PathBuf,
    pub config: ModelConfig,
    pub preprocessor: PreprocessorConfig,
    /// The file the preprocessor settings came from: `preprocessor_config.json`, or Gemma 4's
    /// `processor_config.json`.
    pub preprocessor_file: PathBuf,
    pub tokenizer: tokenizers::Tokenizer,
    pub chat_template: String,
    pub chat_template_source: ChatTemplateSource,
    /// The template compiled: a syntax error surfaces when the directory is opened.
    pub template: ChatTemplate,
    /// `model.safetensors`, or every shard named by `model.safetensors.index.json`, sorted.
    pub weights: Vec<PathBuf>,
    /// Token ids that end a generated answer (from generation_config.json, else config.json).
    pub eos_token_ids: Vec<u32>,
    /// Each question's prompt, rendered and tokenized on first use (a run asks a few dozen).
    prompts: Mutex<HashMap<(String, Thinking), Arc<PromptParts>>>,
}

fn read_json(path: &Path) -> Result<Value, VlmError> {
    let text = std::fs::read_to_string(path).map_err(|source| VlmError::Read { path: path.into(), source })?;
    serde_json::from_str(&text).map_err(|e| VlmError::NotA { path: path.into(), what: "valid JSON", source: e.into() })
}

fn require(dir: &Path, name: &str, hint: &str) -> Result<PathBuf, VlmError> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(VlmError::Missing { dir: dir.into(), what: name.into(), hint: hint.into() })
    }
}

impl ModelDir {
    pub fn open(dir: &Path) -> Result<ModelDir, VlmError> {
        if !dir.is_dir() {
            return Err(VlmError::Input(format!("{} is not a directory (expected a Hugging Face model directory)", dir.display())));
        }
        let config_path = require(dir, "config.json", "every checkpoint has one")?;
        let config = ModelConfig::from_json(&read_json(&config_path)?).map_err(|error| VlmError::Config { path: config_path, error })?;
        let (pre_path, pre_json) = preprocessor_json(dir)?;
        let preprocessor = PreprocessorConfig::from_json(&pre_json).map_err(|error| VlmError::Config { path: pre_path.clone(), error })?;
        check_preprocessor(&preprocessor, &config).map_err(|error| VlmError::Config { path: pre_path.clone(), error })?;
        let tokenizer_path = require(dir, "tokenizer.json", "the fast tokenizer file")?;
        let tokenizer = tokenizers::Tokenizer::from_file(&tokenizer_path).map_err(|source| VlmError::NotA {
            path: tokenizer_path.clone(),
            what: "a tokenizer",
            source,
        })?;
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > config.text.vocab_size {
            return Err(VlmError::File {
                path: tokenizer_path,
                message: format!("{vocab} tokens, more than the model's vocab_size {}", config.text.vocab_size),
            });
        }
        // Prompts repeat the placeholder's id once per merged patch (see `prompt`): it must be
        // one token, the one the model replaces with the image's embeddings.
        let placeholder = config.family.image_placeholder();
        let pad = tokenizer.token_to_id(placeholder);
        if pad != Some(config.image_token_id) {
            return Err(VlmError::File {
                path: tokenizer_path,
                message: format!(
                    "{placeholder} is {}, expected config.json's image_token_id {}",
                    pad.map_or("not a token".to_string(), |id| format!("token {id}")),
                    config.image_token_id
                ),
            });
        }
        let (chat_template, chat_template_source) = chat_template(dir)?;
        let (bos, eos) = special_tokens(dir)?;
        let template = ChatTemplate::compile(chat_template.clone(), dir.join(chat_template_source.file()).display().to_string())?
            .with_special_tokens(bos, eos);
        let weights = weight_files(dir)?;
        let eos_token_ids = eos_ids(dir)?;
        Ok(ModelDir {
            path: dir.into(),
            config,
            preprocessor,
            preprocessor_file: pre_path,
            tokenizer,
            chat_template,
            chat_template_source,
            template,
            weights,
            eos_token_ids,
            prompts: Mutex::default(),
        })
    }

    /// Where generation stops: the model's end-of-sequence ids and `<|im_end|>`.
    pub fn stop_token_ids(&self) -> Vec<u32> {
        let mut stop = self.eos_token_ids.clone();
        stop.extend(self.tokenizer.token_to_id("<|im_end|>"));
        stop.sort_unstable();
        stop.dedup();
        stop
    }
}

/// The image processor's settings: `preprocessor_config.json`, or where a checkpoint keeps only
/// the processor's file (transformers 5 writes Gemma 4's so), its `image_processor` object.
fn preprocessor_json(dir: &Path) -> Result<(PathBuf, Value), VlmError> {
    let processor = dir.join("processor_config.json");
    if !dir.join("preprocessor_config.json").is_file() && processor.is_file() {
        let json = read_json(&processor)?;
        if let Some(image) = PreprocessorConfig::in_processor_config(&json) {
            return Ok((processor, image.clone()));
        }
    }
    let path = require(dir, "preprocessor_config.json", "the image processor settings (or processor_config.json's image_processor)")?;
    let json = read_json(&path)?;
    Ok((path, json))
}

/// Every field of the preprocessor config the model's own config also fixes must agree with it
/// (a patch the vision tower was not built for fails inside libtorch), and the smallest image
/// must fit in the model's context.
pub fn check_preprocessor(pre: &PreprocessorConfig, config: &ModelConfig) -> Result<(), ConfigError> {
    let v = &config.vision;
    for (key, ours, theirs, config_key) in [
        ("patch_size", pre.patch_size, v.patch_size, "patch_size"),
        ("merge_size", pre.merge_size, v.spatial_merge_size, "spatial_merge_size"),
        ("temporal_patch_size", pre.temporal_patch_size, v.temporal_patch_size, "temporal_patch_size"),
    ] {
        if ours != theirs {
            return Err(super::config::err(key, format!("{ours} disagrees with config.json's vision_config.{config_key} {theirs}")));
        }
    }
    pre.check_bounds()?;
    if let Some(context) = config.text.max_position_embeddings {
        let tokens = pre.tokens(pre.min_pixels);
        if tokens > context as u64 {
            return Err(super::config::err(
                pre.bound_keys().0,
                format!(
                    "{}: every image would be at least {tokens} tokens, more than the model's max_position_embeddings {context} (config.json)",
                    pre.min_pixels
                ),
            ));
        }
    }
    Ok(())
}

/// Where a checkpoint keeps its generation defaults; the engine reads only `eos_token_id`.
pub const GENERATION_CONFIG: &str = "generation_config.json";

fn eos_ids(dir: &Path) -> Result<Vec<u32>, VlmError> {
    for name in [GENERATION_CONFIG, "config.json"] {
        let path = dir.join(name);
        if !path.is_file() {
            continue;
        }
        match read_json(&path)?.get("eos_token_id") {
            Some(Value::Number(n)) => return Ok(n.as_u64().map(|n| vec![n as u32]).unwrap_or_default()),
            Some(Value::Array(a)) => return Ok(a.iter().filter_map(Value::as_u64).map(|n| n as u32).collect()),
            _ => {}
        }
    }
    Ok(Vec::new())
}

/// tokenizer_config.json's `bos_token` and `eos_token` (a string, or an added token's
/// `content`), which templates may write; none where the file or the key is missing.
fn special_tokens(dir: &Path) -> Result<(Option<String>, Option<String>), VlmError> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok((None, None));
    }
    let json = read_json(&path)?;
    let token = |key: &str| match json.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    };
    Ok((token("bos_token"), token("eos_token")))
}

fn chat_template(dir: &Path) -> Result<(String, ChatTemplateSource), VlmError> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let text = std::fs::read_to_string(&jinja).map_err(|source| VlmError::Read { path: jinja, source })?;
        return Ok((text, ChatTemplateSource::ChatTemplateJinja));
    }
    for source in [ChatTemplateSource::ChatTemplateJson, ChatTemplateSource::TokenizerConfig] {
        let path = dir.join(source.file());
        if !path.is_file() {
            continue;
        }
        match read_json(&path)?.get("chat_template") {
            Some(Value::String(t)) => return Ok((t.clone(), source)),
            // A list of named templates: take the default one.
            Some(Value::Array(named)) => {
                if let Some(t) = named.iter().find(|n| n["name"] == "default").and_then(|n| n["template"].as_str()) {
                    return Ok((t.to_string(), source));
                }
                return Err(VlmError::File { path, message: "chat_template lists no template named \"default\"".into() });
            }
            _ => {}
        }
    }
    Err(VlmError::Missing {
        dir: dir.into(),
        what: "chat template".into(),
        hint: "looked in chat_template.jinja, chat_template.json and tokenizer_config.json".into(),
    })
}

fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, VlmError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(VlmError::Missing {
            dir: dir.into(),
            what: "weights".into(),
            hint: "expected model.safetensors or model.safetensors.index.json".into(),
        });
    }
    let map = read_json(&index)?;
    let Some(entries) = map.get("weight_map").and_then(Value::as_object) else {
        return Err(VlmError::File { path: index, message: "no weight_map object".into() });
    };
    let mut shards: Vec<String> = entries.values().filter_map(Value::as_str).map(str::to_string).collect();
    shards.sort();
    shards.dedup();
    let mut files = Vec::new();
    for shard in shards {
        let path = dir.join(&shard);
        if !path.is_file() {
            return Err(VlmError::File { path: index, message: format!("weight_map names {shard}, which is not in the directory") });
        }
        files.push(path);
    }
    Ok(files)
}

impl ModelDir {
    /// The prompt for `question` about an image whose patch grid is (t, h, w).
    pub fn prompt(&self, question: &str, grid_thw: (usize, usize, usize), thinking: Thinking) -> Result<Prompt, VlmError> {
        let merge = self.config.vision.spatial_merge_size;
        let image_tokens = grid_thw.0 * grid_thw.1 * grid_thw.2 / (merge * merge);
        let prompt = self.prompt_parts(question, thinking)?.for_image(self.config.image_token_id, image_tokens);
        match self.config.text.max_position_embeddings {
            Some(context) if prompt.input_ids.len() > context => Err(VlmError::Input(format!(
                "the prompt is {} tokens ({image_tokens} of them the image's), more than the model's max_position_embeddings {context} \
                 (config.json): lower the preprocessor's max_pixels (spec key model.max_pixels)",
                prompt.input_ids.len()
            ))),
            _ => Ok(prompt),
        }
    }

    fn prompt_parts(&self, question: &str, thinking: Thinking) -> Result<Arc<PromptParts>, VlmError> {
        let key = (question.to_string(), thinking);
        if let Some(parts) = self.prompts.lock().expect("prompt cache lock").get(&key) {
            return Ok(parts.clone());
        }
        let text = self.template.render(question, thinking)?;
        let placeholder = self.config.family.image_placeholder();
        if text.matches(placeholder).count() != 1 {
            return Err(VlmError::Template {
                source_file: self.path.join(self.chat_template_source.file()).display().to_string(),
                message: format!("rendered {} {placeholder} placeholders for one image, expected 1", text.matches(placeholder).count()),
            });
        }
        let encoding = self.tokenizer.encode(text.as_str(), true).map_err(|e| VlmError::Input(format!("tokenizing the prompt: {e}")))?;
        let ids = encoding.get_ids();
        let pad = self.config.image_token_id;
        let at: Vec<usize> = ids.iter().enumerate().filter(|(_, &id)| id == pad).map(|(i, _)| i).collect();
        let &[at] = at.as_slice() else {
            return Err(VlmError::File {
                path: self.path.join("tokenizer.json"),
                message: format!(
                    "the prompt's one {placeholder} tokenizes to {} copies of config.json's image_token_id {pad}, expected exactly 1",
                    at.len()
                ),
            });
        };
        // A video or audio placeholder in the prompt (a question that holds `<|audio|>`, say)
        // stands for media no one feeds: transformers' processor refuses such a prompt.
        let others = &self.config.text.other_media_token_ids;
        if let Some(&id) = ids.iter().find(|id| others.contains(id)) {
            let name = self.tokenizer.id_to_token(id).unwrap_or_else(|| format!("token {id}"));
            return Err(VlmError::Input(format!(
                "the prompt holds {name} (id {id}), a placeholder for media the engine does not feed (only the image): \
                 remove it from the question{}",
                if question.contains(&name) { "" } else { " or the chat template" }
            )));
        }
        let opens_reasoning = super::chat_template::ends_inside_reasoning(&text);
        let (mut before, mut after) = (ids[..at].to_vec(), ids[at + 1..].to_vec());
        // Where the template leaves the image's brackets out, its processor writes them
        // (Gemma 4's), and so does the engine.
        if !self.config.family.architecture().template_writes_image_brackets() {
            before.push(self.config.vision_start_token_id);
            after.insert(0, self.config.vision_end_token_id);
        }
        let parts = Arc::new(PromptParts { before, after, opens_reasoning, text });
        self.prompts.lock().expect("prompt cache lock").insert(key, parts.clone());
        Ok(parts)
    }

    /// The text of the model's turn after `prompt`: the generated tokens, stop tokens left out,
    /// special tokens kept (Qwen2-VL's box markers are special tokens). When the prompt opened a
    /// reasoning block, the text starts with its `<think>`, so the block reads whole.
    pub fn answer_text(&self, prompt: &Prompt, tokens: &[u32]) -> Result<String, VlmError> {
        let stop = self.stop_token_ids();
        let content: Vec<u32> = tokens.iter().copied().filter(|t| !stop.contains(t)).collect();
        let text = self.tokenizer.decode(&content, false).map_err(|e| VlmError::Input(format!("decoding the answer: {e}")))?;
        // The block the prompt left open starts the turn, so the turn reads whole.
        Ok(match super::chat_template::block_left_open(&prompt.text).filter(|_| prompt.opens_reasoning) {
            Some(block) => format!("{}{text}", block.open),
            None => text,
        })
    }

    /// The ids whose logits answer a yes/no question: the first token of "Yes" and of "No".
    pub fn answer_token_ids(&self) -> Result<(u32, u32), VlmError> {
        let first = |word: &str| -> Result<u32, VlmError> {
            let encoding = self.tokenizer.encode(word, false).map_err(|e| VlmError::Input(format!("tokenizing {word:?}: {e}")))?;
            encoding.get_ids().first().copied().ok_or_else(|| VlmError::Input(format!("the tokenizer encodes {word:?} as nothing")))
        };
        Ok((first("Yes")?, first("No")?))
    }
}
