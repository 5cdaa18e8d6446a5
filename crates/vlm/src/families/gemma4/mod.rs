//! Gemma 4 (Google, April 2026): E2B and E4B, the 26B-A4B mixture of experts and the 31B dense.
//! Another lab's model, so its mistakes are not the Qwen families'.
//!
//! Vision: 16-pixel patches (no temporal patch), pixels scaled to [-1, 1] in the model, a learned
//! 2D position table (one row per column and per row index, summed), 2D axial rotary positions,
//! RMSNorm blocks with q/k/v norms, then the patches averaged over `pooling_kernel_size`^2
//! squares and projected into the text model. Images are resized to keep their aspect ratio
//! within `max_soft_tokens` pooled tokens. Text: its own decoder (see `text.rs`): sliding and
//! full-attention layers with their own head widths and rotary settings, norms after attention
//! and the MLP as well as before, per-layer input embeddings (E2B/E4B), keys and values shared
//! by the last layers, a dense MLP beside a routed mixture of experts (26B-A4B), and soft-capped
//! logits.
//!
//! The numerics to match are transformers' `models/gemma4` (5.23 pinned for the goldens).

use serde_json::Value;

use crate::config::{
    err, f64_in, get, positive, usize_at, ConfigError, FusedLayout, LayerKind, MoeConfig, FamilySettings, TextConfig, TextVariant,
    VisionConfig,
};
pub use config::{Gemma4Layer, Gemma4Text, Gemma4Vision, RopeSettings};
#[cfg(feature = "libtorch")]
use crate::{
    error::VlmError,
    families::{TextModel, VisionTower},
    weights::Weights,
};

use super::{Architecture, ConfigReading, OwnFlops};

#[cfg(feature = "libtorch")]
mod attention;
pub mod config;
// Counted for the model's runs: without libtorch only the tests use it.
#[cfg_attr(not(feature = "libtorch"), allow(dead_code))]
pub(crate) mod flops;
#[cfg(feature = "libtorch")]
mod norm;
#[cfg(feature = "libtorch")]
pub(crate) mod text;
#[cfg(feature = "libtorch")]
pub(crate) mod vision;

fn at(scope: &[&Value], key: &str) -> Result<usize, ConfigError> {
    usize_at(scope, key).map_err(|e| err(&format!("text_config.{key}"), e.message))
}

fn flag(scope: &[&Value], key: &str) -> Result<bool, ConfigError> {
    match get(scope, key) {
        None => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| err(&format!("text_config.{key}"), format!("expected true or false, got {v}"))),
    }
}

/// The text config. Both layouts are read: transformers 5.23 saves each full layer's head width
/// and key/value heads in `per_layer_config`; Google's files give `global_head_dim` and
/// `num_global_key_value_heads`, which transformers turns into it on load.
/// The text and vision sections of a Gemma 4 config.json.
pub fn model_config(root: &Value) -> Result<(TextConfig, VisionConfig), ConfigError> {
    let text = text_config(root)?;
    let vision_obj = root.get("vision_config").ok_or_else(|| err("vision_config", "missing"))?;
    let vision = vision_config(vision_obj, text.hidden_size)?;
    Ok((text, vision))
}

pub fn text_config(root: &Value) -> Result<TextConfig, ConfigError> {
    let text = root.get("text_config").filter(|v| v.is_object()).ok_or_else(|| err("text_config", "missing"))?;
    let s = [text];
    let layers = at(&s, "num_hidden_layers")?;
    let hidden_size = at(&s, "hidden_size")?;
    let heads = at(&s, "num_attention_heads")?;
    let head_dim = at(&s, "head_dim")?;
    let kv_heads = at(&s, "num_key_value_heads")?;
    let types: Vec<bool> = match text.get("layer_types") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(err("text_config.layer_types", format!("{t}: expected sliding_attention or full_attention"))),
            })
            .collect::<Result<_, _>>()?,
        // transformers' default: five sliding layers, then a full one.
        _ => (0..layers).map(|i| (i + 1) % 6 != 0).collect(),
    };
    if types.len() != layers {
        return Err(err("text_config.layer_types", format!("{} entries for {layers} layers", types.len())));
    }
    if types.last() == Some(&true) {
        return Err(err("text_config.layer_types", "the last layer must be full_attention (transformers forces it)"));
    }
    let k_eq_v = flag(&s, "attention_k_eq_v")?;
    let global_head_dim = match text.get("global_head_dim") {
        Some(_) => at(&s, "global_head_dim")?,
        None => 512,
    };
    let global_kv = if k_eq_v && text.get("num_global_key_value_heads").is_some_and(|v| !v.is_null()) {
        at(&s, "num_global_key_value_heads")?
    } else {
        kv_heads
    };
    let overrides = text.get("per_layer_config").and_then(Value::as_object);
    let shared = match text.get("num_kv_shared_layers") {
        Some(_) => at(&s, "num_kv_shared_layers")?,
        None => 0,
    };
    if shared >= layers && shared > 0 {
        return Err(err("text_config.num_kv_shared_layers", format!("{shared}: the model has {layers} layers")));
    }
    let first_shared = layers - shared;
    let double_wide = flag(&s, "use_double_wide_mlp")?;
    let mut out = Vec::with_capacity(layers);
    for (i, &sliding) in types.iter().enumerate() {
        let (mut hd, mut kv) = if sliding { (head_dim, kv_heads) } else { (global_head_dim, global_kv) };
        if let Some(o) = overrides.and_then(|o| o.get(&i.to_string())) {
            let key = format!("per_layer_config.{i}");
            if let Some(v) = o.get("head_dim") {
                hd = v.as_u64().ok_or_else(|| err(&format!("text_config.{key}.head_dim"), format!("expected an integer, got {v}")))?
                    as usize;
            }
            if let Some(v) = o.get("num_key_value_heads") {
                kv = v
                    .as_u64()
                    .ok_or_else(|| err(&format!("text_config.{key}.num_key_value_heads"), format!("expected an integer, got {v}")))?
                    as usize;
            }
        }
        if heads == 0 || hd == 0 || hd % 4 != 0 || kv == 0 || heads % kv != 0 {
            return Err(err(
                "text_config.head_dim",
                format!("layer {i}: head width {hd} and {kv} key/value heads do not fit {heads} attention heads"),
            ));
        }
        // A shared layer reads the last unshared layer of its own type.
        let kv_from = if i >= first_shared {
            let source = (0..first_shared).rev().find(|&j| types[j] == sliding).ok_or_else(|| {
                err(
                    "text_config.num_kv_shared_layers",
                    format!("layer {i} shares keys and values, but no earlier layer of its type has them"),
                )
            })?;
            Some(source)
        } else {
            None
        };
        out.push(Gemma4Layer {
            sliding,
            head_dim: hd,
            kv_heads: kv,
            k_eq_v: k_eq_v && !sliding,
            kv_from,
            double_wide: double_wide && i >= first_shared,
        });
    }
    let rope = |kind: &str, default_theta: f64| -> Result<RopeSettings, ConfigError> {
        let key = format!("text_config.rope_parameters.{kind}");
        let Some(p) = text.get("rope_parameters").and_then(|r| r.get(kind)) else {
            return Ok(RopeSettings { theta: default_theta, partial: if kind == "full_attention" { 0.25 } else { 1.0 } });
        };
        let theta = f64_in(p, "rope_theta").map_err(|e| err(&format!("{key}.rope_theta"), e.message))?.unwrap_or(default_theta);
        positive(&format!("{key}.rope_theta"), theta)?;
        let partial = match p.get("rope_type").and_then(Value::as_str).unwrap_or("default") {
            "default" => 1.0,
            "proportional" => {
                f64_in(p, "partial_rotary_factor").map_err(|e| err(&format!("{key}.partial_rotary_factor"), e.message))?.unwrap_or(1.0)
            }
            other => return Err(err(&format!("{key}.rope_type"), format!("{other:?}: the engine runs default and proportional"))),
        };
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(err(&format!("{key}.partial_rotary_factor"), format!("{partial}: expected a share in (0, 1]")));
        }
        Ok(RopeSettings { theta, partial })
    };
    let softcap = f64_in(text, "final_logit_softcapping").map_err(|e| err("text_config.final_logit_softcapping", e.message))?;
    if let Some(cap) = softcap {
        positive("text_config.final_logit_softcapping", cap)?;
    }
    let bidirectional_vision = match text.get("use_bidirectional_attention") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "vision" => true,
        Some(v) => return Err(err("text_config.use_bidirectional_attention", format!("{v}: the engine runs null and \"vision\""))),
    };
    let ple = match text.get("hidden_size_per_layer_input") {
        None | Some(Value::Null) => 0,
        Some(_) => at(&s, "hidden_size_per_layer_input")?,
    };
    let vocab_size = at(&s, "vocab_size")?;
    let per_layer_input = if ple > 0 {
        let vocab = match text.get("vocab_size_per_layer_input") {
            Some(_) => at(&s, "vocab_size_per_layer_input")?,
            None => 262_144,
        };
        Some((ple, vocab))
    } else {
        None
    };
    let moe = if flag(&s, "enable_moe_block")? {
        let experts = at(&s, "num_experts")?;
        let top_k = at(&s, "top_k_experts")?;
        if top_k == 0 || top_k > experts {
            return Err(err("text_config.top_k_experts", format!("{top_k}: expected 1 to num_experts ({experts})")));
        }
        Some(MoeConfig {
            num_experts: experts,
            num_experts_per_tok: top_k,
            moe_intermediate_size: at(&s, "moe_intermediate_size")?,
            shared_expert_intermediate_size: None,
            norm_topk_prob: true,
            sparse_layers: vec![true; layers],
            fused_layout: FusedLayout::Rows,
        })
    } else {
        None
    };
    match text.get("hidden_activation").and_then(Value::as_str).unwrap_or("gelu_pytorch_tanh") {
        "gelu_pytorch_tanh" => {}
        other => return Err(err("text_config.hidden_activation", format!("{other:?}: expected gelu_pytorch_tanh"))),
    }
    let gemma = Gemma4Text {
        sliding_rope: rope("sliding_attention", 10_000.0)?,
        full_rope: rope("full_attention", 1_000_000.0)?,
        layers: out,
        sliding_window: match at(&s, "sliding_window")? {
            0 => return Err(err("text_config.sliding_window", "0: a sliding layer would see no key")),
            n => n,
        },
        final_logit_softcapping: softcap,
        bidirectional_vision,
        per_layer_input,
        pad_token_id: match text.get("pad_token_id") {
            Some(Value::Number(_)) => at(&s, "pad_token_id")? as u32,
            _ => 0,
        },
    };
    let rms_norm_eps = crate::config::f64_at(&s, "rms_norm_eps").map_err(|e| err("text_config.rms_norm_eps", e.message))?;
    positive("text_config.rms_norm_eps", rms_norm_eps)?;
    Ok(TextConfig {
        vocab_size,
        hidden_size,
        // Every layer has the dense MLP, beside any experts.
        intermediate_size: match at(&s, "intermediate_size")? {
            0 => return Err(err("text_config.intermediate_size", "0: expected a positive size")),
            n => n,
        },
        num_hidden_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        rms_norm_eps,
        rope_theta: gemma.sliding_rope.theta,
        mrope_section: Vec::new(),
        tie_word_embeddings: get(&[root], "tie_word_embeddings")
            .or_else(|| get(&s, "tie_word_embeddings"))
            .and_then(Value::as_bool)
            .unwrap_or(true),
        head_dim,
        rotary_dim: head_dim,
        layer_types: vec![LayerKind::FullAttention; layers],
        linear: None,
        variant: TextVariant::QWEN2,
        max_position_embeddings: get(&s, "max_position_embeddings").and_then(Value::as_u64).map(|n| n as usize),
        moe,
        other_media_token_ids: ["video_token_id", "audio_token_id"]
            .into_iter()
            .filter_map(|key| root.get(key).and_then(Value::as_u64).map(|id| (key, id)))
            .map(|(key, id)| u32::try_from(id).map_err(|_| err(key, format!("{id}: not a token id"))))
            .collect::<Result<_, _>>()?,
        own: FamilySettings::new(gemma),
    })
}

/// The vision config; `text_hidden` is the width `embed_vision` projects to.
pub fn vision_config(vision: &Value, text_hidden: usize) -> Result<VisionConfig, ConfigError> {
    let v = [vision];
    let at = |key: &str| usize_at(&v, key).map_err(|e| err(&format!("vision_config.{key}"), e.message));
    let hidden_size = at("hidden_size")?;
    let heads = at("num_attention_heads")?;
    let head_dim = match vision.get("head_dim") {
        Some(_) => at("head_dim")?,
        None if heads > 0 => hidden_size / heads,
        None => 0,
    };
    let kv_heads = match vision.get("num_key_value_heads") {
        Some(_) => at("num_key_value_heads")?,
        None => heads,
    };
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || head_dim == 0 || head_dim % 4 != 0 {
        return Err(err("vision_config.num_attention_heads", format!("{heads} heads of {head_dim} with {kv_heads} key/value heads")));
    }
    let rope_theta = match vision.get("rope_parameters") {
        Some(p) => {
            if let Some(kind) = p.get("rope_type").and_then(Value::as_str).filter(|k| *k != "axial") {
                return Err(err("vision_config.rope_parameters.rope_type", format!("{kind:?}: Gemma 4's tower turns axially")));
            }
            f64_in(p, "rope_theta").map_err(|e| err("vision_config.rope_parameters.rope_theta", e.message))?.unwrap_or(100.0)
        }
        None => 100.0,
    };
    match vision.get("hidden_activation").and_then(Value::as_str).unwrap_or("gelu_pytorch_tanh") {
        "gelu_pytorch_tanh" => {}
        other => return Err(err("vision_config.hidden_activation", format!("{other:?}: expected gelu_pytorch_tanh"))),
    }
    let bool_at = |key: &str| -> Result<bool, ConfigError> {
        match vision.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(b) => b.as_bool().ok_or_else(|| err(&format!("vision_config.{key}"), format!("expected true or false, got {b}"))),
        }
    };
    Ok(VisionConfig {
        depth: at("num_hidden_layers")?,
        hidden_size,
        intermediate_size: at("intermediate_size")?,
        out_hidden_size: text_hidden,
        num_heads: heads,
        patch_size: at("patch_size")?,
        spatial_merge_size: at("pooling_kernel_size")?,
        temporal_patch_size: 1,
        mlp_gelu: "tanh",
        rope_theta,
        own: FamilySettings::new(Gemma4Vision {
            head_dim,
            kv_heads,
            position_embedding_size: at("position_embedding_size")?,
            clipped_linears: bool_at("use_clipped_linears")?,
            standardize: bool_at("standardize")?,
            rms_norm_eps: match vision.get("rms_norm_eps") {
                None | Some(Value::Null) => 1e-6,
                Some(_) => {
                    let eps = crate::config::f64_at(&v, "rms_norm_eps").map_err(|e| err("vision_config.rms_norm_eps", e.message))?;
                    positive("vision_config.rms_norm_eps", eps)?;
                    eps
                }
            },
        }),
        ..VisionConfig::default()
    })
}

/// Gemma 4 in the registry: its own config reading, decoder and FLOP count, plain positions,
/// and image brackets the engine adds (its processor does, not its template).
pub(crate) struct Gemma4;

impl Architecture for Gemma4 {
    fn name(&self) -> &'static str {
        "gemma4"
    }

    fn class_name(&self) -> &'static str {
        "Gemma4ForConditionalGeneration"
    }

    fn config_reading(&self) -> ConfigReading<'_> {
        ConfigReading::Own(model_config)
    }

    fn image_placeholder(&self) -> &'static str {
        "<|image|>"
    }

    fn image_bracket_keys(&self) -> (&'static str, &'static str) {
        ("boi_token_id", "eoi_token_id")
    }

    fn template_writes_image_brackets(&self) -> bool {
        false
    }

    #[cfg(feature = "libtorch")]
    fn multimodal_positions(&self) -> bool {
        false
    }

    fn own_flops(&self) -> Option<OwnFlops> {
        Some(flops::per_image)
    }

    #[cfg(feature = "libtorch")]
    fn load_vision(&self, w: &Weights, cfg: &VisionConfig) -> Result<VisionTower, VlmError> {
        Ok(VisionTower::new(vision::VisionGemma4::load(w, cfg)?))
    }

    #[cfg(feature = "libtorch")]
    fn load_text(&self, w: &Weights, cfg: &TextConfig, image_token_id: u32) -> Result<TextModel, VlmError> {
        Ok(TextModel::own(text::Gemma4Decoder::load(w, cfg, image_token_id)?))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::checkpoint::ModelConfig;

    /// The E4B bench config (Google's layout) with one key of its text or vision section set.
    fn e4b_with(section: &str, key: &str, value: Value) -> Result<ModelConfig, String> {
        let path = crate::repository().join("benches/configs/gemma4_e4b.config.json");
        let mut root: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        root[section][key] = value;
        ModelConfig::from_json(&root).map_err(|e| format!("{}: {}", e.key, e.message))
    }

    #[test]
    fn the_published_layout_reads_into_each_layers_shape() {
        let c = e4b_with("text_config", "vocab_size", 262_144.into()).unwrap();
        let g = c.text.own.get::<super::Gemma4Text>().unwrap();
        // 42 layers, five sliding to one full; the last 18 read earlier layers' keys and values.
        assert_eq!((g.layers.len(), g.layers.iter().filter(|l| !l.sliding).count()), (42, 7));
        assert_eq!((g.layers[5].head_dim, g.layers[0].head_dim), (512, 256));
        assert_eq!((g.layers[24].kv_from, g.layers[41].kv_from, g.layers[23].kv_from), (Some(22), Some(23), None));
        assert_eq!(g.per_layer_input, Some((256, 262_144)));
    }

    #[test]
    fn zero_and_mismatched_sizes_are_refused_by_key() {
        let err = |section, key, value: i64| e4b_with(section, key, value.into()).unwrap_err();
        assert!(err("text_config", "num_hidden_layers", 0).starts_with("text_config.layer_types: 42 entries for 0 layers"));
        assert!(err("text_config", "num_attention_heads", 0).contains("do not fit 0 attention heads"));
        assert!(err("text_config", "intermediate_size", 0).starts_with("text_config.intermediate_size"));
        assert!(err("text_config", "num_kv_shared_layers", 42).starts_with("text_config.num_kv_shared_layers"));
        assert!(err("vision_config", "hidden_size", 0).starts_with("vision_config.hidden_size"));
        assert!(err("text_config", "sliding_window", 0).starts_with("text_config.sliding_window"));
        assert!(err("vision_config", "num_hidden_layers", 0).starts_with("vision_config.depth"));
        // A key written as null is said to be null, not missing.
        let null = e4b_with("text_config", "head_dim", Value::Null).unwrap_err();
        assert_eq!(null, "text_config.head_dim: is null; a value is needed here");
    }
}
