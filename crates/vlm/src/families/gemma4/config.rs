//! Gemma 4's own settings, as its config.json names them: what its decoder and its vision tower
//! need beside the fields every family shares. The shared types carry them unnamed
//! (`TextConfig::own`, `VisionConfig::own`); `super::text_config` and `super::vision_config` read
//! them.
//!
//! [`TextConfig`]: crate::config::TextConfig
//! [`VisionConfig`]: crate::config::VisionConfig

use serde::Serialize;

/// What Gemma 4's decoder needs beside the shared [`TextConfig`] fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gemma4Text {
    pub layers: Vec<Gemma4Layer>,
    /// Keys a sliding layer's query sees: the last `sliding_window` positions, itself included.
    pub sliding_window: usize,
    pub sliding_rope: RopeSettings,
    pub full_rope: RopeSettings,
    /// `final_logit_softcapping`: logits become cap * tanh(logits / cap).
    pub final_logit_softcapping: Option<f64>,
    /// `use_bidirectional_attention: vision`: on sliding layers an image's tokens see each other
    /// both ways.
    pub bidirectional_vision: bool,
    /// Per-layer input embeddings (`hidden_size_per_layer_input`, E2B/E4B): width and vocabulary.
    pub per_layer_input: Option<(usize, usize)>,
    pub pad_token_id: u32,
}

/// One decoder layer's attention.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gemma4Layer {
    pub sliding: bool,
    pub head_dim: usize,
    pub kv_heads: usize,
    /// Full layers of `attention_k_eq_v` models: the key projection serves as values too.
    pub k_eq_v: bool,
    /// A KV-shared layer: the earlier layer whose keys and values it attends over.
    pub kv_from: Option<usize>,
    /// `use_double_wide_mlp` on a KV-shared layer: twice the MLP width.
    pub double_wide: bool,
}

/// A layer type's rotary settings: `default` turns every dimension; `proportional` turns the
/// first `partial_rotary_factor` of each half with exponents over the whole head, the rest still.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RopeSettings {
    pub theta: f64,
    pub partial: f64,
}

/// What Gemma 4's vision tower needs beside the shared [`VisionConfig`] fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gemma4Vision {
    pub head_dim: usize,
    pub kv_heads: usize,
    pub position_embedding_size: usize,
    pub clipped_linears: bool,
    pub standardize: bool,
    /// The tower's RMSNorm epsilon (and the multimodal embedder's).
    pub rms_norm_eps: f64,
}
