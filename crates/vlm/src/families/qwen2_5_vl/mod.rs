//! Qwen2.5-VL (early 2025): vision blocks of RMSNorm and gated SiLU that attend within windows
//! (all but `fullatt_block_indexes`), 14-pixel patches, CLIP normalisation; the shared Qwen2
//! decoder with M-RoPE.

use serde_json::Value;

use crate::config::{usize_at, usizes, ConfigError, VisionConfig};
use crate::config::TextVariant;
use crate::grounding::BoxFormat;
#[cfg(feature = "libtorch")]
use crate::{error::VlmError, families::VisionTower, weights::Weights};

use super::{Architecture, ConfigReading, SharedReading};

#[cfg(feature = "libtorch")]
pub(super) mod vision;

pub fn vision_config(vision: &Value) -> Result<VisionConfig, ConfigError> {
    let v = [vision];
    Ok(VisionConfig {
        depth: usize_at(&v, "depth")?,
        hidden_size: usize_at(&v, "hidden_size")?,
        intermediate_size: usize_at(&v, "intermediate_size")?,
        out_hidden_size: usize_at(&v, "out_hidden_size")?,
        num_heads: usize_at(&v, "num_heads")?,
        patch_size: usize_at(&v, "patch_size")?,
        spatial_merge_size: usize_at(&v, "spatial_merge_size")?,
        temporal_patch_size: usize_at(&v, "temporal_patch_size")?,
        in_channels: usize_at(&v, "in_channels").or_else(|_| usize_at(&v, "in_chans")).unwrap_or(3),
        window_size: Some(usize_at(&v, "window_size")?),
        fullatt_block_indexes: match vision.get("fullatt_block_indexes") {
            Some(x) => usizes(x, "vision_config.fullatt_block_indexes")?,
            None => return Err(ConfigError { key: "vision_config.fullatt_block_indexes".into(), message: "missing".into() }),
        },
        ..VisionConfig::default()
    })
}

/// Qwen2.5-VL in the registry.
pub(crate) struct Qwen25Vl;

impl Architecture for Qwen25Vl {
    fn name(&self) -> &'static str {
        "qwen2_5_vl"
    }

    fn class_name(&self) -> &'static str {
        "Qwen2_5_VLForConditionalGeneration"
    }

    fn config_reading(&self) -> ConfigReading<'_> {
        ConfigReading::Shared(self)
    }

    fn box_format(&self) -> BoxFormat {
        BoxFormat::JsonResizedPixels
    }

    fn gated_vision_mlp(&self) -> bool {
        true
    }

    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
        Ok(VisionTower::new(vision::VisionQwen25::load(w, cfg)?))
    }
}

impl SharedReading for Qwen25Vl {
    fn vision_config(&self, vision: &Value) -> Result<VisionConfig, ConfigError> {
        vision_config(vision)
    }

    fn text_variant(&self, _text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
        Ok(TextVariant::QWEN2)
    }
}
