//! Limited-memory BFGS (Nocedal and Wright, "Numerical Optimization", 2nd ed., algorithm 7.4 and
//! 7.5) with a backtracking line search, for the probes' smooth, strongly convex objective.
//!
//! Hand-written, not a crate: the probes need one minimiser of one function, deterministic to
//! the bit (a fixed order of every sum, no threads inside), and run to a tight gradient so that
//! their probabilities match any other exact solver's (the suite compares scikit-learn's). The
//! optimisation crates (argmin, linfa) bring ndarray and generic machinery a fresh build of this
//! tool would compile for these eighty lines.

/// How many past steps shape the search direction.
const MEMORY: usize = 10;
/// Armijo's sufficient-decrease constant.
const ARMIJO: f64 = 1e-4;

/// Where the search stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Minimum {
    pub value: f64,
    pub iterations: usize,
    /// The largest gradient component at the end.
    pub gradient: f64,
}

/// Minimises `f` (which writes its gradient into its second argument and returns its value) from
/// `x`, in place, until the largest gradient component is at most `tolerance`, a step no longer
/// decreases `f` by more than its rounding (scipy's L-BFGS-B stops there too), or
/// `max_iterations` pass.
pub fn minimize(x: &mut [f64], tolerance: f64, max_iterations: usize, mut f: impl FnMut(&[f64], &mut [f64]) -> f64) -> Minimum {
    let n = x.len();
    let mut g = vec![0.0; n];
    let mut value = f(x, &mut g);
    let mut steps: Vec<(Vec<f64>, Vec<f64>, f64)> = Vec::with_capacity(MEMORY); // (s, y, 1 / y.s)
    let mut trial = vec![0.0; n];
    let mut trial_g = vec![0.0; n];
    let mut iterations = 0;
    while iterations < max_iterations && max_abs(&g) > tolerance {
        iterations += 1;
        let direction = two_loop(&g, &steps);
        let slope = dot(&direction, &g);
        // Not a descent direction (rounding): restart from the gradient.
        let (direction, slope) = if slope < 0.0 {
            (direction, slope)
        } else {
            steps.clear();
            let d: Vec<f64> = g.iter().map(|v| -v).collect();
            let s = -dot(&g, &g);
            (d, s)
        };
        let mut step = if steps.is_empty() { (1.0 / max_abs(&g)).min(1.0) } else { 1.0 };
        let accepted = loop {
            for ((t, xi), di) in trial.iter_mut().zip(x.iter()).zip(&direction) {
                *t = xi + step * di;
            }
            let trial_value = f(&trial, &mut trial_g);
            if trial_value <= value + ARMIJO * step * slope {
                break Some(trial_value);
            }
            step *= 0.5;
            if step < 1e-20 {
                break None;
            }
        };
        let Some(new_value) = accepted else { break };
        let stalled = value - new_value <= 4.0 * f64::EPSILON * value.abs().max(1.0);
        let s: Vec<f64> = trial.iter().zip(x.iter()).map(|(t, xi)| t - xi).collect();
        let y: Vec<f64> = trial_g.iter().zip(&g).map(|(a, b)| a - b).collect();
        let ys = dot(&y, &s);
        if ys > 0.0 {
            if steps.len() == MEMORY {
                steps.remove(0);
            }
            steps.push((s, y, 1.0 / ys));
        }
        x.copy_from_slice(&trial);
        g.copy_from_slice(&trial_g);
        value = new_value;
        if stalled {
            break;
        }
    }
    Minimum { value, iterations, gradient: max_abs(&g) }
}

/// The L-BFGS direction -H g from the stored steps.
fn two_loop(g: &[f64], steps: &[(Vec<f64>, Vec<f64>, f64)]) -> Vec<f64> {
    let mut q = g.to_vec();
    let mut alphas = vec![0.0; steps.len()];
    for (k, (s, y, rho)) in steps.iter().enumerate().rev() {
        alphas[k] = rho * dot(s, &q);
        axpy(-alphas[k], y, &mut q);
    }
    if let Some((s, y, _)) = steps.last() {
        let gamma = dot(s, y) / dot(y, y);
        q.iter_mut().for_each(|v| *v *= gamma);
    }
    for (k, (s, y, rho)) in steps.iter().enumerate() {
        let beta = rho * dot(y, &q);
        axpy(alphas[k] - beta, s, &mut q);
    }
    q.iter_mut().for_each(|v| *v = -*v);
    q
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn axpy(a: f64, x: &[f64], y: &mut [f64]) {
    y.iter_mut().zip(x).for_each(|(yi, xi)| *yi += a * xi);
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_finds_the_minimum_of_rosenbrocks_valley() {
        let mut x = [-1.2, 1.0];
        let m = minimize(&mut x, 1e-10, 500, |x, g| {
            let (a, b) = (x[0], x[1]);
            g[0] = -2.0 * (1.0 - a) - 400.0 * a * (b - a * a);
            g[1] = 200.0 * (b - a * a);
            (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2)
        });
        // It stops when a step no longer lowers the value past its rounding: there, near 1e-16.
        assert!((x[0] - 1.0).abs() < 1e-6 && (x[1] - 1.0).abs() < 1e-6, "{x:?} {m:?}");
        assert!(m.value < 1e-12 && m.iterations < 500, "{m:?}");
    }
}
