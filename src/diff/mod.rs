//! `bpals-release diff A B`: where two releases' signals disagree, row by row. Typically ours
//! against a bring-your-own-VLM build of the same spec: per-label agreement of trust classes
//! with Cohen's kappa, the correlation of confidences, the class transitions and the rows that
//! moved most.

mod report;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use report::to_markdown;

use crate::eval::{read_release_rows, ReleaseRow};
use crate::manifest::Manifest;
use crate::signal::TrustClass;

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub dir: String,
    pub release_id: String,
    pub version: String,
    pub split: String,
    pub rows: usize,
}

/// Agreement of trust classes and confidences over a set of joined rows.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    pub n: usize,
    /// Rows whose trust class is the same in both releases.
    pub same_class: usize,
    pub agreement: Option<f64>,
    pub kappa: Option<f64>,
    /// Pearson correlation of `confidence`.
    pub confidence_pearson: Option<f64>,
    pub mean_abs_confidence_change: Option<f64>,
    /// The largest change of one question's p_yes, and of one raw logit, over the questions
    /// both rows hold (the numeric drift of a rerun on other hardware, say).
    pub max_abs_p_yes_change: Option<f64>,
    pub max_abs_logit_change: Option<f64>,
    /// Where both sides are two-model releases: the largest change of one of the second model's
    /// raw logits (the figures above are the primary model's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_max_abs_logit_change: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChangedRow {
    pub image_index: String,
    pub label: String,
    pub class_a: String,
    pub class_b: String,
    pub confidence_a: f64,
    pub confidence_b: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub a: Side,
    pub b: Side,
    pub only_in_a: usize,
    pub only_in_b: usize,
    pub overall: Agreement,
    pub per_label: BTreeMap<String, Agreement>,
    /// Rows by class in A, then class in B.
    pub transitions: BTreeMap<String, BTreeMap<String, usize>>,
    pub changed_rows: usize,
    /// The rows that changed class, largest confidence change first.
    pub top_changed: Vec<ChangedRow>,
    /// A two-family release's own families against each other (primary down, second across),
    /// for A and for B; left out for a one-model release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub families_a: Option<Agreement>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub families_b: Option<Agreement>,
}

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error(transparent)]
    Release(#[from] crate::manifest::ManifestError),
    #[error(transparent)]
    Rows(#[from] crate::eval::EvalError),
    #[error("{} and {} share no (image, label) row", a.display(), b.display())]
    NoSharedRows { a: std::path::PathBuf, b: std::path::PathBuf },
}

fn side(dir: &Path) -> Result<(Side, Vec<ReleaseRow>), DiffError> {
    let manifest = Manifest::read(dir)?;
    let (split, rows) = read_release_rows(dir)?;
    let side = Side { dir: dir.display().to_string(), release_id: manifest.release_id, version: manifest.version, split, rows: rows.len() };
    Ok((side, rows))
}

pub fn diff(a_dir: &Path, b_dir: &Path, top: usize) -> Result<DiffReport, DiffError> {
    let (a, a_rows) = side(a_dir)?;
    let (b, b_rows) = side(b_dir)?;
    let b_by_key: BTreeMap<(&str, &str), &ReleaseRow> = b_rows.iter().map(|r| ((r.image_index.as_str(), r.label.as_str()), r)).collect();
    let pairs: Vec<(&ReleaseRow, &ReleaseRow)> =
        a_rows.iter().filter_map(|r| b_by_key.get(&(r.image_index.as_str(), r.label.as_str())).map(|b| (r, *b))).collect();
    if pairs.is_empty() {
        return Err(DiffError::NoSharedRows { a: a_dir.to_path_buf(), b: b_dir.to_path_buf() });
    }
    let mut per_label = BTreeMap::new();
    for label in crate::vocab::LABELS {
        let of: Vec<(&ReleaseRow, &ReleaseRow)> = pairs.iter().copied().filter(|(x, _)| x.label == label).collect();
        if !of.is_empty() {
            per_label.insert(label.to_string(), agreement(&of));
        }
    }
    let mut transitions: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for (x, y) in &pairs {
        *transitions.entry(x.trust_class.clone()).or_default().entry(y.trust_class.clone()).or_default() += 1;
    }
    let mut changed: Vec<ChangedRow> = pairs
        .iter()
        .filter(|(x, y)| x.trust_class != y.trust_class)
        .map(|(x, y)| ChangedRow {
            image_index: x.image_index.clone(),
            label: x.label.clone(),
            class_a: x.trust_class.clone(),
            class_b: y.trust_class.clone(),
            confidence_a: x.confidence,
            confidence_b: y.confidence,
        })
        .collect();
    let changed_rows = changed.len();
    changed.sort_by(|p, q| {
        let (dp, dq) = ((p.confidence_b - p.confidence_a).abs(), (q.confidence_b - q.confidence_a).abs());
        dq.total_cmp(&dp).then_with(|| (&p.image_index, &p.label).cmp(&(&q.image_index, &q.label)))
    });
    changed.truncate(top);
    let (families_a, families_b) = (cross_family(&a_rows), cross_family(&b_rows));
    Ok(DiffReport {
        families_a,
        families_b,
        only_in_a: a_rows.len() - pairs.len(),
        only_in_b: b_rows.len() - pairs.len(),
        a,
        b,
        overall: agreement(&pairs),
        per_label,
        transitions,
        changed_rows,
        top_changed: changed,
    })
}

fn agreement(pairs: &[(&ReleaseRow, &ReleaseRow)]) -> Agreement {
    let class = |s: &str| TrustClass::parse(s).map_or(TrustClass::ALL.len(), |c| c as usize);
    let labels: Vec<(usize, usize)> = pairs.iter().map(|(x, y)| (class(&x.trust_class), class(&y.trust_class))).collect();
    let same = labels.iter().filter(|(x, y)| x == y).count();
    let n = pairs.len();
    let (ca, cb): (Vec<f64>, Vec<f64>) = pairs.iter().map(|(x, y)| (x.confidence, y.confidence)).unzip();
    Agreement {
        n,
        same_class: same,
        agreement: (n > 0).then(|| same as f64 / n as f64),
        kappa: cohen_kappa(&labels, TrustClass::ALL.len() + 1),
        confidence_pearson: pearson(&ca, &cb),
        mean_abs_confidence_change: (n > 0).then(|| ca.iter().zip(&cb).map(|(x, y)| (x - y).abs()).sum::<f64>() / n as f64),
        max_abs_p_yes_change: largest(pairs, |x, y, i| (p_yes(x, i) - p_yes(y, i)).abs()),
        max_abs_logit_change: largest(pairs, |x, y, i| {
            let d = |a: f32, b: f32| (f64::from(a) - f64::from(b)).abs();
            d(x.logit_yes[i], y.logit_yes[i]).max(d(x.logit_no[i], y.logit_no[i]))
        }),
        second_max_abs_logit_change: second_largest(pairs),
    }
}

/// The largest change of one of the second model's raw logits, over the pairs whose rows are
/// both from two-model releases (a NaN counts as the largest); None where none are.
fn second_largest(pairs: &[(&ReleaseRow, &ReleaseRow)]) -> Option<f64> {
    let d = |a: f32, b: f32| (f64::from(a) - f64::from(b)).abs();
    pairs
        .iter()
        .filter_map(|(x, y)| Some((x.families.as_ref()?, y.families.as_ref()?)))
        .flat_map(|(x, y)| {
            let yes = x.second_logit_yes.iter().zip(&y.second_logit_yes);
            yes.chain(x.second_logit_no.iter().zip(&y.second_logit_no)).map(|(a, b)| d(*a, *b))
        })
        .max_by(f64::total_cmp)
}

/// How far a two-family release's primary and second models agree with each other, as if they
/// were two releases: their classes and confidences row by row. None for a one-model release.
fn cross_family(rows: &[ReleaseRow]) -> Option<Agreement> {
    use crate::eval::FamilyView;
    let views: Vec<(ReleaseRow, ReleaseRow)> =
        rows.iter().map(|r| Some((r.family_view(FamilyView::Primary)?, r.family_view(FamilyView::Second)?))).collect::<Option<_>>()?;
    if views.is_empty() {
        return None;
    }
    let pairs: Vec<(&ReleaseRow, &ReleaseRow)> = views.iter().map(|(p, s)| (p, s)).collect();
    Some(agreement(&pairs))
}

/// A row's i-th question's p_yes, from its shipped logits.
fn p_yes(row: &ReleaseRow, i: usize) -> f64 {
    bpals_vlm::YesNo { logit_yes: row.logit_yes[i], logit_no: row.logit_no[i] }.p_yes()
}

/// The largest `change` over every question both rows of each pair hold (total over floats: a
/// NaN counts as the largest).
fn largest(pairs: &[(&ReleaseRow, &ReleaseRow)], change: impl Fn(&ReleaseRow, &ReleaseRow, usize) -> f64) -> Option<f64> {
    pairs
        .iter()
        .flat_map(|(x, y)| (0..x.logit_yes.len().min(y.logit_yes.len())).map(move |i| (*x, *y, i)))
        .map(|(x, y, i)| change(x, y, i))
        .max_by(f64::total_cmp)
}

/// Cohen's kappa of two raters over `k` categories: (p_o - p_e) / (1 - p_e). When both raters
/// put everything in one category (p_e = 1) it is 1 if they agree, else undefined.
pub fn cohen_kappa(pairs: &[(usize, usize)], k: usize) -> Option<f64> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let (mut a, mut b) = (vec![0f64; k], vec![0f64; k]);
    let mut observed = 0f64;
    for &(x, y) in pairs {
        a[x] += 1.0;
        b[y] += 1.0;
        observed += f64::from(u8::from(x == y));
    }
    let p_o = observed / n;
    let p_e: f64 = a.iter().zip(&b).map(|(x, y)| (x / n) * (y / n)).sum();
    if (1.0 - p_e).abs() < 1e-15 {
        return (p_o == 1.0).then_some(1.0);
    }
    Some((p_o - p_e) / (1.0 - p_e))
}

/// Pearson's r; None when either side is constant.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len() as f64;
    if x.len() < 2 {
        return None;
    }
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx.sqrt() * syy.sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kappa_matches_a_hand_computed_table() {
        // 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no: p_o = 0.7, p_e = 0.5, kappa = 0.4.
        let mut pairs = vec![(0, 0); 20];
        pairs.extend(vec![(0, 1); 5]);
        pairs.extend(vec![(1, 0); 10]);
        pairs.extend(vec![(1, 1); 15]);
        assert!((cohen_kappa(&pairs, 2).unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(cohen_kappa(&[(1, 1), (1, 1)], 3), Some(1.0));
        assert_eq!(cohen_kappa(&[], 2), None);
    }

    #[test]
    fn pearson_of_a_line_is_one() {
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(pearson(&[1.0, 1.0], &[1.0, 2.0]), None);
    }
}
