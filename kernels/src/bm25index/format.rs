//! On-page byte layouts of the BM25 index, little-endian.
//!
//! Every page starts with a 12-byte [`PageHeader`]; block 0 is the metapage. Every read checks
//! bounds and kinds and panics with "data corruption" instead of returning garbage (the extension
//! turns the panic into an ERROR).

use crate::bm25::FieldWeights;
use crate::page::{BlockNumber, NO_BLOCK};

/// "PSKB": pg_skills BM25.
pub const MAGIC: u32 = 0x5053_4b42;
/// Bumped whenever a layout in this file changes; older indexes then need REINDEX.
pub const FORMAT_VERSION: u32 = 1;
pub const META_BLOCK: BlockNumber = 0;
/// Segments the metapage can describe; merging keeps the count near log2(documents).
pub const MAX_SEGMENTS: usize = 48;

#[track_caller]
pub fn corrupt(what: impl std::fmt::Display) -> ! {
    panic!("pg_skills bm25 index: data corruption: {what}")
}

/// Bounds-checked little-endian reader over a page.
pub struct ByteReader<'a> {
    buf: &'a [u8],
    pub pos: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        ByteReader { buf, pos }
    }

    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            corrupt(format_args!(
                "read of {n} bytes at offset {} past the page end",
                self.pos
            ))
        };
        let out = &self.buf[self.pos..end];
        self.pos = end;
        out
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        self.bytes(N).try_into().expect("length checked")
    }

    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
    pub fn f32(&mut self) -> f32 {
        f32::from_le_bytes(self.array())
    }
    pub fn f64(&mut self) -> f64 {
        f64::from_le_bytes(self.array())
    }
}

/// Little-endian writer over a page. Callers check space first; overflow is a bug.
pub struct ByteWriter<'a> {
    buf: &'a mut [u8],
    pub pos: usize,
}

impl<'a> ByteWriter<'a> {
    pub fn new(buf: &'a mut [u8], pos: usize) -> Self {
        ByteWriter { buf, pos }
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn f32(&mut self, v: f32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.bytes(&v.to_le_bytes());
    }
}

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    Meta = 1,
    Postings = 2,
    Dictionary = 3,
    Documents = 4,
    DocumentDirectory = 5,
    Append = 6,
}

impl PageKind {
    fn from_u8(v: u8) -> Option<PageKind> {
        Some(match v {
            1 => PageKind::Meta,
            2 => PageKind::Postings,
            3 => PageKind::Dictionary,
            4 => PageKind::Documents,
            5 => PageKind::DocumentDirectory,
            6 => PageKind::Append,
            _ => return None,
        })
    }
}

/// Append pages set this when the append area they belong to is being merged: inserters then
/// move to the new append area.
pub const FLAG_FROZEN: u16 = 1;

/// The first 12 bytes of every page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    pub kind: PageKind,
    /// Dictionary level (0 = leaves).
    pub level: u8,
    /// Items on the page.
    pub count: u16,
    /// Bytes in use, header included.
    pub used: u16,
    pub flags: u16,
    /// Next page of the same chain, or [`NO_BLOCK`].
    pub next: BlockNumber,
}

pub const HEADER_SIZE: usize = 12;

impl PageHeader {
    pub fn new(kind: PageKind) -> Self {
        PageHeader {
            kind,
            level: 0,
            count: 0,
            used: HEADER_SIZE as u16,
            flags: 0,
            next: NO_BLOCK,
        }
    }

    #[track_caller]
    pub fn read(page: &[u8], expected: PageKind) -> PageHeader {
        let mut r = ByteReader::new(page, 0);
        let kind_byte = r.u8();
        let Some(kind) = PageKind::from_u8(kind_byte) else {
            corrupt(format_args!(
                "page kind {kind_byte} is unknown (expected {expected:?})"
            ))
        };
        if kind != expected {
            corrupt(format_args!(
                "found a {kind:?} page where a {expected:?} page belongs"
            ));
        }
        let h = PageHeader {
            kind,
            level: r.u8(),
            count: r.u16(),
            used: r.u16(),
            flags: r.u16(),
            next: r.u32(),
        };
        if (h.used as usize) < HEADER_SIZE || h.used as usize > page.len() {
            corrupt(format_args!("{kind:?} page claims {} bytes in use", h.used));
        }
        h
    }

    pub fn write(&self, page: &mut [u8]) {
        let mut w = ByteWriter::new(page, 0);
        w.u8(self.kind as u8);
        w.u8(self.level);
        w.u16(self.count);
        w.u16(self.used);
        w.u16(self.flags);
        w.u32(self.next);
    }

    pub fn free_space(&self, page_size: usize) -> usize {
        page_size - self.used as usize
    }
}

/// A heap tuple identifier (block, line pointer), ordered like Postgres orders them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid {
    pub block: u32,
    pub offset: u16,
}

impl Tid {
    pub const SIZE: usize = 6;

    pub fn read(r: &mut ByteReader) -> Tid {
        Tid {
            block: r.u32(),
            offset: r.u16(),
        }
    }
    pub fn write(&self, w: &mut ByteWriter) {
        w.u32(self.block);
        w.u16(self.offset);
    }
}

/// Index options, fixed when the index is built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexOptions {
    pub k1: f64,
    pub b: f64,
    pub weights: FieldWeights,
    pub stemming: bool,
    /// Append pages that trigger a merge of the append area into a segment.
    pub append_pages: u32,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            k1: 1.5,
            b: 0.75,
            weights: FieldWeights::default(),
            stemming: true,
            append_pages: 32,
        }
    }
}

impl IndexOptions {
    pub fn weights_array(&self) -> [f64; 3] {
        [
            self.weights.name,
            self.weights.description,
            self.weights.instructions,
        ]
    }
}

/// One immutable segment, as the metapage describes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SegmentDesc {
    pub dict_root: BlockNumber,
    pub dict_height: u32,
    pub postings_head: BlockNumber,
    pub directory_head: BlockNumber,
    pub num_docs: u32,
    pub num_terms: u32,
    pub total_length: f64,
    /// Set (before the first tombstone is written) when VACUUM marked documents dead; the next
    /// cleanup rewrites the segment so its statistics are exact again.
    pub has_tombstones: bool,
    pub num_pages: u32,
}

const SEGMENT_DESC_SIZE: usize = 4 * 6 + 8 + 4 + 4;

impl SegmentDesc {
    fn read(r: &mut ByteReader) -> SegmentDesc {
        let dict_root = r.u32();
        let dict_height = r.u32();
        let postings_head = r.u32();
        let directory_head = r.u32();
        let num_docs = r.u32();
        let num_terms = r.u32();
        let total_length = r.f64();
        let has_tombstones = r.u32() != 0;
        let num_pages = r.u32();
        SegmentDesc {
            dict_root,
            dict_height,
            postings_head,
            directory_head,
            num_docs,
            num_terms,
            total_length,
            has_tombstones,
            num_pages,
        }
    }

    fn write(&self, w: &mut ByteWriter) {
        w.u32(self.dict_root);
        w.u32(self.dict_height);
        w.u32(self.postings_head);
        w.u32(self.directory_head);
        w.u32(self.num_docs);
        w.u32(self.num_terms);
        w.f64(self.total_length);
        w.u32(self.has_tombstones as u32);
        w.u32(self.num_pages);
    }
}

/// The metapage: format, options, the segment list and the append area.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    pub version: u32,
    pub options: IndexOptions,
    /// The append area inserts go to.
    pub append_head: BlockNumber,
    /// Where inserters start looking for the last append page (a hint: they follow `next`).
    pub append_tail: BlockNumber,
    pub append_pages: u32,
    /// An append area being merged into a segment (still searched until the segment is published).
    pub frozen_head: BlockNumber,
    /// Bumped by every structural change (merge, flush, tombstones).
    pub generation: u64,
    pub segments: Vec<SegmentDesc>,
}

/// Why a metapage cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaError {
    /// Built by another on-disk format: REINDEX rebuilds it in the current one.
    FormatVersion {
        found: u32,
        expected: u32,
    },
    NotAnIndex,
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaError::FormatVersion { found, expected } => write!(
                f,
                "bm25 index has on-disk format version {found}, this build reads version {expected}: REINDEX required"
            ),
            MetaError::NotAnIndex => write!(f, "bm25 index metapage has a wrong magic number"),
        }
    }
}

impl Meta {
    pub fn new(options: IndexOptions) -> Meta {
        Meta {
            version: FORMAT_VERSION,
            options,
            append_head: NO_BLOCK,
            append_tail: NO_BLOCK,
            append_pages: 0,
            frozen_head: NO_BLOCK,
            generation: 0,
            segments: Vec::new(),
        }
    }

    pub fn read(page: &[u8]) -> Result<Meta, MetaError> {
        let mut r = ByteReader::new(page, 0);
        if PageKind::from_u8(r.u8()) != Some(PageKind::Meta) {
            return Err(MetaError::NotAnIndex);
        }
        r.pos = HEADER_SIZE;
        if r.u32() != MAGIC {
            return Err(MetaError::NotAnIndex);
        }
        let version = r.u32();
        if version != FORMAT_VERSION {
            return Err(MetaError::FormatVersion {
                found: version,
                expected: FORMAT_VERSION,
            });
        }
        let k1 = r.f64();
        let b = r.f64();
        let weights = FieldWeights {
            name: r.f64(),
            description: r.f64(),
            instructions: r.f64(),
        };
        let stemming = r.u8() != 0;
        let _pad = r.bytes(3);
        let append_pages_limit = r.u32();
        let options = IndexOptions {
            k1,
            b,
            weights,
            stemming,
            append_pages: append_pages_limit,
        };
        let append_head = r.u32();
        let append_tail = r.u32();
        let append_pages = r.u32();
        let frozen_head = r.u32();
        let generation = r.u64();
        let nseg = r.u32() as usize;
        if nseg > MAX_SEGMENTS {
            corrupt(format_args!("metapage lists {nseg} segments"));
        }
        let segments = (0..nseg).map(|_| SegmentDesc::read(&mut r)).collect();
        Ok(Meta {
            version,
            options,
            append_head,
            append_tail,
            append_pages,
            frozen_head,
            generation,
            segments,
        })
    }

    pub fn write(&self, page: &mut [u8]) {
        assert!(
            self.segments.len() <= MAX_SEGMENTS,
            "too many segments for the metapage"
        );
        let mut header = PageHeader::new(PageKind::Meta);
        let mut w = ByteWriter::new(page, HEADER_SIZE);
        w.u32(MAGIC);
        w.u32(self.version);
        let o = &self.options;
        w.f64(o.k1);
        w.f64(o.b);
        w.f64(o.weights.name);
        w.f64(o.weights.description);
        w.f64(o.weights.instructions);
        w.u8(o.stemming as u8);
        w.bytes(&[0; 3]);
        w.u32(o.append_pages);
        w.u32(self.append_head);
        w.u32(self.append_tail);
        w.u32(self.append_pages);
        w.u32(self.frozen_head);
        w.u64(self.generation);
        w.u32(self.segments.len() as u32);
        for s in &self.segments {
            s.write(&mut w);
        }
        header.used = w.pos as u16;
        header.write(page);
    }

    pub fn max_size() -> usize {
        HEADER_SIZE + 4 + 4 + 5 * 8 + 4 + 4 + 4 * 4 + 8 + 4 + MAX_SEGMENTS * SEGMENT_DESC_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_fits_a_postgres_page() {
        assert!(Meta::max_size() <= 8168, "{}", Meta::max_size());
        let mut meta = Meta::new(IndexOptions {
            k1: 1.2,
            ..Default::default()
        });
        meta.append_head = 1;
        meta.segments.push(SegmentDesc {
            dict_root: 5,
            dict_height: 2,
            postings_head: 3,
            directory_head: 4,
            num_docs: 10,
            num_terms: 7,
            total_length: 123.5,
            has_tombstones: true,
            num_pages: 9,
        });
        let mut page = vec![0u8; 8168];
        meta.write(&mut page);
        assert_eq!(Meta::read(&page).unwrap(), meta);
    }

    #[test]
    fn other_format_versions_ask_for_reindex() {
        let mut page = vec![0u8; 8168];
        Meta::new(IndexOptions::default()).write(&mut page);
        page[HEADER_SIZE + 4..HEADER_SIZE + 8].copy_from_slice(&0u32.to_le_bytes());
        let err = Meta::read(&page).unwrap_err();
        assert_eq!(
            err,
            MetaError::FormatVersion {
                found: 0,
                expected: FORMAT_VERSION
            }
        );
        assert!(err.to_string().contains("REINDEX required"));
    }

    #[test]
    #[should_panic(expected = "data corruption")]
    fn a_page_of_the_wrong_kind_is_corruption() {
        let mut page = vec![0u8; 64];
        PageHeader::new(PageKind::Postings).write(&mut page);
        PageHeader::read(&page, PageKind::Dictionary);
    }
}
