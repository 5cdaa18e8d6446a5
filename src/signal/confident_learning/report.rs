//! Confident learning over NIH's labels, end to end: images joined to NIH's metadata (patient and
//! labels), probes fitted or probabilities read, the rules applied per finding, and the report
//! `label_issues.json` carries.

use std::collections::HashMap;

use serde::Serialize;

use super::table::{OutOfFoldRow, Probability};
use super::{find_issues, out_of_fold, FeatureMatrix, FindingIssues, FindingLabels, FindingProbes, ProbeSettings};
use crate::source::NihTable;
use crate::vocab::LABELS;

/// The format line of `label_issues.json`.
pub const LABEL_ISSUES_FORMAT: &str = "bpals-release/label-issues/1";

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("image {0} is not in NIH's metadata")]
    UnknownImage(String),
    #[error("unknown finding {0:?}: expected one of {all}", all = LABELS.join(", "))]
    UnknownFinding(String),
    #[error("{finding}: {missing} of the {images} images have no probability (first: {first})")]
    MissingProbability { finding: String, missing: usize, images: usize, first: String },
    #[error("reading NIH's metadata")]
    Source(#[from] crate::source::SourceError),
}

/// What `label_issues.json` says.
#[derive(Debug, Clone, Serialize)]
pub struct LabelIssues {
    pub format: &'static str,
    /// How the probes were fitted; absent when the probabilities were given.
    pub probes: Option<ProbeSettings>,
    pub images: usize,
    pub findings: Vec<FindingReport>,
}

/// One finding: its probes (when fitted here) and what the rules found.
#[derive(Debug, Clone, Serialize)]
pub struct FindingReport {
    pub finding: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes: Option<FindingProbes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<FindingIssues>,
    /// The issues by image name, lowest self-confidence first, each with NIH's label.
    pub issues: Vec<Issue>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Issue {
    pub image_index: String,
    /// NIH's label of the finding: `true` is a positive the probe denies, `false` an omission.
    pub nih_label: bool,
    /// The out-of-fold probability that the finding is present.
    pub p: f64,
}

/// NIH's patient and labels of each named image.
struct Nih {
    patients: Vec<u32>,
    masks: Vec<u16>,
}

fn join(names: &[String], nih: &NihTable) -> Result<Nih, ReportError> {
    let index: HashMap<&str, usize> = nih.str_column("image_index")?.into_iter().enumerate().map(|(i, n)| (n, i)).collect();
    let (patients, masks) = (nih.u32_column("patient_id")?, nih.label_masks()?);
    let mut out = Nih { patients: Vec::with_capacity(names.len()), masks: Vec::with_capacity(names.len()) };
    for name in names {
        let &row = index.get(name.as_str()).ok_or_else(|| ReportError::UnknownImage(name.clone()))?;
        out.patients.push(patients[row]);
        out.masks.push(masks[row]);
    }
    Ok(out)
}

fn finding_index(finding: &str) -> Result<usize, ReportError> {
    crate::vocab::label_index(finding).ok_or_else(|| ReportError::UnknownFinding(finding.into()))
}

/// Probes on `features` (row i is image `names[i]`), then the rules; the report and the
/// out-of-fold table's rows.
pub fn from_features<'a>(
    names: &'a [String],
    features: &FeatureMatrix,
    nih: &NihTable,
    findings: &'a [String],
    settings: &ProbeSettings,
    done: &(dyn Fn(&str) + Sync),
) -> Result<(LabelIssues, Vec<OutOfFoldRow<'a>>), ReportError> {
    let joined = join(names, nih)?;
    let mut labels = Vec::with_capacity(findings.len());
    for f in findings {
        let bit = finding_index(f)?;
        labels.push(FindingLabels { finding: f.clone(), labels: joined.masks.iter().map(|m| m & (1 << bit) != 0).collect() });
    }
    let oof = out_of_fold(features, &joined.patients, &labels, settings, done);
    let mut reports = Vec::new();
    let mut rows = Vec::new();
    for ((probes, finding), name) in oof.findings.into_iter().zip(&labels).zip(findings) {
        let rules = probes.skipped.is_none().then(|| find_issues(&finding.labels, &probes.probabilities));
        if probes.skipped.is_none() {
            for (i, image_index) in names.iter().enumerate() {
                rows.push(OutOfFoldRow {
                    image_index,
                    patient_id: joined.patients[i],
                    fold: oof.folds[i] as u32,
                    finding: name,
                    nih_label: finding.labels[i],
                    p: probes.probabilities[i],
                });
            }
        }
        let issues = named_issues(rules.as_ref(), names, &finding.labels, &probes.probabilities);
        reports.push(FindingReport { finding: name.clone(), probes: Some(probes), rules, issues });
    }
    Ok((LabelIssues { format: LABEL_ISSUES_FORMAT, probes: Some(oof.settings), images: names.len(), findings: reports }, rows))
}

/// The rules on probabilities made elsewhere: every finding named needs a probability for every
/// image the file names.
pub fn from_probabilities(probabilities: &[Probability], nih: &NihTable, findings: &[String]) -> Result<LabelIssues, ReportError> {
    let mut names: Vec<String> = Vec::new();
    let mut row_of: HashMap<&str, usize> = HashMap::new();
    for p in probabilities {
        if !row_of.contains_key(p.image_index.as_str()) {
            row_of.insert(&p.image_index, names.len());
            names.push(p.image_index.clone());
        }
    }
    let joined = join(&names, nih)?;
    let mut reports = Vec::new();
    for finding in findings {
        let bit = finding_index(finding)?;
        let mut p = vec![f64::NAN; names.len()];
        for row in probabilities.iter().filter(|r| &r.finding == finding) {
            p[row_of[row.image_index.as_str()]] = row.p;
        }
        let missing: Vec<usize> = (0..names.len()).filter(|&i| p[i].is_nan()).collect();
        if let Some(&first) = missing.first() {
            return Err(ReportError::MissingProbability {
                finding: finding.clone(),
                missing: missing.len(),
                images: names.len(),
                first: names[first].clone(),
            });
        }
        let given: Vec<bool> = joined.masks.iter().map(|m| m & (1 << bit) != 0).collect();
        let rules = find_issues(&given, &p);
        let issues = named_issues(Some(&rules), &names, &given, &p);
        reports.push(FindingReport { finding: finding.clone(), probes: None, rules: Some(rules), issues });
    }
    Ok(LabelIssues { format: LABEL_ISSUES_FORMAT, probes: None, images: names.len(), findings: reports })
}

fn named_issues(rules: Option<&FindingIssues>, names: &[String], given: &[bool], p: &[f64]) -> Vec<Issue> {
    let Some(rules) = rules else { return Vec::new() };
    rules.issues.iter().map(|&i| Issue { image_index: names[i].clone(), nih_label: given[i], p: p[i] }).collect()
}
