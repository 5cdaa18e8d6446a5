//! Per-label calibration of `confidence`: Platt scaling, p' = sigmoid(a * logit(p) + b), or
//! temperature scaling, p' = sigmoid(logit(p) / T). Fitted by Newton's method on the log loss,
//! with Platt's smoothed targets ((N+ + 1) / (N+ + 2) and 1 / (N- + 2)), which keep the fit
//! finite even on separable data. Deterministic: no randomness, fixed iteration order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const CALIBRATION_FORMAT: &str = "bpals-calibration/1";
/// Labels with fewer judgements, or only one class, keep the identity map.
pub const MIN_JUDGEMENTS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Platt,
    Temperature,
}

/// One label's map; `a = 1, b = 0` is the identity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelMap {
    pub a: f64,
    pub b: f64,
    pub n: usize,
    pub positives: usize,
}

impl LabelMap {
    pub const IDENTITY: LabelMap = LabelMap { a: 1.0, b: 0.0, n: 0, positives: 0 };

    pub fn apply(&self, p: f64) -> f64 {
        if self.a == 1.0 && self.b == 0.0 {
            return p; // exactly the identity, not a round trip through logit
        }
        sigmoid(self.a * logit(p) + self.b)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub format: String,
    pub method: Method,
    /// Where the fit came from (release id and gold file name), for the card and the lock.
    pub fitted_on: String,
    pub labels: BTreeMap<String, LabelMap>,
}

/// Why a calibration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a calibration file", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: format {found:?}, expected {CALIBRATION_FORMAT:?}", path.display())]
    Format { path: PathBuf, found: String },
    #[error("{}: unknown label {label:?}", path.display())]
    UnknownLabel { path: PathBuf, label: String },
}

impl Calibration {
    /// Reads a calibration file written by `bpals-release calibrate`, with its bytes (a spec
    /// that names it records their digest).
    pub fn read_with_bytes(path: &Path) -> Result<(Calibration, Vec<u8>), CalibrationError> {
        let bytes = crate::files::regular::read(path, crate::files::regular::RELEASE_JSON)
            .map_err(|source| CalibrationError::Read { path: path.into(), source })?;
        let table: Calibration = serde_json::from_slice(&bytes).map_err(|source| CalibrationError::Parse { path: path.into(), source })?;
        if table.format != CALIBRATION_FORMAT {
            return Err(CalibrationError::Format { path: path.into(), found: table.format });
        }
        if let Some(label) = table.labels.keys().find(|l| !crate::vocab::LABELS.contains(&l.as_str())) {
            return Err(CalibrationError::UnknownLabel { path: path.into(), label: label.clone() });
        }
        Ok((table, bytes))
    }

    /// Reads a calibration file written by `bpals-release calibrate`.
    pub fn read(path: &Path) -> Result<Calibration, CalibrationError> {
        Self::read_with_bytes(path).map(|(table, _)| table)
    }

    /// The calibrated confidence of `label` (identity for labels the file does not cover).
    pub fn apply(&self, label: &str, p: f64) -> f64 {
        self.labels.get(label).map_or(p, |m| m.apply(p))
    }
}

const EPS: f64 = 1e-6;

/// The log-odds of `p`, clamped away from 0 and 1 so that it stays finite.
pub(crate) fn logit(p: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    (p / (1.0 - p)).ln()
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Fits one label's map from (confidence, gold) pairs.
pub fn fit(method: Method, confidence: &[f64], gold: &[bool]) -> LabelMap {
    let positives = gold.iter().filter(|g| **g).count();
    let n = gold.len();
    if n < MIN_JUDGEMENTS || positives == 0 || positives == n {
        return LabelMap { n, positives, ..LabelMap::IDENTITY };
    }
    let hi = (positives as f64 + 1.0) / (positives as f64 + 2.0);
    let lo = 1.0 / ((n - positives) as f64 + 2.0);
    let x: Vec<f64> = confidence.iter().map(|&p| logit(p)).collect();
    let t: Vec<f64> = gold.iter().map(|&g| if g { hi } else { lo }).collect();
    let loss = |a: f64, b: f64| -> f64 {
        x.iter()
            .zip(&t)
            .map(|(xi, ti)| {
                let z = a * xi + b;
                // log(1 + e^z) - t z, computed without overflow.
                z.max(0.0) + (-z.abs()).exp().ln_1p() - ti * z
            })
            .sum::<f64>()
    };
    let (mut a, mut b) = (1.0, 0.0);
    let mut current = loss(a, b);
    for _ in 0..100 {
        // Gradient and Hessian of the log loss in (a, b).
        let (mut ga, mut gb, mut haa, mut hab, mut hbb) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (xi, ti) in x.iter().zip(&t) {
            let p = sigmoid(a * xi + b);
            let w = p * (1.0 - p);
            ga += (p - ti) * xi;
            gb += p - ti;
            haa += w * xi * xi;
            hab += w * xi;
            hbb += w;
        }
        let (da, db) = match method {
            Method::Temperature => (ga / (haa + 1e-12), 0.0),
            Method::Platt => {
                let det = haa * hbb - hab * hab;
                if det.abs() < 1e-12 {
                    break;
                }
                ((hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det)
            }
        };
        // Damped Newton: halve the step until the loss does not rise.
        let mut step = 1.0;
        let (mut next_a, mut next_b, mut next) = (a, b, current);
        for _ in 0..50 {
            next_a = a - step * da;
            next_b = b - step * db;
            if method == Method::Temperature {
                next_a = next_a.max(1e-3); // a temperature is positive: never flip the ranking
            }
            next = loss(next_a, next_b);
            if next <= current {
                break;
            }
            step /= 2.0;
        }
        if next > current {
            break;
        }
        let moved = (next_a - a).abs() + (next_b - b).abs();
        (a, b, current) = (next_a, next_b, next);
        if moved < 1e-12 {
            break;
        }
    }
    LabelMap { a, b, n, positives }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_when_already_calibrated_and_too_small() {
        let m = fit(Method::Platt, &[0.2, 0.8], &[false, true]);
        assert_eq!((m.a, m.b), (1.0, 0.0), "too few judgements");
        assert_eq!(LabelMap::IDENTITY.apply(0.3), 0.3);
    }

    #[test]
    fn overconfident_scores_are_softened() {
        // Scores of 0.99 / 0.01 that are right only 70% of the time.
        let mut conf = Vec::new();
        let mut gold = Vec::new();
        for i in 0..200 {
            let says_yes = i % 2 == 0;
            conf.push(if says_yes { 0.99 } else { 0.01 });
            gold.push(if (i / 2) % 10 < 7 { says_yes } else { !says_yes });
        }
        for method in [Method::Platt, Method::Temperature] {
            let m = fit(method, &conf, &gold);
            let p = m.apply(0.99);
            assert!((p - 0.7).abs() < 0.02, "{method:?}: calibrated 0.99 -> {p}");
            assert!(m.a > 0.0 && m.a < 1.0, "{method:?}: a temperature above 1 softens: a = {}", m.a);
        }
    }

    #[test]
    fn fits_are_deterministic_and_finite_on_separable_data() {
        let conf: Vec<f64> = (0..50).map(|i| i as f64 / 50.0).collect();
        let gold: Vec<bool> = (0..50).map(|i| i >= 25).collect();
        let a = fit(Method::Platt, &conf, &gold);
        let b = fit(Method::Platt, &conf, &gold);
        assert_eq!(a, b);
        assert!(a.a.is_finite() && a.b.is_finite() && a.a > 0.0);
    }

    /// A build applies exactly the map `calibrate` fitted: the file reads back to the bit
    /// (serde_json's float_roundtrip; without it about a third of all f64s come back an ulp off).
    #[test]
    fn a_written_calibration_reads_back_bit_for_bit() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || loop {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let x = f64::from_bits(state);
            if x.is_finite() {
                return x;
            }
        };
        let maps: Vec<LabelMap> = (0..2_000).map(|_| LabelMap { a: next(), b: next(), n: 1, positives: 1 }).collect();
        let dir = tempfile::tempdir().unwrap();
        for (i, chunk) in maps.chunks(crate::vocab::LABELS.len()).enumerate() {
            let labels = crate::vocab::LABELS.iter().map(|l| l.to_string()).zip(chunk.iter().copied()).collect();
            let table = Calibration { format: CALIBRATION_FORMAT.into(), method: Method::Platt, fitted_on: "test".into(), labels };
            let path = dir.path().join(format!("{i}.json"));
            std::fs::write(&path, crate::manifest::to_json_bytes(&table)).unwrap();
            let back = Calibration::read(&path).unwrap();
            for (label, m) in &table.labels {
                let b = back.labels[label];
                assert_eq!((m.a.to_bits(), m.b.to_bits()), (b.a.to_bits(), b.b.to_bits()), "{label}: {m:?} read back as {b:?}");
            }
        }
    }
}
