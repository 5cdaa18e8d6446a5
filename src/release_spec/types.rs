//! The resolved release spec: complete, validated, with defaults filled in.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::layer::*;
use crate::hashing::{sha256_json, sha256_parts};
use crate::vocab::{LABELS, SUPPORT_DEVICES};

/// A complete, validated release spec: plain data. The files it names (calibration, gold labels,
/// the model) are read by the stage above it, [`crate::inputs`], whose resolved form is what
/// build.lock records and the spec hash covers (absolute paths left out, so it is the same on
/// every machine).
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseSpec {
    #[serde(skip)]
    pub path: PathBuf,
    /// The parsed files of the `extends` chain, child first (the first is `path`), kept so that
    /// later stages can point their errors at the file and line that set a key.
    #[serde(skip)]
    pub layers: Vec<super::LoadedLayer>,
    pub release: ReleaseInfo,
    pub source: SourceSpec,
    pub selection: SelectionSpec,
    pub model: ModelSpec,
    /// A second scorer whose family is not the model's: every row is scored by both, and the
    /// trust classes use both (see [`crate::signal::joint`]). Left out of the spec's hash when
    /// unset, so a one-scorer spec hashes as it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_opinion: Option<ModelSpec>,
    pub prompts: PromptSet,
    pub signal: SignalSpec,
    pub output: OutputSpec,
    pub card: CardSpec,
    pub publish: PublishSpec,
    pub evaluation: Option<EvaluationSpec>,
    pub audit: AuditSpec,
    /// The giving pledge's schedule; commercial specs with the `giving_pledge` addition only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pledge: Option<super::PledgeSpec>,
    /// The publisher's Responsible-AI words for `croissant.json` (left out of the lock when unset).
    #[serde(skip_serializing_if = "super::croissant::CroissantSpec::is_empty")]
    pub croissant: super::croissant::CroissantSpec,
    pub additions: Vec<Addition>,
}

/// How `rebuild --audit` judges a rebuild whose inference was rerun.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AuditSpec {
    pub logit_tolerance: f64,
}

impl ReleaseSpec {
    /// The file (and line) that set `key`, for errors about its value.
    pub fn locate(&self, key: &str) -> super::KeyLocation {
        super::locate(&self.layers, key)
    }
    /// The folder of the file that set `key`: relative paths resolve against it.
    pub fn base_dir(&self, key: &str) -> PathBuf {
        self.locate(key).dir()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ReleaseInfo {
    pub id: String,
    pub name: String,
    pub title: String,
    pub version: String,
    pub date: String,
    pub status: Status,
    pub tier: Tier,
    pub adds: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceSpec {
    /// Absolute root of the NIH files on this machine.
    #[serde(skip)]
    pub root: PathBuf,
    /// The root as the spec wrote it, after `${VAR}` expansion.
    pub root_as_written: String,
    pub data_entry: String,
    pub bbox: Option<String>,
    pub train_val_list: Option<String>,
    pub test_list: Option<String>,
    pub images: String,
    /// Expected sha256 per metadata file name: the spec's `source.sha256`, to which
    /// [`crate::inputs`] adds the embedded sample's own pins.
    pub expected_sha256: BTreeMap<String, String>,
    /// True when the root is the embedded synthetic sample (it carries a `sample.json` marker).
    /// False as the spec is read; set by [`crate::inputs`], which looks at the root.
    pub embedded_sample: bool,
}

impl SourceSpec {
    pub fn data_entry_path(&self) -> PathBuf {
        self.root.join(&self.data_entry)
    }
    pub fn images_dir(&self) -> PathBuf {
        self.root.join(&self.images)
    }
    /// Every metadata file the spec names, as (name relative to root, absolute path).
    pub fn metadata_files(&self) -> Vec<(String, PathBuf)> {
        [Some(&self.data_entry), self.bbox.as_ref(), self.train_val_list.as_ref(), self.test_list.as_ref()]
            .into_iter()
            .flatten()
            .map(|name| (name.clone(), self.root.join(name)))
            .collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SelectionSpec {
    /// The committed list of curated images, for a real NIH source; the embedded sample (which
    /// has none of its images) takes the seeded sample instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageListSpec>,
    pub seed: u64,
    pub curated_images: usize,
    pub expected_rows: Option<usize>,
    pub rows: RowPolicy,
    pub views: Vec<String>,
    pub trial: Option<TrialSpec>,
}

/// `selection.images` and its pin: the list, not the rule that wrote it, is what a build reads.
#[derive(Debug, Clone, Serialize)]
pub struct ImageListSpec {
    /// Relative to the spec file that set it.
    pub file: String,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrialSpec {
    pub rows: usize,
    /// Share of the trial rows per trust class, in the order strata are filled.
    pub quotas: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelSpec {
    pub backend: Backend,
    /// `model.path` as written, when the model is a local directory.
    pub path: Option<String>,
    /// The model directory the engine loads: `model.path` resolved against the spec's folder, or
    /// (filled by [`crate::inputs`]) the Hugging Face cache's snapshot of `id`@`revision`. None
    /// when that snapshot is not on this machine yet: the build fetches it
    /// (`infer::locate_model`).
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// The commit of that snapshot (machine state, so not part of the spec's hash).
    #[serde(skip)]
    pub commit: Option<String>,
    pub id: String,
    pub revision: String,
    pub weight_license: String,
    /// Set when the weights are a demo's, not a real model's: the build says so, and publish
    /// refuses it.
    pub demo_weights: Option<DemoWeights>,
    pub dtype: Dtype,
    pub device: DevicePolicy,
    pub max_pixels: Option<u64>,
    pub min_pixels: Option<u64>,
    /// Generation's chat template switch (see [`bpals_vlm::Thinking`]); left out of the spec's
    /// hash when off, so specs written before it hash as they did.
    #[serde(skip_serializing_if = "bpals_vlm::Thinking::is_off")]
    pub thinking: bpals_vlm::Thinking,
    /// Backend `openai` only (None otherwise, and then left out of the spec's hash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served: Option<ServedModel>,
    /// The native engine: images scored in one pass (1 unless set). Out of the spec's hash, like
    /// `served.concurrency`, so `--images-per-pass` can set it; since the pass's shapes shape the
    /// last bits, the scorer's identity (and so build.lock and the cache key) records it.
    #[serde(skip)]
    pub images_per_pass: usize,
}

/// The most images one pass of the native engine may hold (`model.images_per_pass`,
/// `--images-per-pass`, and what `rebuild --audit` reads from a lock). A pass's tensors grow with
/// it: at 1024 x 1024 each image brings about a thousand prefix tokens and 57 questions, and 16 a
/// pass already fill an H200 for an 8B model, so 256 is far beyond what any GPU holds today while
/// it keeps the padding and the shapes' arithmetic small numbers.
pub const MAX_IMAGES_PER_PASS: usize = 256;

/// Why `n` images a pass is refused, or None where it is allowed (1 to [`MAX_IMAGES_PER_PASS`]).
pub fn images_per_pass_problem(n: usize) -> Option<String> {
    match n {
        0 => Some("must be at least 1".into()),
        n if n > MAX_IMAGES_PER_PASS => {
            Some(format!("is {n}; at most {MAX_IMAGES_PER_PASS} images fit a pass (16 already fill an H200 for an 8B model)"))
        }
        _ => None,
    }
}

/// A model behind an OpenAI-compatible API.
#[derive(Debug, Clone, Serialize)]
pub struct ServedModel {
    /// Base URL ending in `/v1`. Where the model runs, not what it is: recorded, but the scorer's
    /// identity (and so the cache key) leaves it out.
    pub endpoint: String,
    pub family: String,
    /// Which server it is: what a request may ask of it differs (see [`ServerKind`]).
    pub server: ServerKind,
    /// The name asked for in requests and required in answers, where the server serves the
    /// model under another name than `id`. Recorded in the lock (left out where not set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_token_ids: Option<[u32; 2]>,
    /// How the requests are sent, not what they return: out of the spec's hash.
    #[serde(skip)]
    pub concurrency: usize,
    #[serde(skip)]
    pub timeout_s: u64,
}

/// The OpenAI-compatible servers the `openai` backend knows. They share the chat-completions
/// request, logprobs and `chat_template_kwargs`; they differ in how the answer can be held to
/// the "Yes" and "No" tokens (`model.answer_token_ids`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerKind {
    /// `allowed_token_ids`, vLLM's own parameter.
    #[default]
    Vllm,
    /// `logit_bias` on both tokens (the OpenAI parameter).
    Sglang,
    /// `logit_bias` on both tokens.
    LlamaCpp,
}

impl ServerKind {
    /// The request parameter that keeps both answer tokens among the listed logprobs.
    pub fn restriction(self) -> &'static str {
        match self {
            ServerKind::Vllm => "allowed_token_ids",
            ServerKind::Sglang | ServerKind::LlamaCpp => "logit_bias",
        }
    }
}

/// One yes/no question of the prompt set, with a stable id used in the cache and the shards.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Question {
    pub id: String,
    /// A label of the vocabulary or a support device name.
    pub target: String,
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptSet {
    pub version: String,
    pub labels: BTreeMap<String, Vec<String>>,
    pub support_devices: BTreeMap<String, Vec<String>>,
    /// S2: left out of the hash of a prompt set without it, so S1 hashes stay as they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<super::diagnose::LocationPrompts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signs: Option<super::diagnose::SignPrompts>,
    /// S3 and S4: generated text. Left out of the hash when absent, like S2's sections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<super::narrative::ReasoningPrompts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<super::narrative::ReportPrompts>,
}

impl PromptSet {
    /// All yes/no questions in a fixed order: labels in vocabulary order, then devices, then
    /// (S2) the side and zone questions, then the signs.
    pub fn questions(&self) -> Vec<Question> {
        let mut out = Vec::new();
        for label in LABELS {
            for (i, text) in self.labels.get(label).into_iter().flatten().enumerate() {
                out.push(Question { id: format!("{label}#{i}"), target: label.to_string(), text: text.clone() });
            }
        }
        for device in SUPPORT_DEVICES {
            for (i, text) in self.support_devices.get(device).into_iter().flatten().enumerate() {
                out.push(Question { id: format!("{device}#{i}"), target: device.to_string(), text: text.clone() });
            }
        }
        out.extend(self.location.iter().flat_map(|l| l.questions()));
        out.extend(self.signs.iter().flat_map(|s| s.questions()));
        out
    }
    pub fn hash(&self) -> String {
        sha256_json(self)
    }
    /// The hash of what the yes/no scores depend on: the questions (id, target, text) in order.
    /// The score cache keys by it rather than by [`Self::hash`], so a spec that adds S3's
    /// reasoning or S4's report prompts reuses S1 and S2's scores instead of scoring again.
    pub fn questions_hash(&self) -> String {
        sha256_parts(&["bpals-questions/1", &sha256_json(&self.questions())])
    }
    /// Whether the release carries S2's location or signs columns.
    pub fn diagnoses(&self) -> bool {
        self.location.is_some() || self.signs.is_some()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SignalSpec {
    pub trusted_min_agreement: f64,
    pub review_min_agreement: f64,
    pub suspect_min_agreement: f64,
    pub hard_case_margin: f64,
    pub low_consistency_below: f64,
    pub device_present_min: f64,
    /// Confidence at which the model is taken to see a finding (the error trace's candidate list).
    pub finding_present_min: f64,
    pub device_confounded_labels: Vec<String>,
    pub tau: f64,
    /// A calibration file of `confidence` (written by `bpals-release calibrate`), as the spec
    /// wrote it, relative to the spec that names it. [`crate::inputs`] reads it.
    pub calibration: Option<String>,
    /// A joint rule of a two-family release (written by `bpals-release calibrate --joint`), as the
    /// spec wrote it. Left out of the spec's JSON when not named, so releases without one keep
    /// their bytes. [`crate::inputs`] reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joint_rule: Option<String>,
    /// Confident learning's probes, when the spec asks for them: a second view of every row.
    /// Left out of the spec's JSON when not asked for, so other releases keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confident_learning: Option<ConfidentLearningSpec>,
}

/// `signal.confident_learning`: how the probes are fitted (what build.lock records with the
/// spec and a rebuild repeats).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfidentLearningSpec {
    /// Which vector of each image the probes read. Written only where it is not the default,
    /// so the files of releases made before it was a choice keep their bytes.
    #[serde(skip_serializing_if = "FeatureDefinition::is_default")]
    pub features: FeatureDefinition,
    /// Folds split by patient.
    pub folds: usize,
    /// Seeds the patients' order before they are dealt into folds.
    pub fold_seed: u64,
    /// The inverse regularisation strengths tried, ascending.
    pub grid: Vec<f64>,
}

impl Default for ConfidentLearningSpec {
    fn default() -> Self {
        ConfidentLearningSpec { features: FeatureDefinition::default(), folds: 5, fold_seed: 0, grid: vec![0.001, 0.01, 0.1, 1.0, 10.0] }
    }
}

impl ConfidentLearningSpec {
    /// What is wrong with these settings, if anything.
    pub fn problem(&self) -> Option<String> {
        if !(3..=20).contains(&self.folds) {
            return Some(format!("folds is {}: expected 3 to 20 (two are held out when the regularisation is chosen)", self.folds));
        }
        if self.grid.is_empty() || self.grid.iter().any(|c| !c.is_finite() || *c <= 0.0) {
            return Some("the regularisation grid needs at least one positive, finite strength".into());
        }
        if self.grid.windows(2).any(|w| w[0] >= w[1]) {
            return Some("the regularisation grid must be ascending, without repeats".into());
        }
        None
    }
}

/// What a gold file is unless the spec says otherwise (`evaluation.against`).
pub const EXPERT_LABELS: &str = "expert labels";

/// A gold file the build evaluates against, as the spec names it. [`crate::inputs`] reads it.
#[derive(Debug, Clone, Serialize)]
pub struct EvaluationSpec {
    /// The path as the spec wrote it, relative to the spec that names it.
    pub gold_file: String,
    pub format: GoldFormat,
    /// What the gold is, for the card's heading ("expert labels").
    pub against: String,
    /// The review plan whose answers the gold holds, as the spec wrote its path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_plan: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutputSpec {
    pub splits: Vec<Split>,
    pub rows_per_shard: usize,
    pub row_group_rows: usize,
    pub compression: Compression,
    pub compression_level: Option<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CardSpec {
    #[serde(skip)]
    pub templates_dir: PathBuf,
    pub template: String,
    pub extra_sections: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PublishSpec {
    pub repo: String,
    pub visibility: Visibility,
    pub tag: String,
    /// `publish.public_key` as written (relative to the spec that set it); read by `inputs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

impl PublishSpec {
    pub fn tag_for(&self, release: &ReleaseInfo) -> String {
        self.tag.replace("{id}", &release.id).replace("{version}", &release.version)
    }
}
