//! Steps 2 and 3 of a fit: the two convex objectives (β and ρ; then Δk with the keep penalty on
//! tied groups) and their L-BFGS solutions.

use rayon::prelude::*;

use super::pairs::Group;
use super::FitOptions;
use crate::keyopt::lbfgs;
use crate::vector::dot;

fn softplus(z: f64) -> f64 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// β, ρ and (optionally) Δk fitted on some groups.
pub(super) struct Model {
    /// ρ and β fitted without Δk: what a reading without the Δk term uses.
    plain: (f64, Vec<f64>),
    /// ρ and β refitted with the Δk term as an offset (when Δk was fitted).
    joint: Option<(f64, Vec<f64>)>,
    /// n × dim, or empty when Δk was not fitted.
    dk: Vec<f32>,
    pub beta_iterations: usize,
    pub dk_iterations: usize,
}

impl Model {
    pub fn dk_row(&self, skill: usize, dim: usize) -> Option<&[f32]> {
        if self.dk.is_empty() {
            None
        } else {
            Some(&self.dk[skill * dim..(skill + 1) * dim])
        }
    }

    /// ρ and β for a reading with or without the Δk term.
    pub fn scale_and_beta(&self, use_dk: bool) -> (f64, &[f64]) {
        match (&self.joint, use_dk) {
            (Some((rho, beta)), true) => (*rho, beta),
            _ => (self.plain.0, &self.plain.1),
        }
    }
}

/// Fits β and ρ, then (with `with_dk`) Δk given them, then β and ρ again with the Δk term as an
/// offset: the first β also absorbs the average of the query-dependent part, the refit does not.
pub(super) fn fit_model(
    groups: &[&Group],
    n_skills: usize,
    dim: usize,
    options: &FitOptions,
    with_dk: bool,
) -> Model {
    let no_offsets: Vec<Vec<f64>> = groups.iter().map(|g| vec![0.0; g.skills.len()]).collect();
    let (rho, beta, mut beta_iterations) = fit_beta(groups, &no_offsets, n_skills, options);
    if !with_dk {
        return Model {
            plain: (rho, beta),
            joint: None,
            dk: Vec::new(),
            beta_iterations,
            dk_iterations: 0,
        };
    }
    let (dk, dk_iterations) = fit_dk(groups, n_skills, dim, rho, &beta, options);
    let offsets: Vec<Vec<f64>> = groups
        .iter()
        .map(|g| {
            g.skills
                .iter()
                .map(|&s| dot(&g.centered, &dk[s * dim..(s + 1) * dim]) as f64)
                .collect()
        })
        .collect();
    let (rho2, beta2, it) = fit_beta(groups, &offsets, n_skills, options);
    beta_iterations += it;
    Model {
        plain: (rho, beta),
        joint: Some((rho2, beta2)),
        dk,
        beta_iterations,
        dk_iterations,
    }
}

/// ρ and β; `offsets[g][j]` is added to the score of skill j of group g (the Δk term, or 0).
fn fit_beta(
    groups: &[&Group],
    offsets: &[Vec<f64>],
    n_skills: usize,
    options: &FitOptions,
) -> (f64, Vec<f64>, usize) {
    let run = |fixed_rho: Option<f64>| -> (Vec<f64>, usize) {
        let mut x = vec![0.0; n_skills + 1];
        x[0] = fixed_rho.unwrap_or(1.0);
        let objective = |x: &[f64], g: &mut [f64]| -> f64 {
            g.fill(0.0);
            let rho = fixed_rho.unwrap_or(x[0]);
            let mut f = 0.0;
            for (group, offset) in groups.iter().zip(offsets) {
                for &(a, b, w) in &group.pairs {
                    let (a, b) = (a as usize, b as usize);
                    let (sa, sb) = (group.skills[a], group.skills[b]);
                    let dr = (group.relevance[a] - group.relevance[b]) as f64;
                    let d = rho * dr + x[1 + sa] - x[1 + sb] + offset[a] - offset[b];
                    let w = w as f64;
                    f += w * softplus(-d);
                    let s = -w * sigmoid(-d);
                    g[0] += s * dr;
                    g[1 + sa] += s;
                    g[1 + sb] -= s;
                }
            }
            if fixed_rho.is_some() {
                g[0] = 0.0;
            } else {
                f += options.lambda_rho * (x[0] - 1.0).powi(2);
                g[0] += 2.0 * options.lambda_rho * (x[0] - 1.0);
            }
            for i in 1..x.len() {
                f += options.lambda_beta * x[i] * x[i];
                g[i] += 2.0 * options.lambda_beta * x[i];
            }
            f
        };
        let out = lbfgs::minimize(&mut x, objective, options.max_iterations, 1e-7, 8);
        if let Some(r) = fixed_rho {
            x[0] = r;
        }
        (x, out.iterations)
    };
    let (mut x, mut iterations) = run(None);
    if x[0] < 0.0 {
        // A negative scale would invert the first stage; refit with the first stage ignored.
        let (x0, it) = run(Some(0.0));
        x = x0;
        iterations += it;
    }
    let rho = x[0];
    x.remove(0);
    if options.cap_one_sided_beta {
        cap_one_sided(groups, offsets, rho, &mut x);
    }
    (rho, x, iterations)
}

/// Bounds the β of a skill whose pairs all went one way by what those pairs showed. A skill
/// that won every pair it was in has no finite best β (its wins are separable: the larger β,
/// the likelier they look) and only the prior stops it; the runs show only that it overcame
/// score deficits (ρ·Δr plus offsets) up to the largest one, so β goes no further. Likewise a
/// skill that lost every pair sinks no lower than minus the largest lead it lost with. A skill
/// with wins and losses keeps its fitted β: the likelihood bounds it.
fn cap_one_sided(groups: &[&Group], offsets: &[Vec<f64>], rho: f64, beta: &mut [f64]) {
    // Per skill: (pairs won, largest deficit overcome, pairs lost, largest lead lost with).
    let mut seen = vec![(0usize, 0.0f64, 0usize, 0.0f64); beta.len()];
    for (group, offset) in groups.iter().zip(offsets) {
        for &(a, b, _) in &group.pairs {
            let (a, b) = (a as usize, b as usize);
            // The winner's lead over the loser without β (negative: the winner's deficit).
            let lead =
                rho * (group.relevance[a] - group.relevance[b]) as f64 + offset[a] - offset[b];
            let winner = &mut seen[group.skills[a]];
            winner.0 += 1;
            winner.1 = winner.1.max(-lead);
            let loser = &mut seen[group.skills[b]];
            loser.2 += 1;
            loser.3 = loser.3.max(-lead);
        }
    }
    for (b, &(won, deficit, lost, lead)) in beta.iter_mut().zip(&seen) {
        if won > 0 && lost == 0 {
            *b = b.min(deficit);
        } else if lost > 0 && won == 0 {
            *b = b.max(-lead);
        }
    }
}

fn fit_dk(
    groups: &[&Group],
    n_skills: usize,
    dim: usize,
    rho: f64,
    beta: &[f64],
    options: &FitOptions,
) -> (Vec<f32>, usize) {
    crate::threads::global_pool();
    // Only skills that occur in some group get parameters.
    let mut active_of = vec![usize::MAX; n_skills];
    let mut active: Vec<usize> = Vec::new();
    // incidence[a] = (group, position in the group's skills)
    let mut incidence: Vec<Vec<(u32, u32)>> = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for (j, &s) in group.skills.iter().enumerate() {
            if active_of[s] == usize::MAX {
                active_of[s] = active.len();
                active.push(s);
                incidence.push(Vec::new());
            }
            incidence[active_of[s]].push((g as u32, j as u32));
        }
    }
    let mut x = vec![0.0f64; active.len() * dim];
    let gamma = options.keep_weight;
    let lambda = options.lambda_dk;
    let objective = |x: &[f64], grad: &mut [f64]| -> f64 {
        let params: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        // Per group: its loss and the derivative by each of its skills' terms u = (q − μ)ᵀΔk.
        let per_group: Vec<(f64, Vec<f64>)> = groups
            .par_iter()
            .map(|group| {
                let u: Vec<f64> = group
                    .skills
                    .iter()
                    .map(|&s| {
                        let a = active_of[s];
                        dot(&group.centered, &params[a * dim..(a + 1) * dim]) as f64
                    })
                    .collect();
                let mut coef = vec![0.0f64; u.len()];
                let mut f = 0.0;
                if group.pairs.is_empty() {
                    for (j, &uj) in u.iter().enumerate() {
                        f += gamma * uj * uj;
                        coef[j] += 2.0 * gamma * uj;
                    }
                } else {
                    for &(a, b, w) in &group.pairs {
                        let (a, b) = (a as usize, b as usize);
                        let m = rho * (group.relevance[a] - group.relevance[b]) as f64
                            + beta[group.skills[a]]
                            - beta[group.skills[b]];
                        let d = m + u[a] - u[b];
                        let w = w as f64;
                        f += w * softplus(-d);
                        let s = -w * sigmoid(-d);
                        coef[a] += s;
                        coef[b] -= s;
                    }
                }
                (f, coef)
            })
            .collect();
        let mut f: f64 = per_group.iter().map(|(f, _)| f).sum();
        f += lambda * x.iter().map(|v| v * v).sum::<f64>();
        grad.par_chunks_mut(dim)
            .zip(x.par_chunks(dim))
            .zip(incidence.par_iter())
            .for_each(|((g, xs), occurrences)| {
                for (gi, xi) in g.iter_mut().zip(xs) {
                    *gi = 2.0 * lambda * xi;
                }
                for &(group, j) in occurrences {
                    let c = per_group[group as usize].1[j as usize];
                    if c != 0.0 {
                        for (gi, v) in g.iter_mut().zip(&groups[group as usize].centered) {
                            *gi += c * *v as f64;
                        }
                    }
                }
            });
        f
    };
    let out = lbfgs::minimize(&mut x, objective, options.max_iterations, 1e-6, 6);
    let mut dk = vec![0.0f32; n_skills * dim];
    for (a, &s) in active.iter().enumerate() {
        for d in 0..dim {
            dk[s * dim + d] = x[a * dim + d] as f32;
        }
    }
    (dk, out.iterations)
}
