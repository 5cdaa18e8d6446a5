//! Qwen2-VL (2024): a full-attention vision tower of LayerNorm and quick-GELU blocks, 14-pixel
//! patches merged 2 x 2, CLIP normalisation; the shared Qwen2 decoder with M-RoPE.

use serde_json::Value;

use crate::config::{usize_at, ConfigError, VisionConfig, MAX_CONFIG_INTEGER};
use crate::config::TextVariant;
use crate::grounding::BoxFormat;
#[cfg(feature = "libtorch")]
use crate::{error::VlmError, families::VisionTower, weights::Weights};

use super::{Architecture, ConfigReading, SharedReading};

#[cfg(feature = "libtorch")]
pub(super) mod vision;

/// `vision_config` as Qwen2-VL writes it: `embed_dim` is the tower's width, `hidden_size` the
/// text model's, and the MLP is `mlp_ratio` times wider than the tower.
pub fn vision_config(vision: &Value) -> Result<VisionConfig, ConfigError> {
    let v = [vision];
    let width = usize_at(&v, "embed_dim")?;
    // Written 4 or 4.0; 4 when absent, as transformers defaults it.
    let ratio = match v[0].get("mlp_ratio").and_then(Value::as_f64) {
        None => 4,
        Some(r) if r >= 1.0 && r.fract() == 0.0 && r <= MAX_CONFIG_INTEGER as f64 => r as usize,
        Some(r) => return Err(crate::config::err("vision_config.mlp_ratio", format!("{r}: expected a whole number from 1"))),
    };
    Ok(VisionConfig {
        depth: usize_at(&v, "depth")?,
        hidden_size: width,
        intermediate_size: width * ratio,
        out_hidden_size: usize_at(&v, "hidden_size")?,
        num_heads: usize_at(&v, "num_heads")?,
        patch_size: usize_at(&v, "patch_size")?,
        spatial_merge_size: usize_at(&v, "spatial_merge_size")?,
        temporal_patch_size: usize_at(&v, "temporal_patch_size")?,
        in_channels: usize_at(&v, "in_channels").or_else(|_| usize_at(&v, "in_chans")).unwrap_or(3),
        ..VisionConfig::default()
    })
}

/// Qwen2-VL in the registry.
pub(crate) struct Qwen2Vl;

impl Architecture for Qwen2Vl {
    fn name(&self) -> &'static str {
        "qwen2_vl"
    }

    fn class_name(&self) -> &'static str {
        "Qwen2VLForConditionalGeneration"
    }

    fn config_reading(&self) -> ConfigReading<'_> {
        ConfigReading::Shared(self)
    }

    fn box_format(&self) -> BoxFormat {
        BoxFormat::BoxTokensPerMille
    }

    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
        Ok(VisionTower::new(vision::VisionQwen2::load(w, cfg)?))
    }
}

impl SharedReading for Qwen2Vl {
    fn vision_config(&self, vision: &Value) -> Result<VisionConfig, ConfigError> {
        vision_config(vision)
    }

    fn text_variant(&self, _text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
        Ok(TextVariant::QWEN2)
    }
}
