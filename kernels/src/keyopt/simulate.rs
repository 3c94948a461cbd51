//! A simulated executor with planted truth, for testing that the fit learns what it should.
//!
//! Skills and tasks have unit keys. A task's key is a topic direction plus a "context" part in a
//! few shared directions; skills lean weakly towards one topic, so the first-stage score r = qᵀk0
//! finds plausible candidates but does not know which of them work. A run of skill s on task t
//! passes with probability `σ(θ_t + u_s + v_sᵀ(q_t − μ))`: θ is the task's difficulty, u the
//! skill's quality (what β should recover) and v a query-dependent suitability that lives in the
//! context directions (what Δk should recover, up to scale).

use super::fit::SupportEvent;
use super::Arm;
use crate::rng::SplitMix64;
use crate::vector::dot;

fn gaussian(rng: &mut SplitMix64) -> f32 {
    // Box-Muller.
    let u1 = rng.unit().max(1e-12);
    let u2 = rng.unit();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    crate::encoder::normalize(&mut v);
    v
}

pub fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// The planted world.
pub struct World {
    pub dim: usize,
    pub skill_keys: Vec<Vec<f32>>,
    /// Planted per-skill quality.
    pub u: Vec<f32>,
    /// Planted per-skill suitability directions (in the context subspace).
    pub v: Vec<Vec<f32>>,
    /// The mean task key (estimated from many draws).
    pub mu: Vec<f32>,
    topics: Vec<Vec<f32>>,
    contexts: Vec<Vec<f32>>,
}

/// One task: its key, difficulty and source question.
#[derive(Clone, Debug)]
pub struct Task {
    pub key: Vec<f32>,
    pub theta: f32,
    pub group: u64,
}

impl World {
    /// `skills` skills over `topics` topics in `dim` dimensions, 4 context directions.
    pub fn new(seed: u64, skills: usize, topics: usize, dim: usize) -> World {
        let mut rng = SplitMix64(seed);
        let random = |rng: &mut SplitMix64| normalized((0..dim).map(|_| gaussian(rng)).collect());
        let topic_keys: Vec<Vec<f32>> = (0..topics).map(|_| random(&mut rng)).collect();
        // Context directions orthogonal to every topic and to each other, so the planted
        // suitability averages to zero within a topic and β can only learn u.
        let mut contexts: Vec<Vec<f32>> = Vec::new();
        while contexts.len() < 4 {
            let mut c = random(&mut rng);
            for b in topic_keys.iter().chain(&contexts) {
                let p = dot(&c, b) / dot(b, b);
                c.iter_mut().zip(b).for_each(|(x, y)| *x -= p * y);
            }
            contexts.push(normalized(c));
        }
        let mut skill_keys = Vec::new();
        let mut u = Vec::new();
        let mut v = Vec::new();
        for s in 0..skills {
            let topic = &topic_keys[s % topics];
            let noise = random(&mut rng);
            skill_keys.push(normalized(
                topic.iter().zip(&noise).map(|(t, n)| t + 0.8 * n).collect(),
            ));
            u.push(1.2 * gaussian(&mut rng));
            let mut vs = vec![0.0f32; dim];
            for c in &contexts {
                let a = 3.0 * gaussian(&mut rng);
                vs.iter_mut().zip(c).for_each(|(x, ci)| *x += a * ci);
            }
            v.push(vs);
        }
        let mut world = World {
            dim,
            skill_keys,
            u,
            v,
            mu: vec![0.0; dim],
            topics: topic_keys,
            contexts,
        };
        let draws = 4000;
        let mut mu = vec![0.0f32; dim];
        let mut probe = SplitMix64(seed ^ 0x5eed);
        for _ in 0..draws {
            let t = world.task(&mut probe, 0);
            mu.iter_mut()
                .zip(&t.key)
                .for_each(|(m, k)| *m += k / draws as f32);
        }
        world.mu = mu;
        world
    }

    /// A fresh task of source question `group`.
    pub fn task(&self, rng: &mut SplitMix64, group: u64) -> Task {
        let topic = &self.topics[rng.below(self.topics.len() as u64) as usize];
        let mut key: Vec<f32> = topic.clone();
        for c in &self.contexts {
            let z = 0.5 * gaussian(rng);
            key.iter_mut().zip(c).for_each(|(k, ci)| *k += z * ci);
        }
        for k in key.iter_mut() {
            *k += 0.15 * gaussian(rng) / (self.dim as f32).sqrt();
        }
        Task {
            key: normalized(key),
            theta: gaussian(rng),
            group,
        }
    }

    /// The planted P(pass) of `skill` on `task`.
    pub fn pass_probability(&self, task: &Task, skill: usize) -> f32 {
        let centered: Vec<f32> = task.key.iter().zip(&self.mu).map(|(q, m)| q - m).collect();
        sigmoid(task.theta + self.u[skill] + dot(&self.v[skill], &centered))
    }

    /// The planted suitability term vᵀ(q − μ) of `skill` for a query key.
    pub fn suitability(&self, key: &[f32], skill: usize) -> f32 {
        let centered: Vec<f32> = key.iter().zip(&self.mu).map(|(q, m)| q - m).collect();
        dot(&self.v[skill], &centered)
    }

    /// The first-stage candidates: the `k` skills of highest qᵀk0.
    pub fn candidates(&self, key: &[f32], k: usize) -> Vec<usize> {
        let mut scored: Vec<(f32, usize)> = self
            .skill_keys
            .iter()
            .enumerate()
            .map(|(i, s)| (dot(key, s), i))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(k).map(|(_, i)| i).collect()
    }

    /// One run of `task` with each of `skills`: outcomes drawn from the planted probabilities.
    pub fn run(&self, rng: &mut SplitMix64, task: &Task, skills: &[usize]) -> Vec<Arm> {
        skills
            .iter()
            .map(|&s| Arm {
                skill: s as i64,
                passed: rng.unit() < self.pass_probability(task, s) as f64,
            })
            .collect()
    }

    /// Support runs: `tasks` tasks (source questions of `per_group` paraphrase-free tasks each),
    /// each run once with its first-stage top `arms` skills.
    pub fn support(
        &self,
        seed: u64,
        tasks: usize,
        per_group: usize,
        arms: usize,
    ) -> Vec<SupportEvent> {
        let mut rng = SplitMix64(seed);
        (0..tasks)
            .map(|t| {
                let task = self.task(&mut rng, (t / per_group.max(1)) as u64);
                let skills = self.candidates(&task.key, arms);
                SupportEvent {
                    arms: self.run(&mut rng, &task, &skills),
                    key: task.key,
                    pairing: t as u64,
                    group: task.group,
                    relevance: None,
                    set: None,
                }
            })
            .collect()
    }
}

/// Spearman rank correlation (average ranks for ties).
pub fn spearman(a: &[f32], b: &[f32]) -> f64 {
    fn ranks(x: &[f32]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..x.len()).collect();
        order.sort_by(|&i, &j| x[i].total_cmp(&x[j]));
        let mut r = vec![0.0; x.len()];
        let mut i = 0;
        while i < order.len() {
            let mut j = i;
            while j + 1 < order.len() && x[order[j + 1]] == x[order[i]] {
                j += 1;
            }
            let rank = (i + j) as f64 / 2.0;
            for k in i..=j {
                r[order[k]] = rank;
            }
            i = j + 1;
        }
        r
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyopt::fit::{fit, FitOptions};
    use crate::keyopt::Round;

    #[test]
    fn spearman_of_monotone_and_reversed_orders() {
        assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
    }

    /// The planted-truth proof at unit-test size (the bench runs it larger).
    #[test]
    fn the_fit_recovers_planted_quality_and_suitability() {
        let world = World::new(42, 40, 5, 32);
        let support = world.support(7, 3000, 3, 10);
        let fitted = fit(&world.skill_keys, &support, &FitOptions::default());
        let report = &fitted.report;
        assert!(report.discordant_groups > 1000, "{report:?}");

        // β recovers u.
        let rho = spearman(&fitted.beta, &world.u);
        eprintln!("Spearman(β, u) = {rho:.3}; chosen {:?}", fitted.settings);
        assert!(rho >= 0.9, "Spearman(β, u) = {rho}");

        // Δk recovers the sign structure of v: on fresh tasks, the fitted term agrees in sign with
        // the planted one wherever the planted one is clear.
        assert!(
            fitted.settings.use_dk,
            "CV should keep Δk here: {:?}",
            report.chosen
        );
        let mut rng = SplitMix64(99);
        let (mut agree, mut total) = (0, 0);
        for _ in 0..400 {
            let task = world.task(&mut rng, 0);
            let centered: Vec<f32> = task
                .key
                .iter()
                .zip(&fitted.mu)
                .map(|(q, m)| q - m)
                .collect();
            for s in world.candidates(&task.key, 10) {
                let planted = world.suitability(&task.key, s);
                if planted.abs() > 0.5 {
                    total += 1;
                    agree += (dot(&centered, &fitted.dk[s]).signum() == planted.signum()) as usize;
                }
            }
        }
        let share = agree as f64 / total as f64;
        eprintln!("sign agreement {share:.3} over {total}");
        assert!(share >= 0.85, "sign agreement {share} over {total}");

        // Held-out Hit@1 (the best candidate by planted P(pass)) improves over r alone.
        let round = Round::new(&world.skill_keys, &fitted);
        let (mut hit_r, mut hit_s, n) = (0, 0, 1000);
        for _ in 0..n {
            let task = world.task(&mut rng, 0);
            let candidates = world.candidates(&task.key, 10);
            let best = *candidates
                .iter()
                .max_by(|&&a, &&b| {
                    world
                        .pass_probability(&task, a)
                        .total_cmp(&world.pass_probability(&task, b))
                })
                .unwrap();
            hit_r += (candidates[0] == best) as usize;
            let q = round.query(&task.key);
            let top = round.rank(&candidates, &q, |_| 0.0)[0].0;
            hit_s += (top == best) as usize;
        }
        eprintln!("Hit@1 r {hit_r} vs KeyOpt {hit_s} of {n}");
        assert!(
            hit_s as f64 >= hit_r as f64 + 0.2 * n as f64,
            "Hit@1 r {hit_r} vs KeyOpt {hit_s} of {n}"
        );
    }
}
