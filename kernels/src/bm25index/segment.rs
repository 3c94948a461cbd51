//! Immutable segments: a document table (heap TID, stored length, tombstone) addressed through a
//! directory, posting lists in a chain of posting pages, and a dictionary over them.
//!
//! Segments are written once — by CREATE INDEX, by merging the append area, or by merging
//! segments — and published by one metapage write; VACUUM only sets tombstones in place.

use std::collections::HashMap;

use super::codec::{
    decode_block, encode_block, BlockHeader, DecodedBlock, BLOCK_LEN, MAX_BLOCK_SIZE,
};
use super::dictionary::{self, TermInfo};
use super::document::{stored_length, AnalyzedDoc, FieldCounts};
use super::format::{
    corrupt, ByteReader, ByteWriter, PageHeader, PageKind, SegmentDesc, Tid, HEADER_SIZE,
};
use crate::page::{BlockNumber, PageRead, PageWrite, NO_BLOCK};

const DOC_ENTRY_SIZE: usize = Tid::SIZE + 2 + 4 + 8;
const DOC_DELETED: u16 = 1;

/// One row of a segment's document table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DocEntry {
    pub tid: Tid,
    pub length: f32,
    pub deleted: bool,
    pub fingerprint: u64,
}

/// A document as a segment writer takes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DocRow {
    pub tid: Tid,
    pub length: f32,
    pub fingerprint: u64,
}

fn docs_per_page(page_size: usize) -> usize {
    (page_size - HEADER_SIZE) / DOC_ENTRY_SIZE
}

fn blocks_per_directory_page(page_size: usize) -> usize {
    (page_size - HEADER_SIZE) / 4
}

/// Streams posting blocks into a chain of posting pages.
struct PostingsWriter<'s, S: PageWrite + 's> {
    store: &'s S,
    head: BlockNumber,
    current: Option<(BlockNumber, S::WriteGuard<'s>, PageHeader)>,
    pages: u32,
    scratch: Vec<u8>,
}

impl<'s, S: PageWrite> PostingsWriter<'s, S> {
    fn new(store: &'s S) -> Self {
        PostingsWriter {
            store,
            head: NO_BLOCK,
            current: None,
            pages: 0,
            scratch: vec![0; MAX_BLOCK_SIZE],
        }
    }

    /// Room for `size` bytes; returns where they will go.
    fn reserve(&mut self, size: usize) -> (BlockNumber, u16) {
        let page_size = self.store.page_size();
        let fits = matches!(&self.current, Some((_, _, h)) if h.free_space(page_size) >= size);
        if !fits {
            let (blkno, guard) = self.store.allocate();
            if let Some((_, mut prev, mut prev_header)) = self.current.take() {
                prev_header.next = blkno;
                prev_header.write(&mut prev);
            } else {
                self.head = blkno;
            }
            self.current = Some((blkno, guard, PageHeader::new(PageKind::Postings)));
            self.pages += 1;
        }
        let (blkno, _, header) = self.current.as_ref().expect("a page is open");
        (*blkno, header.used)
    }

    /// Writes one posting list and returns its dictionary entry.
    fn write_list(
        &mut self,
        docs: &[u32],
        counts: &[FieldCounts],
        weights: &[f64; 3],
        lengths: &[f32],
    ) -> TermInfo {
        let mut first = None;
        let mut previous_last = 0;
        let (mut max_tf, mut min_length) = (0f32, f32::INFINITY);
        for (d, c) in docs.chunks(BLOCK_LEN).zip(counts.chunks(BLOCK_LEN)) {
            let size = encode_block(previous_last, d, c, weights, lengths, &mut self.scratch);
            previous_last = *d.last().expect("chunks are not empty");
            let header = BlockHeader::read(&mut ByteReader::new(&self.scratch, 0));
            max_tf = max_tf.max(header.max_tf);
            min_length = min_length.min(header.min_length);
            let at = self.reserve(size);
            first.get_or_insert(at);
            let (_, guard, page_header) = self.current.as_mut().expect("reserved");
            let mut w = ByteWriter::new(guard, page_header.used as usize);
            w.bytes(&self.scratch[..size]);
            page_header.used = w.pos as u16;
            page_header.count += 1;
        }
        let (postings_block, postings_offset) = first.expect("a posting list is never empty");
        TermInfo {
            doc_freq: docs.len() as u32,
            postings_block,
            postings_offset,
            max_tf,
            min_length,
        }
    }

    fn finish(mut self) -> (BlockNumber, u32) {
        if let Some((_, mut guard, header)) = self.current.take() {
            header.write(&mut guard);
        }
        (self.head, self.pages)
    }
}

/// Writes a segment whose documents are known up front and whose terms arrive in byte order.
pub struct SegmentWriter<'s, S: PageWrite + 's> {
    store: &'s S,
    weights: [f64; 3],
    docs: Vec<DocRow>,
    lengths: Vec<f32>,
    postings: PostingsWriter<'s, S>,
    dictionary: Vec<(Vec<u8>, TermInfo)>,
}

impl<'s, S: PageWrite> SegmentWriter<'s, S> {
    /// `docs[i]` is document `i`.
    pub fn new(store: &'s S, weights: [f64; 3], docs: Vec<DocRow>) -> Self {
        let lengths = docs.iter().map(|d| d.length).collect();
        SegmentWriter {
            store,
            weights,
            docs,
            lengths,
            postings: PostingsWriter::new(store),
            dictionary: Vec::new(),
        }
    }

    pub fn add_term(&mut self, term: &[u8], docs: &[u32], counts: &[FieldCounts]) {
        debug_assert!(
            self.dictionary
                .last()
                .is_none_or(|(t, _)| t.as_slice() < term),
            "terms arrive sorted"
        );
        let info = self
            .postings
            .write_list(docs, counts, &self.weights, &self.lengths);
        self.dictionary.push((term.to_vec(), info));
    }

    pub fn finish(self) -> SegmentDesc {
        let SegmentWriter {
            store,
            docs,
            postings,
            dictionary,
            ..
        } = self;
        let (postings_head, postings_pages) = postings.finish();
        let page_size = store.page_size();

        // Document table, then the directory of its pages.
        let mut doc_pages = Vec::new();
        for chunk in docs.chunks(docs_per_page(page_size)) {
            let (blkno, mut guard) = store.allocate();
            let mut header = PageHeader::new(PageKind::Documents);
            let mut w = ByteWriter::new(&mut guard, HEADER_SIZE);
            for d in chunk {
                d.tid.write(&mut w);
                w.u16(0);
                w.f32(d.length);
                w.u64(d.fingerprint);
            }
            header.used = w.pos as u16;
            header.count = chunk.len() as u16;
            header.write(&mut guard);
            doc_pages.push(blkno);
        }
        let directory: Vec<BlockNumber> = doc_pages
            .chunks(blocks_per_directory_page(page_size))
            .map(|_| store.allocate().0)
            .collect();
        // Allocated first so each page can point at the next; now filled.
        for (i, chunk) in doc_pages
            .chunks(blocks_per_directory_page(page_size))
            .enumerate()
        {
            let mut guard = store.write(directory[i]);
            let mut header = PageHeader::new(PageKind::DocumentDirectory);
            header.next = directory.get(i + 1).copied().unwrap_or(NO_BLOCK);
            let mut w = ByteWriter::new(&mut guard, HEADER_SIZE);
            for &b in chunk {
                w.u32(b);
            }
            header.used = w.pos as u16;
            header.count = chunk.len() as u16;
            header.write(&mut guard);
        }

        let (dict_root, dict_height, dict_pages) = dictionary::write(store, &dictionary);
        SegmentDesc {
            dict_root,
            dict_height,
            postings_head,
            directory_head: directory.first().copied().unwrap_or(NO_BLOCK),
            num_docs: docs.len() as u32,
            num_terms: dictionary.len() as u32,
            total_length: docs.iter().map(|d| d.length as f64).sum(),
            has_tombstones: false,
            num_pages: postings_pages + dict_pages + (doc_pages.len() + directory.len()) as u32,
        }
    }
}

/// An in-memory inverted index of analyzed documents, written out as one segment.
pub struct SegmentBuilder {
    weights: [f64; 3],
    docs: Vec<DocRow>,
    terms: HashMap<String, (Vec<u32>, Vec<FieldCounts>)>,
    memory: usize,
}

impl SegmentBuilder {
    pub fn new(weights: [f64; 3]) -> Self {
        SegmentBuilder {
            weights,
            docs: Vec::new(),
            terms: HashMap::new(),
            memory: 0,
        }
    }

    pub fn add(&mut self, tid: Tid, doc: &AnalyzedDoc) {
        let id = self.docs.len() as u32;
        self.docs.push(DocRow {
            tid,
            length: stored_length(&self.weights, &doc.lengths),
            fingerprint: doc.fingerprint,
        });
        self.memory += 16;
        for (term, counts) in &doc.terms {
            let entry = match self.terms.get_mut(term.as_str()) {
                Some(e) => e,
                None => {
                    self.memory += 96 + term.len();
                    self.terms.entry(term.clone()).or_default()
                }
            };
            entry.0.push(id);
            entry.1.push(*counts);
            self.memory += 16;
        }
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Approximate heap bytes held (what maintenance_work_mem bounds).
    pub fn memory_bytes(&self) -> usize {
        self.memory
    }

    pub fn write<S: PageWrite>(self, store: &S) -> SegmentDesc {
        let SegmentBuilder {
            weights,
            docs,
            terms,
            ..
        } = self;
        let mut sorted: Vec<_> = terms.into_iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut writer = SegmentWriter::new(store, weights, docs);
        for (term, (docs, counts)) in sorted {
            writer.add_term(term.as_bytes(), &docs, &counts);
        }
        writer.finish()
    }
}

/// Read access to one published segment.
pub struct SegmentReader<'s, S: PageRead> {
    store: &'s S,
    pub desc: SegmentDesc,
    directory: Vec<BlockNumber>,
}

impl<'s, S: PageRead> SegmentReader<'s, S> {
    pub fn open(store: &'s S, desc: SegmentDesc) -> Self {
        let mut directory = Vec::new();
        let mut blkno = desc.directory_head;
        while blkno != NO_BLOCK {
            let page = store.read(blkno);
            let header = PageHeader::read(&page, PageKind::DocumentDirectory);
            let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
            directory.extend((0..header.count).map(|_| r.u32()));
            blkno = header.next;
        }
        let per_page = docs_per_page(store.page_size());
        if directory.len() != (desc.num_docs as usize).div_ceil(per_page) {
            corrupt(format_args!(
                "segment of {} documents has {} document pages",
                desc.num_docs,
                directory.len()
            ));
        }
        SegmentReader {
            store,
            desc,
            directory,
        }
    }

    pub fn document_pages(&self) -> &[BlockNumber] {
        &self.directory
    }

    /// Every document, in id order.
    pub fn for_each_doc(&self, mut f: impl FnMut(u32, DocEntry)) {
        let mut id = 0;
        for &blkno in &self.directory {
            let page = self.store.read(blkno);
            let header = PageHeader::read(&page, PageKind::Documents);
            let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
            for _ in 0..header.count {
                f(id, read_doc_entry(&mut r));
                id += 1;
            }
        }
    }

    pub fn term(&self, term: &[u8]) -> Option<TermInfo> {
        dictionary::lookup(self.store, self.desc.dict_root, self.desc.dict_height, term)
    }

    pub fn postings(&self, info: &TermInfo) -> PostingCursor<'s, S> {
        PostingCursor::new(self.store, info)
    }

    /// Every page the segment owns.
    pub fn pages(&self) -> Vec<BlockNumber> {
        let mut out = dictionary::pages(self.store, self.desc.dict_root, self.desc.dict_height);
        out.extend_from_slice(&self.directory);
        let mut blkno = self.desc.directory_head;
        while blkno != NO_BLOCK {
            out.push(blkno);
            blkno = PageHeader::read(&self.store.read(blkno), PageKind::DocumentDirectory).next;
        }
        let mut blkno = self.desc.postings_head;
        while blkno != NO_BLOCK {
            out.push(blkno);
            blkno = PageHeader::read(&self.store.read(blkno), PageKind::Postings).next;
        }
        out
    }
}

fn read_doc_entry(r: &mut ByteReader) -> DocEntry {
    let tid = Tid::read(r);
    let flags = r.u16();
    let length = r.f32();
    DocEntry {
        tid,
        deleted: flags & DOC_DELETED != 0,
        length,
        fingerprint: r.u64(),
    }
}

/// The entries of one document page.
pub fn doc_entries(page: &[u8]) -> Vec<DocEntry> {
    let header = PageHeader::read(page, PageKind::Documents);
    let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
    (0..header.count).map(|_| read_doc_entry(&mut r)).collect()
}

/// Marks documents of one document page dead; returns how many were newly marked.
pub fn set_tombstones(page: &mut [u8], mut is_dead: impl FnMut(Tid) -> bool) -> usize {
    let header = PageHeader::read(page, PageKind::Documents);
    let mut marked = 0;
    for slot in 0..header.count as usize {
        let at = HEADER_SIZE + slot * DOC_ENTRY_SIZE;
        let mut r = ByteReader::new(page, at);
        let entry = read_doc_entry(&mut r);
        if !entry.deleted && is_dead(entry.tid) {
            ByteWriter::new(page, at + Tid::SIZE).u16(DOC_DELETED);
            marked += 1;
        }
    }
    marked
}

/// End of a posting list.
pub const END: u32 = u32::MAX;

/// Walks one posting list block by block; skips blocks by their headers without decoding them.
pub struct PostingCursor<'s, S: PageRead> {
    store: &'s S,
    /// Blocks after the current one.
    remaining: u32,
    header: BlockHeader,
    /// Where the current block's packed arrays start.
    data_at: (BlockNumber, u16),
    /// Where the next block's header is.
    next_at: (BlockNumber, u16),
    /// Last document of the previous block (the delta base of the current one).
    previous_last: u32,
    block: Box<DecodedBlock>,
    decoded: bool,
    index: usize,
    doc: u32,
    /// How many block headers have been loaded: changes exactly when the current block does.
    blocks_loaded: u32,
}

impl<'s, S: PageRead> PostingCursor<'s, S> {
    fn new(store: &'s S, info: &TermInfo) -> Self {
        let blocks = info.doc_freq.div_ceil(BLOCK_LEN as u32);
        let mut c = PostingCursor {
            store,
            remaining: blocks,
            header: BlockHeader {
                len: 0,
                doc_bits: 0,
                count_bits: [0; 3],
                payload_len: 0,
                last_doc: 0,
                max_tf: 0.0,
                min_length: 0.0,
            },
            data_at: (NO_BLOCK, 0),
            next_at: (info.postings_block, info.postings_offset),
            previous_last: 0,
            block: Box::default(),
            decoded: false,
            index: 0,
            doc: 0,
            blocks_loaded: 0,
        };
        if c.load_next_header() {
            c.decode();
            c.doc = c.block.docs[0];
        } else {
            c.doc = END;
        }
        c
    }

    /// Moves to the next block's header; false at the end of the list.
    fn load_next_header(&mut self) -> bool {
        if self.remaining == 0 {
            return false;
        }
        if self.data_at.0 != NO_BLOCK {
            self.previous_last = self.header.last_doc;
        }
        let (blkno, offset) = self.next_at;
        if blkno == NO_BLOCK {
            corrupt("posting list ends before its last block");
        }
        let page = self.store.read(blkno);
        let page_header = PageHeader::read(&page, PageKind::Postings);
        let mut r = ByteReader::new(&page[..page_header.used as usize], offset as usize);
        self.header = BlockHeader::read(&mut r);
        self.data_at = (blkno, r.pos as u16);
        let end = offset as usize + self.header.encoded_size();
        if end > page_header.used as usize {
            corrupt("posting block runs past its page");
        }
        self.next_at = if end < page_header.used as usize {
            (blkno, end as u16)
        } else {
            (page_header.next, HEADER_SIZE as u16)
        };
        self.remaining -= 1;
        self.blocks_loaded += 1;
        self.decoded = false;
        self.index = 0;
        true
    }

    fn decode(&mut self) {
        let page = self.store.read(self.data_at.0);
        let mut r = ByteReader::new(&page, self.data_at.1 as usize);
        decode_block(self.previous_last, &self.header, &mut r, &mut self.block);
        self.decoded = true;
    }

    #[inline]
    pub fn doc(&self) -> u32 {
        self.doc
    }

    /// Per-field counts of the current document.
    #[inline]
    pub fn counts(&self) -> FieldCounts {
        self.block.counts_at(self.index)
    }

    /// The current block's header (its bounds cover the current document).
    pub fn block_header(&self) -> &BlockHeader {
        &self.header
    }

    /// Identifies the current block within this cursor (for caching per-block values).
    #[inline]
    pub fn block_sequence(&self) -> u32 {
        self.blocks_loaded
    }

    pub fn next(&mut self) {
        if self.doc == END {
            return;
        }
        if self.index + 1 < self.header.len {
            self.index += 1;
            self.doc = self.block.docs[self.index];
        } else if self.load_next_header() {
            self.decode();
            self.doc = self.block.docs[0];
        } else {
            self.doc = END;
        }
    }

    /// Moves to the first document ≥ `target`.
    pub fn advance(&mut self, target: u32) {
        if self.doc == END || (self.decoded && self.doc >= target) {
            return;
        }
        if !self.seek_block(target) {
            return;
        }
        if !self.decoded {
            self.decode();
            self.index = 0;
        }
        let docs = &self.block.docs[..self.header.len];
        self.index += docs[self.index..].partition_point(|&d| d < target);
        self.doc = docs[self.index];
    }

    /// Moves (by headers only) to the block that would hold `target` and returns its header;
    /// None when the list has no document ≥ `target`. The current document is then only known
    /// to be below the block's end: call [`Self::advance`] before reading it.
    pub fn seek_block(&mut self, target: u32) -> bool {
        if self.doc == END {
            return false;
        }
        while self.header.last_doc < target {
            if !self.load_next_header() {
                self.doc = END;
                return false;
            }
        }
        true
    }
}
