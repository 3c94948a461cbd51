//! The event memory: past runs read at query time.
//!
//! - The event term `E(q, s) = Σ w_e·y_{e,s} / (PRIOR_WEIGHT + Σ w_e)` over the neighbours of q
//!   (the past events whose task keys are nearest q) that served s, with `y = +1` for a pass and
//!   `−1` for a failure and `w_e = exp(κ·(sim(q, e) − 1))`: a similar event weighs up to 1, a
//!   distant one almost nothing. `PRIOR_WEIGHT` pulls a reading from a single faint event
//!   towards 0. E lies in (−1, 1).
//! - Event recall: skills that passed on a neighbour at least `min_similarity` from the query,
//!   best first by that event's similarity; they replace the tail of the semantic candidates
//!   ([`candidate_pool`]: 6 kept + up to 4 recalled).

use super::Arm;
use crate::vector::dot_batch;

/// Weight of the zero reading every event term starts from.
pub const PRIOR_WEIGHT: f32 = 0.25;
/// Semantic candidates always kept in a pool of 10.
pub const KEPT: usize = 6;
/// Recalled skills a pool takes at most.
pub const RECALLED: usize = 4;
/// Neighbours read per query (the events nearest the query key).
pub const NEIGHBOURS: usize = 50;
/// A past event recalls its passing skills only from this similarity up.
pub const RECALL_MIN_SIMILARITY: f32 = 0.5;

/// A past event near the query: its similarity (inner product of unit keys) and its arms.
#[derive(Clone, Copy, Debug)]
pub struct Neighbour<'a> {
    pub similarity: f32,
    pub arms: &'a [Arm],
}

/// The weight of an event at `similarity` for sharpness `kappa`.
#[inline]
pub fn weight(similarity: f32, kappa: f32) -> f32 {
    (kappa * (similarity - 1.0)).exp()
}

/// E(q, s): see the module comment. 0 when no neighbour served the skill.
pub fn event_reading(neighbours: &[Neighbour], skill: i64, kappa: f32) -> f32 {
    let mut signed = 0.0f32;
    let mut total = 0.0f32;
    for n in neighbours {
        let w = weight(n.similarity, kappa);
        for arm in n.arms.iter().filter(|a| a.skill == skill) {
            signed += if arm.passed { w } else { -w };
            total += w;
        }
    }
    if total == 0.0 {
        0.0
    } else {
        signed / (PRIOR_WEIGHT + total)
    }
}

/// Skills that passed on neighbours at least `min_similarity` from the query and that `exclude`
/// does not reject, best first (by the best such event's similarity, then skill), at most `max`.
pub fn recall(
    neighbours: &[Neighbour],
    max: usize,
    min_similarity: f32,
    exclude: impl Fn(i64) -> bool,
) -> Vec<i64> {
    let mut best: Vec<(f32, i64)> = Vec::new();
    for n in neighbours.iter().filter(|n| n.similarity >= min_similarity) {
        for arm in n.arms.iter().filter(|a| a.passed && !exclude(a.skill)) {
            match best.iter_mut().find(|(_, s)| *s == arm.skill) {
                Some(entry) => entry.0 = entry.0.max(n.similarity),
                None => best.push((n.similarity, arm.skill)),
            }
        }
    }
    best.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    best.into_iter().take(max).map(|(_, s)| s).collect()
}

/// The KeyOpt candidate pool: the first `pool − RECALLED` semantic candidates, then the recalled
/// skills not among them, then the remaining semantic candidates until the pool is full.
/// Returns (skill, recalled) pairs; `semantic` is best first.
pub fn candidate_pool(semantic: &[i64], recalled: &[i64], pool: usize) -> Vec<(i64, bool)> {
    let kept = pool.saturating_sub(RECALLED).min(semantic.len());
    let mut out: Vec<(i64, bool)> = semantic[..kept].iter().map(|&s| (s, false)).collect();
    for &s in recalled {
        if out.len() >= pool {
            break;
        }
        if !out.iter().any(|(o, _)| *o == s) {
            out.push((s, !semantic.contains(&s)));
        }
    }
    for &s in &semantic[kept..] {
        if out.len() >= pool {
            break;
        }
        if !out.iter().any(|(o, _)| *o == s) {
            out.push((s, false));
        }
    }
    out
}

/// Past events in memory: task keys (row-major) and arms.
#[derive(Clone, Debug, Default)]
pub struct EventMemory {
    dim: usize,
    keys: Vec<f32>,
    arms: Vec<Vec<Arm>>,
}

impl EventMemory {
    pub fn new(dim: usize) -> EventMemory {
        EventMemory {
            dim,
            keys: Vec::new(),
            arms: Vec::new(),
        }
    }

    pub fn push(&mut self, key: &[f32], arms: Vec<Arm>) {
        assert_eq!(key.len(), self.dim, "event key length");
        self.keys.extend_from_slice(key);
        self.arms.push(arms);
    }

    pub fn len(&self) -> usize {
        self.arms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.arms.is_empty()
    }

    /// The `m` events nearest `query` (exact scan), most similar first.
    pub fn neighbours(&self, query: &[f32], m: usize) -> Vec<Neighbour<'_>> {
        if self.arms.is_empty() || m == 0 {
            return Vec::new();
        }
        let mut sims = vec![0.0f32; self.arms.len()];
        dot_batch(query, &self.keys, &mut sims);
        let mut order: Vec<usize> = (0..sims.len()).collect();
        let m = m.min(order.len());
        let by_similarity = |a: &usize, b: &usize| sims[*b].total_cmp(&sims[*a]).then(a.cmp(b));
        if m < order.len() {
            order.select_nth_unstable_by(m - 1, by_similarity);
            order.truncate(m);
        }
        order.sort_by(by_similarity);
        order
            .into_iter()
            .map(|e| Neighbour {
                similarity: sims[e],
                arms: &self.arms[e],
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(skill: i64, passed: bool) -> Arm {
        Arm { skill, passed }
    }

    #[test]
    fn event_reading_weighs_near_events_and_shrinks_faint_ones() {
        let near = [arm(1, true), arm(2, false)];
        let far = [arm(1, false)];
        let neighbours = [
            Neighbour {
                similarity: 1.0,
                arms: &near,
            },
            Neighbour {
                similarity: 0.2,
                arms: &far,
            },
        ];
        let e1 = event_reading(&neighbours, 1, 10.0);
        // (1 - e^-8) / (0.25 + 1 + e^-8)
        let w = (-8.0f32).exp();
        assert!((e1 - (1.0 - w) / (PRIOR_WEIGHT + 1.0 + w)).abs() < 1e-6);
        assert!((event_reading(&neighbours, 2, 10.0) + 1.0 / 1.25).abs() < 1e-6);
        assert_eq!(event_reading(&neighbours, 3, 10.0), 0.0);
        // A single faint event reads close to 0.
        let faint = [Neighbour {
            similarity: 0.5,
            arms: &near,
        }];
        assert!(event_reading(&faint, 1, 10.0) < 0.03);
    }

    #[test]
    fn recall_takes_passing_skills_of_similar_events_only() {
        let a = [arm(1, true), arm(2, false), arm(3, true)];
        let b = [arm(4, true), arm(3, true)];
        let c = [arm(5, true)];
        let neighbours = [
            Neighbour {
                similarity: 0.9,
                arms: &a,
            },
            Neighbour {
                similarity: 0.95,
                arms: &b,
            },
            Neighbour {
                similarity: 0.3,
                arms: &c,
            },
        ];
        assert_eq!(recall(&neighbours, 4, 0.5, |_| false), vec![3, 4, 1]);
        assert_eq!(recall(&neighbours, 4, 0.5, |s| s == 3), vec![4, 1]);
        assert_eq!(recall(&neighbours, 1, 0.5, |_| false), vec![3]);
        assert_eq!(recall(&neighbours, 4, 0.99, |_| false), Vec::<i64>::new());
    }

    #[test]
    fn pool_keeps_six_and_recalls_four() {
        let semantic: Vec<i64> = (1..=10).collect();
        // 8 is in the semantic tail: it stays, counted as kept, not recalled.
        let pool = candidate_pool(&semantic, &[20, 8, 2, 21], 10);
        let ids: Vec<i64> = pool.iter().map(|p| p.0).collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 20, 8, 21, 7]);
        assert!(pool[6].1 && !pool[7].1 && pool[8].1 && !pool[9].1);
        // Nothing recalled: the semantic top 10.
        let plain: Vec<i64> = candidate_pool(&semantic, &[], 10)
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(plain, semantic);
        // Fewer semantic candidates than the pool.
        assert_eq!(candidate_pool(&[1, 2], &[3], 10).len(), 3);
    }

    #[test]
    fn neighbours_are_the_most_similar_events() {
        let mut memory = EventMemory::new(2);
        memory.push(&[1.0, 0.0], vec![arm(1, true)]);
        memory.push(&[0.0, 1.0], vec![arm(2, true)]);
        memory.push(&[0.6, 0.8], vec![arm(3, true)]);
        let n = memory.neighbours(&[0.0, 1.0], 2);
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].arms[0].skill, 2);
        assert_eq!(n[1].arms[0].skill, 3);
        assert!((n[1].similarity - 0.8).abs() < 1e-6);
        assert_eq!(memory.neighbours(&[0.0, 1.0], 10).len(), 3);
    }
}
