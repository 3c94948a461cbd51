//! Index scans for `ORDER BY doc <&> query`: best documents first, in batches.
//!
//! The first batch is the top `pg_skills.bm25_scan_batch` (10, the usual LIMIT) by block-max MaxScore; when the executor wants more (a LIMIT
//! past it, or rows filtered out), the next batch is the top 4× as many, skipping what was already
//! returned. When the matches run out, every other live document follows with score 0, so the
//! index returns exactly the rows a sequential scan would, in the same order up to ties.
//! A batch is computed under the readers lock; between batches a merge may run.

use std::collections::{HashSet, VecDeque};

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use std::cell::RefCell;
use std::collections::HashMap;

use pg_skills_kernels::bm25index::format::{Meta, META_BLOCK};
use pg_skills_kernels::bm25index::{all_documents, query_terms, try_prepare, DocTableCache, Tid};
use pg_skills_kernels::page::PageRead;

use super::{reading, with_analyzer};
use crate::errors::raise;
use crate::storage::{BufferStore, Mode, OrRaise};

thread_local! {
    /// Document tables per index file (relfilenode): REINDEX and TRUNCATE get a new file, so a
    /// new index never meets an old index's tables; within one file the metapage generation
    /// decides validity.
    static DOC_TABLES: RefCell<HashMap<u32, DocTableCache>> = RefCell::new(HashMap::new());
}

#[derive(Default)]
struct ScanState {
    index_oid: u32,
    query: String,
    terms: Vec<String>,
    ready: bool,
    batch: VecDeque<Tid>,
    returned: HashSet<Tid>,
    asked: usize,
    matches_done: bool,
    rest_done: bool,
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambeginscan(
    index: pg_sys::Relation,
    nkeys: std::ffi::c_int,
    norderbys: std::ffi::c_int,
) -> pg_sys::IndexScanDesc {
    crate::am::begin_scan::<ScanState>(index, nkeys, norderbys)
}

/// The (index, query) pair of a `skills.bm25query` datum.
pub unsafe fn decode_query(datum: pg_sys::Datum) -> (pg_sys::Oid, String) {
    let tuple = pgrx::heap_tuple::PgHeapTuple::from_composite_datum(datum);
    let one = std::num::NonZeroUsize::new(1).unwrap();
    let two = std::num::NonZeroUsize::new(2).unwrap();
    let index = tuple.get_by_index::<pg_sys::Oid>(one).ok().flatten();
    let query = tuple.get_by_index::<String>(two).ok().flatten();
    match index {
        Some(index) => (index, query.unwrap_or_default()),
        None => raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "bm25query has no index",
            Some("Build queries with skills.bm25query(query, index)."),
        ),
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amrescan(
    scan: pg_sys::IndexScanDesc,
    _keys: pg_sys::ScanKey,
    _nkeys: std::ffi::c_int,
    orderbys: pg_sys::ScanKey,
    norderbys: std::ffi::c_int,
) {
    let state = &mut *((*scan).opaque as *mut ScanState);
    *state = ScanState::default();
    let usage = "a bm25 index can only be scanned in ORDER BY doc <&> query order";
    let Some(key) = crate::am::order_by_key(orderbys, norderbys, usage) else {
        // ORDER BY ... <&> NULL: nothing matches, every document follows with score 0.
        state.matches_done = true;
        state.ready = true;
        return;
    };
    let index = (*scan).indexRelation;
    let (named, query) = decode_query(key.sk_argument);
    if named != (*index).rd_id {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "the bm25query names index {} but the scan uses index {}",
                named.to_u32(),
                (*index).rd_id.to_u32()
            ),
            Some(
                "Build the query with skills.bm25query(query, index) for the index being scanned.",
            ),
        );
    }
    let store = BufferStore::new(index, Mode::Logged);
    let meta = Meta::read(&store.read(META_BLOCK)).or_raise(index);
    state.terms = with_analyzer(&meta.options, |a| query_terms(a, &query));
    state.index_oid = named.to_u32();
    state.query = query;
    state.matches_done = state.terms.is_empty();
    state.ready = true;
}

unsafe fn next_batch(index: pg_sys::Relation, state: &mut ScanState) {
    let store = BufferStore::new(index, Mode::Logged);
    if !state.matches_done {
        let first = crate::guc::BM25_SCAN_BATCH.get().max(1) as usize;
        let want = if state.asked == 0 {
            first
        } else {
            state.asked.saturating_mul(4)
        };
        let file = (*index).rd_node.relNode.to_u32();
        let hits = reading(index, &store, || {
            DOC_TABLES.with(|cell| {
                let mut caches = cell.borrow_mut();
                let cache = caches.entry(file).or_default();
                try_prepare(&store, &state.terms).and_then(|p| p.top_k_cached(want, cache))
            })
        })
        .or_raise(index);
        super::operator::remember_scores(pg_sys::Oid::from(state.index_oid), &state.query, &hits);
        state.matches_done = hits.len() < want;
        state.asked = want;
        for hit in hits {
            if !state.returned.contains(&hit.tid) {
                state.batch.push_back(hit.tid);
            }
        }
    }
    if state.batch.is_empty() && state.matches_done && !state.rest_done {
        let all = reading(index, &store, || all_documents(&store)).or_raise(index);
        state
            .batch
            .extend(all.into_iter().filter(|t| !state.returned.contains(t)));
        state.rest_done = true;
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgettuple(
    scan: pg_sys::IndexScanDesc,
    _direction: pg_sys::ScanDirection::Type,
) -> bool {
    crate::am::require_mvcc(scan, "bm25");
    let state = &mut *((*scan).opaque as *mut ScanState);
    if !state.ready {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            "bm25 index scan used before amrescan",
            None,
        );
    }
    loop {
        if let Some(tid) = state.batch.pop_front() {
            if !state.returned.insert(tid) {
                continue;
            }
            crate::am::return_tid(scan, tid.block, tid.offset);
            return true;
        }
        if state.matches_done && state.rest_done {
            return false;
        }
        next_batch((*scan).indexRelation, state);
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amendscan(_scan: pg_sys::IndexScanDesc) {
    // The state lives in the scan's memory context and is dropped with it.
}
