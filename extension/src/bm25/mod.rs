//! The `bm25` index access method: Postgres callbacks over `pg_skills_kernels::bm25index`.
//!
//! One file per phase, as pgvector does: `build.rs` (CREATE INDEX), `insert.rs`, `scan.rs`,
//! `vacuum.rs`, `cost.rs`, `options.rs`; `crate::storage` maps the page trait onto buffers with
//! generic WAL; `operator.rs` is the `<&>` operator a sequential scan evaluates, with the same
//! scoring as the index.
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

use pg_skills_kernels::bm25index::format::{Meta, Tid, META_BLOCK};
use pg_skills_kernels::bm25index::{AnalyzedDoc, Exclusion, IndexOptions};
use pg_skills_kernels::page::PageRead;
use pg_skills_kernels::text::{Analyzer, AnalyzerConfig};

use crate::errors::raise;

mod build;
mod cost;
mod insert;
pub mod operator;
pub mod options;
mod scan;
mod stats;
mod vacuum;

pub const READERS_LOCK: pg_sys::BlockNumber = 0;
pub const MAINTENANCE_LOCK: pg_sys::BlockNumber = 1;

#[pg_extern(sql = "
CREATE FUNCTION skills.bm25_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
CREATE ACCESS METHOD bm25 TYPE INDEX HANDLER skills.bm25_handler;
COMMENT ON ACCESS METHOD bm25 IS 'pg_skills BM25 index over ARRAY[name, description, instructions]';
")]
fn bm25_handler(_fcinfo: pg_sys::FunctionCallInfo) -> PgBox<pg_sys::IndexAmRoutine> {
    crate::am::ordering_am(1, |am| {
        am.ambuild = Some(build::ambuild);
        am.ambuildempty = Some(build::ambuildempty);
        am.ambuildphasename = Some(build::ambuildphasename);
        am.aminsert = Some(insert::aminsert);
        am.ambulkdelete = Some(vacuum::ambulkdelete);
        am.amvacuumcleanup = Some(vacuum::amvacuumcleanup);
        am.amcostestimate = Some(cost::amcostestimate);
        am.amoptions = Some(options::amoptions);
        am.amvalidate = Some(amvalidate);
        am.ambeginscan = Some(scan::ambeginscan);
        am.amrescan = Some(scan::amrescan);
        am.amgettuple = Some(scan::amgettuple);
        am.amendscan = Some(scan::amendscan);
    })
}

#[pg_guard]
unsafe extern "C-unwind" fn amvalidate(_opclassoid: pg_sys::Oid) -> bool {
    true
}

/// Whether `index` is an index of access method `am`.
pub fn is_index_of(index: pg_sys::Relation, am: &str) -> bool {
    unsafe {
        let name = pg_sys::get_am_name((*(*index).rd_rel).relam);
        !name.is_null() && std::ffi::CStr::from_ptr(name).to_bytes() == am.as_bytes()
    }
}

/// Opens `oid` (AccessShareLock) as an index of access method `am`, or raises a clear ERROR
/// with `hint`. Close it with `relation_close(rel, AccessShareLock)`.
///
/// Functions given an index by name or OID (statistics, recall, a bm25query naming its index)
/// read what the index holds, so the caller must be allowed to read the indexed table.
pub fn open_index_of(oid: pg_sys::Oid, am: &str, hint: &str) -> pg_sys::Relation {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    require_select_on_indexed_table(oid);
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

/// ERROR 42501 unless the current user may SELECT from the table `index` indexes (checked
/// before any lock is taken; an OID that is no index is left to the caller's checks).
fn require_select_on_indexed_table(index: pg_sys::Oid) {
    // SAFETY: syscache lookups on the backend's thread; missing_ok, so no ERROR of their own.
    unsafe {
        let table = pg_sys::IndexGetRelation(index, true);
        if table == pg_sys::InvalidOid {
            return;
        }
        let allowed = pg_sys::pg_class_aclcheck(table, pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode);
        if allowed != pg_sys::AclResult::ACLCHECK_OK {
            let name = pg_sys::get_rel_name(table);
            let name = if name.is_null() {
                table.to_u32().to_string()
            } else {
                std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            raise(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied for table {name}"),
                Some("Reading an index's contents needs SELECT on its table (for pg_skills' own tables: GRANT skills_reader TO the role)."),
            );
        }
    }
}

/// [`open_index_of`] for bm25 indexes.
pub fn open_bm25_index(oid: pg_sys::Oid) -> pg_sys::Relation {
    open_index_of(
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

pub fn relation_name(rel: pg_sys::Relation) -> String {
    unsafe { pgrx::name_data_to_str(&(*(*rel).rd_rel).relname).to_string() }
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

pub fn tid_of(ptr: &pg_sys::ItemPointerData) -> Tid {
    let (block, offset) = pgrx::itemptr::item_pointer_get_both(*ptr);
    Tid { block, offset }
}
