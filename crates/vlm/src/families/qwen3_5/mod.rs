//! Qwen3.5 (2026), the dense sizes (the MoE `qwen3_5_moe` is not run).
//!
//! Text: a hybrid decoder. Most layers are Gated DeltaNet (linear attention: a fixed-size
//! recurrent state per head, written by the gated delta rule, after a short causal convolution);
//! every few layers one is full attention, whose queries carry a sigmoid output gate and whose
//! heads turn only a `partial_rotary_factor` share of their dimensions (interleaved M-RoPE).
//! `layer_types` says which is which. Norms store their scale as an offset from one. Vision: the
//! Qwen3-VL tower without DeepStack.
//!
//! The numerics to match are transformers' `models/qwen3_5` and the reference (torch) forms of
//! the delta rule in `models/qwen3_next` (5.23 pinned for the goldens).

use serde_json::Value;

use crate::config::{get, usize_at, ConfigError, LayerKind, LinearAttentionConfig, TextVariant, VisionConfig};
#[cfg(feature = "libtorch")]
use crate::{error::VlmError, families::VisionTower, weights::Weights};

use super::{Architecture, ConfigReading, SharedReading};

#[cfg(feature = "libtorch")]
pub(crate) mod delta_rule;
#[cfg(feature = "libtorch")]
pub(crate) mod linear_attention;

pub fn vision_config(vision: &Value) -> Result<VisionConfig, ConfigError> {
    super::qwen3_vl::tower_config(vision)
}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { key: format!("text_config.{key}"), message: message.into() }
}

/// The Qwen3 decoder's switches plus Qwen3.5's: gated attention, norms centred on zero, a
/// quarter of each head rotating unless the config says otherwise (transformers' default).
pub fn text_variant(text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
    let qwen3 = super::qwen3_vl::text_variant(text_scope)?;
    Ok(TextVariant { gated_attention: true, zero_centered_norm: true, default_partial_rotary: 0.25, ..qwen3 })
}

/// `layer_types` (or, in configs without it, transformers' default: every
/// `full_attention_interval`-th layer full, the rest linear) and the linear layers' shapes.
pub fn text_layers(text_scope: &[&Value], layers: usize) -> Result<(Vec<LayerKind>, Option<LinearAttentionConfig>), ConfigError> {
    let kinds = match get(text_scope, "layer_types") {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item.as_str() {
                Some("full_attention") => Ok(LayerKind::FullAttention),
                Some("linear_attention") => Ok(LayerKind::LinearAttention),
                _ => Err(err("layer_types", format!("entry {i} is {item}: expected \"linear_attention\" or \"full_attention\""))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => return Err(err("layer_types", format!("expected a list, got {other}"))),
        None => {
            let interval = usize_at(text_scope, "full_attention_interval").unwrap_or(4).max(1);
            (0..layers).map(|i| if (i + 1) % interval == 0 { LayerKind::FullAttention } else { LayerKind::LinearAttention }).collect()
        }
    };
    if kinds.len() != layers {
        return Err(err("layer_types", format!("names {} layers, num_hidden_layers is {layers}", kinds.len())));
    }
    let at = |key: &str| usize_at(text_scope, key).map_err(|e| err(key, e.message));
    let linear = LinearAttentionConfig {
        conv_kernel_dim: at("linear_conv_kernel_dim")?,
        key_head_dim: at("linear_key_head_dim")?,
        value_head_dim: at("linear_value_head_dim")?,
        num_key_heads: at("linear_num_key_heads")?,
        num_value_heads: at("linear_num_value_heads")?,
    };
    if linear.conv_kernel_dim == 0 {
        return Err(err("linear_conv_kernel_dim", "expected 1 or more"));
    }
    if linear.num_key_heads == 0 || !linear.num_value_heads.is_multiple_of(linear.num_key_heads) {
        return Err(err(
            "linear_num_value_heads",
            format!("{} is not a multiple of linear_num_key_heads {}", linear.num_value_heads, linear.num_key_heads),
        ));
    }
    Ok((kinds, Some(linear)))
}

/// Qwen3.5 in the registry.
pub(crate) struct Qwen35;

impl Architecture for Qwen35 {
    fn name(&self) -> &'static str {
        "qwen3_5"
    }

    fn class_name(&self) -> &'static str {
        "Qwen3_5ForConditionalGeneration"
    }

    fn config_reading(&self) -> ConfigReading<'_> {
        ConfigReading::Shared(self)
    }

    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
        super::qwen3_vl::load_tower(w, cfg)
    }
}

impl SharedReading for Qwen35 {
    fn vision_config(&self, vision: &Value) -> Result<VisionConfig, ConfigError> {
        vision_config(vision)
    }

    fn text_variant(&self, text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
        text_variant(text_scope)
    }

    fn text_layers(&self, text_scope: &[&Value], layers: usize) -> Result<(Vec<LayerKind>, Option<LinearAttentionConfig>), ConfigError> {
        text_layers(text_scope, layers)
    }
}
