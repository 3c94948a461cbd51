//! `CREATE INDEX ... USING bm25 ... WITH (...)` options. Postgres validates names and ranges
//! (an unknown option or an out-of-range value is an ERROR before any build starts).

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::bm25::{Bm25Params, FieldWeights};
use pg_skills_kernels::bm25index::IndexOptions;

use crate::am::{parse_reloptions, relation_options, reloption};
use crate::errors::raise;

static KIND: AtomicU32 = AtomicU32::new(0);

/// The options as Postgres lays them out (a varlena header, then the values).
#[repr(C)]
struct RawOptions {
    vl_len_: i32,
    k1: f64,
    b: f64,
    name_weight: f64,
    description_weight: f64,
    instructions_weight: f64,
    stemming: bool,
    append_pages: c_int,
}

const DEFAULTS: IndexOptions = IndexOptions {
    k1: 1.5,
    b: 0.75,
    weights: FieldWeights {
        name: 1.0,
        description: 1.0,
        instructions: 1.0,
    },
    stemming: true,
    append_pages: 32,
};

/// Registers the options; called from `_PG_init`.
pub fn register() {
    unsafe {
        let kind = pg_sys::add_reloption_kind();
        KIND.store(kind, Ordering::Relaxed);
        let lock = pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE;
        pg_sys::add_real_reloption(
            kind,
            c"k1".as_ptr(),
            c"BM25 term-frequency saturation".as_ptr(),
            DEFAULTS.k1,
            0.0,
            10.0,
            lock,
        );
        pg_sys::add_real_reloption(
            kind,
            c"b".as_ptr(),
            c"BM25 length normalisation".as_ptr(),
            DEFAULTS.b,
            0.0,
            1.0,
            lock,
        );
        for (name, desc) in [
            (c"name_weight", c"weight of the name field"),
            (c"description_weight", c"weight of the description field"),
            (c"instructions_weight", c"weight of the instructions field"),
        ] {
            pg_sys::add_real_reloption(kind, name.as_ptr(), desc.as_ptr(), 1.0, 0.0, 100.0, lock);
        }
        pg_sys::add_bool_reloption(
            kind,
            c"stemming".as_ptr(),
            c"English stemming of terms".as_ptr(),
            DEFAULTS.stemming,
            lock,
        );
        pg_sys::add_int_reloption(
            kind,
            c"append_pages".as_ptr(),
            c"append-area pages that trigger a merge into a segment".as_ptr(),
            DEFAULTS.append_pages as c_int,
            1,
            10_000,
            lock,
        );
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amoptions(
    reloptions: pg_sys::Datum,
    validate: bool,
) -> *mut pg_sys::bytea {
    use pg_sys::relopt_type::{RELOPT_TYPE_BOOL, RELOPT_TYPE_INT, RELOPT_TYPE_REAL};
    use std::mem::offset_of;
    let table = [
        reloption(c"k1", RELOPT_TYPE_REAL, offset_of!(RawOptions, k1)),
        reloption(c"b", RELOPT_TYPE_REAL, offset_of!(RawOptions, b)),
        reloption(
            c"name_weight",
            RELOPT_TYPE_REAL,
            offset_of!(RawOptions, name_weight),
        ),
        reloption(
            c"description_weight",
            RELOPT_TYPE_REAL,
            offset_of!(RawOptions, description_weight),
        ),
        reloption(
            c"instructions_weight",
            RELOPT_TYPE_REAL,
            offset_of!(RawOptions, instructions_weight),
        ),
        reloption(
            c"stemming",
            RELOPT_TYPE_BOOL,
            offset_of!(RawOptions, stemming),
        ),
        reloption(
            c"append_pages",
            RELOPT_TYPE_INT,
            offset_of!(RawOptions, append_pages),
        ),
    ];
    parse_reloptions::<RawOptions>(reloptions, validate, KIND.load(Ordering::Relaxed), &table)
}

/// The options of an index being built (defaults for those not given), validated as a whole.
pub fn of_relation(index: pg_sys::Relation) -> IndexOptions {
    // SAFETY: RawOptions is what this access method's amoptions builds.
    let options = match unsafe { relation_options::<RawOptions>(index) } {
        None => DEFAULTS,
        Some(r) => IndexOptions {
            k1: r.k1,
            b: r.b,
            weights: FieldWeights {
                name: r.name_weight,
                description: r.description_weight,
                instructions: r.instructions_weight,
            },
            stemming: r.stemming,
            append_pages: r.append_pages as u32,
        },
    };
    let params = Bm25Params {
        k1: options.k1,
        b: options.b,
        weights: options.weights,
    };
    if let Err(e) = params.validate() {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid bm25 index options: {e}"),
            Some("Give at least one of name_weight, description_weight, instructions_weight a positive value."),
        );
    }
    options
}
