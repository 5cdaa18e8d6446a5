//! Agreement between reviewers beyond chance: Cohen's kappa for each pair of reviewers who
//! answered the same rows, and Fleiss' kappa over every row two or more reviewers answered (in
//! the form that allows a different number of reviewers per row).

use std::collections::BTreeMap;

/// Cohen's kappa of two raters' answers to the same items (each pair one item). None when
/// there is no item, or when chance agreement is total (both always gave one same answer).
pub fn cohen_kappa<T: Ord + Copy>(pairs: &[(T, T)]) -> Option<f64> {
    let n = pairs.len() as f64;
    if pairs.is_empty() {
        return None;
    }
    let observed = pairs.iter().filter(|(a, b)| a == b).count() as f64 / n;
    let (mut first, mut second) = (BTreeMap::new(), BTreeMap::new());
    for (a, b) in pairs {
        *first.entry(*a).or_insert(0.0) += 1.0;
        *second.entry(*b).or_insert(0.0) += 1.0;
    }
    let chance: f64 = first.iter().map(|(k, count)| count / n * second.get(k).copied().unwrap_or(0.0) / n).sum();
    (chance < 1.0).then(|| (observed - chance) / (1.0 - chance))
}

/// Fleiss' kappa over items each answered by two or more raters: `items[i]` holds item i's
/// answers. Items with fewer than two answers are skipped. None without such an item, or when
/// chance agreement is total.
pub fn fleiss_kappa<T: Ord + Copy>(items: &[Vec<T>]) -> Option<f64> {
    let items: Vec<&Vec<T>> = items.iter().filter(|answers| answers.len() >= 2).collect();
    if items.is_empty() {
        return None;
    }
    let mut totals: BTreeMap<T, f64> = BTreeMap::new();
    let mut agreement = 0.0;
    for answers in &items {
        let mut counts: BTreeMap<T, f64> = BTreeMap::new();
        for a in answers.iter() {
            *counts.entry(*a).or_insert(0.0) += 1.0;
            *totals.entry(*a).or_insert(0.0) += 1.0;
        }
        let n = answers.len() as f64;
        agreement += (counts.values().map(|c| c * c).sum::<f64>() - n) / (n * (n - 1.0));
    }
    let observed = agreement / items.len() as f64;
    let all: f64 = totals.values().sum();
    let chance: f64 = totals.values().map(|c| (c / all) * (c / all)).sum();
    (chance < 1.0).then(|| (observed - chance) / (1.0 - chance))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cohen_matches_the_textbook_example() {
        // 50 items: both yes 20, A yes B no 5, A no B yes 10, both no 15. po = 0.7, pe = 0.5, kappa 0.4.
        let mut pairs = Vec::new();
        pairs.extend(std::iter::repeat_n(('y', 'y'), 20));
        pairs.extend(std::iter::repeat_n(('y', 'n'), 5));
        pairs.extend(std::iter::repeat_n(('n', 'y'), 10));
        pairs.extend(std::iter::repeat_n(('n', 'n'), 15));
        assert!((cohen_kappa(&pairs).unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(cohen_kappa::<char>(&[]), None);
        assert_eq!(cohen_kappa(&[('y', 'y'), ('y', 'y')]), None, "chance agreement is total");
        assert!((cohen_kappa(&[('y', 'y'), ('n', 'n')]).unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn fleiss_matches_the_textbook_example() {
        // Fleiss (1971) as Wikipedia works it: 10 subjects, 14 raters, 5 categories; kappa 0.210.
        let table: [[usize; 5]; 10] = [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ];
        let items: Vec<Vec<usize>> =
            table.iter().map(|row| row.iter().enumerate().flat_map(|(category, &n)| std::iter::repeat_n(category, n)).collect()).collect();
        let kappa = fleiss_kappa(&items).unwrap();
        assert!((kappa - 0.20993).abs() < 1e-4, "{kappa}");
    }

    #[test]
    fn fleiss_with_two_raters_everywhere_is_close_to_cohen() {
        // With two raters Fleiss' kappa is Scott's pi; on balanced marginals it equals Cohen's.
        let pairs = [('y', 'y'), ('n', 'n'), ('y', 'n'), ('n', 'y'), ('y', 'y'), ('n', 'n')];
        let items: Vec<Vec<char>> = pairs.iter().map(|(a, b)| vec![*a, *b]).collect();
        assert!((fleiss_kappa(&items).unwrap() - cohen_kappa(&pairs).unwrap()).abs() < 1e-12);
        assert_eq!(fleiss_kappa(&[vec!['y']]), None, "single answers are skipped");
    }
}
