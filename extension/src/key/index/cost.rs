//! amcostestimate: cheap for `ORDER BY key <op> $1` (it reads `probes` lists), never chosen for
//! anything else (the index answers no WHERE clause).

use pgrx::pg_sys;

use crate::am::PathCost;

crate::am::amcostestimate!(probe_cost);

/// Lists as a build without `lists` picks them (with a sample of every row); a scan reads
/// `probes` of them.
fn probe_cost(index_pages: f64, tuples: f64) -> PathCost {
    let rows = tuples.max(0.0) as u64;
    let lists = crate::key::index::options::default_lists(rows, rows) as f64;
    let probes = (crate::guc::KEY_PROBES.get().max(1) as f64).min(lists);
    let fraction = probes / lists;
    let read_pages = (index_pages * fraction).max(1.0);
    let read_tuples = tuples * fraction;
    // SAFETY: reads of the planner's cost settings on the backend's thread.
    let (random_page, seq_page, operator, index_tuple) = unsafe {
        (
            pg_sys::random_page_cost,
            pg_sys::seq_page_cost,
            pg_sys::cpu_operator_cost,
            pg_sys::cpu_index_tuple_cost,
        )
    };
    // One random read to reach each list, then its chain (mostly consecutive pages).
    PathCost {
        cost: random_page * probes
            + seq_page * read_pages
            + operator * (lists + read_tuples * 4.0)
            + index_tuple * read_tuples,
        pages: read_pages,
    }
}
