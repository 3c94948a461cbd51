//! `CREATE INDEX ... USING skeys ... WITH (lists = N)`. Postgres validates the name and range.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use pgrx::pg_sys;

use crate::am::{parse_reloptions, relation_options, reloption};

static KIND: AtomicU32 = AtomicU32::new(0);

/// The most lists an index may have (a u16 page count per list stays far away).
pub const MAX_LISTS: i32 = 65_535;

#[repr(C)]
struct RawOptions {
    vl_len_: i32,
    lists: c_int,
}

pub fn register() {
    unsafe {
        let kind = pg_sys::add_reloption_kind();
        KIND.store(kind, Ordering::Relaxed);
        pg_sys::add_int_reloption(
            kind,
            c"lists".as_ptr(),
            c"number of lists (k-means centroids); 0 picks 4·√rows at build time".as_ptr(),
            0,
            0,
            MAX_LISTS,
            pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE,
        );
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amoptions(
    reloptions: pg_sys::Datum,
    validate: bool,
) -> *mut pg_sys::bytea {
    let table = [reloption(
        c"lists",
        pg_sys::relopt_type::RELOPT_TYPE_INT,
        std::mem::offset_of!(RawOptions, lists),
    )];
    parse_reloptions::<RawOptions>(reloptions, validate, KIND.load(Ordering::Relaxed), &table)
}

/// Lists requested in WITH (0: choose from the row count).
pub fn lists_of(index: pg_sys::Relation) -> u32 {
    // SAFETY: RawOptions is what this access method's amoptions builds.
    unsafe { relation_options::<RawOptions>(index) }.map_or(0, |raw| raw.lists.max(0) as u32)
}

/// Sampled keys per list below which the default (`lists` unset) takes fewer lists: only the
/// sample trains the centroids, and lists of a handful of keys each are mostly noise.
pub const MIN_SAMPLE_PER_AUTO_LIST: u64 = 32;

/// The lists a build without `lists` makes: [`auto_lists`], at most one per
/// [`MIN_SAMPLE_PER_AUTO_LIST`] keys of the `sampled` ones k-means trains on (at least 1).
pub fn default_lists(rows: u64, sampled: u64) -> u32 {
    let trainable = (sampled / MIN_SAMPLE_PER_AUTO_LIST).clamp(1, MAX_LISTS as u64) as u32;
    auto_lists(rows).min(trainable)
}

/// 4·√rows, at least 1: lists of about √rows/4 entries, so probing p lists reads p·√rows/4
/// keys. Four times √rows (the lower end of faiss's 4–16·√N advice): on real MiniLM keys a
/// recall of 0.95 then reads half the keys that √rows lists need, for about as many centroids
/// ranked as keys read at the default 16 probes.
fn auto_lists(rows: u64) -> u32 {
    ((4.0 * (rows as f64).sqrt()).round() as u32).clamp(1, MAX_LISTS as u32)
}
