//! Lift bounds: how far behind in relevance a skill may start and still be ranked above a rival.
//!
//! The support runs show each skill winning pairs from some relevance deficits: "a passed where
//! b failed although ρ·r_b exceeded ρ·r_a by d". Beyond the largest such d the runs say nothing,
//! yet β, the Δk term and the event term add up regardless of the gap they must close. A round
//! therefore stores per skill its *lift bound* (the largest ρ·r deficit it was seen to overcome,
//! 0 for a skill that never won a pair), and a reading never places a skill above a rival whose
//! ρ·r exceeds its own by more than that bound: the part of its correction that would do so is
//! held back ([`Parts::held_back`]). A handful of runs on one kind of task then reorders only
//! what they showed they could reorder, and leaves clear relevance elsewhere alone.
//!
//! Every reordering of a pair is "the less relevant skill was lifted over the more relevant
//! one", so bounding lifts also bounds how far a skill can sink: only below skills that were seen
//! to overcome the gap.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::Parts;

/// Deficits equal to a bound up to rounding count as within it: the same task read again
/// computes its ρ·r gap through another sequence of roundings than the fit did.
const ROUNDING_SLACK: f32 = 1e-5;

/// A row waiting in the heap: higher score first, then higher relevance, then lower index.
struct Waiting {
    score: f32,
    relevance: f32,
    index: usize,
}

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(self.relevance.total_cmp(&other.relevance))
            .then(other.index.cmp(&self.index))
    }
}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Waiting {}

/// Ranks `rows` best first under their lift bounds (`lift_bounds[i]` ≥ 0 belongs to `rows[i]`;
/// infinite: unbounded) and returns the positions in that order. Each step takes the best
/// scoring row among those allowed: a row is allowed once no unranked row's relevance exceeds
/// its own by more than its bound (the most relevant unranked row always is). Ties in score go
/// to the more relevant row, then to the earlier position in `rows`.
///
/// A row that had to wait for a rival out of its reach gets `held_back` (≤ 0) so that its
/// total is no higher than the total of the row ranked before it: totals never increase along
/// the returned order, and a `min_score` cut stays a prefix of it. With every bound infinite
/// this is the order of the scores; with every bound 0, the order of relevance. O(n log n).
pub fn bounded_order(rows: &mut [Parts], lift_bounds: &[f32]) -> Vec<usize> {
    let n = rows.len();
    assert_eq!(lift_bounds.len(), n, "bounded_order: one bound per row");
    for row in rows.iter_mut() {
        row.held_back = 0.0;
    }
    let reach = |i: usize| rows[i].relevance + lift_bounds[i].max(0.0) + ROUNDING_SLACK;
    let mut by_relevance: Vec<usize> = (0..n).collect();
    by_relevance.sort_by(|&a, &b| {
        rows[b]
            .relevance
            .total_cmp(&rows[a].relevance)
            .then(a.cmp(&b))
    });
    let mut by_reach: Vec<usize> = (0..n).collect();
    by_reach.sort_by(|&a, &b| reach(b).total_cmp(&reach(a)).then(a.cmp(&b)));
    let mut ranked = vec![false; n];
    let mut waiting = BinaryHeap::with_capacity(n);
    let (mut next_relevant, mut next_reach) = (0, 0);
    let mut order = Vec::with_capacity(n);
    while order.len() < n {
        while ranked[by_relevance[next_relevant]] {
            next_relevant += 1;
        }
        let top = rows[by_relevance[next_relevant]].relevance;
        while next_reach < n && reach(by_reach[next_reach]) >= top {
            let i = by_reach[next_reach];
            waiting.push(Waiting {
                score: rows[i].total(),
                relevance: rows[i].relevance,
                index: i,
            });
            next_reach += 1;
        }
        let next = waiting
            .pop()
            .expect("the most relevant unranked row is always allowed")
            .index;
        ranked[next] = true;
        order.push(next);
    }
    let mut previous = f32::INFINITY;
    for &i in &order {
        let row = &mut rows[i];
        let total = row.total();
        if total > previous {
            row.held_back = previous - total;
            // The parts' sum may round an ulp above `previous`.
            while row.total() > previous {
                row.held_back = row.held_back.next_down();
            }
        }
        previous = row.total();
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(relevance: f32, correction: f32) -> Parts {
        Parts {
            relevance,
            beta: correction,
            ..Parts::default()
        }
    }

    fn ranked(mut rows: Vec<Parts>, bounds: &[f32]) -> Vec<usize> {
        bounded_order(&mut rows, bounds)
    }

    #[test]
    fn a_skill_passes_rivals_within_its_bound_and_no_further() {
        // Skill 2 carries a large correction but was only seen to win from 0.2 behind.
        let rows = vec![row(0.9, 0.0), row(0.75, 0.0), row(0.6, 0.8)];
        // It passes skill 1 (0.15 ahead) but not skill 0 (0.3 ahead).
        assert_eq!(ranked(rows.clone(), &[0.0, 0.0, 0.2]), vec![0, 2, 1]);
        // Unbounded, or with a bound of 0.3, it goes first.
        assert_eq!(
            ranked(rows.clone(), &[0.0, 0.0, f32::INFINITY]),
            vec![2, 0, 1]
        );
        assert_eq!(ranked(rows, &[0.0, 0.0, 0.3]), vec![2, 0, 1]);
    }

    #[test]
    fn only_a_row_that_waited_gives_back_part_of_its_correction() {
        // Row 1's 0.85 stays under row 0's 0.9 and row 2 ranks where its score puts it.
        let mut rows = vec![row(0.9, 0.0), row(0.6, 0.25), row(0.5, 0.1)];
        assert_eq!(bounded_order(&mut rows, &[0.0, 0.1, 0.0]), vec![0, 1, 2]);
        assert!(rows.iter().all(|r| r.held_back == 0.0));
        // 1.1 would pass 0.9 from 0.3 behind: it waits, and is brought down to the total of
        // the row before it.
        let mut rows = vec![row(0.9, 0.0), row(0.6, 0.5)];
        assert_eq!(bounded_order(&mut rows, &[0.0, 0.1]), vec![0, 1]);
        assert!(rows[1].total() <= rows[0].total());
        assert!((rows[1].held_back + 0.2).abs() < 1e-6);
        assert_eq!(rows[0].held_back, 0.0);
    }

    #[test]
    fn a_penalised_skill_sinks_only_below_skills_that_may_pass_it() {
        // Skill 0 lost its runs (large negative correction); skill 1 may pass it (bound 0.5),
        // skill 2 may not (bound 0): skill 0 ends between them.
        let rows = vec![row(0.9, -0.8), row(0.7, 0.0), row(0.5, 0.0)];
        assert_eq!(ranked(rows, &[0.0, 0.5, 0.0]), vec![1, 0, 2]);
    }

    #[test]
    fn rows_that_waited_for_the_same_rival_keep_their_own_order() {
        // Rows 1 and 2 may not pass row 0; row 2 may pass row 1 and scores higher.
        let rows = vec![row(1.0, 0.0), row(0.95, 0.2), row(0.9, 1.0)];
        assert_eq!(ranked(rows, &[0.0, 0.01, 0.06]), vec![0, 2, 1]);
        // ... but not when row 1 is out of row 2's reach too.
        let rows = vec![row(1.0, 0.0), row(0.95, 0.2), row(0.5, 1.4)];
        assert_eq!(ranked(rows, &[0.0, 0.01, 0.06]), vec![0, 1, 2]);
    }

    #[test]
    fn infinite_bounds_rank_by_score_and_zero_bounds_by_relevance() {
        let mut rng = crate::rng::SplitMix64(3);
        for _ in 0..200 {
            let rows: Vec<Parts> = (0..12)
                .map(|_| row(rng.unit() as f32, rng.unit() as f32 * 4.0 - 2.0))
                .collect();
            let by = |key: &dyn Fn(&Parts) -> f32| {
                let mut order: Vec<usize> = (0..rows.len()).collect();
                order.sort_by(|&a, &b| key(&rows[b]).total_cmp(&key(&rows[a])));
                order
            };
            assert_eq!(ranked(rows.clone(), &[0.0; 12]), by(&|p| p.relevance));
            assert_eq!(
                ranked(rows.clone(), &[f32::INFINITY; 12]),
                by(&|p| p.total())
            );
        }
    }

    #[test]
    fn no_row_ends_above_a_rival_out_of_its_reach_and_totals_never_rise() {
        let mut rng = crate::rng::SplitMix64(11);
        for _ in 0..500 {
            let n = 1 + (rng.next_u64() % 15) as usize;
            let rows: Vec<Parts> = (0..n)
                .map(|_| row(rng.unit() as f32, rng.unit() as f32 * 2.0 - 1.0))
                .collect();
            let bounds: Vec<f32> = (0..n).map(|_| rng.unit() as f32 * 0.5).collect();
            let mut bounded = rows.clone();
            let order = bounded_order(&mut bounded, &bounds);
            let mut seen = order.clone();
            seen.sort();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "every row once");
            for (i, &a) in order.iter().enumerate() {
                for &b in &order[i + 1..] {
                    assert!(
                        rows[b].relevance - rows[a].relevance <= bounds[a] + ROUNDING_SLACK,
                        "row {a} ended above row {b} out of its reach"
                    );
                    assert!(bounded[a].total() >= bounded[b].total());
                }
                assert!(bounded[a].held_back <= 0.0);
                assert!(bounded[a].total() <= rows[a].total());
            }
        }
    }
}
