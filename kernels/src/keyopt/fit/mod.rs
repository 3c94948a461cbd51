//! Fitting a KeyOpt round from support runs. Steps 1 (pairs) in `pairs.rs`, 2–3 (the two
//! objectives) in `objective.rs`, 4 (cross-validation) in `cv.rs`; this file ties them together.
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
//! Both optimisations are convex and run L-BFGS ([`crate::keyopt::lbfgs`]); the gradients are summed in a
//! fixed order, so a fit is deterministic whatever the number of threads.

use super::{memory, Arm, Settings};

mod cv;
mod objective;
mod pairs;

use cv::cross_validate;
use objective::fit_model;
use pairs::{build_groups, largest_deficits_overcome, Group};

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
    /// A run that served several skills together and passed or failed as a whole. `arms` then
    /// holds only the skills whose own outcome is also known (often none).
    pub set: Option<SetOutcome>,
}

/// The outcome of a run as a whole: every skill it served, and whether it passed.
#[derive(Clone, Debug)]
pub struct SetOutcome {
    /// Indexes into the skill keys, as `Arm::skill`.
    pub skills: Vec<i64>,
    pub passed: bool,
    /// r(task, skill) per skill when it is not qᵀk0 (as `SupportEvent::relevance`).
    pub relevance: Option<Vec<f32>>,
}

impl SupportEvent {
    /// What the event memory reads of this run: the arms whose outcome is known, and every
    /// other skill of its set with the set's outcome (the set's pass or failure is shared by
    /// the skills that made it up, since which one decided it is not known).
    pub fn reading_arms(&self) -> Vec<Arm> {
        let mut arms = self.arms.clone();
        if let Some(set) = &self.set {
            for &skill in &set.skills {
                if !arms.iter().any(|a| a.skill == skill) {
                    arms.push(Arm {
                        skill,
                        passed: set.passed,
                    });
                }
            }
        }
        arms
    }
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
    /// Weight of Σβ²: β is served for every query.
    pub lambda_beta: f64,
    /// Bound the β of a skill that only won (only lost) by the largest score deficit it overcame
    /// (lead it lost with) in the support pairs (`objective.rs`, `cap_one_sided`).
    pub cap_one_sided_beta: bool,
    /// Store each skill's lift bound (the largest relevance deficit it overcame in the support)
    /// so that readings never lift it over a rival further ahead (`keyopt::lift`); false:
    /// unbounded. Cross-validation scores the held-out tasks the same way.
    pub bound_lifts: bool,
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
    /// A correction is used only when the best setting's cross-validated gain over r alone
    /// exceeds this many standard errors of that gain (over held-out groups): a handful of runs
    /// picks a correction only when they agree. 2 (about a one-sided 97.5% test): at 1, one
    /// SkillsBench fold took a correction of gain 0.004 ± 0.003 that lost NDCG on its test
    /// fold.
    pub min_gain_se: f64,
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
            cap_one_sided_beta: true,
            bound_lifts: true,
            lambda_rho: 1.0,
            lambda_dk: 1.0,
            keep_weight: 1.0,
            folds: 5,
            grid: Grid::default(),
            neighbours: memory::NEIGHBOURS,
            max_iterations: 200,
            tie_tolerance: 1e-9,
            min_gain_se: 2.0,
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
    /// Standard error of the setting's per-group gain over r alone (infinite with fewer than two
    /// held-out groups).
    pub gain_se: f64,
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
    /// The best setting's gain over r alone and its standard error (the uncertainty of the
    /// choice; infinite with fewer than two held-out groups).
    pub best_gain: f64,
    pub best_gain_se: f64,
    pub cv: Vec<CvResult>,
    /// Held-out accuracy per group of what the round serves (its chosen setting, or r alone
    /// when neutral), in the fixed group order: fits of the same runs under another r compare
    /// group by group ([`best_of`]).
    pub served_per_group: Vec<f64>,
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
            "best_gain": self.best_gain,
            "best_gain_se": if self.best_gain_se.is_finite() { Some(self.best_gain_se) } else { None },
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

impl FitReport {
    /// Cross-validated pair accuracy of what the round serves: the chosen setting's, or r
    /// alone's when the round is neutral.
    pub fn served_accuracy(&self) -> f64 {
        let best = self
            .cv
            .iter()
            .map(|c| c.accuracy)
            .fold(f64::NEG_INFINITY, f64::max);
        if self.corrections && best.is_finite() {
            best
        } else {
            self.relevance_only_accuracy
        }
    }
}

/// Shares w of BM25 a fit tries in the base relevance r = qᵀk0 + w·BM25(q, s) / sup BM25(q),
/// where sup BM25(q) is the most any document could score for q ([`bm25_relevance_part`];
/// benches/RESULTS.md, "The base relevance r"): w = 0 is the key score alone.
pub const BM25_SHARES: [f32; 5] = [0.0, 0.25, 0.5, 1.0, 2.0];

/// The share of BM25 in the base relevance of a library with no round, or with a round that
/// corrects nothing ([`choose_share`]). With no round, every share of [`BM25_SHARES`] above 0
/// beat the key score alone on both benchmark libraries (benches/RESULTS.md, "The base
/// relevance of a new library"); 1 and 2 serve single requests best, but at 1 the whole
/// request's words outweigh covering its parts (a request of two needs loses its second one
/// in the pg_test `a_request_of_two_parts_serves_a_skill_for_each`), and on the SkillsBench
/// tasks that need several skills 0.5 serves best. 0.5 passes that gate and is within 0.002
/// NDCG@10 of the best on the tool library.
pub const DEFAULT_BM25_SHARE: f64 = 0.5;

/// Of fits of the same runs at each share of [`BM25_SHARES`] (in that order), the one a round
/// keeps, and the share it is read with. The fit is [`best_of`] with the key score alone as the
/// default: another share must serve clearly better, because the words of near-duplicate
/// support tasks can explain their runs by BM25 alone, where a correction of the key score
/// carries over to a reworded request. A round that corrects nothing is read at
/// `default_share`, as a library with no round is, unless cross-validation clearly prefers the
/// chosen fit's share to the default one (by the same rule; comparable only where the default
/// is one of the shares fitted): its share then rests on the support runs' base relevance
/// alone, and a share that only beats the key score alone on a handful of tasks is weaker
/// evidence than the default. Returns the fit's position, the fit and the share.
pub fn choose_share(
    fits: Vec<Fitted>,
    default_share: f32,
    min_gain_se: f64,
) -> (usize, Fitted, f32) {
    assert!(fits.len() <= BM25_SHARES.len());
    let served: Vec<Vec<f64>> = fits
        .iter()
        .map(|f| f.report.served_per_group.clone())
        .collect();
    let (at, fitted) = best_of(fits, min_gain_se);
    if !fitted.is_neutral() {
        return (at, fitted, BM25_SHARES[at]);
    }
    let beats_the_default = BM25_SHARES[..served.len()]
        .iter()
        .position(|&w| w == default_share)
        .filter(|&d| d != at)
        .and_then(|d| paired_gain(&served[at], &served[d]))
        .is_some_and(|(mean, se)| mean > (min_gain_se * se).max(1e-12));
    let share = if beats_the_default {
        BM25_SHARES[at]
    } else {
        default_share
    };
    (at, fitted, share)
}

/// The BM25 part of that base relevance from the BM25 scores (id, score) of some documents for
/// a query and the most any document could score for it (Σ idf·(k1 + 1) over its terms; the
/// index's `Scorer::supremum`): each score over that supremum, in [0, 1). It depends on the
/// query and the document alone, not on which documents are scored or how the best one
/// scores, so the fit and the serving can score just the skills they read. Nothing when the
/// supremum is 0 (no query term in the corpus); skills without an entry add 0.
pub fn bm25_relevance_part(
    scores: &[(i64, f64)],
    supremum: f64,
) -> std::collections::HashMap<i64, f32> {
    if supremum.is_nan() || supremum <= 0.0 {
        return std::collections::HashMap::new();
    }
    scores
        .iter()
        .filter(|s| s.1 > 0.0)
        .map(|&(id, score)| (id, (score / supremum) as f32))
        .collect()
}

/// The mean per-group gain of `groups` over `baseline` (the same groups, in the same order) and
/// its standard error; None unless both have the same two or more groups.
pub fn paired_gain(groups: &[f64], baseline: &[f64]) -> Option<(f64, f64)> {
    if groups.len() != baseline.len() || groups.len() < 2 {
        return None;
    }
    let n = groups.len() as f64;
    let diff: Vec<f64> = groups.iter().zip(baseline).map(|(a, b)| a - b).collect();
    let mean = diff.iter().sum::<f64>() / n;
    let variance = diff.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, (variance / n).sqrt()))
}

/// Of fits of the same runs under different base relevances (the first is the default r), the
/// one whose served ranking cross-validation scores best, where another r than the first must
/// beat the first by more than `min_gain_se` standard errors of the per-group difference (the
/// same evidence rule as for using corrections at all); ties go to the earlier. Returns its
/// position and the fit.
pub fn best_of(fits: Vec<Fitted>, min_gain_se: f64) -> (usize, Fitted) {
    let baseline = fits
        .first()
        .expect("at least one fit")
        .report
        .served_per_group
        .clone();
    let clears_the_baseline = |f: &Fitted| -> bool {
        paired_gain(&f.report.served_per_group, &baseline)
            .is_some_and(|(mean, se)| mean > (min_gain_se * se).max(1e-12))
    };
    let mut best: Option<(usize, Fitted)> = None;
    for (i, f) in fits.into_iter().enumerate() {
        let eligible = i == 0 || clears_the_baseline(&f);
        let better = best
            .as_ref()
            .is_none_or(|(_, b)| f.report.served_accuracy() > b.report.served_accuracy() + 1e-12);
        if eligible && better {
            best = Some((i, f));
        }
    }
    best.expect("the first fit is always eligible")
}

/// A fitted round before packing: per skill (index order) β and Δk.
#[derive(Clone, Debug)]
pub struct Fitted {
    pub rho: f32,
    pub mu: Vec<f32>,
    pub beta: Vec<f32>,
    pub dk: Vec<Vec<f32>>,
    /// Per skill, the largest ρ·r deficit it overcame in the support (infinite when
    /// `bound_lifts` is off; 0 in a neutral round).
    pub lift_bound: Vec<f32>,
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
        lift_bound: vec![0.0; n],
        settings: Settings::NONE,
        report,
    };
    if report.discordant_groups == 0 {
        report.chosen = Some(Settings::NONE);
        return neutral(mu, report);
    }

    // Cross-validation over folds of source questions.
    let outcome = cross_validate(&groups, events, n, dim, options);
    report.held_out_groups = outcome.held_out;
    report.relevance_only_accuracy = outcome.relevance_only;
    report.cv = outcome.results;
    report.served_per_group = outcome.per_group_relevance.clone();
    let best = report
        .cv
        .iter()
        .max_by(|a, b| a.accuracy.total_cmp(&b.accuracy))
        .copied()
        .expect("a non-empty grid");
    report.best_gain = best.accuracy - report.relevance_only_accuracy;
    report.best_gain_se = best.gain_se;
    // No correction at all is the weakest setting: when no setting beats the first-stage score
    // on held-out tasks by more than its uncertainty, the round stays neutral.
    let margin = (options.min_gain_se * best.gain_se).max(options.tie_tolerance);
    if report.best_gain.is_nan() || report.best_gain <= margin {
        report.chosen = Some(Settings::NONE);
        report.corrections = false;
        return neutral(mu, report);
    }
    // The grid is weakest first: the first setting that reaches the best wins the tie. (Not
    // the weakest within a standard error: pair accuracy is flat near the best while Hit@1 is
    // not, and on large histories that rule gave up a tenth of the planted-truth Hit@1.)
    let chosen_at = report
        .cv
        .iter()
        .position(|c| c.accuracy >= best.accuracy - options.tie_tolerance)
        .unwrap_or(0);
    let chosen = report.cv[chosen_at].settings;
    report.served_per_group = outcome.per_group[chosen_at]
        .iter()
        .map(|&a| a as f64)
        .collect();
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
    let lift_bound = if options.bound_lifts {
        largest_deficits_overcome(&all, n, rho)
    } else {
        vec![f32::INFINITY; n]
    };
    Fitted {
        rho: rho as f32,
        mu,
        beta: beta.iter().map(|&b| b as f32).collect(),
        dk,
        lift_bound,
        settings: chosen,
        report,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

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
            set: None,
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

    /// Another base relevance replaces the default only when its per-group gain is clear: a
    /// consistent gain wins, a larger but noisy one does not.
    #[test]
    fn another_base_relevance_must_clearly_beat_the_default() {
        let neutral = |per_group: Vec<f64>| {
            let mean = per_group.iter().sum::<f64>() / per_group.len() as f64;
            Fitted {
                rho: 1.0,
                mu: Vec::new(),
                beta: Vec::new(),
                dk: Vec::new(),
                lift_bound: Vec::new(),
                settings: Settings::NONE,
                report: FitReport {
                    relevance_only_accuracy: mean,
                    served_per_group: per_group,
                    ..FitReport::default()
                },
            }
        };
        let baseline = vec![0.5; 12];
        // +0.1 on every group; +0.25 on average but +1.5 on two groups and −0.05 elsewhere.
        let consistent: Vec<f64> = baseline.iter().map(|b| b + 0.1).collect();
        let noisy: Vec<f64> = (0..12)
            .map(|g| if g < 2 { 1.0 + 0.5 } else { 0.45 })
            .collect();
        let (i, _) = best_of(
            vec![
                neutral(baseline.clone()),
                neutral(noisy.clone()),
                neutral(consistent.clone()),
            ],
            2.0,
        );
        assert_eq!(i, 2);
        let (i, _) = best_of(vec![neutral(baseline.clone()), neutral(noisy)], 2.0);
        assert_eq!(i, 0, "a gain carried by two groups is not clear");
        // Equal served accuracy: the default stays.
        let (i, _) = best_of(
            vec![neutral(baseline.clone()), neutral(baseline.clone())],
            2.0,
        );
        assert_eq!(i, 0);

        // The share a round is read with: a clear winner's when it corrects something; for a
        // round that corrects nothing, the default share unless the chosen one clearly beats
        // it too; with a correction at the key score alone, the key score alone.
        let mut corrected_consistent = neutral(consistent.clone());
        corrected_consistent.beta = vec![0.2, 0.0];
        let (_, _, share) = choose_share(
            vec![
                neutral(baseline.clone()),
                neutral(baseline.clone()),
                corrected_consistent,
            ],
            DEFAULT_BM25_SHARE as f32,
            2.0,
        );
        assert_eq!(share, BM25_SHARES[2]);
        let default_at = BM25_SHARES
            .iter()
            .position(|&w| w == DEFAULT_BM25_SHARE as f32)
            .expect("the default share is fitted");
        assert!(default_at >= 2);
        let three = |at_default: Vec<f64>| {
            let mut fits = vec![neutral(baseline.clone()); default_at + 1];
            fits[1] = neutral(consistent.clone());
            fits[default_at] = neutral(at_default);
            choose_share(fits, DEFAULT_BM25_SHARE as f32, 2.0).2
        };
        // Share 1 clearly beats the key score alone, not the default share, which serves as
        // well on average (better on half the groups, worse on the others).
        let as_good: Vec<f64> = (0..12)
            .map(|g| consistent[g] + if g % 2 == 0 { 0.05 } else { -0.05 })
            .collect();
        assert_eq!(three(as_good), DEFAULT_BM25_SHARE as f32);
        // ... and the default share, which serves worse on every group.
        assert_eq!(three(baseline.clone()), BM25_SHARES[1]);
        let (_, _, share) = choose_share(
            vec![neutral(baseline.clone()), neutral(baseline.clone())],
            DEFAULT_BM25_SHARE as f32,
            2.0,
        );
        assert_eq!(share, DEFAULT_BM25_SHARE as f32);
        let mut corrected = neutral(baseline.clone());
        corrected.beta = vec![0.2, 0.0];
        let (_, fitted, share) = choose_share(
            vec![corrected, neutral(baseline.clone())],
            DEFAULT_BM25_SHARE as f32,
            2.0,
        );
        assert_eq!(share, 0.0);
        assert!(!fitted.is_neutral());
    }

    /// Runs that passed or failed as a whole: a passing and a failing set of the same task
    /// that differ in one skill make one full pair; what both served cancels; sets that differ
    /// in more share a weight of 1; a lone set run, or sets with one outcome, make none.
    #[test]
    fn set_outcomes_pair_the_skills_two_sets_do_not_share() {
        let keys = vec![vec![1.0, 0.0]; 5];
        let set_run = |pairing: u64, skills: &[i64], passed: bool| SupportEvent {
            key: vec![1.0, 0.0],
            pairing,
            group: pairing,
            arms: Vec::new(),
            relevance: None,
            set: Some(SetOutcome {
                skills: skills.to_vec(),
                passed,
                relevance: None,
            }),
        };
        let events = vec![
            set_run(1, &[0, 1], true),
            set_run(1, &[0, 2], false),
            set_run(2, &[0, 1, 2], true),
            set_run(2, &[3, 4, 2], false),
            set_run(3, &[0, 1], true),
            set_run(4, &[0, 1], false),
            set_run(4, &[0, 2], false),
        ];
        let groups = build_groups(&keys, &events, &[0.0, 0.0]);
        let named = |g: &Group| -> Vec<(usize, usize, f32)> {
            let mut p: Vec<(usize, usize, f32)> = g
                .pairs
                .iter()
                .map(|&(a, b, w)| (g.skills[a as usize], g.skills[b as usize], w))
                .collect();
            p.sort_by_key(|x| (x.0, x.1));
            p
        };
        assert_eq!(named(&groups[0]), vec![(1, 2, 1.0)]);
        assert_eq!(
            named(&groups[1]),
            vec![(0, 3, 0.25), (0, 4, 0.25), (1, 3, 0.25), (1, 4, 0.25)]
        );
        assert!(groups[2].pairs.is_empty() && groups[3].pairs.is_empty());
        // The event memory reads each member with the set's outcome, known arms as they are.
        let mixed = SupportEvent {
            arms: vec![arm(1, false)],
            ..set_run(5, &[0, 1], true)
        };
        assert_eq!(mixed.reading_arms(), vec![arm(1, false), arm(0, true)]);
    }

    /// Only set outcomes, no arm's own: each task is run a few times with 3 of its 5 candidates
    /// and passes exactly when the one skill that matters was among them. The fit finds that
    /// skill (the largest β) and ranks it first on tasks it never saw.
    #[test]
    fn a_fit_from_set_outcomes_alone_finds_the_skill_that_decides() {
        let mut rng = SplitMix64(21);
        let dim = 16;
        let keys: Vec<Vec<f32>> = (0..5).map(|_| unit(&mut rng, dim)).collect();
        let needed = 3i64;
        let topic = unit(&mut rng, dim);
        let task = |rng: &mut SplitMix64| -> Vec<f32> {
            let noise = unit(rng, dim);
            let mut v: Vec<f32> = topic.iter().zip(&noise).map(|(t, n)| t + 0.3 * n).collect();
            crate::encoder::normalize(&mut v);
            v
        };
        let mut events = Vec::new();
        for t in 0..40u64 {
            let key = task(&mut rng);
            for _ in 0..3 {
                let mut served: Vec<i64> = (0..5).collect();
                for i in (1..served.len()).rev() {
                    served.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
                }
                served.truncate(3);
                events.push(SupportEvent {
                    key: key.clone(),
                    pairing: t,
                    group: t,
                    arms: Vec::new(),
                    relevance: None,
                    set: Some(SetOutcome {
                        passed: served.contains(&needed),
                        skills: served,
                        relevance: None,
                    }),
                });
            }
        }
        let fitted = fit(&keys, &events, &FitOptions::default());
        assert!(fitted.report.corrections, "{:?}", fitted.report);
        let best = (0..5)
            .max_by(|&a, &b| fitted.beta[a].total_cmp(&fitted.beta[b]))
            .unwrap();
        assert_eq!(best as i64, needed, "β {:?}", fitted.beta);
        let round = crate::keyopt::Round::new(&keys, &fitted);
        for _ in 0..20 {
            let q = round.query(&task(&mut rng));
            let first = round.rank(&[0, 1, 2, 3, 4], &q, |_| 0.0)[0].0;
            assert_eq!(first as i64, needed);
        }
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
            set: None,
        }];
        let groups = build_groups(&keys, &events, &[0.0, 0.0]);
        assert_eq!(groups[0].relevance, vec![0.25, 0.75]);
        // ρ is fitted against that r: skill 1 wins and has the higher r, so ρ > 0 explains it.
        let without = build_groups(
            &keys,
            &[SupportEvent {
                relevance: None,
                set: None,
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
                set: None,
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
                set: None,
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
                    set: None,
                }
            })
            .collect();
        let a = fit(&keys, &events, &FitOptions::default());
        let b = fit(&keys, &events, &FitOptions::default());
        assert_eq!(a.beta, b.beta);
        assert_eq!(a.dk, b.dk);
        assert_eq!(a.settings, b.settings);
    }
    /// A skill that won every pair it was in: the fit alone would grow its β until only the
    /// prior stops it (β ≈ 1.76 after the demo's 8 runs, far past any relevance gap it
    /// overcame). Its β is bounded by the largest deficit ρ·Δr it overcame; a skill with wins
    /// and losses is not bounded.
    #[test]
    fn a_skill_that_only_won_gets_no_more_beta_than_the_deficits_it_overcame() {
        // 2-d keys: skill 0 is the relevant-looking one, skill 1 always wins slightly behind it.
        let keys = vec![vec![1.0, 0.0], vec![0.9950, 0.0998], vec![0.0, 1.0]];
        let mut events = Vec::new();
        for t in 0..12u64 {
            events.push(SupportEvent {
                key: vec![1.0, 0.0],
                pairing: t,
                group: t,
                arms: vec![arm(0, false), arm(1, true)],
                relevance: None,
                set: None,
            });
        }
        // skill 2 wins some and loses some against skill 0 on other tasks
        for t in 12..24u64 {
            events.push(SupportEvent {
                key: vec![0.6, 0.8],
                pairing: t,
                group: t,
                arms: vec![arm(0, t % 3 == 0), arm(2, t % 3 != 0)],
                relevance: None,
                set: None,
            });
        }
        let uncapped = fit(
            &keys,
            &events,
            &FitOptions {
                cap_one_sided_beta: false,
                ..FitOptions::default()
            },
        );
        let capped = fit(&keys, &events, &FitOptions::default());
        assert!(capped.report.corrections, "{:?}", capped.report);
        // deficit of skill 1: r0 − r1 = 1 − 0.995 = 0.005 on every task it won
        let deficit = capped.rho * (1.0 - 0.995);
        assert!(
            uncapped.beta[1] > 10.0 * deficit,
            "uncapped β {} vs deficit {deficit}",
            uncapped.beta[1]
        );
        assert!(
            capped.beta[1] > 0.0 && capped.beta[1] <= deficit + 1e-6,
            "β {} vs deficit {deficit}",
            capped.beta[1]
        );
        // skill 2 won and lost: its β is the fitted one
        assert_eq!(capped.beta[2], uncapped.beta[2]);
        // Lift bounds: skill 1 overcame 0.005, skill 0 overcame 0.2 (0.8 − 0.6) when it beat
        // skill 2, and skill 2 only ever won from ahead.
        let bound = |s: usize, deficit: f32| (capped.lift_bound[s] - capped.rho * deficit).abs();
        assert!(bound(1, 0.005) < 1e-5, "{:?}", capped.lift_bound);
        assert!(bound(0, 0.2) < 1e-5, "{:?}", capped.lift_bound);
        assert_eq!(capped.lift_bound[2], 0.0);
        let unbounded = fit(
            &keys,
            &events,
            &FitOptions {
                bound_lifts: false,
                ..FitOptions::default()
            },
        );
        assert!(unbounded.lift_bound.iter().all(|b| b.is_infinite()));
    }

    /// The cross-validated gain over r alone must exceed its standard error: held-out groups
    /// that disagree (a correction that helps on some and hurts on others) give a neutral round,
    /// and the report carries the gain and its uncertainty.
    #[test]
    fn a_gain_within_its_standard_error_keeps_the_round_neutral() {
        let keys = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        let event = |t: u64, key: Vec<f32>, first_wins: bool| SupportEvent {
            key,
            pairing: t,
            group: t,
            arms: vec![arm(0, first_wins), arm(1, !first_wins)],
            relevance: None,
            set: None,
        };
        // skill 1 wins half the time, skill 0 the other half, on the same kind of task.
        let noisy: Vec<SupportEvent> = (0..10u64)
            .map(|t| event(t, vec![0.8, 0.6], t % 2 == 0))
            .collect();
        let fitted = fit(&keys, &noisy, &FitOptions::default());
        assert!(!fitted.report.corrections, "{:?}", fitted.report);
        assert!(fitted.is_neutral());
        // consistent: skill 1 always wins although skill 0 looks more relevant
        let consistent: Vec<SupportEvent> = (0..10u64)
            .map(|t| event(t, vec![0.8, 0.6], false))
            .collect();
        let fitted = fit(&keys, &consistent, &FitOptions::default());
        assert!(fitted.report.corrections, "{:?}", fitted.report);
        assert!(fitted.report.best_gain > fitted.report.best_gain_se);
        assert!(fitted.report.best_gain_se.is_finite());
    }
}
