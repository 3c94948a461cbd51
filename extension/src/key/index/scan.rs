//! Index scans for `ORDER BY key <op> query`: the `pg_skills.key_probes` nearest lists first,
//! every entry's exact distance, nearest first. When the executor wants more rows than those
//! lists hold (a WHERE clause filtered them out), the scan probes the next lists — the iterative
//! scan — up to `pg_skills.key_max_probes` lists (0: all of them, so a filtered query finds k
//! rows whenever k rows match). Rows of a later batch can be nearer than rows already returned
//! (pgvector's "relaxed order"); within the first batch the order is exact.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use half::f16;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::keyindex::search::{candidate_order, scan_list};
use pg_skills_kernels::keyindex::Candidate;

use super::{centroids, checked_meta, metric_of_strategy};
use crate::errors::raise;
use crate::key::datatype::Key;
use crate::storage::{BufferStore, Mode, OrRaise};

#[derive(Default)]
struct ScanState {
    ready: bool,
    query: Vec<f16>,
    /// Lists nearest first; `next` is the first not yet read.
    order: Vec<u32>,
    next: usize,
    limit: usize,
    /// The current batch as a heap (heapify is linear; a LIMIT 10 pops only 10 of thousands).
    batch: BinaryHeap<Nearest>,
}

/// Heap order: the nearest candidate (then the smallest TID) on top.
struct Nearest(Candidate);

impl PartialEq for Nearest {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Nearest {}
impl PartialOrd for Nearest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Nearest {
    fn cmp(&self, other: &Self) -> Ordering {
        candidate_order(&other.0, &self.0)
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambeginscan(
    index: pg_sys::Relation,
    nkeys: std::ffi::c_int,
    norderbys: std::ffi::c_int,
) -> pg_sys::IndexScanDesc {
    crate::am::begin_scan::<ScanState>(index, nkeys, norderbys)
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
    state.ready = true;
    let usage = "a skeys index can only be scanned in ORDER BY key <#>, <=> or <-> order";
    let Some(key) = crate::am::order_by_key(orderbys, norderbys, usage) else {
        // ORDER BY key <#> NULL: every distance is NULL; the index returns nothing.
        return;
    };
    let index = (*scan).indexRelation;
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    if metric_of_strategy(key.sk_strategy) != Some(meta.metric) {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("this skeys index orders by {} distance", meta.metric.name()),
            None,
        );
    }
    let query = Key::from_datum(key.sk_argument).to_vec();
    if query.len() != meta.dim as usize {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("a {}-d query for a {}-d index", query.len(), meta.dim),
            None,
        );
    }
    state.order = centroids(&store, index, &meta).probe_order(&query);
    let max = crate::guc::KEY_MAX_PROBES.get().max(0) as usize;
    state.limit = if max == 0 {
        state.order.len()
    } else {
        max.min(state.order.len())
    };
    state.query = query;
}

unsafe fn next_batch(index: pg_sys::Relation, state: &mut ScanState) {
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let probes = crate::guc::KEY_PROBES.get().max(1) as usize;
    let end = (state.next + probes).min(state.limit);
    let mut batch = Vec::new();
    for &list in &state.order[state.next..end] {
        scan_list(&store, &meta, list, &state.query, &mut batch).or_raise(index);
        pg_sys::check_for_interrupts!();
    }
    state.next = end;
    state.batch = batch.into_iter().map(Nearest).collect();
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgettuple(
    scan: pg_sys::IndexScanDesc,
    _direction: pg_sys::ScanDirection::Type,
) -> bool {
    crate::am::require_mvcc(scan, "skeys");
    let state = &mut *((*scan).opaque as *mut ScanState);
    if !state.ready {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            "skeys index scan used before amrescan",
            None,
        );
    }
    loop {
        if let Some(Nearest(c)) = state.batch.pop() {
            crate::am::return_tid(scan, c.tid.block, c.tid.offset);
            return true;
        }
        if state.query.is_empty() || state.next >= state.limit {
            return false;
        }
        next_batch((*scan).indexRelation, state);
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amendscan(_scan: pg_sys::IndexScanDesc) {
    // The state lives in the scan's memory context and is dropped with it.
}
