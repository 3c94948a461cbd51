//! List pages (key pages and code pages, one chain of each per list) and the list directory:
//! reading entries, appending, compacting.
//!
//! Every reader checks what it relies on: a directory slot exists on its page, a list page's
//! count fits the page and agrees with its bytes in use, and every link is a list page (see
//! [`Meta::list_block`]) visited once per walk ([`Chain`]).

use half::f16;

use super::format::{
    list_refs_per_page, ChainRef, Layout, ListRef, Meta, LIST_REF_SIZE, META_BLOCK,
};
use crate::layout::{
    corrupt, le_u16, le_u32, ByteReader, ByteWriter, Corrupt, InBlock, PageHeader, PageKind, Tid,
    HEADER_SIZE,
};
use crate::page::{check_block, BlockNumber, Chain, PageRead, PageWrite, NO_BLOCK};

/// Where list `list`'s directory entry is: (block, byte offset). The block is checked to be
/// a page of the relation, whether or not `meta` went through [`Meta::load`].
pub fn directory_slot<S: PageRead>(
    store: &S,
    meta: &Meta,
    list: u32,
) -> Result<(BlockNumber, usize), Corrupt> {
    if list >= meta.lists {
        return corrupt(format_args!("list {list} of {}", meta.lists));
    }
    let per_page = list_refs_per_page(store.page_size()) as u32;
    let page = list / per_page;
    if page >= meta.directory_pages {
        return corrupt(format_args!(
            "list {list} is past the {} directory pages",
            meta.directory_pages
        ));
    }
    let offset = HEADER_SIZE + (list % per_page) as usize * LIST_REF_SIZE;
    let block = meta.directory_start.saturating_add(page);
    check_block(store, block, META_BLOCK + 1, "a list directory page")?;
    Ok((block, offset))
}

/// The directory entry at `offset`, which the page's count must cover.
pub fn read_list_ref(page: &[u8], offset: usize) -> Result<ListRef, Corrupt> {
    let header = PageHeader::read(page, PageKind::ListDirectory)?;
    header.check_count(LIST_REF_SIZE)?;
    let slot = (offset - HEADER_SIZE) / LIST_REF_SIZE;
    if slot >= header.count as usize {
        return corrupt(format_args!(
            "directory page holds {} lists, not slot {slot}",
            header.count
        ));
    }
    ListRef::read(&mut ByteReader::new(&page[..header.used as usize], offset))
}

pub fn write_list_ref(page: &mut [u8], offset: usize, r: ListRef) {
    r.write(&mut ByteWriter::new(page, offset));
}

/// The directory entry of `list`, read under a share lock and checked.
pub fn list_ref<S: PageRead>(store: &S, meta: &Meta, list: u32) -> Result<ListRef, Corrupt> {
    let (block, offset) = directory_slot(store, meta, list)?;
    let r = read_list_ref(&store.read(block), offset).in_block(block)?;
    r.check(store, meta).in_block(block)?;
    Ok(r)
}

/// A walk along one list's chain (its pages come after the fixed areas).
pub fn list_chain(meta: &Meta) -> Chain {
    Chain::new("a key list", meta.first_list_block())
}

/// A list page's header (`layout`: key or code page), checked against the page's capacity and
/// its bytes in use (entries are packed from the header on, so the two always agree).
pub fn chain_header(page: &[u8], layout: Layout) -> Result<PageHeader, Corrupt> {
    let h = PageHeader::read(page, layout.kind)?;
    let count = h.count as usize;
    if count > layout.per_page(page.len()) || h.used as usize != HEADER_SIZE + count * layout.size {
        return corrupt(format_args!(
            "key list page claims {} entries in {} bytes",
            h.count, h.used
        ));
    }
    Ok(h)
}

/// A key page's header, checked.
pub fn list_header(page: &[u8], meta: &Meta) -> Result<PageHeader, Corrupt> {
    chain_header(page, meta.keys())
}

/// Calls `f(tid, key)` for every entry of a key page. The key is borrowed in place.
pub fn for_each_entry(
    page: &[u8],
    meta: &Meta,
    scratch: &mut Vec<f16>,
    mut f: impl FnMut(Tid, &[f16]),
) -> Result<(), Corrupt> {
    let h = list_header(page, meta)?;
    for i in 0..h.count as usize {
        let tid = entry_tid(page, meta, i)?;
        f(tid, entry_key(page, meta, i, scratch));
    }
    Ok(())
}

/// The TID of key entry `i`, which `list_header` checked the page holds.
fn entry_tid(page: &[u8], meta: &Meta, i: usize) -> Result<Tid, Corrupt> {
    Tid::read(&mut ByteReader::new(
        page,
        HEADER_SIZE + i * meta.entry_size(),
    ))
}

/// The key of key entry `i`, which `list_header` checked the page holds.
fn entry_key<'a>(page: &'a [u8], meta: &Meta, i: usize, scratch: &'a mut Vec<f16>) -> &'a [f16] {
    let at = HEADER_SIZE + i * meta.entry_size();
    let bytes = &page[at + 8..at + meta.entry_size()];
    // Pages are at least 2-byte aligned in Postgres; copy when a test buffer is not.
    match bytemuck::try_cast_slice::<u8, f16>(bytes) {
        Ok(key) => key,
        Err(_) => {
            scratch.clear();
            scratch.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| f16::from_le_bytes([b[0], b[1]])),
            );
            scratch
        }
    }
}

/// Calls `f(tid, key)` for every entry of list `list`'s key pages, in chain order; returns
/// the pages read.
pub fn for_each_list_key<S: PageRead>(
    store: &S,
    meta: &Meta,
    list: u32,
    scratch: &mut Vec<f16>,
    mut f: impl FnMut(Tid, &[f16]),
) -> Result<usize, Corrupt> {
    let mut chain = list_chain(meta);
    let mut block = list_ref(store, meta, list)?.keys.head;
    while block != NO_BLOCK {
        chain.visit(store, block)?;
        let page = store.read(block);
        let next = list_header(&page, meta).in_block(block)?.next;
        for_each_entry(&page, meta, scratch, &mut f).in_block(block)?;
        block = next;
    }
    Ok(chain.len())
}

/// Where a key entry is: its page and its position there when it was filed (VACUUM may have
/// moved it down the page since, never to another page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub block: BlockNumber,
    pub slot: u16,
}

/// Calls `f(tid, place of its key, code)` for every entry of a code page.
pub fn for_each_code(
    page: &[u8],
    meta: &Meta,
    mut f: impl FnMut(Tid, Place, &[u8]),
) -> Result<(), Corrupt> {
    let layout = meta.codes();
    let h = chain_header(page, layout)?;
    if layout.size < CODE_ENTRY_FIXED {
        return corrupt(format_args!("code entries of {} bytes", layout.size));
    }
    // `chain_header` checked that the entries fill the page's used bytes exactly, so each
    // entry's fields are read at fixed offsets, not checked one by one (a scan parses hundreds).
    for entry in page[HEADER_SIZE..h.used as usize].chunks_exact(layout.size) {
        let (fixed, code) = entry.split_at(CODE_ENTRY_FIXED);
        let tid = Tid::from_bytes(fixed[..Tid::SIZE].try_into().expect("6 bytes"));
        let slot = le_u16(fixed, 6);
        let block = le_u32(fixed, 8);
        f(tid, Place { block, slot }, code);
    }
    Ok(())
}

/// The exact distance to `query` of the key of `tid` on this key page, looked for at `slot`
/// first (None: not on the page).
pub fn distance_on_page(
    page: &[u8],
    meta: &Meta,
    tid: Tid,
    slot: u16,
    query: &crate::vector::WideQuery,
    scratch: &mut Vec<f16>,
) -> Result<Option<f64>, Corrupt> {
    let count = list_header(page, meta)?.count as usize;
    let slot = slot as usize;
    let others = (0..count).filter(|&i| i != slot);
    for i in (slot < count).then_some(slot).into_iter().chain(others) {
        if entry_tid(page, meta, i)? == tid {
            let key = entry_key(page, meta, i, scratch);
            return Ok(Some(meta.metric.distance_to(query, key)));
        }
    }
    Ok(None)
}

/// The bytes of a key entry.
pub fn key_entry(tid: Tid, key: &[f16]) -> Vec<u8> {
    let mut entry = vec![0u8; 8 + 2 * key.len()];
    let mut w = ByteWriter::new(&mut entry, 0);
    tid.write(&mut w);
    w.u16(0);
    w.bytes(bytemuck::cast_slice(key));
    entry
}

/// Bytes of a code entry before its code: the key's TID, the slot and page its key went to.
const CODE_ENTRY_FIXED: usize = 12;

/// The bytes of a code entry: the key's TID, the slot and page its key went to, its code.
pub fn code_entry(tid: Tid, key: Place, code: &[u8]) -> Vec<u8> {
    let mut entry = vec![0u8; CODE_ENTRY_FIXED + code.len()];
    let mut w = ByteWriter::new(&mut entry, 0);
    tid.write(&mut w);
    w.u16(key.slot);
    w.u32(key.block);
    w.bytes(code);
    entry
}

/// Formats a fresh list page of `layout`'s kind.
pub fn init_list_page(page: &mut [u8], layout: Layout) {
    page.fill(0);
    PageHeader::new(layout.kind).write(page);
}

/// Appends an entry of `layout` if the page has room; returns its slot.
pub fn try_append(page: &mut [u8], layout: Layout, entry: &[u8]) -> Result<Option<u16>, Corrupt> {
    let mut h = chain_header(page, layout)?;
    if h.count as usize >= layout.per_page(page.len()) {
        return Ok(None);
    }
    if entry.len() != layout.size {
        // Keys are checked against the type's dimension before they get here: the metapage
        // is what disagrees.
        return corrupt(format_args!(
            "an entry of {} bytes for a page of {}-byte entries",
            entry.len(),
            layout.size
        ));
    }
    let slot = h.count;
    let at = HEADER_SIZE + slot as usize * layout.size;
    page[at..at + layout.size].copy_from_slice(entry);
    h.count += 1;
    h.used = (at + layout.size) as u16;
    h.write(page);
    Ok(Some(slot))
}

pub fn has_room(page: &[u8], layout: Layout) -> Result<bool, Corrupt> {
    Ok((chain_header(page, layout)?.count as usize) < layout.per_page(page.len()))
}

/// Removes the entries whose TID `is_dead` says is dead, keeping the others in order (entries
/// never move to another page); returns how many went.
pub fn compact(
    page: &mut [u8],
    layout: Layout,
    mut is_dead: impl FnMut(Tid) -> bool,
) -> Result<usize, Corrupt> {
    let mut h = chain_header(page, layout)?;
    let size = layout.size;
    let mut kept = 0usize;
    for i in 0..h.count as usize {
        let at = HEADER_SIZE + i * size;
        let tid = Tid::read(&mut ByteReader::new(page, at))?;
        if is_dead(tid) {
            continue;
        }
        if kept != i {
            page.copy_within(at..at + size, HEADER_SIZE + kept * size);
        }
        kept += 1;
    }
    let removed = h.count as usize - kept;
    let end = HEADER_SIZE + kept * size;
    page[end..HEADER_SIZE + h.count as usize * size].fill(0);
    h.count = kept as u16;
    h.used = end as u16;
    h.write(page);
    Ok(removed)
}

/// Allocates and formats a list page holding one entry.
pub fn new_page_with<S: PageWrite>(
    store: &S,
    layout: Layout,
    entry: &[u8],
) -> Result<BlockNumber, Corrupt> {
    let (block, mut page) = store.allocate();
    init_list_page(&mut page, layout);
    if try_append(&mut page, layout, entry)?.is_none() {
        // `Meta::check_layout` made sure an entry fits a page.
        return corrupt("an empty key list page has no room for one entry");
    }
    Ok(block)
}

/// Appends `entry` to the chain `r` of `layout` pages: into the page VACUUM left room in, else
/// the tail, else a new page linked after the tail. Returns where it went; `r` is
/// updated for the caller to write back. The caller holds the list's directory page; one
/// chain page is locked at a time, each checked to be a list page and visited once.
pub fn append<S: PageWrite>(
    store: &S,
    meta: &Meta,
    layout: Layout,
    r: &mut ChainRef,
    entry: &[u8],
) -> Result<Place, Corrupt> {
    if r.head == NO_BLOCK {
        let block = new_page_with(store, layout, entry)?;
        *r = ChainRef {
            head: block,
            tail: block,
            free: NO_BLOCK,
        };
        return Ok(Place { block, slot: 0 });
    }
    // Pages VACUUM left room in come first: the walk starts at the free-space page and moves
    // it forward past full pages, so over a VACUUM cycle each page is passed once. Past the
    // last of them it is the tail (or a newer tail the directory missed).
    let mut chain = list_chain(meta);
    let mut block = if r.free != NO_BLOCK { r.free } else { r.tail };
    loop {
        chain.visit(store, block)?;
        let mut page = store.write(block);
        let mut h = chain_header(&page, layout).in_block(block)?;
        if let Some(slot) = try_append(&mut page, layout, entry).in_block(block)? {
            if h.next == NO_BLOCK {
                r.tail = block;
                r.free = NO_BLOCK;
            } else if r.free != NO_BLOCK {
                r.free = if has_room(&page, layout)? {
                    block
                } else {
                    h.next
                };
            }
            return Ok(Place { block, slot });
        }
        if h.next != NO_BLOCK {
            block = h.next;
            if r.free != NO_BLOCK {
                r.free = block;
            }
            continue;
        }
        let new = new_page_with(store, layout, entry)?;
        h = chain_header(&page, layout).in_block(block)?;
        h.next = new;
        h.write(&mut page);
        r.tail = new;
        r.free = NO_BLOCK;
        return Ok(Place {
            block: new,
            slot: 0,
        });
    }
}

/// Entries and pages of every list's key chain (for statistics).
pub fn list_lengths<S: PageRead>(store: &S, meta: &Meta) -> Result<Vec<(u64, u64)>, Corrupt> {
    (0..meta.lists)
        .map(|list| {
            let mut chain = list_chain(meta);
            let mut block = list_ref(store, meta, list)?.keys.head;
            let mut entries = 0u64;
            while block != NO_BLOCK {
                chain.visit(store, block)?;
                let page = store.read(block);
                let h = list_header(&page, meta).in_block(block)?;
                entries += h.count as u64;
                block = h.next;
            }
            Ok((entries, chain.len() as u64))
        })
        .collect()
}
