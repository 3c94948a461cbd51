//! INSERT and UPDATE: the new row goes to the append area; the insert that finds the area past
//! its limit merges it into a segment, unless another merge or a VACUUM is running.
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
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let doc = analyze_datum(&meta.options, value);
    if reading(index, &store, || append::insert(&store, tid, &doc)).or_raise(index) {
        let locks = IndexLocks(index);
        // Someone else merging (or VACUUM) will take care of it: never wait on the insert path.
        if locks.try_lock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock) {
            flush_append(&store, &locks).or_raise(index);
            locks.unlock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
        }
    }
}
