//! A checkpoint's `config.json` read whole: which family it is, then that family's reading of
//! its text and vision parts (in its folder under [`super::families`]) over the shared types of
//! [`super::config`]. This sits above the families, so they depend on the shared types and
//! nothing in them points back up.

use serde::Serialize;
use serde_json::Value;

use super::config::{err, f64_at, f64_in, get, positive, usize_at, usizes, ConfigError, FamilySettings, TextConfig, VisionConfig};
use super::families::{ConfigReading, Family, SharedReading};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    pub family: Family,
    pub text: TextConfig,
    pub vision: VisionConfig,
    pub image_token_id: u32,
    pub vision_start_token_id: u32,
    pub vision_end_token_id: u32,
}

impl ModelConfig {
    pub fn from_json(root: &Value) -> Result<ModelConfig, ConfigError> {
        let family = Family::of_config(root)?;
        let parts = match family.architecture().config_reading() {
            ConfigReading::Shared(parts) => parts,
            // A family that reads its sections its own way (Gemma 4) gets the checks every
            // family needs; the shared reading's shapes are checked whole below.
            ConfigReading::Own(read) => {
                let (text, vision) = read(root)?;
                let config = Self::assembled(family, root, text, vision)?;
                config.check_sizes()?;
                config.check_tokens()?;
                return Ok(config);
            }
        };
        Self::shared_reading(family, parts, root)
    }

    /// The Qwen families' shape, with `parts` the family's.
    fn shared_reading(family: Family, parts: &dyn SharedReading, root: &Value) -> Result<ModelConfig, ConfigError> {
        // The nested layout keeps the text keys in text_config; the flat one at the top.
        let text_obj = root.get("text_config").filter(|v| v.is_object());
        let text_scope: Vec<&Value> = text_obj.into_iter().chain(std::iter::once(root)).collect();
        let (rope_theta, mrope_section, partial_rotary) = rope(&text_scope)?;
        let variant = parts.text_variant(&text_scope)?;
        let num_hidden_layers = usize_at(&text_scope, "num_hidden_layers")?;
        let (layer_types, linear) = parts.text_layers(&text_scope, num_hidden_layers)?;
        let hidden_size = usize_at(&text_scope, "hidden_size")?;
        let num_attention_heads = usize_at(&text_scope, "num_attention_heads")?;
        if num_attention_heads == 0 || (variant.head_dim.is_none() && hidden_size % num_attention_heads != 0) {
            return Err(err("hidden_size", format!("{hidden_size} is not divisible by num_attention_heads {num_attention_heads}")));
        }
        let head_dim = variant.head_dim.unwrap_or(hidden_size / num_attention_heads);
        let moe = parts.moe(&text_scope, num_hidden_layers)?;
        // A model whose every layer is sparse (Qwen3.5-MoE) has no dense MLP width.
        let all_sparse = moe.as_ref().is_some_and(|m| m.sparse_layers.iter().all(|&s| s));
        let intermediate_size =
            if all_sparse && get(&text_scope, "intermediate_size").is_none() { 0 } else { usize_at(&text_scope, "intermediate_size")? };
        let text = TextConfig {
            vocab_size: usize_at(&text_scope, "vocab_size")?,
            hidden_size,
            intermediate_size,
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
            max_position_embeddings: get(&text_scope, "max_position_embeddings").and_then(Value::as_u64).map(|n| n as usize),
            moe,
            other_media_token_ids: Vec::new(),
            own: FamilySettings::default(),
        };
        let vision_obj = root.get("vision_config").ok_or_else(|| err("vision_config", "missing"))?;
        let vision = parts.vision_config(vision_obj)?;
        let config = Self::assembled(family, root, text, vision)?;
        config.check()?;
        Ok(config)
    }

    /// The family's two sections and its image tokens, read under the family's keys.
    fn assembled(family: Family, root: &Value, text: TextConfig, vision: VisionConfig) -> Result<ModelConfig, ConfigError> {
        let token = |key: &str| usize_at(&[root], key).map(|n| n as u32);
        let (start, end) = family.architecture().image_bracket_keys();
        Ok(ModelConfig {
            family,
            text,
            vision,
            image_token_id: token("image_token_id")?,
            vision_start_token_id: token(start)?,
            vision_end_token_id: token(end)?,
        })
    }

    /// Numbers every family needs above zero (epsilons, rotary bases, sizes, the experts'),
    /// and `num_experts_per_tok` within the experts: else every score is NaN, or a product
    /// divides by zero or has no rows.
    fn check_sizes(&self) -> Result<(), ConfigError> {
        let (t, v) = (&self.text, &self.vision);
        positive("rms_norm_eps", t.rms_norm_eps)?;
        positive("rope_theta", t.rope_theta)?;
        positive("vision_config.rope_theta", v.rope_theta)?;
        let sizes = [
            ("vocab_size", t.vocab_size),
            ("hidden_size", t.hidden_size),
            ("num_hidden_layers", t.num_hidden_layers),
            ("head_dim", t.head_dim),
            ("vision_config.depth", v.depth),
            ("vision_config.hidden_size", v.hidden_size),
            ("vision_config.intermediate_size", v.intermediate_size),
            ("vision_config.patch_size", v.patch_size),
            ("vision_config.spatial_merge_size", v.spatial_merge_size),
            ("vision_config.temporal_patch_size", v.temporal_patch_size),
        ];
        if let Some((key, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(err(key, "0: expected a positive size"));
        }
        // A model whose every layer is sparse (Qwen3.5-MoE) has no dense MLP width.
        let dense_layers = t.moe.as_ref().map_or(t.num_hidden_layers, |m| m.sparse_layers.iter().filter(|&&s| !s).count());
        if dense_layers > 0 && t.intermediate_size == 0 {
            return Err(err("intermediate_size", "0: expected a positive size"));
        }
        if let Some(m) = &t.moe {
            let sizes = [
                ("text_config.num_experts", m.num_experts),
                ("text_config.moe_intermediate_size", m.moe_intermediate_size),
                ("text_config.shared_expert_intermediate_size", m.shared_expert_intermediate_size.unwrap_or(1)),
            ];
            if let Some((key, _)) = sizes.iter().find(|(_, n)| *n == 0) {
                return Err(err(key, "0: expected a positive size"));
            }
            if m.num_experts_per_tok == 0 || m.num_experts_per_tok > m.num_experts {
                return Err(err(
                    "text_config.num_experts_per_tok",
                    format!("{}: expected 1 to num_experts ({})", m.num_experts_per_tok, m.num_experts),
                ));
            }
        }
        Ok(())
    }

    /// Shapes that must agree for the model to exist at all, and numbers that would make every
    /// score NaN (a zero or negative epsilon or rotary base) or divide by zero.
    fn check(&self) -> Result<(), ConfigError> {
        let (t, v) = (&self.text, &self.vision);
        self.check_sizes()?;
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
        if v.in_channels != 3 {
            return Err(err("vision_config.in_channels", format!("{}: the engine feeds RGB images, 3 channels", v.in_channels)));
        }
        if let Some(window) = v.window_size {
            let token = v.patch_size * v.spatial_merge_size;
            if window < token || window % token != 0 {
                return Err(err(
                    "vision_config.window_size",
                    format!("{window}: expected a multiple of patch_size x spatial_merge_size ({token})"),
                ));
            }
        }
        if v.num_heads == 0 || v.hidden_size % v.num_heads != 0 {
            return Err(err("vision_config.num_heads", format!("{} does not divide the vision width {}", v.num_heads, v.hidden_size)));
        }
        self.check_tokens()?;
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

impl ModelConfig {
    /// The image tokens are tokens of the vocabulary.
    fn check_tokens(&self) -> Result<(), ConfigError> {
        let (start, end) = self.family.architecture().image_bracket_keys();
        for (key, id) in [("image_token_id", self.image_token_id), (start, self.vision_start_token_id), (end, self.vision_end_token_id)] {
            if id as usize >= self.text.vocab_size {
                return Err(err(key, format!("{id} is not a token of the model's vocabulary (vocab_size {})", self.text.vocab_size)));
            }
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
