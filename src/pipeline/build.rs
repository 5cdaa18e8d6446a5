//! `build`'s stages, in the order they run: claim the output folder, prepare (ingest, select,
//! locate the model), infer, derive the signal, write the shards, the card, the lock and the
//! manifest, sign, and move the release into place. [`build`] reads as that list; each stage is
//! a function of its own below it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::narrative::{self, NarrativeAnswers};
use super::{confident, diagnosis, generate, io_err, output, prepare, records, write, BuildError, BuildOptions, BuildReport, Prepared};
use crate::card::{self, CardInput, SplitFacts, TableFacts};
use crate::diagnose::{self, Diagnosis};
use crate::files::OutDir;
use crate::hashing::sha256_json;
use crate::infer::{self, ImageAnswers, ImageScores, RunOptions, ScoreCache};
use crate::inputs::ResolvedSpec;
use crate::manifest::{self, BuildLock, ImageHashesFile, Manifest, ManifestFile, ToolInfo, LOCK_FILE, MANIFEST_FILE, MANIFEST_FORMAT};
use crate::paraphrase::ImageReport;
use crate::reason::Reasoning;
use crate::release_spec::{series, ReleaseSpec, Split};
use crate::select::{self, Selection};
use crate::shard::{self, ShardMeta};
use crate::signal::joint_rule::SecondView;
use crate::signal::{self, Signal};
use crate::source;
use crate::trial::{self, TrialSample};

/// Builds the release `spec` describes into `options.out`.
pub fn build(spec: &ResolvedSpec, options: &BuildOptions, log: &dyn Fn(&str)) -> Result<BuildReport, BuildError> {
    let started_on = crate::signing::now();
    let claimed = claim_output(spec, options)?;
    let prepared = prepare(spec, options)?;
    let mut notes = prepared.notes.clone();
    log_inputs(spec, &prepared, log);
    let inferred = infer_all(spec, options, &prepared, log)?;
    // --jobs bounds every parallel stage after inference too.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(options.jobs.max(1)).build().map_err(|_| BuildError::Threads(options.jobs))?;
    let confident = confident::confident_view(spec, options, &prepared, &pool, log)?;
    let derived = derive_signal(
        spec,
        &prepared,
        inferred.answers_and_narrative,
        &inferred.scores,
        inferred.second_scores.as_deref(),
        confident.as_ref(),
        &pool,
        &mut notes,
    )?;
    let staging = output::Staging::create(&claimed).map_err(io_err(&options.out))?;
    let dir = staging.dir.clone();
    let table_rows =
        records::RecordTable::new(&prepared.selection, &derived.signal, &inferred.scores, &prepared.questions)
            .with_diagnosis(derived.diagnosis.as_ref())
            .with_narrative(derived.reasoning.as_ref(), derived.reports.as_deref())
            .with_second_opinion(derived.families.as_ref().zip(inferred.second_scores.as_deref()).map(|(f, scores)| {
                records::SecondOpinion { primary: &f.primary, second: &f.second, scores, family_agreement: &f.family_agreement }
            }))
            .with_confident_learning(confident.as_ref());
    if let Some(view) = &confident {
        let json = serde_json::to_vec_pretty(&view.issues).expect("the report serialises");
        write(&dir.join(confident::CONFIDENT_LEARNING_FILE), &json)?;
    }
    let splits = write_shards(spec, &prepared.selection, &derived, &table_rows, &dir, &pool, &mut notes)?;
    let series = load_series_lenient(spec, &mut notes);
    let card_input = write_card(spec, &prepared, &derived, &table_rows, splits, &series, confident.as_ref(), &dir, log)?;
    let lock = write_lock(spec, &prepared, &inferred.scores, card_input.spec_json.clone(), &dir)?;
    let files = write_manifest(spec, &prepared.demo_reasons, &card_input, &lock, &dir)?;
    if let Some(signer) = &options.signer {
        let signed = crate::signing::sign_release(&dir, &signer.key, &run_details(spec, options, signer, started_on))?;
        log(&format!("sign: {} files signed by key {} ({})", signed.files_signed, signed.fingerprint, signed.curve));
    }
    staging.commit().map_err(io_err(&options.out))?;
    drop(claimed);
    let identity = prepared.scorer.identity();
    Ok(BuildReport {
        out: options.out.clone(),
        release_id: spec.release.id.clone(),
        demo_reasons: prepared.demo_reasons.clone(),
        scorer: format!("{} {}@{}", identity.backend, identity.model_id, identity.revision),
        images: prepared.selection.images.len(),
        rows: prepared.selection.rows.len(),
        cached_images: inferred.cached,
        scored_images: inferred.computed,
        files,
        notes,
    })
}

/// Before any work: the output folder is this build's alone (see `output`), and the signing
/// key, when there is one, is the publisher key the spec names.
fn claim_output(spec: &ResolvedSpec, options: &BuildOptions) -> Result<OutDir, BuildError> {
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
    Ok(claimed)
}

fn log_inputs(spec: &ResolvedSpec, prepared: &Prepared, log: &dyn Fn(&str)) {
    log(&format!(
        "ingest: {} images from {}{}",
        prepared.table.images(),
        spec.source.root_as_written,
        if spec.source.embedded_sample { " (EMBEDDED SYNTHETIC SAMPLE)" } else { "" }
    ));
    log(&format!("select: {} curated images, {} (image, label) rows", prepared.selection.images.len(), prepared.selection.rows.len()));
}

/// What the model said about every image: the yes/no scores, S2's grounding answers and
/// S3/S4's generated texts, each from the cache or computed.
struct Inferred {
    scores: Vec<ImageScores>,
    /// The second opinion's scores, where the spec asks for one.
    second_scores: Option<Vec<ImageScores>>,
    answers_and_narrative: (Vec<ImageAnswers>, NarrativeAnswers),
    cached: usize,
    computed: usize,
}

fn infer_all(spec: &ResolvedSpec, options: &BuildOptions, prepared: &Prepared, log: &dyn Fn(&str)) -> Result<Inferred, BuildError> {
    let scorer = prepared.scorer.as_ref();
    let backend = &scorer.identity().backend;
    let cache = ScoreCache::open(&options.cache_dir)?;
    let run = RunOptions { jobs: options.jobs, shard: None, progress: options.progress };
    let features = super::features_kept_by_scoring(spec, options)?;
    let report = infer::run(&prepared.jobs, scorer, &prepared.questions, &prepared.questions_hash, &cache, features.as_ref(), &run)?;
    for problem in &report.cache_problems {
        log(&format!("infer: {problem}"));
    }
    log(&format!("infer: {} images from the cache, {} scored by {backend}", report.cached, report.computed));
    if report.features_kept > 0 {
        log(&format!("infer: the features of {} images kept from their scoring pass", report.features_kept));
    }
    let scores: Vec<ImageScores> = report.scores.into_iter().map(|s| s.expect("every image is in the unsharded run")).collect();
    let second_scores = match &prepared.second_scorer {
        None => None,
        Some(second) => {
            let report = infer::run(&prepared.jobs, second.as_ref(), &prepared.questions, &prepared.questions_hash, &cache, None, &run)?;
            for problem in &report.cache_problems {
                log(&format!("infer (second opinion): {problem}"));
            }
            log(&format!(
                "infer (second opinion): {} images from the cache, {} scored by {} {}",
                report.cached,
                report.computed,
                second.identity().backend,
                second.identity().model_id
            ));
            Some(report.scores.into_iter().map(|s| s.expect("every image is in the unsharded run")).collect())
        }
    };

    let grounding = &prepared.grounding;
    let answered = generate(spec, grounding, scorer, options, None)?;
    if !grounding.jobs.is_empty() {
        log(&format!(
            "generate: grounding answers for {} images, {} from the cache, {} decoded by {backend}",
            grounding.jobs.len(),
            answered.cached,
            answered.computed,
        ));
    }
    let answers: Vec<ImageAnswers> = answered.answers.into_iter().map(|a| a.expect("every image is in the unsharded run")).collect();
    let narrated = narrative::generate(spec, &prepared.narrative, scorer, options, None)?;
    for problem in answered.cache_problems.iter().chain(&narrated.cache_problems) {
        log(&format!("generate: {problem}"));
    }
    for (stage, computed, cached) in &narrated.counts {
        let what = if *stage == "reason" { "reasoning for the rows of" } else { "a report for each of" };
        log(&format!("generate: {what} {} images, {cached} from the cache, {computed} decoded by {backend}", cached + computed));
    }
    Ok(Inferred { scores, second_scores, answers_and_narrative: (answers, narrated), cached: report.cached, computed: report.computed })
}

/// What the release says about each row and image, derived from the model's outputs.
struct Derived {
    /// The release's signal: the primary model's, or with a second opinion the joint one.
    signal: Signal,
    /// Each family's own signal, where a second opinion was asked.
    families: Option<Families>,
    /// Image sizes, read only when the prompts ask for locations.
    sizes: HashMap<String, (u32, u32)>,
    diagnosis: Option<Diagnosis>,
    reasoning: Option<Reasoning>,
    reports: Option<Vec<ImageReport>>,
    trial: Option<TrialSample>,
}

/// Each family's own signal of every row in a two-family release, and how far they agree.
struct Families {
    primary: Signal,
    second: Signal,
    family_agreement: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn derive_signal(
    spec: &ResolvedSpec,
    prepared: &Prepared,
    (answers, narrated): (Vec<ImageAnswers>, NarrativeAnswers),
    scores: &[ImageScores],
    second_scores: Option<&[ImageScores]>,
    confident: Option<&confident::ConfidentView>,
    pool: &rayon::ThreadPool,
    notes: &mut Vec<String>,
) -> Result<Derived, BuildError> {
    let (selection, questions) = (&prepared.selection, &prepared.questions);
    let rules = signal::Rules::new(&spec.signal, spec.calibration_table());
    let primary = pool.install(|| signal::derive(selection, scores, questions, &rules));
    // A joint rule combines the families, or the answers with confident learning, as it says.
    let family_rule = spec.joint_rule_of(SecondView::Family).map(|r| &r.rule);
    let views_rule = spec.joint_rule_of(SecondView::ConfidentLearning).map(|r| &r.rule);
    let (mut sig, families) = match second_scores {
        None => (primary, None),
        Some(second_scores) => {
            let second = pool.install(|| signal::derive(selection, second_scores, questions, &rules));
            let j = signal::joint::combine(selection, primary, second, &spec.signal, family_rule);
            (j.joint, Some(Families { primary: j.primary, second: j.second, family_agreement: j.family_agreement }))
        }
    };
    // With confident learning, both views set the class (before the trial sample and S3 read it).
    if let Some(view) = confident {
        for (pair, row) in sig.pairs.iter_mut().zip(&selection.rows) {
            pair.trust_class = match (views_rule, view.probability(row.image, row.label)) {
                (Some(rule), Some(p)) => {
                    let label = crate::vocab::LABELS[row.label];
                    signal::views::fitted_class(rule, label, pair.confidence, p, row.nih_label, &spec.signal)
                }
                _ => signal::views::trust_class(pair.trust_class, view.label_issue(row.image, row.label)),
            };
        }
    }
    let sizes = if spec.prompts.location.is_some() {
        source::image_sizes(&spec.source.images_dir(), &prepared.table.boxes)?
    } else {
        Default::default()
    };
    let diagnosis = spec.prompts.diagnoses().then(|| {
        let input = diagnose::DiagnoseInput {
            selection,
            scores,
            questions,
            prompts: &spec.prompts,
            plan: &prepared.grounding,
            answers: &answers,
            boxes: &prepared.table.boxes,
            sizes: &sizes,
            tau: spec.signal.tau,
        };
        diagnose::derive(&input, &mut sig.traces)
    });
    let (reasoning, reports) = narrative::derive(spec, selection, &sig, diagnosis.as_ref(), &prepared.narrative, narrated);
    if let Some(unclosed) = reasoning.as_ref().map(Reasoning::unclosed).filter(|&n| n > 0) {
        let budget = spec.prompts.reasoning.as_ref().map_or(0, |p| p.max_new_tokens);
        notes.push(format!(
            "S3: {unclosed} rows' reasoning never closed its <think> block within {budget} new tokens (model.thinking on): \
             no answer was read from them"
        ));
    }
    let trial = spec.selection.trial.as_ref().map(|t| trial::sample(selection, &sig, t, spec.selection.seed));
    Ok(Derived { signal: sig, families, sizes, diagnosis, reasoning, reports, trial })
}

/// The pair and image shards of every split the spec asks for.
fn write_shards(
    spec: &ResolvedSpec,
    selection: &Selection,
    derived: &Derived,
    table_rows: &records::RecordTable<'_>,
    dir: &Path,
    pool: &rayon::ThreadPool,
    notes: &mut Vec<String>,
) -> Result<Vec<SplitFacts>, BuildError> {
    let meta = ShardMeta {
        release_id: spec.release.id.clone(),
        release_version: spec.release.version.clone(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let columns = shard::ColumnSet::of(spec);
    let (pair_layout, image_layout) = (shard::pairs::layout(columns), shard::images::layout(columns));
    let mut splits = Vec::new();
    for split in &spec.output.splits {
        let rows = split_rows(*split, selection, derived.trial.as_ref());
        let records = table_rows.records(&rows);
        let files = pool.install(|| shard::write_split(dir, &pair_layout, split.name(), &records, &spec.output, &meta))?;
        let images = table_rows.images_of(&rows);
        let image_records = table_rows.image_records(&images);
        let image_files = pool.install(|| shard::write_split(dir, &image_layout, split.name(), &image_records, &spec.output, &meta))?;
        splits.push(SplitFacts {
            name: split.name().to_string(),
            pairs: TableFacts::new(dir, rows.len(), files),
            images: TableFacts::new(dir, images.len(), image_files),
            stats: match derived.families {
                None => signal::stats(selection, &derived.signal.pairs, &rows),
                Some(_) => signal::stats_of_flags(selection, &derived.signal.pairs, &rows, &signal::joint::JOINT_FLAGS),
            },
            trace: signal::trace::stats(&derived.signal.traces, &images),
        });
    }
    if let Some(t) = &derived.trial {
        if t.rows.len() < t.requested {
            notes.push(format!("the trial sample has {} rows instead of {}: the selection has no more", t.rows.len(), t.requested));
        }
    }
    Ok(splits)
}

/// The card (README.md and LICENSE.md) with its plots, S2's figures and, when the spec names a
/// gold file, eval.json; returns what the card was rendered from, which croissant.json reuses.
#[allow(clippy::too_many_arguments)]
fn write_card<'a>(
    spec: &'a ResolvedSpec,
    prepared: &'a Prepared,
    derived: &'a Derived,
    table_rows: &records::RecordTable<'_>,
    splits: Vec<SplitFacts>,
    series: &'a [series::SeriesEntry],
    confident: Option<&confident::ConfidentView>,
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<CardInput<'a>, BuildError> {
    let selection = &prepared.selection;
    // The evaluation and the plots cover the full split when there is one (as `eval` does on shards).
    let main_split = if spec.output.splits.contains(&Split::Full) { Split::Full } else { Split::Trial };
    let main_rows = split_rows(main_split, selection, derived.trial.as_ref());
    let gold = spec.gold.as_ref().map(|e| &e.gold.labels);
    let gold_name = spec.gold.as_ref().map_or(crate::release_spec::EXPERT_LABELS, |e| e.against.as_str());
    let plots = card::plots::render(dir, main_split.name(), &table_rows.plot_rows(&main_rows, gold), gold_name)?;
    let diagnose_card = match &derived.diagnosis {
        None => None,
        Some(d) => {
            let context = diagnosis::DiagnoseContext {
                spec,
                sizes: &derived.sizes,
                table: &prepared.table,
                selection,
                diagnosis: d,
                location_tuples: splits.iter().find(|s| s.name == main_split.name()).map_or(0, |s| s.trace.locations),
                split: main_split.name(),
                rows: &main_rows,
            };
            Some(diagnosis::card_section(dir, &context, log)?)
        }
    };
    let report = evaluate(spec, main_split, table_rows, &main_rows, dir, log)?;
    let evaluation = report.as_ref().map(crate::eval::to_markdown);
    let card_input = CardInput {
        spec,
        // The spec as the lock records it; the card's templates see the same.
        spec_json: spec.to_json(),
        demo_reasons: &prepared.demo_reasons,
        demo_weights: spec.model.demo_weights.map(|w| w.describe()),
        scorer: prepared.scorer.identity(),
        series,
        images: selection.images.len(),
        candidates: selection.candidates,
        capped: selection.capped,
        splits,
        trial: derived.trial.as_ref(),
        evaluation,
        plots,
        diagnose: diagnose_card,
        narrative: narrative::card_section(
            spec,
            selection,
            &derived.signal,
            derived.reasoning.as_ref(),
            derived.reports.as_deref(),
            main_split.name(),
            &main_rows,
            &table_rows.images_of(&main_rows),
        ),
        coverage: coverage(spec, selection, &prepared.table),
        second_opinion: second_opinion_card(spec, prepared, derived, main_split, &main_rows, report.as_ref()),
        confident_learning: confident.map(|view| {
            let rule = spec.joint_rule_of(SecondView::ConfidentLearning);
            view.card(rule.map(|r| card::JointRuleCard::new(&r.file, &r.rule, report.as_ref())))
        }),
    };
    let (readme, license) = card::render(&card_input)?;
    write(&dir.join("README.md"), readme.as_bytes())?;
    write(&dir.join("LICENSE.md"), license.as_bytes())?;
    Ok(card_input)
}

/// The card's figures of a two-family release on its main split: each family's classes alone and
/// the joint ones, the rows the families disagree on, their mean agreement.
fn second_opinion_card(
    spec: &ResolvedSpec,
    prepared: &Prepared,
    derived: &Derived,
    split: Split,
    rows: &[usize],
    report: Option<&crate::eval::EvalReport>,
) -> Option<card::SecondOpinionCard> {
    let (families, second, model) = (derived.families.as_ref()?, prepared.second_scorer.as_ref()?, spec.second_opinion.as_ref()?);
    let stats = |s: &Signal, flags: &[&str]| signal::stats_of_flags(&prepared.selection, &s.pairs, rows, flags);
    let (primary, second_alone) = (stats(&families.primary, &signal::FLAGS), stats(&families.second, &signal::FLAGS));
    let joint = stats(&derived.signal, &signal::joint::JOINT_FLAGS);
    let classes = primary
        .classes
        .into_iter()
        .zip(second_alone.classes)
        .zip(&joint.classes)
        .map(|(((name, p), (_, s)), (_, j))| (name, p, s, *j))
        .collect();
    let disagree = joint.flags.iter().find(|(f, _)| f == signal::joint::FLAG_FAMILIES_DISAGREE).map_or(0, |(_, n)| *n);
    let agreement: f64 = rows.iter().map(|&i| families.family_agreement[i]).sum();
    Some(card::SecondOpinionCard {
        primary_family: prepared.scorer.family().to_string(),
        second: second.identity().clone(),
        second_family: second.family().to_string(),
        second_weight_license: model.weight_license.clone(),
        second_demo_weights: model.demo_weights.map(|w| w.describe()),
        split: split.name().to_string(),
        rows: rows.len(),
        classes,
        disagree,
        mean_family_agreement: if rows.is_empty() { 0.0 } else { agreement / rows.len() as f64 },
        joint_rule: spec.joint_rule_of(SecondView::Family).map(|r| card::JointRuleCard::new(&r.file, &r.rule, report)),
    })
}

/// eval.json, when the spec names a gold file; returns the report, whose Markdown is the card's
/// evaluation section.
fn evaluate(
    spec: &ResolvedSpec,
    split: Split,
    table_rows: &records::RecordTable<'_>,
    main_rows: &[usize],
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<Option<crate::eval::EvalReport>, BuildError> {
    let Some(e) = &spec.gold else { return Ok(None) };
    let rows = &table_rows.release_rows(main_rows);
    let failed = |source| BuildError::Evaluation { gold_file: e.gold_file.clone(), source: Box::new(source) };
    let joint_rule = spec
        .joint_rule_table()
        .map(|rule| crate::eval::JointRuleInput { rule: rule.clone(), classes: signal::ClassThresholds::of(&spec.signal) });
    let families = crate::eval::FamilyOptions {
        joint_rule: joint_rule.as_ref(),
        details: joint_rule.is_some(),
        thresholds: Some(signal::ClassThresholds::of(&spec.signal)),
    };
    let options = crate::eval::EvalOptions::default();
    let mut report = crate::eval::evaluate_rows(&spec.release.id, split.name(), rows, &e.gold_file, &e.gold, &options, None, families)
        .map_err(failed)?;
    report.against = e.against.clone();
    if let Some(r) = &e.review_plan {
        crate::eval::add_review(&mut report, rows, &e.gold, &r.plan.review_input(Path::new(&r.file))).map_err(failed)?;
    }
    write(&dir.join("eval.json"), &manifest::to_json_bytes(&report))?;
    log(&format!("eval: {} gold judgements matched on the {} split", report.matched, report.split));
    Ok(Some(report))
}

/// images.sha256, build.lock and, when the spec names one, the publisher's public key.
fn write_lock(
    spec: &ResolvedSpec,
    prepared: &Prepared,
    scores: &[ImageScores],
    spec_json: serde_json::Value,
    dir: &Path,
) -> Result<BuildLock, BuildError> {
    let (hashes_text, image_hashes) = ImageHashesFile::render(
        prepared.selection.images.iter().zip(scores).map(|(i, s)| (i.image_index.as_str(), s.image_sha256.as_str())),
    );
    write(&dir.join(&image_hashes.path), hashes_text.as_bytes())?;
    let identity = prepared.scorer.identity();
    let lock = BuildLock {
        format: manifest::LOCK_FORMAT.into(),
        tool: ToolInfo::current(),
        spec_file: spec.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        spec_sha256: sha256_json(&spec_json),
        spec: spec_json,
        inputs: serde_json::to_value(&prepared.table.inputs).expect("plain data"),
        images: image_hashes,
        scorer: serde_json::to_value(identity).expect("plain data"),
        scorer_sha256: identity.hash(),
        second_scorer: prepared.second_scorer.as_ref().map(|s| serde_json::to_value(s.identity()).expect("plain data")),
        second_scorer_sha256: prepared.second_scorer.as_ref().map(|s| s.identity().hash()),
        prompt_set_sha256: prepared.prompt_set_hash.clone(),
        seed: spec.selection.seed,
        stage_keys: prepared.stage_keys.clone(),
    };
    write(&dir.join(LOCK_FILE), &manifest::to_json_bytes(&lock))?;
    if let Some(key) = &spec.publisher_key {
        write(&dir.join(crate::signing::PUBLISHER_KEY_FILE), key.pem.as_bytes())?;
    }
    Ok(lock)
}

/// croissant.json, then manifest.json over every file; returns the manifest's file list.
fn write_manifest(
    spec: &ResolvedSpec,
    demo_reasons: &[String],
    card_input: &CardInput<'_>,
    lock: &BuildLock,
    dir: &Path,
) -> Result<Vec<ManifestFile>, BuildError> {
    let rows_of: BTreeMap<String, u64> =
        card_input.splits.iter().flat_map(|s| s.pairs.shards.iter().chain(&s.images.shards).map(|f| (f.path.clone(), f.rows))).collect();
    let mut files = manifest::collect_files(dir, &|p| rows_of.get(p).copied()).map_err(io_err(dir))?;
    // croissant.json lists the shards' and images.sha256's digests, hashed once above for the
    // manifest, which then lists croissant.json too.
    let croissant = card::croissant::render(card_input, &files, &lock.images.path);
    write(&dir.join(card::croissant::CROISSANT_FILE), &croissant)?;
    let (path, sha256) = (card::croissant::CROISSANT_FILE.to_string(), crate::hashing::sha256_hex(&croissant));
    let at = files.partition_point(|f| f.path < path);
    files.insert(at, ManifestFile { path, bytes: croissant.len() as u64, sha256, rows: None });
    let manifest = Manifest {
        format: MANIFEST_FORMAT.into(),
        release_id: spec.release.id.clone(),
        version: spec.release.version.clone(),
        tier: spec.release.tier.name().into(),
        demo_reasons: demo_reasons.to_vec(),
        files: files.clone(),
    };
    write(&dir.join(MANIFEST_FILE), &manifest::to_json_bytes(&manifest))?;
    Ok(files)
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
