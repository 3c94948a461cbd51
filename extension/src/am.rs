//! Glue both index access methods share: the handler's common fields, scan set-up and checks,
//! VACUUM statistics, the cost of a path the index cannot serve, and build-target checks.

use pgrx::prelude::*;
use pgrx::{pg_sys, PgMemoryContexts, PgSqlErrorCode};

use pg_skills_kernels::layout::MetaError;

use crate::errors::raise;

/// An IndexAmRoutine for an ordering-only index (answers `ORDER BY col <op> value`, no WHERE
/// clauses, one column, uses maintenance_work_mem); `fill` sets the callbacks.
pub fn ordering_am(
    strategies: u16,
    fill: impl FnOnce(&mut pg_sys::IndexAmRoutine),
) -> PgBox<pg_sys::IndexAmRoutine> {
    let mut am =
        unsafe { PgBox::<pg_sys::IndexAmRoutine>::alloc_node(pg_sys::NodeTag::T_IndexAmRoutine) };
    am.amstrategies = strategies;
    am.amsupport = 0;
    am.amcanorderbyop = true;
    am.amoptionalkey = true;
    am.amusemaintenanceworkmem = true;
    am.amkeytype = pg_sys::InvalidOid;
    fill(&mut am);
    am.into_pg_boxed()
}

/// ambeginscan: a scan descriptor whose `opaque` is a `T::default()` living (and dropped) in
/// the scan's memory context.
///
/// SAFETY: called as ambeginscan with the executor's arguments.
pub unsafe fn begin_scan<T: Default>(
    index: pg_sys::Relation,
    nkeys: std::ffi::c_int,
    norderbys: std::ffi::c_int,
) -> pg_sys::IndexScanDesc {
    let scan = pg_sys::RelationGetIndexScan(index, nkeys, norderbys);
    let state = PgMemoryContexts::CurrentMemoryContext.leak_and_drop_on_delete(T::default());
    (*scan).opaque = state as *mut std::ffi::c_void;
    scan
}

/// ERROR unless the scan runs under an MVCC snapshot (the index keeps entries of dead rows
/// until VACUUM; only MVCC visibility checks at the heap hide them correctly).
///
/// SAFETY: `scan` is a live scan descriptor.
pub unsafe fn require_mvcc(scan: pg_sys::IndexScanDesc, am: &str) {
    let snapshot = (*scan).xs_snapshot;
    let mvcc = !snapshot.is_null()
        && matches!(
            (*snapshot).snapshot_type,
            pg_sys::SnapshotType::SNAPSHOT_MVCC | pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC
        );
    if !mvcc {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("a {am} index scan requires an MVCC snapshot"),
            None,
        );
    }
}

/// Hands the executor the next heap TID (no recheck: the index computed the exact value).
///
/// SAFETY: `scan` is a live scan descriptor.
pub unsafe fn return_tid(scan: pg_sys::IndexScanDesc, block: u32, offset: u16) {
    pgrx::itemptr::item_pointer_set_all(&mut (*scan).xs_heaptid, block, offset);
    (*scan).xs_recheck = false;
    (*scan).xs_recheckorderby = false;
}

/// VACUUM's statistics struct: the one passed in, or a new one.
///
/// SAFETY: `stats` is NULL or VACUUM's statistics for this index.
pub unsafe fn stats_or_new(
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    if stats.is_null() {
        PgBox::<pg_sys::IndexBulkDeleteResult>::alloc0().into_pg()
    } else {
        stats
    }
}

/// For amcostestimate: a path without ORDER BY operators is one these indexes cannot serve;
/// it gets a prohibitive cost and `true` comes back.
///
/// SAFETY: the arguments are amcostestimate's.
pub unsafe fn unserved_path(
    path: *mut pg_sys::IndexPath,
    startup: *mut pg_sys::Cost,
    total: *mut pg_sys::Cost,
    selectivity: *mut pg_sys::Selectivity,
    correlation: *mut f64,
    pages: *mut f64,
) -> bool {
    *selectivity = 1.0;
    *correlation = 0.0;
    if !(*path).indexorderbys.is_null() {
        return false;
    }
    *startup = 1.0e10;
    *total = 1.0e10;
    *pages = 0.0;
    true
}

/// ambuild's preconditions: an empty relation and one indexed column.
///
/// SAFETY: the arguments are ambuild's.
pub unsafe fn check_build(
    blocks: pg_sys::BlockNumber,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    am: &str,
    column_hint: &str,
) {
    if blocks != 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!(
                "index \"{}\" already contains data",
                crate::bm25::relation_name(index)
            ),
            None,
        );
    }
    if (*index_info).ii_NumIndexAttrs != 1 {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("a {am} index has exactly one column"),
            Some(column_hint),
        );
    }
}

/// A metapage as read, or an ERROR naming REINDEX when the index has another on-disk format.
pub fn usable_meta<M>(read: Result<M, MetaError>, index: pg_sys::Relation) -> M {
    match read {
        Ok(meta) => meta,
        Err(e) => raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("index \"{}\": {e}", crate::bm25::relation_name(index)),
            Some("Run REINDEX INDEX on it: the index is rebuilt in the current format."),
        ),
    }
}

/// amrescan's ORDER BY argument: an ERROR when the scan has none (`usage` says how the index is
/// used), None for `ORDER BY col <op> NULL`.
///
/// SAFETY: the arguments are amrescan's.
pub unsafe fn order_by_key<'a>(
    orderbys: pg_sys::ScanKey,
    norderbys: std::ffi::c_int,
    usage: &str,
) -> Option<&'a pg_sys::ScanKeyData> {
    if norderbys < 1 || orderbys.is_null() {
        raise(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, usage, None);
    }
    let key = &*orderbys;
    (key.sk_flags & pg_sys::SK_ISNULL as i32 == 0).then_some(key)
}

pub fn report_progress(param: u32, value: i64) {
    unsafe { pg_sys::pgstat_progress_update_param(param as i32, value) };
}
