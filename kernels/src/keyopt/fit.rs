//! Fitting a KeyOpt round from support runs (DESIGN.md "Fitting").
//!
//! 1. Runs are grouped by *pairing key* (same task, executor and budget). Within a group, every
//!    arm that passed is paired with every arm of another skill that failed: a discordant pair
//!    "a beat b", weighted by how many such arm pairs the group holds. Under a logistic outcome
//!    model P(pass) = σ(θ_task + score) the task difficulty θ cancels in a pair. A group where all
//!    arms passed or all failed (a tied group) adds no pair.
//! 2. β and ρ minimise Σ w·softplus(−(ρ·Δr + Δβ)) + λ_β·Σβ² + λ_ρ·(ρ − 1)² over the pairs
//!    (Δr = difference of the first-stage scores qᵀk0; ρ < 0 is refitted with ρ = 0).
//! 3. Δk minimises Σ w·softplus(−(ρ·Δr + Δβ + (q − μ)ᵀ(Δk_a − Δk_b))) + λ_k·Σ‖Δk‖² plus
//!    γ·Σ_tied ((q − μ)ᵀΔk_s)²: the keep penalty holds the term near 0 on the tasks of tied
//!    groups, where the outcome expressed no preference. β and ρ are then refitted once with the
//!    Δk term as an offset (readings with Δk use these; readings without keep step 2's).
//! 4. c, α, κ and whether to use Δk at all are chosen by K-fold cross-validation with folds
//!    grouped by source question: every setting of the grid is scored by the weighted share of
//!    held-out discordant pairs it orders correctly (per group, then averaged). The best setting
//!    wins; ties (within `tie_tolerance`) go to the weaker correction ([`Settings::strength_order`]).
//!    The first-stage score alone is the weakest setting of all: when no setting beats it, the
//!    round is neutral (every correction 0), as with no pairs.
//! 5. The chosen setting is refitted on all groups.
//!
//! No discordant pair anywhere ⇒ β = 0, Δk = 0, α = 0, ρ = 1: exactly the first-stage ranking.
//! Both optimisations are convex and run L-BFGS ([`super::lbfgs`]); the gradients are summed in a
//! fixed order, so a fit is deterministic whatever the number of threads.

use std::collections::HashMap;

use rayon::prelude::*;

use super::memory::{self, EventMemory};
use super::{lbfgs, Arm, Settings};
use crate::rng::SplitMix64;
use crate::vector::dot;

/// One recorded run used for fitting.
#[derive(Clone, Debug)]
pub struct SupportEvent {
    /// The task's query key (unit length).
    pub key: Vec<f32>,
    /// Runs with the same pairing key (task, executor, budget) are compared with each other.
    pub pairing: u64,
    /// The source question: cross-validation never splits one across folds.
    pub group: u64,
    /// `Arm::skill` indexes the skill keys passed to [`fit`].
    pub arms: Vec<Arm>,
    /// The base relevance r(task, skill) of each arm when it is not the key inner product qᵀk0
    /// (a cross-encoder's score); None: qᵀk0. The reading must use the same r.
    pub relevance: Option<Vec<f32>>,
}

/// The settings cross-validation chooses from.
#[derive(Clone, Debug)]
pub struct Grid {
    pub clips: Vec<f32>,
    pub alphas: Vec<f32>,
    pub kappas: Vec<f32>,
}

impl Default for Grid {
    fn default() -> Grid {
        Grid {
            clips: vec![0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
            alphas: vec![0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
            kappas: vec![2.5, 5.0, 10.0, 20.0],
        }
    }
}

impl Grid {
    /// Every setting, weakest first: Δk off or on with each clip, times α = 0 or each α with
    /// each κ.
    pub fn settings(&self) -> Vec<Settings> {
        let mut dk: Vec<(bool, f32)> = vec![(false, 0.0)];
        dk.extend(self.clips.iter().map(|&c| (true, c)));
        let mut events: Vec<(f32, f32)> = vec![(0.0, 0.0)];
        for &a in &self.alphas {
            events.extend(self.kappas.iter().map(|&k| (a, k)));
        }
        let mut out: Vec<Settings> = dk
            .iter()
            .flat_map(|&(use_dk, clip)| {
                events.iter().map(move |&(alpha, kappa)| Settings {
                    use_dk,
                    clip,
                    alpha,
                    kappa,
                })
            })
            .collect();
        out.sort_by(|a, b| a.strength_order(b));
        out
    }
}

#[derive(Clone, Debug)]
pub struct FitOptions {
    pub lambda_beta: f64,
    pub lambda_rho: f64,
    pub lambda_dk: f64,
    /// γ, the keep penalty's weight per tied (task, skill).
    pub keep_weight: f64,
    pub folds: usize,
    pub grid: Grid,
    /// Past events read per held-out task for the event term.
    pub neighbours: usize,
    pub max_iterations: usize,
    /// Settings whose cross-validated accuracy is within this of the best count as tied.
    pub tie_tolerance: f64,
    /// Seeds the assignment of source questions to folds.
    pub seed: u64,
    /// Held-out discordant tasks scored per fold at most (an even subsample beyond): bounds the
    /// cost of reading the event memory during cross-validation on large histories.
    pub cv_max_held_out: usize,
}

impl Default for FitOptions {
    fn default() -> FitOptions {
        FitOptions {
            lambda_beta: 1.0,
            lambda_rho: 1.0,
            lambda_dk: 1.0,
            keep_weight: 1.0,
            folds: 5,
            grid: Grid::default(),
            neighbours: memory::NEIGHBOURS,
            max_iterations: 200,
            tie_tolerance: 1e-9,
            seed: 0x6b65_796f_7074,
            cv_max_held_out: 2000,
        }
    }
}

/// Cross-validated accuracy of one setting.
#[derive(Clone, Copy, Debug)]
pub struct CvResult {
    pub settings: Settings,
    pub accuracy: f64,
}

/// What a fit saw and chose.
#[derive(Clone, Debug, Default)]
pub struct FitReport {
    pub events: usize,
    pub arms: usize,
    pub pairing_groups: usize,
    pub discordant_groups: usize,
    pub tied_groups: usize,
    /// Weighted number of discordant pairs.
    pub pairs: f64,
    pub held_out_groups: usize,
    /// Cross-validated accuracy of the first-stage score alone.
    pub relevance_only_accuracy: f64,
    pub cv: Vec<CvResult>,
    pub chosen: Option<Settings>,
    /// False when cross-validation kept the first-stage ranking (no correction beat it).
    pub corrections: bool,
    pub rho: f32,
    pub beta_iterations: usize,
    pub dk_iterations: usize,
}

impl FitReport {
    pub fn to_json(&self) -> serde_json::Value {
        let best = self
            .cv
            .iter()
            .map(|c| c.accuracy)
            .fold(f64::NEG_INFINITY, f64::max);
        serde_json::json!({
            "events": self.events,
            "arms": self.arms,
            "pairing_groups": self.pairing_groups,
            "discordant_groups": self.discordant_groups,
            "tied_groups": self.tied_groups,
            "pairs": self.pairs,
            "held_out_groups": self.held_out_groups,
            "relevance_only_accuracy": self.relevance_only_accuracy,
            "best_accuracy": if best.is_finite() { Some(best) } else { None },
            "chosen": self.chosen.map(|s| s.to_json()),
            "corrections": self.corrections,
            "rho": self.rho,
            "beta_iterations": self.beta_iterations,
            "dk_iterations": self.dk_iterations,
            "settings_tried": self.cv.len(),
        })
    }
}

/// A fitted round before packing: per skill (index order) β and Δk.
#[derive(Clone, Debug)]
pub struct Fitted {
    pub rho: f32,
    pub mu: Vec<f32>,
    pub beta: Vec<f32>,
    pub dk: Vec<Vec<f32>>,
    pub settings: Settings,
    pub report: FitReport,
}

impl Fitted {
    /// True when every correction is exactly zero (the round ranks by r alone).
    pub fn is_neutral(&self) -> bool {
        self.beta.iter().all(|&b| b == 0.0)
            && self.dk.iter().flatten().all(|&v| v == 0.0)
            && self.settings.alpha == 0.0
    }
}

/// Runs grouped by pairing key.
struct Group {
    key: Vec<f32>,
    centered: Vec<f32>,
    fold_key: u64,
    /// Distinct skills served in the group.
    skills: Vec<usize>,
    /// qᵀk0 per skill of `skills`.
    relevance: Vec<f32>,
    /// (winner, loser, weight), indices into `skills`.
    pairs: Vec<(u32, u32, f32)>,
    events: Vec<usize>,
}

fn build_groups(skill_keys: &[Vec<f32>], events: &[SupportEvent], mu: &[f32]) -> Vec<Group> {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    // passes and failures per skill of each group
    let mut counts: Vec<Vec<(u32, u32)>> = Vec::new();
    for (e, event) in events.iter().enumerate() {
        let g = *index.entry(event.pairing).or_insert_with(|| {
            groups.push(Group {
                key: event.key.clone(),
                centered: event.key.iter().zip(mu).map(|(q, m)| q - m).collect(),
                fold_key: event.group,
                skills: Vec::new(),
                relevance: Vec::new(),
                pairs: Vec::new(),
                events: Vec::new(),
            });
            counts.push(Vec::new());
            groups.len() - 1
        });
        let group = &mut groups[g];
        group.events.push(e);
        if let Some(r) = &event.relevance {
            assert_eq!(r.len(), event.arms.len(), "one relevance per arm");
        }
        for (a, arm) in event.arms.iter().enumerate() {
            let skill = arm.skill as usize;
            assert!(
                arm.skill >= 0 && skill < skill_keys.len(),
                "arm skill {} out of range",
                arm.skill
            );
            let j = match group.skills.iter().position(|&s| s == skill) {
                Some(j) => j,
                None => {
                    group.skills.push(skill);
                    group.relevance.push(match &event.relevance {
                        Some(r) => r[a],
                        None => dot(&group.key, &skill_keys[skill]),
                    });
                    counts[g].push((0, 0));
                    group.skills.len() - 1
                }
            };
            if arm.passed {
                counts[g][j].0 += 1;
            } else {
                counts[g][j].1 += 1;
            }
        }
    }
    for (group, counts) in groups.iter_mut().zip(&counts) {
        for (a, &(passes, _)) in counts.iter().enumerate() {
            for (b, &(_, failures)) in counts.iter().enumerate() {
                if a != b && passes > 0 && failures > 0 {
                    group
                        .pairs
                        .push((a as u32, b as u32, (passes * failures) as f32));
                }
            }
        }
    }
    groups
}

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
struct Model {
    /// ρ and β fitted without Δk: what a reading without the Δk term uses.
    plain: (f64, Vec<f64>),
    /// ρ and β refitted with the Δk term as an offset (when Δk was fitted).
    joint: Option<(f64, Vec<f64>)>,
    /// n × dim, or empty when Δk was not fitted.
    dk: Vec<f32>,
    beta_iterations: usize,
    dk_iterations: usize,
}

impl Model {
    fn dk_row(&self, skill: usize, dim: usize) -> Option<&[f32]> {
        if self.dk.is_empty() {
            None
        } else {
            Some(&self.dk[skill * dim..(skill + 1) * dim])
        }
    }

    /// ρ and β for a reading with or without the Δk term.
    fn scale_and_beta(&self, use_dk: bool) -> (f64, &[f64]) {
        match (&self.joint, use_dk) {
            (Some((rho, beta)), true) => (*rho, beta),
            _ => (self.plain.0, &self.plain.1),
        }
    }
}

/// Fits β and ρ, then (with `with_dk`) Δk given them, then β and ρ again with the Δk term as an
/// offset: the first β also absorbs the average of the query-dependent part, the refit does not.
fn fit_model(
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
    (rho, x, iterations)
}

fn fit_dk(
    groups: &[&Group],
    n_skills: usize,
    dim: usize,
    rho: f64,
    beta: &[f64],
    options: &FitOptions,
) -> (Vec<f32>, usize) {
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

/// Fits a round. `skill_keys[i]` is skill i's k0; every arm's `skill` indexes it.
pub fn fit(skill_keys: &[Vec<f32>], events: &[SupportEvent], options: &FitOptions) -> Fitted {
    let dim = skill_keys
        .first()
        .map(Vec::len)
        .or_else(|| events.first().map(|e| e.key.len()))
        .unwrap_or(crate::vector::KEY_DIM);
    let n = skill_keys.len();
    let mut mu = vec![0.0f32; dim];
    for e in events {
        for (m, v) in mu.iter_mut().zip(&e.key) {
            *m += v;
        }
    }
    if !events.is_empty() {
        mu.iter_mut().for_each(|m| *m /= events.len() as f32);
    }
    let groups = build_groups(skill_keys, events, &mu);
    let mut report = FitReport {
        events: events.len(),
        arms: events.iter().map(|e| e.arms.len()).sum(),
        pairing_groups: groups.len(),
        discordant_groups: groups.iter().filter(|g| !g.pairs.is_empty()).count(),
        tied_groups: groups.iter().filter(|g| g.pairs.is_empty()).count(),
        pairs: groups
            .iter()
            .flat_map(|g| &g.pairs)
            .map(|p| p.2 as f64)
            .sum(),
        rho: 1.0,
        ..FitReport::default()
    };
    let neutral = |mu: Vec<f32>, report: FitReport| Fitted {
        rho: 1.0,
        mu,
        beta: vec![0.0; n],
        dk: vec![vec![0.0; dim]; n],
        settings: Settings::NONE,
        report,
    };
    if report.discordant_groups == 0 {
        report.chosen = Some(Settings::NONE);
        return neutral(mu, report);
    }

    // Cross-validation over folds of source questions.
    let folds = options.folds.max(2);
    let fold_of =
        |g: &Group| (SplitMix64(g.fold_key ^ options.seed).next_u64() % folds as u64) as usize;
    let grid = options.grid.settings();
    let mut kappas: Vec<f32> = grid.iter().map(|s| s.kappa).collect();
    kappas.sort_by(f32::total_cmp);
    kappas.dedup();
    let mut sums = vec![0.0f64; grid.len()];
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
        let mut memory = EventMemory::new(dim);
        for g in &train {
            for &e in &g.events {
                memory.push(&events[e].key, events[e].arms.clone());
            }
        }
        for group in &held {
            let neighbours = memory.neighbours(&group.key, options.neighbours);
            let base = |use_dk: bool| -> Vec<f32> {
                let (rho, beta) = model.scale_and_beta(use_dk);
                group
                    .skills
                    .iter()
                    .zip(&group.relevance)
                    .map(|(&s, &r)| (rho * r as f64 + beta[s]) as f32)
                    .collect()
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
            relevance_sum += pair_accuracy(group, &group.relevance);
            held_out += 1;
            let mut scores = vec![0.0f32; group.skills.len()];
            for (i, setting) in grid.iter().enumerate() {
                let k = kappas
                    .iter()
                    .position(|&k| k == setting.kappa)
                    .expect("kappa in list");
                for j in 0..scores.len() {
                    let dk_term = if setting.use_dk {
                        u[j].clamp(-setting.clip, setting.clip)
                    } else {
                        0.0
                    };
                    scores[j] = bases[setting.use_dk as usize][j]
                        + dk_term
                        + setting.alpha * readings[k][j];
                }
                sums[i] += pair_accuracy(group, &scores);
            }
        }
    }
    report.held_out_groups = held_out;
    report.relevance_only_accuracy = relevance_sum / held_out.max(1) as f64;
    report.cv = grid
        .iter()
        .zip(&sums)
        .map(|(&settings, &s)| CvResult {
            settings,
            accuracy: s / held_out.max(1) as f64,
        })
        .collect();
    let best = report
        .cv
        .iter()
        .map(|c| c.accuracy)
        .fold(f64::NEG_INFINITY, f64::max);
    // No correction at all is the weakest setting: when no setting beats the first-stage score
    // on held-out tasks, the round stays neutral.
    if best <= report.relevance_only_accuracy + options.tie_tolerance {
        report.chosen = Some(Settings::NONE);
        report.corrections = false;
        return neutral(mu, report);
    }
    // The grid is weakest first: the first setting that reaches the best wins the tie.
    let chosen = report
        .cv
        .iter()
        .find(|c| c.accuracy >= best - options.tie_tolerance)
        .map(|c| c.settings)
        .unwrap_or(Settings::NONE);
    report.chosen = Some(chosen);
    report.corrections = true;

    let all: Vec<&Group> = groups.iter().collect();
    let model = fit_model(&all, n, dim, options, chosen.use_dk);
    let (rho, beta) = model.scale_and_beta(chosen.use_dk);
    report.rho = rho as f32;
    report.beta_iterations = model.beta_iterations;
    report.dk_iterations = model.dk_iterations;
    let dk = (0..n)
        .map(|s| {
            model
                .dk_row(s, dim)
                .map_or_else(|| vec![0.0; dim], <[f32]>::to_vec)
        })
        .collect();
    Fitted {
        rho: rho as f32,
        mu,
        beta: beta.iter().map(|&b| b as f32).collect(),
        dk,
        settings: chosen,
        report,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(skill: i64, passed: bool) -> Arm {
        Arm { skill, passed }
    }

    fn unit(rng: &mut SplitMix64, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 - 0.5).collect();
        crate::encoder::normalize(&mut v);
        v
    }

    #[test]
    fn groups_pair_passes_with_failures_of_other_skills() {
        let keys = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.6, 0.8]];
        let event = |pairing, arms| SupportEvent {
            key: vec![1.0, 0.0],
            pairing,
            group: pairing,
            arms,
            relevance: None,
        };
        let events = vec![
            // two runs of one task: skill 0 passes twice, skill 1 fails twice, skill 2 both
            event(1, vec![arm(0, true), arm(1, false), arm(2, true)]),
            event(1, vec![arm(0, true), arm(1, false), arm(2, false)]),
            // a tied task
            event(2, vec![arm(0, false), arm(1, false)]),
        ];
        let groups = build_groups(&keys, &events, &[0.0, 0.0]);
        assert_eq!(groups.len(), 2);
        let mut pairs = groups[0].pairs.clone();
        pairs.sort_by_key(|p| (p.0, p.1));
        // 0 beats 1 (2·2), 0 beats 2 (2·1), 2 beats 1 (1·2); never a skill against itself.
        assert_eq!(pairs, vec![(0, 1, 4.0), (0, 2, 2.0), (2, 1, 2.0)]);
        assert!(groups[1].pairs.is_empty());
        assert!((groups[0].relevance[2] - 0.6).abs() < 1e-6);
    }

    #[test]
    fn a_given_relevance_replaces_the_key_inner_product() {
        let keys = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        let events = vec![SupportEvent {
            key: vec![1.0, 0.0],
            pairing: 1,
            group: 1,
            arms: vec![arm(0, false), arm(1, true)],
            relevance: Some(vec![0.25, 0.75]),
        }];
        let groups = build_groups(&keys, &events, &[0.0, 0.0]);
        assert_eq!(groups[0].relevance, vec![0.25, 0.75]);
        // ρ is fitted against that r: skill 1 wins and has the higher r, so ρ > 0 explains it.
        let without = build_groups(
            &keys,
            &[SupportEvent {
                relevance: None,
                ..events[0].clone()
            }],
            &[0.0, 0.0],
        );
        assert_eq!(without[0].relevance, vec![1.0, 0.0]);
    }

    #[test]
    fn no_discordant_pair_means_every_correction_is_exactly_zero() {
        let mut rng = SplitMix64(3);
        let keys: Vec<Vec<f32>> = (0..20).map(|_| unit(&mut rng, 16)).collect();
        let events: Vec<SupportEvent> = (0..200)
            .map(|t| SupportEvent {
                key: unit(&mut rng, 16),
                pairing: t,
                group: t / 4,
                // every task all-pass or all-fail
                arms: (0..5)
                    .map(|j| arm(((t * 7 + j * 3) % 20) as i64, t % 3 == 0))
                    .collect(),
                relevance: None,
            })
            .collect();
        let fitted = fit(&keys, &events, &FitOptions::default());
        assert!(fitted.is_neutral(), "{:?}", fitted.report);
        assert_eq!(fitted.rho, 1.0);
        assert_eq!(fitted.settings, Settings::NONE);
        assert_eq!(fitted.report.discordant_groups, 0);
        assert_eq!(fitted.report.tied_groups, 200);
    }

    #[test]
    fn beta_orders_skills_by_how_often_they_win() {
        // Skill 0 beats 1, 1 beats 2, on different tasks, regardless of the key.
        let mut rng = SplitMix64(11);
        let keys: Vec<Vec<f32>> = (0..3).map(|_| unit(&mut rng, 8)).collect();
        let mut events = Vec::new();
        for t in 0..60u64 {
            let (w, l) = if t % 2 == 0 { (0, 1) } else { (1, 2) };
            events.push(SupportEvent {
                key: unit(&mut rng, 8),
                pairing: t,
                group: t,
                arms: vec![arm(w, true), arm(l, false)],
                relevance: None,
            });
        }
        let fitted = fit(&keys, &events, &FitOptions::default());
        assert!(
            fitted.beta[0] > fitted.beta[1] && fitted.beta[1] > fitted.beta[2],
            "{:?}",
            fitted.beta
        );
        assert!(fitted.report.cv.len() == FitOptions::default().grid.settings().len());
    }

    #[test]
    fn a_fit_is_deterministic() {
        let mut rng = SplitMix64(5);
        let keys: Vec<Vec<f32>> = (0..12).map(|_| unit(&mut rng, 16)).collect();
        let events: Vec<SupportEvent> = (0..150u64)
            .map(|t| {
                let key = unit(&mut rng, 16);
                let good = if key[0] > 0.0 { 3 } else { 7 };
                SupportEvent {
                    key,
                    pairing: t,
                    group: t / 3,
                    arms: vec![arm(good, true), arm((t % 12) as i64, t % 12 == good as u64)],
                    relevance: None,
                }
            })
            .collect();
        let a = fit(&keys, &events, &FitOptions::default());
        let b = fit(&keys, &events, &FitOptions::default());
        assert_eq!(a.beta, b.beta);
        assert_eq!(a.dk, b.dk);
        assert_eq!(a.settings, b.settings);
    }
}
