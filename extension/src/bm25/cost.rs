//! The planner's cost model: the index is only useful to produce `ORDER BY doc <&> query` order
//! (it has no searchable quals); then its work — the whole top-k — happens before the first row,
//! so startup cost is total cost.

use pgrx::pg_sys;

use crate::am::PathCost;

crate::am::amcostestimate!(top_k_cost);

/// A top-k query reads the dictionary path of each query term and part of its postings:
/// roughly logarithmic in the index plus a small fraction of it. (genericcostestimate would
/// also charge the ORDER BY operator per row, which an index scan never evaluates.)
fn top_k_cost(_path: *mut pg_sys::IndexPath, index_pages: f64, tuples: f64) -> PathCost {
    // SAFETY: reads of the planner's cost settings on the backend's thread.
    let (random_page, seq_page, index_tuple) = unsafe {
        (
            pg_sys::random_page_cost,
            pg_sys::seq_page_cost,
            pg_sys::cpu_index_tuple_cost,
        )
    };
    PathCost {
        cost: random_page * ((index_pages + 1.0).log2() + 1.0)
            + seq_page * index_pages * 0.05
            + index_tuple * tuples * 0.05,
        pages: index_pages,
    }
}
