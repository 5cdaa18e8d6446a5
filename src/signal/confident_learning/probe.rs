//! A linear probe: L2-regularised logistic regression of one finding's NIH label on an image's
//! features, standardised on the rows it is fitted on.
//!
//! The objective is scikit-learn's `LogisticRegression` (L2 penalty, intercept not penalised):
//! minimise `||w||^2 / 2 + C * sum_i log-loss_i` over the standardised features. It is strictly
//! convex, so any solver run to a tight gradient finds the same probe; this one is
//! [`super::lbfgs`], in f64, every sum in row order.
//!
//! The features are never copied standardised: a probe on `(x - mean) / scale` is the same
//! linear function of `x` with folded weights, so every pass reads the one f32 matrix.

/// One vector per image, row-major, in f32 as the engine hands them over.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureMatrix {
    pub rows: usize,
    pub dims: usize,
    pub values: Vec<f32>,
}

impl FeatureMatrix {
    pub fn new(rows: usize, dims: usize, values: Vec<f32>) -> FeatureMatrix {
        assert_eq!(values.len(), rows * dims, "{rows} x {dims} features");
        FeatureMatrix { rows, dims, values }
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.dims..(i + 1) * self.dims]
    }
}

/// A fitted probe as a function of the raw features: `p = sigmoid(x . weights + bias)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub weights: Vec<f64>,
    pub bias: f64,
}

impl Probe {
    pub fn probability(&self, x: &[f32]) -> f64 {
        sigmoid(linear(&self.weights, x) + self.bias)
    }
}

/// How tightly each probe is fitted: the largest gradient component of the objective divided by
/// the number of rows. Tight enough that probes agree with another exact solver's to 1e-5.
const TOLERANCE: f64 = 1e-10;
const MAX_ITERATIONS: usize = 5_000;

/// Fits a probe with inverse regularisation `c` on `rows` of `features`, whose labels are
/// `labels[row]`.
pub fn fit(features: &FeatureMatrix, rows: &[usize], labels: &[bool], c: f64) -> Probe {
    fit_path(features, rows, labels, &[c]).remove(0)
}

/// One probe per strength of `grid` (ascending) on the same rows: each fit starts where the
/// previous, more regularised one ended, and the standardisation is computed once.
pub fn fit_path(features: &FeatureMatrix, rows: &[usize], labels: &[bool], grid: &[f64]) -> Vec<Probe> {
    let (mean, scale) = standardisation(features, rows);
    let d = features.dims;
    // Parameters in the standardised space: d weights, then the intercept.
    let mut theta = vec![0.0; d + 1];
    let mut probes = Vec::with_capacity(grid.len());
    for &c in grid {
        minimize(features, rows, labels, (&mean, &scale), c, &mut theta);
        let (w, b) = theta.split_at(d);
        let weights: Vec<f64> = w.iter().zip(&scale).map(|(wk, s)| wk / s).collect();
        let bias = b[0] - linear_f64(&weights, &mean);
        probes.push(Probe { weights, bias });
    }
    probes
}

/// Minimises the objective at strength `c` from `theta` (standardised weights, then the
/// intercept), in place. The features are read raw: the standardisation is folded in.
fn minimize(
    features: &FeatureMatrix,
    rows: &[usize],
    labels: &[bool],
    (mean, scale): (&[f64], &[f64]),
    c: f64,
    theta: &mut [f64],
) -> super::lbfgs::Minimum {
    let d = features.dims;
    let n = rows.len() as f64;
    let mut folded = vec![0.0; d];
    let mut residual_sum = vec![0.0; d];
    super::lbfgs::minimize(theta, TOLERANCE, MAX_ITERATIONS, |theta, grad| {
        let (w, b) = theta.split_at(d);
        for k in 0..d {
            folded[k] = w[k] / scale[k];
        }
        let offset = b[0] - linear_f64(&folded, mean);
        residual_sum.iter_mut().for_each(|v| *v = 0.0);
        let (mut loss, mut total_residual) = (0.0, 0.0);
        for &i in rows {
            let x = features.row(i);
            let z = linear(&folded, x) + offset;
            let y = if labels[i] { 1.0 } else { 0.0 };
            loss += softplus(z) - y * z;
            let r = sigmoid(z) - y;
            total_residual += r;
            for (acc, &xk) in residual_sum.iter_mut().zip(x) {
                *acc += r * f64::from(xk);
            }
        }
        // d/dw_k of the loss: sum_i r_i (x_ik - mean_k) / scale_k; all divided by C * n.
        let mut penalty = 0.0;
        for k in 0..d {
            grad[k] = ((residual_sum[k] - mean[k] * total_residual) / scale[k] + w[k] / c) / n;
            penalty += w[k] * w[k];
        }
        grad[d] = total_residual / n;
        (loss + penalty / (2.0 * c)) / n
    })
}

/// Each dimension's mean and standard deviation (divided by n) over `rows`; a constant dimension
/// keeps a scale of 1.
fn standardisation(features: &FeatureMatrix, rows: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let d = features.dims;
    let n = rows.len().max(1) as f64;
    let mut mean = vec![0.0; d];
    for &i in rows {
        for (m, &x) in mean.iter_mut().zip(features.row(i)) {
            *m += f64::from(x);
        }
    }
    mean.iter_mut().for_each(|m| *m /= n);
    let mut var = vec![0.0; d];
    for &i in rows {
        for ((v, &x), m) in var.iter_mut().zip(features.row(i)).zip(&mean) {
            let c = f64::from(x) - m;
            *v += c * c;
        }
    }
    let scale = var.iter().map(|v| (v / n).sqrt()).map(|s| if s > 10.0 * f64::EPSILON { s } else { 1.0 }).collect();
    (mean, scale)
}

/// Mean log loss of `probe` on `rows`, probabilities clipped away from 0 and 1.
pub fn log_loss(probe: &Probe, features: &FeatureMatrix, rows: &[usize], labels: &[bool]) -> f64 {
    let eps = 1e-15;
    let total: f64 = rows
        .iter()
        .map(|&i| {
            let p = probe.probability(features.row(i)).clamp(eps, 1.0 - eps);
            if labels[i] {
                -p.ln()
            } else {
                -(1.0 - p).ln()
            }
        })
        .sum();
    total / rows.len().max(1) as f64
}

/// `w . x` in f64, summed in eight interleaved lanes (a fixed order, so the same bits on every
/// run), which lets the compiler use vector instructions where one running sum would not.
fn linear(w: &[f64], x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (w_body, w_tail) = w.split_at(w.len() - w.len() % 8);
    let (x_body, x_tail) = x.split_at(w_body.len());
    for (wc, xc) in w_body.chunks_exact(8).zip(x_body.chunks_exact(8)) {
        for l in 0..8 {
            lanes[l] += wc[l] * f64::from(xc[l]);
        }
    }
    let tail: f64 = w_tail.iter().zip(x_tail).map(|(a, &b)| a * f64::from(b)).sum();
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7])) + tail
}

fn linear_f64(w: &[f64], x: &[f64]) -> f64 {
    w.iter().zip(x).map(|(a, b)| a * b).sum()
}

fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// log(1 + e^z) without overflow.
fn softplus(z: f64) -> f64 {
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn separable_enough() -> (FeatureMatrix, Vec<bool>) {
        // Label = first feature > 0, with the second feature noise at another scale.
        let mut values = Vec::new();
        let mut labels = Vec::new();
        for i in 0..60 {
            let a = (i as f32 - 29.5) / 10.0;
            let b = ((i * 37 % 11) as f32 - 5.0) * 100.0;
            values.extend([a, b]);
            labels.push(a > 0.0 || i % 13 == 0);
        }
        (FeatureMatrix::new(60, 2, values), labels)
    }

    #[test]
    fn the_probe_reads_the_finding_and_its_gradient_vanishes() {
        let (x, y) = separable_enough();
        let rows: Vec<usize> = (0..60).collect();
        let probe = fit(&x, &rows, &y, 1.0);
        assert!(probe.probability(x.row(59)) > 0.9 && probe.probability(x.row(1)) < 0.1, "{probe:?}");
        assert!(log_loss(&probe, &x, &rows, &y) < 0.4);
    }

    #[test]
    fn stronger_regularisation_shrinks_the_weights() {
        let (x, y) = separable_enough();
        let rows: Vec<usize> = (0..60).collect();
        let loose = fit(&x, &rows, &y, 10.0);
        let tight = fit(&x, &rows, &y, 0.01);
        assert!(tight.weights[0].abs() < loose.weights[0].abs());
    }

    #[test]
    fn a_constant_feature_is_left_alone() {
        let x = FeatureMatrix::new(4, 2, vec![1.0, 3.0, 2.0, 3.0, 3.0, 3.0, 4.0, 3.0]);
        let y = [false, false, true, true];
        let probe = fit(&x, &[0, 1, 2, 3], &y, 1.0);
        assert!(probe.weights.iter().chain([&probe.bias]).all(|v| v.is_finite()), "{probe:?}");
        assert!(probe.weights[1].abs() < 1e-9);
    }
}
