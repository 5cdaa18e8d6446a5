//! Qwen3-VL-MoE (2025; Qwen3-VL-30B-A3B and 235B-A22B): Qwen3-VL with a sparse mixture of
//! experts in place of the MLP in every `decoder_sparse_step`-th decoder layer not listed in
//! `mlp_only_layers` (all of them in the published sizes), and no shared expert. The vision tower
//! and the rest of the decoder are Qwen3-VL's, read by its folder.
//!
//! Published checkpoints store the experts fused and transposed: `mlp.experts.gate_up_proj` of
//! (experts, hidden, 2 x moe_intermediate) and `mlp.experts.down_proj` of (experts,
//! moe_intermediate, hidden); transformers 5.23 transposes both on load
//! (`conversion_mapping.py`, `qwen3_vl_moe`) and back when it saves. The engine uses them as
//! stored. The numerics to match are `models/qwen3_vl_moe` of transformers 5.23.

use serde_json::Value;

use crate::config::{get, usize_at, usizes, ConfigError, FusedLayout, MoeConfig};
use crate::config::{TextVariant, VisionConfig};
#[cfg(feature = "libtorch")]
use crate::{error::VlmError, families::VisionTower, weights::Weights};

use super::qwen3_vl::Qwen3Vl;
use super::{Architecture, ConfigReading, SharedReading};

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { key: format!("text_config.{key}"), message: message.into() }
}

pub fn moe_config(text_scope: &[&Value], layers: usize) -> Result<MoeConfig, ConfigError> {
    let at = |key: &str| usize_at(text_scope, key).map_err(|e| err(key, e.message));
    let step = match get(text_scope, "decoder_sparse_step") {
        Some(_) => at("decoder_sparse_step")?,
        None => 1,
    };
    if step == 0 {
        return Err(err("decoder_sparse_step", "0: expected 1 or more (every step-th layer is sparse)"));
    }
    let dense = match get(text_scope, "mlp_only_layers") {
        Some(v) => usizes(v, "text_config.mlp_only_layers")?,
        None => Vec::new(),
    };
    if let Some(bad) = dense.iter().find(|&&l| l >= layers) {
        return Err(err("mlp_only_layers", format!("layer {bad} does not exist (num_hidden_layers {layers})")));
    }
    // Published configs (transformers 4.57) write num_experts; transformers 5 writes the same
    // number as num_local_experts (its attribute_map).
    let num_experts = match (get(text_scope, "num_experts"), get(text_scope, "num_local_experts")) {
        (None, Some(_)) => at("num_local_experts")?,
        (None, None) => {
            return Err(err("num_experts", "missing (a mixture of experts names its experts: num_experts or num_local_experts)"))
        }
        _ => at("num_experts")?,
    };
    // transformers' rule: sparse where the layer is not MLP-only and (layer + 1) is a multiple of
    // the step.
    let sparse = (0..layers).map(|l| !dense.contains(&l) && (l + 1) % step == 0).collect();
    Ok(MoeConfig {
        num_experts,
        num_experts_per_tok: at("num_experts_per_tok")?,
        moe_intermediate_size: at("moe_intermediate_size")?,
        shared_expert_intermediate_size: None,
        norm_topk_prob: true,
        sparse_layers: sparse,
        fused_layout: FusedLayout::Columns,
    })
}

/// Qwen3-VL-MoE in the registry: Qwen3-VL's but for the experts.
pub(crate) struct Qwen3VlMoe;

impl Architecture for Qwen3VlMoe {
    fn name(&self) -> &'static str {
        "qwen3_vl_moe"
    }

    fn class_name(&self) -> &'static str {
        "Qwen3VLMoeForConditionalGeneration"
    }

    fn config_reading(&self) -> ConfigReading<'_> {
        ConfigReading::Shared(self)
    }

    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
        Qwen3Vl.load_vision(w, cfg)
    }
}

impl SharedReading for Qwen3VlMoe {
    fn vision_config(&self, vision: &Value) -> Result<VisionConfig, ConfigError> {
        Qwen3Vl.vision_config(vision)
    }

    fn text_variant(&self, text_scope: &[&Value]) -> Result<TextVariant, ConfigError> {
        Qwen3Vl.text_variant(text_scope)
    }

    fn moe(&self, text_scope: &[&Value], layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        moe_config(text_scope, layers).map(Some)
    }
}
