//! Evaluation metrics, defined as the reference implementations define them, ties included:
//! AUROC and average precision as scikit-learn computes them, the Brier score, an ECE with
//! equal-width bins, precision@K and Lift@K, and percentile bootstrap intervals with a seeded,
//! platform-independent resampler. Golden cases from scikit-learn live in fixtures/eval/.
//!
//! Scores are finite by the time they get here (the scorers refuse NaN and infinity where they
//! are made), but every sort and every run of ties is total over floats all the same: a NaN
//! that slipped through gives a NaN metric, never a loop that fails to advance.

/// Whether two scores tie: equal under the total order, so a NaN ties with itself (`==` would
/// leave it alone, and a run of ties starting at it empty).
fn same(a: f64, b: f64) -> bool {
    a.total_cmp(&b).is_eq() || a == b
}

/// Area under the ROC curve: the Mann-Whitney statistic with ties counted half, which equals
/// scikit-learn's trapezoidal `roc_auc_score`. None when only one class is present.
pub fn auroc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    let positives = labels.iter().filter(|y| **y).count();
    let negatives = labels.len() - positives;
    if positives == 0 || negatives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Midranks: tied scores share the mean of the ranks they span (1-based).
    let mut rank_sum_pos = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && same(scores[order[j + 1]], scores[order[i]]) {
            j += 1;
        }
        let midrank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_pos += midrank * order[i..=j].iter().filter(|&&k| labels[k]).count() as f64;
        i = j + 1;
    }
    let p = positives as f64;
    Some((rank_sum_pos - p * (p + 1.0) / 2.0) / (p * negatives as f64))
}

/// Average precision as scikit-learn's `average_precision_score`: the sum over distinct score
/// thresholds, descending, of (recall step) x precision. None without positives.
pub fn average_precision(scores: &[f64], labels: &[bool]) -> Option<f64> {
    let positives = labels.iter().filter(|y| **y).count();
    if positives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let (mut tp, mut fp, mut ap, mut last_recall) = (0usize, 0usize, 0.0, 0.0);
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j < order.len() && same(scores[order[j]], scores[order[i]]) {
            if labels[order[j]] {
                tp += 1;
            } else {
                fp += 1;
            }
            j += 1;
        }
        let recall = tp as f64 / positives as f64;
        let precision = tp as f64 / (tp + fp) as f64;
        ap += (recall - last_recall) * precision;
        last_recall = recall;
        i = j;
    }
    Some(ap)
}

/// Mean squared difference between the probability and the 0/1 outcome.
pub fn brier(probs: &[f64], labels: &[bool]) -> Option<f64> {
    if probs.is_empty() {
        return None;
    }
    let sum: f64 = probs.iter().zip(labels).map(|(p, y)| (p - f64::from(u8::from(*y))).powi(2)).sum();
    Some(sum / probs.len() as f64)
}

/// Expected calibration error over `bins` equal-width bins of [0, 1] (a probability of exactly 1
/// falls in the last bin): the count-weighted mean of |observed rate - mean probability|.
pub fn ece(probs: &[f64], labels: &[bool], bins: usize) -> Option<f64> {
    if probs.is_empty() || bins == 0 {
        return None;
    }
    let mut count = vec![0usize; bins];
    let mut sum_p = vec![0.0; bins];
    let mut sum_y = vec![0.0; bins];
    for (p, y) in probs.iter().zip(labels) {
        let b = ((p * bins as f64).floor() as usize).min(bins - 1);
        count[b] += 1;
        sum_p[b] += p;
        sum_y[b] += f64::from(u8::from(*y));
    }
    let n = probs.len() as f64;
    Some((0..bins).filter(|&b| count[b] > 0).map(|b| (sum_y[b] - sum_p[b]).abs() / n).sum())
}

/// Share of positives among the K highest scores (ties broken by input order).
pub fn precision_at_k(scores: &[f64], labels: &[bool], k: usize) -> Option<f64> {
    if k == 0 || k > scores.len() {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    Some(order[..k].iter().filter(|&&i| labels[i]).count() as f64 / k as f64)
}

/// precision@K over the base rate: how many times better than picking K at random.
pub fn lift_at_k(scores: &[f64], labels: &[bool], k: usize) -> Option<f64> {
    let prevalence = labels.iter().filter(|y| **y).count() as f64 / labels.len().max(1) as f64;
    if prevalence == 0.0 {
        return None;
    }
    precision_at_k(scores, labels, k).map(|p| p / prevalence)
}

/// A small seeded generator (SplitMix64): the same resamples on every platform and version.
pub struct Resampler(u64);

impl Resampler {
    pub fn new(seed: u64) -> Self {
        Resampler(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform index below `n` (rejection sampling, so no modulo bias).
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return (x % n) as usize;
            }
        }
    }
}

/// Percentile bootstrap: resample rows with replacement `resamples` times, evaluate `metric` on
/// each (skipping resamples where it is undefined), return the (2.5%, 97.5%) percentiles
/// with linear interpolation. None when fewer than half the resamples are defined.
pub fn bootstrap_ci95(
    scores: &[f64],
    labels: &[bool],
    resamples: usize,
    seed: u64,
    metric: impl Fn(&[f64], &[bool]) -> Option<f64>,
) -> Option<(f64, f64)> {
    let n = scores.len();
    if n == 0 {
        return None;
    }
    let (mut s, mut y) = (vec![0.0; n], vec![false; n]);
    bootstrap_interval(resamples, seed, |rng| {
        for i in 0..n {
            let k = rng.below(n);
            s[i] = scores[k];
            y[i] = labels[k];
        }
        metric(&s, &y)
    })
}

/// The (2.5%, 97.5%) percentiles of `statistic` over `resamples` draws from one seeded
/// resampler, skipping draws where it is undefined; None when fewer than half are defined.
/// Percentiles interpolate linearly, except among unbounded values (an infinite ratio), where
/// the nearest rank is taken.
pub fn bootstrap_interval(resamples: usize, seed: u64, mut statistic: impl FnMut(&mut Resampler) -> Option<f64>) -> Option<(f64, f64)> {
    let mut rng = Resampler::new(seed);
    let mut values: Vec<f64> = (0..resamples).filter_map(|_| statistic(&mut rng)).collect();
    if values.is_empty() || values.len() * 2 < resamples {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| if values.iter().all(|v| v.is_finite()) { percentile(&values, q) } else { nearest_rank(&values, q) };
    Some((at(2.5), at(97.5)))
}

/// The nearest-rank percentile of sorted values.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    sorted[((q / 100.0 * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// Linear-interpolation percentile of sorted values (numpy's default method).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}
