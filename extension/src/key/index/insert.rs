//! aminsert: one key into the list of its nearest centroid (see `keyindex::insert`).

use pgrx::pg_sys;

use pg_skills_kernels::keyindex::insert;
use pg_skills_kernels::layout::Tid;

use super::{centroids, checked_meta};
use crate::key::datatype::Key;
use crate::storage::{BufferStore, Mode, OrRaise};

crate::am::aminsert!(insert_key);

unsafe fn insert_key(index: pg_sys::Relation, value: pg_sys::Datum, tid: Tid) {
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let centroids = centroids(&store, index, &meta);
    let key = Key::from_datum(value);
    let mut scratch = Vec::new();
    insert(&store, &meta, &centroids, tid, key.values(&mut scratch)).or_raise(index);
}
