//! What `bench scoring` reports: the rate, the FLOPs and MFU, stage by stage and part by part,
//! and whether a pass's scores were the same bits as each image's alone.

use serde::Serialize;

use crate::families::Family;
use crate::stage_clock::Stage;

#[derive(Debug, Serialize)]
pub struct ScoringBenchReport {
    pub family: Family,
    /// `copied`, `shared` or `fused`.
    pub prefix_attention: &'static str,
    /// `padded`, `packed` or `deduplicated` (the copied path: always padded).
    pub suffix_rows: &'static str,
    pub images_per_pass: usize,
    pub text_layers: usize,
    pub vision_blocks: usize,
    pub device: String,
    pub dtype: String,
    /// The engine's arithmetic revision on this device (`vlm::arithmetic`): which engine the
    /// numbers measure.
    pub arithmetic: String,
    pub parameters: i64,
    /// The parameters one token goes through (all but the unchosen experts of a sparse model):
    /// what the FLOPs are counted from.
    pub active_parameters: i64,
    pub image_size: u32,
    pub grid_thw: (usize, usize, usize),
    pub vision_patches: usize,
    pub image_tokens: usize,
    pub questions: usize,
    /// The shortest and the longest question, in tokens after the shared prefix.
    pub question_tokens: (usize, usize),
    /// The questions' real tokens: each image's prefill counts these, not their padding.
    pub prefill_tokens_per_image: usize,
    /// Of the questions' tokens, those the stream held once for several questions that begin
    /// alike (`deduplicated`), which the FLOPs count once.
    pub question_tokens_shared: usize,
    pub tflop_per_image: f64,
    pub images_timed: usize,
    /// Resizing and normalising one image on one CPU thread (the runner spreads it over --jobs
    /// threads, outside the engine lock, so it overlaps the device's work).
    pub preprocess_ms_per_image: f64,
    /// Vision tower and scoring of every question, per image, on the device.
    pub device_ms_per_image: f64,
    pub images_per_second: f64,
    pub prefill_tokens_per_second: f64,
    pub achieved_tflops: f64,
    pub peak_tflops: Option<f64>,
    pub mfu: Option<f64>,
    pub project_images: usize,
    /// At the measured rate.
    pub projected_seconds: f64,
    /// At the peak (the roofline of compute), when a peak was given.
    pub roofline_seconds: Option<f64>,
    /// Whether every score of the first pass's images was the same bits alone as in the pass.
    pub invariance: Option<Invariance>,
    /// Where an image's device time goes, stage by stage (the device waited for at each stage's
    /// end), with each stage's share of the FLOPs and its MFU where a peak was given.
    pub stages: Vec<StageTime>,
    /// With `fused`: the largest difference of the first pass's logits from the same pass
    /// scored by `shared` (the products).
    pub max_abs_logit_diff_to_shared: Option<f32>,
    /// With `parts`: the first pass scored again, each part of the model waited for.
    pub parts: Option<Parts>,
}

/// One pass scored with the part clock on. Every part waits for the device at its start and end,
/// so the pass takes longer than unclocked (`clocked_ms_per_image` against `device_ms_per_image`);
/// the parts' shares are what it tells.
#[derive(Debug, Serialize)]
pub struct Parts {
    pub clocked_ms_per_image: f64,
    /// A part inside another (`experts: products` inside `experts`) counts in both.
    pub parts: Vec<PartShare>,
}

#[derive(Debug, Serialize)]
pub struct PartShare {
    pub part: &'static str,
    pub ms_per_image: f64,
    /// Times the part ran in the pass (once per layer of its kind, per stage).
    pub calls: usize,
}

/// One stage of scoring an image: its time, FLOPs and MFU.
#[derive(Debug, Serialize)]
pub struct StageTime {
    pub stage: Stage,
    pub ms_per_image: f64,
    pub tflop_per_image: f64,
    pub mfu: Option<f64>,
}

/// Images of the first pass (its first, middle and last) scored in the pass and each alone,
/// compared bit for bit.
#[derive(Debug, Serialize)]
pub struct Invariance {
    pub images: usize,
    pub scores: usize,
    /// Alone in a pass padded to the pass's size (the build's way): same bits as in the pass.
    pub identical_padded: bool,
    pub max_abs_logit_diff_padded: f32,
    /// Alone in a pass of one (other shapes): same bits as in the pass.
    pub identical_unpadded: bool,
    pub max_abs_logit_diff_unpadded: f32,
}
