//! Index scans for `ORDER BY key <op> query`: the `pg_skills.key_probes` nearest lists first
//! (or the breadth a `skills.keyquery` carries), every entry's exact distance, nearest first.
//! When the executor wants more rows than those lists hold (a WHERE clause filtered them out),
//! the scan probes the next lists — the iterative scan — up to `pg_skills.key_max_probes` lists
//! (0: all of them, so a filtered query finds k rows whenever k rows match). Rows of a later batch can be nearer than rows already returned
//! (pgvector's "relaxed order"); within the first batch the order is exact.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::keyindex::probe::ProbeOrder;
use pg_skills_kernels::keyindex::search::{candidate_order, scan_list};
use pg_skills_kernels::keyindex::Candidate;
use pg_skills_kernels::layout::Tid;
use pg_skills_kernels::vector::WideQuery;

use super::{centroids, checked_meta, metric_of_strategy};
use crate::errors::raise;
use crate::key::datatype::Key;
use crate::key::query::KeyQuery;
use crate::storage::{BufferStore, Mode, OrRaise};

#[derive(Default)]
struct ScanState {
    query: WideQuery,
    /// Lists nearest first; `next` is the first not yet read.
    order: ProbeOrder,
    next: usize,
    limit: usize,
    /// Lists read per batch.
    probes: usize,
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

crate::am::ordered_scan_callbacks!(ScanState);

impl crate::am::OrderedScan for ScanState {
    const AM: &'static str = "skeys";
    const USAGE: &'static str =
        "a skeys index can only be scanned in ORDER BY key <#>, <=> or <-> order";

    unsafe fn start(&mut self, index: pg_sys::Relation, key: Option<&pg_sys::ScanKeyData>) {
        // ORDER BY key <#> NULL: every distance is NULL; the index returns nothing.
        if let Some(key) = key {
            // The operator classes hold two right types: skills.key and the row type
            // skills.keyquery (a query with its breadth).
            let query = if pg_sys::type_is_rowtype(key.sk_subtype) {
                KeyQuery::from_datum(key.sk_argument)
            } else {
                Some(KeyQuery::plain(key.sk_argument))
            };
            if let Some(query) = query {
                start_query(index, self, key.sk_strategy, query);
            }
        }
    }

    unsafe fn next(&mut self, index: pg_sys::Relation) -> Option<Tid> {
        loop {
            if let Some(Nearest(c)) = self.batch.pop() {
                return Some(c.tid);
            }
            if self.query.is_empty() || self.next >= self.limit {
                return None;
            }
            next_batch(index, self);
        }
    }
}

/// A breadth from the query, checked, or the session's setting.
fn breadth(given: Option<i32>, setting: i32, least: i32, what: &str) -> usize {
    let value = given.unwrap_or(setting);
    if !(least..=65_535).contains(&value) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("a skills.keyquery's {what} is {value}, outside {least} to 65535"),
            Some("Give skills.key_query a breadth in range, or NULL for the server's setting."),
        );
    }
    value as usize
}

unsafe fn start_query(
    index: pg_sys::Relation,
    state: &mut ScanState,
    strategy: pg_sys::StrategyNumber,
    query: KeyQuery,
) {
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    if metric_of_strategy(strategy) != Some(meta.metric) {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("this skeys index orders by {} distance", meta.metric.name()),
            None,
        );
    }
    let probes = breadth(query.probes, crate::guc::KEY_PROBES.get(), 1, "probes");
    let max = breadth(
        query.max_probes,
        crate::guc::KEY_MAX_PROBES.get(),
        0,
        "max_probes",
    );
    let key = Key::from_datum(query.key).to_vec();
    if key.len() != meta.dim as usize {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("a {}-d query for a {}-d index", key.len(), meta.dim),
            None,
        );
    }
    let key = WideQuery::new(&key);
    state.order = centroids(&store, index, &meta).probe_order(&key);
    state.limit = if max == 0 {
        state.order.len()
    } else {
        max.min(state.order.len())
    };
    state.probes = probes;
    state.query = key;
}

unsafe fn next_batch(index: pg_sys::Relation, state: &mut ScanState) {
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let end = (state.next + state.probes).min(state.limit);
    let mut batch = Vec::new();
    for &list in state.order.lists(state.next, end) {
        scan_list(&store, &meta, list, &state.query, &mut batch).or_raise(index);
        pg_sys::check_for_interrupts!();
    }
    state.next = end;
    state.batch = batch.into_iter().map(Nearest).collect();
}
