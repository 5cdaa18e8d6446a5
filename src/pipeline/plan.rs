//! `build --dry-run`: the resolved plan, with stage keys and cache state. Reads the inputs and
//! hashes the images, but scores and decodes nothing and writes nothing.

use std::path::PathBuf;

use serde::Serialize;

use super::{prepare, BuildError, BuildOptions};
use crate::infer::{self, count_cached, GenerationCache, ScoreCache};
use crate::inputs::ResolvedSpec;

#[derive(Debug, Clone, Serialize)]
pub struct PlanStage {
    pub stage: String,
    pub key: String,
    pub status: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub release_id: String,
    pub spec: PathBuf,
    pub out: PathBuf,
    pub demo_reasons: Vec<String>,
    pub notes: Vec<String>,
    pub images: usize,
    pub rows: usize,
    pub cached_images: usize,
    pub splits: Vec<String>,
    /// Metadata inputs by file name, as hashed (and checked against their pins).
    pub inputs: std::collections::BTreeMap<String, crate::source::InputFile>,
    pub stages: Vec<PlanStage>,
}

pub fn plan(spec: &ResolvedSpec, options: &BuildOptions) -> Result<Plan, BuildError> {
    // A dry run never downloads: it plans with what this machine already has.
    let prepared = prepare(spec, &BuildOptions { offline: true, ..options.clone() })?;
    let cache = ScoreCache::open(&options.cache_dir)?;
    let cached = count_cached(&prepared.jobs, prepared.scorer.as_ref(), &prepared.questions_hash, &cache)?;
    let total = prepared.jobs.len();
    let second_cached = match &prepared.second_scorer {
        Some(second) => count_cached(&prepared.jobs, second.as_ref(), &prepared.questions_hash, &cache)?,
        None => 0,
    };
    let grounding = &prepared.grounding.jobs;
    let answered = infer::count_cached_answers(
        grounding,
        prepared.scorer.as_ref(),
        &super::decoding(spec),
        &GenerationCache::open(&options.cache_dir)?,
    )?;
    let status = |stage: &str| -> String {
        match stage {
            "ingest" => format!("{} metadata files, sha256 checked", prepared.table.inputs.len()),
            "select" => format!("{} images, {} rows", prepared.selection.images.len(), prepared.selection.rows.len()),
            "infer" => format!("{cached}/{total} images cached, {} to score with {}", total - cached, spec.model.backend),
            "infer_second_opinion" => match &spec.second_opinion {
                Some(second) => {
                    format!("{second_cached}/{total} images cached, {} to score with {}", total - second_cached, second.backend)
                }
                None => String::new(),
            },
            "generate" => format!(
                "{answered}/{} images' grounding answers cached, {} to decode with {}",
                grounding.len(),
                grounding.len() - answered,
                spec.model.backend
            ),
            "signal" => "derived from the scores (no cache: cheap and exact)".into(),
            "shard" => format!("splits {}", spec.output.splits.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")),
            _ => "rendered from templates".into(),
        }
    };
    let order = ["ingest", "select", "infer", "infer_second_opinion", "generate", "signal", "shard", "card"];
    let stages = order
        .iter()
        .filter_map(|s| Some(PlanStage { stage: s.to_string(), key: prepared.stage_keys.get(*s)?.clone(), status: status(s) }))
        .collect();
    Ok(Plan {
        release_id: spec.release.id.clone(),
        spec: spec.path.clone(),
        out: options.out.clone(),
        demo_reasons: prepared.demo_reasons,
        notes: prepared.notes,
        images: prepared.selection.images.len(),
        rows: prepared.selection.rows.len(),
        cached_images: cached,
        splits: spec.output.splits.iter().map(|s| s.name().to_string()).collect(),
        inputs: prepared.table.inputs.clone(),
        stages,
    })
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "plan for release {} ({})", self.release_id, self.spec.display())?;
        writeln!(f, "  output: {}", self.out.display())?;
        for (name, input) in &self.inputs {
            writeln!(f, "  input   {name}: {} bytes, sha256 {}", input.bytes, input.sha256)?;
        }
        for s in &self.stages {
            writeln!(f, "  {:<8} {}  {}", s.stage, &s.key[..12], s.status)?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        if !self.demo_reasons.is_empty() {
            writeln!(f, "  DEMO BUILD (publish will refuse it):")?;
            for r in &self.demo_reasons {
                writeln!(f, "    - {r}")?;
            }
        }
        writeln!(f, "dry run: nothing was scored or written")
    }
}
