//! `skills.search`: the FastAdapt request. One ranking per method, then the request's limits.
//!
//! Each method ranks candidates best first with the parts of their scores:
//!
//! | method       | score                                   | parts filled              |
//! |--------------|-----------------------------------------|---------------------------|
//! | `bm25`       | BM25 (the bm25 index, else the scan)    | bm25                      |
//! | `semantic`   | q·k0 (the skeys index when planned)     | semantic                  |
//! | `hybrid`     | RRF (k = 60) of BM25 and semantic       | bm25, semantic (raw)      |
//! | `graph`      | personalised PageRank over skills.edge  | graph (+ seeds' bm25, semantic) |
//! | `skilltrace` | the same walk over past runs            | graph (+ seeds' bm25, semantic) |
//! | `keyopt`     | ρ·r + β + clip((q − μ)ᵀΔk) + α·E         | semantic (= ρ·r), beta, dk_term, event_term |
//!
//! [`serve`](pg_skills_kernels::serving::serve) then applies k, token_budget and min_score. When a
//! budget skips rows the ranking is redone deeper, so k rows are served whenever k rows fit.

//!
//! Files: `request.rs` checks the arguments; `rank.rs` ranks by each method ([`rank::rank`]
//! dispatches); this file serves the ranking under the limits; `context.rs` renders served
//! skills as a prompt block; `graph.rs` is the skill graph's walks and `skills.build_graph`.

pub mod context;
pub mod graph;
pub mod rank;
pub mod request;

use std::collections::HashMap;

use pgrx::prelude::*;

use pg_skills_kernels::serving::{serve, Limits};

use rank::{id_scores, rank, Ranked};
pub use request::{limits, Request};

/// token_count of each skill in `ids`.
fn token_counts(ids: &[i64]) -> HashMap<i64, i32> {
    id_scores(
        "SELECT id, token_count::float8 FROM skills.skill WHERE id = ANY ($1)",
        &[ids.to_vec().into()],
    )
    .into_iter()
    .map(|(id, t)| (id, t as i32))
    .collect()
}

/// The served rows of `req` under `limits`, with each row's token count; `cost` gives the tokens
/// each ranked row costs against the budget (its token_count for search, its rendered size for
/// context).
pub fn served(
    req: &mut Request,
    limits: Limits,
    mut cost: impl FnMut(&[Ranked], &HashMap<i64, i32>) -> Vec<u64>,
) -> Vec<(Ranked, i32)> {
    // Without a budget the first k rows that pass min_score are the answer; with one, rows may
    // be skipped, so rank deeper and grow until k are served or the candidates run out.
    req.results_wanted = limits.k;
    let mut depth = match (limits.k, limits.token_budget) {
        (None, _) => None,
        (Some(k), None) => Some(k),
        (Some(k), Some(_)) => Some((4 * k).max(40)),
    };
    loop {
        let ranked = rank(req, depth);
        let tokens = token_counts(&ranked.iter().map(|r| r.id).collect::<Vec<_>>());
        let costs = cost(&ranked, &tokens);
        let rows: Vec<(f64, u64)> = ranked.iter().map(|r| r.score).zip(costs).collect();
        let chosen = serve(&rows, limits);
        let enough = limits.k.is_none_or(|k| chosen.len() >= k);
        let exhausted = depth.is_none_or(|d| ranked.len() < d);
        let below_threshold = limits
            .min_score
            .zip(ranked.last())
            .is_some_and(|(m, last)| !(last.score >= m));
        if enough || exhausted || below_threshold {
            return chosen
                .into_iter()
                .map(|i| {
                    let t = tokens.get(&ranked[i].id).copied().unwrap_or(0);
                    (ranked[i].clone(), t)
                })
                .collect();
        }
        depth = depth.map(|d| d.saturating_mul(4));
    }
}

/// The ranking behind `skills.search`, best first (the SQL function adds name and category).
#[allow(clippy::too_many_arguments)]
#[pg_extern(stable)]
fn search_ranked(
    query: Option<&str>,
    categories: Option<Vec<Option<String>>>,
    k: Option<i32>,
    token_budget: Option<i32>,
    min_score: Option<f64>,
    method: Option<&str>,
    bm25_weight: Option<f64>,
    semantic_weight: Option<f64>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(score, f64),
        name!(tokens, i32),
        name!(bm25, Option<f64>),
        name!(semantic, Option<f64>),
        name!(graph, Option<f64>),
        name!(beta, Option<f64>),
        name!(dk_term, Option<f64>),
        name!(event_term, Option<f64>),
    ),
> {
    let limits = limits(k, token_budget, min_score);
    // Every argument is optional (a non-Option one would make the function STRICT, and a NULL
    // query would then return nothing instead of an error).
    let mut req = Request::new(
        query,
        categories,
        method,
        bm25_weight.unwrap_or(1.0),
        semantic_weight.unwrap_or(1.0),
    );
    let rows = served(&mut req, limits, |ranked, tokens| {
        ranked
            .iter()
            .map(|r| tokens.get(&r.id).copied().unwrap_or(0).max(0) as u64)
            .collect()
    });
    TableIterator::new(rows.into_iter().map(|(r, tokens)| {
        (
            r.id,
            r.score,
            tokens,
            r.bm25,
            r.semantic,
            r.graph,
            r.beta,
            r.dk_term,
            r.event_term,
        )
    }))
}
