//! The prompt for one yes/no question about one image: the model's own chat template applied to
//! a single user message holding the image then the question, with the generation prompt,
//! tokenized; then the image placeholder's one id repeated once per merged patch.
//!
//! transformers expands the placeholder in the text and tokenizes the result. The placeholder is
//! an added special token, which the tokenizer splits out before anything else, so tokenizing once
//! with one placeholder and repeating its id gives the same ids; a question's text and ids are
//! then computed once per run, not once per image (a 1024-pixel NIH image is over 1,000 tokens).

#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The rendered template, with a single image placeholder.
    pub text: String,
    pub input_ids: Vec<u32>,
    pub image_tokens: usize,
    /// The generation prompt ends inside an open `<think>` block (thinking on, Qwen3.5-style):
    /// the model's first tokens are reasoning.
    pub opens_reasoning: bool,
}

/// One question's prompt, rendered and tokenized once: the ids on either side of the single
/// image placeholder.
#[derive(Debug)]
pub struct PromptParts {
    pub text: String,
    pub before: Vec<u32>,
    pub after: Vec<u32>,
    pub opens_reasoning: bool,
}

impl PromptParts {
    /// The prompt for an image of `image_tokens` merged patches.
    pub fn for_image(&self, image_token_id: u32, image_tokens: usize) -> Prompt {
        let mut input_ids = Vec::with_capacity(self.before.len() + image_tokens + self.after.len());
        input_ids.extend_from_slice(&self.before);
        input_ids.extend(std::iter::repeat_n(image_token_id, image_tokens));
        input_ids.extend_from_slice(&self.after);
        Prompt { text: self.text.clone(), input_ids, image_tokens, opens_reasoning: self.opens_reasoning }
    }
}
