//! Structural changes: creating the index, merging the append area into a segment, merging
//! segments, tombstones for dead tuples, and VACUUM's cleanup that makes statistics exact again.
//!
//! Concurrency contract with the caller (the extension maps it onto Postgres locks):
//! - one structural change at a time, and never at the same time as [`bulk_delete`] (a merge
//!   that copied a document VACUUM is marking dead would resurrect it);
//! - readers compute a batch of results under a shared lock; [`Exclusion::lock_readers_out`]
//!   takes it exclusively around the metapage switch that publishes a change and the freeing of
//!   the pages it replaced, so no reader ever follows a freed page;
//! - inserts run concurrently with merges and with [`bulk_delete`]; they only touch the append
//!   area, but they follow chains a merge frees, so they count as readers for
//!   [`Exclusion::lock_readers_out`].

use super::append::{self, live_documents, meta_of, read_meta};
use super::dictionary::{TermInfo, TermIter};
use super::document::FieldCounts;
use super::format::{
    corrupt, Corrupt, InBlock, Meta, PageHeader, PageKind, SegmentDesc, TermScoring, Tid,
    FIRST_DATA_BLOCK, MAX_SEGMENTS, META_BLOCK,
};
use super::segment::{
    doc_entries, set_tombstones, DocRow, SegmentBuilder, SegmentReader, SegmentWriter, END,
};
use crate::page::{check_block, BlockNumber, PageRead, PageWrite, NO_BLOCK};

/// How the caller keeps readers away while pages are switched and freed.
pub trait Exclusion {
    fn lock_readers_out(&self);
    fn let_readers_in(&self);
}

/// For single-user contexts (CREATE INDEX, tests).
pub struct NoReaders;

impl Exclusion for NoReaders {
    fn lock_readers_out(&self) {}
    fn let_readers_in(&self) {}
}

fn write_meta<S: PageWrite>(store: &S, change: impl FnOnce(&mut Meta)) -> Result<Meta, Corrupt> {
    let mut guard = store.write(META_BLOCK);
    let mut meta = meta_of(&guard)?;
    change(&mut meta);
    meta.write(&mut guard);
    Ok(meta)
}

/// Writes the metapage and an empty append area into an empty store (block 0 becomes the meta).
pub fn initialize<S: PageWrite>(store: &S, options: super::format::IndexOptions) {
    let (blkno, mut guard) = store.allocate();
    assert_eq!(
        blkno, META_BLOCK,
        "the metapage is the relation's first page"
    );
    Meta::new(options).write(&mut guard);
    drop(guard);
    let head = append::new_chain(store);
    write_meta(store, |m| {
        m.append_head = head;
        m.append_tail = head;
    })
    .expect("a metapage just written reads back");
}

/// Publishes a segment (CREATE INDEX's, bulk inserts', or tests' built in memory), then rebalances so that
/// segments stay a logarithmic number.
pub fn add_segment<S: PageWrite>(
    store: &S,
    segment: SegmentDesc,
    ex: &dyn Exclusion,
) -> Result<(), Corrupt> {
    write_meta(store, |m| {
        m.segments.push(segment);
        m.bump_generation();
    })?;
    merge_by_size(store, ex)
}

/// Pages of all `readers`, checked to be distinct: freeing a page twice would hand it to two
/// new structures.
fn owned_pages<S: PageRead>(readers: &[SegmentReader<S>]) -> Result<Vec<BlockNumber>, Corrupt> {
    let mut pages = Vec::new();
    for r in readers {
        pages.extend(r.pages()?);
    }
    check_distinct(&pages)?;
    Ok(pages)
}

fn check_distinct(pages: &[BlockNumber]) -> Result<(), Corrupt> {
    let mut sorted = pages.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return corrupt("two structures of the index share a page");
    }
    Ok(())
}

/// Merges segments `which` (metapage positions) into one; documents with tombstones are dropped.
pub fn merge_segments<S: PageWrite>(
    store: &S,
    which: &[usize],
    ex: &dyn Exclusion,
) -> Result<(), Corrupt> {
    if which.is_empty() {
        return Ok(());
    }
    let meta = read_meta(store)?;
    let inputs: Vec<SegmentDesc> = which.iter().map(|&i| meta.segments[i]).collect();
    let readers: Vec<SegmentReader<S>> = inputs
        .iter()
        .map(|d| SegmentReader::open(store, *d))
        .collect::<Result<_, _>>()?;
    // Read (and checked) before anything is written, so a damaged input stops the merge early.
    let old_pages = owned_pages(&readers)?;
    let merged = write_merged(store, &readers, meta.options.term_scoring(), None, store)?;

    ex.lock_readers_out();
    let published = write_meta(store, |m| {
        for (i, d) in which.iter().zip(&inputs) {
            assert_eq!(m.segments[*i], *d, "a segment changed during its merge");
        }
        let first = *which.iter().min().expect("not empty");
        let mut kept: Vec<SegmentDesc> = m
            .segments
            .iter()
            .enumerate()
            .filter(|(i, _)| !which.contains(i))
            .map(|(_, d)| *d)
            .collect();
        if merged.num_docs > 0 {
            kept.insert(first.min(kept.len()), merged);
        }
        m.segments = kept;
        m.bump_generation();
    })
    .and_then(|_| store.free(&old_pages));
    ex.let_readers_in();
    published?;
    if merged.num_docs == 0 {
        store.free(&SegmentReader::open(store, merged)?.pages()?)?;
    }
    Ok(())
}

/// Writes one segment into `dest` holding the live documents of `readers` (segments of
/// `source`, in order) and every term's postings, renumbered; returns its description.
/// `keep`, when given, says for each document of the inputs in order (the first segment's,
/// then the next one's...) whether it is written at all.
fn write_merged<R: PageRead, W: PageWrite>(
    source: &R,
    readers: &[SegmentReader<R>],
    scoring: TermScoring,
    keep: Option<&[bool]>,
    dest: &W,
) -> Result<SegmentDesc, Corrupt> {
    let total: u64 = readers.iter().map(|r| r.desc.num_docs as u64).sum();
    if keep.is_some_and(|k| k.len() as u64 != total) {
        return corrupt("the documents to keep do not match the segments merged");
    }
    // New ids: live documents of each input in order.
    let mut docs = Vec::new();
    let mut remap: Vec<Vec<u32>> = Vec::with_capacity(readers.len());
    let mut position = 0usize;
    for r in readers {
        let mut map = vec![END; r.desc.num_docs as usize];
        let first = position;
        position += r.desc.num_docs as usize;
        r.for_each_doc(|id, e| {
            if !e.deleted && keep.is_none_or(|k| k[first + id as usize]) {
                map[id as usize] = docs.len() as u32;
                docs.push(DocRow {
                    tid: e.tid,
                    length: e.length,
                    fingerprint: e.fingerprint,
                });
            }
        })?;
        remap.push(map);
    }

    let mut writer = SegmentWriter::new(dest, scoring, docs);
    let mut iters = Vec::with_capacity(readers.len());
    let mut heads: Vec<Option<(Vec<u8>, TermInfo)>> = Vec::with_capacity(readers.len());
    for r in readers {
        let mut it = TermIter::new(source, r.desc.dict_root, r.desc.dict_height)?;
        heads.push(it.next().transpose()?);
        iters.push(it);
    }
    let (mut ids, mut counts): (Vec<u32>, Vec<FieldCounts>) = (Vec::new(), Vec::new());
    // Each step consumes the smallest term of every input that has it; the iterators check
    // that terms strictly increase, so this ends after the inputs' terms.
    while let Some(term) = heads.iter().flatten().map(|(t, _)| t).min().cloned() {
        ids.clear();
        counts.clear();
        for s in 0..readers.len() {
            if heads[s].as_ref().is_none_or(|(t, _)| *t != term) {
                continue;
            }
            let (_, info) = heads[s].take().expect("checked above");
            heads[s] = iters[s].next().transpose()?;
            let mut cursor = readers[s].postings(&info)?;
            while cursor.doc() != END {
                // The cursor checked the document is inside the segment.
                let new_id = remap[s][cursor.doc() as usize];
                if new_id != END {
                    ids.push(new_id);
                    counts.push(cursor.counts());
                }
                cursor.next()?;
            }
        }
        if !ids.is_empty() {
            writer.add_term(&term, &ids, &counts);
        }
    }
    Ok(writer.finish())
}

/// The end of a CREATE INDEX that spilled: `spilled` (segments the build wrote to `scratch`, a
/// store thrown away after the build, such as a temporary file) merged into one segment of
/// `store`, published there. The index then holds that segment alone: no pages of the spills,
/// freed or not, so a build's size does not depend on maintenance_work_mem. `keep`, when given,
/// says for each document of `spilled` in order whether it is written (a session's bulk
/// inserts, some of whose rows died with a subtransaction).
pub fn add_merged_segment<R: PageRead, W: PageWrite>(
    store: &W,
    scratch: &R,
    spilled: &[SegmentDesc],
    keep: Option<&[bool]>,
    ex: &dyn Exclusion,
) -> Result<(), Corrupt> {
    let readers: Vec<SegmentReader<R>> = spilled
        .iter()
        .map(|d| SegmentReader::open(scratch, *d))
        .collect::<Result<_, _>>()?;
    owned_pages(&readers)?;
    let scoring = read_meta(store)?.options.term_scoring();
    let merged = write_merged(scratch, &readers, scoring, keep, store)?;
    if merged.num_docs == 0 {
        return store.free(&SegmentReader::open(store, merged)?.pages()?);
    }
    add_segment(store, merged, ex)
}

/// Makes an empty scratch store's block numbers start where an index's data pages do, so
/// segments written there link pages as they would in the index.
pub fn start_scratch<W: PageWrite>(scratch: &W) {
    while scratch.num_blocks() < FIRST_DATA_BLOCK {
        scratch.allocate();
    }
}

/// Turns the append area into a segment, then keeps segment sizes a binary counter
/// ([`merge_by_size`], also when the area is empty). Returns false when the area was empty.
pub fn flush_append<S: PageWrite>(store: &S, ex: &dyn Exclusion) -> Result<bool, Corrupt> {
    let meta = read_meta(store)?;
    let frozen = if meta.frozen_head != NO_BLOCK {
        // A previous merge stopped half-way (an error or a crash): finish it.
        meta.frozen_head
    } else {
        let head = check_block(store, meta.append_head, FIRST_DATA_BLOCK, "the append area")?;
        let header = PageHeader::read(&store.read(head), PageKind::Append).in_block(head)?;
        if header.count == 0 && header.next == NO_BLOCK {
            // Nothing to flush; the segments may still be out of shape (after bulk inserts).
            merge_by_size(store, ex)?;
            return Ok(false);
        }
        freeze_append(store)?
    };

    // Read (and checked) before anything is written.
    let docs = live_documents(store, frozen)?;
    let old_pages = append::chain_pages(store, frozen)?;
    let mut builder = SegmentBuilder::new(meta.options.term_scoring());
    for (tid, doc) in &docs {
        builder.add(*tid, doc);
    }
    let segment = (!builder.is_empty()).then(|| builder.write(store));

    ex.lock_readers_out();
    let published = write_meta(store, |m| {
        assert_eq!(
            m.frozen_head, frozen,
            "the frozen append area changed during its merge"
        );
        if let Some(s) = segment {
            m.segments.push(s);
        }
        m.frozen_head = NO_BLOCK;
        m.bump_generation();
    })
    .and_then(|_| store.free(&old_pages));
    ex.let_readers_in();
    published?;
    merge_by_size(store, ex)?;
    Ok(true)
}

/// Points inserters at a new, empty append area and freezes the old one; returns the old head.
fn freeze_append<S: PageWrite>(store: &S) -> Result<BlockNumber, Corrupt> {
    let new_head = append::new_chain(store);
    let mut guard = store.write(META_BLOCK);
    let mut m = meta_of(&guard)?;
    let last_known = if m.append_tail != NO_BLOCK {
        m.append_tail
    } else {
        m.append_head
    };
    append::freeze_chain(store, last_known)?;
    m.frozen_head = m.append_head;
    m.append_head = new_head;
    m.append_tail = new_head;
    m.append_pages = 0;
    m.bump_generation();
    m.write(&mut guard);
    Ok(m.frozen_head)
}

/// Merges segments while `pick` names some to merge, given their document counts (oldest
/// first), and all of them once there are nearly [`MAX_SEGMENTS`]. `pick` names at least two
/// segments, so every merge leaves fewer and this ends.
fn merge_while<S: PageWrite>(
    store: &S,
    ex: &dyn Exclusion,
    pick: impl Fn(&[u64]) -> Option<Vec<usize>>,
) -> Result<(), Corrupt> {
    loop {
        let sizes: Vec<u64> = read_meta(store)?
            .segments
            .iter()
            .map(|s| s.num_docs as u64)
            .collect();
        let which = if sizes.len() >= MAX_SEGMENTS - 2 {
            (0..sizes.len()).collect()
        } else {
            match pick(&sizes) {
                Some(which) => which,
                None => return Ok(()),
            }
        };
        merge_segments(store, &which, ex)?;
    }
}

/// Keeps the number of segments logarithmic: while a segment is at least half the size of the
/// one before it, the two are merged, the newest such pair first (a binary counter over segment
/// sizes). Inserts only ever break that at the newest pair; bulk inserts' segments and VACUUM's
/// rewrites can break it anywhere.
fn merge_by_size<S: PageWrite>(store: &S, ex: &dyn Exclusion) -> Result<(), Corrupt> {
    merge_while(store, ex, |sizes| {
        (0..sizes.len().saturating_sub(1))
            .rev()
            .find(|&i| sizes[i + 1] * 2 >= sizes[i])
            .map(|i| vec![i, i + 1])
    })
}

/// Result of [`bulk_delete`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeleteCounts {
    pub removed: u64,
    pub remaining: u64,
}

/// Marks every indexed document whose TID `is_dead` says is dead. Statistics stay as they were
/// until [`vacuum_cleanup`] rewrites the segments that got tombstones.
pub fn bulk_delete<S: PageWrite>(
    store: &S,
    is_dead: &mut dyn FnMut(Tid) -> bool,
) -> Result<DeleteCounts, Corrupt> {
    let meta = read_meta(store)?;
    let mut counts = DeleteCounts::default();
    for (position, desc) in meta.segments.iter().enumerate() {
        let reader = SegmentReader::open(store, *desc)?;
        let mut flagged = desc.has_tombstones;
        let mut live = 0u64;
        for &blkno in reader.document_pages()? {
            crate::interrupt::check();
            let entries = doc_entries(&store.read(blkno)).in_block(blkno)?;
            let alive = entries.iter().filter(|e| !e.deleted).count() as u64;
            // Ask about each TID once; the write below marks exactly these.
            let dead: Vec<Tid> = entries
                .iter()
                .filter(|e| !e.deleted && is_dead(e.tid))
                .map(|e| e.tid)
                .collect();
            if dead.is_empty() {
                live += alive;
                continue;
            }
            if !flagged {
                // The flag is durable before any tombstone is, so cleanup never misses one.
                write_meta(store, |m| {
                    assert_eq!(m.segments[position].directory_head, desc.directory_head);
                    m.segments[position].has_tombstones = true;
                    m.bump_generation();
                })?;
                flagged = true;
            }
            let mut guard = store.write(blkno);
            let marked =
                set_tombstones(&mut guard, |tid| dead.contains(&tid)).in_block(blkno)? as u64;
            counts.removed += marked;
            live += alive - marked.min(alive);
        }
        counts.remaining += live;
    }
    for head in [meta.frozen_head, meta.append_head] {
        if head != NO_BLOCK {
            let (removed, remaining) = append::mark_dead(store, head, is_dead)?;
            counts.removed += removed;
            counts.remaining += remaining;
        }
    }
    if counts.removed > 0 {
        // Readers that keep document tables in memory must see the new tombstones before the
        // heap reuses the dead tuples' TIDs (which happens after this returns).
        write_meta(store, |m| m.bump_generation())?;
    }
    Ok(counts)
}

/// VACUUM's last step: the append area becomes a segment, segments with tombstones are
/// rewritten without them (so document counts, lengths and frequencies are exact again), and
/// segment sizes are rebalanced. Returns the number of live documents.
pub fn vacuum_cleanup<S: PageWrite>(store: &S, ex: &dyn Exclusion) -> Result<u64, Corrupt> {
    flush_append(store, ex)?;
    let meta = read_meta(store)?;
    let dirty: Vec<usize> = meta
        .segments
        .iter()
        .enumerate()
        .filter(|(_, s)| s.has_tombstones)
        .map(|(i, _)| i)
        .collect();
    if !dirty.is_empty() {
        merge_segments(store, &dirty, ex)?;
        merge_by_size(store, ex)?;
    }
    Ok(read_meta(store)?
        .segments
        .iter()
        .map(|s| s.num_docs as u64)
        .sum())
}
