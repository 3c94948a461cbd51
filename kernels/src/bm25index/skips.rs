//! Skip entries of a long posting list: for each of its blocks, where the block's header is,
//! its last document and its best score at idf 1 (`max_saturated`), packed together after the
//! list's last block.
//!
//! They let a search see a whole list's bounds without reading every posting page: a one-word
//! query picks the few blocks worth decoding from them, a cursor jumps to the block holding a
//! document, and the largest `max_saturated` is a bound of the whole list, tighter than the
//! dictionary's `max_tf`/`min_length` corner, for MaxScore to partition the query's terms.
//!
//! Layout: a run of [`SKIP_ENTRY_SIZE`]-byte entries `last_doc u32 | max_saturated f32 |
//! page u32 | offset u16` on the list's posting pages. An entry never straddles pages: one
//! that does not fit in the rest of a page starts the next page of the chain. The dictionary
//! points at the first entry of lists of [`SKIP_MIN_BLOCKS`] blocks or more (at the first block
//! for shorter ones), which the document frequency tells apart.

use super::codec::BLOCK_LEN;
use super::format::{
    check_non_negative, corrupt, ByteWriter, Corrupt, InBlock, PageHeader, PageKind,
    FIRST_DATA_BLOCK, HEADER_SIZE,
};
use crate::page::{check_block_to_read, BlockNumber, PageRead};

/// Lists of at least this many blocks carry skip entries. A shorter list's headers lie on one
/// to three pages and are read as fast as entries would be.
pub const SKIP_MIN_BLOCKS: u32 = 4;
pub const SKIP_ENTRY_SIZE: usize = 14;

/// Blocks of a list of `doc_freq` documents.
pub fn blocks_of(doc_freq: u32) -> u32 {
    doc_freq.div_ceil(BLOCK_LEN as u32)
}

/// Whether a list of `doc_freq` documents has skip entries.
pub fn has_skips(doc_freq: u32) -> bool {
    blocks_of(doc_freq) >= SKIP_MIN_BLOCKS
}

/// One block of a posting list as its skip entry (or its header) describes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SkipEntry {
    pub last_doc: u32,
    pub max_saturated: f32,
    /// The page and offset of the block's header.
    pub at: (BlockNumber, u16),
}

impl SkipEntry {
    pub fn write(&self, w: &mut ByteWriter) {
        w.u32(self.last_doc);
        w.f32(self.max_saturated);
        w.u32(self.at.0);
        w.u16(self.at.1);
    }

    /// The entry's fields as stored, unchecked.
    fn decode(bytes: &[u8; SKIP_ENTRY_SIZE]) -> SkipEntry {
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        SkipEntry {
            last_doc: u32_at(0),
            max_saturated: f32::from_bits(u32_at(4)),
            at: (u32_at(8), u16::from_le_bytes([bytes[12], bytes[13]])),
        }
    }

    /// Whether the fields can be what a writer stored (what [`Self::read`] checks), without
    /// building an error: the fast path of [`read_skips`].
    fn is_plausible(&self) -> bool {
        self.max_saturated.is_finite()
            && self.max_saturated >= 0.0
            && self.at.1 as usize >= HEADER_SIZE
    }

    /// Reads and checks one entry's fields.
    fn read(bytes: &[u8; SKIP_ENTRY_SIZE]) -> Result<SkipEntry, Corrupt> {
        let entry = SkipEntry::decode(bytes);
        check_non_negative(entry.max_saturated, "a skip entry's best score")?;
        if (entry.at.1 as usize) < HEADER_SIZE {
            return corrupt(format_args!("a skip entry points at offset {}", entry.at.1));
        }
        Ok(entry)
    }
}

/// Reads the `n` skip entries starting at `start`, checking that their last documents rise and
/// stay below `num_docs`. Each page read must hold at least one
/// entry, so a damaged chain ends after at most `n` pages.
///
/// A one-word search over a long list reads thousands of entries, so a page's entries are
/// decoded and checked in one tight loop that only notes whether all were sound; a page with
/// an unsound one is read again by [`checked_entries`], which says what is wrong.
pub fn read_skips<S: PageRead>(
    store: &S,
    start: (BlockNumber, u16),
    n: u32,
    num_docs: u32,
) -> Result<Vec<SkipEntry>, Corrupt> {
    let mut out: Vec<SkipEntry> = Vec::with_capacity(n as usize);
    let (mut blkno, mut offset) = start;
    while out.len() < n as usize {
        crate::interrupt::check();
        let blkno_checked =
            check_block_to_read(store, blkno, FIRST_DATA_BLOCK, "a list's skip entries")?;
        let page = store.read(blkno_checked);
        let header = PageHeader::read(&page, PageKind::Postings).in_block(blkno)?;
        let used = header.used as usize;
        // The entries on this page: from `offset` to the page's end, as many as the list
        // still needs.
        let on_page = page
            .get(offset as usize..used)
            .unwrap_or_default()
            .chunks_exact(SKIP_ENTRY_SIZE)
            .take(n as usize - out.len());
        let before = out.len();
        let mut previous = out.last().map(|p| p.last_doc);
        let mut sound = true;
        for bytes in on_page.clone() {
            let entry = SkipEntry::decode(bytes.try_into().expect("an entry's bytes"));
            sound &= entry.is_plausible()
                & previous.is_none_or(|p| entry.last_doc > p)
                & (entry.last_doc < num_docs);
            previous = Some(entry.last_doc);
            out.push(entry);
        }
        if !sound {
            out.truncate(before);
            checked_entries(on_page, num_docs, &mut out).in_block(blkno)?;
        }
        if out.len() == before {
            return Err(Corrupt::new("a list's skip entries stop short").in_block(blkno));
        }
        (blkno, offset) = (header.next, HEADER_SIZE as u16);
    }
    Ok(out)
}

/// Reads `entries` into `out` with every check of [`read_skips`], stopping at the first that
/// fails.
fn checked_entries<'a>(
    entries: impl Iterator<Item = &'a [u8]>,
    num_docs: u32,
    out: &mut Vec<SkipEntry>,
) -> Result<(), Corrupt> {
    for bytes in entries {
        let entry = SkipEntry::read(bytes.try_into().expect("an entry's bytes"))?;
        let rising = out.last().is_none_or(|p| entry.last_doc > p.last_doc);
        if !rising || entry.last_doc >= num_docs {
            return Err(Corrupt::new(format_args!(
                "skip entry ends at document {} (after {:?}, in a segment of {num_docs})",
                entry.last_doc,
                out.last().map(|p| p.last_doc)
            )));
        }
        out.push(entry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bm25index::maintenance::initialize;
    use crate::bm25index::segment::{DocRow, SegmentReader, SegmentWriter, END};
    use crate::bm25index::{IndexOptions, Tid};
    use crate::page::MemoryStore;

    /// Skip entries on small pages (they cross many page ends, after lists that end mid-page)
    /// agree with the blocks a walk reads, and a cursor reads every list whole.
    #[test]
    fn entries_across_pages_describe_every_block() {
        let options = IndexOptions::default();
        for page_size in [512, 1024, 8192] {
            let store = MemoryStore::new(page_size);
            initialize(&store, options);
            let n = 40_000u32;
            let docs = (0..n)
                .map(|i| DocRow {
                    tid: Tid {
                        block: i / 8,
                        offset: (i % 8) as u16 + 1,
                    },
                    length: 5.0 + (i % 17) as f32,
                    fingerprint: i as u64,
                })
                .collect();
            let mut writer = SegmentWriter::new(&store, options.term_scoring(), docs);
            // Lists of 1 to 313 blocks, some every-document, some sparse.
            let lists: Vec<(Vec<u8>, Vec<u32>)> = [1u32, 2, 3, 7, 97, 128]
                .iter()
                .enumerate()
                .map(|(t, &step)| {
                    (
                        format!("t{t}").into_bytes(),
                        (0..n).step_by(step as usize).collect(),
                    )
                })
                .collect();
            for (term, list) in &lists {
                let counts: Vec<_> = list.iter().map(|d| [1 + d % 3, 0, d % 2]).collect();
                writer.add_term(term, list, &counts);
            }
            let reader = SegmentReader::open(&store, writer.finish()).unwrap();
            for (term, list) in &lists {
                let info = reader.term(term).unwrap().unwrap();
                let blocks = blocks_of(list.len() as u32) as usize;
                let mut walk = reader.postings(&info).unwrap();
                let mut seen = Vec::new();
                let mut last_docs = Vec::new();
                while walk.doc() != END {
                    seen.push(walk.doc());
                    if last_docs.len() < walk.block_sequence() as usize {
                        last_docs.push(walk.block_header().last_doc);
                    }
                    walk.next().unwrap();
                }
                assert_eq!(&seen, list, "{page_size}");
                assert_eq!(walk.list_saturated().is_some(), has_skips(info.doc_freq));
                let mut cursor = reader.block_cursor(&info).unwrap();
                let entries = cursor.block_entries().unwrap().to_vec();
                assert_eq!(entries.len(), blocks);
                let entry_last: Vec<u32> = entries.iter().map(|e| e.last_doc).collect();
                assert_eq!(entry_last, last_docs);
                // Decoded in any order, each block holds its share of the list.
                for j in (0..blocks).rev() {
                    let (docs, _) = cursor.decode_block_if(j, |_| true).unwrap().unwrap();
                    assert_eq!(
                        docs,
                        &list[j * BLOCK_LEN..list.len().min((j + 1) * BLOCK_LEN)]
                    );
                }
            }
        }
    }

    #[test]
    fn short_lists_have_no_skips() {
        let min_docs = (SKIP_MIN_BLOCKS - 1) * BLOCK_LEN as u32 + 1;
        assert!(!has_skips(1));
        assert!(!has_skips(min_docs - 1));
        assert!(has_skips(min_docs));
        assert_eq!(blocks_of(min_docs), SKIP_MIN_BLOCKS);
    }

    #[test]
    fn an_entry_round_trips() {
        let e = SkipEntry {
            last_doc: 70_000,
            max_saturated: 1.75,
            at: (12, 40),
        };
        let mut buf = [0u8; SKIP_ENTRY_SIZE];
        let mut w = ByteWriter::new(&mut buf, 0);
        e.write(&mut w);
        assert_eq!(w.pos, SKIP_ENTRY_SIZE);
        assert_eq!(SkipEntry::read(&buf).unwrap(), e);
        // A negative score is corruption, and so is an offset inside the page header.
        buf[4..8].copy_from_slice(&(-1.0f32).to_le_bytes());
        assert!(SkipEntry::read(&buf).is_err());
        e.write(&mut ByteWriter::new(&mut buf, 0));
        buf[12..14].copy_from_slice(&1u16.to_le_bytes());
        assert!(SkipEntry::read(&buf).is_err());
    }
}
