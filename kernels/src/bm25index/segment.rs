//! Immutable segments: a document table (heap TID, stored length, tombstone) addressed through a
//! directory, posting lists in a chain of posting pages, and a dictionary over them.
//!
//! Segments are written once — by CREATE INDEX, by merging the append area, or by merging
//! segments — and published by one metapage write; VACUUM only sets tombstones in place.

use super::codec::{
    decode_block, encode_block, BlockHeader, DecodedBlock, BLOCK_LEN, MAX_BLOCK_SIZE,
};
use super::dictionary::{self, TermInfo};
use super::document::{stored_length, AnalyzedDoc, FieldCounts};
use super::format::{
    check_non_negative, corrupt, ByteReader, ByteWriter, Corrupt, InBlock, PageHeader, PageKind,
    SegmentDesc, TermScoring, Tid, FIRST_DATA_BLOCK, HEADER_SIZE,
};
use super::skips::{blocks_of, has_skips, read_skips, SkipEntry, SKIP_ENTRY_SIZE};
use crate::page::{check_block_to_read, BlockNumber, Chain, PageRead, PageWrite, NO_BLOCK};

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

    /// Writes `size` bytes from `scratch` where [`Self::reserve`] made room.
    fn put(&mut self, size: usize) -> (BlockNumber, u16) {
        let at = self.reserve(size);
        let (_, guard, page_header) = self.current.as_mut().expect("reserved");
        let mut w = ByteWriter::new(guard, page_header.used as usize);
        w.bytes(&self.scratch[..size]);
        page_header.used = w.pos as u16;
        page_header.count += 1;
        at
    }

    /// Writes one posting list, and its skip entries after it when it is long, and returns its
    /// dictionary entry (which points at the skip entries of a long list, else at its first
    /// block).
    fn write_list(
        &mut self,
        docs: &[u32],
        counts: &[FieldCounts],
        scoring: &TermScoring,
        lengths: &[f32],
        avg_length: f64,
    ) -> TermInfo {
        // Skip entries are kept only for a list that gets them; every list keeps its start.
        let long = has_skips(docs.len() as u32);
        let mut entries = Vec::new();
        let mut start = None;
        let mut previous_last = 0;
        let (mut max_tf, mut min_length) = (0f32, f32::INFINITY);
        for (d, c) in docs.chunks(BLOCK_LEN).zip(counts.chunks(BLOCK_LEN)) {
            let size = encode_block(
                previous_last,
                d,
                c,
                scoring,
                lengths,
                avg_length,
                &mut self.scratch,
            );
            previous_last = *d.last().expect("chunks are not empty");
            let header = BlockHeader::read(&mut ByteReader::new(&self.scratch, 0))
                .expect("a block just encoded reads back");
            max_tf = max_tf.max(header.max_tf);
            min_length = min_length.min(header.min_length);
            let at = self.put(size);
            start.get_or_insert(at);
            if long {
                entries.push(SkipEntry {
                    last_doc: header.last_doc,
                    max_saturated: header.max_saturated,
                    at,
                });
            }
        }
        let mut start = start.expect("a posting list is never empty");
        for (i, entry) in entries.iter().enumerate() {
            entry.write(&mut ByteWriter::new(&mut self.scratch, 0));
            let at = self.put(SKIP_ENTRY_SIZE);
            if i == 0 {
                start = at;
            }
        }
        TermInfo {
            doc_freq: docs.len() as u32,
            postings_block: start.0,
            postings_offset: start.1,
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

/// The average document length a segment's blocks were written with (their `max_saturated`):
/// its total length over its documents, both of which its description keeps.
pub fn written_avg_length(total_length: f64, num_docs: u32) -> f64 {
    if num_docs == 0 {
        0.0
    } else {
        total_length / num_docs as f64
    }
}

/// Writes a segment whose documents are known up front and whose terms arrive in byte order.
pub struct SegmentWriter<'s, S: PageWrite + 's> {
    store: &'s S,
    scoring: TermScoring,
    docs: Vec<DocRow>,
    lengths: Vec<f32>,
    /// Σ lengths: with the documents, the average the blocks' `max_saturated` is computed with
    /// ([`written_avg_length`]), which a search reads back from the segment's description.
    total_length: f64,
    postings: PostingsWriter<'s, S>,
    dictionary: Vec<(Vec<u8>, TermInfo)>,
}

impl<'s, S: PageWrite> SegmentWriter<'s, S> {
    /// `docs[i]` is document `i`.
    pub fn new(store: &'s S, scoring: TermScoring, docs: Vec<DocRow>) -> Self {
        let lengths = docs.iter().map(|d| d.length).collect();
        let total_length: f64 = docs.iter().map(|d| d.length as f64).sum();
        SegmentWriter {
            store,
            scoring,
            total_length,
            docs,
            lengths,
            postings: PostingsWriter::new(store),
            dictionary: Vec::new(),
        }
    }

    fn avg_length(&self) -> f64 {
        written_avg_length(self.total_length, self.docs.len() as u32)
    }

    pub fn add_term(&mut self, term: &[u8], docs: &[u32], counts: &[FieldCounts]) {
        debug_assert!(
            self.dictionary
                .last()
                .is_none_or(|(t, _)| t.as_slice() < term),
            "terms arrive sorted"
        );
        let info = self.postings.write_list(
            docs,
            counts,
            &self.scoring,
            &self.lengths,
            self.avg_length(),
        );
        self.dictionary.push((term.to_vec(), info));
    }

    pub fn finish(self) -> SegmentDesc {
        let SegmentWriter {
            store,
            docs,
            postings,
            dictionary,
            total_length,
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
            total_length,
            has_tombstones: false,
            num_pages: postings_pages + dict_pages + (doc_pages.len() + directory.len()) as u32,
        }
    }
}

/// An in-memory inverted index of analyzed documents, written out as one segment.
pub struct SegmentBuilder {
    scoring: TermScoring,
    docs: Vec<DocRow>,
    terms: rustc_hash::FxHashMap<String, (Vec<u32>, Vec<FieldCounts>)>,
    memory: usize,
}

impl SegmentBuilder {
    pub fn new(scoring: TermScoring) -> Self {
        SegmentBuilder {
            scoring,
            docs: Vec::new(),
            terms: Default::default(),
            memory: 0,
        }
    }

    pub fn add(&mut self, tid: Tid, doc: &AnalyzedDoc) {
        let id = self.docs.len() as u32;
        self.docs.push(DocRow {
            tid,
            length: stored_length(&self.scoring.weights, &doc.lengths),
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
            scoring,
            docs,
            terms,
            ..
        } = self;
        let mut sorted: Vec<_> = terms.into_iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut writer = SegmentWriter::new(store, scoring, docs);
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
    /// The document pages, read on first use: a search whose document table is cached, and
    /// every posting list and dictionary read, never needs them.
    directory: std::cell::OnceCell<Vec<BlockNumber>>,
}

impl<'s, S: PageRead> SegmentReader<'s, S> {
    pub fn open(store: &'s S, desc: SegmentDesc) -> Result<Self, Corrupt> {
        check_dictionary_desc(&desc)?;
        Ok(SegmentReader {
            store,
            desc,
            directory: std::cell::OnceCell::new(),
        })
    }

    /// The document pages. The directory is read on the first call and checked against the
    /// segment's description: as many document pages as its documents fill, each a distinct
    /// page of the index.
    pub fn document_pages(&self) -> Result<&[BlockNumber], Corrupt> {
        if let Some(directory) = self.directory.get() {
            return Ok(directory);
        }
        let (store, desc) = (self.store, &self.desc);
        let mut pages = Chain::new("a segment's document directory", FIRST_DATA_BLOCK);
        let mut directory = Vec::new();
        let mut blkno = desc.directory_head;
        while blkno != NO_BLOCK {
            pages.visit(store, blkno)?;
            let page = store.read(blkno);
            blkno = read_directory_page(&page, &mut directory).in_block(blkno)?;
        }
        for &doc_page in &directory {
            pages.visit(store, doc_page)?;
        }
        let per_page = docs_per_page(store.page_size());
        if directory.len() != (desc.num_docs as usize).div_ceil(per_page) {
            return corrupt(format_args!(
                "segment of {} documents has {} document pages",
                desc.num_docs,
                directory.len()
            ));
        }
        Ok(self.directory.get_or_init(|| directory))
    }

    /// Every document, in id order. Every page but the last holds a full page of documents,
    /// so ids are what the posting lists mean by them.
    pub fn for_each_doc(&self, mut f: impl FnMut(u32, DocEntry)) -> Result<(), Corrupt> {
        let per_page = docs_per_page(self.store.page_size()) as u32;
        let mut id = 0u32;
        for &blkno in self.document_pages()? {
            crate::interrupt::check();
            let page = self.store.read(blkno);
            let expected = per_page.min(self.desc.num_docs - id);
            let entries = doc_entries(&page).in_block(blkno)?;
            if entries.len() != expected as usize {
                return Err(Corrupt::new(format_args!(
                    "document page holds {} documents instead of {expected}",
                    entries.len()
                ))
                .in_block(blkno));
            }
            for entry in entries {
                f(id, entry);
                id += 1;
            }
        }
        Ok(())
    }

    /// The term's entry, checked against the segment (a list never has more documents than
    /// the segment).
    pub fn term(&self, term: &[u8]) -> Result<Option<TermInfo>, Corrupt> {
        let info =
            dictionary::lookup(self.store, self.desc.dict_root, self.desc.dict_height, term)?;
        if let Some(info) = &info {
            self.check_term(info)?;
        }
        Ok(info)
    }

    fn check_term(&self, info: &TermInfo) -> Result<(), Corrupt> {
        if info.doc_freq > self.desc.num_docs {
            return corrupt(format_args!(
                "a term in {} documents of a segment of {}",
                info.doc_freq, self.desc.num_docs
            ));
        }
        Ok(())
    }

    /// A cursor at the first document of the term's list.
    pub fn postings(&self, info: &TermInfo) -> Result<PostingCursor<'s, S>, Corrupt> {
        self.check_term(info)?;
        let mut cursor = PostingCursor::new(self.store, info, self.desc.num_docs)?;
        cursor.first_document()?;
        Ok(cursor)
    }

    /// A cursor that reads the term's list by blocks ([`PostingCursor::block_entries`],
    /// [`PostingCursor::decode_block`]): no block is decoded before one is asked for.
    pub fn block_cursor(&self, info: &TermInfo) -> Result<PostingCursor<'s, S>, Corrupt> {
        self.check_term(info)?;
        PostingCursor::new(self.store, info, self.desc.num_docs)
    }

    /// Every page the segment owns, each once (they are freed with it: a page listed twice, or
    /// owned by two structures, would be freed twice).
    pub fn pages(&self) -> Result<Vec<BlockNumber>, Corrupt> {
        let mut out = dictionary::pages(self.store, self.desc.dict_root, self.desc.dict_height)?;
        out.extend_from_slice(self.document_pages()?);
        self.chain_pages(
            self.desc.directory_head,
            PageKind::DocumentDirectory,
            &mut out,
        )?;
        self.chain_pages(self.desc.postings_head, PageKind::Postings, &mut out)?;
        let mut distinct = out.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() != out.len() {
            return corrupt("a segment's structures share pages");
        }
        Ok(out)
    }

    fn chain_pages(
        &self,
        head: BlockNumber,
        kind: PageKind,
        out: &mut Vec<BlockNumber>,
    ) -> Result<(), Corrupt> {
        let mut chain = Chain::new("a segment's page chain", FIRST_DATA_BLOCK);
        let mut blkno = head;
        while blkno != NO_BLOCK {
            out.push(chain.visit(self.store, blkno)?);
            blkno = PageHeader::read(&self.store.read(blkno), kind)
                .in_block(blkno)?
                .next;
        }
        Ok(())
    }
}

/// A dictionary is absent exactly when the segment has no terms, and never taller than levels
/// can be numbered.
fn check_dictionary_desc(desc: &SegmentDesc) -> Result<(), Corrupt> {
    let empty = desc.dict_root == NO_BLOCK;
    let height_ok = if empty {
        desc.dict_height == 0
    } else {
        (1..=dictionary::MAX_HEIGHT).contains(&desc.dict_height)
    };
    if !height_ok || empty != (desc.num_terms == 0) {
        return corrupt(format_args!(
            "a segment of {} terms has dictionary root {} and height {}",
            desc.num_terms, desc.dict_root, desc.dict_height
        ));
    }
    Ok(())
}

/// Appends a directory page's document pages to `out`; returns the next directory page.
fn read_directory_page(page: &[u8], out: &mut Vec<BlockNumber>) -> Result<BlockNumber, Corrupt> {
    let header = PageHeader::read(page, PageKind::DocumentDirectory)?;
    header.check_count(4)?;
    let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
    for _ in 0..header.count {
        out.push(r.u32()?);
    }
    Ok(header.next)
}

fn read_doc_entry(r: &mut ByteReader) -> Result<DocEntry, Corrupt> {
    let tid = Tid::read(r)?;
    let flags = r.u16()?;
    let length = check_non_negative(r.f32()?, "a document's length")?;
    Ok(DocEntry {
        tid,
        deleted: flags & DOC_DELETED != 0,
        length,
        fingerprint: r.u64()?,
    })
}

/// The header of a document page, its count checked against the page.
fn doc_page_header(page: &[u8]) -> Result<PageHeader, Corrupt> {
    let header = PageHeader::read(page, PageKind::Documents)?;
    header.check_count(DOC_ENTRY_SIZE)?;
    Ok(header)
}

/// The entries of one document page.
pub fn doc_entries(page: &[u8]) -> Result<Vec<DocEntry>, Corrupt> {
    let header = doc_page_header(page)?;
    let mut r = ByteReader::new(&page[..header.used as usize], HEADER_SIZE);
    (0..header.count).map(|_| read_doc_entry(&mut r)).collect()
}

/// Marks documents of one document page dead; returns how many were newly marked.
pub fn set_tombstones(
    page: &mut [u8],
    mut is_dead: impl FnMut(Tid) -> bool,
) -> Result<usize, Corrupt> {
    let header = doc_page_header(page)?;
    let mut marked = 0;
    for slot in 0..header.count as usize {
        let at = HEADER_SIZE + slot * DOC_ENTRY_SIZE;
        let entry = read_doc_entry(&mut ByteReader::new(page, at))?;
        if !entry.deleted && is_dead(entry.tid) {
            ByteWriter::new(page, at + Tid::SIZE).u16(DOC_DELETED);
            marked += 1;
        }
    }
    Ok(marked)
}

/// End of a posting list.
pub const END: u32 = u32::MAX;

/// Walks one posting list block by block; skips blocks by their headers, or by the list's skip
/// entries ([`super::skips`]) where it has them, without decoding them.
///
/// What it checks, so that a damaged list is an error and never a loop or a wrong index: the
/// list has the blocks its document frequency gives (full ones, then the rest), every block's
/// last document is inside the segment and above the previous block's, a block agrees with its
/// skip entry, and decoding gives strictly increasing documents ending there. A walk therefore
/// ends after at most ⌈doc_freq / 128⌉ blocks whatever the page links say.
pub struct PostingCursor<'s, S: PageRead> {
    store: &'s S,
    /// Documents of the segment: every document id is below it.
    num_docs: u32,
    doc_freq: u32,
    /// Blocks of the list.
    blocks: u32,
    /// Where the first block's header is.
    first_at: (BlockNumber, u16),
    /// One entry per block: read from the index for a long list; built from the headers by
    /// [`Self::block_entries`] for a short one (empty until then).
    skips: Vec<SkipEntry>,
    /// The largest `max_saturated` of the list, where it has stored skip entries.
    list_saturated: Option<f32>,
    header: BlockHeader,
    /// Where the current block's header is.
    header_at: (BlockNumber, u16),
    /// Where the current block's packed arrays start.
    data_at: (BlockNumber, u16),
    /// Where the next block's header is.
    next_at: (BlockNumber, u16),
    /// Last document of the previous block (the delta base of the current one).
    previous_last: u32,
    block: Box<DecodedBlock>,
    /// A copy of posting page `page_of`: a page holds tens of blocks, and reading each header
    /// and payload from the copy saves a buffer lookup, pin and lock per read. Posting pages
    /// never change while a search holds the readers lock.
    page: Vec<u8>,
    page_of: BlockNumber,
    /// The next page of the list after `page` (from its header).
    page_next: BlockNumber,
    decoded: bool,
    index: usize,
    doc: u32,
    /// The current block's position in the list plus one (0 before the first): changes exactly
    /// when the current block does.
    blocks_loaded: u32,
}

impl<'s, S: PageRead> PostingCursor<'s, S> {
    fn new(store: &'s S, info: &TermInfo, num_docs: u32) -> Result<Self, Corrupt> {
        let blocks = blocks_of(info.doc_freq);
        let start = (info.postings_block, info.postings_offset);
        let skips = if has_skips(info.doc_freq) {
            read_skips(store, start, blocks, num_docs)?
        } else {
            Vec::new()
        };
        let list_saturated = skips.iter().map(|e| e.max_saturated).reduce(f32::max);
        let first_at = skips.first().map_or(start, |e| e.at);
        Ok(PostingCursor {
            store,
            num_docs,
            doc_freq: info.doc_freq,
            blocks,
            first_at,
            skips,
            list_saturated,
            header: BlockHeader {
                len: 0,
                doc_bits: 0,
                count_bits: [0; 3],
                payload_len: 0,
                last_doc: 0,
                max_tf: 0.0,
                min_length: 0.0,
                max_saturated: 0.0,
            },
            header_at: (NO_BLOCK, 0),
            data_at: (NO_BLOCK, 0),
            next_at: first_at,
            previous_last: 0,
            block: Box::default(),
            page: Vec::new(),
            page_of: NO_BLOCK,
            page_next: NO_BLOCK,
            decoded: false,
            index: 0,
            // No current document until `first_document` or `decode_block`.
            doc: END,
            blocks_loaded: 0,
        })
    }

    /// Positions the cursor at the list's first document.
    fn first_document(&mut self) -> Result<(), Corrupt> {
        self.next_at = self.first_at;
        self.blocks_loaded = 0;
        if self.load_block(0)? {
            self.decode()?;
            self.doc = self.block.docs[0];
        } else {
            self.doc = END;
        }
        Ok(())
    }

    /// Where block `j`'s header is, the last document before it, and the skip entry it is
    /// checked against (every block of a list with entries is, so the entries a search by one
    /// term trusts are the ones a walk checks). Without entries only the next block can be
    /// found.
    fn place_of(&self, j: u32) -> ((BlockNumber, u16), u32, Option<SkipEntry>) {
        match self.skips.get(j as usize) {
            Some(e) => {
                let previous_last = j
                    .checked_sub(1)
                    .map_or(0, |p| self.skips[p as usize].last_doc);
                (e.at, previous_last, Some(*e))
            }
            None => {
                debug_assert_eq!(
                    j, self.blocks_loaded,
                    "blocks without entries load in order"
                );
                let previous_last = if j == 0 { 0 } else { self.header.last_doc };
                (self.next_at, previous_last, None)
            }
        }
    }

    /// Reads and checks block `j`'s header at `at` of `page` (that posting page's bytes in use;
    /// `next`, the page after it): returns the header, where its packed arrays start and where
    /// the next block's header is.
    fn read_header(
        &self,
        page: &[u8],
        next: BlockNumber,
        j: u32,
        at: (BlockNumber, u16),
        previous_last: u32,
        entry: Option<SkipEntry>,
    ) -> Result<(BlockHeader, u16, (BlockNumber, u16)), Corrupt> {
        let blkno = at.0;
        let (header, data_at, next_at) = block_at(page, next, blkno, at.1).in_block(blkno)?;
        self.check_header(&header, j, previous_last)
            .in_block(blkno)?;
        if let Some(e) = entry {
            if header.last_doc != e.last_doc
                || header.max_saturated.to_bits() != e.max_saturated.to_bits()
            {
                return Err(
                    Corrupt::new("a posting block disagrees with its skip entry").in_block(blkno),
                );
            }
        }
        Ok((header, data_at, next_at))
    }

    /// Makes block `j` (its header read and checked) the current one, not yet decoded.
    fn set_block(
        &mut self,
        j: u32,
        at: (BlockNumber, u16),
        previous_last: u32,
        (header, data_at, next_at): (BlockHeader, u16, (BlockNumber, u16)),
    ) {
        self.header = header;
        self.header_at = at;
        self.data_at = (at.0, data_at);
        self.next_at = next_at;
        self.previous_last = previous_last;
        self.blocks_loaded = j + 1;
        self.decoded = false;
        self.index = 0;
    }

    /// Loads block `j`'s header (not its postings) from a copy of its page; false past the
    /// end of the list.
    fn load_block(&mut self, j: u32) -> Result<bool, Corrupt> {
        if j >= self.blocks {
            return Ok(false);
        }
        let (at, previous_last, entry) = self.place_of(j);
        if at.0 != self.page_of {
            self.load_page(at.0)?;
        }
        let read = self.read_header(&self.page, self.page_next, j, at, previous_last, entry)?;
        self.set_block(j, at, previous_last, read);
        Ok(true)
    }

    /// Moves to the next block's header; false at the end of the list.
    fn load_next_header(&mut self) -> Result<bool, Corrupt> {
        self.load_block(self.blocks_loaded)
    }

    /// Copies posting page `blkno` into `page`: long lists cross many pages, and the blocks on
    /// one are read from the copy.
    fn load_page(&mut self, blkno: BlockNumber) -> Result<(), Corrupt> {
        crate::interrupt::check();
        let blkno = check_block_to_read(
            self.store,
            blkno,
            FIRST_DATA_BLOCK,
            "a posting list's next block",
        )?;
        let page = self.store.read(blkno);
        let page_header = PageHeader::read(&page, PageKind::Postings).in_block(blkno)?;
        self.page.clear();
        self.page
            .extend_from_slice(&page[..page_header.used as usize]);
        self.page_of = blkno;
        self.page_next = page_header.next;
        Ok(())
    }

    /// Block `j`'s header agrees with its place in the list.
    fn check_header(
        &self,
        header: &BlockHeader,
        j: u32,
        previous_last: u32,
    ) -> Result<(), Corrupt> {
        let expected_len = if j + 1 < self.blocks {
            BLOCK_LEN
        } else {
            let df = self.doc_freq as usize;
            df - BLOCK_LEN * ((df - 1) / BLOCK_LEN)
        };
        if header.len != expected_len {
            return corrupt(format_args!(
                "posting block of {} postings where the list needs {expected_len}",
                header.len
            ));
        }
        let rising = j == 0 || header.last_doc > previous_last;
        if header.last_doc >= self.num_docs || !rising {
            return corrupt(format_args!(
                "posting block ends at document {} (after {previous_last}, in a segment of {})",
                header.last_doc, self.num_docs
            ));
        }
        Ok(())
    }

    /// Decodes the current block from the copy of its page.
    fn decode(&mut self) -> Result<(), Corrupt> {
        debug_assert_eq!(
            self.page_of, self.data_at.0,
            "the block's page is the one copied"
        );
        let page = std::mem::take(&mut self.page);
        let decoded = self.decode_from(&page);
        self.page = page;
        decoded
    }

    /// Decodes the current block from `page`, the bytes in use of the page it is on.
    fn decode_from(&mut self, page: &[u8]) -> Result<(), Corrupt> {
        let (blkno, at) = self.data_at;
        let end = at as usize + self.header.payload_len;
        let Some(bytes) = page.get(..end) else {
            return Err(Corrupt::new("posting block runs past its page").in_block(blkno));
        };
        let mut r = ByteReader::new(bytes, at as usize);
        decode_block(self.previous_last, &self.header, &mut r, &mut self.block).in_block(blkno)?;
        if self.blocks_loaded > 1 && self.block.docs[0] <= self.previous_last {
            return Err(
                Corrupt::new("posting block starts at or below the previous block's end")
                    .in_block(blkno),
            );
        }
        self.decoded = true;
        Ok(())
    }

    #[inline]
    pub fn doc(&self) -> u32 {
        self.doc
    }

    /// The current block's documents from the current one to the block's end, with their
    /// per-field counts (`None` where the block is not decoded, or at the list's end): for a
    /// loop over a block's run of documents, after which [`Self::advance`] moves the cursor.
    #[inline]
    pub fn rest_of_block(&self) -> Option<(&[u32], [&[u32]; 3])> {
        if !self.decoded || self.doc == END {
            return None;
        }
        let range = self.index..self.header.len;
        let counts = &self.block.counts;
        Some((
            &self.block.docs[range.clone()],
            [
                &counts[0][range.clone()],
                &counts[1][range.clone()],
                &counts[2][range],
            ],
        ))
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

    /// The largest `max_saturated` of the list's blocks, where its skip entries hold it (long
    /// lists): with [`super::document::Scorer::block_bound`], a bound of the whole list.
    pub fn list_saturated(&self) -> Option<f32> {
        self.list_saturated
    }

    pub fn next(&mut self) -> Result<(), Corrupt> {
        if self.doc == END {
            return Ok(());
        }
        if self.index + 1 < self.header.len {
            self.index += 1;
            self.doc = self.block.docs[self.index];
        } else if self.load_next_header()? {
            self.decode()?;
            self.doc = self.block.docs[0];
        } else {
            self.doc = END;
        }
        Ok(())
    }

    /// [`Self::advance`] for targets far apart, as looking a few documents up: where the list
    /// has skip entries, the block that would hold `target` is found by a binary search of
    /// them and its header read directly, instead of reading every header up to it.
    pub fn advance_far(&mut self, target: u32) -> Result<(), Corrupt> {
        if self.doc == END || (self.decoded && self.doc >= target) {
            return Ok(());
        }
        if !self.skips.is_empty() && self.header.last_doc < target {
            // Blocks up to the current one end below `target`.
            let after = self.blocks_loaded as usize;
            let j = after + self.skips[after..].partition_point(|e| e.last_doc < target);
            if !self.load_block(j as u32)? {
                self.doc = END;
                return Ok(());
            }
        }
        self.advance(target)
    }

    /// Moves to the first document ≥ `target`.
    pub fn advance(&mut self, target: u32) -> Result<(), Corrupt> {
        if self.doc == END || (self.decoded && self.doc >= target) {
            return Ok(());
        }
        if !self.seek_block(target)? {
            return Ok(());
        }
        if !self.decoded {
            self.decode()?;
            self.index = 0;
        }
        // The block ends at `last_doc` ≥ `target` (decode checked it), so the point is inside.
        let docs = &self.block.docs[..self.header.len];
        self.index += docs[self.index..].partition_point(|&d| d < target);
        self.doc = docs[self.index];
        Ok(())
    }

    /// One entry per block of the list, in order: its skip entries, or for a short list the
    /// same values read from every block header (which leaves the cursor without a current
    /// document until [`Self::decode_block`]). A search by one term picks the blocks worth
    /// decoding from them.
    pub fn block_entries(&mut self) -> Result<&[SkipEntry], Corrupt> {
        if self.skips.is_empty() {
            self.next_at = self.first_at;
            self.blocks_loaded = 0;
            let mut entries = Vec::with_capacity(self.blocks as usize);
            while self.load_next_header()? {
                entries.push(SkipEntry {
                    last_doc: self.header.last_doc,
                    max_saturated: self.header.max_saturated,
                    at: self.header_at,
                });
            }
            self.skips = entries;
            self.doc = END;
        }
        Ok(&self.skips)
    }

    /// Decodes block `j` of [`Self::block_entries`] where `worth` says its header is worth it,
    /// and returns its documents and per-field counts; it becomes the current block (the
    /// cursor at its first document, or without a current document when it was not decoded).
    pub fn decode_block_if(
        &mut self,
        j: usize,
        worth: impl FnOnce(&BlockHeader) -> bool,
    ) -> Result<Option<(&[u32], &[[u32; BLOCK_LEN]; 3])>, Corrupt> {
        assert!(j < self.skips.len(), "a block of the list's entries");
        let j = j as u32;
        let (at, previous_last, entry) = self.place_of(j);
        self.doc = END;
        if at.0 == self.page_of {
            self.load_block(j)?;
            if !worth(&self.header) {
                return Ok(None);
            }
            self.decode()?;
        } else {
            // Read in place: the blocks a search by one term picks lie on scattered pages, and
            // copying a whole page for one block of it costs more than the block's decoding.
            crate::interrupt::check();
            let store = self.store;
            let blkno =
                check_block_to_read(store, at.0, FIRST_DATA_BLOCK, "a posting list's block")?;
            let page = store.read(blkno);
            let page_header = PageHeader::read(&page, PageKind::Postings).in_block(blkno)?;
            let page = &page[..page_header.used as usize];
            let read = self.read_header(page, page_header.next, j, at, previous_last, entry)?;
            self.set_block(j, at, previous_last, read);
            if !worth(&self.header) {
                return Ok(None);
            }
            self.decode_from(page)?;
        }
        self.doc = self.block.docs[0];
        Ok(Some((
            &self.block.docs[..self.header.len],
            &self.block.counts,
        )))
    }

    /// Moves (by headers only) to the block that would hold `target`; false when the list has
    /// no document ≥ `target`. The current document is then only known to be below the block's
    /// end: call [`Self::advance`] before reading it. (A binary search of the skip entries was
    /// slower in the benchmark: seeks there go at most a few blocks ahead.)
    pub fn seek_block(&mut self, target: u32) -> Result<bool, Corrupt> {
        if self.doc == END {
            return Ok(false);
        }
        while self.header.last_doc < target {
            if !self.load_next_header()? {
                self.doc = END;
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The header of the block at `offset` of posting page `blkno`, where its packed arrays start,
/// and where the next block's header is. `page` is the page's bytes in use (its header checked)
/// and `next` the page after it.
fn block_at(
    page: &[u8],
    next: BlockNumber,
    blkno: BlockNumber,
    offset: u16,
) -> Result<(BlockHeader, u16, (BlockNumber, u16)), Corrupt> {
    let used = page.len();
    if (offset as usize) < HEADER_SIZE {
        return corrupt(format_args!("posting block at offset {offset}"));
    }
    let mut r = ByteReader::new(page, offset as usize);
    let header = BlockHeader::read(&mut r)?;
    let data_at = r.pos as u16;
    let end = offset as usize + header.encoded_size();
    if end > used {
        return corrupt("posting block runs past its page");
    }
    let next_at = if end < used {
        (blkno, end as u16)
    } else {
        (next, HEADER_SIZE as u16)
    };
    Ok((header, data_at, next_at))
}
