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

pub mod context;
pub mod graph;
pub mod reference;

use std::collections::HashMap;

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::fusion::{pool_first, reciprocal_rank_fusion, Ranking, RRF_K};
use pg_skills_kernels::serving::{serve, Limits, SEARCH_METHODS as METHODS};

use crate::embedding::{query_key_values, select_one, spi_error};
use crate::errors::raise;

/// First-stage hits of each kind that seed the graph walks.
pub const SEEDS: usize = 10;
/// The rank constant of the seed weights: Σ w/(SEED_RRF_K + rank) over both lists. Much sharper
/// than hybrid's 60, so the walk restarts mostly at the best seeds (with 60, ten seeds weigh
/// almost alike and the walk ranks by where edges gather, not by relevance).
pub const SEED_RRF_K: f64 = 1.0;
/// Depth of each list that hybrid fuses, at least.
pub const HYBRID_DEPTH: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Bm25,
    Semantic,
    Hybrid,
    Graph,
    SkillTrace,
    KeyOpt,
}

impl Method {
    fn parse(name: &str) -> Method {
        match name.trim().to_lowercase().as_str() {
            "bm25" => Method::Bm25,
            "semantic" => Method::Semantic,
            "hybrid" => Method::Hybrid,
            "graph" => Method::Graph,
            "skilltrace" => Method::SkillTrace,
            "keyopt" => Method::KeyOpt,
            _ => raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("unknown search method \"{name}\""),
                Some(&format!("Valid methods: {}.", METHODS.join(", "))),
            ),
        }
    }
}

/// A ranked skill and the parts of its score (None: the method does not use that part).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ranked {
    pub id: i64,
    pub score: f64,
    pub bm25: Option<f64>,
    pub semantic: Option<f64>,
    pub graph: Option<f64>,
    pub beta: Option<f64>,
    pub dk_term: Option<f64>,
    pub event_term: Option<f64>,
}

/// What to rank: the query, its pools and method, computed once per request.
pub struct Request {
    pub query: String,
    pub categories: Option<Vec<String>>,
    pub method: Method,
    pub bm25_weight: f64,
    pub semantic_weight: f64,
    /// The number of results asked for (k); it sizes KeyOpt's candidate pool, which must not
    /// grow when a budget makes the ranking read deeper.
    pub results_wanted: Option<usize>,
    key: Option<Vec<f32>>,
}

impl Request {
    pub fn new(
        query: Option<&str>,
        categories: Option<Vec<Option<String>>>,
        method: Option<&str>,
        bm25_weight: f64,
        semantic_weight: f64,
    ) -> Request {
        let Some(query) = query else {
            raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                "query must not be NULL",
                Some("Pass the task description as text."),
            )
        };
        crate::guc::check_query_size(query);
        for (name, w) in [
            ("bm25_weight", bm25_weight),
            ("semantic_weight", semantic_weight),
        ] {
            if !(w >= 0.0) || !w.is_finite() {
                raise(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("{name} must be a finite number >= 0, got {w}"),
                    Some("The weights scale each list's reciprocal ranks in hybrid and in the graph seeds (default 1)."),
                );
            }
        }
        Request {
            query: query.to_string(),
            categories: categories.map(validate_categories),
            method: Method::parse(method.unwrap_or("keyopt")),
            bm25_weight,
            semantic_weight,
            results_wanted: None,
            key: None,
        }
    }

    /// The query key q (the encoder runs once per request).
    fn key(&mut self) -> Vec<f32> {
        if self.key.is_none() {
            self.key = Some(query_key_values(&self.query));
        }
        self.key.clone().expect("set above")
    }

    fn category_filter(&self) -> Option<Vec<String>> {
        self.categories.clone()
    }
}

fn validate_categories(categories: Vec<Option<String>>) -> Vec<String> {
    let valid: Vec<String> =
        select_one::<Vec<String>>("SELECT enum_range(NULL::skills.category)::text[]", &[])
            .unwrap_or_default();
    categories
        .into_iter()
        .map(|c| match c {
            Some(c) if valid.contains(&c) => c,
            other => raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "unknown category \"{}\"",
                    other.as_deref().unwrap_or("NULL")
                ),
                Some(&format!(
                    "Valid categories: {}; pass NULL for all pools.",
                    valid.join(", ")
                )),
            ),
        })
        .collect()
}

/// Rows of a query returning (id bigint, score double precision).
pub fn id_scores(sql: &str, args: &[DatumWithOid]) -> Vec<(i64, f64)> {
    crate::spi::connect(|client| {
        let mut out = Vec::new();
        for row in client.select(sql, None, args)? {
            out.push((
                row.get::<i64>(1)?.expect("NOT NULL"),
                row.get::<f64>(2)?.expect("NOT NULL"),
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
    .unwrap_or_else(|e| spi_error(e))
}

fn depth_arg(depth: Option<usize>) -> Option<i32> {
    depth.map(|d| d.min(i32::MAX as usize) as i32)
}

/// BM25 (id, score), best first: the bm25 index when there is one, else the reference scan.
fn bm25(query: &str, categories: Option<Vec<String>>, depth: Option<usize>) -> Vec<(i64, f64)> {
    let indexed =
        select_one::<bool>("SELECT skills.bm25_index() IS NOT NULL", &[]).unwrap_or(false);
    let sql = if indexed {
        "SELECT id, score FROM skills.bm25_index_search($1, $2, $3::skills.category[], skills.bm25_index())"
    } else {
        "SELECT id, score FROM skills.bm25_scan($1, $2, $3)"
    };
    id_scores(
        sql,
        &[query.into(), depth_arg(depth).into(), categories.into()],
    )
}

/// Semantic (id, q·k0), best first, ties by id: `skills.skill_key` ordered by `<#>`, which the
/// planner serves from the skeys index when there is one. Skills without a key yet are absent.
pub fn semantic(
    key: &[f32],
    categories: Option<Vec<String>>,
    depth: Option<usize>,
) -> Vec<(i64, f64)> {
    id_scores(
        "SELECT sk.skill_id, (-(sk.k0 OPERATOR(skills.<#>) skills.key($1)))::float8 \
         FROM skills.skill_key AS sk JOIN skills.skill AS s ON s.id = sk.skill_id \
         WHERE $2::text[] IS NULL OR s.category::text = ANY ($2) \
         ORDER BY sk.k0 OPERATOR(skills.<#>) skills.key($1), sk.skill_id LIMIT $3",
        &[
            key.to_vec().into(),
            categories.into(),
            depth.map(|d| d as i64).into(),
        ],
    )
}

fn ids(list: &[(i64, f64)]) -> Vec<i64> {
    list.iter().map(|x| x.0).collect()
}

/// Reciprocal-rank fusion (rank constant `k`) of BM25 and semantic lists, with their raw scores
/// as parts.
fn fuse(req: &Request, bm25: &[(i64, f64)], semantic: &[(i64, f64)], k: f64) -> Vec<Ranked> {
    let (b, s) = (ids(bm25), ids(semantic));
    let bm25_of: HashMap<i64, f64> = bm25.iter().copied().collect();
    let semantic_of: HashMap<i64, f64> = semantic.iter().copied().collect();
    reciprocal_rank_fusion(
        &[
            Ranking {
                ids: &b,
                weight: req.bm25_weight,
            },
            Ranking {
                ids: &s,
                weight: req.semantic_weight,
            },
        ],
        k,
    )
    .into_iter()
    .map(|(id, score)| Ranked {
        id,
        score,
        bm25: bm25_of.get(&id).copied(),
        semantic: semantic_of.get(&id).copied(),
        ..Ranked::default()
    })
    .collect()
}

/// Skill ids among `ids` that are in `categories`.
fn in_categories(ids: &[i64], categories: &[String]) -> std::collections::HashSet<i64> {
    id_scores(
        "SELECT id, 0::float8 FROM skills.skill WHERE id = ANY ($1) AND category::text = ANY ($2)",
        &[ids.to_vec().into(), categories.to_vec().into()],
    )
    .into_iter()
    .map(|x| x.0)
    .collect()
}

/// A walk's (id, score) as rows: the seeds' first-stage scores as parts, filtered to the pools.
fn walked(
    req: &Request,
    walk: Vec<(i64, f64)>,
    seeds: &[Ranked],
    depth: Option<usize>,
) -> Vec<Ranked> {
    let seed_of: HashMap<i64, &Ranked> = seeds.iter().map(|s| (s.id, s)).collect();
    let allowed = req
        .category_filter()
        .map(|c| in_categories(&ids(&walk), &c));
    let mut out: Vec<Ranked> = walk
        .into_iter()
        .filter(|(id, _)| allowed.as_ref().is_none_or(|a| a.contains(id)))
        .map(|(id, score)| Ranked {
            id,
            score,
            graph: Some(score),
            bm25: seed_of.get(&id).and_then(|s| s.bm25),
            semantic: seed_of.get(&id).and_then(|s| s.semantic),
            ..Ranked::default()
        })
        .collect();
    if let Some(d) = depth {
        out.truncate(d);
    }
    out
}

/// The ranking of `req` down to `depth` rows (None: every candidate).
pub fn rank(req: &mut Request, depth: Option<usize>) -> Vec<Ranked> {
    match req.method {
        Method::Bm25 => bm25(&req.query, req.category_filter(), depth)
            .into_iter()
            .map(|(id, score)| Ranked {
                id,
                score,
                bm25: Some(score),
                ..Ranked::default()
            })
            .collect(),
        Method::Semantic => {
            let key = req.key();
            semantic(&key, req.category_filter(), depth)
                .into_iter()
                .map(|(id, score)| Ranked {
                    id,
                    score,
                    semantic: Some(score),
                    ..Ranked::default()
                })
                .collect()
        }
        Method::Hybrid => {
            let key = req.key();
            // The fused lists are as deep as k alone asks (at least HYBRID_DEPTH). Fusing deeper
            // lists adds reciprocal ranks and can reorder the top; a deeper reading (a token
            // budget, k => NULL) therefore only appends rows after the pool.
            let pool_depth = req.results_wanted.unwrap_or(0).max(HYBRID_DEPTH);
            let b = bm25(&req.query, req.category_filter(), Some(pool_depth));
            let s = semantic(&key, req.category_filter(), Some(pool_depth));
            let lists_complete = b.len() < pool_depth && s.len() < pool_depth;
            let pool = fuse(req, &b, &s, RRF_K);
            let mut fused = if lists_complete || depth.is_some_and(|d| d <= pool.len()) {
                pool
            } else {
                let b = bm25(&req.query, req.category_filter(), depth);
                let s = semantic(&key, req.category_filter(), depth);
                pool_first(pool, fuse(req, &b, &s, RRF_K), |r| r.id)
            };
            if let Some(d) = depth {
                fused.truncate(d);
            }
            fused
        }
        Method::Graph | Method::SkillTrace => {
            // Seeds from every pool: an edge may lead from a seed into the requested pools.
            let key = req.key();
            let seeds = fuse(
                req,
                &bm25(&req.query, None, Some(SEEDS)),
                &semantic(&key, None, Some(SEEDS)),
                SEED_RRF_K,
            );
            let personalisation: Vec<(i64, f64)> = seeds.iter().map(|s| (s.id, s.score)).collect();
            let walk = if req.method == Method::Graph {
                graph::walk(&personalisation)
            } else {
                graph::trace(&key, &personalisation)
            };
            walked(req, walk, &seeds, depth)
        }
        Method::KeyOpt => {
            let key = req.key();
            crate::keyopt::rank::ranked(
                &req.query,
                key,
                req.category_filter(),
                req.results_wanted,
                depth,
                None,
            )
            .into_iter()
            .map(|(id, p, _)| Ranked {
                id,
                score: p.total() as f64,
                semantic: Some(p.relevance as f64),
                beta: Some(p.beta as f64),
                dk_term: Some(p.dk_term as f64),
                event_term: Some(p.event_term as f64),
                ..Ranked::default()
            })
            .collect()
        }
    }
}

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

/// The limits of a request, validated.
pub fn limits(k: Option<i32>, token_budget: Option<i32>, min_score: Option<f64>) -> Limits {
    if let Some(k) = k.filter(|&k| k < 1) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("k must be at least 1, got {k}"),
            Some("Pass NULL for no limit on the number of results."),
        );
    }
    if let Some(b) = token_budget.filter(|&b| b < 0) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("token_budget must be at least 0, got {b}"),
            Some(
                "The budget is in prompt tokens (skills.skill.token_count); NULL means no budget.",
            ),
        );
    }
    if min_score.is_some_and(|m| m.is_nan()) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "min_score must be a number, got NaN",
            Some("Pass NULL for no threshold."),
        );
    }
    Limits {
        k: k.map(|k| k as usize),
        token_budget: token_budget.map(|b| b as u64),
        min_score,
    }
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
