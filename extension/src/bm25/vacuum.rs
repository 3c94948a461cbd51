//! VACUUM: tombstones for dead heap tuples (ambulkdelete), then the append area is merged and
//! segments with tombstones are rewritten so corpus statistics are exact again
//! (amvacuumcleanup); freed pages go to the free space map.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::bm25index::maintenance::{bulk_delete, vacuum_cleanup};

use super::{checked_meta, IndexLocks, MAINTENANCE_LOCK};
use crate::am::{stats_or_new, HeapIsDead};
use crate::storage::{BufferStore, Mode, OrRaise};

crate::am::ambulkdelete!(mark_dead);

unsafe fn mark_dead(index: pg_sys::Relation, is_dead: &mut HeapIsDead) -> (u64, u64) {
    let store = BufferStore::new(index, Mode::Logged);
    checked_meta(&store, index);
    let locks = IndexLocks(index);
    locks.lock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
    let counts = bulk_delete(&store, &mut |tid| is_dead.ask(tid)).or_raise(index);
    locks.unlock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
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
    let stats = stats_or_new(stats);
    let store = BufferStore::new(index, Mode::Logged);
    checked_meta(&store, index);
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
