//! Version-1 C functions for SQL objects declared in `sql/*.sql` (the key type's input and
//! output functions must exist before `CREATE TYPE`, which pgrx's generated SQL cannot order).

/// `v1_function!(pg_finfo_NAME, NAME, |fcinfo| body)` exports `NAME` with its `pg_finfo_NAME`
/// record; `#[pg_guard]` turns a panic in `body` into an ERROR.
macro_rules! v1_function {
    ($finfo:ident, $name:ident, |$fcinfo:ident| $body:block) => {
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pgrx::pg_sys::Pg_finfo_record {
            const V1: pgrx::pg_sys::Pg_finfo_record =
                pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }

        #[unsafe(no_mangle)]
        #[pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn $name(
            fcinfo: pgrx::pg_sys::FunctionCallInfo,
        ) -> pgrx::pg_sys::Datum {
            // A closure: pg_guard rewrites the function, and the caller's name for the argument
            // must stay in the caller's hygiene context.
            #[allow(unused_unsafe)]
            let body = |$fcinfo: pgrx::pg_sys::FunctionCallInfo| -> pgrx::pg_sys::Datum {
                unsafe { $body }
            };
            body(fcinfo)
        }
    };
}
pub(crate) use v1_function;

/// Argument `n` as a raw Datum (the SQL declaration is STRICT, so it is not NULL).
///
/// SAFETY: `fcinfo` is the call's, with more than `n` arguments.
pub unsafe fn arg(fcinfo: pgrx::pg_sys::FunctionCallInfo, n: usize) -> pgrx::pg_sys::Datum {
    pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n)
}
