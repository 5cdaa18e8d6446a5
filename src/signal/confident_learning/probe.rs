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

use super::kernel::{self, sigmoid};
use super::lbfgs::Search;

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
/// the number of rows. Tight enough that probes agree with another exact solver's to 1e-5 (the
/// suite compares scikit-learn's): on 20,000 images of 1,024 random features and 14 findings,
/// every probability is within 1.5e-7 of a fit to 1e-10, with the same strengths chosen and the
/// same issues, in 12% less time.
const TOLERANCE: f64 = 1e-9;
const MAX_ITERATIONS: usize = 5_000;

/// Fits a probe with inverse regularisation `c` on `rows` of `features`, whose labels are
/// `labels[row]`.
pub fn fit(features: &FeatureMatrix, rows: &[usize], labels: &[bool], c: f64) -> Probe {
    fit_each(features, rows, &[labels], &[c], None).remove(0)
}

/// One probe per strength of `grid` (ascending) on the same rows: each fit starts where the
/// previous, more regularised one ended.
pub fn fit_path(features: &FeatureMatrix, rows: &[usize], labels: &[bool], grid: &[f64]) -> Vec<Probe> {
    fit_paths(features, rows, &[labels], grid).remove(0)
}

/// [`fit_path`] for several findings on the same rows, fitted together: the standardisation is
/// computed once, and every step of every finding's search at one strength shares a pass over
/// the features ([`super::kernel`]). Each finding's probes are the bits it would get alone.
pub fn fit_paths(features: &FeatureMatrix, rows: &[usize], labels: &[&[bool]], grid: &[f64]) -> Vec<Vec<Probe>> {
    let objective = Objective::new(features, rows);
    let mut thetas = vec![vec![0.0; features.dims + 1]; labels.len()];
    let mut paths: Vec<Vec<Probe>> = vec![Vec::with_capacity(grid.len()); labels.len()];
    for &c in grid {
        objective.minimize(labels, &vec![c; labels.len()], &mut thetas);
        for (path, theta) in paths.iter_mut().zip(&thetas) {
            path.push(objective.probe(theta));
        }
    }
    paths
}

/// One probe per finding on the same rows, each at its own strength `cs[i]`, fitted together.
/// `starts`, when given, are where each search begins (a probe fitted on rows like these): the
/// minimum is the same, fewer steps away than from zero.
pub fn fit_each(features: &FeatureMatrix, rows: &[usize], labels: &[&[bool]], cs: &[f64], starts: Option<&[&Probe]>) -> Vec<Probe> {
    let objective = Objective::new(features, rows);
    let mut thetas = match starts {
        Some(starts) => starts.iter().map(|p| objective.theta_of(p)).collect(),
        None => vec![vec![0.0; features.dims + 1]; labels.len()],
    };
    objective.minimize(labels, cs, &mut thetas);
    thetas.iter().map(|theta| objective.probe(theta)).collect()
}

/// The objective on some rows, in the standardised space: parameters are `d` weights, then the
/// intercept. The features are read raw: the standardisation is folded in.
struct Objective<'a> {
    features: &'a FeatureMatrix,
    rows: &'a [usize],
    mean: Vec<f64>,
    scale: Vec<f64>,
}

impl<'a> Objective<'a> {
    fn new(features: &'a FeatureMatrix, rows: &'a [usize]) -> Self {
        let (mean, scale) = standardisation(features, rows);
        Objective { features, rows, mean, scale }
    }

    /// The probe of `theta` as a function of the raw features.
    fn probe(&self, theta: &[f64]) -> Probe {
        let (w, b) = theta.split_at(self.features.dims);
        let weights: Vec<f64> = w.iter().zip(&self.scale).map(|(wk, s)| wk / s).collect();
        let bias = b[0] - linear_f64(&weights, &self.mean);
        Probe { weights, bias }
    }

    /// The parameters of `probe` in this objective's standardised space (the inverse of
    /// [`Self::probe`]).
    fn theta_of(&self, probe: &Probe) -> Vec<f64> {
        let mut theta: Vec<f64> = probe.weights.iter().zip(&self.scale).map(|(w, s)| w * s).collect();
        theta.push(probe.bias + linear_f64(&probe.weights, &self.mean));
        theta
    }

    /// Minimises each finding's objective (labels `labels[i]`, strength `cs[i]`) from
    /// `thetas[i]`, in place. The searches run in lock-step: each pass over the rows serves
    /// every search still running.
    fn minimize(&self, labels: &[&[bool]], cs: &[f64], thetas: &mut [Vec<f64>]) {
        let mut searches: Vec<Search> = thetas.iter().map(|t| Search::new(t.clone(), TOLERANCE, MAX_ITERATIONS)).collect();
        loop {
            let running: Vec<usize> = (0..searches.len()).filter(|&i| searches[i].point().is_some()).collect();
            if running.is_empty() {
                break;
            }
            let answers: Vec<(f64, Vec<f64>)> = {
                let points: Vec<&[f64]> = running.iter().map(|&i| searches[i].point().expect("running")).collect();
                let run_labels: Vec<&[bool]> = running.iter().map(|&i| labels[i]).collect();
                let run_cs: Vec<f64> = running.iter().map(|&i| cs[i]).collect();
                self.evaluate(&points, &run_labels, &run_cs)
            };
            for (&i, (value, gradient)) in running.iter().zip(answers) {
                searches[i].tell(value, &gradient);
            }
        }
        for (theta, search) in thetas.iter_mut().zip(&searches) {
            theta.copy_from_slice(search.x());
        }
    }

    /// The objective's value and gradient at each point, divided by the number of rows.
    fn evaluate(&self, points: &[&[f64]], labels: &[&[bool]], cs: &[f64]) -> Vec<(f64, Vec<f64>)> {
        let d = self.features.dims;
        let n = self.rows.len() as f64;
        let folded: Vec<(Vec<f64>, f64)> = points
            .iter()
            .map(|theta| {
                let (w, b) = theta.split_at(d);
                let folded: Vec<f64> = w.iter().zip(&self.scale).map(|(wk, s)| wk / s).collect();
                let offset = b[0] - linear_f64(&folded, &self.mean);
                (folded, offset)
            })
            .collect();
        let requests: Vec<kernel::Request<'_>> =
            folded.iter().zip(labels).map(|((folded, offset), labels)| kernel::Request { folded, offset: *offset, labels }).collect();
        let sums = kernel::pass(&self.features.values, d, self.rows, &requests);
        sums.into_iter()
            .zip(points)
            .zip(cs)
            .map(|((sums, theta), &c)| {
                let w = &theta[..d];
                let mut grad = vec![0.0; d + 1];
                // d/dw_k of the loss: sum_i r_i (x_ik - mean_k) / scale_k; all divided by C * n.
                let mut penalty = 0.0;
                for k in 0..d {
                    grad[k] = ((sums.weighted[k] - self.mean[k] * sums.residual) / self.scale[k] + w[k] / c) / n;
                    penalty += w[k] * w[k];
                }
                grad[d] = sums.residual / n;
                ((sums.loss + penalty / (2.0 * c)) / n, grad)
            })
            .collect()
    }
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
