//! The curation rule: which images make the baseline, written down as code once, run once on the
//! real NIH metadata, and committed as a list (`specs/curated/`). Builds read the list, never
//! this rule, so a rebuild does not depend on it.
//!
//! The rule, in order:
//! 1. Evaluability first. Every image with an NIH expert box (S2 is measured against them) comes
//!    first, then every image with an expert relabel (Google's 2019 labels), each group in a
//!    seeded order keyed by image name.
//! 2. Coverage. Ahead of the relabelled images come, for each finding with fewer than
//!    `min_rows_per_finding` rows among the evaluable images, just enough images of it from
//!    the rest of NIH (seeded order) to reach that minimum.
//! 3. The rest of NIH, seeded, only if the above run short.
//! 4. The walk takes the candidates in that order. It skips an image whose patient already has
//!    `max_per_patient` images. Past the boxed and coverage images, it keeps the rows on a
//!    budget: an image with more labels than an even share of the rows left is taken only if
//!    the rows stay within `budget_slack` of that share's line (the boxed images carry more
//!    labels than the product's average, and the budget spreads the difference over the whole
//!    walk instead of spending it up front). An image whose finding is still short of its
//!    minimum is exempt from the budget. The walk
//!    never takes an image after which the exact counts could no longer be reached.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::hashing::stable_u64;
use crate::source::{NihTable, SourceError};
use crate::vocab::LABELS;

/// The rule's parameters (what `bpals-release curate` was run with is in the list's header).
#[derive(Debug, Clone, Serialize)]
pub struct CurationRule {
    pub images: usize,
    pub rows: usize,
    pub views: Vec<String>,
    pub max_per_patient: usize,
    pub min_rows_per_finding: usize,
    pub budget_slack: usize,
    pub seed: u64,
}

impl CurationRule {
    /// The product's baseline: 4,628 images, 6,598 NIH-asserted rows.
    pub fn baseline() -> CurationRule {
        CurationRule {
            images: 4628,
            rows: 6598,
            views: vec!["PA".into(), "AP".into()],
            max_per_patient: 8,
            min_rows_per_finding: 100,
            budget_slack: 3,
            seed: 20260526,
        }
    }
}

/// Why an image is in the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Boxed,
    Coverage,
    Relabelled,
    Rest,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Boxed => "NIH expert boxes",
            Tier::Coverage => "coverage of a rare finding",
            Tier::Relabelled => "expert relabels",
            Tier::Rest => "the rest of NIH",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CurateError {
    #[error(transparent)]
    Table(#[from] SourceError),
    #[error("the curation rule cannot reach its counts: {0}")]
    Unreachable(String),
}

/// The curated list and what it holds.
#[derive(Debug, Clone, Serialize)]
pub struct Curated {
    pub rule: CurationRule,
    /// Image names, sorted.
    pub images: Vec<String>,
    pub report: CurationReport,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CurationReport {
    pub images: usize,
    pub rows: usize,
    /// Images per tier (the reason each was taken).
    pub by_tier: BTreeMap<Tier, usize>,
    pub with_boxes: usize,
    pub with_relabels: usize,
    pub patients: usize,
    pub most_images_of_one_patient: usize,
    pub rows_per_label: BTreeMap<String, usize>,
    pub views: BTreeMap<String, usize>,
    /// Official split -> images, when the split lists were read.
    pub splits: BTreeMap<String, usize>,
    /// Candidates passed over, by reason.
    pub skipped: BTreeMap<String, usize>,
}

/// One candidate image, as the walk sees it.
struct Candidate {
    row: usize,
    tier: Tier,
    labels: u16,
}

impl Candidate {
    /// Its NIH-asserted rows: one per label.
    fn rows(&self) -> usize {
        self.labels.count_ones() as usize
    }
}

/// Runs the rule over the NIH table (with its boxes) and the names of the relabelled images.
pub fn curate(table: &NihTable, relabelled: &BTreeSet<String>, rule: &CurationRule) -> Result<Curated, CurateError> {
    let names = table.str_column("image_index")?;
    let views = table.str_column("view_position")?;
    let patients = table.u32_column("patient_id")?;
    let n_boxes = table.u32_column("n_boxes")?;
    let masks = table.label_masks()?;
    let splits = table.split_column()?;
    let seed = rule.seed.to_string();
    let key = |i: usize| (stable_u64(&["curated", &seed, names[i]]), i);

    let eligible: Vec<usize> = (0..names.len()).filter(|&i| rule.views.iter().any(|v| v == views[i])).collect();
    let boxed = |i: usize| n_boxes[i] > 0;
    let relabel = |i: usize| relabelled.contains(names[i]);
    let mut tiers: BTreeMap<usize, Tier> = BTreeMap::new();
    let mut evaluable_rows = [0usize; LABELS.len()];
    for &i in &eligible {
        let tier = if boxed(i) {
            Tier::Boxed
        } else if relabel(i) {
            Tier::Relabelled
        } else {
            continue;
        };
        tiers.insert(i, tier);
        add_rows(&mut evaluable_rows, masks[i]);
    }
    // Coverage: per finding short of the minimum, just enough images from the rest.
    let mut rest: Vec<usize> = eligible.iter().copied().filter(|i| !tiers.contains_key(i)).collect();
    rest.sort_by_cached_key(|&i| key(i));
    for (f, _) in LABELS.iter().enumerate() {
        for &i in &rest {
            if evaluable_rows[f] >= rule.min_rows_per_finding {
                break;
            }
            if masks[i] & (1 << f) != 0 && !tiers.contains_key(&i) {
                tiers.insert(i, Tier::Coverage);
                add_rows(&mut evaluable_rows, masks[i]);
            }
        }
    }
    let mut order: Vec<Candidate> =
        eligible.iter().map(|&i| Candidate { row: i, tier: tiers.get(&i).copied().unwrap_or(Tier::Rest), labels: masks[i] }).collect();
    // Boxed, then coverage, then relabelled, then the rest; seeded within each.
    order.sort_by_cached_key(|c| (c.tier, key(c.row)));

    let (taken, skipped) = walk(&order, &patients, rule)?;

    let mut report = CurationReport { images: taken.len(), skipped, ..Default::default() };
    let mut per_patient: BTreeMap<u32, usize> = BTreeMap::new();
    for c in &taken {
        let i = c.row;
        report.rows += c.rows();
        *report.by_tier.entry(c.tier).or_default() += 1;
        report.with_boxes += usize::from(boxed(i));
        report.with_relabels += usize::from(relabel(i));
        *per_patient.entry(patients[i]).or_default() += 1;
        for (f, label) in LABELS.iter().enumerate() {
            if c.labels & (1 << f) != 0 {
                *report.rows_per_label.entry(label.to_string()).or_default() += 1;
            }
        }
        *report.views.entry(views[i].to_string()).or_default() += 1;
        if let Some(split) = splits[i] {
            *report.splits.entry(split.to_string()).or_default() += 1;
        }
    }
    report.patients = per_patient.len();
    report.most_images_of_one_patient = per_patient.values().copied().max().unwrap_or(0);
    // Every finding, those with no row at all included.
    let rows_of = |label: &str| report.rows_per_label.get(label).copied().unwrap_or(0);
    if let Some((label, rows)) =
        LABELS.iter().filter(|l| **l != crate::vocab::NO_FINDING).map(|l| (*l, rows_of(l))).find(|(_, r)| *r < rule.min_rows_per_finding)
    {
        return Err(CurateError::Unreachable(format!(
            "{label} has {rows} rows, fewer than min_rows_per_finding {}",
            rule.min_rows_per_finding
        )));
    }
    let mut images: Vec<String> = taken.iter().map(|c| names[c.row].to_string()).collect();
    images.sort();
    Ok(Curated { rule: rule.clone(), images, report })
}

fn add_rows(rows: &mut [usize; LABELS.len()], mask: u16) {
    for (f, r) in rows.iter_mut().enumerate() {
        *r += usize::from(mask & (1 << f) != 0);
    }
}

/// The walk of rule step 4 over the ordered candidates.
fn walk<'a>(
    order: &'a [Candidate],
    patients: &[u32],
    rule: &CurationRule,
) -> Result<(Vec<&'a Candidate>, BTreeMap<String, usize>), CurateError> {
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut skip = |why: &str| *skipped.entry(why.to_string()).or_default() += 1;
    // Label counts of the candidates not yet passed, for the reachability check.
    let mut ahead = [0usize; LABELS.len() + 1];
    for c in order {
        ahead[c.rows()] += 1;
    }
    let mut taken: Vec<&Candidate> = Vec::with_capacity(rule.images);
    let (mut rows, mut label_rows) = (0usize, [0usize; LABELS.len()]);
    let mut per_patient: BTreeMap<u32, usize> = BTreeMap::new();
    // Where the budget starts: the first candidate past the boxed and coverage tiers.
    let mut budget_from: Option<(usize, usize)> = None;
    for c in order {
        ahead[c.rows()] -= 1;
        if taken.len() == rule.images {
            break;
        }
        let patient = per_patient.entry(patients[c.row]).or_default();
        if *patient >= rule.max_per_patient {
            skip("patient already has max_per_patient images");
            continue;
        }
        if c.tier >= Tier::Relabelled {
            let (n0, r0) = *budget_from.get_or_insert((taken.len(), rows));
            let short = (0..LABELS.len() - 1).any(|f| c.labels & (1 << f) != 0 && label_rows[f] < rule.min_rows_per_finding);
            let share = (rule.rows - r0) as f64 / (rule.images - n0) as f64;
            let allowed = r0 as f64 + share * (taken.len() + 1 - n0) as f64 + rule.budget_slack as f64;
            // Only an image above the even share can break the budget; one at or below it
            // always brings the running total back toward the line.
            if !short && c.rows() as f64 > share && (rows + c.rows()) as f64 > allowed {
                skip("over the row budget");
                continue;
            }
        }
        if !reachable(&ahead, rule.images - taken.len() - 1, (rule.rows as isize) - (rows + c.rows()) as isize) {
            skip("the exact counts would become unreachable");
            continue;
        }
        *patient += 1;
        rows += c.rows();
        add_rows(&mut label_rows, c.labels);
        taken.push(c);
    }
    if taken.len() != rule.images || rows != rule.rows {
        return Err(CurateError::Unreachable(format!(
            "the walk ended with {} images and {rows} rows (passed over: {skipped:?})",
            taken.len()
        )));
    }
    Ok((taken, skipped))
}

/// Can `n` more images from those `ahead` (a histogram of label counts) bring exactly `r` rows?
/// The sums of n counts cover every value between the n smallest and the n largest when, as in
/// NIH, single-label images abound; the walk's final check catches the case where they do not.
fn reachable(ahead: &[usize], n: usize, r: isize) -> bool {
    if r < 0 {
        return false;
    }
    let (mut least, mut most) = (0usize, 0usize);
    let (mut need_low, mut need_high) = (n, n);
    for (count, &k) in ahead.iter().enumerate() {
        let take = need_low.min(k);
        least += take * count;
        need_low -= take;
    }
    for (count, &k) in ahead.iter().enumerate().rev() {
        let take = need_high.min(k);
        most += take * count;
        need_high -= take;
    }
    need_low == 0 && least <= r as usize && r as usize <= most
}

impl Curated {
    /// The committed list: a commented header (counts, rule, inputs), then one name per line.
    pub fn to_text(&self, inputs: &[(String, String)]) -> String {
        let r = &self.rule;
        let mut out = format!(
            "# CXR14-BPALS curated baseline: {} images, {} NIH-asserted (image, label) rows.\n\
             # Written by `bpals-release curate` (rule in src/select/curate.rs): views {}, at most {} images per\n\
             # patient, at least {} rows per finding, row budget slack {}, seed {}.\n",
            self.report.images,
            self.report.rows,
            r.views.join("+"),
            r.max_per_patient,
            r.min_rows_per_finding,
            r.budget_slack,
            r.seed
        );
        for (name, sha) in inputs {
            out.push_str(&format!("# input {name} sha256 {sha}\n"));
        }
        for name in &self.images {
            out.push_str(name);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reachability_is_the_range_between_the_smallest_and_largest_sums() {
        // Images ahead by their count of labels: two with one, one with two, one with four.
        let ahead = [0, 2, 1, 0, 1];
        assert!(reachable(&ahead, 2, 2) && reachable(&ahead, 2, 6) && reachable(&ahead, 0, 0));
        assert!(!reachable(&ahead, 2, 1) && !reachable(&ahead, 2, 7) && !reachable(&ahead, 5, 8) && !reachable(&ahead, 0, -1));
    }
}
