//! The `bm25` index access method: Postgres callbacks over `pg_skills_kernels::bm25index`.
//!
//! One file per phase, as pgvector does: `build.rs` (CREATE INDEX), `insert.rs`, `scan.rs`,
//! `vacuum.rs`, `cost.rs`, `options.rs`; `crate::storage` maps the page trait onto buffers with
//! generic WAL; `operator.rs` is the `<&>` operator a sequential scan evaluates, with the same
//! scoring as the index; `reference.rs` is `skills.bm25_scan`, the sequential reference scorer
//! the index is tested against; `stats.rs` is `skills.bm25_index_stats`.
//!
//! Locks (heavyweight page locks on numbers that are not pages of data, as GIN does):
//! - [`READERS_LOCK`]: a scan holds it shared while it computes a batch, an insert while it
//!   appends (both follow pages a merge frees); a merge takes it
//!   exclusively only to publish its result and free the pages it replaced (on a standby,
//!   [`reading`] holds the metapage instead: replay takes no heavyweight locks);
//! - [`MAINTENANCE_LOCK`]: one structural change (merge, VACUUM's tombstones and cleanup) at a
//!   time. Inserts only try it, after appending, to merge an append area past its limit.

use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};

use pg_skills_kernels::bm25index::format::{Meta, META_BLOCK};
use pg_skills_kernels::bm25index::{AnalyzedDoc, Exclusion, IndexOptions};
use pg_skills_kernels::page::PageRead;
use pg_skills_kernels::text::{Analyzer, AnalyzerConfig};

use crate::errors::raise;

mod build;
pub(crate) mod bulk;
mod cost;
pub(crate) mod insert;
pub mod operator;
pub mod options;
pub mod reference;
mod scan;
mod stats;
pub mod top_k;
mod vacuum;

pub const READERS_LOCK: pg_sys::BlockNumber = 0;
pub const MAINTENANCE_LOCK: pg_sys::BlockNumber = 1;

/// The access method's handler; `CREATE ACCESS METHOD bm25` is in sql/bm25.sql (pgrx cannot
/// write an `internal` argument).
#[pg_extern(sql = false)]
fn bm25_handler(_fcinfo: pg_sys::FunctionCallInfo) -> PgBox<pg_sys::IndexAmRoutine> {
    crate::am::ordering_am(1, |am| crate::am::phase_callbacks!(am))
}

/// [`crate::am::open_index_of`] for bm25 indexes.
pub fn open_bm25_index(oid: pg_sys::Oid) -> pg_sys::Relation {
    crate::am::open_index_of(
        oid,
        "bm25",
        "Build queries with skills.bm25query(query, index) naming a bm25 index.",
    )
}

/// The metapage, or an ERROR naming REINDEX when the index has another on-disk format.
pub fn checked_meta<S: PageRead>(store: &S, index: pg_sys::Relation) -> Meta {
    use crate::storage::OrRaise;
    Meta::read(&store.read(META_BLOCK)).or_raise(index)
}

/// Runs `f`, a read that follows the index's structure (a batch of results, statistics), so that
/// no page it follows is freed meanwhile. On a primary: the readers lock, which a merge takes
/// exclusively to publish its result and free what it replaced. On a standby, WAL replay takes no
/// heavyweight locks; there the metapage is held share-locked instead: replay of a merge switches
/// the metapage before it frees any page, and that replay waits for this buffer lock.
pub fn reading<R>(
    index: pg_sys::Relation,
    store: &crate::storage::BufferStore,
    f: impl FnOnce() -> R,
) -> R {
    // This session's gathered inserts first, so that it reads what it wrote.
    // SAFETY: `index` is an open bm25 index.
    unsafe { bulk::flush(index) };
    if unsafe { pg_sys::RecoveryInProgress() } {
        let _meta = store.read(META_BLOCK);
        f()
    } else {
        let locks = IndexLocks(index);
        locks.lock(READERS_LOCK, pg_sys::ShareLock);
        let result = f();
        locks.unlock(READERS_LOCK, pg_sys::ShareLock);
        result
    }
}

/// Heavyweight locks keyed on this index.
pub struct IndexLocks(pub pg_sys::Relation);

impl IndexLocks {
    pub fn lock(&self, which: pg_sys::BlockNumber, mode: u32) {
        unsafe { pg_sys::LockPage(self.0, which, mode as pg_sys::LOCKMODE) }
    }
    pub fn try_lock(&self, which: pg_sys::BlockNumber, mode: u32) -> bool {
        unsafe { pg_sys::ConditionalLockPage(self.0, which, mode as pg_sys::LOCKMODE) }
    }
    pub fn unlock(&self, which: pg_sys::BlockNumber, mode: u32) {
        unsafe { pg_sys::UnlockPage(self.0, which, mode as pg_sys::LOCKMODE) }
    }
}

impl Exclusion for IndexLocks {
    fn lock_readers_out(&self) {
        self.lock(READERS_LOCK, pg_sys::ExclusiveLock);
    }
    fn let_readers_in(&self) {
        self.unlock(READERS_LOCK, pg_sys::ExclusiveLock);
    }
}

thread_local! {
    /// tantivy analyzers are cheap to use and not free to build: one per stemming setting.
    static ANALYZERS: std::cell::RefCell<[Option<Analyzer>; 2]> = const { std::cell::RefCell::new([None, None]) };
}

/// Runs `f` with the analyzer for `options`.
pub fn with_analyzer<R>(options: &IndexOptions, f: impl FnOnce(&mut Analyzer) -> R) -> R {
    ANALYZERS.with(|cell| {
        let mut slots = cell.borrow_mut();
        let slot = &mut slots[options.stemming as usize];
        let analyzer = slot.get_or_insert_with(|| {
            Analyzer::new(AnalyzerConfig {
                stemming: options.stemming,
            })
        });
        f(analyzer)
    })
}

/// The fields of an indexed `text[]` value: name, description, instructions (missing or NULL
/// elements are empty).
pub fn document_fields(array: pgrx::Array<'_, &str>) -> [String; 3] {
    if array.len() > 3 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("a bm25 document has at most 3 fields, got {}", array.len()),
            Some("Index and order by ARRAY[name, description, instructions]."),
        );
    }
    let mut fields: [String; 3] = Default::default();
    for (i, v) in array.iter().enumerate() {
        fields[i] = v.unwrap_or_default().to_owned();
    }
    fields
}

/// Analyzes one indexed value.
pub fn analyze_datum(options: &IndexOptions, datum: pg_sys::Datum) -> AnalyzedDoc {
    // SAFETY: the opclass only admits text[] columns, and the datum is not NULL.
    let array =
        unsafe { pgrx::Array::<&str>::from_polymorphic_datum(datum, false, pg_sys::TEXTARRAYOID) }
            .expect("a non-null text[] datum");
    let fields = document_fields(array);
    with_analyzer(options, |a| {
        pg_skills_kernels::bm25index::analyze(
            a,
            [&fields[0], &fields[1], &fields[2]],
            options.weights_array(),
        )
    })
}
