//! The append area: where inserts go until a merge turns them into a segment.
//!
//! A chain of append pages holding one record per document (split into parts when a document
//! has more distinct terms than a page holds). Queries read it whole, so its size is bounded:
//! when it passes `append_pages` pages the inserter that noticed merges it into a segment, and
//! VACUUM always does. Merging first *freezes* the chain (the metapage points inserters at a new,
//! empty chain and the old last page is flagged frozen so a racing inserter moves over), then
//! writes the segment, then publishes it and forgets the frozen chain in one metapage write.

use std::collections::HashMap;

use super::document::{AnalyzedDoc, FieldCounts};
use super::format::{
    corrupt, ByteReader, ByteWriter, Corrupt, InBlock, Meta, MetaError, PageHeader, PageKind, Tid,
    FIRST_DATA_BLOCK, FLAG_FROZEN, HEADER_SIZE, META_BLOCK,
};
use crate::page::{BlockNumber, Chain, PageRead, PageWrite, NO_BLOCK};

const RECORD_DELETED: u8 = 1;
const RECORD_CONTINUATION: u8 = 2;
const RECORD_HEADER: usize = Tid::SIZE + 1 + 1 + 2 + 12 + 8;
const TERM_FIXED: usize = 1 + 12;

/// One record part as read from a page.
pub struct RecordView<'a> {
    pub tid: Tid,
    pub deleted: bool,
    pub continuation: bool,
    pub lengths: FieldCounts,
    /// The document's fingerprint (first part; 0 in continuations).
    pub fingerprint: u64,
    pub terms: Vec<(&'a [u8], FieldCounts)>,
}

/// Serialises a document into parts that each fit an empty append page.
pub fn encode_parts(tid: Tid, doc: &AnalyzedDoc, page_size: usize) -> Vec<Vec<u8>> {
    let capacity = page_size - HEADER_SIZE;
    let mut parts = Vec::new();
    let mut terms = doc.terms.iter().peekable();
    loop {
        let first = parts.is_empty();
        let mut size = RECORD_HEADER;
        let mut chosen = Vec::new();
        while let Some((term, counts)) = terms.peek() {
            let need = TERM_FIXED + term.len();
            if size + need > capacity {
                break;
            }
            size += need;
            chosen.push((term.as_bytes(), *counts));
            terms.next();
        }
        let mut buf = vec![0u8; size];
        let mut w = ByteWriter::new(&mut buf, 0);
        tid.write(&mut w);
        w.u8(if first { 0 } else { RECORD_CONTINUATION });
        w.u8(0);
        w.u16(chosen.len() as u16);
        for l in if first { doc.lengths } else { [0; 3] } {
            w.u32(l);
        }
        w.u64(if first { doc.fingerprint } else { 0 });
        for (term, counts) in chosen {
            w.u8(term.len() as u8);
            w.bytes(term);
            for c in counts {
                w.u32(c);
            }
        }
        parts.push(buf);
        if terms.peek().is_none() {
            return parts;
        }
    }
}

fn read_record<'a>(r: &mut ByteReader<'a>) -> Result<RecordView<'a>, Corrupt> {
    let tid = Tid::read(r)?;
    let flags = r.u8()?;
    let _pad = r.u8()?;
    let nterms = r.u16()? as usize;
    let lengths = [r.u32()?, r.u32()?, r.u32()?];
    let fingerprint = r.u64()?;
    // Checked before the vector is sized by it.
    if nterms * TERM_FIXED > r.remaining() {
        return corrupt(format_args!(
            "an append record claims {nterms} terms in {} bytes",
            r.remaining()
        ));
    }
    let mut terms = Vec::with_capacity(nterms);
    for _ in 0..nterms {
        let len = r.u8()? as usize;
        let term = r.bytes(len)?;
        terms.push((term, [r.u32()?, r.u32()?, r.u32()?]));
    }
    Ok(RecordView {
        tid,
        deleted: flags & RECORD_DELETED != 0,
        continuation: flags & RECORD_CONTINUATION != 0,
        lengths,
        fingerprint,
        terms,
    })
}

/// An append page's header and a reader over its records.
fn append_page(page: &[u8]) -> Result<(PageHeader, ByteReader<'_>), Corrupt> {
    let header = PageHeader::read(page, PageKind::Append)?;
    header.check_count(RECORD_HEADER)?;
    Ok((
        header,
        ByteReader::new(&page[..header.used as usize], HEADER_SIZE),
    ))
}

/// A walk over one append chain (see [`Chain`]: no cycles, no block outside the index).
fn append_chain() -> Chain {
    Chain::new("an append chain", FIRST_DATA_BLOCK)
}

/// Starts a new empty chain; returns its first page.
pub fn new_chain<S: PageWrite>(store: &S) -> BlockNumber {
    let (blkno, mut guard) = store.allocate();
    PageHeader::new(PageKind::Append).write(&mut guard);
    blkno
}

/// Reads the metapage (callers have checked the format when they opened the index, so any
/// failure now is damage).
pub fn read_meta<S: PageRead>(store: &S) -> Result<Meta, Corrupt> {
    meta_of(&store.read(META_BLOCK))
}

/// [`Meta::read`] where every failure is corruption.
pub fn meta_of(page: &[u8]) -> Result<Meta, Corrupt> {
    Meta::read(page).map_err(|e| match e {
        MetaError::Corrupt(c) => c,
        other => Corrupt::new(other).in_block(META_BLOCK),
    })
}

/// Appends one document. Returns true when the append area has grown past its limit (the
/// index's `append_pages`).
///
/// The caller keeps merges from freeing pages meanwhile (a reader of the chain; see
/// `maintenance`): the metapage read here may name a chain a merge is freezing.
pub fn insert<S: PageWrite>(store: &S, tid: Tid, doc: &AnalyzedDoc) -> Result<bool, Corrupt> {
    let past_limit = |m: &Meta| m.append_pages >= m.options.append_pages;
    let page_size = store.page_size();
    let parts = encode_parts(tid, doc, page_size);
    let mut frozen_head = None;
    loop {
        let meta = read_meta(store)?;
        if frozen_head == Some(meta.append_head) {
            // A merge that froze this chain switched the metapage before it let go of it.
            return Err(
                Corrupt::new("the metapage's append area ends in a page flagged frozen")
                    .in_block(META_BLOCK),
            );
        }
        let start = if meta.append_tail != NO_BLOCK {
            meta.append_tail
        } else {
            meta.append_head
        };
        let mut chain = append_chain();
        let mut blkno = chain.visit(store, start)?;
        let mut guard = store.write(blkno);
        // Checked counts: the page's count is incremented below.
        let mut header = append_page(&guard).in_block(blkno)?.0;
        while header.next != NO_BLOCK && header.flags & FLAG_FROZEN == 0 {
            drop(guard);
            blkno = chain.visit(store, header.next)?;
            guard = store.write(blkno);
            header = append_page(&guard).in_block(blkno)?.0;
        }
        if header.flags & FLAG_FROZEN != 0 {
            // A merge froze this chain after we read the metapage: go to the new one.
            frozen_head = Some(meta.append_head);
            continue;
        }
        // Parts that fit go on the last page; the rest onto new pages, linked only once they
        // are complete, all while the last page stays locked: a merge freezing the chain waits
        // for that lock, so a document is never split between a frozen chain and a new one.
        let fitting = fitting_prefix(&parts, header.free_space(page_size));
        for part in &parts[..fitting] {
            ByteWriter::new(&mut guard, header.used as usize).bytes(part);
            header.used += part.len() as u16;
            header.count += 1;
        }
        let added = append_new_pages(store, &parts[fitting..]);
        if let Some(&first) = added.first() {
            header.next = first;
        }
        header.write(&mut guard);
        drop(guard);
        let Some(&last) = added.last() else {
            return Ok(past_limit(&meta));
        };
        let mut meta_guard = store.write(META_BLOCK);
        let mut current = meta_of(&meta_guard)?;
        // Pages added to a chain a merge has frozen since belong to that merge, not the count.
        // (No merge can have freed and reused the head meanwhile: the caller holds them off.)
        if current.append_head == meta.append_head {
            current.append_tail = last;
            current.append_pages = current.append_pages.saturating_add(added.len() as u32);
            current.write(&mut meta_guard);
        }
        return Ok(past_limit(&current));
    }
}

/// How many leading parts fit in `free` bytes.
fn fitting_prefix(parts: &[Vec<u8>], mut free: usize) -> usize {
    parts
        .iter()
        .take_while(|part| {
            let fits = part.len() <= free;
            free = free.saturating_sub(part.len());
            fits
        })
        .count()
}

/// Writes `parts` onto new pages chained in order and returns them. Pages are logged last
/// first, so each one is complete before the link to it is.
fn append_new_pages<S: PageWrite>(store: &S, parts: &[Vec<u8>]) -> Vec<BlockNumber> {
    let page_size = store.page_size();
    let mut pages = Vec::new();
    let mut rest = parts;
    while !rest.is_empty() {
        // An encoded part always fits an empty page.
        let n = fitting_prefix(rest, page_size - HEADER_SIZE).max(1);
        let (blkno, mut guard) = store.allocate();
        let mut header = PageHeader::new(PageKind::Append);
        for part in &rest[..n] {
            ByteWriter::new(&mut guard, header.used as usize).bytes(part);
            header.used += part.len() as u16;
            header.count += 1;
        }
        pages.push((blkno, header, guard));
        rest = &rest[n..];
    }
    let blocks: Vec<BlockNumber> = pages.iter().map(|(blkno, _, _)| *blkno).collect();
    while let Some((_, mut header, mut guard)) = pages.pop() {
        header.next = blocks.get(pages.len() + 1).copied().unwrap_or(NO_BLOCK);
        header.write(&mut guard);
    }
    blocks
}

/// Calls `f` for every record part of the chain starting at `head`.
pub fn for_each_record<S: PageRead>(
    store: &S,
    head: BlockNumber,
    mut f: impl FnMut(&RecordView),
) -> Result<(), Corrupt> {
    let mut chain = append_chain();
    let mut blkno = head;
    while blkno != NO_BLOCK {
        chain.visit(store, blkno)?;
        let page = store.read(blkno);
        blkno = records_of(&page, &mut f).in_block(blkno)?;
    }
    Ok(())
}

/// Calls `f` for every record of one page; returns the next page.
fn records_of(page: &[u8], f: &mut impl FnMut(&RecordView)) -> Result<BlockNumber, Corrupt> {
    let (header, mut r) = append_page(page)?;
    for _ in 0..header.count {
        f(&read_record(&mut r)?);
    }
    Ok(header.next)
}

/// The live documents of a chain, parts joined.
pub fn live_documents<S: PageRead>(
    store: &S,
    head: BlockNumber,
) -> Result<Vec<(Tid, AnalyzedDoc)>, Corrupt> {
    let mut docs: HashMap<Tid, AnalyzedDoc> = HashMap::new();
    let mut not_text = None;
    for_each_record(store, head, |rec| {
        if rec.deleted {
            return;
        }
        let doc = docs.entry(rec.tid).or_default();
        doc.fingerprint |= rec.fingerprint;
        for f in 0..3 {
            // Saturating: lengths come from pages, and an overflow must not panic.
            doc.lengths[f] = doc.lengths[f].saturating_add(rec.lengths[f]);
        }
        for (t, c) in &rec.terms {
            // The analyzer only makes UTF-8 terms; a lossy conversion could also make one
            // longer than the 255 bytes a dictionary entry holds.
            match std::str::from_utf8(t) {
                Ok(t) => doc.terms.push((t.to_owned(), *c)),
                Err(_) => not_text = Some(rec.tid),
            }
        }
    })?;
    if let Some(tid) = not_text {
        return corrupt(format_args!(
            "an append record of {tid:?} has a term that is not UTF-8"
        ));
    }
    let mut out: Vec<_> = docs.into_iter().collect();
    out.sort_by_key(|(tid, _)| *tid);
    for (tid, doc) in &mut out {
        doc.terms.sort_by(|a, b| a.0.cmp(&b.0));
        // A segment's posting lists need each document once per term.
        if doc.terms.windows(2).any(|w| w[0].0 == w[1].0) {
            return corrupt(format_args!("append records of {tid:?} list a term twice"));
        }
    }
    Ok(out)
}

/// Every page of a chain.
pub fn chain_pages<S: PageRead>(store: &S, head: BlockNumber) -> Result<Vec<BlockNumber>, Corrupt> {
    let mut chain = append_chain();
    let mut out = Vec::new();
    let mut blkno = head;
    while blkno != NO_BLOCK {
        out.push(chain.visit(store, blkno)?);
        blkno = PageHeader::read(&store.read(blkno), PageKind::Append)
            .in_block(blkno)?
            .next;
    }
    Ok(out)
}

/// Marks the records of dead documents deleted. Returns the documents newly marked and the live
/// documents left. `is_dead` is asked once per record; a page is written only when it has some.
pub fn mark_dead<S: PageWrite>(
    store: &S,
    head: BlockNumber,
    is_dead: &mut dyn FnMut(Tid) -> bool,
) -> Result<(u64, u64), Corrupt> {
    let (mut removed, mut remaining) = (0, 0);
    let mut chain = append_chain();
    let mut blkno = head;
    while blkno != NO_BLOCK {
        chain.visit(store, blkno)?;
        let (dead, next) = {
            let page = store.read(blkno);
            let mut dead = Vec::new();
            let next = records_of(&page, &mut |rec| {
                if rec.deleted {
                    return;
                }
                if is_dead(rec.tid) {
                    dead.push(rec.tid);
                } else {
                    remaining += u64::from(!rec.continuation);
                }
            })
            .in_block(blkno)?;
            (dead, next)
        };
        if !dead.is_empty() {
            let mut guard = store.write(blkno);
            removed += mark_deleted(&mut guard, &dead).in_block(blkno)?;
        }
        blkno = next;
    }
    Ok((removed, remaining))
}

/// Flags the records of `dead` on one page; returns the documents (not parts) newly flagged.
fn mark_deleted(page: &mut [u8], dead: &[Tid]) -> Result<u64, Corrupt> {
    let header = append_page(page)?.0;
    let mut removed = 0;
    let mut pos = HEADER_SIZE;
    for _ in 0..header.count {
        let (rec_tid, deleted, continuation, end) = {
            let mut r = ByteReader::new(&page[..header.used as usize], pos);
            let rec = read_record(&mut r)?;
            (rec.tid, rec.deleted, rec.continuation, r.pos)
        };
        // Records appended since the read are new TIDs, never in `dead`.
        if !deleted && dead.contains(&rec_tid) {
            page[pos + Tid::SIZE] |= RECORD_DELETED;
            removed += u64::from(!continuation);
        }
        pos = end;
    }
    Ok(removed)
}

/// Live documents of a chain (documents, not record parts).
pub fn count_live<S: PageRead>(store: &S, head: BlockNumber) -> Result<u64, Corrupt> {
    let mut live = 0;
    for_each_record(store, head, |rec| {
        live += u64::from(!rec.deleted && !rec.continuation)
    })?;
    Ok(live)
}

/// Flags the last page of a chain frozen, starting the walk at `from` (a page of the chain).
/// The caller holds the metapage for writing and is pointing inserters at a new chain (the
/// chain never reaches the metapage: [`Chain`] refuses block 0, which would lock it twice).
pub fn freeze_chain<S: PageWrite>(store: &S, from: BlockNumber) -> Result<(), Corrupt> {
    let mut chain = append_chain();
    let mut blkno = chain.visit(store, from)?;
    loop {
        let next = PageHeader::read(&store.read(blkno), PageKind::Append)
            .in_block(blkno)?
            .next;
        if next != NO_BLOCK {
            blkno = chain.visit(store, next)?;
            continue;
        }
        let mut guard = store.write(blkno);
        let mut header = PageHeader::read(&guard, PageKind::Append).in_block(blkno)?;
        if header.next != NO_BLOCK {
            // An inserter extended the chain between our read and our lock.
            drop(guard);
            blkno = chain.visit(store, header.next)?;
            continue;
        }
        header.flags |= FLAG_FROZEN;
        header.write(&mut guard);
        return Ok(());
    }
}
