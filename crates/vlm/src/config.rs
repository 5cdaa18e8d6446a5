//! `config.json` and `preprocessor_config.json`, in both layouts the checkpoints use: the older
//! flat hub layout (text keys at the top, `rope_scaling`) and the nested one (`text_config`,
//! `rope_parameters`) that transformers 5 writes. Field names mirror the files.

use std::any::Any;
use std::fmt::Debug;

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Split of the rotary half-dimension between the temporal, height and width positions.
    pub mrope_section: Vec<usize>,
    pub tie_word_embeddings: bool,
    /// Width of one attention head (explicit in Qwen3 configs, hidden_size / heads before).
    pub head_dim: usize,
    /// How many of a head's dimensions turn with the rotary positions (all but in Qwen3.5, whose
    /// `partial_rotary_factor` turns a quarter).
    pub rotary_dim: usize,
    /// Each decoder layer's kind (`layer_types`): all full attention except in hybrid models.
    pub layer_types: Vec<LayerKind>,
    /// The linear-attention layers' shapes, where there are any.
    pub linear: Option<LinearAttentionConfig>,
    /// The family's variant of the shared decoder.
    pub variant: TextVariant,
    /// The longest sequence the model was made for, where the config says: a prompt (the
    /// image's tokens included) must fit in it.
    pub max_position_embeddings: Option<usize>,
    /// The mixture-of-experts MLPs of a sparse model, and which layers have them.
    pub moe: Option<MoeConfig>,
    /// Placeholders of media the engine does not feed (Gemma 4's `video_token_id` and
    /// `audio_token_id`), which a prompt may not hold; none in the Qwen families' prompts.
    pub other_media_token_ids: Vec<u32>,
    /// The family's own decoder settings (Gemma 4's); none for the Qwen families.
    #[serde(skip)]
    pub own: FamilySettings,
}

impl TextConfig {
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }
}

/// Settings a family reads from config.json beyond the fields every family shares (Gemma 4's
/// layers, its tower's pooling). The shared code carries them without naming them; only the
/// family's own folder gets them back, by their type. Empty for a family the shared fields
/// describe whole.
#[derive(Default)]
pub struct FamilySettings(Option<Box<dyn OwnSettings>>);

/// A family's settings type: any plain value its config reading makes.
trait OwnSettings: Any + Debug + Send + Sync {
    fn boxed_clone(&self) -> Box<dyn OwnSettings>;
    fn same_as(&self, other: &dyn OwnSettings) -> bool;
    fn as_any(&self) -> &dyn Any;
    // For `bench scoring`'s slices, which need libtorch.
    #[cfg_attr(not(feature = "libtorch"), allow(dead_code))]
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Debug + Clone + PartialEq + Send + Sync> OwnSettings for T {
    fn boxed_clone(&self) -> Box<dyn OwnSettings> {
        Box::new(self.clone())
    }

    fn same_as(&self, other: &dyn OwnSettings) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl FamilySettings {
    pub(crate) fn new<T: Any + Debug + Clone + PartialEq + Send + Sync>(settings: T) -> FamilySettings {
        FamilySettings(Some(Box::new(settings)))
    }

    /// The settings, if they are of type `T`.
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref().and_then(|s| s.as_any().downcast_ref())
    }

    #[cfg_attr(not(feature = "libtorch"), allow(dead_code))]
    pub(crate) fn get_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.0.as_deref_mut().and_then(|s| s.as_any_mut().downcast_mut())
    }
}

impl Clone for FamilySettings {
    fn clone(&self) -> FamilySettings {
        FamilySettings(self.0.as_deref().map(OwnSettings::boxed_clone))
    }
}

impl PartialEq for FamilySettings {
    fn eq(&self, other: &FamilySettings) -> bool {
        match (self.0.as_deref(), other.0.as_deref()) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_as(b),
            _ => false,
        }
    }
}

impl Debug for FamilySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(settings) => settings.fmt(f),
            None => f.write_str("none"),
        }
    }
}

/// A decoder layer's token mixer, as `layer_types` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// Softmax attention over a KV cache that grows with the sequence.
    FullAttention,
    /// Gated DeltaNet: a fixed-size recurrent state and a short causal convolution (Qwen3.5).
    LinearAttention,
}

/// The Gated DeltaNet layers' shapes (`linear_*` keys of Qwen3.5's text config).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearAttentionConfig {
    pub conv_kernel_dim: usize,
    pub key_head_dim: usize,
    pub value_head_dim: usize,
    pub num_key_heads: usize,
    pub num_value_heads: usize,
}

impl LinearAttentionConfig {
    pub fn key_dim(&self) -> usize {
        self.key_head_dim * self.num_key_heads
    }

    pub fn value_dim(&self) -> usize {
        self.value_head_dim * self.num_value_heads
    }

    /// Channels of the causal convolution: queries, keys and values side by side.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
}

/// A sparse model's mixture-of-experts MLP (the `num_experts` keys of its text config).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeConfig {
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    /// Qwen3.5-MoE's expert that every token takes (`shared_expert_intermediate_size`).
    pub shared_expert_intermediate_size: Option<usize>,
    /// Whether the top-k router weights are renormalised to sum to one (both Qwen MoE families
    /// do, whatever `norm_topk_prob` says: transformers 5.23's routers always renormalise).
    pub norm_topk_prob: bool,
    /// For each decoder layer, whether its MLP is the sparse one (Qwen3-VL-MoE's
    /// `decoder_sparse_step` and `mlp_only_layers`); the others are dense.
    pub sparse_layers: Vec<bool>,
    /// How fused expert tensors are laid out when their shape alone cannot say.
    pub fused_layout: FusedLayout,
}

/// The layout of fused expert tensors (`experts.gate_up_proj`, `experts.down_proj`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FusedLayout {
    /// (experts, outputs, inputs): transformers' parameters in memory.
    Rows,
    /// (experts, inputs, outputs): Qwen3-VL-MoE's published checkpoints.
    Columns,
}

/// How a family's text decoder differs from the others: the switches of the shared decoder.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TextVariant {
    /// An explicit head width; `None`: hidden_size / num_attention_heads.
    pub head_dim: Option<usize>,
    /// Biases on the q, k and v projections, and on the output projection.
    pub qkv_bias: bool,
    pub o_bias: bool,
    /// RMSNorm over each head's queries and keys before the rotary positions (Qwen3).
    pub qk_norm: bool,
    /// M-RoPE frequencies assigned to time, height and width in turn (Qwen3-VL), instead of in
    /// three contiguous sections (Qwen2-VL).
    pub mrope_interleaved: bool,
    /// Attention output gated by a sigmoid of a second half of `q_proj` (Qwen3.5).
    pub gated_attention: bool,
    /// RMSNorm scales stored as offsets from one, applied as `1 + weight` in f32 (Qwen3.5).
    pub zero_centered_norm: bool,
    /// The share of each head that turns when the config does not say (`partial_rotary_factor`).
    pub default_partial_rotary: f64,
}

impl TextVariant {
    /// The Qwen2 decoder of Qwen2-VL and Qwen2.5-VL.
    pub const QWEN2: TextVariant = TextVariant {
        head_dim: None,
        qkv_bias: true,
        o_bias: false,
        qk_norm: false,
        mrope_interleaved: false,
        gated_attention: false,
        zero_centered_norm: false,
        default_partial_rotary: 1.0,
    };
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VisionConfig {
    pub depth: usize,
    /// Width of the vision tower (`embed_dim` in Qwen2-VL, `hidden_size` in Qwen2.5-VL).
    pub hidden_size: usize,
    pub intermediate_size: usize,
    /// Width the patch merger projects to: the text model's hidden size.
    pub out_hidden_size: usize,
    pub num_heads: usize,
    pub patch_size: usize,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    pub in_channels: usize,
    /// Qwen2.5-VL: attention window in pixels, and the blocks that attend globally.
    pub window_size: Option<usize>,
    pub fullatt_block_indexes: Vec<usize>,
    /// Qwen3-VL: the learned position embeddings (a square grid), and the blocks whose output
    /// goes through a DeepStack merger to the text model.
    pub num_position_embeddings: Option<usize>,
    pub deepstack_visual_indexes: Vec<usize>,
    /// The vision MLP's GELU as libtorch names its `approximate` argument ("tanh" or "none").
    pub mlp_gelu: &'static str,
    /// Base of the vision tower's 2D rotary angles.
    pub rope_theta: f64,
    /// The family's own tower settings (Gemma 4's); none for the Qwen families.
    #[serde(skip)]
    pub own: FamilySettings,
}

impl Default for VisionConfig {
    /// The fields every family reads are zero here; each family fills them in.
    fn default() -> Self {
        VisionConfig {
            depth: 0,
            hidden_size: 0,
            intermediate_size: 0,
            out_hidden_size: 0,
            num_heads: 0,
            patch_size: 0,
            spatial_merge_size: 0,
            temporal_patch_size: 0,
            in_channels: 3,
            window_size: None,
            fullatt_block_indexes: Vec::new(),
            num_position_embeddings: None,
            deepstack_visual_indexes: Vec::new(),
            mlp_gelu: "none",
            rope_theta: 10000.0,
            own: FamilySettings::default(),
        }
    }
}

/// A config error: the key and what was wrong (the caller adds the file).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

pub(crate) fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { key: key.into(), message: message.into() }
}

/// Looks a key up in the first object that has it.
pub(crate) fn get<'a>(objects: &[&'a Value], key: &str) -> Option<&'a Value> {
    objects.iter().find_map(|o| o.get(key).filter(|v| !v.is_null()))
}

/// The largest size or token id a config may give: 2^24. No dimension, layer count or
/// vocabulary of a published model comes near it, and products of two stay far inside 64 bits.
pub const MAX_CONFIG_INTEGER: u64 = 1 << 24;

/// The value of `key`, or an error that says whether it is missing or set to null (a config
/// that writes `"head_dim": null` has the key, so "missing" would send its reader looking for
/// nothing).
fn required<'a>(objects: &[&'a Value], key: &str) -> Result<&'a Value, ConfigError> {
    get(objects, key).ok_or_else(|| {
        if objects.iter().any(|o| o.get(key).is_some_and(Value::is_null)) {
            err(key, "is null; a value is needed here")
        } else {
            err(key, "missing")
        }
    })
}

pub(crate) fn usize_at(objects: &[&Value], key: &str) -> Result<usize, ConfigError> {
    let v = required(objects, key)?;
    match v.as_u64() {
        Some(n) if n <= MAX_CONFIG_INTEGER => Ok(n as usize),
        Some(n) => Err(err(key, format!("{n}: above {MAX_CONFIG_INTEGER}, more than any model has"))),
        None => Err(err(key, format!("expected a non-negative integer, got {v}"))),
    }
}

pub(crate) fn f64_at(objects: &[&Value], key: &str) -> Result<f64, ConfigError> {
    let v = required(objects, key)?;
    v.as_f64().ok_or_else(|| err(key, format!("expected a number, got {v}")))
}

/// An optional number of one object.
pub(crate) fn f64_in(object: &Value, key: &str) -> Result<Option<f64>, ConfigError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| err(key, format!("expected a number, got {v}"))),
    }
}

pub(crate) fn usizes(v: &Value, key: &str) -> Result<Vec<usize>, ConfigError> {
    v.as_array()
        .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect::<Option<Vec<_>>>())
        .ok_or_else(|| err(key, format!("expected a list of integers, got {v}")))
}

/// The most pixels the engine resizes an image to, whatever a preprocessor config asks: 8192 x
/// 8192, four times the largest bound a published Qwen processor sets (Qwen3-VL's 4096 x 4096).
/// Past it one image's tensors alone take gigabytes.
pub const MAX_IMAGE_PIXELS: u64 = 1 << 26;

/// A number that must be finite and above zero (an epsilon, a rotary base, a scale).
pub(crate) fn positive(key: &str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(err(key, format!("{value}: expected a finite number above 0")))
    }
}

/// `preprocessor_config.json`: pixel bounds as `min_pixels`/`max_pixels` or as a `size` map with
/// `shortest_edge`/`longest_edge` (which, for this processor, are pixel counts).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreprocessorConfig {
    pub min_pixels: u64,
    pub max_pixels: u64,
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub merge_size: usize,
    pub image_mean: [f64; 3],
    pub image_std: [f64; 3],
    /// What 8-bit pixel values are multiplied by before normalising (1/255 when the file does not
    /// say; transformers folds it into the mean and std).
    pub rescale_factor: f64,
    /// Whether the file gives the bounds as `size.shortest_edge` / `size.longest_edge`: errors
    /// name the keys it uses.
    #[serde(skip)]
    pub bounds_in_size: bool,
    /// How an image's size is chosen within the bounds.
    pub sizing: ImageSizing,
}

/// The rule that picks the size an image is resized to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSizing {
    /// The Qwen processors' `smart_resize`: sides rounded to the nearest multiple of a token's
    /// side, the area within [min_pixels, max_pixels].
    SmartResize,
    /// Gemma 4's: the largest size of the same aspect ratio whose sides are multiples of a
    /// token's side and whose area is within max_pixels (`max_soft_tokens` tokens), rounding down;
    /// no normalisation after the 1/255 rescale unless `do_normalize` says so.
    AspectPreserving,
}

/// Gemma 4's processor settings (`Gemma4ImageProcessor`): the soft-token budgets it accepts.
pub const GEMMA4_SOFT_TOKENS: [u64; 5] = [70, 140, 280, 560, 1120];

impl PreprocessorConfig {
    /// The image settings inside a `processor_config.json`: its `image_processor` object, where
    /// transformers 5 writes Gemma 4's (the checkpoint then has no `preprocessor_config.json`).
    pub fn in_processor_config(processor: &Value) -> Option<&Value> {
        processor.get("image_processor").filter(|v| v.is_object())
    }

    pub fn from_json(root: &Value) -> Result<PreprocessorConfig, ConfigError> {
        if root.get("image_processor_type").and_then(Value::as_str) == Some("Gemma4ImageProcessor") || root.get("max_soft_tokens").is_some()
        {
            return Self::gemma4(root);
        }
        let r = [root];
        let size = root.get("size").filter(|v| v.is_object());
        let bound = |flat: &str, nested: &str| -> Result<u64, ConfigError> {
            match (root.get(flat).and_then(Value::as_u64), size.and_then(|s| s.get(nested)).and_then(Value::as_u64)) {
                (Some(v), _) | (None, Some(v)) => Ok(v),
                _ => Err(err(flat, format!("missing: give {flat}, or size.{nested}"))),
            }
        };
        let triple = |key: &str| -> Result<[f64; 3], ConfigError> {
            let v = root.get(key).ok_or_else(|| err(key, "missing"))?;
            let xs: Option<Vec<f64>> = v.as_array().and_then(|a| a.iter().map(Value::as_f64).collect());
            match xs.as_deref() {
                Some([a, b, c]) => Ok([*a, *b, *c]),
                _ => Err(err(key, format!("expected three numbers, got {v}"))),
            }
        };
        let config = PreprocessorConfig {
            min_pixels: bound("min_pixels", "shortest_edge")?,
            max_pixels: bound("max_pixels", "longest_edge")?,
            patch_size: usize_at(&r, "patch_size")?,
            temporal_patch_size: usize_at(&r, "temporal_patch_size")?,
            merge_size: usize_at(&r, "merge_size")?,
            image_mean: triple("image_mean")?,
            image_std: triple("image_std")?,
            rescale_factor: match root.get("rescale_factor") {
                None | Some(Value::Null) => 1.0 / 255.0,
                Some(v) => v.as_f64().ok_or_else(|| err("rescale_factor", format!("{v}: expected a finite number above 0")))?,
            },
            bounds_in_size: root.get("min_pixels").and_then(Value::as_u64).is_none() && size.is_some(),
            sizing: ImageSizing::SmartResize,
        };
        for (key, n) in
            [("patch_size", config.patch_size), ("temporal_patch_size", config.temporal_patch_size), ("merge_size", config.merge_size)]
        {
            if n == 0 || n > 1024 {
                return Err(err(key, format!("{n}: expected 1 to 1024")));
            }
        }
        if let Some(bad) = config.image_mean.iter().find(|m| !m.is_finite()) {
            return Err(err("image_mean", format!("{bad} is not a finite number")));
        }
        if let Some(bad) = config.image_std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(err("image_std", format!("{bad}: expected a finite number above 0 (pixels are divided by it)")));
        }
        positive("rescale_factor", config.rescale_factor)?;
        config.check_bounds()?;
        Ok(config)
    }

    /// Gemma 4's image processor: 16-pixel patches pooled in 3 x 3 squares, at most
    /// `max_soft_tokens` pooled tokens an image (the defaults where the file is silent, as
    /// transformers has them).
    fn gemma4(root: &Value) -> Result<PreprocessorConfig, ConfigError> {
        let r = [root];
        let or = |key: &str, default: usize| if root.get(key).is_some() { usize_at(&r, key) } else { Ok(default) };
        let patch_size = or("patch_size", 16)?;
        let pool = or("pooling_kernel_size", 3)?;
        let soft = or("max_soft_tokens", 280)? as u64;
        if !GEMMA4_SOFT_TOKENS.contains(&soft) {
            return Err(err("max_soft_tokens", format!("{soft}: Gemma 4's processor takes one of {GEMMA4_SOFT_TOKENS:?}")));
        }
        for (key, n) in [("patch_size", patch_size), ("pooling_kernel_size", pool)] {
            if n == 0 || n > 1024 {
                return Err(err(key, format!("{n}: expected 1 to 1024")));
            }
        }
        let normalize = root.get("do_normalize").and_then(Value::as_bool).unwrap_or(false);
        let triple = |key: &str, default: f64| -> Result<[f64; 3], ConfigError> {
            if !normalize {
                return Ok([default; 3]);
            }
            let v = root.get(key).ok_or_else(|| err(key, "missing (do_normalize is true)"))?;
            match v.as_array().and_then(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<_>>>()).as_deref() {
                Some([a, b, c]) => Ok([*a, *b, *c]),
                _ => Err(err(key, format!("expected three numbers, got {v}"))),
            }
        };
        let token = (patch_size * pool) as u64;
        let config = PreprocessorConfig {
            min_pixels: token * token,
            max_pixels: soft * token * token,
            patch_size,
            temporal_patch_size: 1,
            merge_size: pool,
            image_mean: triple("image_mean", 0.0)?,
            image_std: triple("image_std", 1.0)?,
            rescale_factor: match root.get("rescale_factor") {
                None | Some(Value::Null) => 1.0 / 255.0,
                Some(v) => v.as_f64().ok_or_else(|| err("rescale_factor", format!("{v}: expected a finite number above 0")))?,
            },
            bounds_in_size: false,
            sizing: ImageSizing::AspectPreserving,
        };
        if let Some(bad) = config.image_std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(err("image_std", format!("{bad}: expected a finite number above 0 (pixels are divided by it)")));
        }
        positive("rescale_factor", config.rescale_factor)?;
        config.check_bounds()?;
        Ok(config)
    }

    /// The pixel bounds: at least one merged token, min below max, neither past
    /// [`MAX_IMAGE_PIXELS`]. Checked again when the spec or the command line overrides them.
    pub fn check_bounds(&self) -> Result<(), ConfigError> {
        let token = (self.factor() * self.factor()) as u64;
        let (min_key, max_key) = self.bound_keys();
        if self.min_pixels < token {
            return Err(err(
                min_key,
                format!("{} is below one merged token ({token} pixels: (patch_size x merge_size)^2)", self.min_pixels),
            ));
        }
        if self.min_pixels > self.max_pixels {
            return Err(err(min_key, format!("{} is above {max_key} {}", self.min_pixels, self.max_pixels)));
        }
        if self.max_pixels > MAX_IMAGE_PIXELS {
            return Err(err(
                max_key,
                format!("{}: above the engine's limit of {MAX_IMAGE_PIXELS} pixels (8192 x 8192) per image", self.max_pixels),
            ));
        }
        Ok(())
    }

    /// The keys of the pixel bounds as the file writes them.
    pub fn bound_keys(&self) -> (&'static str, &'static str) {
        if self.bounds_in_size {
            ("size.shortest_edge", "size.longest_edge")
        } else {
            ("min_pixels", "max_pixels")
        }
    }

    /// Merged image tokens of an image of `pixels` pixels (after resizing).
    pub fn tokens(&self, pixels: u64) -> u64 {
        pixels / (self.factor() * self.factor()) as u64
    }

    /// Side of the square a merged token covers: sizes are rounded to multiples of it.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }
}

#[cfg(test)]
mod tests {
    use super::FamilySettings;

    #[test]
    fn a_familys_own_settings_come_back_only_as_their_type() {
        #[derive(Debug, Clone, PartialEq)]
        struct Mine(u32);
        #[derive(Debug, Clone, PartialEq)]
        struct Theirs(u32);
        let mut mine = FamilySettings::new(Mine(1));
        assert_eq!(mine.get::<Mine>(), Some(&Mine(1)));
        assert_eq!(mine.get::<Theirs>(), None);
        assert_eq!(FamilySettings::default().get::<Mine>(), None);
        // Equal only to the same type with the same value; a clone is its own copy.
        let copy = mine.clone();
        assert_eq!(copy, mine);
        mine.get_mut::<Mine>().unwrap().0 = 2;
        assert_eq!((copy.get::<Mine>(), mine.get::<Mine>()), (Some(&Mine(1)), Some(&Mine(2))));
        assert_ne!(FamilySettings::new(Mine(1)), FamilySettings::new(Theirs(1)));
        assert_ne!(FamilySettings::new(Mine(1)), FamilySettings::default());
        assert_eq!(FamilySettings::default(), FamilySettings::default());
        assert_eq!(format!("{:?}", FamilySettings::new(Mine(3))), "Mine(3)");
    }
}
