//! Bulk inserts (`pg_skills.bm25_bulk_insert`): a session's new documents are gathered in
//! backend memory, and in a temporary file past maintenance_work_mem, as CREATE INDEX gathers
//! them, and written into the index as one segment when the session next needs the index whole.
//! Each document is then written to the index and to WAL once, instead of once into the append
//! area and again at every merge.
//!
//! Nobody else needs the gathered documents before this transaction commits: their rows are
//! invisible to other transactions until then. This session needs them
//! - before it reads the index (a scan, a search, statistics, the `<&>` operator's statistics,
//!   VACUUM, `skills.bm25_merge_append`): [`flush`] at each of those entry points;
//! - before a utility command (REINDEX, TRUNCATE, ALTER INDEX, CLUSTER... rebuild or move the
//!   index under it), except transaction control, SET and SHOW, and before a parallel plan
//!   starts (its workers read the index without this memory): [`flush_all`] from the utility
//!   and executor-start hooks;
//! - at commit and at PREPARE TRANSACTION: [`flush_all`] from the transaction callback.
//!
//! A top-level abort drops them. A subtransaction's abort marks the documents it added as
//! dead: their rows are dead, and VACUUM may already have reused those rows' TIDs by the time
//! they would be written, so they are left out then ([`State::dead`]).

use std::cell::RefCell;

use pgrx::pg_sys;

use pg_skills_kernels::bm25index::format::SegmentDesc;
use pg_skills_kernels::bm25index::maintenance::{add_merged_segment, add_segment, start_scratch};
use pg_skills_kernels::bm25index::segment::SegmentBuilder;
use pg_skills_kernels::bm25index::{IndexOptions, Tid};

use super::{analyze_datum, checked_meta, IndexLocks, MAINTENANCE_LOCK};
use crate::scratch::TempFileStore;
use crate::storage::{BufferStore, Mode, OrRaise};

/// One index's gathered documents: the builder's, after those of the segments it spilled.
struct Pending {
    index: pg_sys::Oid,
    options: IndexOptions,
    builder: SegmentBuilder,
    /// Segments written to `scratch` when the builder passed maintenance_work_mem, in order.
    spilled: Vec<SegmentDesc>,
    scratch: Option<TempFileStore>,
    /// The sequence number ([`State::next_seq`]) of each document, in order: spilled ones first.
    seqs: Vec<u64>,
}

#[derive(Default)]
struct State {
    pending: Vec<Pending>,
    /// Numbers every gathered document of this transaction, across indexes.
    next_seq: u64,
    /// Open subtransactions started while this transaction was tracked, innermost last, with
    /// the sequence number their first document would have had.
    subtransactions: Vec<(pg_sys::SubTransactionId, u64)>,
    /// Ranges of sequence numbers added by subtransactions that aborted.
    dead: Vec<std::ops::Range<u64>>,
    /// Set while gathered documents are being written (to the temporary file or the index):
    /// an ERROR there loses them, and a subtransaction that catches it must not let this
    /// transaction commit without them.
    writing: bool,
}

/// Refuses to go on after an ERROR lost gathered documents (see [`State::writing`]).
fn check_not_lost(state: &State) {
    if state.writing {
        crate::errors::raise(
            pgrx::PgSqlErrorCode::ERRCODE_IN_FAILED_SQL_TRANSACTION,
            "documents this transaction inserted into a bm25 index were lost by an earlier error",
            Some("Roll back the transaction and repeat it; pg_skills.bm25_bulk_insert = off avoids the gathering."),
        )
    }
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
    static CALLBACKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this session's inserts into bm25 indexes are gathered.
pub(super) fn enabled() -> bool {
    crate::guc::BM25_BULK_INSERT.get()
}

/// Gathers the document `value` of heap tuple `tid` for `index`.
///
/// SAFETY: `index` is an open bm25 index (aminsert's).
pub(super) unsafe fn insert(index: pg_sys::Relation, value: pg_sys::Datum, tid: Tid) {
    register_callbacks();
    let oid = (*index).rd_id;
    let known = STATE.with(|s| {
        s.borrow()
            .pending
            .iter()
            .find(|p| p.index == oid)
            .map(|p| p.options)
    });
    let options = known.unwrap_or_else(|| {
        let store = BufferStore::new(index, Mode::Logged);
        checked_meta(&store, index).options
    });
    let doc = analyze_datum(&options, value);
    let limit = (pg_sys::maintenance_work_mem as usize).saturating_mul(1024);
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        check_not_lost(&s);
        let seq = s.next_seq;
        s.next_seq += 1;
        let at = match s.pending.iter().position(|p| p.index == oid) {
            Some(at) => at,
            None => {
                s.pending.push(Pending {
                    index: oid,
                    options,
                    builder: SegmentBuilder::new(options.term_scoring()),
                    spilled: Vec::new(),
                    scratch: None,
                    seqs: Vec::new(),
                });
                s.pending.len() - 1
            }
        };
        let State {
            pending, writing, ..
        } = &mut *s;
        let p = &mut pending[at];
        p.builder.add(tid, &doc);
        p.seqs.push(seq);
        if p.builder.memory_bytes() > limit {
            *writing = true;
            p.spill();
            *writing = false;
        }
    });
}

impl Pending {
    /// Writes the builder as a segment of the temporary file.
    fn spill(&mut self) {
        let full = std::mem::replace(
            &mut self.builder,
            SegmentBuilder::new(self.options.term_scoring()),
        );
        let scratch = self.scratch.get_or_insert_with(|| {
            let scratch = TempFileStore::for_transaction(crate::storage::content_size());
            start_scratch(&scratch);
            scratch
        });
        self.spilled.push(full.write(scratch));
    }

    /// Writes the gathered documents into `index` as one segment, leaving out `dead` ones.
    ///
    /// SAFETY: `index` is this pending's index, open.
    unsafe fn write_into(mut self, index: pg_sys::Relation, dead: &[std::ops::Range<u64>]) {
        // `dead` is sorted and disjoint.
        let is_dead = |seq: u64| {
            let after = dead.partition_point(|r| r.end <= seq);
            dead.get(after).is_some_and(|r| r.contains(&seq))
        };
        let any_dead = self.seqs.iter().any(|&q| is_dead(q));
        let store = BufferStore::new(index, Mode::Logged);
        let locks = IndexLocks(index);
        // One structural change at a time: wait for a merge or VACUUM running.
        locks.lock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
        let written = if self.spilled.is_empty() && !any_dead {
            if self.builder.is_empty() {
                Ok(())
            } else {
                add_segment(&store, self.builder.write(&store), &locks)
            }
        } else {
            if !self.builder.is_empty() {
                self.spill();
            }
            let keep: Vec<bool> = self.seqs.iter().map(|&q| !is_dead(q)).collect();
            let scratch = self.scratch.as_ref().expect("made by the spill");
            add_merged_segment(&store, scratch, &self.spilled, Some(&keep), &locks)
        };
        locks.unlock(MAINTENANCE_LOCK, pg_sys::ExclusiveLock);
        written.or_raise(index);
    }
}

/// Writes what this session gathered for `index` into it, before the session reads it.
///
/// SAFETY: `index` is an open bm25 index.
pub(super) unsafe fn flush(index: pg_sys::Relation) {
    let oid = (*index).rd_id;
    let Some((pending, dead)) = take(|pending| pending.iter().position(|p| p.index == oid)) else {
        return;
    };
    pending.write_into(index, &dead);
    written();
}

/// Takes the pending documents `which` picks, with the dead ranges, and marks them as being
/// written ([`State::writing`]) until [`written`].
fn take(
    which: impl FnOnce(&[Pending]) -> Option<usize>,
) -> Option<(Pending, Vec<std::ops::Range<u64>>)> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        check_not_lost(&s);
        let at = which(&s.pending)?;
        s.writing = true;
        Some((s.pending.swap_remove(at), s.dead.clone()))
    })
}

fn written() {
    STATE.with(|s| s.borrow_mut().writing = false);
}

/// Writes everything this session gathered into its indexes. An index dropped meanwhile
/// takes its documents with it.
pub(crate) fn flush_all() {
    loop {
        let Some((pending, dead)) = take(|pending| pending.len().checked_sub(1)) else {
            return;
        };
        // SAFETY: the relation is opened with the lock inserts take (this transaction holds
        // it already) and closed below; a dropped index is not found.
        unsafe {
            let rel = pg_sys::try_relation_open(pending.index, pg_sys::RowExclusiveLock as i32);
            if rel.is_null() {
                pending.abandon();
            } else if !crate::am::is_index_of(rel, "bm25") {
                pg_sys::relation_close(rel, pg_sys::RowExclusiveLock as i32);
                pending.abandon();
            } else {
                pending.write_into(rel, &dead);
                pg_sys::relation_close(rel, pg_sys::RowExclusiveLock as i32);
            }
        }
        written();
    }
}

/// Whether this session holds gathered documents.
fn any_pending() -> bool {
    STATE.with(|s| !s.borrow().pending.is_empty())
}

static mut NEXT_UTILITY_HOOK: pg_sys::ProcessUtility_hook_type = None;
static mut NEXT_EXECUTOR_START_HOOK: pg_sys::ExecutorStart_hook_type = None;

/// Installs the utility and executor-start hooks (from `_PG_init`, once per backend), chained
/// in front of those installed before.
pub fn install_hooks() {
    // SAFETY: _PG_init runs once per backend, before any statement of this library.
    unsafe {
        NEXT_UTILITY_HOOK = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(before_utility);
        NEXT_EXECUTOR_START_HOOK = pg_sys::ExecutorStart_hook;
        pg_sys::ExecutorStart_hook = Some(before_executor_start);
    }
}

/// A utility command may rebuild, move or drop an index, or read it in ways this module does
/// not see: the gathered documents go in first. Transaction control (savepoints: psql's
/// ON_ERROR_ROLLBACK sets one per statement) and SET/SHOW leave them gathered.
#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn before_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    if any_pending() {
        let stmt = (*pstmt).utilityStmt;
        let keeps = !stmt.is_null()
            && matches!(
                (*stmt).type_,
                pg_sys::NodeTag::T_TransactionStmt
                    | pg_sys::NodeTag::T_VariableSetStmt
                    | pg_sys::NodeTag::T_VariableShowStmt
            );
        if !keeps {
            flush_all();
        }
    }
    // pg_sys's functions are Rust wrappers, not of the hook's C type: two calls.
    match NEXT_UTILITY_HOOK {
        Some(next) => next(
            pstmt,
            query,
            read_only_tree,
            context,
            params,
            query_env,
            dest,
            qc,
        ),
        None => pg_sys::standard_ProcessUtility(
            pstmt,
            query,
            read_only_tree,
            context,
            params,
            query_env,
            dest,
            qc,
        ),
    }
}

/// A parallel plan's workers read the index without this backend's memory: the gathered
/// documents go in before they start.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn before_executor_start(query: *mut pg_sys::QueryDesc, eflags: i32) {
    let parallel = !(*query).plannedstmt.is_null() && (*(*query).plannedstmt).parallelModeNeeded;
    if parallel && any_pending() {
        flush_all();
    }
    match NEXT_EXECUTOR_START_HOOK {
        Some(next) => next(query, eflags),
        None => pg_sys::standard_ExecutorStart(query, eflags),
    }
}

impl Pending {
    /// Drops the documents. The temporary file is left to the transaction's end, which closes
    /// it (this runs in abort processing, where closing could meet a half-done write).
    fn abandon(self) {
        if let Some(scratch) = self.scratch {
            scratch.abandon();
        }
    }
}

/// Drops what this session gathered for `index` (a rebuild of it indexes their rows itself).
pub(super) fn discard(index: pg_sys::Oid) {
    let taken = STATE.with(|s| {
        let mut s = s.borrow_mut();
        let at = s.pending.iter().position(|p| p.index == index)?;
        Some(s.pending.swap_remove(at))
    });
    if let Some(p) = taken {
        p.abandon();
    }
}

/// The transaction's end: everything goes, the tracking starts over.
fn reset() {
    let state = STATE.with(|s| std::mem::take(&mut *s.borrow_mut()));
    for p in state.pending {
        p.abandon();
    }
}

fn register_callbacks() {
    if CALLBACKS.get() {
        return;
    }
    // SAFETY: registered once per backend; the callbacks live as long as the library.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_transaction), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subtransaction), std::ptr::null_mut());
    }
    CALLBACKS.set(true);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_transaction(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        // Still inside the transaction: an ERROR here aborts it.
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => flush_all(),
        XACT_EVENT_COMMIT
        | XACT_EVENT_ABORT
        | XACT_EVENT_PREPARE
        | XACT_EVENT_PARALLEL_COMMIT
        | XACT_EVENT_PARALLEL_ABORT => reset(),
        _ => {}
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_subtransaction(
    event: pg_sys::SubXactEvent::Type,
    sub: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::SubXactEvent::*;
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        match event {
            SUBXACT_EVENT_START_SUB => {
                let seq = s.next_seq;
                s.subtransactions.push((sub, seq));
            }
            SUBXACT_EVENT_COMMIT_SUB => {
                s.subtransactions.retain(|(id, _)| *id != sub);
            }
            SUBXACT_EVENT_ABORT_SUB => {
                // Started before the tracking did (the first gathered document came inside
                // it): every document so far is its.
                let from = s
                    .subtransactions
                    .iter()
                    .find(|(id, _)| *id == sub)
                    .map_or(0, |(_, seq)| *seq);
                s.subtransactions.retain(|(id, _)| *id != sub);
                let to = s.next_seq;
                if from < to {
                    // Ranges stay sorted and disjoint: an abort covers the ranges of the
                    // subtransactions inside it that aborted before.
                    while s.dead.last().is_some_and(|r| r.start >= from) {
                        s.dead.pop();
                    }
                    s.dead.push(from..to);
                }
            }
            _ => {}
        }
    });
}
