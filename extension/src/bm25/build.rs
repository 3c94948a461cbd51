//! CREATE INDEX: one heap scan into in-memory segment builders; a builder that passes
//! maintenance_work_mem is written as a segment to a temporary file, and at the end those
//! segments are merged into the index's one segment (a build that never passed it writes its
//! builder straight in). The index holds no page of the spills, so its size does not depend on
//! maintenance_work_mem. Pages are written without WAL and logged once at the end.

use std::ffi::{c_char, c_void};

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::bm25index::format::SegmentDesc;
use pg_skills_kernels::bm25index::maintenance::{
    add_merged_segment, add_segment, initialize, start_scratch,
};
use pg_skills_kernels::bm25index::segment::SegmentBuilder;
use pg_skills_kernels::bm25index::{IndexOptions, NoReaders, Tid};
use pg_skills_kernels::page::PageRead;

use super::{analyze_datum, options};
use crate::scratch::TempFileStore;
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
    /// Where full builders go, made on the first spill.
    scratch: Option<TempFileStore>,
    spilled: Vec<SegmentDesc>,
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
        let scratch = self.scratch.get_or_insert_with(|| {
            let scratch = TempFileStore::new(self.store.page_size());
            start_scratch(&scratch);
            scratch
        });
        self.spilled.push(full.write(scratch));
        report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SCAN);
    }

    /// Writes what the scan built into the index: the builder alone, or every spill and the
    /// builder's rest merged into one segment.
    fn finish(mut self) {
        if self.spilled.is_empty() {
            if !self.builder.is_empty() {
                let segment = self.builder.write(self.store);
                add_segment(self.store, segment, &NoReaders).or_raise(self.index);
            }
            return;
        }
        if !self.builder.is_empty() {
            self.spill();
        }
        report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_MERGE);
        let scratch = self.scratch.as_ref().expect("made by the first spill");
        add_merged_segment(self.store, scratch, &self.spilled, None, &NoReaders)
            .or_raise(self.index);
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
    // A rebuild indexes every row this session gathered for the index's old file itself.
    super::bulk::discard((*index).rd_id);

    let memory_limit = (pg_sys::maintenance_work_mem as usize).saturating_mul(1024);
    let mut state = BuildState {
        store: &store,
        index,
        options,
        builder: SegmentBuilder::new(options.term_scoring()),
        memory_limit,
        indexed: 0.0,
        scratch: None,
        spilled: Vec::new(),
    };
    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SCAN);
    let heap_tuples = crate::am::index_build_scan(
        heap,
        index,
        index_info,
        Some(build_callback),
        &mut state as *mut BuildState as *mut c_void,
    );
    let indexed = state.indexed;
    state.finish();
    pg_sys::IndexFreeSpaceMapVacuum(index);
    store.log_all();

    crate::am::build_result(heap_tuples, indexed)
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
