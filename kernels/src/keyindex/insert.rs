//! One new key: filed under its nearest centroid.

use half::f16;

use super::format::{ListRef, Meta};
use super::lists::{
    directory_slot, has_room, list_chain, list_header, new_page_with, read_list_ref, try_append,
    write_list_ref,
};
use super::search::Centroids;
use crate::layout::{Corrupt, InBlock, Tid};
use crate::page::{PageWrite, NO_BLOCK};

/// Adds (`tid`, `key`) to the list of the centroid nearest `key`.
///
/// Lock order, which VACUUM keeps too: the list's directory page (held to the end, so inserts
/// into its lists queue), then one list page at a time, then a new page. A crash between the
/// page writes leaves at worst a directory tail that is not the last page: the next insert
/// follows the chain from there. Every list page is checked to be a list page before it is
/// locked (never the directory page held, which would wait on itself) and visited once.
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

    if r.head == NO_BLOCK {
        let block = new_page_with(store, meta, tid, key)?;
        r.head = block;
        r.tail = block;
        write_list_ref(&mut dir, offset, r);
        return Ok(());
    }
    // Pages VACUUM left room in come first: the walk starts at the free-space page and moves
    // it forward past full pages, so over a VACUUM cycle each page is passed once. Past the
    // last of them it is the tail (or a newer tail the directory missed).
    let before = r;
    let mut chain = list_chain(meta);
    let mut block = if r.free != NO_BLOCK { r.free } else { r.tail };
    loop {
        chain.visit(store, block)?;
        let mut page = store.write(block);
        let mut h = list_header(&page, meta).in_block(block)?;
        if try_append(&mut page, meta, tid, key).in_block(block)? {
            if h.next == NO_BLOCK {
                r.tail = block;
                r.free = NO_BLOCK;
            } else if r.free != NO_BLOCK {
                r.free = if has_room(&page, meta)? {
                    block
                } else {
                    h.next
                };
            }
            break;
        }
        if h.next != NO_BLOCK {
            block = h.next;
            if r.free != NO_BLOCK {
                r.free = block;
            }
            continue;
        }
        let new = new_page_with(store, meta, tid, key)?;
        h = list_header(&page, meta).in_block(block)?;
        h.next = new;
        h.write(&mut page);
        r.tail = new;
        r.free = NO_BLOCK;
        break;
    }
    if r != before {
        write_list_ref(&mut dir, offset, r);
    }
    Ok(())
}
