//! The model families the native engine runs, one folder each, and the registry that lists them.
//!
//! A family folder holds what is its own: `mod.rs` says what the family is to the shared code
//! (an [`Architecture`]: its names, its image tokens, its reading of `config.json`, its grounding
//! format, its tower and decoder), `vision.rs` is its vision tower. What the families share stays
//! shared: the text decoder of the Qwen families ([`super::text`], whose per-family differences
//! are the switches of [`TextConfig`]), the small layers, the KV cache, the prompt, M-RoPE
//! positions and the batched decoder. Gemma 4, another lab's design, brings its own config
//! types, decoder and FLOP count (`gemma4/`), behind the same [`TextModel`], with plain positions.
//!
//! The rest of the engine sees a family only through [`Family`], a handle on its
//! [`Architecture`], and the [`VisionTower`], [`TextModel`] and [`ImageFeatures`] it builds. The
//! [`registry!`] below lists the families: a new one is its folder plus its line there. The guide's
//! "Adding a model family" page says the same for a newcomer.
//!
//! [`TextConfig`]: super::config::TextConfig

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::config::{ConfigError, LayerKind, LinearAttentionConfig, MoeConfig, TextConfig, TextVariant, VisionConfig};
use super::grounding::BoxFormat;
#[cfg(feature = "libtorch")]
use super::{error::VlmError, weights::Weights};

/// Declares each family's folder and lists its [`Architecture`] in [`Family::ALL`], so that a
/// family is added in one place: a macro, because Rust asks for a `mod` line and a list entry.
macro_rules! registry {
    ($($folder:ident :: $family:ident),+ $(,)?) => {
        $(pub(crate) mod $folder;)+

        impl Family {
            /// Every family the engine runs, in the order errors and `doctor` list them.
            pub const ALL: &'static [Family] = &[$(Family(&$folder::$family)),+];
        }
    };
}

registry! {
    qwen2_vl::Qwen2Vl,
    qwen2_5_vl::Qwen25Vl,
    qwen3_vl::Qwen3Vl,
    qwen3_5::Qwen35,
    qwen3_vl_moe::Qwen3VlMoe,
    qwen3_5_moe::Qwen35Moe,
    gemma4::Gemma4,
}

/// A family's own FLOP count: text and vision configs, then patches, prefix tokens, questions,
/// suffix tokens, which layers the questions run whole, and the questions' shared tokens.
pub(crate) type OwnFlops =
    fn(&TextConfig, &VisionConfig, usize, usize, usize, usize, crate::flops::QuestionLayers, usize) -> crate::flops::ImageFlops;

/// The Qwen families' image placeholder (Gemma 4's is `<|image|>`).
pub const QWEN_IMAGE_PAD: &str = "<|image_pad|>";

/// What a family is to the shared code. Each folder implements it on a unit type; the defaults
/// are the Qwen families' ways.
pub(crate) trait Architecture: Sync {
    /// The family's name: its `model_type` in config.json, and how specs write it
    /// (`prompts.location.ground`).
    fn name(&self) -> &'static str;

    /// transformers' class for the family, which older configs name instead of a model_type.
    fn class_name(&self) -> &'static str;

    /// How config.json becomes the shared config types.
    fn config_reading(&self) -> ConfigReading<'_>;

    /// The token a chat template writes where the image goes: one id, which the prompt repeats
    /// once per image token.
    fn image_placeholder(&self) -> &'static str {
        QWEN_IMAGE_PAD
    }

    /// The config.json keys of the tokens that open and close an image's run.
    fn image_bracket_keys(&self) -> (&'static str, &'static str) {
        ("vision_start_token_id", "vision_end_token_id")
    }

    /// Whether the prompt's ids carry the image's brackets around its placeholder: the Qwen
    /// templates write them; where they do not, the engine adds them.
    fn template_writes_image_brackets(&self) -> bool {
        true
    }

    /// Whether the decoder's positions are M-RoPE's three (time, height, width) or plain ones.
    #[cfg(feature = "libtorch")]
    fn multimodal_positions(&self) -> bool {
        true
    }

    /// How the family's answers write boxes (`prompts.location.ground`).
    fn box_format(&self) -> BoxFormat {
        BoxFormat::JsonPerMille
    }

    /// Whether the vision tower's MLP is gated (gate, up, down) rather than two matrices, for
    /// the shared FLOP count.
    fn gated_vision_mlp(&self) -> bool {
        false
    }

    /// A family's own count of the FLOPs of scoring an image, where its decoder is not the
    /// shared one's shape; None for the count in `crate::flops`.
    fn own_flops(&self) -> Option<OwnFlops> {
        None
    }

    /// Its vision tower, from the checkpoint's weights.
    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError>;

    /// Its text decoder: the shared one, unless the family brings its own.
    #[cfg(feature = "libtorch")]
    fn load_text(&self, w: &Weights, cfg: &TextConfig, _image_token_id: u32) -> Result<TextModel, VlmError> {
        Ok(TextModel::shared(crate::text::SharedDecoder::load(w, cfg)?))
    }
}

/// How a family's config.json becomes the shared config types.
pub(crate) enum ConfigReading<'a> {
    /// The Qwen shape (text keys in `text_config` or at the top, a `vision_config`), read by
    /// `checkpoint.rs` with the family's parts.
    Shared(&'a dyn SharedReading),
    /// The family's own reading of both sections.
    Own(fn(&Value) -> Result<(TextConfig, VisionConfig), ConfigError>),
}

/// The parts of the shared reading that differ between the Qwen families.
pub(crate) trait SharedReading {
    /// The family's `vision_config` section.
    fn vision_config(&self, vision: &Value) -> Result<VisionConfig, ConfigError>;

    /// How the family's text decoder differs from the shared one's defaults.
    fn text_variant(&self, text_scope: &[&Value]) -> Result<TextVariant, ConfigError>;

    /// Each decoder layer's kind, and the linear-attention shapes of a hybrid decoder.
    fn text_layers(&self, _text_scope: &[&Value], layers: usize) -> Result<(Vec<LayerKind>, Option<LinearAttentionConfig>), ConfigError> {
        Ok((vec![LayerKind::FullAttention; layers], None))
    }

    /// A sparse family's mixture-of-experts MLPs; None for a dense family.
    fn moe(&self, _text_scope: &[&Value], _layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        Ok(None)
    }
}

/// A model family the engine runs: a handle on what it is to the engine (its `Architecture`),
/// compared, printed and serialized by its name.
#[derive(Clone, Copy)]
pub struct Family(&'static dyn Architecture);

impl Family {
    /// The family's name: its `model_type` in config.json, and how specs write it
    /// (`prompts.location.ground`).
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The token a chat template writes where the image goes: one id, which the prompt repeats
    /// once per image token.
    pub fn image_placeholder(self) -> &'static str {
        self.0.image_placeholder()
    }

    /// How the family's answers write boxes, for [`crate::grounding::parse`].
    pub fn box_format(self) -> BoxFormat {
        self.0.box_format()
    }

    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// The supported names, for error messages: "qwen2_vl, qwen2_5_vl, qwen3_vl, ...".
    pub fn supported() -> String {
        Family::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
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
        if let Some(family) = Family::ALL.iter().copied().find(|f| model_type.is_empty() && architectures.contains(&f.0.class_name())) {
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

    /// What the family is to the shared code.
    pub(crate) fn architecture(self) -> &'static dyn Architecture {
        self.0
    }
}

impl PartialEq for Family {
    fn eq(&self, other: &Family) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Family {}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Family {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(feature = "libtorch")]
pub(crate) use decoder::OwnDecoder;
#[cfg(feature = "libtorch")]
pub use decoder::TextModel;
#[cfg(feature = "libtorch")]
pub(crate) use tower::Tower;
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

    impl ImageFeatures {
        /// The features of a tower that has no DeepStack.
        pub(crate) fn plain(embeds: Tensor) -> ImageFeatures {
            ImageFeatures { embeds, deepstack: Vec::new() }
        }
    }

    /// What a family's vision tower does, for [`VisionTower`].
    pub(crate) trait Tower: Send {
        /// The features of one image's `pixel_values` with patch grid (t, h, w).
        fn features(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures;

        /// The features of several images of one patch grid, in order, run together so that
        /// their products see every image's rows (the Qwen towers as one sequence, Gemma 4's as
        /// one batch).
        fn features_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures>;
    }

    /// A family's vision tower.
    pub struct VisionTower(Box<dyn Tower>);

    impl VisionTower {
        pub(crate) fn new(tower: impl Tower + 'static) -> VisionTower {
            VisionTower(Box::new(tower))
        }

        pub fn load(family: Family, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
            family.architecture().load_vision(w, cfg)
        }

        /// The features of several images of one patch grid (t, h, w), in order.
        pub fn forward_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures> {
            self.0.features_many(pixels, grid)
        }

        /// The features of one image's `pixel_values` with patch grid (t, h, w).
        pub fn forward(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
            self.0.features(pixels, grid)
        }
    }
}

#[cfg(feature = "libtorch")]
mod decoder {
    use tch::Tensor;

    use super::Family;
    use crate::config::TextConfig;
    use crate::error::VlmError;
    use crate::real_tokens::QuestionRows;
    use crate::text::{causal_mask, AttentionPath, DecoderCache, Deepstack, Embedded, SharedDecoder};
    use crate::weights::Weights;

    /// A decoder a family brings of its own (Gemma 4's): the calls [`TextModel`] hands it.
    /// Such a decoder repeats its key/value heads for every call and keeps no linear state, so
    /// it takes neither the shared decoder's attention path nor its padding marks.
    pub(crate) trait OwnDecoder: Send {
        fn embed(&self, ids: &Tensor) -> Embedded;
        fn forward_masked(&self, input: &Embedded, positions: &Tensor, cache: &mut DecoderCache, mask: &Tensor) -> Tensor;
        fn fill_cache(&self, input: &Embedded, positions: &Tensor, cache: &mut DecoderCache, mask: &Tensor);
        fn forward_shared_prefix(
            &self,
            input: &Embedded,
            positions: &Tensor,
            cache: &mut DecoderCache,
            mask: &Tensor,
            fused: bool,
            rows: &QuestionRows,
        ) -> Tensor;
        fn logits(&self, hidden: &Tensor) -> Tensor;
        fn answer_logits(&self, hidden: &Tensor, answer: (u32, u32)) -> Tensor;
    }

    /// A family's text decoder: the shared one of the Qwen families, or the family's own.
    pub struct TextModel(Decoder);

    enum Decoder {
        Shared(SharedDecoder),
        Own(Box<dyn OwnDecoder>),
    }

    impl TextModel {
        pub fn load(family: Family, w: &Weights, cfg: &TextConfig, image_token_id: u32) -> Result<TextModel, VlmError> {
            family.architecture().load_text(w, cfg, image_token_id)
        }

        pub(crate) fn shared(decoder: SharedDecoder) -> TextModel {
            TextModel(Decoder::Shared(decoder))
        }

        pub(crate) fn own(decoder: impl OwnDecoder + 'static) -> TextModel {
            TextModel(Decoder::Own(Box::new(decoder)))
        }

        pub fn embed(&self, ids: &Tensor) -> Embedded {
            match &self.0 {
                Decoder::Shared(d) => Embedded { embeds: d.embed(ids), per_layer: None, image_span: None },
                Decoder::Own(d) => d.embed(ids),
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
            match &self.0 {
                Decoder::Shared(d) => d.fill_cache(embeds, positions, cache, &mask, deepstack),
                Decoder::Own(d) => d.fill_cache(input, positions, cache, &mask),
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
            match &self.0 {
                Decoder::Shared(d) => d.forward_shared_prefix(embeds, positions, cache, &mask, fused, rows),
                Decoder::Own(d) => d.forward_shared_prefix(input, positions, cache, &mask, fused, rows),
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
            match &self.0 {
                Decoder::Shared(d) => d.forward_masked(&input.embeds, positions, cache, mask, path, valid, deepstack),
                // `path` and `valid` are the shared decoder's (see [`OwnDecoder`]).
                Decoder::Own(d) => d.forward_masked(input, positions, cache, mask),
            }
        }

        pub fn logits(&self, hidden: &Tensor) -> Tensor {
            match &self.0 {
                Decoder::Shared(d) => d.logits(hidden),
                Decoder::Own(d) => d.logits(hidden),
            }
        }

        /// The logits of two tokens only, (rows, 2), from hidden states (rows, hidden).
        pub fn answer_logits(&self, hidden: &Tensor, answer: (u32, u32)) -> Tensor {
            match &self.0 {
                Decoder::Shared(d) => d.answer_logits(hidden, answer),
                Decoder::Own(d) => d.answer_logits(hidden, answer),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_lists_each_family_once_under_its_model_type() {
        let names: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(names, ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "gemma4"]);
        for family in Family::ALL {
            assert_eq!(Family::from_name(family.name()), Some(*family));
            // Specs, `doctor` and the card write a family by its name.
            assert_eq!(serde_json::to_value(family).unwrap(), family.name());
            assert_eq!(format!("{family:?}"), family.name());
        }
        assert_ne!(Family::from_name("qwen2_vl"), Family::from_name("qwen2_5_vl"));
        assert_eq!(Family::from_name("Qwen2Vl"), None);
    }

    #[test]
    fn a_config_naming_only_its_class_finds_its_family() {
        let family = |root: Value| Family::of_config(&root).map(Family::name);
        assert_eq!(family(serde_json::json!({"architectures": ["Qwen2_5_VLForConditionalGeneration"]})).unwrap(), "qwen2_5_vl");
        assert_eq!(
            family(serde_json::json!({"model_type": "gemma4", "architectures": ["Qwen2VLForConditionalGeneration"]})).unwrap(),
            "gemma4"
        );
        let refused = family(serde_json::json!({"model_type": "qwen3_omni_moe", "architectures": ["Qwen3VLForConditionalGeneration"]}));
        assert!(refused.unwrap_err().message.contains("it runs qwen2_vl, qwen2_5_vl"));
    }

    #[test]
    fn each_family_reads_boxes_in_its_own_format() {
        let format = |name: &str| Family::from_name(name).unwrap().box_format();
        assert_eq!(format("qwen2_vl"), BoxFormat::BoxTokensPerMille);
        assert_eq!(format("qwen2_5_vl"), BoxFormat::JsonResizedPixels);
        for name in ["qwen3_vl", "qwen3_5", "qwen3_vl_moe", "qwen3_5_moe", "gemma4"] {
            assert_eq!(format(name), BoxFormat::JsonPerMille, "{name}");
        }
    }
}
