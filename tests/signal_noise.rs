//! Synthetic-noise recovery: flip a known fraction of labels, score with a scorer of known
//! separability, and check that the signal finds the flips as often as the separability predicts.
//!
//! The scorer gives every question about an image's label the same logit
//! z = +mu (finding truly present) or -mu (absent), plus Gaussian noise N(0, sigma^2). Ranking
//! rows by agreement is then ranking by z' = z for NIH-positive rows and -z for NIH-negative
//! ones: z' ~ N(+mu, sigma^2) where NIH is right and N(-mu, sigma^2) where it was flipped. Both
//! precision@K (K = number of flips) and the precision and recall of `likely_mislabeled` follow
//! in closed form from mu, sigma and the flip rate.

use bpals_release::eval::metrics::{precision_at_k, Resampler};
use bpals_release::infer::{ImageScores, YesNo};
use bpals_release::release_spec;
use bpals_release::select::{ImageRef, PairRow, Selection};
use bpals_release::signal::{self, TrustClass};
use bpals_release::vocab::label_index;

const N: usize = 20_000;
const FLIP_RATE: f64 = 0.10;
const MU: f64 = 1.5;
const SIGMA: f64 = 1.0;

/// Standard normal CDF (Abramowitz & Stegun 7.1.26 erf, |error| < 1.5e-7).
fn phi(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

fn gaussian(rng: &mut Resampler) -> f64 {
    let u1 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[test]
fn the_signal_recovers_flipped_labels_as_the_separability_predicts() {
    let spec = release_spec::load_with_env(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/s1a.yaml"), |_| None).unwrap();
    let questions = spec.prompts.questions();
    let label = label_index("Effusion").unwrap();
    let mut rng = Resampler::new(42);

    let mut images = Vec::with_capacity(N);
    let mut rows = Vec::with_capacity(N);
    let mut scores = Vec::with_capacity(N);
    let mut flipped = Vec::with_capacity(N);
    for i in 0..N {
        let truth = (rng.next_u64() % 10) < 3;
        let flip = ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < FLIP_RATE;
        let nih = truth != flip;
        let z = if truth { MU } else { -MU } + SIGMA * gaussian(&mut rng);
        images.push(ImageRef {
            image_index: format!("{i:08}_000.png"),
            patient_id: i as u32,
            view_position: "PA".into(),
            official_split: None,
            labels: if nih { 1 << label } else { 0 },
        });
        rows.push(PairRow { image: i, label, nih_label: nih });
        let s: Vec<YesNo> =
            questions.iter().map(|q| YesNo { logit_yes: if q.target == "Effusion" { z as f32 } else { 0.0 }, logit_no: 0.0 }).collect();
        scores.push(ImageScores { image_sha256: format!("{i:064x}"), scores: s });
        flipped.push(flip);
    }
    let selection = Selection { images, rows, candidates: N, capped: false };
    let sig = signal::derive(&selection, &scores, &questions, &signal::Rules::new(&spec.signal, None));

    // precision@K over rows ranked by low agreement, K = the number of flips.
    let flips = flipped.iter().filter(|f| **f).count();
    let doubt: Vec<f64> = sig.pairs.iter().map(|p| -p.agreement).collect();
    let got = precision_at_k(&doubt, &flipped, flips).unwrap();
    // Predicted: the threshold t that takes a FLIP_RATE share of rows; precision = Phi((t + mu) / sigma).
    let share_below = |t: f64| FLIP_RATE * phi((t + MU) / SIGMA) + (1.0 - FLIP_RATE) * phi((t - MU) / SIGMA);
    let (mut lo, mut hi) = (-10.0, 10.0);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if share_below(mid) < FLIP_RATE {
            lo = mid
        } else {
            hi = mid
        }
    }
    let predicted = phi((lo + MU) / SIGMA);
    eprintln!("precision@K {got:.4}, predicted {predicted:.4}");
    assert!((got - predicted).abs() < 0.03, "precision@K {got:.4}, separability predicts {predicted:.4}");

    // likely_mislabeled = agreement below suspect_min_agreement, i.e. z' < logit(threshold).
    let cut = {
        let a = spec.signal.suspect_min_agreement;
        (a / (1.0 - a)).ln()
    };
    let tp = FLIP_RATE * phi((cut + MU) / SIGMA);
    let fp = (1.0 - FLIP_RATE) * phi((cut - MU) / SIGMA);
    let flagged: Vec<bool> = sig.pairs.iter().map(|p| p.trust_class == TrustClass::LikelyMislabeled).collect();
    let hits = flagged.iter().zip(&flipped).filter(|(f, t)| **f && **t).count() as f64;
    let flagged_n = flagged.iter().filter(|f| **f).count() as f64;
    let (precision, recall) = (hits / flagged_n, hits / flips as f64);
    eprintln!(
        "likely_mislabeled precision {precision:.4} (predicted {:.4}), recall {recall:.4} (predicted {:.4})",
        tp / (tp + fp),
        phi((cut + MU) / SIGMA)
    );
    assert!((precision - tp / (tp + fp)).abs() < 0.03, "likely_mislabeled precision {precision:.4} vs {:.4}", tp / (tp + fp));
    assert!((recall - phi((cut + MU) / SIGMA)).abs() < 0.03, "likely_mislabeled recall {recall:.4} vs {:.4}", phi((cut + MU) / SIGMA));
    // And the flips are far more likely than chance to be flagged.
    assert!(precision > 3.0 * FLIP_RATE);
}
