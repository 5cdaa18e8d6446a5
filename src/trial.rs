//! The free trial sample: stratified toward hard, low-confidence rows.
//! Trust classes get quotas (hardest class first). Within a class, rows are taken round-robin
//! across (label, view position, support devices present) cells, hardest first in each cell, so
//! no common label or view crowds out the rest. It is built to judge the signal, so it
//! over-represents doubtful labels on purpose and says nothing about NIH's overall error rate.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::hashing::stable_u64;
use crate::release_spec::TrialSpec;
use crate::select::{PairRow, Selection};
use crate::signal::{Signal, TrustClass};
use crate::vocab::LABELS;

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
    /// Rows taken per view position and per support-device presence, for the card.
    pub by_view: Vec<(String, usize)>,
    pub by_devices: Vec<(String, usize)>,
}

/// Hardest classes first: shortfalls in one stratum are filled from the next.
const FILL_ORDER: [TrustClass; 4] = [TrustClass::LikelyMislabeled, TrustClass::Suspect, TrustClass::Review, TrustClass::Trusted];

pub fn sample(selection: &Selection, signal: &Signal, spec: &TrialSpec, seed: u64) -> TrialSample {
    let signals = &signal.pairs;
    let total = spec.rows.min(selection.rows.len());
    let seed = seed.to_string();
    let cell = |i: usize| {
        let row = &selection.rows[i];
        (row.label, selection.images[row.image].view_position.as_str(), !signal.devices[row.image].is_empty())
    };
    // Candidates per stratum, lowest confidence margin first, ties broken by a seeded hash.
    let mut pools: Vec<Vec<usize>> = FILL_ORDER
        .iter()
        .map(|class| {
            let mut pool: Vec<usize> = (0..selection.rows.len()).filter(|&i| signals[i].trust_class == *class).collect();
            pool.sort_by(|&a, &b| {
                let margin = |i: usize| (signals[i].confidence - 0.5).abs();
                margin(a)
                    .total_cmp(&margin(b))
                    .then_with(|| tie(selection, &selection.rows[a], &seed).cmp(&tie(selection, &selection.rows[b], &seed)))
            });
            round_robin(pool, cell)
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
    let count = |key: &dyn Fn(usize) -> String| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        rows.iter().for_each(|&i| *counts.entry(key(i)).or_default() += 1);
        counts.into_iter().collect::<Vec<_>>()
    };
    let by_view = count(&|i| cell(i).1.to_string());
    let by_devices = count(&|i| if cell(i).2 { "devices present".into() } else { "no devices".into() });
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
    TrialSample { rows, requested: spec.rows, strata, by_view, by_devices }
}

/// Reorders a pool (hardest first) to take one row from each cell in turn, cells in key order,
/// each cell hardest first.
fn round_robin<K: Ord>(pool: Vec<usize>, cell: impl Fn(usize) -> K) -> Vec<usize> {
    let mut cells: BTreeMap<K, VecDeque<usize>> = BTreeMap::new();
    for i in pool {
        cells.entry(cell(i)).or_default().push_back(i);
    }
    let mut out = Vec::new();
    loop {
        let before = out.len();
        for queue in cells.values_mut() {
            out.extend(queue.pop_front());
        }
        if out.len() == before {
            return out;
        }
    }
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
    use super::{apportion, round_robin};

    #[test]
    fn round_robin_takes_one_per_cell_in_turn() {
        // Pool in hardness order; cells by parity: evens first by key order.
        let order = round_robin(vec![5, 1, 3, 2, 7, 4], |i| i % 2);
        assert_eq!(order, vec![2, 5, 4, 1, 3, 7]);
    }

    #[test]
    fn apportion_sums_to_total() {
        assert_eq!(apportion(1000, &[0.3, 0.3, 0.25, 0.15]), vec![300, 300, 250, 150]);
        assert_eq!(apportion(10, &[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0]), vec![4, 3, 3, 0]);
        assert_eq!(apportion(0, &[0.5, 0.5]), vec![0, 0]);
    }
}
