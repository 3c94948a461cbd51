//! Complementary skills: what a served skill is needed with, though the request did not ask
//! for it (a prerequisite, the usual next step, a skill that past runs needed beside it).
//!
//! Three kinds of evidence, strongest first:
//!
//! 1. **Co-success** (recorded runs): runs that served the anchor a and the candidate c together
//!    are set against runs that served a without c. The candidate's *uplift* is
//!    `(p₊ + 1)/(n₊ + 2) − (p₋ + 1)/(n₋ + 2)`, where n₊ runs served both (p₊ of them with both
//!    arms passing) and n₋ served a without c (p₋ with a passing): how much adding c raised the
//!    pass rate of a's runs, with one pass and one failure of prior on each side so that a
//!    handful of runs cannot say much. A pair needs [`MIN_JOINT_PASSES`] joint passes and an
//!    uplift of at least [`MIN_UPLIFT`]. Runs are counted by their weight: with a request key,
//!    `exp(κ·(sim − s_max))` for a run whose task is `sim` from the request ([`weights`]; the
//!    nearest run weighs 1), so the runs of tasks like this one decide. A skill is often served
//!    beside a as a bystander of other tasks, and counted alike, those tasks' needs would pass
//!    for a's.
//! 2. **Dependency edges** into the anchor (`c → a`: c produces what a needs), by edge weight.
//! 3. **Workflow edges** out of the anchor (`a → c`: c usually follows a), by edge weight.
//!
//! Runs outrank rules: a candidate whose runs with the anchor went worse than the anchor's runs
//! without it (an uplift below `−MIN_UPLIFT` over at least [`MIN_JOINT_PASSES`] joint runs) is
//! not served through an edge either.
//!
//! [`interleave`] places each anchor's complements right after it in the ranking, so that k and
//! the token budget then apply to the whole list.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::keyopt::Arm;

/// Joint passes a co-success pair needs (weighted: the nearest run counts 1).
pub const MIN_JOINT_PASSES: f64 = 2.0;
/// The least uplift (difference of smoothed pass rates) a co-success pair needs.
pub const MIN_UPLIFT: f64 = 0.2;
/// Complements a served skill gets at most (the `complements` argument's upper bound).
pub const MAX_PER_ANCHOR: usize = 5;
/// κ of the run weights: a run 0.1 less similar to the request than the nearest weighs e⁻¹.
pub const SIMILARITY_SHARPNESS: f32 = 10.0;

/// A recorded run as co-success reads it: its weight and its arms (outcomes resolved).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub weight: f64,
    pub arms: Vec<Arm>,
}

/// The weight of each run from its task's similarity to the request: `exp(κ·(sim − s_max))`.
pub fn weights(similarities: &[f32]) -> Vec<f64> {
    let top = similarities
        .iter()
        .copied()
        .filter(|s| s.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    similarities
        .iter()
        .map(|&s| {
            if s.is_finite() {
                ((SIMILARITY_SHARPNESS * (s - top)) as f64).exp()
            } else {
                0.0
            }
        })
        .collect()
}

/// Why a skill is served as a complement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    /// Runs that used it with the anchor passed more often than runs without it.
    CoSuccess,
    /// It produces what the anchor needs (a dependency edge into the anchor).
    Dependency,
    /// It usually follows the anchor (a workflow edge out of the anchor).
    Workflow,
}

impl Link {
    pub fn as_str(self) -> &'static str {
        match self {
            Link::CoSuccess => "co-success",
            Link::Dependency => "dependency",
            Link::Workflow => "workflow",
        }
    }
}

/// A complement of one anchor: the skill, why, and how strongly (uplift or edge weight).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Complement {
    pub skill: i64,
    pub link: Link,
    pub strength: f64,
}

/// A graph edge as complements read it: `from → to` of a kind, with its weight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkEdge {
    pub from: i64,
    pub to: i64,
    pub link: Link,
    pub weight: f64,
}

/// What the runs that served an anchor say of one candidate beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairEvidence {
    pub candidate: i64,
    /// Runs that served both (weighted).
    pub together: f64,
    /// Of those, runs where both arms passed (weighted).
    pub joint_passes: f64,
    /// Smoothed pass rate with the candidate minus without it (see the module comment).
    pub uplift: f64,
}

/// The evidence of every candidate served at least once beside `anchor` in `runs`, by
/// candidate id.
pub fn co_success(runs: &[Run], anchor: i64) -> Vec<PairEvidence> {
    #[derive(Default)]
    struct Counts {
        together: f64,
        joint_passes: f64,
        anchor_passed: f64,
    }
    let mut anchor_runs = 0.0f64;
    let mut anchor_passed = 0.0f64;
    let mut pairs: BTreeMap<i64, Counts> = BTreeMap::new();
    for run in runs {
        let Some(a) = run.arms.iter().find(|arm| arm.skill == anchor) else {
            continue;
        };
        let w = run.weight;
        anchor_runs += w;
        anchor_passed += w * a.passed as u8 as f64;
        let mut seen = HashSet::new();
        for c in run.arms.iter().filter(|c| c.skill != anchor) {
            if !seen.insert(c.skill) {
                continue;
            }
            let p = pairs.entry(c.skill).or_default();
            p.together += w;
            p.joint_passes += w * (a.passed && c.passed) as u8 as f64;
            p.anchor_passed += w * a.passed as u8 as f64;
        }
    }
    let rate = |passed: f64, runs: f64| (passed + 1.0) / (runs + 2.0);
    pairs
        .into_iter()
        .map(|(candidate, p)| PairEvidence {
            candidate,
            together: p.together,
            joint_passes: p.joint_passes,
            uplift: rate(p.joint_passes, p.together)
                - rate(
                    (anchor_passed - p.anchor_passed).max(0.0),
                    (anchor_runs - p.together).max(0.0),
                ),
        })
        .collect()
}

/// The complements of `anchor`, best first, at most `max`: co-success pairs by uplift, then
/// dependency and workflow edges by weight (ties by skill id); a skill appears once, under its
/// strongest kind, and a skill the runs speak against is left out.
pub fn complements_of(
    anchor: i64,
    runs: &[Run],
    edges: &[LinkEdge],
    max: usize,
) -> Vec<Complement> {
    let evidence = co_success(runs, anchor);
    let vetoed: HashSet<i64> = evidence
        .iter()
        .filter(|e| e.uplift <= -MIN_UPLIFT && e.together >= MIN_JOINT_PASSES)
        .map(|e| e.candidate)
        .collect();
    let mut found: Vec<Complement> = evidence
        .into_iter()
        .filter(|e| e.joint_passes >= MIN_JOINT_PASSES && e.uplift >= MIN_UPLIFT)
        .map(|e| Complement {
            skill: e.candidate,
            link: Link::CoSuccess,
            strength: e.uplift,
        })
        .collect();
    for e in edges {
        let candidate = match e.link {
            Link::Dependency if e.to == anchor => e.from,
            Link::Workflow if e.from == anchor => e.to,
            _ => continue,
        };
        if candidate != anchor && !vetoed.contains(&candidate) {
            found.push(Complement {
                skill: candidate,
                link: e.link,
                strength: e.weight,
            });
        }
    }
    found.sort_by(|a, b| {
        a.link
            .cmp(&b.link)
            .then(b.strength.total_cmp(&a.strength))
            .then(a.skill.cmp(&b.skill))
    });
    let mut seen = HashSet::new();
    found.retain(|c| seen.insert(c.skill));
    found.truncate(max);
    found
}

/// A place in the served list: the ranked row at `rank`, or a complement of the row at `rank`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Slot {
    Ranked(usize),
    Complement { rank: usize, of: Complement },
}

/// The ranking (`ranked`: skill ids, best first) with each anchor's complements right after it.
/// A skill is placed once: a complement placed early is not repeated at its own rank, and a
/// skill already placed above an anchor is not repeated after it.
pub fn interleave(ranked: &[i64], complements: &HashMap<i64, Vec<Complement>>) -> Vec<Slot> {
    let mut placed = HashSet::new();
    let mut out = Vec::with_capacity(ranked.len());
    for (rank, id) in ranked.iter().enumerate() {
        // A row already placed as an earlier row's complement keeps that place; its own
        // complements still follow here.
        if placed.insert(*id) {
            out.push(Slot::Ranked(rank));
        }
        for c in complements.get(id).into_iter().flatten() {
            if placed.insert(c.skill) {
                out.push(Slot::Complement { rank, of: *c });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(arms: &[(i64, bool)]) -> Run {
        Run {
            weight: 1.0,
            arms: arms
                .iter()
                .map(|&(skill, passed)| Arm { skill, passed })
                .collect(),
        }
    }

    #[test]
    fn a_skill_that_made_the_anchors_runs_pass_is_its_complement() {
        // Anchor 1 passes when 2 is beside it, fails without it; 3 is beside it either way.
        let runs = vec![
            run(&[(1, true), (2, true), (3, true)]),
            run(&[(1, true), (2, true)]),
            run(&[(1, true), (2, true), (3, true)]),
            run(&[(1, false), (3, false)]),
            run(&[(1, false), (3, false)]),
        ];
        let up: HashMap<i64, (f64, f64)> = co_success(&runs, 1)
            .into_iter()
            .map(|e| (e.candidate, (e.uplift, e.joint_passes)))
            .collect();
        // 2: 3 of 3 with it (0.8), 0 of 2 without (0.25).
        assert!((up[&2].0 - (0.8 - 0.25)).abs() < 1e-12);
        assert_eq!(up[&2].1, 3.0);
        // 3: 2 of 4 with it (0.5), 1 of 1 without (2/3): a negative uplift.
        assert!((up[&3].0 - (0.5 - 2.0 / 3.0)).abs() < 1e-12);
        let got = complements_of(1, &runs, &[], 5);
        assert_eq!(
            got.iter().map(|c| (c.skill, c.link)).collect::<Vec<_>>(),
            vec![(2, Link::CoSuccess)]
        );
    }

    #[test]
    fn one_joint_pass_or_a_skill_that_passes_everywhere_is_no_complement() {
        // A single joint pass: not enough evidence.
        let once = vec![run(&[(1, true), (2, true)]), run(&[(1, false)])];
        assert!(complements_of(1, &once, &[], 5).is_empty());
        // 4 is served with 1 in every run and 1 always passes: nothing to set it against, so
        // the uplift is 5/6 − 1/2 (the prior alone on the side without it); 5 beside 1 in half of the passing
        // runs adds nothing.
        let runs = vec![
            run(&[(1, true), (4, true), (5, true)]),
            run(&[(1, true), (4, true)]),
            run(&[(1, true), (4, true), (5, true)]),
            run(&[(1, true), (4, true)]),
        ];
        let got = complements_of(1, &runs, &[], 5);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].skill, 4);
        let five = co_success(&runs, 1)
            .into_iter()
            .find(|e| e.candidate == 5)
            .expect("5 was served with 1");
        assert!(five.uplift.abs() < 1e-12, "uplift {}", five.uplift);
    }

    #[test]
    fn runs_of_tasks_like_the_request_decide() {
        // Near the request (weight 1): 1 passes with 2 and fails without it. Far from it
        // (similarity 0.5 lower, weight e⁻⁵): 1 is a bystander of tasks that 3 made pass.
        let w = weights(&[0.9, 0.9, 0.9, 0.9, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4]);
        assert!((w[0] - 1.0).abs() < 1e-12 && (w[9] - (-5.0f64).exp()).abs() < 1e-6);
        let arms = [
            vec![(1, true), (2, true)],
            vec![(1, true), (2, true)],
            vec![(1, true), (2, true)],
            vec![(1, false)],
        ];
        let mut runs: Vec<Run> = arms.iter().map(|a| run(a)).collect();
        for _ in 0..6 {
            runs.push(run(&[(1, true), (3, true)]));
        }
        for (r, w) in runs.iter_mut().zip(&w) {
            r.weight = *w;
        }
        let got = complements_of(1, &runs, &[], 5);
        assert_eq!(got.iter().map(|c| c.skill).collect::<Vec<_>>(), vec![2]);
        // Unweighted, the bystanders' six passes make 3 a complement as well.
        for r in &mut runs {
            r.weight = 1.0;
        }
        let got = complements_of(1, &runs, &[], 5);
        assert!(got.iter().any(|c| c.skill == 3), "{got:?}");
        assert!(weights(&[]).is_empty());
        assert_eq!(weights(&[f32::NAN, 0.5])[0], 0.0);
    }

    #[test]
    fn edges_follow_their_direction_and_runs_overrule_them() {
        let edges = [
            // 7 produces what 1 needs; 1 produces what 8 needs (not a complement of 1).
            LinkEdge {
                from: 7,
                to: 1,
                link: Link::Dependency,
                weight: 1.0,
            },
            LinkEdge {
                from: 1,
                to: 8,
                link: Link::Dependency,
                weight: 1.0,
            },
            // 1 is usually followed by 9 (0.5) and 10 (1.0); 11 is followed by 1.
            LinkEdge {
                from: 1,
                to: 9,
                link: Link::Workflow,
                weight: 0.5,
            },
            LinkEdge {
                from: 1,
                to: 10,
                link: Link::Workflow,
                weight: 1.0,
            },
            LinkEdge {
                from: 11,
                to: 1,
                link: Link::Workflow,
                weight: 1.0,
            },
        ];
        let got: Vec<(i64, Link)> = complements_of(1, &[], &edges, 5)
            .iter()
            .map(|c| (c.skill, c.link))
            .collect();
        assert_eq!(
            got,
            vec![
                (7, Link::Dependency),
                (10, Link::Workflow),
                (9, Link::Workflow)
            ]
        );
        assert_eq!(complements_of(1, &[], &edges, 2).len(), 2);
        // Runs of 1 with 10 failed, without it passed: the edge is not followed.
        let runs = vec![
            run(&[(1, false), (10, false)]),
            run(&[(1, false), (10, true)]),
            run(&[(1, true)]),
            run(&[(1, true)]),
        ];
        let got: Vec<i64> = complements_of(1, &runs, &edges, 5)
            .iter()
            .map(|c| c.skill)
            .collect();
        assert_eq!(got, vec![7, 9]);
    }

    #[test]
    fn interleave_places_complements_after_their_anchor_once() {
        let c = |skill| Complement {
            skill,
            link: Link::Dependency,
            strength: 1.0,
        };
        let complements = HashMap::from([(10, vec![c(30), c(20)]), (20, vec![c(10), c(40)])]);
        let slots = interleave(&[10, 20, 30, 50], &complements);
        let ids: Vec<i64> = slots
            .iter()
            .map(|s| match s {
                Slot::Ranked(r) => [10, 20, 30, 50][*r],
                Slot::Complement { of, .. } => of.skill,
            })
            .collect();
        // 30 and 20 follow 10; 20's own rank then adds only 40; 30 is not repeated.
        assert_eq!(ids, vec![10, 30, 20, 40, 50]);
        assert!(matches!(slots[1], Slot::Complement { rank: 0, .. }));
        assert!(matches!(slots[3], Slot::Complement { rank: 1, .. }));
        assert!(interleave(&[], &complements).is_empty());
    }
}
