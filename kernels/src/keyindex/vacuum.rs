//! VACUUM: dead entries leave their pages (key pages and code pages alike); pages with room
//! become their chain's free page.

use std::collections::HashMap;

use super::format::{ChainRef, Layout, Meta};
use super::lists::{
    chain_header, compact, directory_slot, has_room, list_chain, list_ref, read_list_ref,
    write_list_ref,
};
use crate::layout::{ByteReader, Corrupt, InBlock, Tid, HEADER_SIZE};
use crate::page::{BlockNumber, PageWrite, NO_BLOCK};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VacuumStats {
    /// Key entries removed and kept (each key's code goes with it).
    pub removed: u64,
    pub remaining: u64,
    /// Pages visited, key and code pages.
    pub pages: u64,
}

/// Removes every entry whose TID `is_dead` says is dead (asked once per key; a code goes with
/// its key, and one without a key, left by a crashed insert, is asked about on its own),
/// calling `progress` once per page (the extension's vacuum_delay_point). Holds one page lock
/// at a time.
pub fn bulk_delete<S: PageWrite>(
    store: &S,
    meta: &Meta,
    mut is_dead: impl FnMut(Tid) -> bool,
    mut progress: impl FnMut(),
) -> Result<VacuumStats, Corrupt> {
    let mut stats = VacuumStats::default();
    for list in 0..meta.lists {
        let r = list_ref(store, meta, list)?;
        // What the callback said of each key of this list, for its code.
        let mut verdicts = HashMap::new();
        let keys = vacuum_chain(store, meta, meta.keys(), r.keys, &mut progress, |tid| {
            *verdicts.entry(tid).or_insert_with(|| is_dead(tid))
        })?;
        stats.removed += keys.removed;
        stats.remaining += keys.remaining;
        stats.pages += keys.pages;
        let codes =
            vacuum_chain(
                store,
                meta,
                meta.codes(),
                r.codes,
                &mut progress,
                |tid| match verdicts.get(&tid) {
                    Some(&dead) => dead,
                    None => is_dead(tid),
                },
            )?;
        stats.pages += codes.pages;
        if keys.room == NO_BLOCK && codes.room == NO_BLOCK {
            continue;
        }
        let (dir_block, offset) = directory_slot(store, meta, list)?;
        let mut dir = store.write(dir_block);
        let mut r = read_list_ref(&dir, offset).in_block(dir_block)?;
        let before = r;
        for (chain, room) in [(&mut r.keys, keys.room), (&mut r.codes, codes.room)] {
            if chain.free == NO_BLOCK && room != NO_BLOCK {
                chain.free = room;
            }
        }
        if r != before {
            write_list_ref(&mut dir, offset, r);
        }
    }
    Ok(stats)
}

struct ChainStats {
    removed: u64,
    remaining: u64,
    pages: u64,
    /// The first page with room that is not the tail (NO_BLOCK: none).
    room: BlockNumber,
}

fn vacuum_chain<S: PageWrite>(
    store: &S,
    meta: &Meta,
    layout: Layout,
    chain_ref: ChainRef,
    progress: &mut impl FnMut(),
    mut is_dead: impl FnMut(Tid) -> bool,
) -> Result<ChainStats, Corrupt> {
    let mut stats = ChainStats {
        removed: 0,
        remaining: 0,
        pages: 0,
        room: NO_BLOCK,
    };
    let mut chain = list_chain(meta);
    let mut block = chain_ref.head;
    while block != NO_BLOCK {
        chain.visit(store, block)?;
        progress();
        // Asked under a share lock: the callback may take its time.
        let (dead, next) = {
            let page = store.read(block);
            let h = chain_header(&page, layout).in_block(block)?;
            let mut dead = Vec::new();
            for i in 0..h.count as usize {
                let tid = Tid::read(&mut ByteReader::new(&page, HEADER_SIZE + i * layout.size))
                    .in_block(block)?;
                if is_dead(tid) {
                    dead.push(tid);
                }
            }
            stats.remaining += h.count as u64 - dead.len() as u64;
            (dead, h.next)
        };
        let room = if dead.is_empty() {
            has_room(&store.read(block), layout).in_block(block)?
        } else {
            let mut page = store.write(block);
            stats.removed +=
                compact(&mut page, layout, |t| dead.contains(&t)).in_block(block)? as u64;
            has_room(&page, layout).in_block(block)?
        };
        if room && stats.room == NO_BLOCK && next != NO_BLOCK {
            stats.room = block;
        }
        stats.pages += 1;
        block = next;
    }
    Ok(stats)
}
