//! A vision-language model engine on libtorch that answers yes/no questions about an image
//! with the bits transformers computes, and says where a finding is.
//!
//! It reads a Hugging Face model directory as published (`config.json` in either layout, the
//! preprocessor config, `tokenizer.json`, the chat template, safetensors shards) and runs seven
//! families, one folder each under `families/`: Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5, the
//! mixtures of experts Qwen3-VL-MoE and Qwen3.5-MoE, and Google's Gemma 4 (dense, per-layer
//! embeddings and mixture of experts). For each image it runs the vision tower and the image's
//! prefix once, then every question over that prefix; it reads the answer's `yes`/`no` logits
//! ([`YesNo`]), the image's features (`ImageFeatures`), greedy generations and grounding
//! boxes ([`grounding`]).
//!
//! **Parity.** Against transformers in f32 on the CPU, on tiny random and trained checkpoints of
//! every family made by the repository's `fixtures/vlm/` scripts: pixel values within 1e-5,
//! last-position logits within 1e-4 (most within 1e-5), greedy tokens identical, and the
//! questions scored over a shared prefix equal to separate runs. The CPU's kernels are pinned
//! ([`cpu_kernels`]), so every x86-64 machine with AVX2, Intel or AMD, gives the same bits.
//!
//! **Without libtorch** (the default) the crate reads model directories ([`ModelDir`]), renders
//! chat templates ([`chat_template::ChatTemplate`], under a step limit and a heap budget: a template is a
//! program from whoever published the checkpoint), sizes images ([`preprocess`]), computes M-RoPE
//! positions ([`rope`]) and parses grounding. **With the `libtorch` feature** it adds the model:
//! `engine::Engine` for one image at a time, `model::VlModel` for passes of many images,
//! `generate` for batched greedy decoding, and its own CUDA kernels (`cuda_kernels`).
//!
//! The crate installs the process's global allocator: the system's, with a per-thread budget
//! that a chat template's render runs under. A binary that links the engine keeps it.
//!
//! # Scoring an image
//!
//! ```
//! # #[cfg(feature = "libtorch")] {
//! use bpals_vlm::engine::{Engine, EngineOptions};
//!
//! // The repository's tiny Qwen2-VL, trained on synthetic radiographs, and one of them.
//! let repository = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
//! let engine = Engine::open(&repository.join("fixtures/vlm/trained/qwen2_vl"), &EngineOptions::default())?;
//! let image = repository.join("fixtures/sample/images/00000001_000.png");
//! let report = engine.probe(&image, &["Is there a pleural effusion?".to_string()])?;
//! let answer = &report.questions[0];
//! assert!(answer.p_yes > 0.0 && answer.p_yes < 1.0);
//! println!("p(yes) = {:.3} from logits {} / {}", answer.p_yes, answer.answer.logit_yes, answer.answer.logit_no);
//! # }
//! # Ok::<(), bpals_vlm::VlmError>(())
//! ```

// On a tch Tensor `a *= b` is an in-place product: it keeps `a`'s dtype where `a * b` promotes,
// and writes through any view of `a`. The engine spells its arithmetic out of place.
#![allow(clippy::assign_op_pattern)]

pub mod arithmetic;
pub mod chat_template;
mod checkpoint;
pub mod config;
pub mod cpu_kernels;
mod error;
mod families;
// Counts what the model's runs do: without libtorch only its tests use it.
#[cfg_attr(not(feature = "libtorch"), allow(dead_code))]
mod flops;
pub mod grounding;
mod heap_budget;
mod model_dir;
pub mod preprocess;
mod prompt;
pub mod rope;
mod yes_no;

#[cfg(feature = "libtorch")]
mod cache;
#[cfg(feature = "libtorch")]
pub mod cuda_kernels;
#[cfg(feature = "libtorch")]
mod decoder_input;
#[cfg(feature = "libtorch")]
pub mod engine;
#[cfg(feature = "libtorch")]
pub mod generate;
#[cfg(feature = "libtorch")]
mod layers;
#[cfg(feature = "libtorch")]
pub mod model;
#[cfg(feature = "libtorch")]
mod moe;
#[cfg(feature = "libtorch")]
mod part_clock;
#[cfg(feature = "libtorch")]
pub mod pixels;
#[cfg(feature = "libtorch")]
mod prefix_queries;
#[cfg(feature = "libtorch")]
pub mod real_tokens;
#[cfg(feature = "libtorch")]
mod safetensors_file;
#[cfg(feature = "libtorch")]
mod self_attention;
#[cfg(feature = "libtorch")]
pub mod shared_prefix;
#[cfg(feature = "libtorch")]
pub mod stage_clock;
#[cfg(feature = "libtorch")]
mod text;
#[cfg(feature = "libtorch")]
pub mod throughput;
#[cfg(feature = "libtorch")]
mod weights;

pub use chat_template::Thinking;
pub use checkpoint::ModelConfig;
pub use config::{MoeConfig, PreprocessorConfig};
pub use error::VlmError;
pub use families::Family;
#[cfg(feature = "libtorch")]
pub use families::ImageFeatures;
pub use model_dir::{ChatTemplateSource, ModelDir, GENERATION_CONFIG};
pub use yes_no::YesNo;

/// The repository this crate sits in: its tests read the tiny fixture checkpoints
/// (`fixtures/vlm/`) and the published configs (`benches/configs/`) from there.
#[cfg(test)]
fn repository() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
