//! S3 and S4 in a build: the generation of each row's reasoning and each image's report (cached,
//! batched, sharded like S2's grounding answers), reading them, and the card's sections.

use super::{BuildError, BuildOptions};
use crate::card::narrative::{NarrativeCard, ReasoningCard, ReportCard};
use crate::diagnose::Diagnosis;
use crate::infer::{
    self, DecodingSettings, GenerationCache, GenerationJob, GenerationReport, ImageAnswers, ImageJob, RunOptions, Scorer, ShardSpec,
};
use crate::inputs::ResolvedSpec;
use crate::paraphrase::{self, ImageReport, References};
use crate::reason::{self, Reasoning, ReasoningPlan};
use crate::reports::Labeler;
use crate::select::Selection;
use crate::signal::Signal;
use crate::vocab::LABELS;

/// What S3 and S4 ask the model to write (empty before S3).
#[derive(Default)]
pub struct NarrativePlan {
    pub reasoning: Option<ReasoningPlan>,
    pub report: Option<Vec<GenerationJob>>,
}

impl NarrativePlan {
    pub fn new(spec: &ResolvedSpec, selection: &Selection, images: &[ImageJob]) -> NarrativePlan {
        NarrativePlan {
            reasoning: spec.prompts.reasoning.as_ref().map(|p| reason::plan(selection, p, images)),
            report: spec.prompts.report.as_ref().map(|p| paraphrase::plan(p, images)),
        }
    }

    /// (stage, jobs, max new tokens) of each generation this plan holds.
    pub fn stages<'a>(&'a self, spec: &ResolvedSpec) -> Vec<(&'static str, &'a [GenerationJob], usize)> {
        let mut out = Vec::new();
        if let (Some(plan), Some(p)) = (&self.reasoning, &spec.prompts.reasoning) {
            out.push(("reason", plan.jobs.as_slice(), p.max_new_tokens));
        }
        if let (Some(jobs), Some(p)) = (&self.report, &spec.prompts.report) {
            out.push(("report", jobs.as_slice(), p.max_new_tokens));
        }
        out
    }
}

/// The answers of each generation, in job order (None outside this run's shard).
pub struct NarrativeAnswers {
    pub reasoning: Option<Vec<Option<ImageAnswers>>>,
    pub report: Option<Vec<Option<ImageAnswers>>>,
    /// (stage, decoded, cached) per generation, for the log and `infer`'s report.
    pub counts: Vec<(&'static str, usize, usize)>,
    /// Cache entries that failed their check (set aside, decoded again).
    pub cache_problems: Vec<infer::CacheProblem>,
}

/// Runs (or reads from the cache) every generation of the plan.
pub fn generate(
    spec: &ResolvedSpec,
    plan: &NarrativePlan,
    scorer: &dyn Scorer,
    options: &BuildOptions,
    shard: Option<ShardSpec>,
) -> Result<NarrativeAnswers, BuildError> {
    let cache = GenerationCache::open(&options.cache_dir)?;
    let run = RunOptions { jobs: options.jobs, shard, progress: options.progress };
    let mut out = NarrativeAnswers { reasoning: None, report: None, counts: Vec::new(), cache_problems: Vec::new() };
    for (stage, jobs, max_new_tokens) in plan.stages(spec) {
        let GenerationReport { answers, cached, computed, cache_problems } =
            infer::run_generation(jobs, scorer, &generation_settings(spec, max_new_tokens), &cache, &run)?;
        out.counts.push((stage, computed, cached));
        out.cache_problems.extend(cache_problems);
        match stage {
            "reason" => out.reasoning = Some(answers),
            _ => out.report = Some(answers),
        }
    }
    Ok(out)
}

/// S3's and S4's decoding: greedy, with the spec's `model.thinking`.
pub fn generation_settings(spec: &ResolvedSpec, max_new_tokens: usize) -> DecodingSettings {
    DecodingSettings::greedy(max_new_tokens).thinking(spec.model.thinking)
}

/// Reads every answer of an unsharded run: S3's rows and traces, S4's reports.
pub fn derive(
    spec: &ResolvedSpec,
    selection: &Selection,
    signal: &Signal,
    diagnosis: Option<&Diagnosis>,
    plan: &NarrativePlan,
    answers: NarrativeAnswers,
) -> (Option<Reasoning>, Option<Vec<ImageReport>>) {
    let all = |a: Vec<Option<ImageAnswers>>| -> Vec<ImageAnswers> {
        a.into_iter().map(|a| a.expect("an unsharded run answers every job")).collect()
    };
    let tau = spec.signal.tau;
    let reasoning = plan.reasoning.as_ref().zip(answers.reasoning).map(|(plan, answers)| {
        let confidence: Vec<f64> = signal.pairs.iter().map(|p| p.confidence).collect();
        reason::derive(selection, plan, &all(answers), &confidence, (spec.signal.finding_present_min, tau), spec.model.thinking)
    });
    let reports = answers.report.map(|answers| {
        let labeler = Labeler::builtin();
        // The side S2 states for each finding NIH asserts, per image.
        let mut sides: Vec<Vec<(&'static str, &'static str)>> = vec![Vec::new(); selection.images.len()];
        if let Some(d) = diagnosis {
            for (i, row) in selection.rows.iter().enumerate().filter(|(_, r)| r.nih_label) {
                if let Some(side) = d.rows[i].side() {
                    sides[row.image].push((LABELS[row.label], side));
                }
            }
        }
        all(answers)
            .iter()
            .enumerate()
            .map(|(image, a)| {
                let trace = &signal.traces[image];
                let references = References { nih: &trace.nih_findings, model: &trace.model_findings, sides: &sides[image] };
                paraphrase::read(a, &references, &labeler, tau, spec.model.thinking)
            })
            .collect()
    });
    (reasoning, reports)
}

/// The card's S3 and S4 sections over one split's rows and images.
#[allow(clippy::too_many_arguments)]
pub fn card_section(
    spec: &ResolvedSpec,
    selection: &Selection,
    signal: &Signal,
    reasoning: Option<&Reasoning>,
    reports: Option<&[ImageReport]>,
    split: &str,
    rows: &[usize],
    images: &[usize],
) -> Option<NarrativeCard> {
    if reasoning.is_none() && reports.is_none() {
        return None;
    }
    Some(NarrativeCard {
        reasoning: reasoning.map(|r| ReasoningCard::summarise(selection, signal, r, split, rows, images)),
        report: reports.map(|r| {
            let conditioning = spec.prompts.report.as_ref().map(|p| p.conditioning);
            ReportCard::summarise(selection, signal, r, conditioning, split, images)
        }),
    })
}
