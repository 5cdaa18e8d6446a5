//! The prompt for one yes/no question about one image: the model's own chat template applied to
//! a single user message holding the image then the question, with the generation prompt,
//! tokenized; then the image placeholder's one id repeated once per merged patch.
//!
//! transformers expands the placeholder in the text and tokenizes the result. The placeholder is
//! an added special token, which the tokenizer splits out before anything else, so tokenizing once
//! with one placeholder and repeating its id gives the same ids; a question's text and ids are
//! then computed once per run, not once per image (a 1024-pixel NIH image is over 1,000 tokens).

use minijinja::{context, Environment, Error, ErrorKind};

use super::error::VlmError;

pub const IMAGE_PAD: &str = "<|image_pad|>";

#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The rendered template, with a single image placeholder.
    pub text: String,
    pub input_ids: Vec<u32>,
    pub image_tokens: usize,
}

/// One question's prompt, rendered and tokenized once: the ids on either side of the single
/// image placeholder.
#[derive(Debug)]
pub struct PromptParts {
    pub text: String,
    pub before: Vec<u32>,
    pub after: Vec<u32>,
}

impl PromptParts {
    /// The prompt for an image of `image_tokens` merged patches.
    pub fn for_image(&self, image_token_id: u32, image_tokens: usize) -> Prompt {
        let mut input_ids = Vec::with_capacity(self.before.len() + image_tokens + self.after.len());
        input_ids.extend_from_slice(&self.before);
        input_ids.extend(std::iter::repeat_n(image_token_id, image_tokens));
        input_ids.extend_from_slice(&self.after);
        Prompt { text: self.text.clone(), input_ids, image_tokens }
    }
}

/// A model's chat template, compiled once, rendered as transformers does (trim_blocks,
/// lstrip_blocks, and its `raise_exception` helper).
pub struct ChatTemplate {
    env: Environment<'static>,
    source_file: &'static str,
}

impl ChatTemplate {
    pub fn compile(template: String, source_file: &'static str) -> Result<ChatTemplate, VlmError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function("raise_exception", |message: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned("chat", template).map_err(|e| fail(source_file, e))?;
        Ok(ChatTemplate { env, source_file })
    }

    /// One user message holding the image then `question`, and the generation prompt.
    pub fn render(&self, question: &str) -> Result<String, VlmError> {
        let messages = vec![context! {
            role => "user",
            content => vec![context! { type => "image" }, context! { type => "text", text => question }],
        }];
        let template = self.env.get_template("chat").map_err(|e| fail(self.source_file, e))?;
        template.render(context! { messages, add_generation_prompt => true }).map_err(|e| fail(self.source_file, e))
    }
}

fn fail(source_file: &str, e: Error) -> VlmError {
    VlmError::Template { source_file: source_file.into(), message: format!("{e:#}") }
}
