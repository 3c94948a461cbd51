//! amcostestimate: cheap for `ORDER BY key <op> $1` (it reads `probes` lists), never chosen for
//! anything else (the index answers no WHERE clause).

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
    let info = (*path).indexinfo;
    let index_pages = (*info).pages as f64;
    let tuples = (*info).tuples.max(1.0);
    // Lists ≈ √tuples; a scan reads `probes` of them: probes·√tuples entries, their pages.
    let lists = tuples.sqrt().max(1.0);
    let probes = (crate::guc::KEY_PROBES.get().max(1) as f64).min(lists);
    let fraction = probes / lists;
    let read_pages = (index_pages * fraction).max(1.0);
    let read_tuples = tuples * fraction;
    // One random read to reach each list, then its chain (mostly consecutive pages).
    let cost = pg_sys::random_page_cost * probes
        + pg_sys::seq_page_cost * read_pages
        + pg_sys::cpu_operator_cost * (lists + read_tuples * 4.0)
        + pg_sys::cpu_index_tuple_cost * read_tuples;
    *startup = cost;
    *total = cost;
    *pages = read_pages;
}
