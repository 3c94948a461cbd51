//! amcostestimate: cheap for `ORDER BY key <op> $1` (it reads `probes` lists), never chosen for
//! anything else (the index answers no WHERE clause).

use pgrx::pg_sys;

use crate::am::PathCost;
use crate::storage::{BufferStore, Mode};

crate::am::amcostestimate!(probe_cost);

/// The probes of `ORDER BY key <op> q` when `q` is a constant `skills.keyquery` with a breadth
/// (how Citus sends a search's query to the shards: their sessions do not have the
/// coordinator's settings). None for anything else (a plain key, a parameter).
///
/// SAFETY: `path` is the planner's IndexPath for an skeys index.
unsafe fn carried_probes(path: *mut pg_sys::IndexPath) -> Option<i32> {
    let orderbys = (*path).indexorderbys;
    if orderbys.is_null() || (*orderbys).length < 1 {
        return None;
    }
    let first = (*(*orderbys).elements).ptr_value as *mut pg_sys::Node;
    if first.is_null() || (*first).type_ != pg_sys::NodeTag::T_OpExpr {
        return None;
    }
    let args = (*(first as *mut pg_sys::OpExpr)).args;
    if args.is_null() || (*args).length != 2 {
        return None;
    }
    // The index key is the left operand of an index ORDER BY; the query the right one.
    let query = (*(*args).elements.add(1)).ptr_value as *mut pg_sys::Node;
    if query.is_null() || (*query).type_ != pg_sys::NodeTag::T_Const {
        return None;
    }
    let query = query as *mut pg_sys::Const;
    if (*query).constisnull || !pg_sys::type_is_rowtype((*query).consttype) {
        return None;
    }
    crate::key::query::KeyQuery::from_datum((*query).constvalue)?.probes
}

/// The lists of the index `oid`, from its metapage (as pgvector's IVFFlat estimate reads its
/// own): `WITH (lists = ...)` and the default both decide them at build time.
fn lists_of(oid: pg_sys::Oid) -> u32 {
    // SAFETY: the planner holds a lock on the indexes of the relations it plans (taken in
    // get_relation_info), so NoLock opens it; the relation is closed before returning.
    unsafe {
        let index = pg_sys::index_open(oid, pg_sys::NoLock as pg_sys::LOCKMODE);
        let store = BufferStore::new(index, Mode::Logged);
        let lists = super::checked_meta(&store, index).lists;
        drop(store);
        pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        lists
    }
}

/// The index's lists (its metapage); a scan reads `probes` of them: the breadth a constant
/// `skills.keyquery` carries, else the session's.
fn probe_cost(path: *mut pg_sys::IndexPath, index_pages: f64, tuples: f64) -> PathCost {
    // SAFETY: the planner's path for this index, with its IndexOptInfo.
    let (index, carried) = unsafe { ((*(*path).indexinfo).indexoid, carried_probes(path)) };
    let lists = lists_of(index).max(1) as f64;
    let probes = carried.unwrap_or_else(|| crate::guc::KEY_PROBES.get());
    let probes = (probes.max(1) as f64).min(lists);
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
