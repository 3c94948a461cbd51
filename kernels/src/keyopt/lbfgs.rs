//! Limited-memory BFGS for the smooth, convex losses of the KeyOpt fit (pairwise logistic loss
//! plus L2 terms). Deterministic: the same input gives the same iterates bit for bit, whatever
//! the thread count, as long as the objective is deterministic.
//!
//! Written here rather than pulled from a crate: it is 100 lines, the fit needs nothing but
//! "minimise f with gradient g", and the optimisation crates of the ecosystem bring a generic
//! math layer larger than the rest of the fit.

/// What [`minimize`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub iterations: usize,
    pub value: f64,
    pub gradient_norm: f64,
    pub converged: bool,
}

/// Minimises `objective(x, gradient) -> value` from `x` (updated in place).
///
/// Stops when the gradient's max-norm is below `tolerance`, when a line search cannot decrease
/// the value any more, or after `max_iterations`. `memory` correction pairs are kept.
pub fn minimize(
    x: &mut [f64],
    mut objective: impl FnMut(&[f64], &mut [f64]) -> f64,
    max_iterations: usize,
    tolerance: f64,
    memory: usize,
) -> Outcome {
    let n = x.len();
    let mut gradient = vec![0.0; n];
    let mut value = objective(x, &mut gradient);
    let mut history: std::collections::VecDeque<(Vec<f64>, Vec<f64>, f64)> =
        std::collections::VecDeque::with_capacity(memory);
    let mut direction = vec![0.0; n];
    let mut trial = vec![0.0; n];
    let mut trial_gradient = vec![0.0; n];
    let max_norm = |g: &[f64]| g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for iteration in 0..max_iterations {
        crate::interrupt::check();
        if max_norm(&gradient) < tolerance {
            return Outcome {
                iterations: iteration,
                value,
                gradient_norm: max_norm(&gradient),
                converged: true,
            };
        }
        // Two-loop recursion: direction = -H * gradient.
        direction.copy_from_slice(&gradient);
        let mut alphas = Vec::with_capacity(history.len());
        for (s, y, rho) in history.iter().rev() {
            let a = rho * dot(s, &direction);
            axpy(-a, y, &mut direction);
            alphas.push(a);
        }
        if let Some((s, y, _)) = history.back() {
            let scale = dot(s, y) / dot(y, y);
            direction.iter_mut().for_each(|d| *d *= scale);
        } else {
            // First step: a unit-length move along the gradient.
            let norm = dot(&gradient, &gradient).sqrt().max(1e-300);
            direction.iter_mut().for_each(|d| *d /= norm);
        }
        for ((s, y, rho), a) in history.iter().zip(alphas.iter().rev()) {
            let b = rho * dot(y, &direction);
            axpy(a - b, s, &mut direction);
        }
        direction.iter_mut().for_each(|d| *d = -*d);
        let mut slope = dot(&gradient, &direction);
        if slope >= 0.0 {
            // Not a descent direction (curvature information gone stale): restart on -gradient.
            history.clear();
            direction
                .iter_mut()
                .zip(&gradient)
                .for_each(|(d, g)| *d = -g);
            slope = -dot(&gradient, &gradient);
        }
        // Backtracking line search (Armijo).
        let mut step = 1.0;
        let mut accepted = None;
        for _ in 0..40 {
            trial
                .iter_mut()
                .zip(x.iter().zip(&direction))
                .for_each(|(t, (xi, d))| *t = xi + step * d);
            let trial_value = objective(&trial, &mut trial_gradient);
            if trial_value.is_finite() && trial_value <= value + 1e-4 * step * slope {
                accepted = Some(trial_value);
                break;
            }
            step *= 0.5;
        }
        let Some(new_value) = accepted else {
            return Outcome {
                iterations: iteration,
                value,
                gradient_norm: max_norm(&gradient),
                converged: false,
            };
        };
        let s: Vec<f64> = trial.iter().zip(x.iter()).map(|(t, xi)| t - xi).collect();
        let y: Vec<f64> = trial_gradient
            .iter()
            .zip(&gradient)
            .map(|(a, b)| a - b)
            .collect();
        let sy = dot(&s, &y);
        x.copy_from_slice(&trial);
        gradient.copy_from_slice(&trial_gradient);
        let improvement = value - new_value;
        value = new_value;
        if sy > 1e-12 {
            if history.len() == memory {
                history.pop_front();
            }
            history.push_back((s, y, 1.0 / sy));
        }
        if improvement <= 1e-12 * value.abs().max(1.0) {
            return Outcome {
                iterations: iteration + 1,
                value,
                gradient_norm: max_norm(&gradient),
                converged: true,
            };
        }
    }
    Outcome {
        iterations: max_iterations,
        value,
        gradient_norm: max_norm(&gradient),
        converged: max_norm(&gradient) < tolerance,
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn axpy(a: f64, x: &[f64], y: &mut [f64]) {
    y.iter_mut().zip(x).for_each(|(yi, xi)| *yi += a * xi);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_iteration_is_a_cancellation_point() {
        let mut x = [5.0f64, -3.0];
        let checks = crate::interrupt::tests::checks_made(|| {
            minimize(
                &mut x,
                |x, g| {
                    g[0] = 2.0 * (x[0] - 1.0);
                    g[1] = 8.0 * (x[1] + 2.0);
                    (x[0] - 1.0).powi(2) + 4.0 * (x[1] + 2.0).powi(2)
                },
                100,
                1e-12,
                4,
            );
        });
        assert!(checks >= 2, "one check per L-BFGS iteration: {checks}");
    }

    #[test]
    fn finds_the_minimum_of_an_ill_conditioned_quadratic() {
        // f(x) = sum_i c_i (x_i - i)^2 with curvatures over two orders of magnitude.
        let n = 50;
        let curvature: Vec<f64> = (0..n).map(|i| 10f64.powf(i as f64 / 25.0)).collect();
        let mut x = vec![0.0; n];
        let out = minimize(
            &mut x,
            |x, g| {
                let mut f = 0.0;
                for i in 0..x.len() {
                    let d = x[i] - i as f64;
                    f += curvature[i] * d * d;
                    g[i] = 2.0 * curvature[i] * d;
                }
                f
            },
            500,
            1e-6,
            8,
        );
        assert!(out.converged && out.iterations < 150, "{out:?}");
        for (i, v) in x.iter().enumerate() {
            assert!((v - i as f64).abs() < 1e-5, "x[{i}] = {v}");
        }
    }

    #[test]
    fn minimises_rosenbrock() {
        let mut x = vec![-1.2, 1.0];
        let out = minimize(
            &mut x,
            |x, g| {
                let (a, b) = (x[0], x[1]);
                g[0] = -2.0 * (1.0 - a) - 400.0 * a * (b - a * a);
                g[1] = 200.0 * (b - a * a);
                (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2)
            },
            1000,
            1e-9,
            6,
        );
        assert!(
            (x[0] - 1.0).abs() < 1e-4 && (x[1] - 1.0).abs() < 1e-4,
            "{x:?} {out:?}"
        );
    }
}
