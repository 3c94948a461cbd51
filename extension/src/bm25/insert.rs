//! INSERT and UPDATE: the new row goes to the append area; the insert that finds the area past
//! its limit merges it into a segment, unless another merge or a VACUUM is running.
//!
//! An insert follows append pages that a merge frees once it has published its segment (the
//! metapage it read may name a chain that is gone by the time it locks the page), so it holds
//! the readers lock like a scan does; it lets go before merging, which takes that lock
//! exclusively.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::bm25index::append;
use pg_skills_kernels::bm25index::format::{Meta, META_BLOCK};
use pg_skills_kernels::bm25index::maintenance::flush_append;
use pg_skills_kernels::page::PageRead;

use super::{analyze_datum, reading, tid_of, IndexLocks, MAINTENANCE_LOCK};
use crate::storage::{BufferStore, Mode, OrRaise};

#[pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn aminsert(
    index: pg_sys::Relation,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    heap_tid: pg_sys::ItemPointer,
    _heap: pg_sys::Relation,
    _check_unique: pg_sys::IndexUniqueCheck::Type,
    _index_unchanged: bool,
    _index_info: *mut pg_sys::IndexInfo,
) -> bool {
    if *isnull {
        return false;
    }
    let store = BufferStore::new(index, Mode::Logged);
    let meta = Meta::read(&store.read(META_BLOCK)).or_raise(index);
    let doc = analyze_datum(&meta.options, *values);
    let tid = tid_of(&*heap_tid);
    if reading(index, &store, || append::insert(&store, tid, &doc)).or_raise(index) {
        let locks = IndexLocks(index);
        // Someone else merging (or VACUUM) will take care of it: never wait on the insert path.
        if locks.try_lock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock) {
            flush_append(&store, &locks).or_raise(index);
            locks.unlock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
        }
    }
    false
}
