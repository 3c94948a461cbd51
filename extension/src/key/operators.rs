//! Distance operators in pgvector's convention (smaller is nearer). They compute exactly what
//! the `skeys` index computes for an entry (`Metric::distance`), so an index scan and a
//! sequential scan order rows by identical values. With a `skills.keyquery` on the right, the
//! distance is to its key (a sequential scan reads every row: the breadth is moot).

use pgrx::IntoDatum;
use pgrx::{pg_sys, PgSqlErrorCode};

use pg_skills_kernels::keyindex::Metric;

use super::datatype::Key;
use super::query::KeyQuery;
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

/// `key <op> keyquery`: the distance to the query's key; NULL when that key is NULL.
///
/// SAFETY: `fcinfo` is a call of a STRICT (skills.key, skills.keyquery) function and `query` its
/// second argument's parts.
unsafe fn query_distance(
    fcinfo: pg_sys::FunctionCallInfo,
    query: Option<KeyQuery>,
    metric: Metric,
) -> pg_sys::Datum {
    match query {
        Some(query) => distance(arg(fcinfo, 0), query.key, metric)
            .into_datum()
            .expect("a float8"),
        None => {
            (*fcinfo).isnull = true;
            pg_sys::Datum::from(0)
        }
    }
}

/// The two C functions of one metric: `key <op> key` and `key <op> keyquery`.
macro_rules! metric_functions {
    ($metric:expr, $key_finfo:ident, $key:ident, $query_finfo:ident, $query:ident) => {
        v1_function!($key_finfo, $key, |fcinfo| {
            distance(arg(fcinfo, 0), arg(fcinfo, 1), $metric)
                .into_datum()
                .expect("a float8")
        });

        v1_function!($query_finfo, $query, |fcinfo| {
            let query = KeyQuery::from_datum(arg(fcinfo, 1));
            query_distance(fcinfo, query, $metric)
        });
    };
}

metric_functions!(
    Metric::InnerProduct,
    pg_finfo_pgs_key_negative_inner_product,
    pgs_key_negative_inner_product,
    pg_finfo_pgs_key_query_negative_inner_product,
    pgs_key_query_negative_inner_product
);

metric_functions!(
    Metric::Cosine,
    pg_finfo_pgs_key_cosine_distance,
    pgs_key_cosine_distance,
    pg_finfo_pgs_key_query_cosine_distance,
    pgs_key_query_cosine_distance
);

metric_functions!(
    Metric::L2,
    pg_finfo_pgs_key_l2_distance,
    pgs_key_l2_distance,
    pg_finfo_pgs_key_query_l2_distance,
    pgs_key_query_l2_distance
);
