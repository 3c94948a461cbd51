//! aminsert: one key into the list of its nearest centroid (see `keyindex::insert`).

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::keyindex::insert;

use super::{centroids, checked_meta, tid_of};
use crate::key::datatype::Key;
use crate::storage::{BufferStore, Mode, OrRaise};

#[pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn aminsert(
    index: pg_sys::Relation,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    heap_tid: pg_sys::ItemPointer,
    _heap: pg_sys::Relation,
    _check_unique: pg_sys::IndexUniqueCheck::Type,
    _index_unchanged: bool,
    _index_info: *mut pg_sys::IndexInfo,
) -> bool {
    if *isnull {
        return false;
    }
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let centroids = centroids(&store, index, &meta);
    let key = Key::from_datum(*values);
    let mut scratch = Vec::new();
    insert(
        &store,
        &meta,
        &centroids,
        tid_of(&*heap_tid),
        key.values(&mut scratch),
    )
    .or_raise(index);
    false
}
