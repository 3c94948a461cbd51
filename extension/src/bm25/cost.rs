//! The planner's cost model: the index is only useful to produce `ORDER BY doc <&> query` order
//! (it has no searchable quals); then its work — the whole top-k — happens before the first row,
//! so startup cost is total cost.

use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn amcostestimate(
    _root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    _loop_count: f64,
    startup: *mut pg_sys::Cost,
    total: *mut pg_sys::Cost,
    selectivity: *mut pg_sys::Selectivity,
    correlation: *mut f64,
    pages: *mut f64,
) {
    if crate::am::unserved_path(path, startup, total, selectivity, correlation, pages) {
        return;
    }
    // A top-k query reads the dictionary path of each query term and part of its postings:
    // roughly logarithmic in the index plus a small fraction of it. (genericcostestimate would
    // also charge the ORDER BY operator per row, which an index scan never evaluates.)
    let info = (*path).indexinfo;
    let index_pages = (*info).pages as f64;
    let tuples = (*info).tuples.max(1.0);
    let cost = pg_sys::random_page_cost * ((index_pages + 1.0).log2() + 1.0)
        + pg_sys::seq_page_cost * index_pages * 0.05
        + pg_sys::cpu_index_tuple_cost * tuples * 0.05;
    *startup = cost;
    *total = cost;
    *pages = index_pages;
}
