//! Requests of several parts (sentences, list items): the semantic and KeyOpt rankings cover
//! each part (`pg_skills_kernels::needs`).
//!
//! The whole request is ranked as before; each part is encoded (one forward pass for all) and
//! ranked by the same method; the pool is the whole request's first max(k, 10) and each part's
//! first 10. The pool is ordered by `needs::cover` (score for the whole request, plus coverage of
//! parts not yet answered, in key-score units scaled to the method's score), and the whole
//! request's remaining rows follow it. A request of one part, or with
//! `pg_skills.cover_request_parts` off, is ranked as before.

use std::collections::{HashMap, HashSet};

use pg_skills_kernels::needs;

use super::rank::Ranked;

/// Each part's first rows that enter the pool, and the least the whole request contributes.
pub const PART_POOL: usize = 10;

/// The parts of `query` worth covering, each with its key; empty when the request has one part
/// or covering is off.
pub fn part_keys(query: &str) -> Vec<(String, Vec<f32>)> {
    let parts = part_texts(query);
    if parts.is_empty() {
        return Vec::new();
    }
    let texts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let keys = crate::embedding::query_keys_of(&texts);
    parts.into_iter().zip(keys).collect()
}

/// The parts of `query` worth covering (see [`part_keys`]), without their keys.
pub fn part_texts(query: &str) -> Vec<String> {
    if !crate::guc::COVER_REQUEST_PARTS.get() {
        return Vec::new();
    }
    let parts = needs::parts(query);
    if parts.len() < 2 {
        return Vec::new();
    }
    parts
}

/// The ranking of request `query` (key `key`) covering its `parts` (text and key; see the
/// module). `rank(text, key, depth)` is the method's ranking of a text; `score(texts, ids)` the
/// method's rows of exactly those skills for each of several texts (text and key; rows in any
/// order, one list per text): for the whole request, it is asked for the parts' candidates the
/// whole request's ranking did not reach; for the parts, all at once, for the pool. `unit` is
/// the method's score for one unit of key score.
#[allow(clippy::too_many_arguments)]
pub fn covered(
    query: &str,
    key: &[f32],
    parts: &[(String, Vec<f32>)],
    results_wanted: Option<usize>,
    depth: Option<usize>,
    unit: f32,
    rank: impl Fn(&str, &[f32], Option<usize>) -> Vec<Ranked>,
    score: impl Fn(&[(&str, &[f32])], &[i64]) -> Vec<Vec<Ranked>>,
) -> Vec<Ranked> {
    let pool_size = results_wanted.unwrap_or(0).max(PART_POOL);
    let whole = rank(query, key, depth.map(|d| d.max(pool_size)));
    if parts.len() < 2 {
        let mut whole = whole;
        if let Some(d) = depth {
            whole.truncate(d);
        }
        return whole;
    }
    let mut pool: Vec<i64> = whole.iter().take(pool_size).map(|r| r.id).collect();
    for (text, part_key) in parts {
        pgrx::pg_sys::check_for_interrupts!();
        for row in rank(text, part_key, Some(PART_POOL)) {
            if !pool.contains(&row.id) {
                pool.push(row.id);
            }
        }
    }
    // Skills of the whole request's ranking keep the rows it gave them (a KeyOpt lift bound
    // acts against the rivals of that ranking); the parts' other candidates are read alone.
    let mut rows: HashMap<i64, Ranked> = whole
        .iter()
        .filter(|r| pool.contains(&r.id))
        .map(|r| (r.id, r.clone()))
        .collect();
    let rest: Vec<i64> = pool
        .iter()
        .copied()
        .filter(|id| !rows.contains_key(id))
        .collect();
    if !rest.is_empty() {
        rows.extend(
            score(&[(query, key)], &rest)
                .into_iter()
                .flatten()
                .map(|r| (r.id, r)),
        );
    }
    // A skill whose key went away between the readings is left out.
    pool.retain(|id| rows.contains_key(id));
    let whole_scores: Vec<f32> = pool.iter().map(|id| rows[id].score as f32).collect();
    // Each part's score of the pool by the same method: for keyopt, what the round learned
    // decides which skill answers a part, as it does for the whole request.
    let texts: Vec<(&str, &[f32])> = parts
        .iter()
        .map(|(text, part_key)| (text.as_str(), part_key.as_slice()))
        .collect();
    let part_scores: Vec<Vec<f32>> = score(&texts, &pool)
        .into_iter()
        .map(|rows| {
            let of: HashMap<i64, f64> = rows.into_iter().map(|r| (r.id, r.score)).collect();
            pool.iter()
                .map(|id| of.get(id).map_or(f32::NEG_INFINITY, |&s| s as f32))
                .collect()
        })
        .collect();
    let order = needs::cover(
        &whole_scores,
        &part_scores,
        needs::COVERAGE_WEIGHT * unit,
        needs::COVERAGE_WIDTH * unit,
    );
    let in_pool: HashSet<i64> = pool.iter().copied().collect();
    let mut out: Vec<Ranked> = order
        .into_iter()
        .map(|(i, score)| {
            let row = &rows[&pool[i]];
            Ranked {
                score: score as f64,
                coverage: Some(score as f64 - row.score),
                ..row.clone()
            }
        })
        .chain(whole.into_iter().filter(|r| !in_pool.contains(&r.id)))
        .collect();
    if let Some(d) = depth {
        out.truncate(d);
    }
    out
}
