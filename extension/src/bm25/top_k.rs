//! `skills.bm25_top_k`: the k best skills straight from the bm25 index, for `skills.search` and
//! the methods BM25 seeds — no executor, no ordered index scan in batches, no `<&>` call per row.
//!
//! The kernel computes the index's top hits (block-max MaxScore: the scores an index scan of
//! `doc <&> q` returns); each hit's row is read through the table access method's index-fetch
//! interface, which follows HOT chains and applies the statement's snapshot. Rows that are dead
//! or outside the asked categories are skipped, and the index is asked for 4× more until k rows
//! are in hand and a hit scored below the k-th proves that no row tied with it is missing. The
//! answer is the SQL operator path's: `ORDER BY doc <&> q, id LIMIT k` over the visible rows
//! with a query term (tested both ways).
//!
//! Row-level security is the executor's to apply: where it is active for the user, and on a
//! table Citus distributes, `skills.bm25_index_search` orders by the operator instead.

use std::collections::{HashMap, HashSet};

use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};

use pg_skills_kernels::bm25index::{query_terms, SearchHit, Tid};

use super::{checked_meta, scan::term_scores_on_blocks, scan::top_hits, with_analyzer};
use crate::errors::raise;
use crate::index_rows::RowsByTid;
use crate::storage::{BufferStore, Mode};

/// How many hits the first reading asks for, beyond k: a few spare rows for dead and filtered
/// ones, and one below the k-th score to close the ties (usually the only reading).
fn first_want(k: usize) -> usize {
    k.saturating_mul(2).saturating_add(1)
}

/// Whether the direct path may read `table` for the current user: false where row-level security
/// applies (policies are the executor's to enforce).
pub fn direct_allowed(table: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup by OID on the backend's thread; noError, so no ERROR of its own.
    unsafe {
        pg_sys::check_enable_rls(table, pg_sys::InvalidOid, true)
            != pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32
    }
}

/// The k best (id, score) of skills.skill by `index` (a bm25 index on it), best first, ties by
/// id; `categories` (labels) restricts the rows; k None: every row with a query term.
pub fn search(
    index: pg_sys::Oid,
    query: &str,
    k: Option<usize>,
    categories: Option<&[String]>,
) -> Vec<(i64, f64)> {
    if k == Some(0) {
        return Vec::new();
    }
    let (rel, table) = open_skill_index(index);
    // SAFETY: `rel` is open (AccessShareLock) until the end of this block; the heap it indexes is
    // opened and kept locked like any relation a query reads; the index-fetch state and the slot
    // are created for that heap and released before it is closed; hits are read under the
    // readers lock (`reading`) and hold only TIDs and scores afterwards.
    unsafe {
        crate::am::count_index_scan(rel);
        let store = BufferStore::new(rel, Mode::Logged);
        let meta = checked_meta(&store, rel);
        let terms = with_analyzer(&meta.options, |a| query_terms(a, query));
        let heap = pg_sys::table_open(table, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let mut rows = RowsByTid::new(heap, c"id", categories);
        let mut want = k.map_or(usize::MAX, first_want);
        let mut accepted: Vec<(i64, f64)> = Vec::new();
        let mut read: HashSet<Tid> = HashSet::new();
        loop {
            let hits: Vec<SearchHit> = if terms.is_empty() {
                Vec::new()
            } else {
                top_hits(rel, &store, &terms, None, want)
            };
            // Hits come best first (score, then TID); a reading deeper than the last one starts
            // with the same hits, which were read already.
            for hit in &hits {
                if hit.score <= 0.0 || !read.insert(hit.tid) {
                    continue;
                }
                crate::am::count_index_tuples(rel, 1);
                if let Some(id) = rows.visible_id(hit.tid) {
                    accepted.push((id, hit.score));
                }
            }
            let exhausted = hits.len() < want;
            let kth = k.and_then(|k| accepted.get(k - 1)).map(|x| x.1);
            let lowest = hits.last().map(|h| h.score);
            if exhausted || matches!((kth, lowest), (Some(kth), Some(low)) if low < kth) {
                break;
            }
            want = want.saturating_mul(4);
        }
        rows.finish();
        pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        accepted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if let Some(k) = k {
            accepted.truncate(k);
        }
        accepted
    }
}

/// Opens `index` (AccessShareLock) and returns it with its table, or an ERROR unless it is a
/// bm25 index on skills.skill.
fn open_skill_index(index: pg_sys::Oid) -> (pg_sys::Relation, pg_sys::Oid) {
    let rel = super::open_bm25_index(index);
    // SAFETY: `rel` is open; it is closed before the ERROR.
    unsafe {
        let table = pg_sys::IndexGetRelation(index, false);
        if table != skill_table() {
            pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "index {} is not on skills.skill",
                    crate::am::relation_name(rel)
                ),
                Some("Pass skills.bm25_index(), the bm25 index on skills.skill."),
            );
        }
        (rel, table)
    }
}

/// The terms of `query` as `index` (a bm25 index on skills.skill) analyses a query: distinct,
/// in query order.
pub fn query_terms_of(index: pg_sys::Oid, query: &str) -> Vec<String> {
    let (rel, _) = open_skill_index(index);
    // SAFETY: `rel` is open until the end of this block.
    unsafe {
        let store = BufferStore::new(rel, Mode::Logged);
        let meta = checked_meta(&store, rel);
        let terms = with_analyzer(&meta.options, |a| query_terms(a, query));
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        terms
    }
}

/// Each of `terms`' contribution to the BM25 scores of known skills by `index` (a bm25 index on
/// skills.skill), each skill given by its id and the TID of the version the statement sees (its
/// `ctid`), and each term's share of the most any document could score (None: no document holds
/// it). A query's score is the sum of its terms' contributions in query order
/// (`TermScoreMemo`). Only these skills' postings are read, not the whole lists
/// (`PreparedQuery::term_scores_on_blocks`), so the cost does not grow with the collection.
/// (id, contributions) in the order given; a skill without a term is absent.
///
/// The index holds the TID of a row's first version; an update that changes no indexed column
/// (a HOT update) keeps that entry for the new version, on the same heap page. So a skill whose
/// own TID has no entry is looked for among the entries of its page, following each one's
/// update chain to the version the snapshot sees.
pub fn term_scores_of(
    index: pg_sys::Oid,
    terms: &[String],
    skills: &[(i64, Tid)],
) -> (Vec<(i64, Vec<Option<f64>>)>, Vec<Option<f64>>) {
    // With no skill the terms' suprema are still read: a memo keeps the first it is given.
    if terms.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let (rel, table) = open_skill_index(index);
    // SAFETY: `rel` is open until the end of this block; the heap is opened, read through the
    // row reader made for it, and closed after the reader is finished.
    unsafe {
        let store = BufferStore::new(rel, Mode::Logged);
        let blocks: Vec<u32> = skills.iter().map(|s| s.1.block).collect();
        let (matches, suprema) = term_scores_on_blocks(rel, &store, terms, &blocks);
        let by_tid: HashMap<Tid, usize> =
            matches.iter().enumerate().map(|(i, m)| (m.0, i)).collect();
        let heap = pg_sys::table_open(table, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let mut rows = RowsByTid::new(heap, c"id", None);
        let mut scores = Vec::new();
        for &(id, tid) in skills {
            let found = by_tid.get(&tid).copied().or_else(|| {
                matches.iter().position(|(t, _)| {
                    t.block == tid.block && *t != tid && rows.visible_id(*t) == Some(id)
                })
            });
            if let Some(i) = found {
                scores.push((id, matches[i].1.clone()));
            }
        }
        rows.finish();
        pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        (scores, suprema)
    }
}

/// skills.skill's OID (InvalidOid if it is missing).
pub fn skill_table() -> pg_sys::Oid {
    crate::index_rows::extension_table(c"skill")
}

/// The k best skills by a bm25 index on skills.skill, read from the index directly (see the
/// module comment): (id, score), score descending, ties by id. Where row-level security applies,
/// use skills.bm25_index_search, which orders by the operator. A NULL query matches nothing, and
/// so does a NULL element of `categories` (as `category = ANY (categories)` would).
#[pg_extern(stable, parallel_safe)]
fn bm25_top_k(
    query: Option<&str>,
    k: Option<i32>,
    categories: Option<Vec<Option<String>>>,
    index: Option<pg_sys::Oid>,
) -> TableIterator<'static, (name!(id, i64), name!(score, f64))> {
    let Some(index) = index else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "skills.bm25_top_k needs an index, got NULL",
            Some("Name a bm25 index on skills.skill, as skills.bm25_index('skills.skill') does."),
        )
    };
    if let Some(k) = k.filter(|&k| k < 0) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("k must be at least 0, got {k}"),
            Some("Pass NULL for every row with a query term."),
        );
    }
    let Some(query) = query else {
        return TableIterator::new(Vec::new());
    };
    crate::guc::check_query_size(query);
    if crate::spi::is_distributed("skills.skill") {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "skills.bm25_top_k reads one node's index; skills.skill is distributed",
            Some("Use skills.bm25_index_search, which asks every shard."),
        );
    }
    let table = unsafe { pg_sys::IndexGetRelation(index, true) };
    if table != pg_sys::InvalidOid && !direct_allowed(table) {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "skills.bm25_top_k does not apply row-level security",
            Some("Row-level security is active on skills.skill: use skills.bm25_index_search, which applies it."),
        );
    }
    let categories: Option<Vec<String>> = categories.map(|c| c.into_iter().flatten().collect());
    TableIterator::new(search(
        index,
        query,
        k.map(|k| k as usize),
        categories.as_deref(),
    ))
}
