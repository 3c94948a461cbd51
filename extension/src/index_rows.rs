//! The table rows that the searches' direct index reads point at, read as an index scan in the
//! executor reads them: through the table access method (HOT chains followed, the statement's
//! snapshot applied), with no statement of their own.
//!
//! [`RowsByTid`] reads the row an index entry's TID names; [`RowsById`] finds a row by id through
//! its table's primary key, and [`SkillsById`] a skill (the key index's entries point at
//! skills.skill_key rows, and a skill's category and content hash are in skills.skill).

use std::collections::{HashMap, HashSet};
use std::ffi::CStr;

use pgrx::{pg_sys, PgSqlErrorCode};

use pg_skills_kernels::layout::Tid;

use crate::errors::raise;

/// The OID of the extension's table `name` in schema skills (InvalidOid: there is none).
pub fn extension_table(name: &CStr) -> pg_sys::Oid {
    // SAFETY: name lookups; missing_ok, so InvalidOid instead of an ERROR.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"skills".as_ptr(), true);
        pg_sys::get_relname_relid(name.as_ptr(), schema)
    }
}

/// The statement's snapshot (the transaction's where no statement set one).
fn statement_snapshot() -> pg_sys::Snapshot {
    // SAFETY: snapshot lookups on the backend's thread inside a transaction.
    unsafe {
        let snapshot = pg_sys::GetActiveSnapshot();
        if snapshot.is_null() {
            pg_sys::GetTransactionSnapshot()
        } else {
            snapshot
        }
    }
}

/// The categories a search asks for, checked against skills.skill's `category` column (an enum):
/// each enum value's label is looked up once.
struct CategoryFilter {
    attnum: i32,
    wanted: HashSet<String>,
    allowed: HashMap<pg_sys::Oid, bool>,
}

impl CategoryFilter {
    /// Safety: `heap` is skills.skill, open.
    unsafe fn new(heap: pg_sys::Relation, categories: Option<&[String]>) -> Option<CategoryFilter> {
        categories.map(|c| CategoryFilter {
            attnum: column(heap, c"category", pg_sys::InvalidOid),
            wanted: c.iter().cloned().collect(),
            allowed: HashMap::new(),
        })
    }

    /// Whether the row in `slot` (of skills.skill) has an asked-for category.
    ///
    /// Safety: `slot` holds a row of the table the filter was made for.
    unsafe fn allows(&mut self, slot: *mut pg_sys::TupleTableSlot) -> bool {
        let mut isnull = false;
        let value = pg_sys::slot_getattr(slot, self.attnum, &mut isnull);
        if isnull {
            return false;
        }
        let oid = pg_sys::Oid::from(value.value() as u32);
        let wanted = &self.wanted;
        *self
            .allowed
            .entry(oid)
            .or_insert_with(|| wanted.contains(&pgrx::enum_helper::lookup_enum_by_oid(oid).0))
    }
}

/// Reads a bigint column (and, for skills.skill, the category) of the row an index entry points
/// at, if the statement's snapshot sees it.
pub struct RowsByTid {
    heap: pg_sys::Relation,
    fetch: *mut pg_sys::IndexFetchTableData,
    slot: *mut pg_sys::TupleTableSlot,
    snapshot: pg_sys::Snapshot,
    id_attnum: i32,
    /// None: every category.
    category: Option<CategoryFilter>,
    fetched: u32,
}

impl RowsByTid {
    /// Reads column `id_column` (a bigint) of `heap`'s rows; `categories` (labels), where given,
    /// keeps the rows of those categories only (`heap` is then skills.skill).
    ///
    /// Safety: `heap` is open for the life of the reader, and [`RowsByTid::finish`] is called
    /// before it is closed.
    pub unsafe fn new(
        heap: pg_sys::Relation,
        id_column: &CStr,
        categories: Option<&[String]>,
    ) -> RowsByTid {
        let id_attnum = column(heap, id_column, pg_sys::INT8OID);
        let category = CategoryFilter::new(heap, categories);
        let fetch = (*(*heap).rd_tableam)
            .index_fetch_begin
            .expect("a table AM fetches by index")(heap);
        RowsByTid {
            heap,
            fetch,
            slot: pg_sys::table_slot_create(heap, std::ptr::null_mut()),
            snapshot: statement_snapshot(),
            id_attnum,
            category,
            fetched: 0,
        }
    }

    /// The row's id when the snapshot sees a version of it (following a HOT chain from the
    /// TID the index holds) and its category is one asked for.
    pub fn visible_id(&mut self, tid: Tid) -> Option<i64> {
        self.fetched += 1;
        if self.fetched.is_multiple_of(64) {
            pgrx::check_for_interrupts!();
        }
        // SAFETY: the fetch state and slot were made for `heap`, which is open; `ptr` is a
        // valid TID to look up (one the table does not have is found invisible).
        unsafe {
            let mut ptr = pg_sys::ItemPointerData::default();
            pgrx::itemptr::item_pointer_set_all(&mut ptr, tid.block, tid.offset);
            let mut call_again = false;
            let mut all_dead = false;
            let fetch_tuple = (*(*self.heap).rd_tableam)
                .index_fetch_tuple
                .expect("a table AM fetches by index");
            let found = fetch_tuple(
                self.fetch,
                &mut ptr,
                self.snapshot,
                self.slot,
                &mut call_again,
                &mut all_dead,
            );
            if !found {
                return None;
            }
            let mut isnull = false;
            let id = pg_sys::slot_getattr(self.slot, self.id_attnum, &mut isnull);
            let id = (!isnull).then(|| id.value() as i64);
            let allowed = match &mut self.category {
                None => true,
                Some(filter) => filter.allows(self.slot),
            };
            pg_sys::ExecClearTuple(self.slot);
            id.filter(|_| allowed)
        }
    }

    pub fn finish(self) {
        // SAFETY: made in `new` for this heap, not used after.
        unsafe {
            (*(*self.heap).rd_tableam)
                .index_fetch_end
                .expect("a table AM fetches by index")(self.fetch);
            pg_sys::ExecDropSingleTupleTableSlot(self.slot);
        }
    }
}

/// Finds rows by id through their table's primary key (a single bigint column), as the
/// statement's snapshot sees them.
pub struct RowsById {
    pkey: pg_sys::Relation,
    scan: pg_sys::IndexScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
}

impl RowsById {
    /// Safety: `heap` is one of the extension's tables keyed by a bigint, open (AccessShareLock
    /// or stronger) for the life of the lookup, and [`RowsById::finish`] is called before it is
    /// closed.
    pub unsafe fn new(heap: pg_sys::Relation) -> RowsById {
        let pkey_oid = pg_sys::RelationGetPrimaryKeyIndex(heap);
        if pkey_oid == pg_sys::InvalidOid {
            let table = crate::am::relation_name(heap);
            raise(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("skills.{table} has no primary key"),
                Some("The extension's tables were changed; reinstall the extension."),
            );
        }
        let pkey = pg_sys::index_open(pkey_oid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let scan = pg_sys::index_beginscan(heap, pkey, statement_snapshot(), 1, 0);
        RowsById {
            pkey,
            scan,
            slot: pg_sys::table_slot_create(heap, std::ptr::null_mut()),
        }
    }

    /// `read` of row `id`'s slot when the snapshot sees the row; None when it does not.
    pub fn find<T>(
        &mut self,
        id: i64,
        read: impl FnOnce(*mut pg_sys::TupleTableSlot) -> T,
    ) -> Option<T> {
        // SAFETY: the scan and slot were made in `new` for the table and its primary key, both
        // open; the scan key lives through the rescan, which copies it; `read` gets the slot
        // while it holds the row, which is cleared after.
        unsafe {
            let mut key = pg_sys::ScanKeyData::default();
            pg_sys::ScanKeyInit(
                &mut key,
                1,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::Oid::from(pg_sys::F_INT8EQ),
                pg_sys::Datum::from(id),
            );
            pg_sys::index_rescan(self.scan, &mut key, 1, std::ptr::null_mut(), 0);
            if !pg_sys::index_getnext_slot(
                self.scan,
                pg_sys::ScanDirection::ForwardScanDirection,
                self.slot,
            ) {
                return None;
            }
            let out = read(self.slot);
            pg_sys::ExecClearTuple(self.slot);
            Some(out)
        }
    }

    pub fn finish(self) {
        // SAFETY: made in `new`, not used after; the primary key was opened there.
        unsafe {
            pg_sys::index_endscan(self.scan);
            pg_sys::ExecDropSingleTupleTableSlot(self.slot);
            pg_sys::index_close(self.pkey, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        }
    }
}

/// The value of column `attnum` of the row in `slot` (None: NULL).
///
/// Safety: `slot` holds a row, and `attnum` is a column of its table.
pub unsafe fn value(slot: *mut pg_sys::TupleTableSlot, attnum: i32) -> Option<pg_sys::Datum> {
    let mut isnull = false;
    let value = pg_sys::slot_getattr(slot, attnum, &mut isnull);
    (!isnull).then_some(value)
}

/// Finds skills by id through skills.skill's primary key, as the statement's snapshot sees them.
pub struct SkillsById {
    rows: RowsById,
    category: Option<CategoryFilter>,
    hash_attnum: Option<i32>,
}

/// A skill [`SkillsById`] found: its content hash where asked for.
pub struct FoundSkill {
    pub content_hash: Option<String>,
}

impl SkillsById {
    /// `categories` (labels), where given, finds the skills of those categories only;
    /// `content_hash` reads each skill's content hash.
    ///
    /// Safety: `heap` is skills.skill, open (AccessShareLock or stronger) for the life of the
    /// lookup, and [`SkillsById::finish`] is called before it is closed.
    pub unsafe fn new(
        heap: pg_sys::Relation,
        categories: Option<&[String]>,
        content_hash: bool,
    ) -> SkillsById {
        SkillsById {
            rows: RowsById::new(heap),
            category: CategoryFilter::new(heap, categories),
            hash_attnum: content_hash.then(|| column(heap, c"content_hash", pg_sys::TEXTOID)),
        }
    }

    /// Skill `id` when the snapshot sees it and its category is one asked for.
    pub fn find(&mut self, id: i64) -> Option<FoundSkill> {
        let (category, hash_attnum) = (&mut self.category, self.hash_attnum);
        self.rows
            .find(id, |slot| {
                // SAFETY: `slot` holds a row of skills.skill, whose columns the filter and the
                // hash's attribute number were made for.
                unsafe {
                    let allowed = category.as_mut().is_none_or(|filter| filter.allows(slot));
                    allowed.then(|| FoundSkill {
                        content_hash: hash_attnum.and_then(|attnum| {
                            value(slot, attnum).map(|v| {
                                pgrx::FromDatum::from_datum(v, false).expect("a non-null text")
                            })
                        }),
                    })
                }
            })
            .flatten()
    }

    pub fn finish(self) {
        self.rows.finish();
    }
}

/// The attribute number of column `name` of `heap` (of type `type_oid` unless InvalidOid), or an
/// ERROR: the direct paths read named columns of the extension's tables.
///
/// Safety: `heap` is open.
pub unsafe fn column(heap: pg_sys::Relation, name: &CStr, type_oid: pg_sys::Oid) -> i32 {
    let attnum = pg_sys::get_attnum((*heap).rd_id, name.as_ptr());
    let ok = attnum > 0
        && (type_oid == pg_sys::InvalidOid
            || pg_sys::get_atttype((*heap).rd_id, attnum) == type_oid);
    if !ok {
        let table = crate::am::relation_name(heap);
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
            format!("skills.{table} has no column {}", name.to_string_lossy()),
            Some("The extension's tables were changed; reinstall the extension."),
        );
    }
    attnum as i32
}
