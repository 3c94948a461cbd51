//! Index scans for `ORDER BY doc <&> query`: best documents first, in batches.
//!
//! The first batch is the top `pg_skills.bm25_scan_batch` (10, the usual LIMIT) by block-max MaxScore; when the executor wants more (a LIMIT
//! past it, or rows filtered out), the next batch is the top 4× as many, skipping what was already
//! returned. When the matches run out, every other live document follows with score 0, so the
//! index returns exactly the rows a sequential scan would, in the same order up to ties.
//! A batch is computed under the readers lock; between batches a merge may run.

use std::collections::{HashSet, VecDeque};

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use std::cell::RefCell;
use std::collections::HashMap;

use pg_skills_kernels::bm25index::{all_documents, query_terms, try_prepare, DocTableCache, Tid};

use super::{checked_meta, reading, with_analyzer};
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
    batch: VecDeque<Tid>,
    returned: HashSet<Tid>,
    asked: usize,
    matches_done: bool,
    rest_done: bool,
}

crate::am::ordered_scan_callbacks!(ScanState);

impl crate::am::OrderedScan for ScanState {
    const AM: &'static str = "bm25";
    const USAGE: &'static str = "a bm25 index can only be scanned in ORDER BY doc <&> query order";

    unsafe fn start(&mut self, index: pg_sys::Relation, key: Option<&pg_sys::ScanKeyData>) {
        match key {
            Some(key) => start_query(index, self, key.sk_argument),
            // ORDER BY ... <&> NULL: nothing matches, every document follows with score 0.
            None => self.matches_done = true,
        }
    }

    unsafe fn next(&mut self, index: pg_sys::Relation) -> Option<Tid> {
        loop {
            if let Some(tid) = self.batch.pop_front() {
                if self.returned.insert(tid) {
                    return Some(tid);
                }
                continue;
            }
            if self.matches_done && self.rest_done {
                return None;
            }
            next_batch(index, self);
        }
    }
}

unsafe fn start_query(index: pg_sys::Relation, state: &mut ScanState, argument: pg_sys::Datum) {
    let (named, query) = super::operator::decode_query(argument);
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
    let meta = checked_meta(&store, index);
    state.terms = with_analyzer(&meta.options, |a| query_terms(a, &query));
    state.index_oid = named.to_u32();
    state.query = query;
    state.matches_done = state.terms.is_empty();
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
