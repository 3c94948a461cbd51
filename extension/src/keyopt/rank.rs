//! `skills.keyopt_rank`: the KeyOpt reading for one query.
//!
//! 1. The active round of this snapshot (none: S = r).
//! 2. Semantic candidates over `skills.skill_key` (the skeys index when the planner takes it):
//!    a pool of max(10, k) (10 when k is NULL). Rows past the pool, when more are asked for,
//!    follow every pool row, so a deeper reading never reorders a shallower one: a skill with
//!    a large β but little relevance cannot jump into the top because a token budget made
//!    the search read deeper.
//! 3. The round's memory: the `memory::NEIGHBOURS` past runs (fitted into the round) nearest the
//!    query key, read for the event term and for event recall, which replaces the pool's tail
//!    with up to 4 skills that passed on similar tasks (6 kept + 4 recalled for k ≤ 10). A
//!    neutral round (no correction survived cross-validation) recalls nothing.
//! 4. Each candidate's packed row `[k0; Δk; β]` of the round, skipped when the skill's content
//!    changed since (a correction belongs to the content it was fitted on), and
//!    S = ρ·r + β + clip((q − μ)ᵀΔk, −c, c) + α·E, with r the semantic score of the current key
//!    plus a share of the query's BM25 over its best (the round's, or with no round
//!    `pg_skills.keyopt_bm25_share`), or the round's relevance function.

use std::collections::{HashMap, HashSet};

use pgrx::prelude::*;

use pg_skills_kernels::keyopt::lift::bounded_order;
use pg_skills_kernels::keyopt::memory::{self, Neighbour};
use pg_skills_kernels::keyopt::{packed_len, read_row, Arm, Parts, QueryKey, Settings};
use pg_skills_kernels::vector::KEY_DIM;

use super::relevance;
use crate::embedding::query_key_values;

#[derive(Clone)]
struct ActiveRound {
    round: i32,
    rho: f32,
    mu: Vec<f32>,
    settings: Settings,
    max_event_id: Option<i64>,
    /// False for a neutral round: no recall either.
    corrections: bool,
    /// The function that gave r when the round was fitted (None: qᵀk0).
    relevance_function: Option<String>,
    /// w of r = qᵀk0 + w·BM25 / best BM25, chosen by the fit (0: the key score alone).
    bm25_share: f32,
}

/// What the several KeyOpt readings of one search (a request and each of its parts) share:
/// the active round, the round's packed rows of the pool and the past runs near each key, read
/// once. Every reading of one search sees the same snapshot (the search functions are STABLE),
/// so a remembered row is the row a second read would return. Outside [`within_one_search`]
/// nothing is remembered.
#[derive(Default)]
struct SearchMemo {
    round: Option<Option<ActiveRound>>,
    /// (round, skill) → its packed row (None: the round has no row for it).
    packed: HashMap<(i32, i64), Option<PackedRow>>,
    /// (key, fitted runs up to) → the nearest runs.
    neighbours: Vec<(Vec<f32>, i64, Vec<(f32, Vec<Arm>)>)>,
    /// The (term, skill) BM25 contributions read so far: a request's parts are read twice,
    /// and their terms are the request's.
    bm25: crate::search::rank::Bm25Memo,
    /// The bm25 index on skills.skill and whether the table is distributed.
    bm25_index: Option<(Option<pg_sys::Oid>, bool)>,
}

thread_local! {
    static SEARCH_MEMO: std::cell::RefCell<Option<SearchMemo>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` (one search's KeyOpt readings) with a fresh [`SearchMemo`]; the one before (a
/// search inside a relevance function, say) comes back afterwards, also on an error.
pub fn within_one_search<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<SearchMemo>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SEARCH_MEMO.with(|m| *m.borrow_mut() = previous);
        }
    }
    let _restore = Restore(SEARCH_MEMO.with(|m| m.replace(Some(SearchMemo::default()))));
    f()
}

/// `read()`, or what this search read already (`remembered` finds it, `remember` stores it).
fn memoised<T: Clone>(
    remembered: impl FnOnce(&SearchMemo) -> Option<T>,
    read: impl FnOnce() -> T,
    remember: impl FnOnce(&mut SearchMemo, &T),
) -> T {
    if let Some(hit) = SEARCH_MEMO.with(|m| m.borrow().as_ref().and_then(remembered)) {
        return hit;
    }
    let value = read();
    SEARCH_MEMO.with(|m| {
        if let Some(memo) = m.borrow_mut().as_mut() {
            remember(memo, &value);
        }
    });
    value
}

fn active_round() -> Option<ActiveRound> {
    memoised(
        |m| m.round.clone(),
        read_active_round,
        |m, r| m.round = Some(r.clone()),
    )
}

fn read_active_round() -> Option<ActiveRound> {
    crate::spi::read(|client| {
        let rows = crate::spi::select_kept(
            client,
            "SELECT round, rho, mu, settings, max_event_id, \
                    coalesce((report ->> 'corrections')::boolean, false), relevance_function \
             FROM skills.keyopt_round WHERE active",
            &[],
        )?;
        let mut out = None;
        for row in rows {
            let settings = row.get::<pgrx::JsonB>(4)?.expect("NOT NULL").0;
            let number = |k: &str| settings[k].as_f64().unwrap_or(0.0) as f32;
            out = Some(ActiveRound {
                round: row.get::<i32>(1)?.expect("NOT NULL"),
                rho: row.get::<f32>(2)?.expect("NOT NULL"),
                mu: row.get::<Vec<f32>>(3)?.expect("NOT NULL"),
                settings: Settings {
                    use_dk: settings["use_dk"].as_bool().unwrap_or(false),
                    clip: number("clip"),
                    alpha: number("alpha"),
                    kappa: number("kappa"),
                },
                max_event_id: row.get::<i64>(5)?,
                corrections: row.get::<bool>(6)?.unwrap_or(false),
                relevance_function: row.get::<String>(7)?,
                bm25_share: number("bm25_share"),
            });
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// What one unit of key score is worth in the active round's S: its ρ (1 without a round or
/// with ρ ≤ 0), so that other terms added to S in key-score units can be scaled to it.
pub fn score_unit() -> f32 {
    active_round()
        .map(|r| r.rho)
        .filter(|&rho| rho > 0.0)
        .unwrap_or(1.0)
}

/// (skill id, content hash, semantic score) rows of a candidate query, on a plan this backend
/// keeps (`spi::select_kept`).
fn candidates(sql: &str, args: &[pgrx::datum::DatumWithOid]) -> Vec<(i64, String, f32)> {
    crate::spi::read(|client| {
        let rows = crate::spi::select_kept(client, sql, args)?;
        let mut out = Vec::new();
        for row in rows {
            out.push((
                row.get::<i64>(1)?.expect("NOT NULL"),
                row.get::<String>(2)?.expect("NOT NULL"),
                row.get::<f64>(3)?.expect("NOT NULL") as f32,
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// The candidates among `ids` (skill id, content hash, q·k0), best first, ties by id, through
/// the statement (the direct read is `key::top_k::candidates_of`).
pub(crate) fn candidates_of_by_statement(key: &[f32], ids: &[i64]) -> Vec<(i64, String, f32)> {
    candidates(
        &format!(
            "{} WHERE k.skill_id = ANY($2) ORDER BY 3 DESC, 1",
            candidate_select()
        ),
        &[key.to_vec().into(), ids.to_vec().into()],
    )
}

/// Candidates with their similarity to the query key `$1`; the query carries the session's
/// breadth, so that Citus shards scanning their key index read as many lists.
fn candidate_select() -> String {
    format!(
        "SELECT k.skill_id, s.content_hash, -(k.k0 OPERATOR(skills.<#>) {q})::float8 \
         FROM skills.skill_key AS k JOIN skills.skill AS s ON s.id = k.skill_id",
        q = crate::key::query::with_session_breadth("$1")
    )
}

/// The BM25 part of r for `text` of the skills `ids` (`search::rank::bm25_relevance`), each
/// (term, skill) pair read once per search.
fn bm25_part(text: &str, ids: &[i64]) -> HashMap<i64, f32> {
    let index = memoised(
        |m| m.bm25_index,
        crate::search::rank::bm25_index,
        |m, i| m.bm25_index = Some(*i),
    );
    // Taken out while the index is read (its SPI must not meet a borrowed memo), put back after.
    let mut bm25 = SEARCH_MEMO.with(|m| {
        m.borrow_mut()
            .as_mut()
            .map(|memo| std::mem::take(&mut memo.bm25))
            .unwrap_or_default()
    });
    let part = crate::search::rank::bm25_relevance(index, text, ids, &mut bm25);
    SEARCH_MEMO.with(|m| {
        if let Some(memo) = m.borrow_mut().as_mut() {
            memo.bm25 = bm25;
        }
    });
    part
}

/// The past runs nearest `key` among those the round fitted, with their usable arms.
pub(crate) fn neighbours(key: &[f32], max_event_id: i64) -> Vec<(f32, Vec<Arm>)> {
    memoised(
        |m| {
            m.neighbours
                .iter()
                .find(|(k, max, _)| *max == max_event_id && k.as_slice() == key)
                .map(|(_, _, rows)| rows.clone())
        },
        || read_neighbours(key, max_event_id),
        |m, rows| {
            m.neighbours
                .push((key.to_vec(), max_event_id, rows.clone()))
        },
    )
}

fn read_neighbours(key: &[f32], max_event_id: i64) -> Vec<(f32, Vec<Arm>)> {
    crate::spi::read(|client| {
        let rows = client.select(
            // One step per table (runs, their arms, the arms' skills): on Citus (docs/citus.md)
            // runs and skills are distributed on different keys and are joined only this way.
            "WITH near AS MATERIALIZED ( \
                 SELECT e.id, e.set_passed, \
                        -(e.task_key OPERATOR(skills.<#>) skills.key($1))::float8 AS sim \
                 FROM skills.event AS e WHERE e.id <= $2 \
                 ORDER BY e.task_key OPERATOR(skills.<#>) skills.key($1), e.id LIMIT $3), \
             arms AS MATERIALIZED ( \
                 SELECT a.event_id, a.skill_id, a.passed, a.content_hash FROM skills.event_arm AS a \
                 WHERE a.event_id IN (SELECT id FROM near) AND NOT a.stale), \
             current AS MATERIALIZED ( \
                 SELECT s.id, s.content_hash FROM skills.skill AS s \
                 WHERE s.id IN (SELECT skill_id FROM arms)) \
             SELECT n.id, n.sim, a.skill_id, coalesce(a.passed, n.set_passed) \
             FROM near AS n \
             LEFT JOIN (SELECT arms.* FROM arms JOIN current AS c \
                            ON c.id = arms.skill_id AND c.content_hash = arms.content_hash) AS a \
                 ON a.event_id = n.id \
             ORDER BY n.sim DESC, n.id, a.skill_id",
            None,
            &[
                key.to_vec().into(),
                max_event_id.into(),
                (memory::NEIGHBOURS as i64).into(),
            ],
        )?;
        let mut out: Vec<(i64, f32, Vec<Arm>)> = Vec::new();
        for row in rows {
            let id = row.get::<i64>(1)?.expect("NOT NULL");
            let sim = row.get::<f64>(2)?.expect("NOT NULL") as f32;
            if out.last().is_none_or(|(last, _, _)| *last != id) {
                out.push((id, sim, Vec::new()));
            }
            if let (Some(skill), Some(passed)) = (row.get::<i64>(3)?, row.get::<bool>(4)?) {
                out.last_mut()
                    .expect("pushed")
                    .2
                    .push(Arm { skill, passed });
            }
        }
        Ok::<_, pgrx::spi::Error>(out.into_iter().map(|(_, s, a)| (s, a)).collect())
    })
}

/// A skill's row in a round: the content hash it was fitted on, `[k0; Δk; β]`, its lift bound.
#[derive(Clone)]
struct PackedRow {
    content_hash: String,
    floats: Vec<f32>,
    lift_bound: f32,
}

/// Packed rows of `ids` in `round`, by id (the rows this search read already are not read again).
fn packed_rows(round: i32, ids: &[i64]) -> HashMap<i64, PackedRow> {
    let mut out = HashMap::new();
    let missing: Vec<i64> = SEARCH_MEMO.with(|m| match m.borrow().as_ref() {
        None => ids.to_vec(),
        Some(memo) => ids
            .iter()
            .copied()
            .filter(|&id| match memo.packed.get(&(round, id)) {
                Some(row) => {
                    if let Some(row) = row {
                        out.insert(id, row.clone());
                    }
                    false
                }
                None => true,
            })
            .collect(),
    });
    if missing.is_empty() {
        return out;
    }
    let read = read_packed_rows(round, &missing);
    SEARCH_MEMO.with(|m| {
        if let Some(memo) = m.borrow_mut().as_mut() {
            for &id in &missing {
                memo.packed.insert((round, id), read.get(&id).cloned());
            }
        }
    });
    out.extend(read);
    out
}

fn read_packed_rows(round: i32, ids: &[i64]) -> HashMap<i64, PackedRow> {
    crate::spi::read(|client| {
        let rows = crate::spi::select_kept(
            client,
            "SELECT skill_id, content_hash, packed, lift_bound FROM skills.keyopt_skill \
             WHERE round = $1 AND skill_id = ANY($2)",
            &[round.into(), ids.to_vec().into()],
        )?;
        let mut out = HashMap::new();
        for row in rows {
            let bytes = row.get::<Vec<u8>>(3)?.expect("NOT NULL");
            let floats: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if floats.len() == packed_len(KEY_DIM) {
                out.insert(
                    row.get::<i64>(1)?.expect("NOT NULL"),
                    PackedRow {
                        content_hash: row.get::<String>(2)?.expect("NOT NULL"),
                        floats,
                        lift_bound: row.get::<f32>(4)?.expect("NOT NULL"),
                    },
                );
            }
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// KeyOpt ranking of `query`: best first, at most `k` rows (all keyed skills when NULL), within
/// `categories` (NULL: all). With `only`, just those skills, no pool and no recall. A NULL query
/// ranks nothing; a NULL element of `categories` or `only` matches nothing (as `= ANY` would).
#[allow(clippy::type_complexity)]
#[pg_extern(stable)]
fn keyopt_rank(
    query: Option<&str>,
    categories: Option<Vec<Option<String>>>,
    k: Option<i32>,
    only: Option<Vec<Option<i64>>>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(score, f64),
        name!(relevance, f64),
        name!(beta, f64),
        name!(dk_term, f64),
        name!(event_term, f64),
        name!(held_back, f64),
        name!(recalled, bool),
    ),
> {
    let Some(query) = query else {
        return TableIterator::new(Vec::new());
    };
    let categories = categories.map(|c| c.into_iter().flatten().collect());
    let only = only.map(|ids| ids.into_iter().flatten().collect());
    let k = k.map(|k| k.max(0) as usize);
    let rows = ranked(query, query_key_values(query), categories, k, k, only, None);
    TableIterator::new(rows.into_iter().map(|(id, p, recalled)| {
        (
            id,
            p.total() as f64,
            p.relevance as f64,
            p.beta as f64,
            p.dk_term as f64,
            p.event_term as f64,
            p.held_back as f64,
            recalled,
        )
    }))
}

/// Ranks rows best first under their lift bounds (`pg_skills_kernels::keyopt::lift`); ties go
/// to the more relevant skill, then to the lower id.
fn bounded(rows: &mut [(i64, Parts, bool, f32)]) -> Vec<(i64, Parts, bool)> {
    rows.sort_by_key(|r| r.0);
    let mut parts: Vec<Parts> = rows.iter().map(|r| r.1).collect();
    let bounds: Vec<f32> = rows.iter().map(|r| r.3).collect();
    bounded_order(&mut parts, &bounds)
        .into_iter()
        .map(|i| (rows[i].0, parts[i], rows[i].2))
        .collect()
}

/// How many first-stage candidates [`ranked`] reads for `k` results and `depth` rows.
pub fn first_stage_depth(k: Option<usize>, depth: Option<usize>) -> Option<usize> {
    depth.map(|d| d.max(k.unwrap_or(0).max(10)))
}

/// The KeyOpt ranking for query key `key` (see [`keyopt_rank`]): (skill, parts, recalled).
/// `k` is the number of results asked for, which sizes the pool; `depth` how many rows to
/// return (None: every keyed skill), the pool first. `first_stage` is the semantic candidates
/// (skill id, current content hash, r; best first, as many as [`first_stage_depth`] says) when
/// the caller computed them already (`skills.keyopt_rank_batch`, for many queries at once);
/// None reads them here.
pub fn ranked(
    query: &str,
    key: Vec<f32>,
    categories: Option<Vec<String>>,
    k: Option<usize>,
    depth: Option<usize>,
    only: Option<Vec<i64>>,
    first_stage: Option<Vec<(i64, String, f32)>>,
) -> Vec<(i64, Parts, bool)> {
    let round = active_round();
    let pool_size = k.unwrap_or(0).max(10);
    let read = first_stage_depth(k, depth);
    let semantic: Vec<(i64, String, f32)> = match (&only, first_stage) {
        (None, Some(computed)) => computed,
        (Some(ids), _) => match crate::key::top_k::candidates_of(&key, ids) {
            Some(hits) => hits
                .into_iter()
                .map(|h| (h.id, h.content_hash.expect("asked for"), h.score as f32))
                .collect(),
            None => candidates_of_by_statement(&key, ids),
        },
        (None, None) => match (read, crate::key::top_k::direct_index()) {
            // Straight from the key index where the searches may read it (`key::top_k`).
            (Some(read), Some(index)) => {
                crate::key::top_k::search(index, &key, read, categories.as_deref(), true)
                    .into_iter()
                    .map(|h| (h.id, h.content_hash.expect("asked for"), h.score as f32))
                    .collect()
            }
            // Ordered by the distance alone, so that a key index serves it (ties: closed_top).
            _ => crate::search::rank::closed_top(
                read,
                |limit| {
                    let mut args = vec![key.clone().into()];
                    let filter = crate::search::rank::category_filter(&categories, 2, &mut args);
                    candidates(
                        &format!(
                            "{} {filter} ORDER BY k.k0 OPERATOR(skills.<#>) {} LIMIT {}",
                            candidate_select(),
                            crate::key::query::with_session_breadth("$1"),
                            crate::search::rank::limit_clause(limit)
                        ),
                        &args,
                    )
                },
                |c| (c.0, c.2 as f64),
            ),
        },
    };
    let memory_rows = match &round {
        Some(ActiveRound {
            max_event_id: Some(max),
            settings,
            corrections: true,
            ..
        }) if settings.alpha != 0.0 || only.is_none() => neighbours(&key, *max),
        _ => Vec::new(),
    };
    let near: Vec<Neighbour> = memory_rows
        .iter()
        .map(|(similarity, arms)| Neighbour {
            similarity: *similarity,
            arms,
        })
        .collect();

    // The pool: semantic candidates, with recall replacing the tail.
    let mut info: HashMap<i64, (String, f32)> = semantic
        .iter()
        .map(|(id, hash, r)| (*id, (hash.clone(), *r)))
        .collect();
    let semantic_ids: Vec<i64> = semantic.iter().map(|c| c.0).collect();
    let recall = round.as_ref().is_some_and(|r| r.corrections);
    let pool: Vec<(i64, bool)> = match pool_size {
        size if only.is_none() && recall && !near.is_empty() => {
            let kept: HashSet<i64> = semantic_ids
                .iter()
                .take(size.saturating_sub(memory::RECALLED))
                .copied()
                .collect();
            let wanted = memory::recall(&near, usize::MAX, memory::RECALL_MIN_SIMILARITY, |s| {
                kept.contains(&s)
            });
            // Recalled skills must have a current key and be in the requested pools. (A
            // primary-key lookup of the wanted ids, so `$3 IS NULL OR ...` does not change its
            // kept plan.)
            let usable = candidates(
                &format!(
                    "{} WHERE k.skill_id = ANY($2) \
                     AND ($3::text[] IS NULL OR s.category::text = ANY($3))",
                    candidate_select()
                ),
                &[key.clone().into(), wanted.clone().into(), categories.into()],
            );
            for (id, hash, r) in usable {
                info.insert(id, (hash, r));
            }
            let recalled: Vec<i64> = wanted
                .into_iter()
                .filter(|id| info.contains_key(id))
                .take(memory::RECALLED)
                .collect();
            memory::candidate_pool(&semantic_ids, &recalled, size)
        }
        size if only.is_none() => semantic_ids
            .iter()
            .take(size)
            .map(|&id| (id, false))
            .collect(),
        _ => semantic_ids.iter().map(|&id| (id, false)).collect(),
    };
    // Past the pool: the remaining semantic candidates, ranked after every pool row.
    let in_pool: HashSet<i64> = pool.iter().map(|p| p.0).collect();
    let beyond: Vec<(i64, bool)> = semantic_ids
        .iter()
        .filter(|id| !in_pool.contains(id))
        .map(|&id| (id, false))
        .collect();
    let pool_len = pool.len();
    let pool: Vec<(i64, bool)> = pool.into_iter().chain(beyond).collect();

    // r: the round's relevance function (the setting when there is no round), else qᵀk0 plus
    // a share of BM25.
    let bm25_share = round
        .as_ref()
        .map_or(crate::guc::KEYOPT_BM25_SHARE.get() as f32, |r| r.bm25_share);
    let function = match &round {
        Some(r) => relevance::for_round(r.relevance_function.as_deref(), r.round),
        None => relevance::configured()
            .map(|sig| relevance::resolve(&sig, "pg_skills.relevance_function")),
    };
    if let Some(f) = &function {
        let ids: Vec<i64> = pool.iter().map(|p| p.0).collect();
        for (id, r) in relevance::scores(f, query, &ids) {
            if let Some(entry) = info.get_mut(&id) {
                entry.1 = r;
            }
        }
    } else if bm25_share > 0.0 {
        // r mixes in BM25: at the share the round's fit chose, or with no round at the
        // setting's.
        let ids: Vec<i64> = pool.iter().map(|p| p.0).collect();
        let bm25 = bm25_part(query, &ids);
        for &(id, _) in &pool {
            if let Some(entry) = info.get_mut(&id) {
                entry.1 += bm25_share * bm25.get(&id).copied().unwrap_or(0.0);
            }
        }
    }

    // Rows with their lift bounds: with no round nothing is corrected (no bound); a skill the
    // round has no row for on its current content gets bound 0, so nothing lifts it.
    let mut rows: Vec<(i64, Parts, bool, f32)> = match &round {
        None => pool
            .iter()
            .map(|&(id, recalled)| {
                let parts = Parts {
                    relevance: info[&id].1,
                    ..Parts::default()
                };
                (id, parts, recalled, f32::INFINITY)
            })
            .collect(),
        Some(round) => {
            let ids: Vec<i64> = pool.iter().map(|p| p.0).collect();
            let packed = packed_rows(round.round, &ids);
            let q = QueryKey::new(&key, &round.mu);
            pool.iter()
                .map(|&(id, recalled)| {
                    let (hash, r) = &info[&id];
                    let (mut parts, lift_bound) = match packed.get(&id) {
                        Some(row) if &row.content_hash == hash => (
                            read_row(&row.floats, &q, round.rho, &round.settings),
                            row.lift_bound,
                        ),
                        _ => (Parts::default(), 0.0),
                    };
                    // r of the current key (the same as the row's k0 unless the compressor
                    // changed since the fit), or of the round's relevance function.
                    parts.relevance = round.rho * r;
                    if round.settings.alpha != 0.0 {
                        parts.event_term = round.settings.alpha
                            * memory::event_reading(&near, id, round.settings.kappa);
                    }
                    (id, parts, recalled, lift_bound)
                })
                .collect()
        }
    };
    let (pool_rows, beyond_rows) = rows.split_at_mut(pool_len);
    let mut rows: Vec<(i64, Parts, bool)> = bounded(pool_rows)
        .into_iter()
        .chain(bounded(beyond_rows))
        .collect();
    if only.is_none() {
        if let Some(d) = depth {
            rows.truncate(d);
        }
    }
    rows
}
