//! VACUUM: dead entries leave their pages, pages with room are offered to inserts again.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::keyindex::bulk_delete;

use super::checked_meta;
use crate::am::{stats_or_new, HeapIsDead};
use crate::storage::{BufferStore, Mode, OrRaise};

crate::am::ambulkdelete!(remove_dead);

unsafe fn remove_dead(index: pg_sys::Relation, is_dead: &mut HeapIsDead) -> (u64, u64) {
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let counts = bulk_delete(
        &store,
        &meta,
        |tid| is_dead.ask(tid),
        || pg_sys::vacuum_delay_point(),
    )
    .or_raise(index);
    (counts.removed, counts.remaining)
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
