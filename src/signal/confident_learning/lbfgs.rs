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

/// One minimisation as a sequence of requests: [`Search::point`] says where the function is
/// wanted next, [`Search::tell`] gives its value and gradient there. Several searches can then
/// share each pass over their data (the probes of every finding on the same rows), each taking
/// exactly the steps it would take alone.
#[derive(Debug, Clone)]
pub struct Search {
    x: Vec<f64>,
    g: Vec<f64>,
    value: f64,
    steps: Vec<(Vec<f64>, Vec<f64>, f64)>, // (s, y, 1 / y.s)
    direction: Vec<f64>,
    slope: f64,
    step: f64,
    trial: Vec<f64>,
    phase: Phase,
    iterations: usize,
    tolerance: f64,
    max_iterations: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// The value at the start point is wanted.
    Start,
    /// The value at `trial` is wanted.
    LineSearch,
    Done,
}

impl Search {
    pub fn new(x: Vec<f64>, tolerance: f64, max_iterations: usize) -> Search {
        let n = x.len();
        Search {
            trial: x.clone(),
            x,
            g: vec![0.0; n],
            value: f64::INFINITY,
            steps: Vec::with_capacity(MEMORY),
            direction: vec![0.0; n],
            slope: 0.0,
            step: 0.0,
            phase: Phase::Start,
            iterations: 0,
            tolerance,
            max_iterations,
        }
    }

    /// Where the function is wanted next; None once the search has stopped.
    pub fn point(&self) -> Option<&[f64]> {
        match self.phase {
            Phase::Start => Some(&self.x),
            Phase::LineSearch => Some(&self.trial),
            Phase::Done => None,
        }
    }

    /// The function's value and gradient at [`Search::point`].
    pub fn tell(&mut self, value: f64, gradient: &[f64]) {
        match self.phase {
            Phase::Start => {
                self.value = value;
                self.g.copy_from_slice(gradient);
                self.next_iteration();
            }
            Phase::LineSearch if value <= self.value + ARMIJO * self.step * self.slope => self.accept(value, gradient),
            Phase::LineSearch => {
                self.step *= 0.5;
                if self.step < 1e-20 {
                    self.phase = Phase::Done;
                } else {
                    self.set_trial();
                }
            }
            Phase::Done => panic!("a stopped search was told a value"),
        }
    }

    /// The current point (the minimum once stopped).
    pub fn x(&self) -> &[f64] {
        &self.x
    }

    /// How many iterations the search took.
    #[cfg(test)]
    pub fn iterations(&self) -> usize {
        self.iterations
    }

    fn next_iteration(&mut self) {
        if self.iterations >= self.max_iterations || max_abs(&self.g) <= self.tolerance {
            self.phase = Phase::Done;
            return;
        }
        self.iterations += 1;
        let direction = two_loop(&self.g, &self.steps);
        let slope = dot(&direction, &self.g);
        // Not a descent direction (rounding): restart from the gradient.
        (self.direction, self.slope) = if slope < 0.0 {
            (direction, slope)
        } else {
            self.steps.clear();
            (self.g.iter().map(|v| -v).collect(), -dot(&self.g, &self.g))
        };
        self.step = if self.steps.is_empty() { (1.0 / max_abs(&self.g)).min(1.0) } else { 1.0 };
        self.set_trial();
        self.phase = Phase::LineSearch;
    }

    fn set_trial(&mut self) {
        for ((t, xi), di) in self.trial.iter_mut().zip(&self.x).zip(&self.direction) {
            *t = xi + self.step * di;
        }
    }

    fn accept(&mut self, new_value: f64, trial_g: &[f64]) {
        let stalled = self.value - new_value <= 4.0 * f64::EPSILON * self.value.abs().max(1.0);
        let s: Vec<f64> = self.trial.iter().zip(&self.x).map(|(t, xi)| t - xi).collect();
        let y: Vec<f64> = trial_g.iter().zip(&self.g).map(|(a, b)| a - b).collect();
        let ys = dot(&y, &s);
        if ys > 0.0 {
            if self.steps.len() == MEMORY {
                self.steps.remove(0);
            }
            self.steps.push((s, y, 1.0 / ys));
        }
        self.x.copy_from_slice(&self.trial);
        self.g.copy_from_slice(trial_g);
        self.value = new_value;
        if stalled {
            self.phase = Phase::Done;
        } else {
            self.next_iteration();
        }
    }
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
        let mut search = Search::new(vec![-1.2, 1.0], 1e-10, 500);
        let mut value = f64::NAN;
        while let Some(x) = search.point() {
            let (a, b) = (x[0], x[1]);
            let g = [-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)];
            value = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2);
            search.tell(value, &g);
        }
        let x = search.x();
        // It stops when a step no longer lowers the value past its rounding: there, near 1e-16.
        assert!((x[0] - 1.0).abs() < 1e-6 && (x[1] - 1.0).abs() < 1e-6, "{x:?}");
        assert!(value < 1e-12 && search.iterations() < 500, "{value} after {}", search.iterations());
    }
}
