//! One spec file as written: every key optional, unknown keys rejected by serde.
//!
//! A release spec is a chain of these layers (`extends:`), merged child-over-parent (the rules are
//! in `merge.rs`) and then resolved into a [`super::ReleaseSpec`], where missing keys become
//! errors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::merge::{explicit, merge_options, merge_section, Merge, Nulls};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecLayer {
    pub extends: Option<String>,
    pub release: Option<ReleaseLayer>,
    pub source: Option<SourceLayer>,
    pub selection: Option<SelectionLayer>,
    pub model: Option<ModelLayer>,
    /// A second scorer, from another family: the same keys as `model`.
    pub second_opinion: Option<ModelLayer>,
    pub prompts: Option<PromptsLayer>,
    pub signal: Option<SignalLayer>,
    pub output: Option<OutputLayer>,
    pub card: Option<CardLayer>,
    pub publish: Option<PublishLayer>,
    pub evaluation: Option<EvaluationLayer>,
    pub audit: Option<AuditLayer>,
    pub pledge: Option<super::pledge::PledgeLayer>,
    pub croissant: Option<super::croissant::CroissantSpec>,
    pub additions: Option<Vec<Addition>>,
}

impl Merge for SpecLayer {
    fn merge(&mut self, child: Self, nulls: &Nulls) {
        self.extends = child.extends;
        merge_section(&mut self.release, child.release, nulls, "release");
        merge_section(&mut self.source, child.source, nulls, "source");
        merge_section(&mut self.selection, child.selection, nulls, "selection");
        merge_section(&mut self.model, child.model, nulls, "model");
        merge_section(&mut self.second_opinion, child.second_opinion, nulls, "second_opinion");
        merge_section(&mut self.prompts, child.prompts, nulls, "prompts");
        merge_section(&mut self.signal, child.signal, nulls, "signal");
        merge_section(&mut self.output, child.output, nulls, "output");
        merge_section(&mut self.card, child.card, nulls, "card");
        merge_section(&mut self.publish, child.publish, nulls, "publish");
        merge_section(&mut self.evaluation, child.evaluation, nulls, "evaluation");
        merge_section(&mut self.audit, child.audit, nulls, "audit");
        merge_section(&mut self.pledge, child.pledge, nulls, "pledge");
        merge_section(&mut self.croissant, child.croissant, nulls, "croissant");
        merge_options!(self, child, nulls; additions);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Confirmed,
    Tentative,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Trial,
    Standard,
    Enterprise,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Trial => "trial",
            Tier::Standard => "standard",
            Tier::Enterprise => "enterprise",
        }
    }
    pub fn is_commercial(self) -> bool {
        !matches!(self, Tier::Trial)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseLayer {
    pub id: Option<String>,
    pub name: Option<String>,
    pub title: Option<String>,
    pub version: Option<String>,
    pub date: Option<String>,
    pub status: Option<Status>,
    pub tier: Option<Tier>,
    pub adds: Option<String>,
}

impl Merge for ReleaseLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; id, name, title, version, date, status, tier, adds);
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceLayer {
    pub root: Option<String>,
    pub data_entry: Option<String>,
    /// `Some(None)`: the layer set the key to null, dropping its parent's file.
    #[serde(default, deserialize_with = "explicit")]
    pub bbox: Option<Option<String>>,
    #[serde(default, deserialize_with = "explicit")]
    pub train_val_list: Option<Option<String>>,
    #[serde(default, deserialize_with = "explicit")]
    pub test_list: Option<Option<String>>,
    pub images: Option<String>,
    pub sha256: Option<BTreeMap<String, String>>,
}

impl Merge for SourceLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; root, data_entry, bbox, train_val_list, test_list, images, sha256);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowPolicy {
    /// One row per label NIH asserts for the image, "No Finding" included.
    NihAsserted,
    /// One row per label of the 15-label vocabulary, whether NIH asserts it or not.
    AllLabels,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectionLayer {
    pub seed: Option<u64>,
    pub curated_images: Option<usize>,
    /// `Some(None)`: set to null, no row count is expected.
    #[serde(default, deserialize_with = "explicit")]
    pub expected_rows: Option<Option<usize>>,
    pub rows: Option<RowPolicy>,
    pub views: Option<Vec<String>>,
    pub images: Option<String>,
    pub images_sha256: Option<String>,
    pub trial: Option<TrialLayer>,
}

impl Merge for SelectionLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        // A pin falls with the list it pins: `images: null` alone drops both.
        if nulls.has("images") && c.images_sha256.is_none() {
            self.images_sha256 = None;
        }
        merge_options!(self, c, nulls; seed, curated_images, expected_rows, rows, views, images, images_sha256);
        merge_section(&mut self.trial, c.trial, nulls, "trial");
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialLayer {
    pub rows: Option<usize>,
    pub quotas: Option<BTreeMap<String, f64>>,
}

impl Merge for TrialLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; rows, quotas);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Deterministic stand-in scorer: no model, no medical information. Never publishable.
    Fixture,
    /// The native engine on libtorch: any family it runs (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), read
    /// from the checkpoint's config.json.
    Native,
    /// The native engine's first name, from when it ran the Qwen2 families only. Kept so that
    /// specs and locks written with it rebuild to the same bytes (the card names the backend as
    /// the spec spells it).
    Qwen2vl,
    /// Any OpenAI-compatible server (vLLM, SGLang) serving the model: `model.endpoint`.
    Openai,
}

impl Backend {
    /// Whether the native engine scores (under either name).
    pub fn is_native(self) -> bool {
        matches!(self, Backend::Native | Backend::Qwen2vl)
    }

    /// The name as specs write it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Fixture => "fixture",
            Backend::Native => "native",
            Backend::Qwen2vl => "qwen2vl",
            Backend::Openai => "openai",
        }
    }
}

impl std::fmt::Display for Backend {
    /// How the CLI names the scorer in its messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Fixture => "the fixture scorer",
            Backend::Native => "the native engine",
            Backend::Qwen2vl => "the qwen2vl engine",
            Backend::Openai => "the OpenAI-compatible server",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    Auto,
    F32,
    Bf16,
    F16,
}

/// Why a model's weights carry no medical information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DemoWeights {
    /// Random initialisation: exercises the engine, answers nothing.
    Random,
    /// A tiny model trained on the synthetic sample's generator (fixtures/vlm/train_tiny.py):
    /// its answers depend on the image, but only on synthetic drawings.
    Synthetic,
}

impl DemoWeights {
    /// What the weights are, as the card's model line says it.
    pub fn describe(self) -> &'static str {
        match self {
            DemoWeights::Random => "random weights",
            DemoWeights::Synthetic => "a tiny model trained on synthetic images",
        }
    }

    /// The demo reason: "model X {this}".
    pub fn demo_reason(self) -> &'static str {
        match self {
            DemoWeights::Random => "has random weights",
            DemoWeights::Synthetic => "is a tiny model trained on synthetic images, not a real model",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DevicePolicy {
    Auto,
    Cpu,
    Cuda,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLayer {
    pub backend: Option<Backend>,
    /// A local Hugging Face model directory (relative to the spec), instead of `id`@`revision`
    /// from the Hugging Face cache.
    pub path: Option<String>,
    pub id: Option<String>,
    pub revision: Option<String>,
    pub weight_license: Option<String>,
    /// `random` or `synthetic` for demo weights (see [`super::DemoWeights`]).
    pub demo_weights: Option<DemoWeights>,
    pub dtype: Option<Dtype>,
    pub device: Option<DevicePolicy>,
    pub max_pixels: Option<u64>,
    pub min_pixels: Option<u64>,
    /// `off` or `on`: whether generation (S3's reasoning, S4's reports) lets the model reason in
    /// its chat template's `<think>` block first. Scores and grounding always render it off.
    pub thinking: Option<bpals_vlm::Thinking>,
    /// Backend `openai`: the server's base URL, ending in `/v1`.
    pub endpoint: Option<String>,
    /// Backend `openai`: the served model's family (`qwen2_vl`, `qwen2_5_vl`, `qwen3_vl`, `qwen3_5`), for its box format.
    pub family: Option<String>,
    /// Backend `openai`: which server (`vllm`, the default, `sglang` or `llama-cpp`).
    pub server: Option<super::ServerKind>,
    /// Backend `openai`: the name the server serves the model under, where it is not `id`
    /// (vLLM's `--served-model-name`, llama-server's `--alias`).
    pub served_name: Option<String>,
    /// Backend `openai`: the token ids of "Yes" and "No", sent as `allowed_token_ids` so the
    /// server's first-token logprobs always list both.
    pub answer_token_ids: Option<[u32; 2]>,
    /// Backend `openai`: requests in flight at once (`--concurrency` overrides it).
    pub concurrency: Option<usize>,
    /// Backend `openai`: seconds a request may take before it fails (and is retried).
    pub timeout_s: Option<u64>,
    /// The native engine: images scored in one pass (`--images-per-pass` overrides it).
    pub images_per_pass: Option<usize>,
}

impl Merge for ModelLayer {
    /// A layer that sets `id` or `path` names a different model: its identity (path, id,
    /// revision, weight license, demo weights) starts afresh instead of inheriting, so a
    /// spec that swaps in a hub model never keeps the parent's local `path` by accident.
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        if c.id.is_some() || c.path.is_some() {
            self.path = None;
            self.id = None;
            self.revision = None;
            self.weight_license = None;
            self.demo_weights = None;
        }
        if c.id.is_some() || c.path.is_some() {
            self.endpoint = None;
            self.family = None;
            self.answer_token_ids = None;
            self.server = None;
            self.served_name = None;
        }
        merge_options!(self, c, nulls; backend, path, id, revision, weight_license, demo_weights, dtype, device,
            max_pixels, min_pixels, thinking, endpoint, family, server, served_name, answer_token_ids, concurrency, timeout_s,
            images_per_pass);
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptsLayer {
    pub version: Option<String>,
    pub labels: Option<BTreeMap<String, Vec<String>>>,
    pub support_devices: Option<BTreeMap<String, Vec<String>>>,
    /// S2: side, zone and grounding prompts (a child replaces the whole section).
    pub location: Option<super::diagnose::LocationLayer>,
    /// S2: the radiographic signs of each finding (a child replaces the whole section).
    pub signs: Option<super::diagnose::SignsLayer>,
    /// S3: the prompt of each row's reasoning (a child replaces the whole section).
    pub reasoning: Option<super::narrative::ReasoningLayer>,
    /// S4: the prompt of each image's report-style paragraph (a child replaces the whole section).
    pub report: Option<super::narrative::ReportLayer>,
}

impl Merge for PromptsLayer {
    /// Question lists merge per label: a child may reword one label and keep the rest.
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; version, location, signs, reasoning, report);
        for (mine, theirs) in [(&mut self.labels, c.labels), (&mut self.support_devices, c.support_devices)] {
            match (mine.as_mut(), theirs) {
                (Some(m), Some(t)) => m.extend(t),
                (None, Some(t)) => *mine = Some(t),
                (_, None) => {}
            }
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalLayer {
    pub trusted_min_agreement: Option<f64>,
    pub review_min_agreement: Option<f64>,
    pub suspect_min_agreement: Option<f64>,
    pub hard_case_margin: Option<f64>,
    pub low_consistency_below: Option<f64>,
    pub device_present_min: Option<f64>,
    pub finding_present_min: Option<f64>,
    pub device_confounded_labels: Option<Vec<String>>,
    pub tau: Option<f64>,
    pub calibration: Option<String>,
    pub joint_rule: Option<String>,
    pub confident_learning: Option<ConfidentLearningLayer>,
}

impl Merge for SignalLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; trusted_min_agreement, review_min_agreement, suspect_min_agreement,
            hard_case_margin, low_consistency_below, device_present_min, finding_present_min, device_confounded_labels, tau,
            calibration, joint_rule, confident_learning);
    }
}

/// `signal.confident_learning`: probes on the model's image features, out of fold. A layer that
/// names it replaces the whole block; `null` turns it off.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfidentLearningLayer {
    pub features: Option<FeatureDefinition>,
    pub folds: Option<usize>,
    pub fold_seed: Option<u64>,
    pub grid: Option<Vec<f64>>,
}

/// What an image's feature vector is, for confident learning's probes. Both come from the pass
/// that scores the image: the vision tower runs once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum FeatureDefinition {
    /// The mean over the image's merged tokens of the vision tower's output (the embeddings that
    /// replace the image's placeholder tokens), one value per dimension of the decoder's hidden
    /// state.
    #[default]
    VisionTowerMean,
    /// The decoder's final hidden state (after its last norm) at the token that closes the
    /// image, the prompt run up to that token: what the language model has made of the image
    /// before any question. Costs one more decoder pass over the image's prefix.
    DecoderPrefixEnd,
}

impl FeatureDefinition {
    pub fn is_default(&self) -> bool {
        *self == FeatureDefinition::default()
    }

    /// The name in specs, build.lock, the card and the cache.
    pub fn name(self) -> &'static str {
        match self {
            FeatureDefinition::VisionTowerMean => "vision_tower_mean",
            FeatureDefinition::DecoderPrefixEnd => "decoder_prefix_end",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Every curated row (the commercial tiers).
    Full,
    /// The stratified trial sample.
    Trial,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Full => "full",
            Split::Trial => "trial",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    Zstd,
    Snappy,
    None,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputLayer {
    pub splits: Option<Vec<Split>>,
    pub rows_per_shard: Option<usize>,
    pub row_group_rows: Option<usize>,
    pub compression: Option<Compression>,
    pub compression_level: Option<i32>,
}

impl Merge for OutputLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; splits, rows_per_shard, row_group_rows, compression, compression_level);
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardLayer {
    pub templates: Option<String>,
    pub template: Option<String>,
    pub extra_sections: Option<Vec<String>>,
}

impl Merge for CardLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; templates, template, extra_sections);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    Public,
    Gated,
    Private,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishLayer {
    pub repo: Option<String>,
    pub visibility: Option<Visibility>,
    pub tag: Option<String>,
    /// The publisher's public key (PEM), relative to the spec: the release carries a copy and
    /// its card the fingerprint, and publish requires a signature by it.
    pub public_key: Option<String>,
}

impl Merge for PublishLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; repo, visibility, tag, public_key);
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationLayer {
    /// Expert labels to evaluate the build against, for the card.
    pub gold: Option<String>,
    /// `generic` (CSV image_index,label,value; the default) or `google-nih`.
    pub format: Option<GoldFormat>,
    /// What the gold file is, as the card's evaluation heading names it ("expert labels" by
    /// default; the sample's spec says "the synthetic sample's planted truth").
    pub against: Option<String>,
    /// The review plan (`review plan`) whose answers the gold holds: the card then reports the
    /// errors found per 100 reviews in the rows the signal chose against the random control.
    pub review_plan: Option<String>,
}

impl Merge for EvaluationLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; gold, format, against, review_plan);
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditLayer {
    /// Largest absolute difference of a raw logit that `rebuild --audit` accepts when inference
    /// is rerun (GPU kernels are not bit-exact across machines).
    pub logit_tolerance: Option<f64>,
}

impl Merge for AuditLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; logit_tolerance);
    }
}

/// Capabilities a later release series adds on top of S1. Each is refused at resolve time until
/// this tool implements it, so an S2 spec can never silently produce an S1 build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Addition {
    PaymentActivation,
    GivingPledge,
    LesionLocation,
    ObservableSigns,
    Reasoning,
    ReportText,
}

impl Addition {
    /// Whether this tool can build the addition. S1b's are terms and card content only; S2's
    /// are built from `prompts.location` and `prompts.signs`, S3's from `prompts.reasoning` and
    /// S4's from `prompts.report`. Every addition is built now.
    pub fn implemented(self) -> bool {
        true
    }
    pub fn describe(self) -> &'static str {
        match self {
            Addition::PaymentActivation => "payment infrastructure and full license terms",
            Addition::GivingPledge => "the 1% giving pledge",
            Addition::LesionLocation => "lesion location (S2)",
            Addition::ObservableSigns => "observable signs (S2)",
            Addition::Reasoning => "the reasoning behind each judgment (S3)",
            Addition::ReportText => "paraphrased report-style text per image (S4)",
        }
    }
}

/// The layout of a gold-label file (`evaluation.format`, `eval --format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GoldFormat {
    #[default]
    Generic,
    GoogleNih,
}

impl GoldFormat {
    pub fn name(self) -> &'static str {
        match self {
            GoldFormat::Generic => "generic",
            GoldFormat::GoogleNih => "google-nih",
        }
    }
}

impl Merge for super::pledge::PledgeLayer {
    fn merge(&mut self, c: Self, nulls: &Nulls) {
        merge_options!(self, c, nulls; schedule, goal_percent);
    }
}
