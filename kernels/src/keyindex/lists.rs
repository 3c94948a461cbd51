//! List pages and the list directory: reading entries, appending, compacting.
//!
//! Every reader checks what it relies on: a directory slot exists on its page, a list page's
//! count fits the page and agrees with its bytes in use, and every link is a list page (see
//! [`Meta::list_block`]) visited once per walk ([`Chain`]).

use half::f16;

use super::format::{
    entries_per_page, list_refs_per_page, ListRef, Meta, LIST_REF_SIZE, META_BLOCK,
};
use crate::layout::{
    corrupt, ByteReader, ByteWriter, Corrupt, InBlock, PageHeader, PageKind, Tid, HEADER_SIZE,
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

/// A walk along one list (its pages come after the fixed areas).
pub fn list_chain(meta: &Meta) -> Chain {
    Chain::new("a key list", meta.first_list_block())
}

/// A list page's header, checked against the page's capacity and its bytes in use (entries are
/// packed from the header on, so the two always agree).
pub fn list_header(page: &[u8], meta: &Meta) -> Result<PageHeader, Corrupt> {
    let h = PageHeader::read(page, PageKind::KeyList)?;
    let count = h.count as usize;
    if count > entries_per_page(page.len(), meta.dim as usize)
        || h.used as usize != HEADER_SIZE + count * meta.entry_size()
    {
        return corrupt(format_args!(
            "key list page claims {} entries in {} bytes",
            h.count, h.used
        ));
    }
    Ok(h)
}

/// Calls `f(tid, key)` for every entry of a list page.
pub fn for_each_entry(
    page: &[u8],
    meta: &Meta,
    scratch: &mut Vec<f16>,
    mut f: impl FnMut(Tid, &[f16]),
) -> Result<(), Corrupt> {
    let h = list_header(page, meta)?;
    let size = meta.entry_size();
    for i in 0..h.count as usize {
        // In bounds: `list_header` checked count · size fits the page.
        let at = HEADER_SIZE + i * size;
        let tid = Tid::read(&mut ByteReader::new(page, at))?;
        let bytes = &page[at + 8..at + size];
        // Pages are at least 2-byte aligned in Postgres; copy when a test buffer is not.
        match bytemuck::try_cast_slice::<u8, f16>(bytes) {
            Ok(key) => f(tid, key),
            Err(_) => {
                scratch.clear();
                scratch.extend(
                    bytes
                        .chunks_exact(2)
                        .map(|b| f16::from_le_bytes([b[0], b[1]])),
                );
                f(tid, scratch)
            }
        }
    }
    Ok(())
}

/// Formats a fresh list page.
pub fn init_list_page(page: &mut [u8]) {
    page.fill(0);
    PageHeader::new(PageKind::KeyList).write(page);
}

/// Appends an entry if the page has room.
pub fn try_append(page: &mut [u8], meta: &Meta, tid: Tid, key: &[f16]) -> Result<bool, Corrupt> {
    let mut h = list_header(page, meta)?;
    if h.count as usize >= entries_per_page(page.len(), meta.dim as usize) {
        return Ok(false);
    }
    if key.len() != meta.dim as usize {
        // Keys are checked against the type's dimension before they get here: the metapage
        // is what disagrees.
        return corrupt(format_args!(
            "a key of {} dimensions for a {}-d index",
            key.len(),
            meta.dim
        ));
    }
    let at = HEADER_SIZE + h.count as usize * meta.entry_size();
    let mut w = ByteWriter::new(page, at);
    tid.write(&mut w);
    w.u16(0);
    w.bytes(bytemuck::cast_slice(key));
    h.count += 1;
    h.used = (at + meta.entry_size()) as u16;
    h.write(page);
    Ok(true)
}

pub fn has_room(page: &[u8], meta: &Meta) -> Result<bool, Corrupt> {
    Ok((list_header(page, meta)?.count as usize) < entries_per_page(page.len(), meta.dim as usize))
}

/// Removes the entries whose TID is in `dead`, keeping the others in order; returns how many went.
pub fn compact(
    page: &mut [u8],
    meta: &Meta,
    dead: &std::collections::HashSet<Tid>,
) -> Result<usize, Corrupt> {
    let mut h = list_header(page, meta)?;
    let size = meta.entry_size();
    let mut kept = 0usize;
    for i in 0..h.count as usize {
        let at = HEADER_SIZE + i * size;
        let tid = Tid::read(&mut ByteReader::new(page, at))?;
        if dead.contains(&tid) {
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
    meta: &Meta,
    tid: Tid,
    key: &[f16],
) -> Result<BlockNumber, Corrupt> {
    let (block, mut page) = store.allocate();
    init_list_page(&mut page);
    if !try_append(&mut page, meta, tid, key)? {
        // `Meta::check_layout` made sure an entry fits a page.
        return corrupt("an empty key list page has no room for one entry");
    }
    Ok(block)
}

/// Entries and pages of every list (for statistics).
pub fn list_lengths<S: PageRead>(store: &S, meta: &Meta) -> Result<Vec<(u64, u64)>, Corrupt> {
    (0..meta.lists)
        .map(|list| {
            let mut chain = list_chain(meta);
            let mut block = list_ref(store, meta, list)?.head;
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
