//! Confident learning as a second view of every row (`signal.confident_learning`): a probe per
//! finding on the scorer's image features, trained on NIH's labels out of fold (folds split by
//! patient), and confident learning's rules on its probabilities. The zero-shot answers never
//! saw a label; the probes learn from NIH's, so they miss the labeler's systematic mistakes but
//! read a finding the model cannot name. The release carries both.

use std::collections::{HashMap, HashSet};

use super::{BuildError, BuildOptions, Prepared};
use crate::card::{ConfidentFindingCard, ConfidentLearningCard};
use crate::infer::FeatureDefinition;
use crate::inputs::ResolvedSpec;
use crate::shard::images::ImageIssues;
use crate::shard::pairs::ConfidentRow;
use crate::signal::confident_learning::report::{self, LabelIssues};
use crate::signal::confident_learning::FeatureMatrix;
use crate::vocab::{LABELS, NO_FINDING};

/// The file in the release with every finding's probes and rules (the format `label-issues`
/// writes): what a reader needs to repeat or question each flag.
pub const CONFIDENT_LEARNING_FILE: &str = "label_issues.json";

/// Confident learning's view of every selected image and label.
pub struct ConfidentView {
    pub issues: LabelIssues,
    /// Per selected image (the selection's order), per label of [`LABELS`]: the probe's
    /// probability that the finding is present and whether the label is an issue; None where
    /// the finding had no probe.
    cells: Vec<Vec<Option<(f64, bool)>>>,
    /// Per selected image, its labels named issues, by what NIH said (the image table's).
    images: Vec<ImageIssues>,
    /// What the features are, and their length.
    pub definition: FeatureDefinition,
    pub dims: usize,
}

impl ConfidentView {
    /// What the card says of it, with the card of the joint rule over both views where the
    /// spec names one.
    pub fn card(&self, rule: Option<crate::card::JointRuleCard>) -> ConfidentLearningCard {
        let settings = self.issues.probes.clone().unwrap_or_default();
        let findings = self
            .issues
            .findings
            .iter()
            .map(|f| ConfidentFindingCard {
                finding: f.finding.clone(),
                positives: f.rules.as_ref().map(|r| r.given[1]),
                negatives: f.rules.as_ref().map(|r| r.given[0]),
                positives_wrong: f.rules.as_ref().map(|r| r.positives_wrong),
                negatives_missed: f.rules.as_ref().map(|r| r.negatives_missed),
                issues_positive: f.issues.iter().filter(|i| i.nih_label).count(),
                issues_omitted: f.issues.iter().filter(|i| !i.nih_label).count(),
                skipped: f.probes.as_ref().and_then(|p| p.skipped.clone()),
            })
            .collect();
        ConfidentLearningCard {
            images: self.issues.images,
            features: self.definition.name(),
            dims: self.dims,
            folds: settings.folds,
            fold_seed: settings.fold_seed,
            grid: settings.grid,
            findings,
            rule,
        }
    }

    /// The labels of selected image `image` named issues.
    pub fn image_issues(&self, image: usize) -> &ImageIssues {
        &self.images[image]
    }

    /// Whether confident learning names the label of `image` and `label` an issue; None where
    /// the finding had no probe.
    pub fn label_issue(&self, image: usize, label: usize) -> Option<bool> {
        self.cells[image][label].map(|(_, issue)| issue)
    }

    /// The probe's out-of-fold probability that `label` is present on `image`; None where the
    /// finding had no probe.
    pub fn probability(&self, image: usize, label: usize) -> Option<f64> {
        self.cells[image][label].map(|(p, _)| p)
    }

    /// The view of one pair row: the probability that NIH's label is right, and the flag.
    pub fn row(&self, image: usize, label: usize, nih_label: bool) -> ConfidentRow {
        match self.cells[image][label] {
            Some((p, issue)) => ConfidentRow { confidence: Some(if nih_label { p } else { 1.0 - p }), label_issue: Some(issue) },
            None => ConfidentRow::default(),
        }
    }
}

/// sha256 of the probes' settings as build.lock records them (`signal.confident_learning`): what
/// a joint rule over confident learning records of the probabilities it was fitted on.
pub fn settings_sha256(settings: &crate::release_spec::ConfidentLearningSpec) -> String {
    crate::hashing::sha256_json(&serde_json::to_value(settings).expect("in-memory JSON serialization cannot fail"))
}

/// The view, when the spec asks for it: every selected image's features (from the feature
/// cache, else the scorer), then the probes and the rules over every image the build scored.
pub fn confident_view(
    spec: &ResolvedSpec,
    options: &BuildOptions,
    prepared: &Prepared,
    pool: &rayon::ThreadPool,
    log: &dyn Fn(&str),
) -> Result<Option<ConfidentView>, BuildError> {
    let Some(settings) = &spec.signal.confident_learning else { return Ok(None) };
    let (names, found) = super::selected_features(prepared, options, settings.features)?;
    for problem in &found.cache_problems {
        log(&format!("features: {problem}"));
    }
    let dims = found.vectors.first().map_or(0, Vec::len);
    log(&format!(
        "features: {} images x {dims} ({}), {} from the cache, {} computed",
        names.len(),
        settings.features.name(),
        found.cached,
        found.computed
    ));
    let features = FeatureMatrix::new(names.len(), dims, found.vectors.concat());
    let findings: Vec<String> = LABELS.iter().map(|l| l.to_string()).collect();
    let (issues, _) = pool
        .install(|| report::from_features(&names, &features, &prepared.table, &findings, settings, &|_| {}))
        .map_err(|source| BuildError::ConfidentLearning { spec: spec.path.clone(), source })?;

    let position: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let images = &prepared.selection.images;
    let mut cells = vec![vec![None; LABELS.len()]; images.len()];
    for (label, finding) in issues.findings.iter().enumerate() {
        let Some(probes) = finding.probes.as_ref().filter(|p| p.skipped.is_none()) else { continue };
        let flagged: HashSet<&str> = finding.issues.iter().map(|i| i.image_index.as_str()).collect();
        for (cell, image) in cells.iter_mut().zip(images) {
            let at = position[image.image_index.as_str()];
            cell[label] = Some((probes.probabilities[at], flagged.contains(image.image_index.as_str())));
        }
    }
    // Per image, its issues in vocabulary order ("No Finding" left out, as in the error trace).
    let selected: HashMap<&str, usize> = images.iter().enumerate().map(|(i, image)| (image.image_index.as_str(), i)).collect();
    let mut per_image = vec![ImageIssues::default(); images.len()];
    for (label, finding) in LABELS.iter().zip(&issues.findings).filter(|(l, _)| **l != NO_FINDING) {
        for issue in &finding.issues {
            let Some(&at) = selected.get(issue.image_index.as_str()) else { continue };
            let list = if issue.nih_label { &mut per_image[at].false_labels } else { &mut per_image[at].omissions };
            list.push(label);
        }
    }
    let probed = issues.findings.iter().filter(|f| f.rules.is_some()).count();
    let (wrong, missed) =
        issues.findings.iter().flat_map(|f| &f.issues).fold((0, 0), |(w, m), i| if i.nih_label { (w + 1, m) } else { (w, m + 1) });
    log(&format!(
        "confident learning: {probed} of {} findings probed ({} folds by patient); {wrong} of NIH's positives and {missed} of its omissions named issues",
        findings.len(),
        settings.folds
    ));
    Ok(Some(ConfidentView { issues, cells, images: per_image, definition: settings.features, dims }))
}
