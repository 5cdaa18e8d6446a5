//! The prompt for one yes/no question about one image: the model's own chat template applied to
//! a single user message holding the image then the question, with the generation prompt; the
//! image placeholder expanded to one token per merged patch; then tokenized.

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
