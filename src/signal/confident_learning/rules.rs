//! Confident learning's rules for one finding, one-vs-rest: the given label is NIH's (present or
//! absent), the probability is a probe's out-of-fold probability that the finding is present.
//!
//! Written from the paper (Northcutt, Jiang and Chuang, "Confident Learning: Estimating
//! Uncertainty in Dataset Labels", JAIR 70, 2021; section 3) and cleanlab's documentation of its
//! defaults, which the suite holds as the reference (`tests/python/test_confident_learning.py`):
//! - the per-class threshold t_j is the mean probability of class j over the examples given j,
//!   at least 2e-6 (a class nobody is given gets 2, which no probability reaches);
//! - an example counts into the confident joint C[given][true] for the class whose probability
//!   reaches its threshold (within 1e-6); where both do, the more probable one (absent on a tie);
//!   where neither does, nowhere. Every diagonal entry is at least 1;
//! - calibration scales each row of C to the count of examples given that class, then the whole
//!   to the number of examples, and rounds each row to whole counts that keep its total
//!   ([`round_keeping_total`]);
//! - pruning by noise rate: of the examples given class i, the C[i][j] (calibrated; one fewer
//!   where C[i][i] is 0, so that the class keeps an example) with the largest margin p_j - p_i
//!   are issues, unless the class has no more than one example. An example is not an issue when
//!   its given class is within 1e-6 of the more probable one;
//! - issues are ranked by self-confidence (the probability of the given class), lowest first.
//!
//! Where the reference breaks a tie by its sort's order (equal margins at the edge of a class's
//! count, equal self-confidences), this takes the lower index first: equal floating-point
//! probabilities are rare outside made-up data.

use serde::Serialize;

/// Probabilities within this distance below a threshold still reach it, and a given class
/// within it of the more probable one is kept (as in the reference).
const SLACK: f64 = 1e-6;
/// The lowest threshold.
const MIN_THRESHOLD: f64 = 2e-6;
/// The threshold of a class no example is given: no probability reaches it.
const UNREACHABLE: f64 = 2.0;
/// A class with at most this many examples keeps them all.
const MIN_EXAMPLES_PER_CLASS: u64 = 1;

/// What confident learning concludes about one finding's labels. Index 0 is "absent", 1 is
/// "present"; joints are `[given][true]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingIssues {
    /// Examples given each class (NIH's negatives, NIH's positives).
    pub given: [u64; 2],
    /// Per class, the mean probability of that class over the examples given it.
    pub thresholds: [f64; 2],
    /// Confident counts of (given, true), before calibration.
    pub confident_joint: [[u64; 2]; 2],
    /// The confident joint calibrated to the given counts and rounded: the estimated counts of
    /// (given, true).
    pub calibrated_joint: [[u64; 2]; 2],
    /// Estimated share of NIH's positives whose finding is absent: calibrated[1][0] / given[1].
    pub positives_wrong: f64,
    /// Estimated share of NIH's negatives whose finding is present: calibrated[0][1] / given[0].
    pub negatives_missed: f64,
    /// The label issues (example indices), lowest self-confidence first.
    #[serde(skip)]
    pub issues: Vec<usize>,
}

/// Confident learning on one finding: `given[i]` is NIH's label of example i, `p[i]` the
/// out-of-fold probability that the finding is present.
pub fn find_issues(given: &[bool], p: &[f64]) -> FindingIssues {
    assert_eq!(given.len(), p.len(), "one probability per label");
    // Probability of class c for example i.
    let prob = |i: usize, c: usize| if c == 1 { p[i] } else { 1.0 - p[i] };
    let class = |i: usize| usize::from(given[i]);

    let mut counts = [0u64; 2];
    let mut sums = [0f64; 2];
    for i in 0..p.len() {
        counts[class(i)] += 1;
        sums[class(i)] += prob(i, class(i));
    }
    let thresholds = [0, 1].map(|c| if counts[c] == 0 { UNREACHABLE } else { (sums[c] / counts[c] as f64).max(MIN_THRESHOLD) });

    let mut confident_joint = [[0u64; 2]; 2];
    for i in 0..p.len() {
        let reaches = [0, 1].map(|c| prob(i, c) >= thresholds[c] - SLACK);
        let truth = match reaches {
            [true, true] => more_probable(p[i]),
            [true, false] => 0,
            [false, true] => 1,
            [false, false] => continue,
        };
        confident_joint[class(i)][truth] += 1;
    }
    for (c, row) in confident_joint.iter_mut().enumerate() {
        row[c] = row[c].max(1);
    }
    let calibrated_joint = calibrate(&confident_joint, counts);

    let mut issues = Vec::new();
    for c in 0..2 {
        let other = 1 - c;
        let kept_one = usize::from(calibrated_joint[c][c] == 0);
        let wanted = (calibrated_joint[c][other] as usize).saturating_sub(kept_one);
        if counts[c] <= MIN_EXAMPLES_PER_CLASS || wanted == 0 {
            continue;
        }
        // The examples given c, largest margin toward the other class first (lower index on a tie).
        let margin = |i: usize| prob(i, other) - prob(i, c);
        let mut members: Vec<usize> = (0..p.len()).filter(|&i| class(i) == c).collect();
        members.sort_by(|&a, &b| margin(b).total_cmp(&margin(a)).then(a.cmp(&b)));
        let doubted = |i: usize| {
            let (mine, theirs) = (prob(i, c) + SLACK, prob(i, other));
            theirs > mine || (theirs == mine && c == 1)
        };
        issues.extend(members.into_iter().take(wanted).filter(|&i| doubted(i)));
    }
    issues.sort_by(|&a, &b| prob(a, class(a)).total_cmp(&prob(b, class(b))).then(a.cmp(&b)));

    let share = |wrong: u64, of: u64| if of == 0 { 0.0 } else { wrong as f64 / of as f64 };
    FindingIssues {
        given: counts,
        thresholds,
        confident_joint,
        calibrated_joint,
        positives_wrong: share(calibrated_joint[1][0], counts[1]),
        negatives_missed: share(calibrated_joint[0][1], counts[0]),
        issues,
    }
}

/// The more probable class: present only when its probability is above one half.
fn more_probable(p: f64) -> usize {
    usize::from(p > 1.0 - p)
}

/// Each row scaled to its class's count, the whole to the number of examples, each row then
/// rounded to whole counts that keep its total.
fn calibrate(joint: &[[u64; 2]; 2], counts: [u64; 2]) -> [[u64; 2]; 2] {
    let mut scaled = [[0f64; 2]; 2];
    for c in 0..2 {
        let row_sum = (joint[c][0] + joint[c][1]).max(1) as f64;
        for t in 0..2 {
            scaled[c][t] = joint[c][t] as f64 / row_sum * counts[c] as f64;
        }
    }
    let total: f64 = scaled.iter().flatten().sum();
    let examples = (counts[0] + counts[1]) as f64;
    for v in scaled.iter_mut().flatten() {
        *v = *v / total.max(1.0) * examples;
    }
    scaled.map(round_keeping_total)
}

/// Rounds a row to whole numbers whose sum is the row's sum rounded, as the reference does: each
/// entry to the nearest (halves to even), then, while the sum is short, one more to the entry
/// rounded down furthest (the later on a tie), or while it is over, one less from the entry
/// rounded up furthest (the earlier on a tie).
fn round_keeping_total(row: [f64; 2]) -> [u64; 2] {
    let mut ints = row.map(f64::round_ties_even);
    let total = (row[0] + row[1]).round();
    while (ints[0] + ints[1] - total).abs() > SLACK {
        let up = ints[0] + ints[1] < total;
        let moved = |k: usize| row[k] - ints[k];
        let k = match (up, moved(0).total_cmp(&moved(1))) {
            (true, std::cmp::Ordering::Greater) => 0,
            (true, _) => 1,
            (false, std::cmp::Ordering::Greater) => 1,
            (false, _) => 0,
        };
        ints[k] += if up { 1.0 } else { -1.0 };
    }
    ints.map(|v| v.max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confidently_contradicted_positive_is_the_issue() {
        // Four positives the probe agrees with, one it confidently denies; five clean negatives.
        let given = [true, true, true, true, true, false, false, false, false, false];
        let p = [0.9, 0.8, 0.85, 0.95, 0.05, 0.1, 0.2, 0.1, 0.15, 0.05];
        let r = find_issues(&given, &p);
        assert_eq!(r.given, [5, 5]);
        assert!((r.thresholds[1] - 0.71).abs() < 1e-12, "{r:?}");
        assert_eq!(r.confident_joint[1][0], 1, "{r:?}");
        assert_eq!(r.issues, vec![4]);
        assert!((r.positives_wrong - 0.2).abs() < 1e-12);
        assert_eq!(r.negatives_missed, 0.0);
    }

    #[test]
    fn an_omission_is_found_among_the_negatives_and_ranked_by_self_confidence() {
        let given = [true, true, true, false, false, false, false, false];
        let p = [0.9, 0.8, 0.85, 0.1, 0.97, 0.2, 0.88, 0.1];
        let r = find_issues(&given, &p);
        // Both omissions, the more confident one first.
        assert_eq!(r.issues, vec![4, 6], "{r:?}");
    }

    #[test]
    fn no_positive_means_no_positive_can_be_wrong() {
        let r = find_issues(&[false, false, false], &[0.1, 0.2, 0.9]);
        assert_eq!(r.thresholds[1], UNREACHABLE);
        assert_eq!(r.calibrated_joint[1], [0, 0]);
        assert_eq!(r.positives_wrong, 0.0);
    }

    #[test]
    fn rounding_keeps_each_row_total() {
        assert_eq!(round_keeping_total([2.5, 2.5]), [2, 3]);
        assert_eq!(round_keeping_total([1.5, 1.5]), [1, 2]);
        assert_eq!(round_keeping_total([0.5, 0.5]), [0, 1]);
        assert_eq!(round_keeping_total([1.2, 3.8]), [1, 4]);
        assert_eq!(round_keeping_total([4.0, 0.0]), [4, 0]);
    }
}
