//! Tasks that need several skills together.
//!
//! Support runs are simulated: each support request is run 4 times with a set of 5 skills, its
//! semantic top 5 and then 3 sets in which 2 of those are swapped for skills from ranks 6–15
//! (seeded); a run passes when every skill the request needs was in its set. Only that outcome
//! of the whole run is reported (`SupportEvent::set`): which member decided it is not. The
//! reference fit instead sees one run per request with per-arm outcomes of its semantic top 10
//! (needed skills pass, the rest fail), as the single-skill sections do.
//!
//! Test requests are never part of a support run; a ranking is scored by Recall@10, NDCG@10
//! (binary gain) and the share of requests with every needed skill in the first 5 (and 10).

use std::collections::HashMap;

use pg_skills_benches::metrics::query_metrics;
use pg_skills_kernels::complements::{
    complements_of, interleave, weights, Complement, LinkEdge, Run, Slot,
};
use pg_skills_kernels::keyopt::fit::{SetOutcome, SupportEvent};
use pg_skills_kernels::keyopt::memory::EventMemory;
use pg_skills_kernels::keyopt::{Arm, Round};
use pg_skills_kernels::needs;
use pg_skills_kernels::rng::SplitMix64;
use pg_skills_kernels::vector::dot;

use super::{keyopt_ranking, keyopt_ranking_scored, keyopt_scored, semantic_top};

/// Candidates per ranking (the whole request's and each part's) that enter a covered pool.
const PART_POOL: usize = 10;

/// Coverage weight and width of this run (`--cover-weight`, `--cover-width`; default the
/// kernels' constants).
pub static COVER: std::sync::OnceLock<(f32, f32)> = std::sync::OnceLock::new();

fn cover_settings() -> (f32, f32) {
    COVER
        .get()
        .copied()
        .unwrap_or((needs::COVERAGE_WEIGHT, needs::COVERAGE_WIDTH))
}

/// The semantic order of a request (`key`) covering its parts (`parts`, keys): the whole
/// request's and each part's top [`PART_POOL`] ordered by `needs::cover` over key scores.
pub fn semantic_covered(key: &[f32], parts: &[Vec<f32>], doc_keys: &[Vec<f32>]) -> Vec<usize> {
    semantic_covered_mixed(key, parts, doc_keys, &[], 0.0)
}

/// [`semantic_covered`] with r = q·k0 + `share`·BM25 for the whole request and each part, as
/// `keyopt` serves a request with no round (or a round that corrects nothing): `bm25[0]` is the
/// whole request's normalised BM25, `bm25[1 + j]` part j's (missing entries and documents: 0).
/// The candidates are the same (each ranking's semantic top [`PART_POOL`]).
pub fn semantic_covered_mixed(
    key: &[f32],
    parts: &[Vec<f32>],
    doc_keys: &[Vec<f32>],
    bm25: &[HashMap<usize, f32>],
    share: f32,
) -> Vec<usize> {
    covered_mixed(key, parts, doc_keys, bm25, share, 0)
}

/// [`semantic_covered_mixed`] with each text's `lexical` best by BM25 added to the candidates:
/// what a lexical first stage beside the key index would add.
pub fn covered_mixed(
    key: &[f32],
    parts: &[Vec<f32>],
    doc_keys: &[Vec<f32>],
    bm25: &[HashMap<usize, f32>],
    share: f32,
    lexical: usize,
) -> Vec<usize> {
    let r = |at: usize, k: &[f32], d: usize| {
        dot(k, &doc_keys[d]) + share * bm25.get(at).and_then(|b| b.get(&d)).copied().unwrap_or(0.0)
    };
    let mut pool: Vec<usize> = semantic_top(key, doc_keys, PART_POOL)
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    for part in parts {
        for (d, _) in semantic_top(part, doc_keys, PART_POOL) {
            if !pool.contains(&d) {
                pool.push(d);
            }
        }
    }
    for text in bm25 {
        let mut best: Vec<(usize, f32)> = text.iter().map(|(&d, &v)| (d, v)).collect();
        best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for (d, _) in best.into_iter().take(lexical) {
            if !pool.contains(&d) {
                pool.push(d);
            }
        }
    }
    let whole: Vec<f32> = pool.iter().map(|&d| r(0, key, d)).collect();
    let parts: Vec<Vec<f32>> = parts
        .iter()
        .enumerate()
        .map(|(j, p)| pool.iter().map(|&d| r(1 + j, p, d)).collect())
        .collect();
    cover_pool(&pool, &whole, &parts, 1.0)
}

/// `needs::cover` of `pool`: `whole[i]` and `parts[j][i]` are scores of `pool[i]` for the whole
/// request and for part j, in units where one key-score unit is `unit`.
fn cover_pool(pool: &[usize], whole: &[f32], parts: &[Vec<f32>], unit: f32) -> Vec<usize> {
    let (weight, width) = cover_settings();
    needs::cover(whole, parts, weight * unit, width * unit)
        .into_iter()
        .map(|(i, _)| pool[i])
        .collect()
}

/// The KeyOpt order of a request covering its parts: the whole request's and each part's
/// KeyOpt top [`PART_POOL`], ordered by `needs::cover` over KeyOpt scores S.
pub fn keyopt_covered(
    round: &Round,
    memory: &EventMemory,
    key: &[f32],
    parts: &[Vec<f32>],
    doc_keys: &[Vec<f32>],
) -> Vec<usize> {
    let ranked = keyopt_ranking_scored(round, memory, key, doc_keys, true, None);
    let mut pool: Vec<usize> = ranked.iter().take(PART_POOL).map(|r| r.0).collect();
    for part in parts {
        for d in keyopt_ranking(round, memory, part, doc_keys, true)
            .into_iter()
            .take(PART_POOL)
        {
            if !pool.contains(&d) {
                pool.push(d);
            }
        }
    }
    let whole = keyopt_scored(round, memory, key, &ranked, &pool);
    // Each part's KeyOpt score of the pool: what the round learned decides which skill answers
    // a part, as it does for the whole request.
    let parts: Vec<Vec<f32>> = parts
        .iter()
        .map(|p| keyopt_scored(round, memory, p, &[], &pool))
        .collect();
    let unit = if round.rho > 0.0 { round.rho } else { 1.0 };
    cover_pool(&pool, &whole, &parts, unit)
}

/// A request that needs several skills: its key, the skills (document indices), its source.
pub struct MultiTask {
    pub key: Vec<f32>,
    /// Keys of the request's parts (`needs::parts`); empty when it has one part.
    pub parts: Vec<Vec<f32>>,
    pub needed: Vec<usize>,
    /// Pairing key of its runs and the group cross-validation keeps together.
    pub id: u64,
}

/// Skills per simulated set run, and runs per support request.
const SET_SIZE: usize = 5;
const RUNS: usize = 4;
const SWAPPED: usize = 2;

/// A run of `task` that used `set`, reported as a whole: passed when the set held every
/// needed skill.
pub fn set_run(task: &MultiTask, set: &[usize]) -> SupportEvent {
    SupportEvent {
        key: task.key.clone(),
        pairing: task.id,
        group: task.id,
        arms: Vec::new(),
        relevance: None,
        set: Some(SetOutcome {
            skills: set.iter().map(|&d| d as i64).collect(),
            passed: task.needed.iter().all(|n| set.contains(n)),
            relevance: None,
        }),
    }
}

/// Set runs of every task (outcome of the whole run only).
pub fn set_runs(tasks: &[&MultiTask], doc_keys: &[Vec<f32>], seed: u64) -> Vec<SupportEvent> {
    let mut rng = SplitMix64(seed ^ 0x5e7);
    let mut out = Vec::new();
    for task in tasks {
        let ranked: Vec<usize> = semantic_top(&task.key, doc_keys, 15)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        let top = &ranked[..SET_SIZE.min(ranked.len())];
        for run in 0..RUNS {
            let mut set: Vec<usize> = top.to_vec();
            if run > 0 && ranked.len() > SET_SIZE {
                let mut spare: Vec<usize> = ranked[SET_SIZE..].to_vec();
                for _ in 0..SWAPPED {
                    let out_at = (rng.next_u64() % set.len() as u64) as usize;
                    let in_at = (rng.next_u64() % spare.len() as u64) as usize;
                    set[out_at] = spare.swap_remove(in_at);
                    if spare.is_empty() {
                        break;
                    }
                }
            }
            out.push(set_run(task, &set));
        }
    }
    out
}

/// The reference: one run per task serving its semantic top 10, each arm's own outcome known.
pub fn arm_runs(tasks: &[&MultiTask], doc_keys: &[Vec<f32>]) -> Vec<SupportEvent> {
    tasks
        .iter()
        .map(|task| SupportEvent {
            key: task.key.clone(),
            pairing: task.id,
            group: task.id,
            arms: semantic_top(&task.key, doc_keys, 10)
                .into_iter()
                .map(|(d, _)| Arm {
                    skill: d as i64,
                    passed: task.needed.contains(&d),
                })
                .collect(),
            relevance: None,
            set: None,
        })
        .collect()
}

/// The recorded runs as `skills.search(..., complements => n)` reads them: each event's arms
/// (every skill of a set run sharing the run's outcome), its task key, and the documents'
/// edges.
pub struct Complementer<'a> {
    runs: Vec<(&'a [f32], Vec<Arm>)>,
    /// The runs that served each document.
    runs_of: Vec<Vec<usize>>,
    edges: &'a [LinkEdge],
}

impl<'a> Complementer<'a> {
    pub fn new(events: &'a [SupportEvent], edges: &'a [LinkEdge], docs: usize) -> Self {
        let runs: Vec<(&[f32], Vec<Arm>)> = events
            .iter()
            .map(|e| {
                let arms = match &e.set {
                    Some(set) => set
                        .skills
                        .iter()
                        .map(|&skill| Arm {
                            skill,
                            passed: set.passed,
                        })
                        .collect(),
                    None => e.arms.clone(),
                };
                (e.key.as_slice(), arms)
            })
            .collect();
        let mut runs_of: Vec<Vec<usize>> = vec![Vec::new(); docs];
        for (i, (_, arms)) in runs.iter().enumerate() {
            for arm in arms {
                if let Some(list) = runs_of.get_mut(arm.skill as usize) {
                    if list.last() != Some(&i) {
                        list.push(i);
                    }
                }
            }
        }
        Complementer {
            runs,
            runs_of,
            edges,
        }
    }

    /// `ranking` for the request `key` with each of its first 10 rows (the anchors) followed
    /// by up to `n` complements, as the extension serves them: the runs of the anchors weighed
    /// by their task's similarity to the request.
    pub fn complemented(&self, key: &[f32], ranking: &[usize], n: usize) -> Vec<usize> {
        let anchors: Vec<usize> = ranking.iter().take(10).copied().collect();
        let mut chosen: Vec<usize> = anchors
            .iter()
            .flat_map(|&a| self.runs_of.get(a).into_iter().flatten().copied())
            .collect();
        chosen.sort_unstable();
        chosen.dedup();
        let sims: Vec<f32> = chosen.iter().map(|&i| dot(key, self.runs[i].0)).collect();
        let runs: Vec<Run> = chosen
            .iter()
            .zip(weights(&sims))
            .map(|(&i, weight)| Run {
                weight,
                arms: self.runs[i].1.clone(),
            })
            .collect();
        let found: HashMap<i64, Vec<Complement>> = anchors
            .iter()
            .map(|&a| (a as i64, complements_of(a as i64, &runs, self.edges, n)))
            .collect();
        let ids: Vec<i64> = ranking.iter().map(|&d| d as i64).collect();
        interleave(&ids, &found)
            .into_iter()
            .map(|slot| match slot {
                Slot::Ranked(r) => ranking[r],
                Slot::Complement { of, .. } => of.skill as usize,
            })
            .collect()
    }

    /// How many of `docs` get a complement for a request that is the document's own key (a
    /// summary of how much the runs and edges say).
    pub fn with_any(&self, doc_keys: &[Vec<f32>]) -> usize {
        (0..doc_keys.len())
            .filter(|&d| self.complemented(&doc_keys[d], &[d], 1).len() > 1)
            .count()
    }
}

/// Mean Recall@10, NDCG@10, all needed in the first 5, all needed in the first 10.
fn scores(tasks: &[&MultiTask], rank: impl Fn(&MultiTask) -> Vec<usize>) -> [f64; 4] {
    let mut sum = [0.0f64; 4];
    for task in tasks {
        let ranking = rank(task);
        let ranked: Vec<Vec<String>> = ranking.iter().map(|d| vec![d.to_string()]).collect();
        let relevant: HashMap<String, u32> =
            task.needed.iter().map(|d| (d.to_string(), 1)).collect();
        let m = query_metrics(&ranked, &relevant, |d| d.parse().ok());
        let within = |n: usize| {
            let top = &ranking[..ranking.len().min(n)];
            task.needed.iter().all(|d| top.contains(d)) as u8 as f64
        };
        sum[0] += m.recall_at_10;
        sum[1] += m.ndcg_at_10;
        sum[2] += within(5);
        sum[3] += within(10);
    }
    sum.map(|s| s / tasks.len().max(1) as f64)
}

/// One row of [`table`]'s form: `name` and the scores of `rank` over `tasks`.
pub fn row_of(tasks: &[&MultiTask], name: &str, rank: impl Fn(&MultiTask) -> Vec<usize>) -> String {
    let s = scores(tasks, rank);
    format!(
        "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
        s[0], s[1], s[2], s[3]
    )
}

/// The table: semantic, then KeyOpt read by each of the rounds `rounds(task)` gives (name,
/// round, its event memory; the same names in the same order for every task), with and
/// without covering parts; with `complements` (each document's complements for a task), the
/// covered orders again with one complement after each of the first rows.
pub fn table<'r>(
    tasks: &[&MultiTask],
    doc_keys: &[Vec<f32>],
    names: &[&str],
    rounds: impl Fn(&MultiTask) -> Vec<(&'r Round, &'r EventMemory)>,
    complements: Option<&dyn Fn(&MultiTask) -> &'r Complementer<'r>>,
) -> String {
    let mut out = String::from(
        "| method | Recall@10 | NDCG@10 | all needed in top 5 | all needed in top 10 |\n|---|---|---|---|---|\n",
    );
    let mut line = |name: &str, s: [f64; 4]| {
        out += &format!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
            s[0], s[1], s[2], s[3]
        );
    };
    line(
        "semantic (q·k0)",
        scores(tasks, |t| {
            semantic_top(&t.key, doc_keys, 10)
                .into_iter()
                .map(|(d, _)| d)
                .collect()
        }),
    );
    line(
        "semantic, parts covered",
        scores(tasks, |t| semantic_covered(&t.key, &t.parts, doc_keys)),
    );
    if let Some(complementer) = complements {
        line(
            "semantic, parts covered, complements => 1",
            scores(tasks, |t| {
                complementer(t).complemented(
                    &t.key,
                    &semantic_covered(&t.key, &t.parts, doc_keys),
                    1,
                )
            }),
        );
    }
    for (i, name) in names.iter().enumerate() {
        line(
            name,
            scores(tasks, |t| {
                let (round, memory) = rounds(t)[i];
                keyopt_ranking(round, memory, &t.key, doc_keys, true)
            }),
        );
        line(
            &format!("{name}, parts covered"),
            scores(tasks, |t| {
                let (round, memory) = rounds(t)[i];
                keyopt_covered(round, memory, &t.key, &t.parts, doc_keys)
            }),
        );
        if let Some(complementer) = complements {
            line(
                &format!("{name}, parts covered, complements => 1"),
                scores(tasks, |t| {
                    let (round, memory) = rounds(t)[i];
                    complementer(t).complemented(
                        &t.key,
                        &keyopt_covered(round, memory, &t.key, &t.parts, doc_keys),
                        1,
                    )
                }),
            );
        }
    }
    out
}
