//! List pages and the list directory: reading entries, appending, compacting.

use half::f16;

use super::format::{entries_per_page, list_refs_per_page, ListRef, Meta, LIST_REF_SIZE};
use crate::layout::{corrupt, ByteReader, ByteWriter, PageHeader, PageKind, Tid, HEADER_SIZE};
use crate::page::{BlockNumber, PageRead, PageWrite};

/// Where list `list`'s directory entry is: (block, byte offset).
pub fn directory_slot(meta: &Meta, page_size: usize, list: u32) -> (BlockNumber, usize) {
    if list >= meta.lists {
        corrupt(format_args!("list {list} of {}", meta.lists));
    }
    let per_page = list_refs_per_page(page_size) as u32;
    let page = list / per_page;
    if page >= meta.directory_pages {
        corrupt(format_args!(
            "list {list} is past the {} directory pages",
            meta.directory_pages
        ));
    }
    let offset = HEADER_SIZE + (list % per_page) as usize * LIST_REF_SIZE;
    (meta.directory_start + page, offset)
}

pub fn read_list_ref(page: &[u8], offset: usize) -> ListRef {
    PageHeader::read(page, PageKind::ListDirectory);
    ListRef::read(&mut ByteReader::new(page, offset))
}

pub fn write_list_ref(page: &mut [u8], offset: usize, r: ListRef) {
    r.write(&mut ByteWriter::new(page, offset));
}

/// The directory entry of `list`, read under a share lock.
pub fn list_ref<S: PageRead>(store: &S, meta: &Meta, list: u32) -> ListRef {
    let (block, offset) = directory_slot(meta, store.page_size(), list);
    read_list_ref(&store.read(block), offset)
}

/// A list page's header, checked against the page's capacity.
pub fn list_header(page: &[u8], meta: &Meta) -> PageHeader {
    let h = PageHeader::read(page, PageKind::KeyList);
    if h.count as usize > entries_per_page(page.len(), meta.dim as usize) {
        corrupt(format_args!("key list page claims {} entries", h.count));
    }
    h
}

/// Calls `f(tid, key)` for every entry of a list page.
pub fn for_each_entry(
    page: &[u8],
    meta: &Meta,
    scratch: &mut Vec<f16>,
    mut f: impl FnMut(Tid, &[f16]),
) {
    let h = list_header(page, meta);
    let size = meta.entry_size();
    let dim = meta.dim as usize;
    for i in 0..h.count as usize {
        let at = HEADER_SIZE + i * size;
        let tid = Tid::read(&mut ByteReader::new(page, at));
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
                debug_assert_eq!(scratch.len(), dim);
                f(tid, scratch)
            }
        }
    }
}

/// Formats a fresh list page.
pub fn init_list_page(page: &mut [u8]) {
    page.fill(0);
    PageHeader::new(PageKind::KeyList).write(page);
}

/// Appends an entry if the page has room.
pub fn try_append(page: &mut [u8], meta: &Meta, tid: Tid, key: &[f16]) -> bool {
    let mut h = list_header(page, meta);
    if h.count as usize >= entries_per_page(page.len(), meta.dim as usize) {
        return false;
    }
    if key.len() != meta.dim as usize {
        corrupt(format_args!(
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
    true
}

pub fn has_room(page: &[u8], meta: &Meta) -> bool {
    (list_header(page, meta).count as usize) < entries_per_page(page.len(), meta.dim as usize)
}

/// Removes the entries whose TID is in `dead`, keeping the others in order; returns how many went.
pub fn compact(page: &mut [u8], meta: &Meta, dead: &std::collections::HashSet<Tid>) -> usize {
    let mut h = list_header(page, meta);
    let size = meta.entry_size();
    let mut kept = 0usize;
    for i in 0..h.count as usize {
        let at = HEADER_SIZE + i * size;
        let tid = Tid::read(&mut ByteReader::new(page, at));
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
    removed
}

/// Allocates and formats a list page holding one entry.
pub fn new_page_with<S: PageWrite>(store: &S, meta: &Meta, tid: Tid, key: &[f16]) -> BlockNumber {
    let (block, mut page) = store.allocate();
    init_list_page(&mut page);
    if !try_append(&mut page, meta, tid, key) {
        corrupt("an empty key list page has no room for one entry");
    }
    block
}

/// Entries and pages of every list (for statistics).
pub fn list_lengths<S: PageRead>(store: &S, meta: &Meta) -> Vec<(u64, u64)> {
    (0..meta.lists)
        .map(|list| {
            let mut block = list_ref(store, meta, list).head;
            let (mut entries, mut pages) = (0u64, 0u64);
            while block != crate::page::NO_BLOCK {
                let page = store.read(block);
                let h = list_header(&page, meta);
                entries += h.count as u64;
                pages += 1;
                block = h.next;
            }
            (entries, pages)
        })
        .collect()
}
