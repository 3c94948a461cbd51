//! Step 1 of a fit: runs grouped by pairing key (same task, executor and budget), and within a
//! group the discordant pairs "a passed where b failed", weighted by their arm pairs.

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

pub(super) fn build_groups(
    skill_keys: &[Vec<f32>],
    events: &[SupportEvent],
    mu: &[f32],
) -> Vec<Group> {
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
