//! `bpals-release build`: runs the stages in order and writes the release directory.
//!
//! ```text
//! spec -> ingest -> select -> infer (cached) -> signal -> trial -> shard -> card -> lock -> manifest
//! ```
//! Each stage takes typed input and returns typed output. This module holds what `build`,
//! `build --dry-run` and `infer` share (preparing the inputs of inference); [`build`] itself, one
//! function per stage, is in `build.rs`.

mod build;
mod confident;
mod diagnosis;
mod narrative;
pub mod output;
mod plan;
pub(crate) mod records;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use build::build;
pub use plan::{plan, Plan, PlanStage};
pub use report::{demo_banner, BuildReport, InferShardReport};

use crate::card::{self, CardError};
use crate::diagnose::{self, DiagnoseError};
use crate::hashing::{sha256_json, sha256_parts};
use crate::infer::{
    self, DecodingSettings, GenerationCache, GenerationReport, ImageJob, InferError, RunOptions, ScoreCache, Scorer, ShardSpec,
};
use crate::inputs::{InputsError, ResolvedSpec};
use crate::manifest::ToolInfo;
use crate::release_spec::{gates, ReleaseSpec, SpecError};
use crate::select::{self, SelectError, Selection};
use crate::shard::ShardError;
use crate::signal::joint_rule::SecondView;
use crate::source::{self, NihTable, SourceError};

/// What stops a build. The spec's errors are boxed: they carry a key's location and a message,
/// and every stage's `Result` would otherwise be their size.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Spec(Box<SpecError>),
    #[error(transparent)]
    Inputs(Box<InputsError>),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Select(#[from] SelectError),
    #[error(transparent)]
    Infer(#[from] InferError),
    #[error(transparent)]
    Diagnose(#[from] DiagnoseError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Card(#[from] CardError),
    #[error(transparent)]
    Plot(#[from] crate::card::plots::PlotError),
    #[error("{}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("image folder {}", dir.display())]
    ImageFolder {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("image folder {} resolves to {}, outside the source root {}", dir.display(), resolved.display(), root.display())]
    ImagesOutsideRoot { dir: PathBuf, resolved: PathBuf, root: PathBuf },
    #[error("evaluating against {gold_file}")]
    Evaluation {
        gold_file: String,
        #[source]
        source: Box<crate::eval::EvalError>,
    },
    #[error("starting {0} worker threads failed")]
    Threads(usize),
    #[error(
        "{}: second_opinion names the same weights as model (sha256 {weights}): a model agreeing with itself is no \
         second opinion; name another model, or drop second_opinion",
        spec.display()
    )]
    SameSecondOpinion { spec: PathBuf, weights: String },
    #[error(
        "{}: the joint rule {rule} was fitted on other scores: its scorers are {fitted}, this build's are {now} (fit a rule \
         on this build's release with `calibrate --joint`)",
        spec.display()
    )]
    RuleOfOtherScores { spec: PathBuf, rule: String, fitted: String, now: String },
    #[error("{}: signal.confident_learning", spec.display())]
    ConfidentLearning {
        spec: PathBuf,
        #[source]
        source: crate::signal::confident_learning::report::ReportError,
    },
    #[error(transparent)]
    Signing(#[from] crate::signing::SigningError),
    #[error(transparent)]
    Output(#[from] crate::files::OutDirError),
}

impl From<SpecError> for BuildError {
    fn from(e: SpecError) -> Self {
        BuildError::Spec(Box::new(e))
    }
}

impl From<InputsError> for BuildError {
    fn from(e: InputsError) -> Self {
        BuildError::Inputs(Box::new(e))
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io { path: path.to_path_buf(), source }
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub out: PathBuf,
    pub jobs: usize,
    /// The score cache: a folder or an object store.
    pub cache_dir: infer::CacheLocation,
    /// Refuse demo inputs (sample, fixture scorer, random weights, unpinned files) at resolve time.
    pub publishable: bool,
    pub progress: bool,
    /// Never touch the network: a model missing from the Hugging Face cache is an error
    /// instead of a download.
    pub offline: bool,
    /// Sign the release (`release.sig` and the provenance) before it is moved into place.
    pub signer: Option<std::sync::Arc<crate::signing::Signer>>,
    /// Hash the model's weights even when the digest cache knows them (always on for a
    /// publishable build).
    pub verify_cache: bool,
}

/// The stages up to the inputs of inference: shared by `build`, `build --dry-run` and `infer`.
pub struct Prepared {
    pub table: NihTable,
    pub selection: Selection,
    pub jobs: Vec<ImageJob>,
    pub scorer: Box<dyn Scorer>,
    /// The spec's `second_opinion`, when it names one: every row is scored by both.
    pub second_scorer: Option<Box<dyn Scorer>>,
    pub questions: Vec<crate::release_spec::Question>,
    pub prompt_set_hash: String,
    /// What the score cache keys a pass's scores by (the questions alone; see
    /// [`crate::release_spec::PromptSet::questions_hash`]).
    pub questions_hash: String,
    /// S2's grounding prompts per image (empty before S2).
    pub grounding: diagnose::GroundingPlan,
    /// S3's reasoning prompts per image and S4's report prompt (empty before S3).
    pub narrative: narrative::NarrativePlan,
    pub demo_reasons: Vec<String>,
    pub notes: Vec<String>,
    pub stage_keys: BTreeMap<String, String>,
}

pub fn prepare(spec: &ResolvedSpec, options: &BuildOptions) -> Result<Prepared, BuildError> {
    if options.publishable {
        gates::check_publishable(spec)?;
    }
    card::check_templates(&spec.card.templates_dir, &spec.card.template)?;
    let demo_reasons = gates::demo_reasons(spec);
    let mut notes = Vec::new();

    let table = source::load(&spec.source)?;
    let selection = select::select(&table, &spec.selection, spec.curated.as_deref(), spec.source.embedded_sample)?;
    if let (Some(list), None) = (&spec.selection.images, &spec.curated) {
        notes.push(format!("the embedded sample holds none of the curated list's images ({}): a seeded sample instead", list.file));
    }
    if selection.capped {
        notes.push(format!(
            "the spec asks for {} curated images; the embedded sample has {}, so all of them are used",
            spec.selection.curated_images, selection.candidates
        ));
    }
    if let Some(expected) = spec.selection.expected_rows {
        if selection.rows.len() != expected {
            notes.push(format!("{} rows instead of the {expected} a full build has", selection.rows.len()));
        }
    }
    let jobs = image_jobs(spec, &selection)?;
    let access = infer::ModelAccess { offline: options.offline, progress: options.progress };
    // A publishable build (or --verify-cache) hashes the weights whatever the digest cache says.
    let rehash = options.verify_cache || options.publishable;
    let scorer_of = |model| infer::scorer_for(&infer::locate_model(model, &access)?, &options.cache_dir.local_dir(), rehash, options.jobs);
    let scorer = scorer_of(&spec.model)?;
    notes.extend(scorer.notes());
    if let (Some(rule), Some(settings)) = (spec.joint_rule_of(SecondView::ConfidentLearning), &spec.signal.confident_learning) {
        let now = (scorer.identity().hash(), confident::settings_sha256(settings));
        match &rule.rule.scorers {
            Some(f) if f.primary_sha256 != now.0 || f.confident_learning_sha256.as_deref() != Some(now.1.as_str()) => {
                return Err(BuildError::RuleOfOtherScores {
                    spec: spec.path.clone(),
                    rule: rule.file.clone(),
                    fitted: format!(
                        "{} with confident learning {}",
                        f.primary_sha256,
                        f.confident_learning_sha256.as_deref().unwrap_or("unrecorded")
                    ),
                    now: format!("{} with confident learning {}", now.0, now.1),
                });
            }
            Some(_) => {}
            None => {
                notes.push(format!("the joint rule {} does not say which scores it was fitted on: that could not be checked", rule.file))
            }
        }
    }
    let second_scorer = match &spec.second_opinion {
        Some(second) => {
            let s = scorer_of(second)?;
            if let (Some(a), Some(b)) = (&scorer.identity().weights_sha256, &s.identity().weights_sha256) {
                if a == b {
                    return Err(BuildError::SameSecondOpinion { spec: spec.path.clone(), weights: a.clone() });
                }
            }
            notes.extend(s.notes().into_iter().map(|n| format!("second opinion: {n}")));
            if let Some(rule) = spec.joint_rule_of(SecondView::Family) {
                let now = (scorer.identity().hash(), s.identity().hash());
                match &rule.rule.scorers {
                    Some(f) if (f.primary_sha256.as_str(), f.second_sha256.as_str()) != (now.0.as_str(), now.1.as_str()) => {
                        return Err(BuildError::RuleOfOtherScores {
                            spec: spec.path.clone(),
                            rule: rule.file.clone(),
                            fitted: format!("{} and {}", f.primary_sha256, f.second_sha256),
                            now: format!("{} and {}", now.0, now.1),
                        });
                    }
                    Some(_) => {}
                    None => notes.push(format!(
                        "the joint rule {} does not say which scorers it was fitted on (written before rules recorded them): \
                         that could not be checked",
                        rule.file
                    )),
                }
            }
            if s.family() == scorer.family() {
                notes.push(format!(
                    "the second opinion is a {} model like the primary one: one lineage's errors are correlated, so its \
                     agreement is weaker evidence than another family's",
                    s.family()
                ));
            }
            Some(s)
        }
        None => None,
    };
    let questions = spec.prompts.questions();
    let prompt_set_hash = spec.prompts.hash();
    let questions_hash = spec.prompts.questions_hash();

    let tool = ToolInfo::current();
    let mut stage_keys = BTreeMap::new();
    let ingest = sha256_parts(&["ingest", &tool.version, &sha256_json(&spec.source), &sha256_json(&table.inputs)]);
    let select_key = sha256_parts(&["select", &ingest, &sha256_json(&spec.selection)]);
    let infer_key = sha256_parts(&["infer", &select_key, &scorer.identity().hash(), &prompt_set_hash]);
    // A second opinion's scores are an input of the signal: its key joins the chain there.
    let second_infer_key = second_scorer.as_ref().map(|s| sha256_parts(&["infer", &select_key, &s.identity().hash(), &prompt_set_hash]));
    let signal_key = match &second_infer_key {
        None => sha256_parts(&["signal", &infer_key, &sha256_json(&spec.signal_json())]),
        Some(second) => sha256_parts(&["signal", &infer_key, second, &sha256_json(&spec.signal_json())]),
    };
    let shard_key = sha256_parts(&["shard", &signal_key, &sha256_json(&spec.output), &sha256_json(&spec.release)]);
    // The card also carries the evaluation when the spec names a gold file.
    let card_key =
        sha256_parts(&["card", &shard_key, &sha256_json(&spec.card), &sha256_json(&spec.publish), &sha256_json(&spec.evaluation_json())]);
    for (name, key) in
        [("ingest", ingest), ("select", select_key), ("infer", infer_key), ("signal", signal_key), ("shard", shard_key), ("card", card_key)]
    {
        stage_keys.insert(name.to_string(), key);
    }
    if let Some(key) = second_infer_key {
        stage_keys.insert("infer_second_opinion".to_string(), key);
    }
    let grounding = diagnose::grounding_plan(&selection, &spec.prompts, scorer.family(), &jobs)?;
    if !grounding.jobs.is_empty() {
        // S2: what the grounding answers depend on (the prompts are in the prompt set's hash).
        let key = sha256_parts(&["generate", &stage_keys["select"], &scorer.identity().generation_hash(), &prompt_set_hash]);
        stage_keys.insert("generate".to_string(), key);
    }
    let narrative = narrative::NarrativePlan::new(spec, &selection, &jobs);
    // S3 and S4: what each generated text depends on (its prompts are in the prompt set's hash).
    for (stage, _, _) in narrative.stages(spec) {
        let key = sha256_parts(&[stage, &stage_keys["select"], &scorer.identity().generation_hash(), &prompt_set_hash]);
        stage_keys.insert(stage.to_string(), key);
    }
    Ok(Prepared {
        table,
        selection,
        jobs,
        scorer,
        second_scorer,
        questions,
        prompt_set_hash,
        questions_hash,
        grounding,
        narrative,
        demo_reasons,
        notes,
        stage_keys,
    })
}

/// The image file of every curated image; the folder must exist and stay inside the source root.
fn image_jobs(spec: &ReleaseSpec, selection: &Selection) -> Result<Vec<ImageJob>, BuildError> {
    let dir = spec.source.images_dir();
    let canonical = dir.canonicalize().map_err(|source| BuildError::ImageFolder { dir: dir.clone(), source })?;
    let root = spec.source.root.canonicalize().map_err(io_err(&spec.source.root))?;
    if !canonical.starts_with(&root) {
        return Err(BuildError::ImagesOutsideRoot { dir, resolved: canonical, root });
    }
    Ok(selection.images.iter().map(|i| ImageJob { name: i.image_index.clone(), path: canonical.join(&i.image_index) }).collect())
}

/// Fills the score cache for one shard of the images (`bpals-release infer --shard K/N`).
pub fn infer_shard(spec: &ResolvedSpec, options: &BuildOptions, shard: Option<ShardSpec>) -> Result<InferShardReport, BuildError> {
    let prepared = prepare(spec, options)?;
    let cache = ScoreCache::open(&options.cache_dir)?;
    let run = RunOptions { jobs: options.jobs, shard, progress: options.progress };
    let features = features_kept_by_scoring(spec, options)?;
    let mut report = infer::run(
        &prepared.jobs,
        prepared.scorer.as_ref(),
        &prepared.questions,
        &prepared.questions_hash,
        &cache,
        features.as_ref(),
        &run,
    )?;
    // A second opinion's scores go into the same cache, under its own scorer's keys.
    if let Some(second) = &prepared.second_scorer {
        let more = infer::run(&prepared.jobs, second.as_ref(), &prepared.questions, &prepared.questions_hash, &cache, None, &run)?;
        report.computed += more.computed;
        report.cached += more.cached;
        report.cache_problems.extend(more.cache_problems);
    }
    let answered = generate(spec, &prepared.grounding, prepared.scorer.as_ref(), options, shard)?;
    let narrated = narrative::generate(spec, &prepared.narrative, prepared.scorer.as_ref(), options, shard)?;
    Ok(InferShardReport {
        release_id: spec.release.id.clone(),
        shard,
        shard_source: None,
        images: report.scores.iter().filter(|s| s.is_some()).count(),
        computed: report.computed,
        cached: report.cached,
        generated: answered.computed,
        generated_cached: answered.cached,
        cache_problems: report
            .cache_problems
            .iter()
            .chain(&answered.cache_problems)
            .chain(&narrated.cache_problems)
            .map(ToString::to_string)
            .collect(),
        narrated: narrated.counts,
        cache_dir: options.cache_dir.clone(),
    })
}

/// Every selected image's feature vector, from the spec's scorer (`bpals-release features`).
pub struct ImageFeaturesTable {
    pub names: Vec<String>,
    /// The vectors, and how many came from the cache.
    pub report: infer::FeaturesReport,
    pub scorer: infer::ScorerIdentity,
    /// Why the scorer is a stand-in, if it is (the fixture scorer's features carry nothing).
    pub demo_reasons: Vec<String>,
}

/// The feature vector of every image the spec selects, as `definition` says.
pub fn image_features(
    spec: &ResolvedSpec,
    options: &BuildOptions,
    definition: infer::FeatureDefinition,
) -> Result<ImageFeaturesTable, BuildError> {
    let prepared = prepare(spec, options)?;
    let (names, report) = selected_features(&prepared, options, definition)?;
    Ok(ImageFeaturesTable { names, report, scorer: prepared.scorer.identity().clone(), demo_reasons: prepared.demo_reasons })
}

/// The feature cache the scoring pass keeps its images' features in, when the spec asks for
/// confident learning (which then reads them back instead of encoding each image again).
fn features_kept_by_scoring(spec: &ResolvedSpec, options: &BuildOptions) -> Result<Option<infer::FeatureCache>, BuildError> {
    Ok(match &spec.signal.confident_learning {
        Some(settings) => Some(infer::FeatureCache::open(&options.cache_dir, settings.features)?),
        None => None,
    })
}

/// Every prepared image's name and feature vector, from the feature cache or the scorer: what
/// `features` writes and what a build's confident learning reads.
fn selected_features(
    prepared: &Prepared,
    options: &BuildOptions,
    definition: infer::FeatureDefinition,
) -> Result<(Vec<String>, infer::FeaturesReport), BuildError> {
    let run = RunOptions { jobs: options.jobs, shard: None, progress: options.progress };
    let cache = infer::FeatureCache::open(&options.cache_dir, definition)?;
    let report = infer::run_features(&prepared.jobs, prepared.scorer.as_ref(), &cache, &run)?;
    Ok((prepared.jobs.iter().map(|j| j.name.clone()).collect(), report))
}

/// The decoding settings of S2's grounding answers.
fn decoding(spec: &ResolvedSpec) -> DecodingSettings {
    DecodingSettings::greedy(spec.prompts.location.as_ref().map_or(0, |l| l.max_new_tokens))
}

/// The generation stage: S2's grounding answers, from the cache or decoded in batches.
fn generate(
    spec: &ResolvedSpec,
    grounding: &diagnose::GroundingPlan,
    scorer: &dyn Scorer,
    options: &BuildOptions,
    shard: Option<ShardSpec>,
) -> Result<GenerationReport, BuildError> {
    let run = RunOptions { jobs: options.jobs, shard, progress: options.progress };
    Ok(infer::run_generation(&grounding.jobs, scorer, &decoding(spec), &GenerationCache::open(&options.cache_dir)?, &run)?)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    std::fs::write(path, bytes).map_err(io_err(path))
}
