//! One ranking per method, best first with the parts of each score (the table in `mod.rs`):
//! [`rank`] is where `skills.search` dispatches a method.

use std::collections::HashMap;

use pgrx::datum::DatumWithOid;

use pg_skills_kernels::fusion::{pool_first, reciprocal_rank_fusion, Ranking, RRF_K};
use pg_skills_kernels::serving::SearchMethod as Method;

use super::graph;
use super::parts;
use super::request::Request;

/// First-stage hits of each kind that seed the graph walks.
pub const SEEDS: usize = 10;
/// The rank constant of the seed weights: Σ w/(SEED_RRF_K + rank) over both lists. Much sharper
/// than hybrid's 60, so the walk restarts mostly at the best seeds (with 60, ten seeds weigh
/// almost alike and the walk ranks by where edges gather, not by relevance).
pub const SEED_RRF_K: f64 = 1.0;
/// Depth of each list that hybrid fuses, at least.
pub const HYBRID_DEPTH: usize = 100;

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
    pub held_back: Option<f64>,
    /// What covering the other parts of a request of several parts added to the score.
    pub coverage: Option<f64>,
    /// KeyOpt: the skill came in through event recall, not the semantic candidates.
    pub recalled: bool,
    /// Served as a complement of this skill (`complements => n`), and why.
    pub complement_of: Option<i64>,
    pub complement: Option<&'static str>,
}

/// Rows of a query returning (id bigint, score double precision).
pub fn id_scores(sql: &str, args: &[DatumWithOid]) -> Vec<(i64, f64)> {
    id_scores_of(sql, args, false)
}

/// [`id_scores`], on a plan this backend keeps when `kept` (`spi::select_kept`: for statements
/// that plan the same whatever their arguments).
fn id_scores_of(sql: &str, args: &[DatumWithOid], kept: bool) -> Vec<(i64, f64)> {
    crate::spi::read(|client| {
        let mut out = Vec::new();
        let rows = if kept {
            crate::spi::select_kept(client, sql, args)?
        } else {
            client.select(sql, None, args)?
        };
        for row in rows {
            out.push((
                row.get::<i64>(1)?.expect("NOT NULL"),
                row.get::<f64>(2)?.expect("NOT NULL"),
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

fn depth_arg(depth: Option<usize>) -> Option<i32> {
    depth.map(|d| d.min(i32::MAX as usize) as i32)
}

/// BM25 (id, score), best first: straight from the bm25 index on one node (one SPI round trip
/// to find it), through `skills.bm25_index_search` where the executor must read the rows (Citus,
/// row-level security), else the reference scan.
fn bm25(query: &str, categories: Option<Vec<String>>, depth: Option<usize>) -> Vec<(i64, f64)> {
    let (index, distributed) = bm25_index();
    let sql = match index {
        Some(index)
            if !distributed
                && crate::bm25::top_k::direct_allowed(crate::bm25::top_k::skill_table()) =>
        {
            return crate::bm25::top_k::search(index, query, depth, categories.as_deref());
        }
        Some(_) => "SELECT id, score FROM skills.bm25_index_search($1, $2, $3::skills.category[], skills.bm25_index())",
        None => "SELECT id, score FROM skills.bm25_scan($1, $2, $3)",
    };
    id_scores(
        sql,
        &[query.into(), depth_arg(depth).into(), categories.into()],
    )
}

/// The bm25 index on skills.skill (None: there is none), and whether Citus distributes the table:
/// what `skills.bm25_index()` and `skills.is_distributed('skills.skill')` answer, read from the
/// relation cache without a statement where Citus is not installed (every search asks).
pub fn bm25_index() -> (Option<pgrx::pg_sys::Oid>, bool) {
    let table = crate::bm25::top_k::skill_table();
    if table == pgrx::pg_sys::InvalidOid || crate::spi::citus_installed() {
        return bm25_index_by_statement();
    }
    let valid = crate::am::valid_indexes_of(table, "bm25");
    if valid.len() > 1 {
        // The SQL function's error, with the indexes it names.
        return bm25_index_by_statement();
    }
    (valid.first().copied(), false)
}

/// [`bm25_index`] through the SQL functions (Citus, or an error to report).
fn bm25_index_by_statement() -> (Option<pgrx::pg_sys::Oid>, bool) {
    crate::spi::read(|client| {
        let row = client
            .select(
                "SELECT skills.bm25_index()::oid, skills.is_distributed('skills.skill')",
                None,
                &[],
            )?
            .first();
        Ok::<_, pgrx::spi::Error>((
            row.get::<pgrx::pg_sys::Oid>(1)?,
            row.get::<bool>(2)?.unwrap_or(false),
        ))
    })
}

/// What the BM25 parts of one search's texts (a request and its parts, whose terms are the
/// request's) share: each (term, skill) contribution read from the index so far, each text's
/// terms, each skill's TID. Valid for one snapshot: a search's readings share it, a fit's task
/// starts a new one.
#[derive(Default)]
pub struct Bm25Memo {
    contributions: pg_skills_kernels::bm25index::TermScoreMemo<i64>,
    terms: HashMap<String, Vec<String>>,
    tids: HashMap<i64, Option<pg_skills_kernels::bm25index::Tid>>,
}

/// The BM25 part of a KeyOpt base relevance (`keyopt::fit::BM25_SHARES`) for the skills `ids`:
/// BM25(q, s) over the most any skill could score for the query (`skills.bm25_score_supremum`:
/// Σ idf·(k1 + 1) over its terms). It depends on the query and the skill alone, so the fit and
/// the serving read the same value whichever skills they score, and only those skills are
/// scored: from their postings in the bm25 index on one node (`bm25::top_k::term_scores_of`),
/// each (term, skill) pair once per `memo`; where the executor must read the rows (Citus,
/// row-level security), by the operator over them with the statistics a search uses. Skills
/// without a query term are absent (0), and so is every skill when skills.skill has no bm25
/// index. `index` is [`bm25_index`]'s answer, looked up once by a caller that reads several
/// texts.
pub fn bm25_relevance(
    (index, distributed): (Option<pgrx::pg_sys::Oid>, bool),
    query: &str,
    ids: &[i64],
    memo: &mut Bm25Memo,
) -> HashMap<i64, f32> {
    let Some(index) = index.filter(|_| !ids.is_empty()) else {
        return HashMap::new();
    };
    let (scores, supremum) = if !distributed
        && crate::bm25::top_k::direct_allowed(crate::bm25::top_k::skill_table())
    {
        memoised_scores(index, query, ids, memo)
    } else {
        // The query as a search would build it (a distributed table's carries the whole
        // collection's statistics), then the operator over the asked rows only.
        let (text, supremum) = crate::spi::read(|client| {
            let row = client
                .select(
                    if distributed {
                        "SELECT q::text, skills.bm25_score_supremum(q) FROM skills.bm25_global_query($1, $2) AS q"
                    } else {
                        "SELECT q::text, skills.bm25_score_supremum(q) FROM skills.bm25query($1, $2) AS q"
                    },
                    None,
                    &[query.into(), index.into()],
                )?
                .first();
            Ok::<_, pgrx::spi::Error>((
                row.get::<String>(1)?.expect("NOT NULL"),
                row.get::<f64>(2)?.unwrap_or(0.0),
            ))
        });
        let scores = id_scores(
            "SELECT s.id, -(ARRAY[s.name, s.description, s.instructions] OPERATOR(skills.<&>) $2::skills.bm25query) \
             FROM skills.skill AS s WHERE s.id = ANY ($1)",
            &[ids.to_vec().into(), text.into()],
        );
        (scores, supremum)
    };
    pg_skills_kernels::keyopt::fit::bm25_relevance_part(&scores, supremum)
}

/// BM25(`query`, s) of the skills `ids` that hold a query term, and the query's supremum, from
/// the contributions `memo` holds, reading from the index only the (term, skill) pairs it lacks.
fn memoised_scores(
    index: pgrx::pg_sys::Oid,
    query: &str,
    ids: &[i64],
    memo: &mut Bm25Memo,
) -> (Vec<(i64, f64)>, f64) {
    let terms = match memo.terms.get(query) {
        Some(terms) => terms.clone(),
        None => {
            let terms = crate::bm25::top_k::query_terms_of(index, query);
            memo.terms.insert(query.to_string(), terms.clone());
            terms
        }
    };
    if terms.is_empty() {
        return (Vec::new(), 0.0);
    }
    let (need_terms, need_ids) = memo.contributions.missing(&terms, ids);
    if !need_ids.is_empty() {
        let unknown: Vec<i64> = need_ids
            .iter()
            .copied()
            .filter(|id| !memo.tids.contains_key(id))
            .collect();
        if !unknown.is_empty() {
            // A skill the snapshot does not see keeps None: it scores nothing.
            memo.tids.extend(unknown.iter().map(|&id| (id, None)));
            memo.tids.extend(
                skill_tids(&unknown)
                    .into_iter()
                    .map(|(id, t)| (id, Some(t))),
            );
        }
        let skills: Vec<(i64, pg_skills_kernels::bm25index::Tid)> = need_ids
            .iter()
            .filter_map(|id| memo.tids[id].map(|t| (*id, t)))
            .collect();
        let (scored, suprema) = crate::bm25::top_k::term_scores_of(index, &need_terms, &skills);
        memo.contributions
            .record(&need_terms, &suprema, &need_ids, &scored);
    }
    let scores = ids
        .iter()
        .filter_map(|id| memo.contributions.score(&terms, id).map(|s| (*id, s)))
        .collect();
    (scores, memo.contributions.supremum(&terms))
}

/// The `ctid` of each skill of `ids` the statement sees: found through the primary key where
/// the searches may read skills.skill directly (`key::top_k::skill_tids`), else a statement.
fn skill_tids(ids: &[i64]) -> Vec<(i64, pg_skills_kernels::bm25index::Tid)> {
    if let Some(tids) = crate::key::top_k::skill_tids(ids) {
        return tids;
    }
    skill_tids_by_statement(ids)
}

/// [`skill_tids`] through its statement.
pub(crate) fn skill_tids_by_statement(
    ids: &[i64],
) -> Vec<(i64, pg_skills_kernels::bm25index::Tid)> {
    crate::spi::read(|client| {
        let mut out = Vec::new();
        for row in crate::spi::select_kept(
            client,
            "SELECT id, ctid FROM skills.skill WHERE id = ANY ($1)",
            &[ids.to_vec().into()],
        )? {
            let tid = row
                .get::<pgrx::pg_sys::ItemPointerData>(2)?
                .expect("NOT NULL");
            out.push((
                row.get::<i64>(1)?.expect("NOT NULL"),
                crate::am::tid_of(&tid),
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// Semantic (id, q·k0), best first, ties by id: straight from the skeys index where the
/// searches may read it directly (`key::top_k`), else `skills.skill_key` ordered by `<#>` alone,
/// which the planner serves from the skeys index when there is one (a tie-break column in the
/// ORDER BY would make it sort every key instead); [`closed_top`] resolves the ties. Skills
/// without a key yet are absent. The query carries the session's breadth, so Citus shards read
/// as many lists.
pub fn semantic(
    key: &[f32],
    categories: Option<Vec<String>>,
    depth: Option<usize>,
) -> Vec<(i64, f64)> {
    if let (Some(depth), Some(index)) = (depth, crate::key::top_k::direct_index()) {
        return crate::key::top_k::search(index, key, depth, categories.as_deref(), false)
            .into_iter()
            .map(|h| (h.id, h.score))
            .collect();
    }
    semantic_by_statement(key, categories, depth)
}

/// [`semantic`] through its statement, whatever the direct path could do.
pub(crate) fn semantic_by_statement(
    key: &[f32],
    categories: Option<Vec<String>>,
    depth: Option<usize>,
) -> Vec<(i64, f64)> {
    closed_top(
        depth,
        |limit| {
            let mut args = vec![key.to_vec().into()];
            let filter = category_filter(&categories, 2, &mut args);
            id_scores_of(
                &format!(
                    "SELECT sk.skill_id, (-(sk.k0 OPERATOR(skills.<#>) {q}))::float8 \
                     FROM skills.skill_key AS sk JOIN skills.skill AS s ON s.id = sk.skill_id \
                     {filter} ORDER BY sk.k0 OPERATOR(skills.<#>) {q} LIMIT {limit}",
                    q = crate::key::query::with_session_breadth("$1"),
                    limit = limit_clause(limit)
                ),
                &args,
                true,
            )
        },
        |r| (r.0, r.1),
    )
}

/// Semantic (id, q·k0) of exactly the skills `ids` that have a key (any order), for each of
/// `keys`: read by id directly where the searches may (`key::top_k::scores_of`), else one
/// statement for all (the keys travel as one array, key i at [512·i + 1, 512·(i + 1)]).
/// Each key is cut from the array and converted once (a materialised CTE), not once per skill:
/// per row, that conversion cost more than the product.
fn semantic_of(keys: &[&[f32]], ids: &[i64]) -> Vec<Vec<(i64, f64)>> {
    if let Some(scores) = crate::key::top_k::scores_of(keys, ids) {
        return scores;
    }
    semantic_of_by_statement(keys, ids)
}

/// [`semantic_of`] through its statement, whatever the direct path could do.
pub(crate) fn semantic_of_by_statement(keys: &[&[f32]], ids: &[i64]) -> Vec<Vec<(i64, f64)>> {
    let dims = keys.first().map_or(0, |k| k.len());
    debug_assert!(keys.iter().all(|k| k.len() == dims));
    let flat: Vec<f32> = keys.iter().flat_map(|k| k.iter().copied()).collect();
    let mut out = vec![Vec::new(); keys.len()];
    crate::spi::read(|client| {
        let rows = crate::spi::select_kept(
            client,
            "WITH g AS MATERIALIZED ( \
                 SELECT i, skills.key(($1::real[])[i * $3 + 1 : (i + 1) * $3]) AS q \
                 FROM generate_series(0, $4 - 1) AS i) \
             SELECT g.i, sk.skill_id, (-(sk.k0 OPERATOR(skills.<#>) g.q))::float8 \
             FROM g, skills.skill_key AS sk WHERE sk.skill_id = ANY ($2)",
            &[
                flat.into(),
                ids.to_vec().into(),
                (dims as i32).into(),
                (keys.len() as i32).into(),
            ],
        )?;
        for row in rows {
            let i = row.get::<i32>(1)?.expect("NOT NULL") as usize;
            out[i].push((
                row.get::<i64>(2)?.expect("NOT NULL"),
                row.get::<f64>(3)?.expect("NOT NULL"),
            ));
        }
        Ok::<_, pgrx::spi::Error>(())
    });
    out
}

/// `WHERE s.category::text = ANY ($n)` with `categories` as argument `n` (pushed onto `args`),
/// or nothing without categories. Two statements rather than one with `$n IS NULL OR ...`: a
/// kept (generic) plan cannot tell that the condition is true for every row, and on a small
/// table sorts every key by distance instead of reading the index.
pub fn category_filter<'a>(
    categories: &Option<Vec<String>>,
    n: usize,
    args: &mut Vec<DatumWithOid<'a>>,
) -> String {
    match categories {
        Some(categories) => {
            args.push(categories.clone().into());
            format!("WHERE s.category::text = ANY (${n})")
        }
        None => String::new(),
    }
}

/// `n`, or `ALL` for None: the LIMIT of a statement whose plan is kept (`spi::select_kept`)
/// written into its text, so that its generic plan is made for that many rows (with `LIMIT $n`
/// Postgres plans a generic plan for a tenth of the table, and on a small table sorts every key
/// instead of reading the index). A number, never a user's text.
pub fn limit_clause(limit: Option<usize>) -> String {
    limit.map_or_else(|| "ALL".to_string(), |n| n.to_string())
}

/// The best `depth` rows (all: None) by score descending, ties by id, from `fetch(limit)`: rows
/// ordered by an index's distance with that LIMIT (None: no limit). One row more than `depth`
/// is read; when it ties the last kept one, 4× more, until the last row read scores lower than
/// the last kept one, so the rows tied at the cut are all in hand before they are ordered by id.
/// (Not until the row just past the cut scores lower: when two skills at the cut tie, as copies
/// of one skill do, that never happens, and every key was read.)
pub fn closed_top<T>(
    depth: Option<usize>,
    fetch: impl Fn(Option<usize>) -> Vec<T>,
    key: impl Fn(&T) -> (i64, f64),
) -> Vec<T> {
    let order = |rows: &mut Vec<T>| {
        rows.sort_by(|a, b| {
            let (a, b) = (key(a), key(b));
            b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
        })
    };
    let Some(depth) = depth else {
        let mut rows = fetch(None);
        order(&mut rows);
        return rows;
    };
    if depth == 0 {
        return Vec::new();
    }
    let mut limit = depth + 1;
    loop {
        let mut rows = fetch(Some(limit));
        order(&mut rows);
        let closed = rows.len() < limit || key(&rows[rows.len() - 1]).1 < key(&rows[depth - 1]).1;
        if closed {
            rows.truncate(depth);
            return rows;
        }
        limit = limit.saturating_mul(4);
    }
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
pub(super) fn in_categories(ids: &[i64], categories: &[String]) -> std::collections::HashSet<i64> {
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
            let categories = req.category_filter();
            let as_rows = |list: Vec<(i64, f64)>| -> Vec<Ranked> {
                list.into_iter()
                    .map(|(id, score)| Ranked {
                        id,
                        score,
                        semantic: Some(score),
                        ..Ranked::default()
                    })
                    .collect()
            };
            parts::covered(
                &req.query,
                &key,
                &parts::part_keys(&req.query),
                req.results_wanted,
                depth,
                1.0,
                |_, k, d| as_rows(semantic(k, categories.clone(), d)),
                |texts, ids| {
                    let keys: Vec<&[f32]> = texts.iter().map(|t| t.1).collect();
                    semantic_of(&keys, ids).into_iter().map(as_rows).collect()
                },
            )
        }
        Method::Hybrid => {
            // The key is encoded on the encoder's threads while this one reads BM25.
            let pending = req.start_key();
            // The fused lists are as deep as k alone asks (at least HYBRID_DEPTH). Fusing deeper
            // lists adds reciprocal ranks and can reorder the top; a deeper reading (a token
            // budget, k => NULL) therefore only appends rows after the pool.
            let pool_depth = req.results_wanted.unwrap_or(0).max(HYBRID_DEPTH);
            let b = bm25(&req.query, req.category_filter(), Some(pool_depth));
            let key = req.finish_key(pending);
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
            // Seeds from every pool: an edge may lead from a seed into the requested pools. The
            // key is encoded on the encoder's threads while this one reads BM25.
            let pending = req.start_key();
            let bm25_seeds = bm25(&req.query, None, Some(SEEDS));
            let key = req.finish_key(pending);
            let seeds = fuse(
                req,
                &bm25_seeds,
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
            keyopt_served(
                &req.query,
                key,
                req.category_filter(),
                req.results_wanted,
                depth,
                None,
            )
            .0
        }
    }
}

/// The KeyOpt ranking a search serves: the request's reading by the active round
/// (`keyopt::rank::ranked`), covering its parts when it has several ([`parts`]). `first_stage`:
/// the whole request's semantic candidates when a batch already computed them on a GPU; it is
/// used only for a request of one part (a request of several is read on the CPU), and `true`
/// comes back when it was.
pub fn keyopt_served(
    query: &str,
    key: Vec<f32>,
    categories: Option<Vec<String>>,
    wanted: Option<usize>,
    depth: Option<usize>,
    first_stage: Option<Vec<(i64, String, f32)>>,
) -> (Vec<Ranked>, bool) {
    // The readings of the request and of each part share the round, its rows and the past runs.
    crate::keyopt::rank::within_one_search(move || {
        let as_rows = |list: Vec<(i64, pg_skills_kernels::keyopt::Parts, bool)>| {
            list.into_iter()
                .map(|(id, p, recalled)| Ranked {
                    id,
                    score: p.total() as f64,
                    semantic: Some(p.relevance as f64),
                    beta: Some(p.beta as f64),
                    dk_term: Some(p.dk_term as f64),
                    event_term: Some(p.event_term as f64),
                    held_back: Some(p.held_back as f64),
                    recalled,
                    ..Ranked::default()
                })
                .collect::<Vec<Ranked>>()
        };
        // The KeyOpt reading of a text: its ranking (`depth`), or exactly the skills `only`.
        let read = |text: &str,
                    k: &[f32],
                    depth: Option<usize>,
                    only: Option<&[i64]>,
                    computed: Option<Vec<(i64, String, f32)>>| {
            as_rows(crate::keyopt::rank::ranked(
                text,
                k.to_vec(),
                categories.clone(),
                wanted,
                depth,
                only.map(<[i64]>::to_vec),
                computed,
            ))
        };
        let parts = parts::part_keys(query);
        let unit = if parts.is_empty() {
            1.0
        } else {
            crate::keyopt::rank::score_unit()
        };
        // With one part, the whole request's reading is the only one: it takes the first stage.
        let used = parts.is_empty() && first_stage.is_some();
        let first_stage = std::cell::RefCell::new(first_stage.filter(|_| parts.is_empty()));
        let ranking = parts::covered(
            query,
            &key,
            &parts,
            wanted,
            depth,
            unit,
            |text, k, d| read(text, k, d, None, first_stage.borrow_mut().take()),
            |texts, ids| {
                texts
                    .iter()
                    .map(|(text, k)| {
                        pgrx::pg_sys::check_for_interrupts!();
                        read(text, k, None, Some(ids), None)
                    })
                    .collect()
            },
        );
        (ranking, used)
    })
}

#[cfg(test)]
mod tests {
    use super::closed_top;

    /// Rows tied at the cut are read until one scores lower, not until the table ends: with
    /// the 10th and 11th best tied (copies of one skill), a LIMIT of 44 closes the top 10.
    #[test]
    fn ties_at_the_cut_are_read_until_a_lower_score() {
        // 10,000 rows, score falling with id, but ids 9, 10 and 11 tie (ranks 10 to 12); the
        // "index" returns tied rows in descending id order.
        let table: Vec<(i64, f64)> = (0..10_000)
            .map(|id| {
                let score = if (9..=11).contains(&id) {
                    9.5
                } else {
                    id as f64
                };
                (id, 1.0 - score / 10_000.0)
            })
            .collect();
        let limits = std::cell::RefCell::new(Vec::new());
        let fetch = |limit: Option<usize>| {
            limits.borrow_mut().push(limit);
            let mut rows = table.clone();
            rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
            rows.truncate(limit.unwrap_or(usize::MAX));
            rows
        };
        let top = closed_top(Some(10), fetch, |r| *r);
        let ids: Vec<i64> = top.iter().map(|r| r.0).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(*limits.borrow(), vec![Some(11), Some(44)]);
    }
}
