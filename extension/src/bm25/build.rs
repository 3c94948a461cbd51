//! CREATE INDEX: one heap scan into in-memory segment builders that spill to index pages when
//! they pass maintenance_work_mem, then one merge into a single segment. Pages are written
//! without WAL and logged once at the end.

use std::ffi::{c_char, c_void};

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::bm25index::maintenance::{add_segment, initialize, merge_all};
use pg_skills_kernels::bm25index::segment::SegmentBuilder;
use pg_skills_kernels::bm25index::{IndexOptions, NoReaders, Tid};

use super::{analyze_datum, options};
use crate::storage::{BufferStore, OrRaise};

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

crate::am::build_callback!(build_callback, BuildState, add);

impl BuildState<'_> {
    fn add(&mut self, tid: Tid, value: pg_sys::Datum) {
        let doc = analyze_datum(&self.options, value);
        self.builder.add(tid, &doc);
        self.indexed += 1.0;
        if self.builder.memory_bytes() > self.memory_limit {
            self.spill();
        }
        if (self.indexed as u64) % 1024 == 0 {
            report(pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE, self.indexed as i64);
        }
    }

    fn spill(&mut self) {
        report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SPILL);
        let full = std::mem::replace(
            &mut self.builder,
            SegmentBuilder::new(self.options.term_scoring()),
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
    let store = crate::am::begin_build(
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
        builder: SegmentBuilder::new(options.term_scoring()),
        memory_limit,
        indexed: 0.0,
    };
    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SCAN);
    let heap_tuples = crate::am::index_build_scan(
        heap,
        index,
        index_info,
        Some(build_callback),
        &mut state as *mut BuildState as *mut c_void,
    );
    if !state.builder.is_empty() {
        state.spill();
    }
    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_MERGE);
    merge_all(&store, &NoReaders).or_raise(index);
    pg_sys::IndexFreeSpaceMapVacuum(index);
    store.log_all();

    crate::am::build_result(heap_tuples, state.indexed)
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
