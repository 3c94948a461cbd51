//! Graph-of-Skills: a directed, weighted skill graph and the personalised PageRank walk over it.
//!
//! - [`SkillGraph`]: skills as nodes (ids mapped to dense indices), edges as a row-normalised
//!   transition matrix in CSR form. Every edge u → v with weight w also walks back v → u at
//!   `reverse_weight · w`, so a skill that depends on a seed is reached, just less easily than
//!   what the seed depends on.
//! - [`SkillGraph::walk`]: s ← restart·p + (1 − restart)·Tᵀs, with the mass of nodes that have no
//!   out-edges returned to p, until the L1 change is below the tolerance or the iteration cap.
//! - [`rules`]: dependency and workflow edges read from skill documents by documented rules.
//! - [`trace`]: the graph the experience tables induce (SkillTrace).

pub mod rules;
pub mod trace;

use std::collections::HashMap;

/// The kinds of edges `skills.edge` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EdgeType {
    /// The source produces what the target needs (or is its prerequisite).
    Dependency,
    /// The target is usually the next step after the source.
    Workflow,
    /// Similar keys.
    Semantic,
    /// Near-duplicates: either serves the same purpose.
    Alternative,
}

impl EdgeType {
    pub const ALL: [EdgeType; 4] = [
        EdgeType::Dependency,
        EdgeType::Workflow,
        EdgeType::Semantic,
        EdgeType::Alternative,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EdgeType::Dependency => "dependency",
            EdgeType::Workflow => "workflow",
            EdgeType::Semantic => "semantic",
            EdgeType::Alternative => "alternative",
        }
    }

    pub fn parse(s: &str) -> Option<EdgeType> {
        EdgeType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// An edge between skill ids.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Edge {
    pub from: i64,
    pub to: i64,
    pub weight: f64,
}

/// Parameters of the walk. The defaults are Graph-of-Skills': restart 0.2, 50 iterations, 1e-6.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WalkParams {
    /// Probability of jumping back to the personalisation vector at each step.
    pub restart: f64,
    pub max_iterations: usize,
    /// Stop once the L1 change of the scores is below this.
    pub tolerance: f64,
}

impl Default for WalkParams {
    fn default() -> Self {
        WalkParams {
            restart: 0.2,
            max_iterations: 50,
            tolerance: 1e-6,
        }
    }
}

/// Scores of a walk and how it ended.
#[derive(Clone, Debug, PartialEq)]
pub struct WalkResult {
    /// Score per skill id with a non-zero score, sums to 1 (within rounding) when p was not empty.
    pub scores: HashMap<i64, f64>,
    pub iterations: usize,
    pub converged: bool,
}

impl WalkResult {
    /// (id, score), score descending, ties by id.
    pub fn ranked(&self) -> Vec<(i64, f64)> {
        let mut out: Vec<(i64, f64)> = self.scores.iter().map(|(&i, &s)| (i, s)).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

/// A skill graph ready for walks (immutable; build a new one when edges change).
#[derive(Clone, Debug)]
pub struct SkillGraph {
    ids: Vec<i64>,
    index: HashMap<i64, usize>,
    /// CSR of the transition matrix by source: targets of node u are
    /// `targets[offsets[u]..offsets[u + 1]]` with probabilities `probabilities[...]` (summing to 1).
    offsets: Vec<usize>,
    targets: Vec<u32>,
    probabilities: Vec<f64>,
    edges: usize,
}

impl SkillGraph {
    /// The graph of `edges` (self-loops and non-positive or non-finite weights are dropped;
    /// parallel edges add up) with reverse edges at `reverse_weight` (0 = none).
    pub fn new(edges: &[Edge], reverse_weight: f64) -> SkillGraph {
        let mut index: HashMap<i64, usize> = HashMap::new();
        let mut ids = Vec::new();
        let mut node = |id: i64, ids: &mut Vec<i64>| -> usize {
            *index.entry(id).or_insert_with(|| {
                ids.push(id);
                ids.len() - 1
            })
        };
        let mut weighted: HashMap<(usize, usize), f64> = HashMap::new();
        let mut kept = 0;
        for e in edges {
            if e.from == e.to || !(e.weight > 0.0) || !e.weight.is_finite() {
                continue;
            }
            kept += 1;
            let (u, v) = (node(e.from, &mut ids), node(e.to, &mut ids));
            *weighted.entry((u, v)).or_insert(0.0) += e.weight;
            if reverse_weight > 0.0 {
                *weighted.entry((v, u)).or_insert(0.0) += reverse_weight * e.weight;
            }
        }
        let n = ids.len();
        let mut by_source: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
        for ((u, v), w) in weighted {
            by_source[u].push((v as u32, w));
        }
        let mut offsets = Vec::with_capacity(n + 1);
        let mut targets = Vec::new();
        let mut probabilities = Vec::new();
        offsets.push(0);
        for mut out in by_source {
            // Deterministic order: the walk's floating-point sums do not depend on hashing.
            out.sort_by_key(|o| o.0);
            let total: f64 = out.iter().map(|o| o.1).sum();
            for (v, w) in out {
                targets.push(v);
                probabilities.push(w / total);
            }
            offsets.push(targets.len());
        }
        SkillGraph {
            ids,
            index,
            offsets,
            targets,
            probabilities,
            edges: kept,
        }
    }

    /// Skills with at least one edge.
    pub fn nodes(&self) -> usize {
        self.ids.len()
    }

    /// Edges kept (before reverse edges were added).
    pub fn edges(&self) -> usize {
        self.edges
    }

    /// Personalised PageRank from `personalisation` (skill id → non-negative weight; normalised
    /// here). Seeds without edges keep their restart mass and everything that reaches a node with
    /// no out-edges returns to p, so the scores of all skills sum to 1.
    pub fn walk(&self, personalisation: &[(i64, f64)], params: WalkParams) -> WalkResult {
        // Seeds outside the graph are extra nodes with no edges.
        let mut extra: Vec<i64> = Vec::new();
        let mut extra_index: HashMap<i64, usize> = HashMap::new();
        let mut p_sparse: Vec<(usize, f64)> = Vec::new();
        for &(id, w) in personalisation {
            if !(w > 0.0) || !w.is_finite() {
                continue;
            }
            let i = match self.index.get(&id) {
                Some(&i) => i,
                None => *extra_index.entry(id).or_insert_with(|| {
                    extra.push(id);
                    self.ids.len() + extra.len() - 1
                }),
            };
            p_sparse.push((i, w));
        }
        let total: f64 = p_sparse.iter().map(|p| p.1).sum();
        let n = self.ids.len() + extra.len();
        if total <= 0.0 {
            return WalkResult {
                scores: HashMap::new(),
                iterations: 0,
                converged: true,
            };
        }
        let mut p = vec![0.0; n];
        for (i, w) in p_sparse {
            p[i] += w / total;
        }
        let follow = 1.0 - params.restart;
        let mut s = p.clone();
        let mut next = vec![0.0; n];
        let mut iterations = 0;
        let mut converged = false;
        while iterations < params.max_iterations {
            crate::interrupt::check();
            iterations += 1;
            next.iter_mut().for_each(|x| *x = 0.0);
            let mut dangling = 0.0;
            for (u, &mass) in s.iter().enumerate() {
                if mass == 0.0 {
                    continue;
                }
                if u >= self.ids.len() || self.offsets[u] == self.offsets[u + 1] {
                    dangling += mass;
                    continue;
                }
                for e in self.offsets[u]..self.offsets[u + 1] {
                    next[self.targets[e] as usize] += follow * mass * self.probabilities[e];
                }
            }
            let back = params.restart + follow * dangling;
            for (x, &pi) in next.iter_mut().zip(&p) {
                *x += back * pi;
            }
            let change: f64 = next.iter().zip(&s).map(|(a, b)| (a - b).abs()).sum();
            std::mem::swap(&mut s, &mut next);
            if change < params.tolerance {
                converged = true;
                break;
            }
        }
        let scores = s
            .into_iter()
            .enumerate()
            .filter(|&(_, x)| x > 0.0)
            .map(|(i, x)| {
                let id = if i < self.ids.len() {
                    self.ids[i]
                } else {
                    extra[i - self.ids.len()]
                };
                (id, x)
            })
            .collect();
        WalkResult {
            scores,
            iterations,
            converged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: i64, to: i64, weight: f64) -> Edge {
        Edge { from, to, weight }
    }

    /// Dense power iteration of the same definition, as the oracle.
    fn dense(
        n: usize,
        edges: &[Edge],
        reverse: f64,
        p: &[f64],
        restart: f64,
        steps: usize,
    ) -> Vec<f64> {
        let mut w = vec![vec![0.0; n]; n];
        for e in edges {
            if e.from != e.to && e.weight > 0.0 {
                w[e.from as usize][e.to as usize] += e.weight;
                w[e.to as usize][e.from as usize] += reverse * e.weight;
            }
        }
        let mut s = p.to_vec();
        for _ in 0..steps {
            let mut next = vec![0.0; n];
            let mut dangling = 0.0;
            for u in 0..n {
                let total: f64 = w[u].iter().sum();
                if total == 0.0 {
                    dangling += s[u];
                    continue;
                }
                for v in 0..n {
                    next[v] += (1.0 - restart) * s[u] * w[u][v] / total;
                }
            }
            for v in 0..n {
                next[v] += (restart + (1.0 - restart) * dangling) * p[v];
            }
            s = next;
        }
        s
    }

    #[test]
    fn matches_dense_power_iteration() {
        let edges = vec![
            edge(0, 1, 1.0),
            edge(1, 2, 2.0),
            edge(2, 0, 0.5),
            edge(2, 3, 1.0),
            edge(4, 3, 3.0),
            edge(0, 1, 1.0), // parallel: adds up
        ];
        let graph = SkillGraph::new(&edges, 0.3);
        assert_eq!(graph.nodes(), 5);
        assert_eq!(graph.edges(), 6);
        let p = [0.5, 0.0, 0.0, 0.0, 0.5];
        let personalisation: Vec<(i64, f64)> = vec![(0, 1.0), (4, 1.0)];
        let params = WalkParams {
            max_iterations: 200,
            tolerance: 1e-13,
            ..WalkParams::default()
        };
        let walked = graph.walk(&personalisation, params);
        assert!(walked.converged);
        let oracle = dense(5, &edges, 0.3, &p, 0.2, 400);
        for (id, want) in oracle.iter().enumerate() {
            let got = walked.scores.get(&(id as i64)).copied().unwrap_or(0.0);
            assert!((got - want).abs() < 1e-9, "node {id}: {got} vs {want}");
        }
        let sum: f64 = walked.scores.values().sum();
        assert!((sum - 1.0).abs() < 1e-9);
    }

    #[test]
    fn mass_flows_along_edges_and_back_at_reduced_weight() {
        // seed 1 depends on 0 (0 → 1); 1 leads to 2 (1 → 2); 9 is unrelated.
        let edges = vec![edge(0, 1, 1.0), edge(1, 2, 1.0), edge(9, 8, 1.0)];
        let forward_only = SkillGraph::new(&edges, 0.0).walk(&[(1, 1.0)], WalkParams::default());
        assert!(forward_only.scores.get(&2).is_some_and(|&s| s > 0.0));
        assert!(
            !forward_only.scores.contains_key(&0),
            "no reverse edges: 0 unreachable"
        );
        let both = SkillGraph::new(&edges, 0.5).walk(&[(1, 1.0)], WalkParams::default());
        let ranked = both.ranked();
        assert_eq!(ranked[0].0, 1, "the seed keeps the most mass");
        assert!(both.scores[&2] > both.scores[&0], "forward beats reverse");
        assert!(both.scores[&0] > 0.0);
        assert!(!both.scores.contains_key(&9) && !both.scores.contains_key(&8));
    }

    #[test]
    fn seeds_without_edges_keep_their_mass_and_bad_weights_are_ignored() {
        let graph = SkillGraph::new(
            &[edge(1, 2, 1.0), edge(3, 3, 1.0), edge(4, 5, f64::NAN)],
            0.5,
        );
        assert_eq!(graph.edges(), 1);
        let walked = graph.walk(&[(7, 3.0), (1, 1.0), (2, -1.0)], WalkParams::default());
        let sum: f64 = walked.scores.values().sum();
        assert!((sum - 1.0).abs() < 1e-6);
        // An isolated seed keeps at least its restart share (0.2 · 0.75) and gets back part of
        // everything that returns to p.
        assert!(walked.scores[&7] > 0.15, "{:?}", walked.scores);
        assert!(walked.scores[&1] > 0.0 && walked.scores[&2] > 0.0);
        assert!(graph.walk(&[], WalkParams::default()).scores.is_empty());
        assert!(graph
            .walk(&[(1, 0.0)], WalkParams::default())
            .scores
            .is_empty());
    }

    #[test]
    fn stops_at_the_iteration_cap() {
        let edges: Vec<Edge> = (0..100).map(|i| edge(i, (i + 1) % 100, 1.0)).collect();
        let graph = SkillGraph::new(&edges, 0.0);
        let capped = graph.walk(
            &[(0, 1.0)],
            WalkParams {
                max_iterations: 3,
                ..WalkParams::default()
            },
        );
        assert_eq!(capped.iterations, 3);
        assert!(!capped.converged);
        let full = graph.walk(&[(0, 1.0)], WalkParams::default());
        assert!(full.iterations <= 50);
    }

    #[test]
    fn edge_types_round_trip() {
        for t in EdgeType::ALL {
            assert_eq!(EdgeType::parse(t.as_str()), Some(t));
        }
        assert_eq!(EdgeType::parse("friend"), None);
    }
}
