//! The term dictionary of a segment: a B-tree of sorted terms written bottom-up once.
//!
//! Leaves hold `term → TermInfo` in byte order, chained left to right (the merge walks them in
//! order); each upper level holds the first term of every page below. Lookups read one page per
//! level, so the dictionary does not grow with any term id, only with the vocabulary, and
//! logarithmically.
//!
//! After a page's entries comes its slot array: the offset of each entry (u16), so a lookup
//! binary-searches the page, touching a few of its entries instead of half of them.

use super::format::{
    check_non_negative, corrupt, ByteReader, ByteWriter, Corrupt, InBlock, PageHeader, PageKind,
    FIRST_DATA_BLOCK, HEADER_SIZE,
};
use crate::page::{BlockNumber, Chain, PageRead, PageWrite, NO_BLOCK};

/// Where a term's postings are and how large they can score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TermInfo {
    pub doc_freq: u32,
    pub postings_block: BlockNumber,
    pub postings_offset: u16,
    pub max_tf: f32,
    pub min_length: f32,
}

const LEAF_FIXED: usize = 1 + 4 + 4 + 2 + 4 + 4;
const INNER_FIXED: usize = 1 + 4;
const SLOT: usize = 2;
/// Levels a dictionary can have: a page stores its level in a u8.
pub const MAX_HEIGHT: u32 = u8::MAX as u32 + 1;

fn read_term<'a>(r: &mut ByteReader<'a>) -> Result<&'a [u8], Corrupt> {
    let len = r.u8()? as usize;
    r.bytes(len)
}

fn read_info(r: &mut ByteReader) -> Result<TermInfo, Corrupt> {
    let info = TermInfo {
        doc_freq: r.u32()?,
        postings_block: r.u32()?,
        postings_offset: r.u16()?,
        max_tf: check_non_negative(r.f32()?, "a term's max tf")?,
        min_length: check_non_negative(r.f32()?, "a term's min length")?,
    };
    if info.doc_freq == 0 || (info.postings_offset as usize) < HEADER_SIZE {
        return corrupt(format_args!(
            "a term with {} documents at offset {}",
            info.doc_freq, info.postings_offset
        ));
    }
    Ok(info)
}

fn check_height(height: u32) -> Result<(), Corrupt> {
    if height == 0 || height > MAX_HEIGHT {
        return corrupt(format_args!("a dictionary of height {height}"));
    }
    Ok(())
}

/// A dictionary page's header (checked to be at `level`) and a reader over its entries.
/// Returns a reader over its entries (the slot array after them left out).
fn level_page(page: &[u8], level: u32) -> Result<(PageHeader, ByteReader<'_>), Corrupt> {
    let header = PageHeader::read(page, PageKind::Dictionary)?;
    if header.level as u32 != level {
        return corrupt(format_args!(
            "dictionary page is at level {} instead of {level}",
            header.level
        ));
    }
    let min_entry = if level == 0 { LEAF_FIXED } else { INNER_FIXED };
    header.check_count(min_entry + SLOT)?;
    let entries_end = header.used as usize - SLOT * header.count as usize;
    Ok((header, ByteReader::new(&page[..entries_end], HEADER_SIZE)))
}

/// The `i`-th entry's term of a page [`level_page`] read, by its slot, and a reader after it.
fn slot_entry<'a>(
    page: &'a [u8],
    header: &PageHeader,
    i: usize,
) -> Result<(&'a [u8], ByteReader<'a>), Corrupt> {
    let count = header.count as usize;
    let entries_end = header.used as usize - SLOT * count;
    let at = entries_end + SLOT * i;
    let offset = u16::from_le_bytes([page[at], page[at + 1]]) as usize;
    if offset < HEADER_SIZE {
        return corrupt(format_args!(
            "dictionary slot {i} points at offset {offset}"
        ));
    }
    let mut r = ByteReader::new(&page[..entries_end], offset);
    Ok((read_term(&mut r)?, r))
}

/// How many of the page's terms are ≤ `term` (or < `term` when `strict`), by binary search
/// over its slots.
fn rank(page: &[u8], header: &PageHeader, term: &[u8], strict: bool) -> Result<usize, Corrupt> {
    let (mut lo, mut hi) = (0, header.count as usize);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let key = slot_entry(page, header, mid)?.0;
        if key < term || (!strict && key == term) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Writes the dictionary for `entries` (strictly increasing terms). Returns (root, height, pages
/// written); an empty dictionary has root [`NO_BLOCK`] and height 0.
pub fn write<S: PageWrite>(store: &S, entries: &[(Vec<u8>, TermInfo)]) -> (BlockNumber, u32, u32) {
    if entries.is_empty() {
        return (NO_BLOCK, 0, 0);
    }
    let mut writer = LevelWriter::new(store, 0);
    for (term, info) in entries {
        assert!(
            term.len() <= u8::MAX as usize,
            "terms are at most 255 bytes"
        );
        writer.push(term, LEAF_FIXED + term.len(), |w| {
            w.u32(info.doc_freq);
            w.u32(info.postings_block);
            w.u16(info.postings_offset);
            w.f32(info.max_tf);
            w.f32(info.min_length);
        });
    }
    let (mut level_firsts, mut pages) = writer.finish();
    let mut height = 1;
    while level_firsts.len() > 1 {
        let mut writer = LevelWriter::new(store, height as u8);
        for (term, child) in &level_firsts {
            writer.push(term, INNER_FIXED + term.len(), |w| w.u32(*child));
        }
        let (firsts, n) = writer.finish();
        level_firsts = firsts;
        pages += n;
        height += 1;
    }
    (level_firsts[0].1, height, pages)
}

/// Fills the pages of one level left to right, chaining them.
struct LevelWriter<'s, S: PageWrite + 's> {
    store: &'s S,
    level: u8,
    current: Option<(BlockNumber, S::WriteGuard<'s>, PageHeader)>,
    /// The offsets of the current page's entries, written after them when it is full.
    slots: Vec<u16>,
    firsts: Vec<(Vec<u8>, BlockNumber)>,
    pages: u32,
}

impl<'s, S: PageWrite> LevelWriter<'s, S> {
    fn new(store: &'s S, level: u8) -> Self {
        LevelWriter {
            store,
            level,
            current: None,
            slots: Vec::new(),
            firsts: Vec::new(),
            pages: 0,
        }
    }

    /// Writes the current page's slot array and header.
    fn close(guard: &mut [u8], mut header: PageHeader, slots: &mut Vec<u16>) {
        let mut w = ByteWriter::new(guard, header.used as usize);
        for &offset in slots.iter() {
            w.u16(offset);
        }
        header.used = w.pos as u16;
        header.write(guard);
        slots.clear();
    }

    fn push(&mut self, term: &[u8], size: usize, body: impl FnOnce(&mut ByteWriter)) {
        let page_size = self.store.page_size();
        // Room for the entry and for the slot array, one slot longer.
        let need = size + SLOT * (self.slots.len() + 1);
        let fits = matches!(&self.current, Some((_, _, h)) if h.free_space(page_size) >= need);
        if !fits {
            let (blkno, guard) = self.store.allocate();
            let mut header = PageHeader::new(PageKind::Dictionary);
            header.level = self.level;
            if let Some((_, mut prev, mut prev_header)) = self.current.take() {
                prev_header.next = blkno;
                Self::close(&mut prev, prev_header, &mut self.slots);
            }
            self.current = Some((blkno, guard, header));
            self.firsts.push((term.to_vec(), blkno));
            self.pages += 1;
        }
        let (_, guard, header) = self.current.as_mut().expect("a page is open");
        self.slots.push(header.used);
        let mut w = ByteWriter::new(guard, header.used as usize);
        w.u8(term.len() as u8);
        w.bytes(term);
        body(&mut w);
        header.used = w.pos as u16;
        header.count += 1;
    }

    fn finish(mut self) -> (Vec<(Vec<u8>, BlockNumber)>, u32) {
        if let Some((_, mut guard, header)) = self.current.take() {
            Self::close(&mut guard, header, &mut self.slots);
        }
        (self.firsts, self.pages)
    }
}

/// Looks `term` up in the dictionary rooted at `root`.
pub fn lookup<S: PageRead>(
    store: &S,
    root: BlockNumber,
    height: u32,
    term: &[u8],
) -> Result<Option<TermInfo>, Corrupt> {
    if root == NO_BLOCK {
        return Ok(None);
    }
    check_height(height)?;
    let mut path = Chain::new("a dictionary path", FIRST_DATA_BLOCK);
    let mut blkno = root;
    for level in (1..height).rev() {
        path.visit(store, blkno)?;
        let page = store.read(blkno);
        match child_for(&page, level, term).in_block(blkno)? {
            Some(child) => blkno = child,
            None => return Ok(None),
        }
    }
    path.visit(store, blkno)?;
    let page = store.read(blkno);
    find_in_leaf(&page, term).in_block(blkno)
}

/// The child of an inner page whose range holds `term` (the last whose first term is ≤ it);
/// None when `term` sorts before all.
fn child_for(page: &[u8], level: u32, term: &[u8]) -> Result<Option<BlockNumber>, Corrupt> {
    let (header, _) = level_page(page, level)?;
    match rank(page, &header, term, false)? {
        0 => Ok(None),
        n => slot_entry(page, &header, n - 1)?.1.u32().map(Some),
    }
}

fn find_in_leaf(page: &[u8], term: &[u8]) -> Result<Option<TermInfo>, Corrupt> {
    let (header, _) = level_page(page, 0)?;
    let i = rank(page, &header, term, true)?;
    if i == header.count as usize {
        return Ok(None);
    }
    // Only the entry found is read and checked.
    let (key, mut r) = slot_entry(page, &header, i)?;
    if key == term {
        read_info(&mut r).map(Some)
    } else {
        Ok(None)
    }
}

/// Leftmost page of every level, leaves first.
fn leftmost_pages<S: PageRead>(
    store: &S,
    root: BlockNumber,
    height: u32,
) -> Result<Vec<BlockNumber>, Corrupt> {
    check_height(height)?;
    let mut path = Chain::new("the dictionary's leftmost path", FIRST_DATA_BLOCK);
    let mut blkno = path.visit(store, root)?;
    let mut out = vec![root];
    for level in (1..height).rev() {
        let child = {
            let page = store.read(blkno);
            first_child(&page, level).in_block(blkno)?
        };
        blkno = path.visit(store, child)?;
        out.push(blkno);
    }
    out.reverse();
    Ok(out)
}

fn first_child(page: &[u8], level: u32) -> Result<BlockNumber, Corrupt> {
    let (header, mut r) = level_page(page, level)?;
    if header.count == 0 {
        return corrupt("an inner dictionary page without entries");
    }
    read_term(&mut r)?;
    r.u32()
}

/// Every page of the dictionary (to free it).
pub fn pages<S: PageRead>(
    store: &S,
    root: BlockNumber,
    height: u32,
) -> Result<Vec<BlockNumber>, Corrupt> {
    if root == NO_BLOCK {
        return Ok(Vec::new());
    }
    // One walk over all levels: no page belongs to two levels or twice to one.
    let mut all = Chain::new("the dictionary", FIRST_DATA_BLOCK);
    let mut out = Vec::new();
    for (level, first) in leftmost_pages(store, root, height)?.into_iter().enumerate() {
        let mut blkno = first;
        while blkno != NO_BLOCK {
            out.push(all.visit(store, blkno)?);
            let page = store.read(blkno);
            blkno = level_page(&page, level as u32).in_block(blkno)?.0.next;
        }
    }
    Ok(out)
}

/// All entries in term order, one leaf page at a time. Checks that terms strictly increase
/// (a merge relies on it); after an error it ends.
pub struct TermIter<'s, S: PageRead> {
    store: &'s S,
    next_page: BlockNumber,
    leaves: Chain,
    last: Option<Vec<u8>>,
    buffered: std::vec::IntoIter<(Vec<u8>, TermInfo)>,
}

impl<'s, S: PageRead> TermIter<'s, S> {
    pub fn new(store: &'s S, root: BlockNumber, height: u32) -> Result<Self, Corrupt> {
        let next_page = if root == NO_BLOCK {
            NO_BLOCK
        } else {
            leftmost_pages(store, root, height)?[0]
        };
        Ok(TermIter {
            store,
            next_page,
            leaves: Chain::new("the dictionary's leaves", FIRST_DATA_BLOCK),
            last: None,
            buffered: Vec::new().into_iter(),
        })
    }

    /// Buffers the entries of the next leaf.
    fn load_leaf(&mut self) -> Result<(), Corrupt> {
        let blkno = self.leaves.visit(self.store, self.next_page)?;
        let page = self.store.read(blkno);
        let (entries, next) = self.leaf_entries(&page).in_block(blkno)?;
        self.next_page = next;
        self.buffered = entries.into_iter();
        Ok(())
    }

    fn leaf_entries(
        &mut self,
        page: &[u8],
    ) -> Result<(Vec<(Vec<u8>, TermInfo)>, BlockNumber), Corrupt> {
        let (header, mut r) = level_page(page, 0)?;
        let mut entries = Vec::new();
        for _ in 0..header.count {
            let key = read_term(&mut r)?.to_vec();
            if self.last.as_ref().is_some_and(|last| *last >= key) {
                return corrupt("dictionary terms are out of order");
            }
            self.last = Some(key.clone());
            entries.push((key, read_info(&mut r)?));
        }
        Ok((entries, header.next))
    }
}

impl<S: PageRead> Iterator for TermIter<'_, S> {
    type Item = Result<(Vec<u8>, TermInfo), Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.buffered.next() {
                return Some(Ok(item));
            }
            if self.next_page == NO_BLOCK {
                return None;
            }
            if let Err(e) = self.load_leaf() {
                self.next_page = NO_BLOCK;
                return Some(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::MemoryStore;

    fn info(i: u32) -> TermInfo {
        TermInfo {
            doc_freq: i + 1,
            postings_block: i + 1,
            postings_offset: (HEADER_SIZE as u32 + i % 100) as u16,
            max_tf: i as f32,
            min_length: 1.0,
        }
    }

    #[test]
    fn multi_level_lookup_iteration_and_pages() {
        // Small pages force a tree of several levels; block 0 is the metapage's.
        let store = MemoryStore::new(256);
        drop(store.allocate());
        let entries: Vec<(Vec<u8>, TermInfo)> = (0..5000u32)
            .map(|i| (format!("term{:06}", i * 2).into_bytes(), info(i)))
            .collect();
        let (root, height, written) = write(&store, &entries);
        assert!(height >= 3, "height {height}");
        for (i, (term, want)) in entries.iter().enumerate().step_by(7) {
            assert_eq!(
                lookup(&store, root, height, term),
                Ok(Some(*want)),
                "term {i}"
            );
            // The odd numbers between are absent.
            let missing = format!("term{:06}", i * 2 + 1).into_bytes();
            assert_eq!(lookup(&store, root, height, &missing), Ok(None));
        }
        assert_eq!(lookup(&store, root, height, b"a"), Ok(None));
        assert_eq!(lookup(&store, root, height, b"zzz"), Ok(None));
        let all: Vec<_> = TermIter::new(&store, root, height)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(all, entries);
        let mut p = pages(&store, root, height).unwrap();
        assert_eq!(p.len() as u32, written);
        p.sort();
        p.dedup();
        assert_eq!(p.len(), store.num_pages() - 1);
    }

    #[test]
    fn empty_and_single_entry_dictionaries() {
        let store = MemoryStore::new(256);
        drop(store.allocate());
        let (root, height, _) = write(&store, &[]);
        assert_eq!(lookup(&store, root, height, b"x"), Ok(None));
        assert_eq!(TermIter::new(&store, root, height).unwrap().count(), 0);
        let (root, height, _) = write(&store, &[(b"x".to_vec(), info(1))]);
        assert_eq!(height, 1);
        assert_eq!(lookup(&store, root, height, b"x"), Ok(Some(info(1))));
    }

    /// A multi-level dictionary in 256-byte pages, block 0 standing in for a metapage.
    fn tree() -> (MemoryStore, BlockNumber, u32, Vec<(Vec<u8>, TermInfo)>) {
        let store = MemoryStore::new(256);
        drop(store.allocate());
        let entries: Vec<(Vec<u8>, TermInfo)> = (0..600u32)
            .map(|i| (format!("t{i:05}").into_bytes(), info(i)))
            .collect();
        let (root, height, _) = write(&store, &entries);
        assert!(height >= 3);
        (store, root, height, entries)
    }

    fn set_next(store: &MemoryStore, blkno: BlockNumber, next: BlockNumber) {
        store.overwrite(blkno, |page| {
            let mut h = PageHeader::read(page, PageKind::Dictionary).unwrap();
            h.next = next;
            h.write(page);
        });
    }

    #[test]
    fn a_leaf_chain_into_itself_or_past_the_end_is_corruption() {
        let (store, root, height, _) = tree();
        let first_leaf = leftmost_pages(&store, root, height).unwrap()[0];
        set_next(&store, first_leaf, first_leaf);
        assert!(pages(&store, root, height)
            .unwrap_err()
            .what
            .contains("twice"));
        let err = TermIter::new(&store, root, height)
            .unwrap()
            .find_map(Result::err)
            .expect("the iteration ends in an error");
        assert!(err.what.contains("twice"), "{err}");
        set_next(&store, first_leaf, store.num_pages() as BlockNumber + 5);
        assert!(pages(&store, root, height)
            .unwrap_err()
            .what
            .contains("outside"));
        set_next(&store, first_leaf, 0);
        assert!(pages(&store, root, height)
            .unwrap_err()
            .what
            .contains("outside"));
    }

    #[test]
    fn absurd_heights_and_children_are_corruption() {
        let (store, root, height, entries) = tree();
        for bad in [0, height + 1, u32::MAX] {
            assert!(
                lookup(&store, root, bad, &entries[3].0).is_err(),
                "height {bad}"
            );
        }
        // The root's first child pointing back at the root.
        store.overwrite(root, |page| {
            let at = HEADER_SIZE + 1 + page[HEADER_SIZE] as usize;
            page[at..at + 4].copy_from_slice(&root.to_le_bytes());
        });
        let err = lookup(&store, root, height, &entries[0].0).unwrap_err();
        assert!(
            err.what.contains("twice") || err.what.contains("level"),
            "{err}"
        );
        // An absurd entry count on a leaf.
        let (store, root, height, entries) = tree();
        let leaf = leftmost_pages(&store, root, height).unwrap()[0];
        store.overwrite(leaf, |page| {
            page[2..4].copy_from_slice(&u16::MAX.to_le_bytes())
        });
        let err = lookup(&store, root, height, &entries[0].0).unwrap_err();
        assert_eq!(err.block, Some(leaf));
    }

    #[test]
    fn damaged_slots_are_corruption() {
        for (bad, what) in [(3u16, "offset 3"), (u16::MAX, "")] {
            let (store, root, height, entries) = tree();
            let leaf = leftmost_pages(&store, root, height).unwrap()[0];
            // Every slot of the first leaf.
            store.overwrite(leaf, |page| {
                let h = PageHeader::read(page, PageKind::Dictionary).unwrap();
                let end = h.used as usize;
                for at in (end - SLOT * h.count as usize..end).step_by(SLOT) {
                    page[at..at + SLOT].copy_from_slice(&bad.to_le_bytes());
                }
            });
            let err = lookup(&store, root, height, &entries[0].0).unwrap_err();
            assert_eq!(err.block, Some(leaf));
            assert!(err.what.contains(what), "{err}");
        }
    }
}
