//! Step 4 of a fit: K-fold cross-validation over groups of source questions. Every setting of
//! the grid is scored by the weighted share of held-out discordant pairs it orders correctly.

use super::objective::fit_model;
use super::pairs::{largest_deficits_overcome, Group};
use super::{CvResult, FitOptions, SupportEvent};
use crate::keyopt::lift::bounded_order;
use crate::keyopt::memory::{self, EventMemory};
use crate::keyopt::Parts;
use crate::rng::SplitMix64;
use crate::vector::dot;

/// Weighted share of a group's pairs that `scores` (per skill of the group) orders correctly;
/// equal scores count half.
fn pair_accuracy(group: &Group, scores: &[f32]) -> f64 {
    let mut right = 0.0;
    let mut total = 0.0;
    for &(a, b, w) in &group.pairs {
        let (sa, sb) = (scores[a as usize], scores[b as usize]);
        let w = w as f64;
        total += w;
        if sa > sb {
            right += w;
        } else if sa == sb {
            right += 0.5 * w;
        }
    }
    right / total
}

/// What cross-validation measured.
pub(super) struct CvOutcome {
    /// Held-out accuracy per setting of the grid.
    pub results: Vec<CvResult>,
    pub held_out: usize,
    /// Accuracy of the first-stage score alone on the same groups.
    pub relevance_only: f64,
    /// Per held-out group (in a fixed order: the same runs give the same order whatever r is),
    /// the accuracy of r alone, and of each setting (`per_group[setting][group]`).
    pub per_group_relevance: Vec<f64>,
    pub per_group: Vec<Vec<f32>>,
}

/// The grid's held-out accuracy per setting, and per held-out group.
pub(super) fn cross_validate(
    groups: &[Group],
    events: &[SupportEvent],
    n: usize,
    dim: usize,
    options: &FitOptions,
) -> CvOutcome {
    let folds = options.folds.max(2);
    let fold_of =
        |g: &Group| (SplitMix64(g.fold_key ^ options.seed).next_u64() % folds as u64) as usize;
    let grid = options.grid.settings();
    let mut kappas: Vec<f32> = grid.iter().map(|s| s.kappa).collect();
    kappas.sort_by(f32::total_cmp);
    kappas.dedup();
    let mut sums = vec![0.0f64; grid.len()];
    let mut per_group_relevance: Vec<f64> = Vec::new();
    let mut per_group: Vec<Vec<f32>> = vec![Vec::new(); grid.len()];
    // Per setting, Σ and Σ² of its per-group gain over r alone (for the gain's standard error).
    let mut gains = vec![(0.0f64, 0.0f64); grid.len()];
    let mut relevance_sum = 0.0;
    let mut held_out = 0usize;
    for fold in 0..folds {
        crate::interrupt::check();
        let train: Vec<&Group> = groups.iter().filter(|g| fold_of(g) != fold).collect();
        let mut held: Vec<&Group> = groups
            .iter()
            .filter(|g| fold_of(g) == fold && !g.pairs.is_empty())
            .collect();
        if held.len() > options.cv_max_held_out.max(1) {
            let step = held.len().div_ceil(options.cv_max_held_out.max(1));
            held = held.into_iter().step_by(step).collect();
        }
        if held.is_empty() {
            continue;
        }
        let model = fit_model(&train, n, dim, options, true);
        // Lift bounds of the training groups, per reading (with and without Δk: ρ differs).
        let bounds_of = |use_dk: bool| -> Vec<f32> {
            if options.bound_lifts {
                largest_deficits_overcome(&train, n, model.scale_and_beta(use_dk).0)
            } else {
                vec![f32::INFINITY; n]
            }
        };
        let lift_bounds = [bounds_of(false), bounds_of(true)];
        let mut memory = EventMemory::new(dim);
        for g in &train {
            for &e in &g.events {
                memory.push(&events[e].key, events[e].reading_arms());
            }
        }
        for group in &held {
            let neighbours = memory.neighbours(&group.key, options.neighbours);
            // Per reading: (ρ·r, β) of each skill of the group, and the skills' lift bounds.
            let base = |use_dk: bool| -> (Vec<(f32, f32)>, Vec<f32>) {
                let (rho, beta) = model.scale_and_beta(use_dk);
                let parts = group
                    .skills
                    .iter()
                    .zip(&group.relevance)
                    .map(|(&s, &r)| ((rho * r as f64) as f32, beta[s] as f32))
                    .collect();
                let bounds = group
                    .skills
                    .iter()
                    .map(|&s| lift_bounds[use_dk as usize][s])
                    .collect();
                (parts, bounds)
            };
            let bases = [base(false), base(true)];
            let u: Vec<f32> = group
                .skills
                .iter()
                .map(|&s| {
                    model
                        .dk_row(s, dim)
                        .map_or(0.0, |dk| dot(&group.centered, dk))
                })
                .collect();
            let readings: Vec<Vec<f32>> = kappas
                .iter()
                .map(|&kappa| {
                    group
                        .skills
                        .iter()
                        .map(|&s| memory::event_reading(&neighbours, s as i64, kappa))
                        .collect()
                })
                .collect();
            let relevance_accuracy = pair_accuracy(group, &group.relevance);
            relevance_sum += relevance_accuracy;
            per_group_relevance.push(relevance_accuracy);
            held_out += 1;
            let mut parts = vec![Parts::default(); group.skills.len()];
            let mut scores = vec![0.0f32; group.skills.len()];
            for (i, setting) in grid.iter().enumerate() {
                let k = kappas
                    .iter()
                    .position(|&k| k == setting.kappa)
                    .expect("kappa in list");
                let (base, bounds) = &bases[setting.use_dk as usize];
                for (j, p) in parts.iter_mut().enumerate() {
                    *p = Parts {
                        relevance: base[j].0,
                        beta: base[j].1,
                        dk_term: if setting.use_dk {
                            u[j].clamp(-setting.clip, setting.clip)
                        } else {
                            0.0
                        },
                        event_term: setting.alpha * readings[k][j],
                        held_back: 0.0,
                    };
                }
                // Scored by place in the bounded order, as a reading ranks them.
                for (place, j) in bounded_order(&mut parts, bounds).into_iter().enumerate() {
                    scores[j] = -(place as f32);
                }
                let accuracy = pair_accuracy(group, &scores);
                sums[i] += accuracy;
                per_group[i].push(accuracy as f32);
                let gain = accuracy - relevance_accuracy;
                gains[i].0 += gain;
                gains[i].1 += gain * gain;
            }
        }
    }
    let n = held_out.max(1) as f64;
    let cv = grid
        .iter()
        .zip(&sums)
        .zip(&gains)
        .map(|((&settings, &s), &(g, g2))| {
            let mean = g / n;
            // Standard error of the mean gain; with fewer than two held-out groups it is unknown.
            let gain_se = if held_out >= 2 {
                ((g2 / n - mean * mean).max(0.0) * n / (n - 1.0)).sqrt() / n.sqrt()
            } else {
                f64::INFINITY
            };
            CvResult {
                settings,
                accuracy: s / n,
                gain_se,
            }
        })
        .collect();
    CvOutcome {
        results: cv,
        held_out,
        relevance_only: relevance_sum / held_out.max(1) as f64,
        per_group_relevance,
        per_group,
    }
}
