//! `skills.key_index_stats(index)` and `skills.key_recall(index, query, k)`.

use pgrx::prelude::*;
use pgrx::{pg_sys, FromDatum, IntoDatum};

use pg_skills_kernels::keyindex::format::FORMAT_VERSION;
use pg_skills_kernels::keyindex::lists::list_lengths;
use pg_skills_kernels::keyindex::search::search;

use super::{centroids, checked_meta, open_key_index};
use crate::fmgr::{arg, v1_function};
use crate::key::datatype::Key;
use crate::storage::{BufferStore, Mode, OrRaise};

fn with_index<T>(oid: pg_sys::Oid, f: impl FnOnce(pg_sys::Relation) -> T) -> T {
    let rel = open_key_index(oid);
    let out = f(rel);
    unsafe { pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
    out
}

#[allow(clippy::type_complexity)]
#[pg_extern(sql = false)]
fn key_index_stats(
    index: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(format_version, i32),
        name!(metric, String),
        name!(dimensions, i32),
        name!(lists, i32),
        name!(trained_on, i64),
        name!(entries, i64),
        name!(list_pages, i64),
        name!(total_pages, i64),
        name!(empty_lists, i32),
        name!(smallest_list, i64),
        name!(largest_list, i64),
    ),
> {
    let row = with_index(index, |rel| unsafe {
        let store = BufferStore::new(rel, Mode::Logged);
        let meta = checked_meta(&store, rel);
        let lengths = list_lengths(&store, &meta).or_raise(rel);
        let entries: u64 = lengths.iter().map(|l| l.0).sum();
        let pages: u64 = lengths.iter().map(|l| l.1).sum();
        (
            FORMAT_VERSION as i32,
            meta.metric.name().to_string(),
            meta.dim as i32,
            meta.lists as i32,
            meta.trained_on as i64,
            entries as i64,
            pages as i64,
            store.num_blocks() as i64,
            lengths.iter().filter(|l| l.0 == 0).count() as i32,
            lengths.iter().map(|l| l.0).min().unwrap_or(0) as i64,
            lengths.iter().map(|l| l.0).max().unwrap_or(0) as i64,
        )
    });
    TableIterator::once(row)
}

/// Largest k for `skills.key_recall` (both searches keep k candidates in memory).
const MAX_RECALL_K: i32 = 10_000;

// Recall@k of the index for one query key at the current `pg_skills.key_probes`: the share of
// the exact k nearest entries (every list read) that probing finds. Entries of dead rows not
// yet vacuumed count on both sides, so this measures the index alone, as VectorChord's
// recall function does.
v1_function!(pg_finfo_pgs_key_recall, pgs_key_recall, |fcinfo| {
    let index = pg_sys::Oid::from_datum(arg(fcinfo, 0), false).expect("an oid");
    let k = i32::from_datum(arg(fcinfo, 2), false).expect("an int4");
    if !(1..=MAX_RECALL_K).contains(&k) {
        crate::errors::raise(
            pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("k must be between 1 and {MAX_RECALL_K}, got {k}"),
            Some("Recall is measured over the k nearest entries; 10 is the usual k."),
        );
    }
    let k = k as usize;
    let query = arg(fcinfo, 1);
    recall(index, query, k).into_datum().expect("a float8")
});

unsafe fn recall(index: pg_sys::Oid, query: pg_sys::Datum, k: usize) -> f64 {
    with_index(index, |rel| {
        let store = BufferStore::new(rel, Mode::Logged);
        let meta = checked_meta(&store, rel);
        let query = Key::from_datum(query).to_vec();
        let centroids = centroids(&store, rel, &meta);
        let probes = crate::guc::KEY_PROBES.get().max(1) as usize;
        let approx = search(&store, &meta, &centroids, &query, probes, k).or_raise(rel);
        let exact = search(&store, &meta, &centroids, &query, meta.lists as usize, k).or_raise(rel);
        if exact.is_empty() {
            return 1.0;
        }
        let truth: std::collections::HashSet<_> = exact.iter().map(|c| c.tid).collect();
        approx.iter().filter(|c| truth.contains(&c.tid)).count() as f64 / exact.len() as f64
    })
}
