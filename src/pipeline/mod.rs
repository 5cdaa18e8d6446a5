//! `bpals-release build`: runs the stages in order and writes the release directory.
//!
//! ```text
//! spec -> ingest -> select -> infer (cached) -> signal -> trial -> shard -> card -> lock -> manifest
//! ```
//! Each stage takes typed input and returns typed output; this module only wires them together.

mod diagnosis;
mod narrative;
pub mod output;
mod plan;
pub(crate) mod records;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use plan::{plan, Plan, PlanStage};
pub use report::{demo_banner, BuildReport, InferShardReport};

use crate::card::{self, CardError, CardInput, SplitFacts, TableFacts};
use crate::diagnose::{self, DiagnoseError};
use crate::hashing::{sha256_json, sha256_parts};
use crate::infer::{
    self, DecodingSettings, GenerationCache, GenerationReport, ImageAnswers, ImageJob, ImageScores, InferError, RunOptions, ScoreCache,
    Scorer, ShardSpec,
};
use crate::inputs::{InputsError, ResolvedSpec};
use crate::manifest::{self, BuildLock, ImageHashesFile, Manifest, ToolInfo, LOCK_FILE, MANIFEST_FILE, MANIFEST_FORMAT};
use crate::reason::Reasoning;
use crate::release_spec::{gates, series, ReleaseSpec, SpecError, Split};
use crate::select::{self, SelectError, Selection};
use crate::shard::{self, ShardError, ShardMeta};
use crate::signal;
use crate::source::{self, NihTable, SourceError};
use crate::trial;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Inputs(#[from] InputsError),
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
        source: crate::eval::EvalError,
    },
    #[error("starting {0} worker threads failed")]
    Threads(usize),
    #[error(transparent)]
    Signing(#[from] crate::signing::SigningError),
    #[error(transparent)]
    Output(#[from] crate::files::OutDirError),
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
    pub questions: Vec<crate::release_spec::Question>,
    pub prompt_set_hash: String,
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
    let model = infer::locate_model(&spec.model, &infer::ModelAccess { offline: options.offline, progress: options.progress })?;
    // A publishable build (or --verify-cache) hashes the weights whatever the digest cache says.
    let rehash = options.verify_cache || options.publishable;
    let scorer = infer::scorer_for(&model, &options.cache_dir.local_dir(), rehash, options.jobs)?;
    notes.extend(scorer.notes());
    let questions = spec.prompts.questions();
    let prompt_set_hash = spec.prompts.hash();

    let tool = ToolInfo::current();
    let mut stage_keys = BTreeMap::new();
    let ingest = sha256_parts(&["ingest", &tool.version, &sha256_json(&spec.source), &sha256_json(&table.inputs)]);
    let select_key = sha256_parts(&["select", &ingest, &sha256_json(&spec.selection)]);
    let infer_key = sha256_parts(&["infer", &select_key, &scorer.identity().hash(), &prompt_set_hash]);
    let signal_key = sha256_parts(&["signal", &infer_key, &sha256_json(&spec.signal_json())]);
    let shard_key = sha256_parts(&["shard", &signal_key, &sha256_json(&spec.output), &sha256_json(&spec.release)]);
    // The card also carries the evaluation when the spec names a gold file.
    let card_key =
        sha256_parts(&["card", &shard_key, &sha256_json(&spec.card), &sha256_json(&spec.publish), &sha256_json(&spec.evaluation_json())]);
    for (name, key) in
        [("ingest", ingest), ("select", select_key), ("infer", infer_key), ("signal", signal_key), ("shard", shard_key), ("card", card_key)]
    {
        stage_keys.insert(name.to_string(), key);
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
    Ok(Prepared { table, selection, jobs, scorer, questions, prompt_set_hash, grounding, narrative, demo_reasons, notes, stage_keys })
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
    let report = infer::run(&prepared.jobs, prepared.scorer.as_ref(), &prepared.questions, &prepared.prompt_set_hash, &cache, &run)?;
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

pub fn build(spec: &ResolvedSpec, options: &BuildOptions, log: &dyn Fn(&str)) -> Result<BuildReport, BuildError> {
    let started_on = crate::signing::now();
    // Before any work: the output folder is this build's alone (see `output`).
    let cache_dir = match &options.cache_dir {
        infer::CacheLocation::Dir(dir) => Some(dir.as_path()),
        infer::CacheLocation::Object(_) => None,
    };
    let claimed = output::claim(&options.out, spec, cache_dir)?;
    if let (Some(signer), Some(named)) = (&options.signer, &spec.publisher_key) {
        let fingerprint = signer.key.public_key().fingerprint();
        if fingerprint != named.fingerprint {
            return Err(BuildError::Signing(crate::signing::SigningError::NotThePublisherKey {
                fingerprint,
                named: named.file.clone(),
                named_fingerprint: named.fingerprint.clone(),
            }));
        }
    }
    let Prepared {
        table,
        selection,
        jobs,
        scorer,
        questions,
        prompt_set_hash,
        grounding,
        narrative: narrative_plan,
        demo_reasons,
        mut notes,
        stage_keys,
    } = prepare(spec, options)?;
    log(&format!(
        "ingest: {} images from {}{}",
        table.images(),
        spec.source.root_as_written,
        if spec.source.embedded_sample { " (EMBEDDED SYNTHETIC SAMPLE)" } else { "" }
    ));
    log(&format!("select: {} curated images, {} (image, label) rows", selection.images.len(), selection.rows.len()));

    let cache = ScoreCache::open(&options.cache_dir)?;
    let run = RunOptions { jobs: options.jobs, shard: None, progress: options.progress };
    let report = infer::run(&jobs, scorer.as_ref(), &questions, &prompt_set_hash, &cache, &run)?;
    for problem in &report.cache_problems {
        log(&format!("infer: {problem}"));
    }
    log(&format!("infer: {} images from the cache, {} scored by {}", report.cached, report.computed, scorer.identity().backend));
    let scores: Vec<ImageScores> = report.scores.into_iter().map(|s| s.expect("every image is in the unsharded run")).collect();
    let answered = generate(spec, &grounding, scorer.as_ref(), options, None)?;
    if !grounding.jobs.is_empty() {
        log(&format!(
            "generate: grounding answers for {} images, {} from the cache, {} decoded by {}",
            grounding.jobs.len(),
            answered.cached,
            answered.computed,
            scorer.identity().backend
        ));
    }
    let answers: Vec<ImageAnswers> = answered.answers.into_iter().map(|a| a.expect("every image is in the unsharded run")).collect();
    let narrated = narrative::generate(spec, &narrative_plan, scorer.as_ref(), options, None)?;
    for problem in answered.cache_problems.iter().chain(&narrated.cache_problems) {
        log(&format!("generate: {problem}"));
    }
    for (stage, computed, cached) in &narrated.counts {
        let what = if *stage == "reason" { "reasoning for the rows of" } else { "a report for each of" };
        log(&format!(
            "generate: {what} {} images, {cached} from the cache, {computed} decoded by {}",
            cached + computed,
            scorer.identity().backend
        ));
    }

    // --jobs bounds every parallel stage after inference too.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(options.jobs.max(1)).build().map_err(|_| BuildError::Threads(options.jobs))?;
    let mut sig =
        pool.install(|| signal::derive(&selection, &scores, &questions, &signal::Rules::new(&spec.signal, spec.calibration_table())));
    let sizes =
        if spec.prompts.location.is_some() { source::image_sizes(&spec.source.images_dir(), &table.boxes)? } else { Default::default() };
    let diagnosis = spec.prompts.diagnoses().then(|| {
        let input = diagnose::DiagnoseInput {
            selection: &selection,
            scores: &scores,
            questions: &questions,
            prompts: &spec.prompts,
            plan: &grounding,
            answers: &answers,
            boxes: &table.boxes,
            sizes: &sizes,
            tau: spec.signal.tau,
        };
        diagnose::derive(&input, &mut sig.traces)
    });
    let (reasoning, reports) = narrative::derive(spec, &selection, &sig, diagnosis.as_ref(), &narrative_plan, narrated);
    if let Some(unclosed) = reasoning.as_ref().map(Reasoning::unclosed).filter(|&n| n > 0) {
        let budget = spec.prompts.reasoning.as_ref().map_or(0, |p| p.max_new_tokens);
        notes.push(format!(
            "S3: {unclosed} rows' reasoning never closed its <think> block within {budget} new tokens (model.thinking on): \
             no answer was read from them"
        ));
    }
    let trial = spec.selection.trial.as_ref().map(|t| trial::sample(&selection, &sig, t, spec.selection.seed));

    let staging = output::Staging::create(&claimed).map_err(io_err(&options.out))?;
    let dir = staging.dir.clone();
    let meta = ShardMeta {
        release_id: spec.release.id.clone(),
        release_version: spec.release.version.clone(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let table_rows = records::RecordTable::new(&selection, &sig, &scores, &questions)
        .with_diagnosis(diagnosis.as_ref())
        .with_narrative(reasoning.as_ref(), reports.as_deref());
    let columns = shard::ColumnSet::of(&spec.prompts);
    let (pair_layout, image_layout) = (shard::pairs::layout(columns), shard::images::layout(columns));
    let mut splits = Vec::new();
    for split in &spec.output.splits {
        let rows = split_rows(*split, &selection, trial.as_ref());
        let records = table_rows.records(&rows);
        let files = pool.install(|| shard::write_split(&dir, &pair_layout, split.name(), &records, &spec.output, &meta))?;
        let images = table_rows.images_of(&rows);
        let image_records = table_rows.image_records(&images);
        let image_files = pool.install(|| shard::write_split(&dir, &image_layout, split.name(), &image_records, &spec.output, &meta))?;
        splits.push(SplitFacts {
            name: split.name().to_string(),
            pairs: TableFacts::new(&dir, rows.len(), files),
            images: TableFacts::new(&dir, images.len(), image_files),
            stats: signal::stats(&selection, &sig.pairs, &rows),
            trace: signal::trace::stats(&sig.traces, &images),
        });
    }
    if let Some(t) = &trial {
        if t.rows.len() < t.requested {
            notes.push(format!("the trial sample has {} rows instead of {}: the selection has no more", t.rows.len(), t.requested));
        }
    }

    // The evaluation and the plots cover the full split when there is one (as `eval` does on shards).
    let main_split = if spec.output.splits.contains(&Split::Full) { Split::Full } else { Split::Trial };
    let main_rows = split_rows(main_split, &selection, trial.as_ref());
    let gold = spec.gold.as_ref().map(|e| &e.gold.labels);
    let gold_name = spec.gold.as_ref().map_or(crate::release_spec::EXPERT_LABELS, |e| e.against.as_str());
    let plots = card::plots::render(&dir, main_split.name(), &table_rows.plot_rows(&main_rows, gold), gold_name)?;
    let diagnose_card = match &diagnosis {
        None => None,
        Some(d) => {
            let context = diagnosis::DiagnoseContext {
                spec,
                sizes: &sizes,
                table: &table,
                selection: &selection,
                diagnosis: d,
                location_tuples: splits.iter().find(|s| s.name == main_split.name()).map_or(0, |s| s.trace.locations),
                split: main_split.name(),
                rows: &main_rows,
            };
            Some(diagnosis::card_section(&dir, &context, log)?)
        }
    };
    let evaluation = match &spec.gold {
        None => None,
        Some(e) => {
            let (split, rows) = (main_split, table_rows.release_rows(&main_rows));
            let mut report = crate::eval::evaluate_rows(
                &spec.release.id,
                split.name(),
                &rows,
                &e.gold_file,
                &e.gold,
                &crate::eval::EvalOptions::default(),
                None,
            )
            .map_err(|source| BuildError::Evaluation { gold_file: e.gold_file.clone(), source })?;
            report.against = e.against.clone();
            if let Some(r) = &e.review_plan {
                crate::eval::add_review(&mut report, &rows, &e.gold, &r.plan.review_input(Path::new(&r.file)))
                    .map_err(|source| BuildError::Evaluation { gold_file: e.gold_file.clone(), source })?;
            }
            write(&dir.join("eval.json"), &manifest::to_json_bytes(&report))?;
            log(&format!("eval: {} gold judgements matched on the {} split", report.matched, report.split));
            Some(crate::eval::to_markdown(&report))
        }
    };
    let series = load_series_lenient(spec, &mut notes);
    // The spec as the lock records it; the card's templates see the same.
    let spec_json = spec.to_json();
    let card_input = CardInput {
        spec,
        spec_json: spec_json.clone(),
        demo_reasons: &demo_reasons,
        demo_weights: spec.model.demo_weights.map(|w| w.describe()),
        scorer: scorer.identity(),
        series: &series,
        images: selection.images.len(),
        candidates: selection.candidates,
        capped: selection.capped,
        splits: splits.clone(),
        trial: trial.as_ref(),
        evaluation,
        plots,
        diagnose: diagnose_card,
        narrative: narrative::card_section(
            spec,
            &selection,
            &sig,
            reasoning.as_ref(),
            reports.as_deref(),
            main_split.name(),
            &main_rows,
            &table_rows.images_of(&main_rows),
        ),
        coverage: coverage(spec, &selection, &table),
    };
    let (readme, license) = card::render(&card_input)?;
    write(&dir.join("README.md"), readme.as_bytes())?;
    write(&dir.join("LICENSE.md"), license.as_bytes())?;

    let (hashes_text, image_hashes) =
        ImageHashesFile::render(selection.images.iter().zip(&scores).map(|(i, s)| (i.image_index.as_str(), s.image_sha256.as_str())));
    write(&dir.join(&image_hashes.path), hashes_text.as_bytes())?;
    let lock = BuildLock {
        format: manifest::LOCK_FORMAT.into(),
        tool: ToolInfo::current(),
        spec_file: spec.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        spec_sha256: sha256_json(&spec_json),
        spec: spec_json,
        inputs: serde_json::to_value(&table.inputs).expect("plain data"),
        images: image_hashes,
        scorer: serde_json::to_value(scorer.identity()).expect("plain data"),
        scorer_sha256: scorer.identity().hash(),
        prompt_set_sha256: prompt_set_hash,
        seed: spec.selection.seed,
        stage_keys,
    };
    write(&dir.join(LOCK_FILE), &manifest::to_json_bytes(&lock))?;
    if let Some(key) = &spec.publisher_key {
        write(&dir.join(crate::signing::PUBLISHER_KEY_FILE), key.pem.as_bytes())?;
    }
    let rows_of: BTreeMap<String, u64> =
        splits.iter().flat_map(|s| s.pairs.shards.iter().chain(&s.images.shards).map(|f| (f.path.clone(), f.rows))).collect();
    let mut files = manifest::collect_files(&dir, &|p| rows_of.get(p).copied()).map_err(io_err(&dir))?;
    // croissant.json lists the shards' and images.sha256's digests, hashed once above for the
    // manifest, which then lists croissant.json too.
    let croissant = card::croissant::render(&card_input, &files, &lock.images.path);
    write(&dir.join(card::croissant::CROISSANT_FILE), &croissant)?;
    let (path, sha256) = (card::croissant::CROISSANT_FILE.to_string(), crate::hashing::sha256_hex(&croissant));
    let at = files.partition_point(|f| f.path < path);
    files.insert(at, manifest::ManifestFile { path, bytes: croissant.len() as u64, sha256, rows: None });
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        release_id: spec.release.id.clone(),
        version: spec.release.version.clone(),
        tier: spec.release.tier.name().into(),
        demo_reasons: demo_reasons.clone(),
        files: files.clone(),
    };
    write(&dir.join(MANIFEST_FILE), &manifest::to_json_bytes(&manifest))?;
    if let Some(signer) = &options.signer {
        let signed = crate::signing::sign_release(&dir, &signer.key, &run_details(spec, options, signer, started_on))?;
        log(&format!("sign: {} files signed by key {} ({})", signed.files_signed, signed.fingerprint, signed.curve));
    }
    staging.commit().map_err(io_err(&options.out))?;
    drop(claimed);
    let out = options.out.clone();

    Ok(BuildReport {
        out,
        release_id: spec.release.id.clone(),
        demo_reasons,
        scorer: format!("{} {}@{}", scorer.identity().backend, scorer.identity().model_id, scorer.identity().revision),
        images: selection.images.len(),
        rows: selection.rows.len(),
        cached_images: report.cached,
        scored_images: report.computed,
        files,
        notes,
    })
}

/// The provenance's account of this build: the spec file as written and the flags that shape
/// the release (not the cache, thread counts or progress display).
fn run_details(
    spec: &ResolvedSpec,
    options: &BuildOptions,
    signer: &crate::signing::Signer,
    started_on: String,
) -> crate::signing::RunDetails {
    let mut arguments = BTreeMap::new();
    arguments.insert("spec".to_string(), spec.path.display().to_string().into());
    arguments.insert("publishable".to_string(), options.publishable.into());
    if let Ok(text) = std::fs::read_to_string(&spec.path) {
        arguments.insert("spec_as_written".to_string(), text.into());
    }
    crate::signing::RunDetails {
        builder_id: signer.builder_id.clone(),
        started_on: Some(started_on),
        finished_on: Some(crate::signing::now()),
        arguments,
    }
}

/// The selection rows a split ships, in row order.
fn split_rows(split: Split, selection: &Selection, trial: Option<&trial::TrialSample>) -> Vec<usize> {
    match split {
        Split::Full => (0..selection.rows.len()).collect(),
        Split::Trial => trial.map(|t| t.rows.clone()).unwrap_or_default(),
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    std::fs::write(path, bytes).map_err(io_err(path))
}

/// The roadmap comes from the specs beside the chain's root spec. A sibling spec that does not
/// parse is left out of the roadmap with a note, rather than failing this build.
fn load_series_lenient(spec: &ReleaseSpec, notes: &mut Vec<String>) -> Vec<series::SeriesEntry> {
    let root = spec.layers.last().map_or(&spec.path, |layer| &layer.path);
    let dir = root.parent().unwrap_or(Path::new("."));
    match series::load_series(dir) {
        Ok(s) => s,
        Err(e) => {
            notes.push(format!("roadmap left out of the card: {e}"));
            Vec::new()
        }
    }
}

/// How many curated images carry NIH boxes, and how many the gold labels cover.
fn coverage(spec: &ResolvedSpec, selection: &select::Selection, table: &source::NihTable) -> card::Coverage {
    let chosen: std::collections::HashSet<&str> = selection.images.iter().map(|i| i.image_index.as_str()).collect();
    let boxed: std::collections::HashSet<&str> =
        table.boxes.iter().map(|b| b.image_index.as_str()).filter(|i| chosen.contains(i)).collect();
    let gold = spec.gold.as_ref().map(|g| {
        let images: std::collections::HashSet<&str> =
            g.gold.labels.keys().map(|(image, _)| image.as_str()).filter(|i| chosen.contains(i)).collect();
        images.len()
    });
    card::Coverage { with_boxes: boxed.len(), with_gold: gold, gold: spec.gold.as_ref().map(|g| g.against.clone()) }
}
