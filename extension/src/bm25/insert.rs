//! INSERT and UPDATE: the new row goes to the append area; the insert that finds the area past
//! its limit merges it into a segment, unless another merge or a VACUUM is running. A session
//! with `pg_skills.bm25_bulk_insert` on gathers its rows instead (`bulk.rs`).
//!
//! An insert follows append pages that a merge frees once it has published its segment (the
//! metapage it read may name a chain that is gone by the time it locks the page), so it holds
//! the readers lock like a scan does; it lets go before merging, which takes that lock
//! exclusively.

use pgrx::pg_sys;

use pg_skills_kernels::bm25index::append;
use pg_skills_kernels::bm25index::maintenance::flush_append;
use pg_skills_kernels::bm25index::Tid;

use super::{analyze_datum, checked_meta, reading, IndexLocks, MAINTENANCE_LOCK};
use crate::storage::{BufferStore, Mode, OrRaise};

crate::am::aminsert!(insert_document);

unsafe fn insert_document(index: pg_sys::Relation, value: pg_sys::Datum, tid: Tid) {
    if super::bulk::enabled() {
        return super::bulk::insert(index, value, tid);
    }
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let doc = analyze_datum(&meta.options, value);
    if reading(index, &store, || append::insert(&store, tid, &doc)).or_raise(index) {
        merge_unless_merging(index, &store);
    }
}

/// Merges the append area into a segment unless another merge or a VACUUM is running (which
/// then takes care of it: never wait on the insert path). False when it did not merge, or the
/// area was empty.
fn merge_unless_merging(index: pg_sys::Relation, store: &BufferStore) -> bool {
    let locks = IndexLocks(index);
    if !locks.try_lock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock) {
        return false;
    }
    let merged = flush_append(store, &locks).or_raise(index);
    locks.unlock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
    merged
}

/// Writes the documents this session's bulk inserts gathered for a bm25 index
/// (`pg_skills.bm25_bulk_insert`), then merges its append area into a segment now, as the
/// insert that finds the area full (or VACUUM) would, and merges segments until their sizes are
/// a binary counter again. Returns false when the area was empty or another merge or VACUUM is
/// running (which then merges it). Needs INSERT on the indexed table. `skills.apply_staging`
/// calls it when a load ends.
#[pgrx::pg_extern(volatile, parallel_unsafe)]
pub(crate) fn bm25_merge_append(index: pg_sys::Oid) -> bool {
    use crate::am::{open_index_for, IndexUse};
    // A write: not in a read-only transaction, and never during recovery (a WAL record there
    // would fail inside the critical section that writes it).
    // SAFETY: plain checks that raise an ERROR of their own.
    unsafe {
        pg_sys::PreventCommandIfReadOnly(c"skills.bm25_merge_append()".as_ptr());
        pg_sys::PreventCommandDuringRecovery(c"skills.bm25_merge_append()".as_ptr());
    }
    let rel = open_index_for(
        index,
        "bm25",
        "Name an index built USING bm25.",
        IndexUse::Write,
    );
    // SAFETY: `rel` is open and locked until the relation_close below; on an ERROR the
    // transaction's end closes it and releases the locks.
    unsafe {
        let store = BufferStore::new(rel, Mode::Logged);
        checked_meta(&store, rel);
        super::bulk::flush(rel);
        let merged = merge_unless_merging(rel, &store);
        pg_sys::relation_close(rel, IndexUse::Write.lock());
        merged
    }
}
