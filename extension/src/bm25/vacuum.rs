//! VACUUM: tombstones for dead heap tuples (ambulkdelete), then the append area is merged and
//! segments with tombstones are rewritten so corpus statistics are exact again
//! (amvacuumcleanup); freed pages go to the free space map.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::bm25index::format::{Meta, META_BLOCK};
use pg_skills_kernels::bm25index::maintenance::{bulk_delete, vacuum_cleanup};
use pg_skills_kernels::page::PageRead;

use super::{IndexLocks, MAINTENANCE_LOCK};
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
    Meta::read(&store.read(META_BLOCK)).or_raise(index);
    let callback = callback.expect("VACUUM passes a callback");
    let locks = IndexLocks(index);
    locks.lock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
    let mut calls = 0u64;
    let counts = bulk_delete(&store, &mut |tid| {
        calls += 1;
        if calls % 256 == 0 {
            pg_sys::vacuum_delay_point();
        }
        let mut ptr = pg_sys::ItemPointerData::default();
        pgrx::itemptr::item_pointer_set_all(&mut ptr, tid.block, tid.offset);
        callback(&mut ptr, callback_state)
    })
    .or_raise(index);
    locks.unlock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
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
    let stats = stats_or_new(stats);
    let store = BufferStore::new(index, Mode::Logged);
    Meta::read(&store.read(META_BLOCK)).or_raise(index);
    let locks = IndexLocks(index);
    locks.lock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
    let live = vacuum_cleanup(&store, &locks).or_raise(index);
    locks.unlock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
    pg_sys::IndexFreeSpaceMapVacuum(index);
    (*stats).num_pages = store.num_blocks();
    (*stats).num_index_tuples = live as f64;
    (*stats).estimated_count = false;
    stats
}
