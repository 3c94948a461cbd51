//! The term dictionary of a segment: a B-tree of sorted terms written bottom-up once.
//!
//! Leaves hold `term → TermInfo` in byte order, chained left to right (the merge walks them in
//! order); each upper level holds the first term of every page below. Lookups read one page per
//! level, so the dictionary does not grow with any term id, only with the vocabulary, and
//! logarithmically.

use super::format::{corrupt, ByteReader, ByteWriter, PageHeader, PageKind, HEADER_SIZE};
use crate::page::{BlockNumber, PageRead, PageWrite, NO_BLOCK};

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

fn read_term<'a>(r: &mut ByteReader<'a>) -> &'a [u8] {
    let len = r.u8() as usize;
    r.bytes(len)
}

fn read_info(r: &mut ByteReader) -> TermInfo {
    TermInfo {
        doc_freq: r.u32(),
        postings_block: r.u32(),
        postings_offset: r.u16(),
        max_tf: r.f32(),
        min_length: r.f32(),
    }
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
    firsts: Vec<(Vec<u8>, BlockNumber)>,
    pages: u32,
}

impl<'s, S: PageWrite> LevelWriter<'s, S> {
    fn new(store: &'s S, level: u8) -> Self {
        LevelWriter {
            store,
            level,
            current: None,
            firsts: Vec::new(),
            pages: 0,
        }
    }

    fn push(&mut self, term: &[u8], size: usize, body: impl FnOnce(&mut ByteWriter)) {
        let page_size = self.store.page_size();
        let fits = matches!(&self.current, Some((_, _, h)) if h.free_space(page_size) >= size);
        if !fits {
            let (blkno, guard) = self.store.allocate();
            let mut header = PageHeader::new(PageKind::Dictionary);
            header.level = self.level;
            if let Some((_, mut prev, mut prev_header)) = self.current.take() {
                prev_header.next = blkno;
                prev_header.write(&mut prev);
            }
            self.current = Some((blkno, guard, header));
            self.firsts.push((term.to_vec(), blkno));
            self.pages += 1;
        }
        let (_, guard, header) = self.current.as_mut().expect("a page is open");
        let mut w = ByteWriter::new(guard, header.used as usize);
        w.u8(term.len() as u8);
        w.bytes(term);
        body(&mut w);
        header.used = w.pos as u16;
        header.count += 1;
    }

    fn finish(mut self) -> (Vec<(Vec<u8>, BlockNumber)>, u32) {
        if let Some((_, mut guard, header)) = self.current.take() {
            header.write(&mut guard);
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
) -> Option<TermInfo> {
    if root == NO_BLOCK {
        return None;
    }
    let mut blkno = root;
    for level in (1..height).rev() {
        let page = store.read(blkno);
        let header = PageHeader::read(&page, PageKind::Dictionary);
        if header.level as u32 != level {
            corrupt(format_args!(
                "dictionary page {blkno} is at level {} instead of {level}",
                header.level
            ));
        }
        let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
        let mut child = NO_BLOCK;
        for _ in 0..header.count {
            let key = read_term(&mut r);
            let c = r.u32();
            if key > term {
                break;
            }
            child = c;
        }
        if child == NO_BLOCK {
            return None;
        }
        blkno = child;
    }
    let page = store.read(blkno);
    let header = PageHeader::read(&page, PageKind::Dictionary);
    if header.level != 0 {
        corrupt(format_args!("dictionary page {blkno} should be a leaf"));
    }
    let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
    for _ in 0..header.count {
        let key = read_term(&mut r);
        let info = read_info(&mut r);
        match key.cmp(term) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Equal => return Some(info),
            std::cmp::Ordering::Greater => return None,
        }
    }
    None
}

/// Leftmost page of every level, leaves first.
fn leftmost_pages<S: PageRead>(store: &S, root: BlockNumber, height: u32) -> Vec<BlockNumber> {
    let mut out = vec![root];
    let mut blkno = root;
    for _ in 1..height {
        let page = store.read(blkno);
        let header = PageHeader::read(&page, PageKind::Dictionary);
        let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
        read_term(&mut r);
        blkno = r.u32();
        out.push(blkno);
    }
    out.reverse();
    out
}

/// Every page of the dictionary (to free it).
pub fn pages<S: PageRead>(store: &S, root: BlockNumber, height: u32) -> Vec<BlockNumber> {
    if root == NO_BLOCK {
        return Vec::new();
    }
    let mut out = Vec::new();
    for mut blkno in leftmost_pages(store, root, height) {
        while blkno != NO_BLOCK {
            out.push(blkno);
            blkno = PageHeader::read(&store.read(blkno), PageKind::Dictionary).next;
        }
    }
    out
}

/// All entries in term order, one leaf page at a time.
pub struct TermIter<'s, S: PageRead> {
    store: &'s S,
    next_page: BlockNumber,
    buffered: std::vec::IntoIter<(Vec<u8>, TermInfo)>,
}

impl<'s, S: PageRead> TermIter<'s, S> {
    pub fn new(store: &'s S, root: BlockNumber, height: u32) -> Self {
        let next_page = if root == NO_BLOCK {
            NO_BLOCK
        } else {
            leftmost_pages(store, root, height)[0]
        };
        TermIter {
            store,
            next_page,
            buffered: Vec::new().into_iter(),
        }
    }
}

impl<S: PageRead> Iterator for TermIter<'_, S> {
    type Item = (Vec<u8>, TermInfo);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.buffered.next() {
                return Some(item);
            }
            if self.next_page == NO_BLOCK {
                return None;
            }
            let page = self.store.read(self.next_page);
            let header = PageHeader::read(&page, PageKind::Dictionary);
            let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
            let entries: Vec<_> = (0..header.count)
                .map(|_| {
                    let key = read_term(&mut r).to_vec();
                    (key, read_info(&mut r))
                })
                .collect();
            self.next_page = header.next;
            self.buffered = entries.into_iter();
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
            postings_block: i,
            postings_offset: (i % 100) as u16,
            max_tf: i as f32,
            min_length: 1.0,
        }
    }

    #[test]
    fn multi_level_lookup_iteration_and_pages() {
        // Small pages force a tree of several levels.
        let store = MemoryStore::new(256);
        let entries: Vec<(Vec<u8>, TermInfo)> = (0..5000u32)
            .map(|i| (format!("term{:06}", i * 2).into_bytes(), info(i)))
            .collect();
        let (root, height, written) = write(&store, &entries);
        assert!(height >= 3, "height {height}");
        for (i, (term, want)) in entries.iter().enumerate().step_by(7) {
            assert_eq!(lookup(&store, root, height, term), Some(*want), "term {i}");
            // The odd numbers between are absent.
            let missing = format!("term{:06}", i * 2 + 1).into_bytes();
            assert_eq!(lookup(&store, root, height, &missing), None);
        }
        assert_eq!(lookup(&store, root, height, b"a"), None);
        assert_eq!(lookup(&store, root, height, b"zzz"), None);
        let all: Vec<_> = TermIter::new(&store, root, height).collect();
        assert_eq!(all, entries);
        let mut p = pages(&store, root, height);
        assert_eq!(p.len() as u32, written);
        p.sort();
        p.dedup();
        assert_eq!(p.len(), store.num_pages());
    }

    #[test]
    fn empty_and_single_entry_dictionaries() {
        let store = MemoryStore::new(256);
        let (root, height, _) = write(&store, &[]);
        assert_eq!(lookup(&store, root, height, b"x"), None);
        assert_eq!(TermIter::new(&store, root, height).count(), 0);
        let (root, height, _) = write(&store, &[(b"x".to_vec(), info(1))]);
        assert_eq!(height, 1);
        assert_eq!(lookup(&store, root, height, b"x"), Some(info(1)));
    }
}
