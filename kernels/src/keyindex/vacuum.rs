//! VACUUM: dead entries leave their pages; pages with room become the lists' free pages.

use std::collections::HashSet;

use super::format::Meta;
use super::lists::{
    compact, directory_slot, for_each_entry, has_room, list_chain, list_header, list_ref,
    read_list_ref, write_list_ref,
};
use crate::layout::{Corrupt, InBlock, Tid};
use crate::page::{PageWrite, NO_BLOCK};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VacuumStats {
    pub removed: u64,
    pub remaining: u64,
    pub pages: u64,
}

/// Removes every entry whose TID `is_dead` says is dead (asked once per entry), calling
/// `progress` once per page (the extension's vacuum_delay_point). Holds one page lock at a time.
pub fn bulk_delete<S: PageWrite>(
    store: &S,
    meta: &Meta,
    mut is_dead: impl FnMut(Tid) -> bool,
    mut progress: impl FnMut(),
) -> Result<VacuumStats, Corrupt> {
    let mut stats = VacuumStats::default();
    let mut scratch = Vec::new();
    for list in 0..meta.lists {
        let mut chain = list_chain(meta);
        let mut block = list_ref(store, meta, list)?.head;
        let mut first_with_room = NO_BLOCK;
        while block != NO_BLOCK {
            chain.visit(store, block)?;
            progress();
            let mut dead = HashSet::new();
            let mut live = 0u64;
            let next = {
                let page = store.read(block);
                for_each_entry(&page, meta, &mut scratch, |tid, _| {
                    if is_dead(tid) {
                        dead.insert(tid);
                    } else {
                        live += 1;
                    }
                })
                .in_block(block)?;
                list_header(&page, meta).in_block(block)?.next
            };
            let room = if dead.is_empty() {
                has_room(&store.read(block), meta).in_block(block)?
            } else {
                let mut page = store.write(block);
                stats.removed += compact(&mut page, meta, &dead).in_block(block)? as u64;
                has_room(&page, meta).in_block(block)?
            };
            if room && first_with_room == NO_BLOCK && next != NO_BLOCK {
                first_with_room = block;
            }
            stats.remaining += live;
            stats.pages += 1;
            block = next;
        }
        if first_with_room != NO_BLOCK {
            let (dir_block, offset) = directory_slot(store, meta, list)?;
            let mut dir = store.write(dir_block);
            let mut r = read_list_ref(&dir, offset).in_block(dir_block)?;
            if r.free == NO_BLOCK {
                r.free = first_with_room;
                write_list_ref(&mut dir, offset, r);
            }
        }
    }
    Ok(stats)
}
