//! SkillTrace: the walk of Graph-of-Skills over the graph the experience tables induce.
//!
//! Nodes are skills and the past runs (events) nearest the query; a skill that passed in a run is
//! linked to it both ways (weight 1). A walk that restarts at the query's first-stage seeds and at
//! the near runs (weighted by similarity, sharpness κ, like KeyOpt's event term) reaches the skills
//! that passed on similar tasks in one step, and the skills used together with those in passing
//! runs in three. Failed arms add no edge. With no near run that passed anything the walk stays
//! on the seeds and the ranking is the first stage's; it changes as outcomes arrive. Runs less
//! similar to the query than [`MIN_SIMILARITY`] (KeyOpt's recall threshold) are not walked: a
//! run on an unrelated task says nothing about this one.

use super::{Edge, SkillGraph, WalkParams};
use crate::keyopt::memory::{weight, Neighbour, RECALL_MIN_SIMILARITY};

/// Runs at least this similar to the query (inner product of unit keys) join the walk.
pub const MIN_SIMILARITY: f32 = RECALL_MIN_SIMILARITY;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceParams {
    /// Share of the restart mass on the first-stage seeds; the rest goes to the near runs.
    pub seed_share: f64,
    /// Sharpness of the run weights: exp(κ·(similarity − 1)).
    pub kappa: f32,
    pub walk: WalkParams,
}

impl Default for TraceParams {
    fn default() -> Self {
        TraceParams {
            seed_share: 0.5,
            kappa: 10.0,
            walk: WalkParams::default(),
        }
    }
}

/// Event nodes get ids below every skill id (skill ids are positive identities).
fn event_node(i: usize) -> i64 {
    -(i as i64) - 1
}

/// Skills by walk score (descending, ties by id), skills only.
pub fn skilltrace(
    neighbours: &[Neighbour<'_>],
    seeds: &[(i64, f64)],
    params: TraceParams,
) -> Vec<(i64, f64)> {
    let mut edges = Vec::new();
    let mut runs = Vec::new();
    for (i, n) in neighbours.iter().enumerate() {
        let passed: Vec<i64> = n
            .arms
            .iter()
            .filter(|a| a.passed)
            .map(|a| a.skill)
            .collect();
        if passed.is_empty() || n.similarity < MIN_SIMILARITY {
            continue;
        }
        for skill in passed {
            edges.push(Edge {
                from: event_node(i),
                to: skill,
                weight: 1.0,
            });
            edges.push(Edge {
                from: skill,
                to: event_node(i),
                weight: 1.0,
            });
        }
        runs.push((event_node(i), weight(n.similarity, params.kappa) as f64));
    }
    let seed_total: f64 = seeds.iter().map(|s| s.1.max(0.0)).sum();
    let run_total: f64 = runs.iter().map(|r| r.1).sum();
    let (seed_share, run_share) = match (seed_total > 0.0, run_total > 0.0) {
        (true, true) => (params.seed_share, 1.0 - params.seed_share),
        (true, false) => (1.0, 0.0),
        (false, true) => (0.0, 1.0),
        (false, false) => return Vec::new(),
    };
    let mut personalisation: Vec<(i64, f64)> = Vec::new();
    for &(id, w) in seeds {
        if w > 0.0 {
            personalisation.push((id, seed_share * w / seed_total));
        }
    }
    for &(id, w) in &runs {
        personalisation.push((id, run_share * w / run_total));
    }
    let graph = SkillGraph::new(&edges, 0.0);
    let mut ranked: Vec<(i64, f64)> = graph
        .walk(&personalisation, params.walk)
        .ranked()
        .into_iter()
        .filter(|&(id, _)| id >= 0)
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyopt::Arm;

    fn arms(list: &[(i64, bool)]) -> Vec<Arm> {
        list.iter()
            .map(|&(skill, passed)| Arm { skill, passed })
            .collect()
    }

    #[test]
    fn without_runs_the_seeds_rank_as_given() {
        let ranked = skilltrace(&[], &[(3, 0.5), (1, 0.3), (2, 0.2)], TraceParams::default());
        assert_eq!(
            ranked.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![3, 1, 2]
        );
        // Runs where nothing passed add nothing.
        let failed = arms(&[(7, false), (8, false)]);
        let near = [Neighbour {
            similarity: 0.99,
            arms: &failed,
        }];
        let ranked = skilltrace(&near, &[(3, 0.5), (1, 0.3)], TraceParams::default());
        assert_eq!(ranked.iter().map(|r| r.0).collect::<Vec<_>>(), vec![3, 1]);
        assert!(skilltrace(&[], &[], TraceParams::default()).is_empty());
    }

    #[test]
    fn skills_that_passed_on_similar_tasks_rise_and_their_partners_follow() {
        // Two near runs: skill 9 passed in both (with 10 once); a far run passed 11.
        let a = arms(&[(9, true), (10, true), (1, false)]);
        let b = arms(&[(9, true), (2, false)]);
        let c = arms(&[(11, true)]);
        let near = [
            Neighbour {
                similarity: 0.95,
                arms: &a,
            },
            Neighbour {
                similarity: 0.9,
                arms: &b,
            },
            Neighbour {
                similarity: 0.3,
                arms: &c,
            },
        ];
        let seeds = [(1, 0.6), (2, 0.4)];
        let ranked = skilltrace(&near, &seeds, TraceParams::default());
        let position = |id: i64| ranked.iter().position(|r| r.0 == id).unwrap();
        assert_eq!(ranked[0].0, 9, "{ranked:?}");
        assert!(position(10) < ranked.len());
        assert!(position(9) < position(10), "used together, passed once");
        // The far run (similarity 0.3) is not walked.
        assert!(ranked.iter().all(|r| r.0 != 11), "{ranked:?}");
        assert!(
            ranked.iter().all(|r| r.0 >= 0),
            "no event nodes in the answer"
        );
        let total: f64 = ranked.iter().map(|r| r.1).sum();
        assert!(
            total < 1.0 && total > 0.4,
            "event nodes hold the rest: {total}"
        );
    }
}
