//! `config.json` and `preprocessor_config.json`, in both layouts the checkpoints use: the older
//! flat hub layout (text keys at the top, `rope_scaling`) and the nested one (`text_config`,
//! `rope_parameters`) that transformers 5 writes. Field names mirror the files.

use serde::Serialize;
use serde_json::Value;

pub use super::families::Family;

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
}

impl TextConfig {
    pub fn head_dim(&self) -> usize {
        self.head_dim
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
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    pub family: Family,
    pub text: TextConfig,
    pub vision: VisionConfig,
    pub image_token_id: u32,
    pub vision_start_token_id: u32,
    pub vision_end_token_id: u32,
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

pub(crate) fn usize_at(objects: &[&Value], key: &str) -> Result<usize, ConfigError> {
    let v = get(objects, key).ok_or_else(|| err(key, "missing"))?;
    v.as_u64().map(|n| n as usize).ok_or_else(|| err(key, format!("expected a non-negative integer, got {v}")))
}

fn f64_at(objects: &[&Value], key: &str) -> Result<f64, ConfigError> {
    let v = get(objects, key).ok_or_else(|| err(key, "missing"))?;
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

impl ModelConfig {
    pub fn from_json(root: &Value) -> Result<ModelConfig, ConfigError> {
        let family = Family::of_config(root)?;
        // The nested layout keeps the text keys in text_config; the flat one at the top.
        let text_obj = root.get("text_config").filter(|v| v.is_object());
        let text_scope: Vec<&Value> = text_obj.into_iter().chain(std::iter::once(root)).collect();
        let (rope_theta, mrope_section, partial_rotary) = rope(&text_scope)?;
        let variant = family.text_variant(&text_scope)?;
        let num_hidden_layers = usize_at(&text_scope, "num_hidden_layers")?;
        let (layer_types, linear) = family.text_layers(&text_scope, num_hidden_layers)?;
        let hidden_size = usize_at(&text_scope, "hidden_size")?;
        let num_attention_heads = usize_at(&text_scope, "num_attention_heads")?;
        if num_attention_heads == 0 || (variant.head_dim.is_none() && hidden_size % num_attention_heads != 0) {
            return Err(err("hidden_size", format!("{hidden_size} is not divisible by num_attention_heads {num_attention_heads}")));
        }
        let head_dim = variant.head_dim.unwrap_or(hidden_size / num_attention_heads);
        let text = TextConfig {
            vocab_size: usize_at(&text_scope, "vocab_size")?,
            hidden_size,
            intermediate_size: usize_at(&text_scope, "intermediate_size")?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads: usize_at(&text_scope, "num_key_value_heads")?,
            rms_norm_eps: f64_at(&text_scope, "rms_norm_eps")?,
            rope_theta,
            mrope_section,
            tie_word_embeddings: get(&[root], "tie_word_embeddings")
                .or_else(|| get(&text_scope, "tie_word_embeddings"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            head_dim,
            rotary_dim: (head_dim as f64 * partial_rotary.unwrap_or(variant.default_partial_rotary)).round() as usize,
            layer_types,
            linear,
            variant,
        };
        let vision_obj = root.get("vision_config").ok_or_else(|| err("vision_config", "missing"))?;
        let vision = family.vision_config(vision_obj)?;
        let token = |key: &str| usize_at(&[root], key).map(|n| n as u32);
        let config = ModelConfig {
            family,
            text,
            vision,
            image_token_id: token("image_token_id")?,
            vision_start_token_id: token("vision_start_token_id")?,
            vision_end_token_id: token("vision_end_token_id")?,
        };
        config.check()?;
        Ok(config)
    }

    /// Shapes that must agree for the model to exist at all.
    fn check(&self) -> Result<(), ConfigError> {
        let t = &self.text;
        if t.num_key_value_heads == 0 || t.num_attention_heads % t.num_key_value_heads != 0 {
            return Err(err(
                "num_key_value_heads",
                format!("{} does not divide num_attention_heads {}", t.num_key_value_heads, t.num_attention_heads),
            ));
        }
        if t.mrope_section.iter().sum::<usize>() * 2 != t.rotary_dim {
            let half = if t.rotary_dim == t.head_dim() { "head_dim / 2" } else { "head_dim * partial_rotary_factor / 2" };
            return Err(err(
                "mrope_section",
                format!("{:?} sums to {}, expected {half} = {}", t.mrope_section, t.mrope_section.iter().sum::<usize>(), t.rotary_dim / 2),
            ));
        }
        let v = &self.vision;
        if v.num_heads == 0 || v.hidden_size % v.num_heads != 0 {
            return Err(err("vision_config.num_heads", format!("{} does not divide the vision width {}", v.num_heads, v.hidden_size)));
        }
        if v.out_hidden_size != t.hidden_size {
            return Err(err(
                "vision_config",
                format!("the merger projects to {}, the text model is {} wide", v.out_hidden_size, t.hidden_size),
            ));
        }
        if let Some(bad) = v.fullatt_block_indexes.iter().find(|&&i| i >= v.depth) {
            return Err(err("vision_config.fullatt_block_indexes", format!("block {bad} does not exist (depth {})", v.depth)));
        }
        if let Some(bad) = v.deepstack_visual_indexes.iter().find(|&&i| i >= v.depth) {
            return Err(err("vision_config.deepstack_visual_indexes", format!("block {bad} does not exist (depth {})", v.depth)));
        }
        if v.deepstack_visual_indexes.len() > t.num_hidden_layers {
            return Err(err(
                "vision_config.deepstack_visual_indexes",
                format!("{} DeepStack features for {} decoder layers", v.deepstack_visual_indexes.len(), t.num_hidden_layers),
            ));
        }
        Ok(())
    }
}

/// rope_theta, mrope_section and `partial_rotary_factor` (if given) from `rope_parameters`
/// (nested) or `rope_theta` + `rope_scaling` (flat).
fn rope(scope: &[&Value]) -> Result<(f64, Vec<usize>, Option<f64>), ConfigError> {
    let partial = |object: &Value, key: &str| -> Result<Option<f64>, ConfigError> {
        match f64_in(object, "partial_rotary_factor").map_err(|e| err(key, e.message))? {
            Some(f) if !(f > 0.0 && f <= 1.0) => Err(err(key, format!("{f}: expected a share in (0, 1]"))),
            f => Ok(f),
        }
    };
    if let Some(params) = get(scope, "rope_parameters") {
        let theta = params.get("rope_theta").and_then(Value::as_f64).ok_or_else(|| err("rope_parameters.rope_theta", "missing"))?;
        let section = params.get("mrope_section").ok_or_else(|| err("rope_parameters.mrope_section", "missing"))?;
        let factor = partial(params, "rope_parameters.partial_rotary_factor")?;
        return Ok((theta, usizes(section, "rope_parameters.mrope_section")?, factor));
    }
    let theta = f64_at(scope, "rope_theta")?;
    let scaling = get(scope, "rope_scaling")
        .ok_or_else(|| err("rope_scaling", "missing: neither rope_parameters nor rope_scaling names mrope_section"))?;
    let section = scaling.get("mrope_section").ok_or_else(|| err("rope_scaling.mrope_section", "missing"))?;
    let factor = match scope.iter().find(|o| o.get("partial_rotary_factor").is_some()) {
        Some(object) => partial(object, "partial_rotary_factor")?,
        None => None,
    };
    Ok((theta, usizes(section, "rope_scaling.mrope_section")?, factor))
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
}

impl PreprocessorConfig {
    pub fn from_json(root: &Value) -> Result<PreprocessorConfig, ConfigError> {
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
        };
        if config.min_pixels > config.max_pixels {
            return Err(err("min_pixels", format!("{} is above max_pixels {}", config.min_pixels, config.max_pixels)));
        }
        Ok(config)
    }

    /// Side of the square a merged token covers: sizes are rounded to multiples of it.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }
}
