//! CREATE INDEX: one heap scan into in-memory segment builders that spill to index pages when
//! they pass maintenance_work_mem, then one merge into a single segment. Pages are written
//! without WAL and logged once at the end.

use std::ffi::{c_char, c_void};

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::bm25index::maintenance::{add_segment, initialize, merge_all};
use pg_skills_kernels::bm25index::segment::SegmentBuilder;
use pg_skills_kernels::bm25index::{IndexOptions, NoReaders};

use super::{analyze_datum, options, tid_of};
use crate::storage::{BufferStore, Mode, OrRaise};

// Phases shown in pg_stat_progress_create_index.subphase (1 is Postgres' "initializing").
const PHASE_SCAN: i64 = 2;
const PHASE_SPILL: i64 = 3;
const PHASE_MERGE: i64 = 4;

struct BuildState<'a> {
    store: &'a BufferStore,
    index: pg_sys::Relation,
    options: IndexOptions,
    builder: SegmentBuilder,
    memory_limit: usize,
    indexed: f64,
}

impl BuildState<'_> {
    fn spill(&mut self) {
        report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SPILL);
        let full = std::mem::replace(
            &mut self.builder,
            SegmentBuilder::new(self.options.weights_array()),
        );
        let segment = full.write(self.store);
        add_segment(self.store, segment, &NoReaders).or_raise(self.index);
        report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SCAN);
    }
}

use crate::am::report_progress as report;

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    let store = BufferStore::new(index, Mode::Build);
    crate::am::check_build(
        store.num_blocks(),
        index,
        index_info,
        "bm25",
        "Index the expression ARRAY[name, description, instructions].",
    );
    let options = options::of_relation(index);
    initialize(&store, options);

    let memory_limit = (pg_sys::maintenance_work_mem as usize).saturating_mul(1024);
    let mut state = BuildState {
        store: &store,
        index,
        options,
        builder: SegmentBuilder::new(options.weights_array()),
        memory_limit,
        indexed: 0.0,
    };
    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SCAN);
    let heap_tuples = pg_sys::table_index_build_scan(
        heap,
        index,
        index_info,
        true,
        true,
        Some(build_callback),
        &mut state as *mut BuildState as *mut c_void,
        std::ptr::null_mut(),
    );
    if !state.builder.is_empty() {
        state.spill();
    }
    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_MERGE);
    merge_all(&store, &NoReaders).or_raise(index);
    pg_sys::IndexFreeSpaceMapVacuum(index);
    store.log_all();

    let mut result = PgBox::<pg_sys::IndexBuildResult>::alloc0();
    result.heap_tuples = heap_tuples;
    result.index_tuples = state.indexed;
    result.into_pg()
}

#[pg_guard]
unsafe extern "C-unwind" fn build_callback(
    _index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    _tuple_is_alive: bool,
    state: *mut c_void,
) {
    let state = &mut *(state as *mut BuildState);
    if *isnull {
        return;
    }
    let doc = analyze_datum(&state.options, *values);
    state.builder.add(tid_of(&*tid), &doc);
    state.indexed += 1.0;
    if state.builder.memory_bytes() > state.memory_limit {
        state.spill();
    }
    if (state.indexed as u64) % 1024 == 0 {
        report(pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE, state.indexed as i64);
    }
}

/// The init fork of an unlogged index: an empty index.
#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildempty(index: pg_sys::Relation) {
    let store = BufferStore::init_fork(index);
    initialize(&store, options::of_relation(index));
    store.log_all();
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildphasename(phase: i64) -> *mut c_char {
    let name: &'static std::ffi::CStr = match phase {
        PHASE_SCAN => c"scanning table and building postings",
        PHASE_SPILL => c"writing a segment (maintenance_work_mem reached)",
        PHASE_MERGE => c"merging segments",
        _ => return std::ptr::null_mut(),
    };
    name.as_ptr() as *mut c_char
}
