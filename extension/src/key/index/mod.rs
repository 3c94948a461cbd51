//! The `skeys` index access method: Postgres callbacks over `pg_skills_kernels::keyindex`.
//!
//! One file per phase, as for bm25: `build.rs`, `insert.rs`, `scan.rs`, `vacuum.rs`, `cost.rs`,
//! `options.rs`; `stats.rs` has `skills.key_index_stats` and `skills.key_recall`. Pages go through
//! `crate::storage` (generic WAL). No heavyweight locks: pages are never freed, so buffer locks
//! are enough (see the kernel module's notes).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};

use pg_skills_kernels::keyindex::format::META_BLOCK;
use pg_skills_kernels::keyindex::{Centroids, Meta, Metric};
use pg_skills_kernels::page::{Corrupt, PageRead};

use crate::am::relation_name;
use crate::errors::raise;
use crate::key::datatype::KEY_DIM;
use crate::storage::{index_corrupted, OrRaise};

mod build;
mod cost;
mod insert;
pub mod options;
pub mod scan;
mod stats;
mod vacuum;

/// Strategy numbers of the three operator classes (sql/keys.sql).
const STRATEGY_IP: u16 = 1;
const STRATEGY_COSINE: u16 = 2;
const STRATEGY_L2: u16 = 3;

pub fn metric_of_strategy(strategy: u16) -> Option<Metric> {
    match strategy {
        STRATEGY_IP => Some(Metric::InnerProduct),
        STRATEGY_COSINE => Some(Metric::Cosine),
        STRATEGY_L2 => Some(Metric::L2),
        _ => None,
    }
}

#[pg_extern(sql = false)]
fn skeys_handler(_fcinfo: pg_sys::FunctionCallInfo) -> PgBox<pg_sys::IndexAmRoutine> {
    crate::am::ordering_am(3, |am| crate::am::phase_callbacks!(am))
}

/// The metric of the index's operator class (the one ordering operator its family has).
pub fn metric_of_index(index: pg_sys::Relation) -> Metric {
    unsafe {
        let family = *(*index).rd_opfamily;
        let keytype = *(*index).rd_opcintype;
        for strategy in [STRATEGY_IP, STRATEGY_COSINE, STRATEGY_L2] {
            let op = pg_sys::get_opfamily_member(family, keytype, keytype, strategy as i16);
            if op != pg_sys::InvalidOid {
                return metric_of_strategy(strategy).expect("known strategy");
            }
        }
    }
    raise(
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        format!(
            "index \"{}\" has no skills.key distance operator",
            relation_name(index)
        ),
        Some("Use skills.key_ip_ops, skills.key_cosine_ops or skills.key_l2_ops."),
    )
}

/// The metapage, checked against the relation (see [`Meta::load`]) and against the key type:
/// an ERROR naming REINDEX when the index has another on-disk format or is damaged.
pub fn checked_meta<S: PageRead>(store: &S, index: pg_sys::Relation) -> Meta {
    let meta = Meta::load(store).or_raise(index);
    if meta.dim as usize != KEY_DIM {
        // Every skills.key has KEY_DIM dimensions; distance kernels need equal lengths.
        let e = Corrupt::new(format_args!("metapage says {}-d keys", meta.dim));
        index_corrupted(index, &e.in_block(META_BLOCK));
    }
    meta
}

thread_local! {
    /// Centroids per index file: they never change after a build, and a rebuild writes a new
    /// build id, so (file, build id) identifies them.
    static CENTROIDS: RefCell<HashMap<u32, Rc<Centroids>>> = RefCell::new(HashMap::new());
}

pub fn centroids<S: PageRead>(store: &S, index: pg_sys::Relation, meta: &Meta) -> Rc<Centroids> {
    let file = unsafe { (*index).rd_node.relNode.to_u32() };
    CENTROIDS.with(|cell| {
        let mut map = cell.borrow_mut();
        if let Some(c) = map.get(&file) {
            if c.build_id == meta.build_id {
                return c.clone();
            }
        }
        let c = Rc::new(Centroids::load(store, meta).or_raise(index));
        map.insert(file, c.clone());
        c
    })
}

/// [`crate::am::open_index_of`] for skeys indexes.
pub fn open_key_index(oid: pg_sys::Oid) -> pg_sys::Relation {
    crate::am::open_index_of(oid, "skeys", "Name an index built USING skeys.")
}
