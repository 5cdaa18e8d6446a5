//! Folds split by patient: NIH's patients have many follow-up images, and a probe that saw one of
//! a patient's images would know the others' answers. Every image of a patient falls in one fold.
//!
//! Patients are ordered by the sha256 of the seed and their id, then each goes to the fold with
//! the fewest images so far (the lowest fold on a tie): deterministic, balanced in images, and
//! independent of the order the images come in.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// The fold of every image, `0..folds`, from each image's patient id.
pub fn patient_folds(patients: &[u32], folds: usize, seed: u64) -> Vec<usize> {
    assert!(folds >= 2, "at least two folds");
    let mut images_of: BTreeMap<u32, usize> = BTreeMap::new();
    for &p in patients {
        *images_of.entry(p).or_default() += 1;
    }
    let mut order: Vec<([u8; 32], u32)> = images_of.keys().map(|&p| (patient_key(seed, p), p)).collect();
    order.sort();
    let mut sizes = vec![0usize; folds];
    let mut fold_of: BTreeMap<u32, usize> = BTreeMap::new();
    for (_, patient) in order {
        let fold = (0..folds).min_by_key(|&f| (sizes[f], f)).expect("at least two folds");
        sizes[fold] += images_of[&patient];
        fold_of.insert(patient, fold);
    }
    patients.iter().map(|p| fold_of[p]).collect()
}

fn patient_key(seed: u64, patient: u32) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"bpals-release patient fold\0");
    h.update(seed.to_le_bytes());
    h.update(patient.to_le_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patients_images_share_a_fold_and_the_folds_are_balanced() {
        // 40 patients with 1 to 5 images each, listed out of order.
        let patients: Vec<u32> = (0..40u32).flat_map(|p| std::iter::repeat_n(p * 7 % 40, (p % 5 + 1) as usize)).collect();
        let folds = patient_folds(&patients, 5, 3);
        for (a, b) in patients.iter().zip(&folds) {
            for (c, d) in patients.iter().zip(&folds) {
                assert!(a != c || b == d, "patient {a} in folds {b} and {d}");
            }
        }
        let mut sizes = [0; 5];
        folds.iter().for_each(|&f| sizes[f] += 1);
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 5, "{sizes:?}");
    }

    #[test]
    fn the_order_of_the_images_does_not_move_a_patient() {
        let patients = [5u32, 9, 5, 2, 9, 7, 1, 1, 3];
        let folds = patient_folds(&patients, 3, 0);
        let mut reversed = patients;
        reversed.reverse();
        let mut back = patient_folds(&reversed, 3, 0);
        back.reverse();
        assert_eq!(folds, back);
        let many: Vec<u32> = (0..200).collect();
        assert_ne!(patient_folds(&many, 3, 0), patient_folds(&many, 3, 1), "the seed chooses the split");
    }
}
