//! Glue both index access methods (`bm25`, `skeys`) share: opening an index by OID with its
//! privilege check, the handler's common fields, scan set-up and checks, VACUUM statistics, the
//! cost of a path the index cannot serve, build-target checks, and TIDs.

use pgrx::prelude::*;
use pgrx::{pg_sys, PgMemoryContexts, PgSqlErrorCode};

use pg_skills_kernels::layout::MetaError;
use pg_skills_kernels::layout::Tid;

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
/// A TID from a damaged page can name a heap block past the table's end (or offset 0), which
/// the executor's heap fetch would report as an internal error about a missing file segment;
/// it is index damage, so it is reported as such (XX002, with the REINDEX hint). Both access
/// methods hand out TIDs only here. The table's size is asked for only past the largest block
/// seen in this backend for that table (a stale, larger count after a truncation only skips the
/// check; it never refuses a TID the table has).
///
/// SAFETY: `scan` is a live scan descriptor.
pub unsafe fn return_tid(scan: pg_sys::IndexScanDesc, block: u32, offset: u16) {
    let heap = (*scan).heapRelation;
    if !heap.is_null() && (offset == 0 || !heap_has_block(heap, block)) {
        crate::storage::index_corrupted(
            (*scan).indexRelation,
            &pg_skills_kernels::page::Corrupt::new(format!(
                "an entry points at heap block {block}, offset {offset}, which table \"{}\" does not have",
                relation_name(heap)
            )),
        );
    }
    pgrx::itemptr::item_pointer_set_all(&mut (*scan).xs_heaptid, block, offset);
    (*scan).xs_recheck = false;
    (*scan).xs_recheckorderby = false;
}

thread_local! {
    /// (table OID, its block count when last asked): spares a size lookup per returned row.
    static HEAP_BLOCKS: std::cell::Cell<(pg_sys::Oid, u32)> =
        const { std::cell::Cell::new((pg_sys::InvalidOid, 0)) };
}

/// SAFETY: `heap` is an open relation.
unsafe fn heap_has_block(heap: pg_sys::Relation, block: u32) -> bool {
    let oid = (*heap).rd_id;
    let (known_oid, known) = HEAP_BLOCKS.get();
    if known_oid == oid && block < known {
        return true;
    }
    let nblocks = pg_sys::RelationGetNumberOfBlocksInFork(heap, pg_sys::ForkNumber::MAIN_FORKNUM);
    HEAP_BLOCKS.set((oid, nblocks));
    block < nblocks
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

/// ambuild's start: the index's pages for writing without WAL (logged whole at the end), after
/// checking its preconditions (an empty relation, one indexed column: `column_hint` says which).
///
/// SAFETY: the arguments are ambuild's.
pub unsafe fn begin_build(
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    am: &str,
    column_hint: &str,
) -> crate::storage::BufferStore {
    let store = crate::storage::BufferStore::new(index, crate::storage::Mode::Build);
    if store.num_blocks() != 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("index \"{}\" already contains data", relation_name(index)),
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
    store
}

/// A metapage as read, or an ERROR naming REINDEX when the index has another on-disk format.
pub fn usable_meta<M>(read: Result<M, MetaError>, index: pg_sys::Relation) -> M {
    match read {
        Ok(meta) => meta,
        Err(e) => raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("index \"{}\": {e}", relation_name(index)),
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

/// A relation's name, for messages.
pub fn relation_name(rel: pg_sys::Relation) -> String {
    unsafe { pgrx::name_data_to_str(&(*(*rel).rd_rel).relname).to_string() }
}

/// The heap TID an index entry points at, as the kernels store it.
pub fn tid_of(ptr: &pg_sys::ItemPointerData) -> Tid {
    let (block, offset) = pgrx::itemptr::item_pointer_get_both(*ptr);
    Tid { block, offset }
}

/// Whether `index` is an index of access method `am`.
pub fn is_index_of(index: pg_sys::Relation, am: &str) -> bool {
    unsafe {
        let name = pg_sys::get_am_name((*(*index).rd_rel).relam);
        !name.is_null() && std::ffi::CStr::from_ptr(name).to_bytes() == am.as_bytes()
    }
}

/// The valid and ready indexes of `table` built with access method `am`, in OID order (as
/// `skills.bm25_index()` lists them). Each index is opened for a moment with AccessShareLock,
/// as planning a query on the table does.
pub fn valid_indexes_of(table: pg_sys::Oid, am: &str) -> Vec<pg_sys::Oid> {
    let mut found = Vec::new();
    // SAFETY: the table and each index are opened with AccessShareLock and closed before the
    // next is read; the index list is a palloc'd copy the relation cache gives the caller, read
    // with the list accessors for its length, and the pointers read are the open relations'.
    unsafe {
        let rel = pg_sys::table_open(table, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let list = pg_sys::RelationGetIndexList(rel);
        let n = if list.is_null() { 0 } else { (*list).length };
        for i in 0..n {
            let oid = pg_sys::list_nth_oid(list, i);
            let index = pg_sys::index_open(oid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            let form = (*index).rd_index;
            if is_index_of(index, am) && (*form).indisvalid && (*form).indisready {
                found.push(oid);
            }
            pg_sys::index_close(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        }
        pg_sys::table_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    }
    found.sort_by_key(|o| o.to_u32());
    found
}

/// What a function given an index by name or OID does with it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum IndexUse {
    /// Reads what it holds (statistics, recall, a bm25query naming its index): SELECT on the
    /// indexed table, AccessShareLock.
    Read,
    /// Writes it as an insert would (merging a bm25 append area): INSERT on the indexed table,
    /// RowExclusiveLock.
    Write,
}

impl IndexUse {
    pub fn lock(self) -> pg_sys::LOCKMODE {
        match self {
            IndexUse::Read => pg_sys::AccessShareLock as pg_sys::LOCKMODE,
            IndexUse::Write => pg_sys::RowExclusiveLock as pg_sys::LOCKMODE,
        }
    }
}

/// Opens `oid` (AccessShareLock) as an index of access method `am`, or raises a clear ERROR
/// with `hint`. Close it with `relation_close(rel, AccessShareLock)`.
///
/// Functions given an index by name or OID (statistics, recall, a bm25query naming its index)
/// read what the index holds, so the caller must be allowed to read the indexed table.
pub fn open_index_of(oid: pg_sys::Oid, am: &str, hint: &str) -> pg_sys::Relation {
    open_index_for(oid, am, hint, IndexUse::Read)
}

/// [`open_index_of`] for a use: the privilege it needs is checked before the lock it takes
/// (`use_.lock()`, to pass to `relation_close`).
pub fn open_index_for(oid: pg_sys::Oid, am: &str, hint: &str, use_: IndexUse) -> pg_sys::Relation {
    let lock = use_.lock();
    require_on_indexed_table(oid, use_);
    unsafe {
        let rel = pg_sys::try_relation_open(oid, lock);
        if rel.is_null() {
            raise(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("relation {} does not exist", oid.to_u32()),
                Some(hint),
            );
        }
        let is_index = (*(*rel).rd_rel).relkind == pg_sys::RELKIND_INDEX as std::ffi::c_char;
        if !is_index || !is_index_of(rel, am) {
            let name = relation_name(rel);
            pg_sys::relation_close(rel, lock);
            raise(
                PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a {am} index"),
                Some(hint),
            );
        }
        rel
    }
}

/// ERROR 42501 unless the current user may SELECT from (to read) or INSERT into (to write) the
/// table `index` indexes (checked before any lock is taken; an OID that is no index is left to
/// the caller's checks).
fn require_on_indexed_table(index: pg_sys::Oid, use_: IndexUse) {
    let (privilege, hint) = match use_ {
        IndexUse::Read => (
            pg_sys::ACL_SELECT,
            "Reading an index's contents needs SELECT on its table (for pg_skills' own tables: GRANT skills_reader TO the role).",
        ),
        IndexUse::Write => (
            pg_sys::ACL_INSERT,
            "Writing an index needs INSERT on its table (for pg_skills' own tables: GRANT skills_loader TO the role).",
        ),
    };
    // SAFETY: syscache lookups on the backend's thread; missing_ok, so no ERROR of their own.
    unsafe {
        let table = pg_sys::IndexGetRelation(index, true);
        if table == pg_sys::InvalidOid {
            return;
        }
        let allowed =
            pg_sys::pg_class_aclcheck(table, pg_sys::GetUserId(), privilege as pg_sys::AclMode);
        if allowed != pg_sys::AclResult::ACLCHECK_OK {
            let name = pg_sys::get_rel_name(table);
            let name = if name.is_null() {
                table.to_u32().to_string()
            } else {
                std::ffi::CStr::from_ptr(name)
                    .to_string_lossy()
                    .into_owned()
            };
            raise(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied for table {name}"),
                Some(hint),
            );
        }
    }
}

/// The validator of both access methods' operator classes: the SQL script creates them whole
/// and nothing else may use these access methods' handlers, so there is nothing to check.
#[pg_guard]
pub unsafe extern "C-unwind" fn amvalidate(_opclassoid: pg_sys::Oid) -> bool {
    true
}

/// Fills an [`ordering_am`]'s callbacks from the calling module's phase modules, which both
/// access methods name alike: `build`, `insert`, `vacuum`, `cost`, `options`, `scan`.
macro_rules! phase_callbacks {
    ($am:ident) => {{
        $am.ambuild = Some(build::ambuild);
        $am.ambuildempty = Some(build::ambuildempty);
        $am.ambuildphasename = Some(build::ambuildphasename);
        $am.aminsert = Some(insert::aminsert);
        $am.ambulkdelete = Some(vacuum::ambulkdelete);
        $am.amvacuumcleanup = Some(vacuum::amvacuumcleanup);
        $am.amcostestimate = Some(cost::amcostestimate);
        $am.amoptions = Some(options::amoptions);
        $am.amvalidate = Some(crate::am::amvalidate);
        $am.ambeginscan = Some(scan::ambeginscan);
        $am.amrescan = Some(scan::amrescan);
        $am.amgettuple = Some(scan::amgettuple);
        $am.amendscan = Some(scan::amendscan);
    }};
}
pub(crate) use phase_callbacks;

/// What differs between the two access methods' scans; [`ordered_scan_callbacks`] makes the
/// Postgres callbacks around it.
pub trait OrderedScan: Default {
    /// The access method's name, for messages.
    const AM: &'static str;
    /// The ERROR text for a scan without an ORDER BY operator.
    const USAGE: &'static str;
    /// Sets up the scan for the ORDER BY argument (None: `ORDER BY col <op> NULL`).
    ///
    /// SAFETY: `index` is the scan's open index; `key` is the executor's scan key.
    unsafe fn start(&mut self, index: pg_sys::Relation, key: Option<&pg_sys::ScanKeyData>);
    /// The next heap TID in order, None when the scan is done.
    ///
    /// SAFETY: `index` is the scan's open index.
    unsafe fn next(&mut self, index: pg_sys::Relation) -> Option<Tid>;
}

/// A scan's state as `opaque` holds it: whether amrescan ran, and the access method's part.
#[derive(Default)]
pub struct ScanSlot<T> {
    started: bool,
    scan: T,
}

/// amrescan for an [`OrderedScan`].
///
/// SAFETY: the arguments are amrescan's, for a scan begun by [`begin_scan`] with `ScanSlot<T>`.
pub unsafe fn rescan<T: OrderedScan>(
    scan: pg_sys::IndexScanDesc,
    orderbys: pg_sys::ScanKey,
    norderbys: std::ffi::c_int,
) {
    let slot = &mut *((*scan).opaque as *mut ScanSlot<T>);
    slot.started = false;
    slot.scan = T::default();
    let key = order_by_key(orderbys, norderbys, T::USAGE);
    count_index_scan((*scan).indexRelation);
    slot.scan.start((*scan).indexRelation, key);
    slot.started = true;
}

/// Counts one scan of `index` in the statistics (`pg_stat_user_indexes.idx_scan`), as
/// PostgreSQL's own access methods do when a scan starts (the C macro pgstat_count_index_scan).
///
/// SAFETY: `index` is an open relation.
pub unsafe fn count_index_scan(index: pg_sys::Relation) {
    if (*index).pgstat_info.is_null() {
        if !(*index).pgstat_enabled {
            return;
        }
        pg_sys::pgstat_assoc_relation(index);
    }
    if let Some(info) = (*index).pgstat_info.as_mut() {
        info.t_counts.t_numscans += 1;
    }
}

/// Counts `n` index entries returned (`pg_stat_user_indexes.idx_tup_read`).
///
/// SAFETY: `index` is an open relation.
pub unsafe fn count_index_tuples(index: pg_sys::Relation, n: i64) {
    if let Some(info) = (*index).pgstat_info.as_mut() {
        info.t_counts.t_tuples_returned += n;
    }
}

/// amgettuple for an [`OrderedScan`].
///
/// SAFETY: `scan` was begun by [`begin_scan`] with `ScanSlot<T>`.
pub unsafe fn get_tuple<T: OrderedScan>(scan: pg_sys::IndexScanDesc) -> bool {
    require_mvcc(scan, T::AM);
    let slot = &mut *((*scan).opaque as *mut ScanSlot<T>);
    if !slot.started {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("{} index scan used before amrescan", T::AM),
            None,
        );
    }
    match slot.scan.next((*scan).indexRelation) {
        Some(tid) => {
            count_index_tuples((*scan).indexRelation, 1);
            return_tid(scan, tid.block, tid.offset);
            true
        }
        None => false,
    }
}

/// The four scan callbacks of an access method whose scan state is `$state: OrderedScan`.
macro_rules! ordered_scan_callbacks {
    ($state:ty) => {
        #[pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn ambeginscan(
            index: pgrx::pg_sys::Relation,
            nkeys: std::ffi::c_int,
            norderbys: std::ffi::c_int,
        ) -> pgrx::pg_sys::IndexScanDesc {
            crate::am::begin_scan::<crate::am::ScanSlot<$state>>(index, nkeys, norderbys)
        }

        #[pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn amrescan(
            scan: pgrx::pg_sys::IndexScanDesc,
            _keys: pgrx::pg_sys::ScanKey,
            _nkeys: std::ffi::c_int,
            orderbys: pgrx::pg_sys::ScanKey,
            norderbys: std::ffi::c_int,
        ) {
            crate::am::rescan::<$state>(scan, orderbys, norderbys)
        }

        #[pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn amgettuple(
            scan: pgrx::pg_sys::IndexScanDesc,
            _direction: pgrx::pg_sys::ScanDirection::Type,
        ) -> bool {
            crate::am::get_tuple::<$state>(scan)
        }

        #[pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn amendscan(_scan: pgrx::pg_sys::IndexScanDesc) {
            // The state lives in the scan's memory context and is dropped with it.
        }
    };
}
pub(crate) use ordered_scan_callbacks;

/// `aminsert` that hands each non-NULL value to `$insert(index, datum, tid)`. Neither access
/// method checks uniqueness, so the result is always false.
macro_rules! aminsert {
    ($insert:path) => {
        #[pgrx::pg_guard]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn aminsert(
            index: pgrx::pg_sys::Relation,
            values: *mut pgrx::pg_sys::Datum,
            isnull: *mut bool,
            heap_tid: pgrx::pg_sys::ItemPointer,
            _heap: pgrx::pg_sys::Relation,
            _check_unique: pgrx::pg_sys::IndexUniqueCheck::Type,
            _index_unchanged: bool,
            _index_info: *mut pgrx::pg_sys::IndexInfo,
        ) -> bool {
            if !*isnull {
                $insert(index, *values, crate::am::tid_of(&*heap_tid));
            }
            false
        }
    };
}
pub(crate) use aminsert;

/// A path's cost as an access method's model estimates it: all of it before the first row
/// (the index computes its top-k, or its first lists, before returning anything), and the index
/// pages it reads.
pub struct PathCost {
    pub cost: pg_sys::Cost,
    pub pages: f64,
}

/// `amcostestimate` from `$model(index_pages, index_tuples) -> PathCost`, for paths the index
/// can serve (ORDER BY its operator); others get [`unserved_path`]'s prohibitive cost.
macro_rules! amcostestimate {
    ($model:path) => {
        #[pgrx::pg_guard]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C-unwind" fn amcostestimate(
            _root: *mut pgrx::pg_sys::PlannerInfo,
            path: *mut pgrx::pg_sys::IndexPath,
            _loop_count: f64,
            startup: *mut pgrx::pg_sys::Cost,
            total: *mut pgrx::pg_sys::Cost,
            selectivity: *mut pgrx::pg_sys::Selectivity,
            correlation: *mut f64,
            pages: *mut f64,
        ) {
            if crate::am::unserved_path(path, startup, total, selectivity, correlation, pages) {
                return;
            }
            let info = (*path).indexinfo;
            let estimate: crate::am::PathCost =
                $model(path, (*info).pages as f64, (*info).tuples.max(1.0));
            *startup = estimate.cost;
            *total = estimate.cost;
            *pages = estimate.pages;
        }
    };
}
pub(crate) use amcostestimate;

/// `ambulkdelete` over `$delete(index, is_dead) -> (removed, remaining)`, where `is_dead` asks
/// VACUUM whether a heap TID is dead (and sleeps as vacuum_cost_delay says every 256 asks).
macro_rules! ambulkdelete {
    ($delete:path) => {
        #[pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn ambulkdelete(
            info: *mut pgrx::pg_sys::IndexVacuumInfo,
            stats: *mut pgrx::pg_sys::IndexBulkDeleteResult,
            callback: pgrx::pg_sys::IndexBulkDeleteCallback,
            callback_state: *mut std::ffi::c_void,
        ) -> *mut pgrx::pg_sys::IndexBulkDeleteResult {
            let stats = crate::am::stats_or_new(stats);
            let mut is_dead = crate::am::HeapIsDead::new(callback, callback_state);
            let (removed, remaining): (u64, u64) = $delete((*info).index, &mut is_dead);
            (*stats).tuples_removed += removed as f64;
            (*stats).num_index_tuples = remaining as f64;
            stats
        }
    };
}
pub(crate) use ambulkdelete;

/// VACUUM's callback that says whether a heap TID is dead.
pub struct HeapIsDead {
    callback: unsafe extern "C-unwind" fn(pg_sys::ItemPointer, *mut std::ffi::c_void) -> bool,
    state: *mut std::ffi::c_void,
    calls: u64,
}

impl HeapIsDead {
    /// SAFETY: `callback` and `state` are what VACUUM passed to ambulkdelete.
    pub unsafe fn new(
        callback: pg_sys::IndexBulkDeleteCallback,
        state: *mut std::ffi::c_void,
    ) -> Self {
        HeapIsDead {
            callback: callback.expect("VACUUM passes a callback"),
            state,
            calls: 0,
        }
    }

    pub fn ask(&mut self, tid: Tid) -> bool {
        self.calls += 1;
        // SAFETY: VACUUM's own callback and state, called on the backend's thread during
        // ambulkdelete; vacuum_delay_point only sleeps or checks for interrupts.
        unsafe {
            if self.calls % 256 == 0 {
                pg_sys::vacuum_delay_point();
            }
            let mut ptr = pg_sys::ItemPointerData::default();
            pgrx::itemptr::item_pointer_set_all(&mut ptr, tid.block, tid.offset);
            (self.callback)(&mut ptr, self.state)
        }
    }
}

/// A heap-scan callback for CREATE INDEX that hands each non-NULL value to
/// `$state_type::$method(&mut self, tid, datum)`.
macro_rules! build_callback {
    ($name:ident, $state_type:ty, $method:ident) => {
        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn $name(
            _index: pgrx::pg_sys::Relation,
            tid: pgrx::pg_sys::ItemPointer,
            values: *mut pgrx::pg_sys::Datum,
            isnull: *mut bool,
            _tuple_is_alive: bool,
            state: *mut std::ffi::c_void,
        ) {
            if *isnull {
                return;
            }
            let state = &mut *(state as *mut $state_type);
            state.$method(crate::am::tid_of(&*tid), *values);
        }
    };
}
pub(crate) use build_callback;

/// One pass over the table for CREATE INDEX, every live and recently dead row to `callback`;
/// returns the number of heap tuples.
///
/// SAFETY: the relations and info are ambuild's; `state` is what `callback` expects.
pub unsafe fn index_build_scan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    callback: pg_sys::IndexBuildCallback,
    state: *mut std::ffi::c_void,
) -> f64 {
    pg_sys::table_index_build_scan(
        heap,
        index,
        index_info,
        true,
        true,
        callback,
        state,
        std::ptr::null_mut(),
    )
}

/// ambuild's result.
pub fn build_result(heap_tuples: f64, index_tuples: f64) -> *mut pg_sys::IndexBuildResult {
    let mut result = unsafe { PgBox::<pg_sys::IndexBuildResult>::alloc0() };
    result.heap_tuples = heap_tuples;
    result.index_tuples = index_tuples;
    result.into_pg()
}

/// One entry of a reloptions parse table: option `name` of `kind` at `offset` in the struct.
pub fn reloption(
    name: &'static std::ffi::CStr,
    kind: pg_sys::relopt_type::Type,
    offset: usize,
) -> pg_sys::relopt_parse_elt {
    pg_sys::relopt_parse_elt {
        optname: name.as_ptr(),
        opttype: kind,
        offset: offset as std::ffi::c_int,
    }
}

/// amoptions: parses `reloptions` of reloption kind `kind` into a palloc'd `R` (a `#[repr(C)]`
/// struct that starts with the varlena header) by `table`.
///
/// SAFETY: the arguments are amoptions'; `table`'s offsets and types describe `R`.
pub unsafe fn parse_reloptions<R>(
    reloptions: pg_sys::Datum,
    validate: bool,
    kind: pg_sys::relopt_kind::Type,
    table: &[pg_sys::relopt_parse_elt],
) -> *mut pg_sys::bytea {
    pg_sys::build_reloptions(
        reloptions,
        validate,
        kind,
        std::mem::size_of::<R>(),
        table.as_ptr(),
        table.len() as std::ffi::c_int,
    ) as *mut pg_sys::bytea
}

/// The options struct amoptions built for `index`, None when it was created without options.
///
/// SAFETY: `R` is the struct this access method's amoptions builds.
pub unsafe fn relation_options<'a, R>(index: pg_sys::Relation) -> Option<&'a R> {
    ((*index).rd_options as *const R).as_ref()
}
