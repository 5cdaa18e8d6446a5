//! `config.json` and `preprocessor_config.json`, in both layouts the checkpoints use: the older
//! flat hub layout (text keys at the top, `rope_scaling`) and the nested one (`text_config`,
//! `rope_parameters`) that transformers 5 writes. Field names mirror the files.

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Full-attention vision tower with LayerNorm and quick-GELU.
    Qwen2Vl,
    /// Window attention with full-attention blocks, RMSNorm and gated SiLU.
    #[serde(rename = "qwen2_5_vl")]
    Qwen25Vl,
}

impl Family {
    /// The family's name as specs write it (`prompts.location.ground`) and as it serializes.
    pub fn name(self) -> &'static str {
        match self {
            Family::Qwen2Vl => "qwen2_vl",
            Family::Qwen25Vl => "qwen2_5_vl",
        }
    }
    pub fn from_name(name: &str) -> Option<Family> {
        [Family::Qwen2Vl, Family::Qwen25Vl].into_iter().find(|f| f.name() == name)
    }
}

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
}

impl TextConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
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

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { key: key.into(), message: message.into() }
}

/// Looks a key up in the first object that has it.
fn get<'a>(objects: &[&'a Value], key: &str) -> Option<&'a Value> {
    objects.iter().find_map(|o| o.get(key).filter(|v| !v.is_null()))
}

fn usize_at(objects: &[&Value], key: &str) -> Result<usize, ConfigError> {
    let v = get(objects, key).ok_or_else(|| err(key, "missing"))?;
    v.as_u64().map(|n| n as usize).ok_or_else(|| err(key, format!("expected a non-negative integer, got {v}")))
}

fn f64_at(objects: &[&Value], key: &str) -> Result<f64, ConfigError> {
    let v = get(objects, key).ok_or_else(|| err(key, "missing"))?;
    v.as_f64().ok_or_else(|| err(key, format!("expected a number, got {v}")))
}

fn usizes(v: &Value, key: &str) -> Result<Vec<usize>, ConfigError> {
    v.as_array()
        .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect::<Option<Vec<_>>>())
        .ok_or_else(|| err(key, format!("expected a list of integers, got {v}")))
}

impl ModelConfig {
    pub fn from_json(root: &Value) -> Result<ModelConfig, ConfigError> {
        let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or_default();
        let architectures: Vec<&str> =
            root.get("architectures").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let family = match model_type {
            "qwen2_vl" => Family::Qwen2Vl,
            "qwen2_5_vl" => Family::Qwen25Vl,
            _ if architectures.contains(&"Qwen2VLForConditionalGeneration") => Family::Qwen2Vl,
            _ if architectures.contains(&"Qwen2_5_VLForConditionalGeneration") => Family::Qwen25Vl,
            other => {
                return Err(err(
                    "model_type",
                    format!("{other:?} (architectures {architectures:?}) is not a supported architecture: expected qwen2_vl or qwen2_5_vl"),
                ))
            }
        };
        // The nested layout keeps the text keys in text_config; the flat one at the top.
        let text_obj = root.get("text_config").filter(|v| v.is_object());
        let text_scope: Vec<&Value> = text_obj.into_iter().chain(std::iter::once(root)).collect();
        let (rope_theta, mrope_section) = rope(&text_scope)?;
        let text = TextConfig {
            vocab_size: usize_at(&text_scope, "vocab_size")?,
            hidden_size: usize_at(&text_scope, "hidden_size")?,
            intermediate_size: usize_at(&text_scope, "intermediate_size")?,
            num_hidden_layers: usize_at(&text_scope, "num_hidden_layers")?,
            num_attention_heads: usize_at(&text_scope, "num_attention_heads")?,
            num_key_value_heads: usize_at(&text_scope, "num_key_value_heads")?,
            rms_norm_eps: f64_at(&text_scope, "rms_norm_eps")?,
            rope_theta,
            mrope_section,
            tie_word_embeddings: get(&[root], "tie_word_embeddings")
                .or_else(|| get(&text_scope, "tie_word_embeddings"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        let vision_obj = root.get("vision_config").ok_or_else(|| err("vision_config", "missing"))?;
        let v = [vision_obj];
        let vision = match family {
            Family::Qwen2Vl => {
                let width = usize_at(&v, "embed_dim")?;
                VisionConfig {
                    depth: usize_at(&v, "depth")?,
                    hidden_size: width,
                    intermediate_size: width * usize_at(&v, "mlp_ratio").unwrap_or(4),
                    out_hidden_size: usize_at(&v, "hidden_size")?,
                    num_heads: usize_at(&v, "num_heads")?,
                    patch_size: usize_at(&v, "patch_size")?,
                    spatial_merge_size: usize_at(&v, "spatial_merge_size")?,
                    temporal_patch_size: usize_at(&v, "temporal_patch_size")?,
                    in_channels: usize_at(&v, "in_channels").or_else(|_| usize_at(&v, "in_chans")).unwrap_or(3),
                    window_size: None,
                    fullatt_block_indexes: Vec::new(),
                }
            }
            Family::Qwen25Vl => VisionConfig {
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
                fullatt_block_indexes: match vision_obj.get("fullatt_block_indexes") {
                    Some(x) => usizes(x, "vision_config.fullatt_block_indexes")?,
                    None => return Err(err("vision_config.fullatt_block_indexes", "missing")),
                },
            },
        };
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
        if t.num_attention_heads == 0 || t.hidden_size % t.num_attention_heads != 0 {
            return Err(err("hidden_size", format!("{} is not divisible by num_attention_heads {}", t.hidden_size, t.num_attention_heads)));
        }
        if t.num_key_value_heads == 0 || t.num_attention_heads % t.num_key_value_heads != 0 {
            return Err(err(
                "num_key_value_heads",
                format!("{} does not divide num_attention_heads {}", t.num_key_value_heads, t.num_attention_heads),
            ));
        }
        if t.mrope_section.iter().sum::<usize>() * 2 != t.head_dim() {
            return Err(err(
                "mrope_section",
                format!(
                    "{:?} sums to {}, expected head_dim / 2 = {}",
                    t.mrope_section,
                    t.mrope_section.iter().sum::<usize>(),
                    t.head_dim() / 2
                ),
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
        Ok(())
    }
}

/// rope_theta and mrope_section from `rope_parameters` (nested) or `rope_theta` + `rope_scaling`.
fn rope(scope: &[&Value]) -> Result<(f64, Vec<usize>), ConfigError> {
    if let Some(params) = get(scope, "rope_parameters") {
        let theta = params.get("rope_theta").and_then(Value::as_f64).ok_or_else(|| err("rope_parameters.rope_theta", "missing"))?;
        let section = params.get("mrope_section").ok_or_else(|| err("rope_parameters.mrope_section", "missing"))?;
        return Ok((theta, usizes(section, "rope_parameters.mrope_section")?));
    }
    let theta = f64_at(scope, "rope_theta")?;
    let scaling = get(scope, "rope_scaling")
        .ok_or_else(|| err("rope_scaling", "missing: neither rope_parameters nor rope_scaling names mrope_section"))?;
    let section = scaling.get("mrope_section").ok_or_else(|| err("rope_scaling.mrope_section", "missing"))?;
    Ok((theta, usizes(section, "rope_scaling.mrope_section")?))
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
