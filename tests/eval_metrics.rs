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

/// A NaN, an infinity or a negative zero among the scores never hangs a metric or panics: each
/// metric returns (NaN where the NaN counts), within a second, on a worker thread the test can
/// abandon. Before, average precision spun forever on a NaN.
#[test]
fn non_finite_scores_end_every_metric() {
    let nan = f64::NAN;
    let inputs: Vec<(&str, Vec<f64>)> = vec![
        ("one NaN", vec![0.9, nan, 0.2, 0.7, 0.1, 0.4]),
        ("all NaN", vec![nan; 6]),
        ("NaN and infinities", vec![f64::INFINITY, nan, f64::NEG_INFINITY, nan, -0.0, 0.0]),
    ];
    let labels = vec![true, false, true, false, true, false];
    for (name, scores) in inputs {
        let (s, y) = (scores.clone(), labels.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let results = [
                ("auroc", auroc(&s, &y)),
                ("average_precision", average_precision(&s, &y)),
                ("brier", brier(&s, &y)),
                ("ece", ece(&s, &y, 10)),
                ("precision_at_k", precision_at_k(&s, &y, 3)),
                ("lift_at_k", lift_at_k(&s, &y, 3)),
                ("bootstrap auroc", bootstrap_ci95(&s, &y, 200, 7, auroc).map(|(lo, _)| lo)),
                ("bootstrap average_precision", bootstrap_ci95(&s, &y, 200, 7, average_precision).map(|(lo, _)| lo)),
            ];
            tx.send(results.map(|(m, v)| (m, v.is_some()))).unwrap();
        });
        let done = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap_or_else(|_| panic!("{name}: a metric did not return"));
        assert!(done.iter().all(|(_, defined)| *defined), "{name}: {done:?}");
    }
}
