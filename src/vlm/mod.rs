//! The vision-language model engine: Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5, the
//! mixture-of-experts Qwen3-VL-MoE and Qwen3.5-MoE, and Google's Gemma 4 (dense, per-layer
//! embeddings and mixture of experts), one folder per family under [`families`].
//!
//! This part needs no libtorch: reading a Hugging Face model directory (config in both layouts,
//! preprocessor config, tokenizer, chat template, weight files), the image sizing rule, the
//! prompt and its token ids, the multimodal rotary position ids, and the FLOPs of scoring an
//! image. The tensor code (vision tower, decoder, its cache) builds on it behind the `vlm`
//! feature.

// On a tch Tensor `a *= b` is an in-place product: it keeps `a`'s dtype where `a * b` promotes,
// and writes through any view of `a`. The engine spells its arithmetic out of place.
#![allow(clippy::assign_op_pattern)]

pub mod arithmetic;
pub mod chat_template;
pub mod checkpoint;
pub mod config;
pub mod cpu_kernels;
pub mod error;
pub mod families;
pub mod flops;
pub mod grounding;
pub mod model_dir;
pub mod preprocess;
pub mod prompt;
pub mod rope;
mod yes_no;

#[cfg(feature = "vlm")]
mod cache;
#[cfg(feature = "vlm")]
pub mod cuda_kernels;
#[cfg(feature = "vlm")]
mod decoder_input;
#[cfg(feature = "vlm")]
pub mod engine;
#[cfg(feature = "vlm")]
pub mod generate;
#[cfg(feature = "vlm")]
mod layers;
#[cfg(feature = "vlm")]
pub mod model;
#[cfg(feature = "vlm")]
mod moe;
#[cfg(feature = "vlm")]
pub mod part_clock;
#[cfg(feature = "vlm")]
pub mod pixels;
#[cfg(feature = "vlm")]
mod prefix_queries;
#[cfg(feature = "vlm")]
pub mod preparation;
#[cfg(feature = "vlm")]
pub mod real_tokens;
#[cfg(feature = "vlm")]
mod safetensors_file;
#[cfg(feature = "vlm")]
mod self_attention;
#[cfg(feature = "vlm")]
pub mod shared_prefix;
#[cfg(feature = "vlm")]
pub mod stage_clock;
#[cfg(feature = "vlm")]
mod text;
#[cfg(feature = "vlm")]
pub mod throughput;
#[cfg(feature = "vlm")]
mod weights;

pub use chat_template::{ChatTemplate, Thinking};
pub use checkpoint::ModelConfig;
pub use config::{MoeConfig, PreprocessorConfig, TextConfig, TextVariant, VisionConfig};
pub use error::VlmError;
pub use families::Family;
#[cfg(feature = "vlm")]
pub use families::ImageFeatures;
pub use model_dir::{ChatTemplateSource, ModelDir, GENERATION_CONFIG};
pub use yes_no::YesNo;
