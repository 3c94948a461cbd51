//! Distance operators in pgvector's convention (smaller is nearer). They compute exactly what
//! the `skeys` index computes for an entry (`Metric::distance`), so an index scan and a
//! sequential scan order rows by identical values.

use pgrx::IntoDatum;
use pgrx::{pg_sys, PgSqlErrorCode};

use pg_skills_kernels::keyindex::Metric;

use super::datatype::Key;
use crate::errors::raise;
use crate::fmgr::{arg, v1_function};

fn distance(a: pg_sys::Datum, b: pg_sys::Datum, metric: Metric) -> f64 {
    let (a, b) = unsafe { (Key::from_datum(a), Key::from_datum(b)) };
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let (a, b) = (a.values(&mut sa), b.values(&mut sb));
    if a.len() != b.len() {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("keys of {} and {} dimensions", a.len(), b.len()),
            None,
        );
    }
    metric.distance(a, b)
}

v1_function!(
    pg_finfo_pgs_key_negative_inner_product,
    pgs_key_negative_inner_product,
    |fcinfo| {
        distance(arg(fcinfo, 0), arg(fcinfo, 1), Metric::InnerProduct)
            .into_datum()
            .expect("a float8")
    }
);

v1_function!(
    pg_finfo_pgs_key_cosine_distance,
    pgs_key_cosine_distance,
    |fcinfo| {
        distance(arg(fcinfo, 0), arg(fcinfo, 1), Metric::Cosine)
            .into_datum()
            .expect("a float8")
    }
);

v1_function!(
    pg_finfo_pgs_key_l2_distance,
    pgs_key_l2_distance,
    |fcinfo| {
        distance(arg(fcinfo, 0), arg(fcinfo, 1), Metric::L2)
            .into_datum()
            .expect("a float8")
    }
);
