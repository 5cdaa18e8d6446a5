//! Qwen2.5-VL (early 2025): vision blocks of RMSNorm and gated SiLU that attend within windows
//! (all but `fullatt_block_indexes`), 14-pixel patches, CLIP normalisation; the shared Qwen2
//! decoder with M-RoPE.

use serde_json::Value;

use crate::config::{usize_at, usizes, ConfigError, VisionConfig};

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
