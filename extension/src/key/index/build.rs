//! CREATE INDEX for skeys: sample keys, train k-means, file every key under its nearest centroid.
//!
//! Two passes over the table. The first keeps a uniform reservoir sample of the keys in their own
//! f16 (at most half of maintenance_work_mem: 32,768 keys at the default 64 MB, enough for
//! 1,024 lists) and counts rows; k-means trains on it (on rayon's threads: pure computation),
//! and the sample is freed. The second assigns keys to lists in batches (half of
//! maintenance_work_mem, assignment in parallel) and appends each batch list by list. The
//! relation is written without WAL and logged once at the end, as for bm25.

use std::ffi::{c_char, c_void};

use half::f16;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::keyindex::{initialize, BulkLoader, Centroids};
use pg_skills_kernels::kmeans;
use pg_skills_kernels::layout::Tid;
use pg_skills_kernels::rng::SplitMix64;

use super::{metric_of_index, options};
use crate::errors::raise;
use crate::key::datatype::{Key, KEY_DIM};
use crate::storage::{BufferStore, OrRaise};

const PHASE_SAMPLE: i64 = 2;
const PHASE_TRAIN: i64 = 3;
const PHASE_ASSIGN: i64 = 4;

/// k-means iterations (faiss uses 10–25; lists barely move after 10 on skill keys).
const KMEANS_ITERATIONS: usize = 10;
/// Training points per list wanted (faiss warns below 39).
const SAMPLE_PER_LIST: usize = 64;

use crate::am::report_progress as report;

fn memory_budget() -> usize {
    unsafe { (pg_sys::maintenance_work_mem as usize).saturating_mul(1024) }
}

struct SampleState {
    capacity: usize,
    /// Row-major f16 keys, as stored: k-means widens a block at a time.
    sample: Vec<f16>,
    seen: u64,
    rng: SplitMix64,
}

struct AssignState<'a> {
    loader: BulkLoader<'a, BufferStore>,
    centroids: Centroids,
    batch_limit: usize,
    tids: Vec<Tid>,
    keys: Vec<f16>,
    done: u64,
}

impl AssignState<'_> {
    fn flush(&mut self) {
        if self.tids.is_empty() {
            return;
        }
        let lists = kmeans::assign(
            &self.centroids.rows,
            KEY_DIM,
            &self.keys,
            self.centroids.geometry,
        );
        self.loader
            .add_batch(&self.centroids, &lists, &self.tids, &self.keys);
        self.done += self.tids.len() as u64;
        self.tids.clear();
        self.keys.clear();
        report(pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE, self.done as i64);
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    let store = crate::am::begin_build(index, index_info, "skeys", "Index one skills.key column.");
    let metric = metric_of_index(index);
    // A fixed seed: the same rows give the same index (reproducible plans and results). The
    // build id only has to differ between builds, for the backends' centroid caches.
    let seed = 0x5eed_cafe_u64;
    let build_id =
        (pg_sys::GetCurrentTimestamp() as u64) ^ (((*index).rd_id.to_u32() as u64) << 32);

    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SAMPLE);
    let capacity = (memory_budget() / 2 / (2 * KEY_DIM)).clamp(1_000, 4_000_000);
    let mut sample = SampleState {
        capacity,
        sample: Vec::new(),
        seen: 0,
        rng: SplitMix64(seed),
    };
    crate::am::index_build_scan(
        heap,
        index,
        index_info,
        Some(sample_callback),
        &mut sample as *mut _ as *mut c_void,
    );

    let points = sample.sample.len() / KEY_DIM;
    let wanted = match options::lists_of(index) {
        0 => {
            // As many lists as the rows call for, if the sample trains each on enough keys.
            let lists = options::default_lists(sample.seen, points as u64);
            let unbounded = options::default_lists(sample.seen, sample.seen);
            if lists < unbounded {
                pgrx::notice!(
                    "skeys: {lists} lists, not the {unbounded} that {} keys call for: the sample in \
                     maintenance_work_mem holds {points} keys, {} per list; raise \
                     maintenance_work_mem (half of it holds the sample) for more lists",
                    sample.seen,
                    options::MIN_SAMPLE_PER_AUTO_LIST
                );
            }
            lists as usize
        }
        n => n as usize,
    };
    // Train on a uniform subset of the reservoir: a shuffle's prefix.
    let use_points = points.min(wanted * SAMPLE_PER_LIST);
    for i in 0..use_points {
        let j = i + sample.rng.below((points - i) as u64) as usize;
        if i != j {
            for d in 0..KEY_DIM {
                sample.sample.swap(i * KEY_DIM + d, j * KEY_DIM + d);
            }
        }
    }
    sample.sample.truncate(use_points * KEY_DIM);

    if wanted > 1 && use_points < wanted * 16 && (sample.seen as usize) > use_points {
        pgrx::notice!(
            "skeys: k-means trains {wanted} lists on {use_points} sampled keys (fewer than 16 per list); \
             raise maintenance_work_mem (half of it holds the sample) for better lists"
        );
    }
    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_TRAIN);
    let trained = kmeans::train_with(
        &sample.sample,
        KEY_DIM,
        wanted,
        metric.geometry(),
        KMEANS_ITERATIONS,
        seed,
        &mut || {
            pg_sys::check_for_interrupts!();
        },
    );
    drop(sample.sample);
    let meta = initialize(
        &store,
        KEY_DIM as u16,
        metric,
        &trained,
        build_id,
        use_points as u64,
    );

    report(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_ASSIGN);
    let batch_limit = (memory_budget() / 2 / (2 * KEY_DIM + 8)).max(1024);
    let mut assign = AssignState {
        loader: BulkLoader::new(&store, meta),
        centroids: Centroids::load(&store, &meta).or_raise(index),
        batch_limit,
        tids: Vec::new(),
        keys: Vec::new(),
        done: 0,
    };
    let heap_tuples = crate::am::index_build_scan(
        heap,
        index,
        index_info,
        Some(assign_callback),
        &mut assign as *mut _ as *mut c_void,
    );
    assign.flush();
    let indexed = assign.loader.entries;
    assign.loader.finish();
    store.log_all();

    crate::am::build_result(heap_tuples, indexed as f64)
}

crate::am::build_callback!(sample_callback, SampleState, add);
crate::am::build_callback!(assign_callback, AssignState, add);

impl SampleState {
    /// Algorithm R: the i-th key replaces a random slot with probability capacity / i.
    fn add(&mut self, _tid: Tid, value: pg_sys::Datum) {
        self.seen += 1;
        let slot = if (self.sample.len() / KEY_DIM) < self.capacity {
            None
        } else {
            let r = self.rng.below(self.seen) as usize;
            if r >= self.capacity {
                return;
            }
            Some(r)
        };
        // SAFETY: a non-NULL value of the indexed skills.key column, from the heap scan.
        let key = unsafe { Key::from_datum(value) };
        let mut scratch = Vec::new();
        let values = key.values(&mut scratch);
        check_dimensions(values.len());
        match slot {
            None => self.sample.extend_from_slice(values),
            Some(r) => self.sample[r * KEY_DIM..(r + 1) * KEY_DIM].copy_from_slice(values),
        }
    }
}

/// Every key of the index has KEY_DIM values (rows of the sample and of a batch are
/// KEY_DIM apart).
fn check_dimensions(len: usize) {
    if len != KEY_DIM {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("a key of {len} dimensions in a {KEY_DIM}-d index"),
            None,
        );
    }
}

impl AssignState<'_> {
    fn add(&mut self, tid: Tid, value: pg_sys::Datum) {
        // SAFETY: a non-NULL value of the indexed skills.key column, from the heap scan.
        let key = unsafe { Key::from_datum(value) };
        let mut scratch = Vec::new();
        let values = key.values(&mut scratch);
        check_dimensions(values.len());
        self.keys.extend_from_slice(values);
        self.tids.push(tid);
        if self.tids.len() >= self.batch_limit {
            self.flush();
        }
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildempty(index: pg_sys::Relation) {
    let store = BufferStore::init_fork(index);
    initialize(&store, KEY_DIM as u16, metric_of_index(index), &[], 0, 0);
    store.log_all();
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildphasename(phase: i64) -> *mut c_char {
    let name: &'static std::ffi::CStr = match phase {
        PHASE_SAMPLE => c"sampling keys",
        PHASE_TRAIN => c"training k-means centroids",
        PHASE_ASSIGN => c"assigning keys to lists",
        _ => return std::ptr::null_mut(),
    };
    name.as_ptr() as *mut c_char
}
