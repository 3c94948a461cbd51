//! Step 1 of a fit: runs grouped by pairing key (same task, executor and budget), and within a
//! group the discordant pairs "a passed where b failed":
//!
//! - from arms whose own outcome is known, weighted by their arm pairs;
//! - from runs that passed or failed as a whole (sets): for a passing set A and a failing set B
//!   of the same group, every skill of A not in B beat every skill of B not in A, the pair of
//!   sets weighing 1 in all. The skills both served cancel, as they do under an additive model
//!   of a set's chance to pass; two sets that differ in one skill give one full pair.

use std::collections::HashMap;

use super::SupportEvent;
use crate::vector::dot;

/// Runs grouped by pairing key.
pub(super) struct Group {
    pub key: Vec<f32>,
    pub centered: Vec<f32>,
    pub fold_key: u64,
    /// Distinct skills served in the group.
    pub skills: Vec<usize>,
    /// qᵀk0 per skill of `skills`.
    pub relevance: Vec<f32>,
    /// (winner, loser, weight), indices into `skills`.
    pub pairs: Vec<(u32, u32, f32)>,
    pub events: Vec<usize>,
}

/// The position of `skill` in the group, added (with its relevance) when new.
fn member(group: &mut Group, skill_keys: &[Vec<f32>], skill: i64, relevance: Option<f32>) -> usize {
    let index = skill as usize;
    assert!(
        skill >= 0 && index < skill_keys.len(),
        "arm skill {skill} out of range"
    );
    match group.skills.iter().position(|&s| s == index) {
        Some(j) => j,
        None => {
            group.skills.push(index);
            group
                .relevance
                .push(relevance.unwrap_or_else(|| dot(&group.key, &skill_keys[index])));
            group.skills.len() - 1
        }
    }
}

pub(super) fn build_groups(
    skill_keys: &[Vec<f32>],
    events: &[SupportEvent],
    mu: &[f32],
) -> Vec<Group> {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    // passes and failures per skill of each group
    let mut counts: Vec<Vec<(u32, u32)>> = Vec::new();
    // per group, its sets: (members as positions in the group, passed)
    let mut sets: Vec<Vec<(Vec<usize>, bool)>> = Vec::new();
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
            sets.push(Vec::new());
            groups.len() - 1
        });
        let group = &mut groups[g];
        group.events.push(e);
        if let Some(r) = &event.relevance {
            assert_eq!(r.len(), event.arms.len(), "one relevance per arm");
        }
        for (a, arm) in event.arms.iter().enumerate() {
            let relevance = event.relevance.as_ref().map(|r| r[a]);
            let j = member(group, skill_keys, arm.skill, relevance);
            if counts[g].len() < group.skills.len() {
                counts[g].resize(group.skills.len(), (0, 0));
            }
            if arm.passed {
                counts[g][j].0 += 1;
            } else {
                counts[g][j].1 += 1;
            }
        }
        if let Some(set) = &event.set {
            if let Some(r) = &set.relevance {
                assert_eq!(r.len(), set.skills.len(), "one relevance per set member");
            }
            let mut members: Vec<usize> = set
                .skills
                .iter()
                .enumerate()
                .map(|(i, &skill)| {
                    let relevance = set.relevance.as_ref().map(|r| r[i]);
                    member(group, skill_keys, skill, relevance)
                })
                .collect();
            members.sort_unstable();
            members.dedup();
            counts[g].resize(group.skills.len(), (0, 0));
            sets[g].push((members, set.passed));
        }
    }
    for ((group, counts), sets) in groups.iter_mut().zip(&counts).zip(&sets) {
        for (a, &(passes, _)) in counts.iter().enumerate() {
            for (b, &(_, failures)) in counts.iter().enumerate() {
                if a != b && passes > 0 && failures > 0 {
                    group
                        .pairs
                        .push((a as u32, b as u32, (passes * failures) as f32));
                }
            }
        }
        for (passing, _) in sets.iter().filter(|s| s.1) {
            for (failing, _) in sets.iter().filter(|s| !s.1) {
                let winners: Vec<usize> = passing
                    .iter()
                    .copied()
                    .filter(|m| !failing.contains(m))
                    .collect();
                let losers: Vec<usize> = failing
                    .iter()
                    .copied()
                    .filter(|m| !passing.contains(m))
                    .collect();
                if winners.is_empty() || losers.is_empty() {
                    continue;
                }
                let weight = 1.0 / (winners.len() * losers.len()) as f32;
                for &w in &winners {
                    for &l in &losers {
                        group.pairs.push((w as u32, l as u32, weight));
                    }
                }
            }
        }
    }
    groups
}

/// Per skill, the largest ρ·r deficit it overcame: max over the pairs it won of
/// ρ·(r_loser − r_winner), 0 when it never won from behind (the lift bound, `keyopt::lift`).
pub(super) fn largest_deficits_overcome(groups: &[&Group], n_skills: usize, rho: f64) -> Vec<f32> {
    let mut deficit = vec![0.0f64; n_skills];
    for group in groups {
        for &(a, b, _) in &group.pairs {
            let (a, b) = (a as usize, b as usize);
            let behind = rho * (group.relevance[b] - group.relevance[a]) as f64;
            let winner = &mut deficit[group.skills[a]];
            *winner = winner.max(behind);
        }
    }
    deficit.into_iter().map(|d| d as f32).collect()
}
