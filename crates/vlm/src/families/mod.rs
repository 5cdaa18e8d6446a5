//! The model families the native engine runs, one folder each.
//!
//! A family folder holds what is its own: `mod.rs` reads its part of `config.json` (no libtorch),
//! `vision.rs` is its vision tower. What the families share stays shared: the text decoder of
//! the Qwen families ([`super::text`], whose per-family differences are the switches of
//! [`TextConfig`]), the small layers, the KV cache, the prompt, M-RoPE positions and the batched
//! decoder. Gemma 4, another lab's design, brings its own config types, decoder and FLOP count
//! (`gemma4/`) behind the same [`TextModel`], with plain positions.
//!
//! This file is the registry: the rest of the engine sees a family only through [`Family`]'s
//! methods, [`VisionTower`], [`TextModel`] and the [`ImageFeatures`] a tower returns, each with
//! one arm per family. The guide's "Adding a model family" page lists what a new family touches.
//!
//! [`TextConfig`]: super::config::TextConfig

use serde::Serialize;
use serde_json::Value;

use super::config::{ConfigError, LayerKind, LinearAttentionConfig, MoeConfig, TextConfig, TextVariant, VisionConfig};

pub mod gemma4;
pub mod qwen2_5_vl;
pub mod qwen2_vl;
pub mod qwen3_5;
pub mod qwen3_5_moe;
pub mod qwen3_vl;
pub mod qwen3_vl_moe;
pub mod settings;

/// A family's own FLOP count: text and vision configs, then patches, prefix tokens, questions,
/// suffix tokens, which layers the questions run whole, and the questions' shared tokens.
pub(crate) type OwnFlops =
    fn(&TextConfig, &VisionConfig, usize, usize, usize, usize, crate::flops::QuestionLayers, usize) -> crate::flops::ImageFlops;

/// The Qwen families' image placeholder (Gemma 4's is `<|image|>`).
pub const QWEN_IMAGE_PAD: &str = "<|image_pad|>";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Full-attention vision tower with LayerNorm and quick-GELU.
    Qwen2Vl,
    /// Window attention with full-attention blocks, RMSNorm and gated SiLU.
    #[serde(rename = "qwen2_5_vl")]
    Qwen25Vl,
    /// Learned, interpolated position embeddings and DeepStack in the vision tower; the Qwen3
    /// decoder (q/k norms, explicit head_dim) with interleaved M-RoPE.
    Qwen3Vl,
    /// Qwen3-VL's vision tower without DeepStack; a hybrid decoder of Gated DeltaNet (linear
    /// attention with a recurrent state) and gated full-attention layers.
    #[serde(rename = "qwen3_5")]
    Qwen35,
    /// Qwen3-VL with a sparse mixture of experts for the MLP (Qwen3-VL-30B-A3B).
    Qwen3VlMoe,
    /// Qwen3.5 with a sparse mixture of experts and a shared expert (Qwen3.6-35B-A3B).
    #[serde(rename = "qwen3_5_moe")]
    Qwen35Moe,
    /// Google's Gemma 4: a pooled 2D-RoPE vision tower and its own decoder (see
    /// `families/gemma4/`).
    Gemma4,
}

impl Family {
    pub const ALL: [Family; 7] =
        [Family::Qwen2Vl, Family::Qwen25Vl, Family::Qwen3Vl, Family::Qwen35, Family::Qwen3VlMoe, Family::Qwen35Moe, Family::Gemma4];

    /// The family's name: its `model_type` in config.json, and how specs write it
    /// (`prompts.location.ground`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Qwen2Vl => "qwen2_vl",
            Family::Qwen25Vl => "qwen2_5_vl",
            Family::Qwen3Vl => "qwen3_vl",
            Family::Qwen35 => "qwen3_5",
            Family::Qwen3VlMoe => "qwen3_vl_moe",
            Family::Qwen35Moe => "qwen3_5_moe",
            Family::Gemma4 => "gemma4",
        }
    }

    /// The token a chat template writes where the image goes: one id, which the prompt repeats
    /// once per image token.
    pub fn image_placeholder(self) -> &'static str {
        match self {
            Family::Gemma4 => "<|image|>",
            _ => QWEN_IMAGE_PAD,
        }
    }

    /// The text and vision sections of a family that reads them its own way (Gemma 4, whose
    /// config is not the Qwen families' shape); None for a family read by the shared reading.
    pub(crate) fn own_config(self, root: &Value) -> Option<Result<(TextConfig, VisionConfig), ConfigError>> {
        match self {
            Family::Gemma4 => Some(gemma4::model_config(root)),
            _ => None,
        }
    }

    /// A family's own count of the FLOPs of scoring an image, where its decoder is not the
    /// shared one's shape (Gemma 4's); None for the count in `crate::flops`.
    pub(crate) fn own_flops(self) -> Option<OwnFlops> {
        match self {
            Family::Gemma4 => Some(gemma4::flops::per_image),
            _ => None,
        }
    }

    /// The config.json keys of the tokens that open and close an image's run.
    pub(crate) fn image_bracket_keys(self) -> (&'static str, &'static str) {
        match self {
            Family::Gemma4 => ("boi_token_id", "eoi_token_id"),
            _ => ("vision_start_token_id", "vision_end_token_id"),
        }
    }

    /// Whether the prompt's ids carry the image's brackets around its placeholder: the Qwen
    /// templates write them; Gemma 4's processor adds them, so the engine does.
    pub(crate) fn template_writes_image_brackets(self) -> bool {
        self != Family::Gemma4
    }

    /// Whether the decoder's positions are M-RoPE's three (time, height, width) or plain ones.
    #[cfg(feature = "libtorch")]
    pub(crate) fn multimodal_positions(self) -> bool {
        self != Family::Gemma4
    }

    /// The dense family whose vision tower, decoder and prompt a mixture-of-experts family
    /// shares (itself for a dense family): only the MLP differs.
    pub fn dense(self) -> Family {
        match self {
            Family::Qwen3VlMoe => Family::Qwen3Vl,
            Family::Qwen35Moe => Family::Qwen35,
            dense => dense,
        }
    }

    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }

    /// transformers' class for the family, which older configs name instead of a model_type.
    fn architecture(self) -> &'static str {
        match self {
            Family::Qwen2Vl => "Qwen2VLForConditionalGeneration",
            Family::Qwen25Vl => "Qwen2_5_VLForConditionalGeneration",
            Family::Qwen3Vl => "Qwen3VLForConditionalGeneration",
            Family::Qwen35 => "Qwen3_5ForConditionalGeneration",
            Family::Qwen3VlMoe => "Qwen3VLMoeForConditionalGeneration",
            Family::Qwen35Moe => "Qwen3_5MoeForConditionalGeneration",
            Family::Gemma4 => "Gemma4ForConditionalGeneration",
        }
    }

    /// The supported names, for error messages: "qwen2_vl, qwen2_5_vl, qwen3_vl, ...".
    pub fn supported() -> String {
        Family::ALL.map(Family::name).join(", ")
    }

    /// The family a config.json describes, from `model_type` (or, failing that, `architectures`).
    pub fn of_config(root: &Value) -> Result<Family, ConfigError> {
        let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or_default();
        let architectures: Vec<&str> =
            root.get("architectures").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        if let Some(family) = Family::from_name(model_type) {
            return Ok(family);
        }
        // Only a config that names no model_type is judged by its architectures: a named but
        // unsupported type (`qwen3_omni_moe`) is refused even if its class list looks familiar.
        if let Some(family) = Family::ALL.into_iter().find(|f| model_type.is_empty() && architectures.contains(&f.architecture())) {
            return Ok(family);
        }
        Err(ConfigError {
            key: "model_type".into(),
            message: format!(
                "{model_type:?} (architectures {architectures:?}) is not a family the native engine runs; it runs {}",
                Family::supported()
            ),
        })
    }

    /// The family's `vision_config` section.
    pub(crate) fn vision_config(self, vision: &Value) -> Result<VisionConfig, ConfigError> {
        match self.dense() {
            Family::Qwen2Vl => qwen2_vl::vision_config(vision),
            Family::Qwen25Vl => qwen2_5_vl::vision_config(vision),
            Family::Qwen3Vl => qwen3_vl::vision_config(vision),
            Family::Qwen35 => qwen3_5::vision_config(vision),
            Family::Qwen3VlMoe | Family::Qwen35Moe => unreachable!("dense() is a dense family"),
            Family::Gemma4 => unreachable!("Gemma 4's config is read by gemma4::text_config and vision_config"),
        }
    }

    /// How the family's text decoder differs from the shared one's defaults.
    pub(crate) fn text_variant(self, text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
        match self.dense() {
            Family::Qwen2Vl | Family::Qwen25Vl => Ok(TextVariant::QWEN2),
            Family::Qwen3Vl => qwen3_vl::text_variant(text_scope),
            Family::Qwen35 => qwen3_5::text_variant(text_scope),
            Family::Qwen3VlMoe | Family::Qwen35Moe => unreachable!("dense() is a dense family"),
            Family::Gemma4 => unreachable!("Gemma 4's config is read by gemma4::text_config and vision_config"),
        }
    }

    /// Each decoder layer's kind, and the linear-attention shapes of a hybrid decoder.
    pub(crate) fn text_layers(
        self,
        text_scope: &[&Value],
        layers: usize,
    ) -> Result<(Vec<LayerKind>, Option<LinearAttentionConfig>), ConfigError> {
        match self.dense() {
            Family::Qwen35 => qwen3_5::text_layers(text_scope, layers),
            _ => Ok((vec![LayerKind::FullAttention; layers], None)),
        }
    }

    /// A sparse family's mixture-of-experts MLPs; None for a dense family.
    pub(crate) fn moe(self, text_scope: &[&Value], layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        match self {
            Family::Qwen3VlMoe => qwen3_vl_moe::moe_config(text_scope, layers).map(Some),
            Family::Qwen35Moe => qwen3_5_moe::moe_config(text_scope, layers).map(Some),
            _ => Ok(None),
        }
    }
}

#[cfg(feature = "libtorch")]
pub use decoder::TextModel;
#[cfg(feature = "libtorch")]
pub use tower::{ImageFeatures, VisionTower};

#[cfg(feature = "libtorch")]
mod tower {
    use tch::Tensor;

    use super::Family;
    use crate::config::VisionConfig;
    use crate::error::VlmError;
    use crate::weights::Weights;

    /// What a vision tower gives the text model for one image.
    pub struct ImageFeatures {
        /// One embedding per merged patch, (tokens, text hidden): they replace the image's
        /// placeholder tokens.
        pub embeds: Tensor,
        /// DeepStack (Qwen3-VL): feature maps of the same shape, added to the hidden states at
        /// the image's positions after the first decoder layers, one per layer. Empty elsewhere.
        pub deepstack: Vec<Tensor>,
    }

    pub enum VisionTower {
        Qwen2(super::qwen2_vl::vision::VisionQwen2),
        Qwen25(super::qwen2_5_vl::vision::VisionQwen25),
        Qwen3(super::qwen3_vl::vision::VisionQwen3),
        Gemma4(super::gemma4::vision::VisionGemma4),
    }

    impl VisionTower {
        pub fn load(family: Family, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
            Ok(match family.dense() {
                Family::Qwen2Vl => VisionTower::Qwen2(super::qwen2_vl::vision::VisionQwen2::load(w, cfg)?),
                Family::Qwen25Vl => VisionTower::Qwen25(super::qwen2_5_vl::vision::VisionQwen25::load(w, cfg)?),
                // Qwen3.5's tower is Qwen3-VL's; its config lists no DeepStack blocks.
                Family::Qwen3Vl | Family::Qwen35 | Family::Qwen3VlMoe | Family::Qwen35Moe => {
                    VisionTower::Qwen3(super::qwen3_vl::vision::VisionQwen3::load(w, cfg)?)
                }
                Family::Gemma4 => VisionTower::Gemma4(super::gemma4::vision::VisionGemma4::load(w, cfg)?),
            })
        }

        /// The features of several images of one patch grid (t, h, w), in order: the Qwen
        /// towers run them as one sequence and Gemma 4's as one batch, so their products see
        /// every image's rows.
        pub fn forward_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures> {
            let plain = |embeds: Vec<Tensor>| embeds.into_iter().map(|embeds| ImageFeatures { embeds, deepstack: Vec::new() }).collect();
            match self {
                VisionTower::Qwen2(v) => plain(v.forward_many(pixels, grid)),
                VisionTower::Qwen25(v) => plain(v.forward_many(pixels, grid)),
                VisionTower::Qwen3(v) => v.forward_many(pixels, grid),
                VisionTower::Gemma4(v) => plain(v.forward_many(pixels, grid)),
            }
        }

        /// The features of one image's `pixel_values` with patch grid (t, h, w).
        pub fn forward(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
            match self {
                VisionTower::Qwen2(v) => ImageFeatures { embeds: v.forward(pixels, grid), deepstack: Vec::new() },
                VisionTower::Qwen25(v) => ImageFeatures { embeds: v.forward(pixels, grid), deepstack: Vec::new() },
                VisionTower::Qwen3(v) => v.forward(pixels, grid),
                VisionTower::Gemma4(v) => ImageFeatures { embeds: v.forward(pixels, grid), deepstack: Vec::new() },
            }
        }
    }
}

#[cfg(feature = "libtorch")]
mod decoder {
    use tch::Tensor;

    use super::gemma4::text::Gemma4Decoder;
    use super::settings::OwnText;
    use crate::config::TextConfig;
    use crate::error::VlmError;
    use crate::real_tokens::QuestionRows;
    use crate::text::{causal_mask, AttentionPath, DecoderCache, Deepstack, Embedded, SharedDecoder};
    use crate::weights::Weights;

    /// A family's text decoder: the shared one of the Qwen families, or Gemma 4's own.
    pub enum TextModel {
        Shared(SharedDecoder),
        Gemma4(Gemma4Decoder),
    }

    impl TextModel {
        pub fn load(w: &Weights, cfg: &TextConfig, image_token_id: u32) -> Result<TextModel, VlmError> {
            Ok(match cfg.own {
                OwnText::Gemma4(_) => TextModel::Gemma4(Gemma4Decoder::load(w, cfg, image_token_id)?),
                OwnText::Shared => TextModel::Shared(SharedDecoder::load(w, cfg)?),
            })
        }

        pub fn embed(&self, ids: &Tensor) -> Embedded {
            match self {
                TextModel::Shared(d) => Embedded { embeds: d.embed(ids), per_layer: None, image_span: None },
                TextModel::Gemma4(d) => d.embed(ids),
            }
        }

        /// Runs `input` at `positions` (3, batch, seq) after what `cache` holds, causally, and
        /// returns the final hidden states (batch, seq, hidden).
        pub fn forward(&self, input: &Embedded, positions: &Tensor, cache: &mut DecoderCache, deepstack: Option<&Deepstack>) -> Tensor {
            let embeds = &input.embeds;
            let mask = causal_mask(embeds.size()[1], cache.len(), embeds.kind(), embeds.device());
            self.forward_masked(input, positions, cache, &mask, AttentionPath::Repeated, None, deepstack)
        }

        /// Runs `input` at `positions` after what `cache` holds, causally, as [`Self::forward`]
        /// does, but only as far as the cache needs: no layer after the last that keeps keys, values
        /// or a state, and of that one only what it keeps. For a prefix whose cache alone is read
        /// after (scoring's questions, generation's rows); the cache holds the same bits as after
        /// [`Self::forward`].
        pub fn fill_cache(&self, input: &Embedded, positions: &Tensor, cache: &mut DecoderCache, deepstack: Option<&Deepstack>) {
            let embeds = &input.embeds;
            let mask = causal_mask(embeds.size()[1], cache.len(), embeds.kind(), embeds.device());
            match self {
                TextModel::Shared(d) => d.fill_cache(embeds, positions, cache, &mask, deepstack),
                TextModel::Gemma4(d) => d.fill_cache(input, positions, cache, &mask),
            }
        }

        /// Runs every row of `input` after the prefixes `cache` holds (one per image, the rows
        /// image by image), each read once by its image's rows ([`AttentionPath::SharedPrefix`]);
        /// `cache` must come from [`DecoderCache::shared`]. `fused`: the prefix part through
        /// libtorch's fused kernel. `rows`: which tokens of the right-padded rows are real, where
        /// some are padding (only those go through the projections, norms and MLPs), and whether
        /// the last layers run on each row's last token alone ([`crate::real_tokens`]). Returns the
        /// final hidden state of each row's last token, (rows, hidden).
        pub fn forward_shared_prefix(
            &self,
            input: &Embedded,
            positions: &Tensor,
            cache: &mut DecoderCache,
            fused: bool,
            rows: &QuestionRows,
        ) -> Tensor {
            let embeds = &input.embeds;
            let mask = causal_mask(embeds.size()[1], 0, embeds.kind(), embeds.device());
            match self {
                TextModel::Shared(d) => d.forward_shared_prefix(embeds, positions, cache, &mask, fused, rows),
                TextModel::Gemma4(d) => d.forward_shared_prefix(input, positions, cache, &mask, fused, rows),
            }
        }

        /// [`Self::forward`] with an explicit additive mask, (batch or 1, 1, seq, cached + seq): the
        /// batched decoder hides each row's padding with it. `valid` (batch, seq) marks the real new
        /// tokens of right-padded rows, so linear layers keep each row's own state.
        #[allow(clippy::too_many_arguments)]
        pub fn forward_masked(
            &self,
            input: &Embedded,
            positions: &Tensor,
            cache: &mut DecoderCache,
            mask: &Tensor,
            path: AttentionPath,
            valid: Option<&Tensor>,
            deepstack: Option<&Deepstack>,
        ) -> Tensor {
            match self {
                TextModel::Shared(d) => d.forward_masked(&input.embeds, positions, cache, mask, path, valid, deepstack),
                // Gemma 4's decoder repeats its key/value heads for every call: `path` is the Qwen
                // decoder's choice.
                TextModel::Gemma4(d) => d.forward_masked(input, positions, cache, mask),
            }
        }

        pub fn logits(&self, hidden: &Tensor) -> Tensor {
            match self {
                TextModel::Shared(d) => d.logits(hidden),
                TextModel::Gemma4(d) => d.logits(hidden),
            }
        }

        /// The logits of two tokens only, (rows, 2), from hidden states (rows, hidden).
        pub fn answer_logits(&self, hidden: &Tensor, answer: (u32, u32)) -> Tensor {
            match self {
                TextModel::Shared(d) => d.answer_logits(hidden, answer),
                TextModel::Gemma4(d) => d.answer_logits(hidden, answer),
            }
        }
    }
}
