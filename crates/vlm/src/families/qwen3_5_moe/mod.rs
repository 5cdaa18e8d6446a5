//! Qwen3.5-MoE (2026; Qwen3.6-35B-A3B is one): Qwen3.5 with a sparse mixture of experts in
//! every decoder layer's place of the MLP, beside a shared expert every token takes, scaled by a
//! sigmoid gate. Everything else (the hybrid Gated DeltaNet / gated-attention decoder, the vision
//! tower) is Qwen3.5's, read by its folder.
//!
//! Published checkpoints store one tensor per expert and projection
//! (`mlp.experts.N.gate_proj.weight`, as Qwen2-MoE does); transformers 5.23 merges them into
//! (experts, 2 x moe_intermediate, hidden) on load (`conversion_mapping.py`, `qwen2_moe`) and
//! splits them again when it saves. The engine reads either. The numerics to match are
//! `models/qwen3_5_moe` of transformers 5.23.

use serde_json::Value;

use crate::config::{usize_at, ConfigError, FusedLayout, MoeConfig};
use crate::config::{LayerKind, LinearAttentionConfig, TextVariant, VisionConfig};
#[cfg(feature = "libtorch")]
use crate::{error::VlmError, families::VisionTower, weights::Weights};

use super::qwen3_5::Qwen35;
use super::{Architecture, ConfigReading, SharedReading};

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { key: format!("text_config.{key}"), message: message.into() }
}

/// Every layer sparse, with a shared expert.
pub fn moe_config(text_scope: &[&Value], layers: usize) -> Result<MoeConfig, ConfigError> {
    let at = |key: &str| usize_at(text_scope, key).map_err(|e| err(key, e.message));
    Ok(MoeConfig {
        num_experts: at("num_experts")?,
        num_experts_per_tok: at("num_experts_per_tok")?,
        moe_intermediate_size: at("moe_intermediate_size")?,
        shared_expert_intermediate_size: Some(at("shared_expert_intermediate_size")?),
        norm_topk_prob: true,
        sparse_layers: vec![true; layers],
        fused_layout: FusedLayout::Rows,
    })
}

/// Qwen3.5-MoE in the registry: Qwen3.5's but for the experts.
pub(crate) struct Qwen35Moe;

impl Architecture for Qwen35Moe {
    fn name(&self) -> &'static str {
        "qwen3_5_moe"
    }

    fn class_name(&self) -> &'static str {
        "Qwen3_5MoeForConditionalGeneration"
    }

    fn config_reading(&self) -> ConfigReading<'_> {
        ConfigReading::Shared(self)
    }

    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
        Qwen35.load_vision(w, cfg)
    }
}

impl SharedReading for Qwen35Moe {
    fn vision_config(&self, vision: &Value) -> Result<VisionConfig, ConfigError> {
        Qwen35.vision_config(vision)
    }

    fn text_variant(&self, text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
        Qwen35.text_variant(text_scope)
    }

    fn text_layers(&self, text_scope: &[&Value], layers: usize) -> Result<(Vec<LayerKind>, Option<LinearAttentionConfig>), ConfigError> {
        Qwen35.text_layers(text_scope, layers)
    }

    fn moe(&self, text_scope: &[&Value], layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        moe_config(text_scope, layers).map(Some)
    }
}
