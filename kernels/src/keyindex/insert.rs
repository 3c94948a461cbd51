//! One new key: filed under its nearest centroid.

use half::f16;

use super::format::{ListRef, Meta};
use super::lists::{append, code_entry, directory_slot, key_entry, read_list_ref, write_list_ref};
use super::search::Centroids;
use crate::layout::{Corrupt, InBlock, Tid};
use crate::page::PageWrite;

/// Adds (`tid`, `key`) to the list of the centroid nearest `key`: the key to its key pages,
/// then its code (naming the key page) to its code pages.
///
/// Lock order, which VACUUM keeps too: the list's directory page (held to the end, so inserts
/// into its lists queue), then one list page at a time, then a new page. A crash between the
/// page writes leaves at worst a directory tail that is not the last page (the next insert
/// follows the chain from there), or a key without its code: its transaction did not commit,
/// so no scan may return it, and VACUUM removes it. Every list page is checked to be a list
/// page before it is locked (never the directory page held, which would wait on itself) and
/// visited once.
pub fn insert<S: PageWrite>(
    store: &S,
    meta: &Meta,
    centroids: &Centroids,
    tid: Tid,
    key: &[f16],
) -> Result<(), Corrupt> {
    centroids.check_dim(meta, key)?;
    let list = centroids.nearest(key);
    let (dir_block, offset) = directory_slot(store, meta, list)?;
    let mut dir = store.write(dir_block);
    let mut r: ListRef = read_list_ref(&dir, offset).in_block(dir_block)?;
    r.check(store, meta).in_block(dir_block)?;
    let before = r;
    let place = append(store, meta, meta.keys(), &mut r.keys, &key_entry(tid, key))?;
    if meta.code_size() > 0 {
        let code = centroids.code(list, key);
        append(
            store,
            meta,
            meta.codes(),
            &mut r.codes,
            &code_entry(tid, place, &code),
        )?;
    }
    if r != before {
        write_list_ref(&mut dir, offset, r);
    }
    Ok(())
}
