//! The metric code agrees with scikit-learn (and a written-out ECE) to 1e-9 on golden cases,
//! ties included. Goldens: fixtures/eval/gen_metric_goldens.py.

use bpals_release::eval::metrics::*;

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    scores: Vec<f64>,
    labels: Vec<bool>,
    auroc: f64,
    average_precision: f64,
    brier: f64,
    ece10: f64,
    ece15: f64,
    k: usize,
    precision_at_k: f64,
}

fn cases() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/eval/metric_goldens.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn close(name: &str, metric: &str, got: Option<f64>, want: f64) {
    let got = got.unwrap_or_else(|| panic!("{name}: {metric} undefined"));
    assert!((got - want).abs() <= 1e-9, "{name}: {metric} = {got}, sklearn says {want}");
}

#[test]
fn metrics_match_the_reference_implementations() {
    let cases = cases();
    assert!(cases.len() >= 7);
    for c in &cases {
        close(&c.name, "auroc", auroc(&c.scores, &c.labels), c.auroc);
        close(&c.name, "average_precision", average_precision(&c.scores, &c.labels), c.average_precision);
        close(&c.name, "brier", brier(&c.scores, &c.labels), c.brier);
        close(&c.name, "ece10", ece(&c.scores, &c.labels, 10), c.ece10);
        close(&c.name, "ece15", ece(&c.scores, &c.labels, 15), c.ece15);
        close(&c.name, "precision_at_k", precision_at_k(&c.scores, &c.labels, c.k), c.precision_at_k);
    }
}

#[test]
fn undefined_metrics_say_so() {
    assert_eq!(auroc(&[0.1, 0.2], &[true, true]), None);
    assert_eq!(average_precision(&[0.1, 0.2], &[false, false]), None);
    assert_eq!(precision_at_k(&[0.1], &[true], 2), None);
    assert_eq!(lift_at_k(&[0.1, 0.2], &[false, false], 1), None);
}

#[test]
fn bootstrap_intervals_are_seeded_and_cover_the_estimate() {
    let c = &cases()[0];
    let a = bootstrap_ci95(&c.scores, &c.labels, 500, 7, auroc).unwrap();
    let b = bootstrap_ci95(&c.scores, &c.labels, 500, 7, auroc).unwrap();
    assert_eq!(a, b, "same seed, same interval");
    assert!(a.0 < c.auroc && c.auroc < a.1, "{a:?} covers {}", c.auroc);
    assert!(a.1 - a.0 < 0.3, "a 200-row AUROC interval is informative: {a:?}");
    let other = bootstrap_ci95(&c.scores, &c.labels, 500, 8, auroc).unwrap();
    assert_ne!(a, other, "the seed matters");
}

#[test]
fn lift_is_precision_over_prevalence() {
    let scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0];
    let labels = [true, true, false, false, false, false, false, false, false, true];
    assert_eq!(precision_at_k(&scores, &labels, 2), Some(1.0));
    assert!((lift_at_k(&scores, &labels, 2).unwrap() - 1.0 / 0.3).abs() < 1e-12);
}
