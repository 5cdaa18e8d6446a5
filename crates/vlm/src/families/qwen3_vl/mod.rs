//! Qwen3-VL (September 2025), the dense sizes (2B to 32B; the MoE `qwen3_vl_moe` is not run).
//!
//! Vision: 16-pixel patches with a temporal patch of 2 (images resize to multiples of 32), mean
//! and std 0.5, a learned square grid of position embeddings bilinearly interpolated to each
//! image's patch grid, 2D rotary positions, LayerNorm blocks with `gelu_pytorch_tanh` MLPs, the
//! patch merger, and DeepStack: a merger after each of `deepstack_visual_indexes` whose output
//! is added to the text model's hidden states at the image's positions after the first decoder
//! layers, one per index. Text: the Qwen3 decoder (RMSNorm on each head's queries and keys, an
//! explicit `head_dim`, `attention_bias`) with interleaved M-RoPE.
//!
//! The numerics to match are transformers' `models/qwen3_vl` (5.23 pinned for the goldens).

use serde_json::Value;

use crate::config::{f64_in, usize_at, usizes, ConfigError, TextVariant, VisionConfig};
#[cfg(feature = "libtorch")]
use crate::{error::VlmError, families::VisionTower, weights::Weights};

use super::{Architecture, ConfigReading, SharedReading};

#[cfg(feature = "libtorch")]
pub(super) mod vision;

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { key: format!("vision_config.{key}"), message: message.into() }
}

pub fn vision_config(vision: &Value) -> Result<VisionConfig, ConfigError> {
    let deepstack = match vision.get("deepstack_visual_indexes") {
        Some(x) => usizes(x, "vision_config.deepstack_visual_indexes")?,
        None => return Err(err("deepstack_visual_indexes", "missing (an empty list means no DeepStack)")),
    };
    Ok(VisionConfig { deepstack_visual_indexes: deepstack, ..tower_config(vision)? })
}

/// The tower's keys but DeepStack's: Qwen3.5 has the same tower without it.
pub(crate) fn tower_config(vision: &Value) -> Result<VisionConfig, ConfigError> {
    let v = [vision];
    // The family's keys, named with their section when missing.
    let at = |key: &str| usize_at(&v, key).map_err(|e| err(key, e.message));
    let positions = at("num_position_embeddings")?;
    let side = (positions as f64).sqrt().round() as usize;
    if side * side != positions || side < 2 {
        return Err(err("num_position_embeddings", format!("{positions} is not the square of a grid side of 2 or more")));
    }
    let mlp_gelu = match vision.get("hidden_act").and_then(Value::as_str).unwrap_or("gelu_pytorch_tanh") {
        "gelu_pytorch_tanh" => "tanh",
        "gelu" => "none",
        other => return Err(err("hidden_act", format!("{other:?}: expected gelu_pytorch_tanh or gelu"))),
    };
    let rope_theta = match vision.get("rope_parameters") {
        Some(params) => f64_in(params, "rope_theta").map_err(|e| err("rope_parameters.rope_theta", e.message))?.unwrap_or(10000.0),
        None => 10000.0,
    };
    Ok(VisionConfig {
        depth: at("depth")?,
        hidden_size: at("hidden_size")?,
        intermediate_size: at("intermediate_size")?,
        out_hidden_size: at("out_hidden_size")?,
        num_heads: at("num_heads")?,
        patch_size: at("patch_size")?,
        spatial_merge_size: at("spatial_merge_size")?,
        temporal_patch_size: at("temporal_patch_size")?,
        in_channels: usize_at(&v, "in_channels").unwrap_or(3),
        num_position_embeddings: Some(positions),
        mlp_gelu,
        rope_theta,
        ..VisionConfig::default()
    })
}

/// The Qwen3 decoder: q/k norms, `head_dim` as written (the published sizes' 128 is not
/// hidden_size / heads for every size), biases per `attention_bias`, interleaved M-RoPE (which
/// transformers applies whatever `mrope_interleaved` says).
pub fn text_variant(text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
    let head_dim = usize_at(text_scope, "head_dim").map_err(|e| ConfigError { key: "text_config.head_dim".into(), message: e.message })?;
    let bias = match text_scope.iter().find_map(|o| o.get("attention_bias")) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ConfigError { key: "text_config.attention_bias".into(), message: format!("expected true or false, got {other}") })
        }
    };
    Ok(TextVariant {
        head_dim: Some(head_dim),
        qkv_bias: bias,
        o_bias: bias,
        qk_norm: true,
        mrope_interleaved: true,
        gated_attention: false,
        zero_centered_norm: false,
        default_partial_rotary: 1.0,
    })
}

/// Qwen3-VL in the registry.
pub(crate) struct Qwen3Vl;

impl Architecture for Qwen3Vl {
    fn name(&self) -> &'static str {
        "qwen3_vl"
    }

    fn class_name(&self) -> &'static str {
        "Qwen3VLForConditionalGeneration"
    }

    fn config_reading(&self) -> ConfigReading<'_> {
        ConfigReading::Shared(self)
    }

    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
        load_tower(w, cfg)
    }
}

impl SharedReading for Qwen3Vl {
    fn vision_config(&self, vision: &Value) -> Result<VisionConfig, ConfigError> {
        vision_config(vision)
    }

    fn text_variant(&self, text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
        text_variant(text_scope)
    }
}

/// The tower, which Qwen3.5 and both mixtures of experts share (Qwen3.5's config lists no
/// DeepStack blocks).
#[cfg(feature = "libtorch")]
pub(crate) fn load_tower(w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
    Ok(VisionTower::new(vision::VisionQwen3::load(w, cfg)?))
}
