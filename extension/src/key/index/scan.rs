//! Index scans for `ORDER BY key <op> query`: the `pg_skills.key_probes` nearest lists first
//! (or the breadth a `skills.keyquery` carries), nearest first by exact distances (computed for
//! the entries whose code does not rule them out; see `keyindex::codes`).
//! When the executor wants more rows than those lists hold (a WHERE clause filtered them out),
//! the scan probes the next lists — the iterative scan — up to `pg_skills.key_max_probes` lists
//! (0: all of them, so a filtered query finds k rows whenever k rows match). Rows of a later batch can be nearer than rows already returned
//! (pgvector's "relaxed order"); within the first batch the order is exact.

use half::f16;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::keyindex::codes::CodedQuery;
use pg_skills_kernels::keyindex::probe::ProbeOrder;
use pg_skills_kernels::keyindex::search::{scan_list, Batch, Candidate};
use pg_skills_kernels::keyindex::{Meta, Metric};
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
    /// The query as entry codes are compared with (None: the index's keys carry no codes).
    coded: Option<CodedQuery>,
    /// The metapage as the scan started (a rebuilt index is a new relation file).
    meta: Option<Meta>,
    /// The index's pages, kept for the scan (it caches the relation's length, which checks
    /// every page a code names).
    store: Option<BufferStore>,
    /// Lists nearest first; `next` is the first not yet read.
    order: ProbeOrder,
    next: usize,
    limit: usize,
    /// Lists read per batch.
    probes: usize,
    /// The current batch's candidates.
    batch: Batch,
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
        next_candidate(index, self).map(|c| c.tid)
    }
}

/// A scan of a skeys index outside the executor (`key::top_k`): the same entries in the same
/// order as an index scan for `ORDER BY key <#> query`, each with its distance.
pub struct Nearest(ScanState);

impl Nearest {
    /// A scan of `index` (an inner-product index) for `key` at breadth `probes`, up to
    /// `max_probes` lists (0: all).
    ///
    /// SAFETY: `index` is an open skeys index and stays open for the life of the scan.
    pub unsafe fn start(
        index: pg_sys::Relation,
        key: Vec<f16>,
        probes: usize,
        max_probes: usize,
    ) -> Nearest {
        let mut state = ScanState::default();
        start_key(
            index,
            &mut state,
            Metric::InnerProduct,
            key,
            probes,
            max_probes,
        );
        Nearest(state)
    }

    /// The next entry, nearest first (within a batch of lists; see the module), None at the end.
    ///
    /// SAFETY: `index` is the scan's index, open.
    pub unsafe fn next(&mut self, index: pg_sys::Relation) -> Option<Candidate> {
        next_candidate(index, &mut self.0)
    }
}

unsafe fn next_candidate(index: pg_sys::Relation, state: &mut ScanState) -> Option<Candidate> {
    loop {
        if let (Some(meta), Some(store)) = (state.meta, &state.store) {
            if let Some(c) = state.batch.pop(store, &meta, &state.query).or_raise(index) {
                return Some(c);
            }
        }
        if state.query.is_empty() || state.next >= state.limit {
            return None;
        }
        next_batch(index, state);
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
    let Some(metric) = metric_of_strategy(strategy) else {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("strategy {strategy} is no skeys distance"),
            None,
        );
    };
    let probes = breadth(query.probes, crate::guc::KEY_PROBES.get(), 1, "probes");
    let max = breadth(
        query.max_probes,
        crate::guc::KEY_MAX_PROBES.get(),
        0,
        "max_probes",
    );
    let key = Key::from_datum(query.key).to_vec();
    start_key(index, state, metric, key, probes, max);
}

/// Sets up `state` to scan `index` by `metric` for `key`, `probes` lists a batch, up to `max`
/// lists (0: all).
unsafe fn start_key(
    index: pg_sys::Relation,
    state: &mut ScanState,
    metric: Metric,
    key: Vec<f16>,
    probes: usize,
    max: usize,
) {
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    if metric != meta.metric {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("this skeys index orders by {} distance", meta.metric.name()),
            None,
        );
    }
    if key.len() != meta.dim as usize {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("a {}-d query for a {}-d index", key.len(), meta.dim),
            None,
        );
    }
    let key = WideQuery::new(&key);
    let centroids = centroids(&store, index, &meta);
    state.order = centroids.probe_order(&key);
    // A scan that reads every list at once is an exact search: every entry's distance is
    // computed, not bounded from its code first (a code's bound fails for about one entry in
    // 700, which then comes back behind farther rows).
    state.coded = if probes >= state.order.len() {
        None
    } else {
        centroids.coded_query(&key)
    };
    state.meta = Some(meta);
    state.store = Some(store);
    state.limit = if max == 0 {
        state.order.len()
    } else {
        max.min(state.order.len())
    };
    state.probes = probes;
    state.query = key;
}

unsafe fn next_batch(index: pg_sys::Relation, state: &mut ScanState) {
    let (Some(meta), Some(store)) = (state.meta, &state.store) else {
        return;
    };
    let centroids = centroids(store, index, &meta);
    let end = (state.next + state.probes).min(state.limit);
    let mut batch = Batch::default();
    for &list in state.order.lists(state.next, end) {
        scan_list(
            store,
            &meta,
            &centroids,
            list,
            &state.query,
            state.coded.as_ref(),
            &mut batch,
        )
        .or_raise(index);
        pg_sys::check_for_interrupts!();
    }
    state.next = end;
    state.batch = batch;
}
