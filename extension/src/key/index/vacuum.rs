//! VACUUM: dead entries leave their pages, pages with room are offered to inserts again.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::keyindex::bulk_delete;

use super::checked_meta;
use crate::storage::{BufferStore, Mode, OrRaise};

use crate::am::stats_or_new;

#[pg_guard]
pub unsafe extern "C-unwind" fn ambulkdelete(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
    callback: pg_sys::IndexBulkDeleteCallback,
    callback_state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    let index = (*info).index;
    let stats = stats_or_new(stats);
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let callback = callback.expect("VACUUM passes a callback");
    let counts = bulk_delete(
        &store,
        &meta,
        |tid| {
            let mut ptr = pg_sys::ItemPointerData::default();
            pgrx::itemptr::item_pointer_set_all(&mut ptr, tid.block, tid.offset);
            callback(&mut ptr, callback_state)
        },
        || pg_sys::vacuum_delay_point(),
    )
    .or_raise(index);
    (*stats).tuples_removed += counts.removed as f64;
    (*stats).num_index_tuples = counts.remaining as f64;
    stats
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amvacuumcleanup(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    if (*info).analyze_only {
        return stats;
    }
    let index = (*info).index;
    let store = BufferStore::new(index, Mode::Logged);
    checked_meta(&store, index);
    if stats.is_null() {
        // No bulk delete ran (nothing dead): count what is there.
        let stats = stats_or_new(stats);
        (*stats).num_index_tuples = (*info).num_heap_tuples;
        (*stats).estimated_count = (*info).estimated_count;
        (*stats).num_pages = store.num_blocks();
        return stats;
    }
    (*stats).num_pages = store.num_blocks();
    stats
}
