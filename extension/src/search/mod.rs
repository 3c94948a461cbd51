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
//! | `keyopt`     | ρ·r + β + clip((q − μ)ᵀΔk) + α·E, lifts bounded | semantic (= ρ·r), beta, dk_term, event_term, held_back |
//!
//! For a request of several parts (sentences, list items), semantic and keyopt add `coverage`:
//! what answering a part no earlier skill answered adds (`parts.rs`).
//!
//! With `complements => n`, up to n skills a served skill needs follow it, at its score
//! (`complements.rs`: co-success in the recorded runs, dependency and workflow edges).
//!
//! [`serve`](pg_skills_kernels::serving::serve) then applies k, token_budget and min_score. When a
//! budget skips rows the ranking is redone deeper, so k rows are served whenever k rows fit.

//!
//! Files: `request.rs` checks the arguments; `rank.rs` ranks by each method ([`rank::rank`]
//! dispatches); `parts.rs` covers the parts of a request; `complements.rs` finds what served
//! skills need beside them; this file serves the ranking under
//! the limits; `context.rs` renders served skills as a prompt block; `graph.rs` is the skill
//! graph's walks and `skills.build_graph`.

pub mod complements;
pub mod context;
pub mod graph;
pub mod parts;
pub mod rank;
pub mod request;

use std::collections::HashMap;

use pgrx::prelude::*;

use pg_skills_kernels::complements::{interleave, Slot};
use pg_skills_kernels::serving::{serve, Limits};

use crate::trust::{notice_withheld, serving_facts, Policy, Withheld};
use rank::{rank, Ranked};
pub use request::{complements as complements_arg, limits, Request};

/// Served skills that get complements, at most (the first ones served).
const MAX_ANCHORS: usize = 50;

/// What serving needs of each ranked skill: its token count and whether the policy withholds it
/// (one round trip per ranking).
struct Facts {
    tokens: HashMap<i64, i32>,
    withheld: HashMap<i64, Withheld>,
}

impl Facts {
    fn read(ids: &[i64], policy: &Policy) -> Facts {
        let mut f = Facts {
            tokens: HashMap::new(),
            withheld: HashMap::new(),
        };
        f.add(ids, policy);
        f
    }

    fn add(&mut self, ids: &[i64], policy: &Policy) {
        for (id, (tokens, withheld)) in serving_facts(ids, policy) {
            self.tokens.insert(id, tokens);
            if let Some(w) = withheld {
                self.withheld.insert(id, w);
            }
        }
    }
}

/// `ranked` with the complements of the rows it would serve right after each of them
/// (`complements.rs`); a complement carries its anchor's score. Complements the policy
/// withholds are left out.
fn with_complements(
    req: &mut Request,
    ranked: Vec<Ranked>,
    facts: &mut Facts,
    policy: &Policy,
    limits: Limits,
    cost: &mut impl FnMut(&[Ranked], &HashMap<i64, i32>) -> Vec<u64>,
) -> Vec<Ranked> {
    let rows: Vec<(f64, u64)> = ranked
        .iter()
        .map(|r| r.score)
        .zip(cost(&ranked, &facts.tokens))
        .collect();
    let anchors: Vec<i64> = serve(&rows, limits)
        .into_iter()
        .take(MAX_ANCHORS)
        .map(|i| ranked[i].id)
        .collect();
    // Runs are weighed by their task's similarity to the request, when the encoder is there to
    // give it a key (a bm25 search on a server without the model weighs them alike).
    let key = crate::embedding::try_encoder().is_ok().then(|| req.key());
    let mut found = complements::complements(&anchors, req.complements, req.category_filter(), key);
    let new: Vec<i64> = found
        .values()
        .flatten()
        .map(|c| c.skill)
        .filter(|id| !facts.tokens.contains_key(id))
        .collect();
    facts.add(&new, policy);
    for list in found.values_mut() {
        list.retain(|c| {
            facts.tokens.contains_key(&c.skill) && !facts.withheld.contains_key(&c.skill)
        });
    }
    let ids: Vec<i64> = ranked.iter().map(|r| r.id).collect();
    interleave(&ids, &found)
        .into_iter()
        .map(|slot| match slot {
            Slot::Ranked(r) => ranked[r].clone(),
            Slot::Complement { rank, of } => Ranked {
                id: of.skill,
                score: ranked[rank].score,
                complement_of: Some(ranked[rank].id),
                complement: Some(of.link.as_str()),
                ..Ranked::default()
            },
        })
        .collect()
}

/// The served rows of `req` under `limits`, with each row's token count; `cost` gives the tokens
/// each ranked row costs against the budget (its token_count for search, its rendered size for
/// context). Skills the serving policy withholds (risk above `pg_skills.max_risk`, retired, a
/// licence outside `pg_skills.allowed_licenses`) are skipped, and a NOTICE counts them.
pub fn served(
    req: &mut Request,
    limits: Limits,
    mut cost: impl FnMut(&[Ranked], &HashMap<i64, i32>) -> Vec<u64>,
) -> Vec<(Ranked, i32)> {
    let policy = Policy::current();
    // Without a budget the first k rows that pass min_score are the answer; with one, rows may
    // be skipped, so rank deeper and grow until k are served or the candidates run out.
    req.results_wanted = limits.k;
    let mut depth = match (limits.k, limits.token_budget) {
        (None, _) => None,
        (Some(k), None) => Some(k),
        (Some(k), Some(_)) => Some((4 * k).max(40)),
    };
    loop {
        let all = rank(req, depth);
        let mut facts = Facts::read(&all.iter().map(|r| r.id).collect::<Vec<_>>(), &policy);
        let (mut ranked, withheld): (Vec<Ranked>, Vec<Ranked>) = all
            .iter()
            .cloned()
            .partition(|r| !facts.withheld.contains_key(&r.id));
        if req.complements > 0 {
            ranked = with_complements(req, ranked, &mut facts, &policy, limits, &mut cost);
        }
        let costs = cost(&ranked, &facts.tokens);
        let rows: Vec<(f64, u64)> = ranked.iter().map(|r| r.score).zip(costs).collect();
        let chosen = serve(&rows, limits);
        let enough = limits.k.is_none_or(|k| chosen.len() >= k);
        let exhausted = depth.is_none_or(|d| all.len() < d);
        let below_threshold = limits
            .min_score
            .zip(all.last())
            .is_some_and(|(m, last)| !(last.score >= m));
        if enough || exhausted || below_threshold {
            // Report the withheld skills that would have been served: all that pass min_score
            // when k did not cut the list, else those ranked above the last served row.
            let cut = limits.k.is_some_and(|k| chosen.len() >= k);
            let last_served = chosen.last().map(|&i| ranked[i].score);
            let passed_over: Vec<(i64, Withheld)> = withheld
                .iter()
                .filter(|r| {
                    limits.min_score.is_none_or(|m| r.score >= m)
                        && (!cut || last_served.is_none_or(|s| r.score >= s))
                })
                .map(|r| (r.id, facts.withheld[&r.id]))
                .collect();
            notice_withheld(&passed_over, &policy);
            return chosen
                .into_iter()
                .map(|i| {
                    let t = facts.tokens.get(&ranked[i].id).copied().unwrap_or(0);
                    (ranked[i].clone(), t)
                })
                .collect();
        }
        depth = depth.map(|d| d.saturating_mul(4));
    }
}

/// The ranking behind `skills.search`, best first (the SQL function adds name and category).
#[allow(clippy::too_many_arguments)]
#[allow(clippy::type_complexity)]
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
    complements: Option<i32>,
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
        name!(held_back, Option<f64>),
        name!(coverage, Option<f64>),
        name!(complement_of, Option<i64>),
        name!(complement, Option<String>),
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
    req.complements = complements_arg(complements);
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
            r.held_back,
            r.coverage,
            r.complement_of,
            r.complement.map(str::to_owned),
        )
    }))
}
