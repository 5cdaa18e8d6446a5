//! The free trial sample: stratified toward hard, low-confidence rows by trust class.
//! It is built to judge the signal, so it over-represents doubtful labels on purpose and says
//! nothing about NIH's overall error rate.

use serde::Serialize;

use super::{PairRow, Selection};
use crate::hashing::stable_u64;
use crate::labels::LABELS;
use crate::signal::{PairSignal, TrustClass};
use crate::spec::TrialSpec;

/// What one stratum asked for and got; the card shows this table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Stratum {
    pub trust_class: String,
    pub share: f64,
    pub target: usize,
    pub available: usize,
    pub taken: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrialSample {
    /// Indices into the selection's rows, in row order.
    pub rows: Vec<usize>,
    pub requested: usize,
    pub strata: Vec<Stratum>,
}

/// Hardest classes first: shortfalls in one stratum are filled from the next.
const FILL_ORDER: [TrustClass; 4] = [TrustClass::LikelyMislabeled, TrustClass::Suspect, TrustClass::Review, TrustClass::Trusted];

pub fn sample(selection: &Selection, signals: &[PairSignal], spec: &TrialSpec, seed: u64) -> TrialSample {
    let total = spec.rows.min(selection.rows.len());
    let seed = seed.to_string();
    // Candidates per stratum, lowest confidence margin first, ties broken by a seeded hash.
    let mut pools: Vec<Vec<usize>> = FILL_ORDER
        .iter()
        .map(|class| {
            let mut pool: Vec<usize> = (0..selection.rows.len()).filter(|&i| signals[i].trust_class == *class).collect();
            pool.sort_by(|&a, &b| {
                let margin = |i: usize| (signals[i].confidence - 0.5).abs();
                margin(a).total_cmp(&margin(b)).then_with(|| tie(selection, &selection.rows[a], &seed).cmp(&tie(selection, &selection.rows[b], &seed)))
            });
            pool
        })
        .collect();
    let shares: Vec<f64> = FILL_ORDER.iter().map(|c| spec.quotas.get(c.name()).copied().unwrap_or(0.0)).collect();
    let targets = apportion(total, &shares);

    let mut taken = vec![0usize; FILL_ORDER.len()];
    let mut carry = 0;
    for s in 0..FILL_ORDER.len() {
        let want = targets[s] + carry;
        taken[s] = want.min(pools[s].len());
        carry = want - taken[s];
    }
    // Whatever no stratum in order could absorb goes to any stratum with rows left.
    for s in 0..FILL_ORDER.len() {
        let extra = carry.min(pools[s].len() - taken[s]);
        taken[s] += extra;
        carry -= extra;
    }
    let mut rows: Vec<usize> = Vec::with_capacity(total);
    for (s, pool) in pools.iter_mut().enumerate() {
        rows.extend_from_slice(&pool[..taken[s]]);
    }
    rows.sort_unstable();
    let strata = FILL_ORDER
        .iter()
        .enumerate()
        .map(|(s, class)| Stratum {
            trust_class: class.name().to_string(),
            share: shares[s],
            target: targets[s],
            available: pools[s].len(),
            taken: taken[s],
        })
        .collect();
    TrialSample { rows, requested: spec.rows, strata }
}

fn tie(selection: &Selection, row: &PairRow, seed: &str) -> u64 {
    stable_u64(&["trial", seed, &selection.images[row.image].image_index, LABELS[row.label]])
}

/// Largest-remainder apportionment of `total` by `shares` (which add up to 1).
fn apportion(total: usize, shares: &[f64]) -> Vec<usize> {
    let exact: Vec<f64> = shares.iter().map(|s| s * total as f64).collect();
    let mut out: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    let mut left = total - out.iter().sum::<usize>();
    for i in order {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::apportion;

    #[test]
    fn apportion_sums_to_total() {
        assert_eq!(apportion(1000, &[0.3, 0.3, 0.25, 0.15]), vec![300, 300, 250, 150]);
        assert_eq!(apportion(10, &[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0]), vec![4, 3, 3, 0]);
        assert_eq!(apportion(0, &[0.5, 0.5]), vec![0, 0]);
    }
}
