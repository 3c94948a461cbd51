//! Top-k retrieval: corpus statistics for the query, the append area scored exhaustively, then
//! every segment with block-max MaxScore sharing one top-k heap.
//!
//! MaxScore splits the query terms (sorted by their list-wide score bound) into non-essential
//! ones, whose bounds together cannot reach the current k-th score, and essential ones; only
//! documents of essential lists are candidates. Before a candidate is scored, the block headers
//! of every list bound its score; if that bound is below the k-th score the whole range up to the
//! nearest block end is skipped without decoding. Pruning is strict (`bound < θ`), so documents
//! that tie the k-th score are still compared by TID: the result is exactly the sequential
//! scorer's top-k.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, OnceLock};

use super::append::{for_each_record, read_meta};
use super::codec::BlockHeader;
use super::dictionary::TermInfo;
use super::document::{stored_length, sum_of_terms, FieldCounts, QueryStats, Scorer};
use super::format::{Corrupt, Meta, Tid};
use super::segment::{written_avg_length, PostingCursor, SegmentReader, END};
use super::skips::SkipEntry;
use crate::page::{BlockNumber, PageRead, NO_BLOCK};

/// A segment's document table in memory — what scoring reads for every candidate — so a query
/// does not read a document page per candidate. Deleted documents have a NaN length.
pub struct DocTable {
    pub tids: Vec<Tid>,
    pub lengths: Vec<f32>,
    pub fingerprints: Vec<u64>,
    /// (TID, document) in TID order, built the first time a document is looked up by its TID
    /// (a segment's documents are not always in TID order).
    by_tid: OnceLock<Vec<(Tid, u32)>>,
}

impl DocTable {
    /// Document `d`'s hit at `score`.
    #[inline]
    fn hit(&self, d: u32, score: f64) -> SearchHit {
        SearchHit {
            tid: self.tids[d as usize],
            fingerprint: self.fingerprints[d as usize],
            score,
        }
    }

    /// The documents whose TIDs lie on heap block `block`, in TID order.
    fn on_block(&self, block: BlockNumber) -> &[(Tid, u32)] {
        let by_tid = self.by_tid.get_or_init(|| {
            let mut v: Vec<(Tid, u32)> =
                (0u32..).zip(&self.tids).map(|(d, &tid)| (tid, d)).collect();
            v.sort_unstable();
            v
        });
        let from = by_tid.partition_point(|(t, _)| t.block < block);
        let to = from + by_tid[from..].partition_point(|(t, _)| t.block == block);
        &by_tid[from..to]
    }

    fn load<S: PageRead>(reader: &SegmentReader<'_, S>) -> Result<DocTable, Corrupt> {
        // Check `num_docs` against the document pages the segment has before sizing by it.
        reader.document_pages()?;
        let n = reader.desc.num_docs as usize;
        let mut table = DocTable {
            tids: Vec::with_capacity(n),
            lengths: Vec::with_capacity(n),
            fingerprints: Vec::with_capacity(n),
            by_tid: OnceLock::new(),
        };
        reader.for_each_doc(|_, e| {
            table.tids.push(e.tid);
            table
                .lengths
                .push(if e.deleted { f32::NAN } else { e.length });
            table.fingerprints.push(e.fingerprint);
        })?;
        Ok(table)
    }
}

/// Document tables of one index, valid for one metapage generation (every structural change
/// and every VACUUM that sets tombstones bumps it). A cache of page contents, never a source of
/// truth: a different generation empties it.
#[derive(Default)]
pub struct DocTableCache {
    generation: Option<u64>,
    /// By (directory head, documents): a table always has as many rows as the segment it
    /// serves has documents, so scoring can index it by any document id the postings hold.
    tables: HashMap<(BlockNumber, u32), Arc<DocTable>>,
}

impl DocTableCache {
    fn table<S: PageRead>(
        &mut self,
        generation: u64,
        reader: &SegmentReader<'_, S>,
    ) -> Result<Arc<DocTable>, Corrupt> {
        if self.generation != Some(generation) {
            self.tables.clear();
            self.generation = Some(generation);
        }
        let key = (reader.desc.directory_head, reader.desc.num_docs);
        if let Some(table) = self.tables.get(&key) {
            return Ok(table.clone());
        }
        let table = Arc::new(DocTable::load(reader)?);
        self.tables.insert(key, table.clone());
        Ok(table)
    }
}

/// One result: a heap TID and its BM25 score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchHit {
    pub tid: Tid,
    pub score: f64,
    /// The document's fingerprint (see [`super::document::fingerprint`]).
    pub fingerprint: u64,
}

/// Best first: score descending, then TID ascending.
pub fn hit_order(a: &SearchHit, b: &SearchHit) -> Ordering {
    b.score.total_cmp(&a.score).then(a.tid.cmp(&b.tid))
}

struct Worst(SearchHit);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        hit_order(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    /// The heap's top is the worst hit kept.
    fn cmp(&self, other: &Self) -> Ordering {
        hit_order(&self.0, &other.0)
    }
}

struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    fn threshold(&self) -> f64 {
        if self.heap.len() < self.k {
            f64::NEG_INFINITY
        } else {
            self.heap.peek().map_or(f64::NEG_INFINITY, |w| w.0.score)
        }
    }

    fn offer(&mut self, hit: SearchHit) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Worst(hit));
        } else if let Some(worst) = self.heap.peek() {
            if hit_order(&hit, &worst.0) == Ordering::Less {
                self.heap.pop();
                self.heap.push(Worst(hit));
            }
        }
    }
}

/// A live document of the append area that contains at least one query term.
struct AppendMatch {
    tid: Tid,
    fingerprint: u64,
    length: f32,
    counts: Vec<Option<FieldCounts>>,
}

/// Everything a query needs before scoring: statistics, per-segment term entries, append matches.
pub struct PreparedQuery<'s, S: PageRead> {
    pub meta: Meta,
    pub stats: QueryStats,
    pub scorer: Scorer,
    segments: Vec<(SegmentReader<'s, S>, Vec<Option<TermInfo>>)>,
    append: Vec<AppendMatch>,
}

/// Reads the statistics of `terms` (distinct, query order) and the append area.
pub fn try_prepare<'s, S: PageRead>(
    store: &'s S,
    terms: &[String],
) -> Result<PreparedQuery<'s, S>, Corrupt> {
    let meta = read_meta(store)?;
    let weights = meta.options.weights_array();
    let mut stats = QueryStats {
        num_docs: 0,
        total_length: 0.0,
        doc_freq: vec![0; terms.len()],
    };
    let mut segments = Vec::with_capacity(meta.segments.len());
    for desc in &meta.segments {
        let reader = SegmentReader::open(store, *desc)?;
        stats.num_docs += desc.num_docs as u64;
        stats.total_length += desc.total_length;
        let infos: Vec<Option<TermInfo>> = terms
            .iter()
            .map(|t| reader.term(t.as_bytes()))
            .collect::<Result<_, _>>()?;
        for (i, info) in infos.iter().enumerate() {
            stats.doc_freq[i] += info.map_or(0, |x| x.doc_freq as u64);
        }
        segments.push((reader, infos));
    }

    // The append area: documents may be split into parts, so join by TID first.
    let mut index_of: HashMap<&[u8], usize> = HashMap::new();
    let mut docs: HashMap<Tid, ([u32; 3], Vec<Option<FieldCounts>>, u64)> = HashMap::new();
    for head in [meta.frozen_head, meta.append_head] {
        if head == NO_BLOCK {
            continue;
        }
        if index_of.is_empty() {
            index_of = terms
                .iter()
                .enumerate()
                .map(|(i, t)| (t.as_bytes(), i))
                .collect();
        }
        for_each_record(store, head, |rec| {
            if rec.deleted {
                return;
            }
            let entry = docs
                .entry(rec.tid)
                .or_insert_with(|| ([0; 3], vec![None; terms.len()], 0));
            entry.2 |= rec.fingerprint;
            for f in 0..3 {
                // Saturating: lengths come from pages, and an overflow must not panic.
                entry.0[f] = entry.0[f].saturating_add(rec.lengths[f]);
            }
            for (term, counts) in &rec.terms {
                if let Some(&i) = index_of.get(term) {
                    entry.1[i] = Some(*counts);
                }
            }
        })?;
    }
    let mut append = Vec::new();
    for (tid, (lengths, counts, fingerprint)) in docs {
        let length = stored_length(&weights, &lengths);
        stats.num_docs += 1;
        stats.total_length += length as f64;
        for (i, c) in counts.iter().enumerate() {
            stats.doc_freq[i] += u64::from(c.is_some());
        }
        if counts.iter().any(Option::is_some) {
            append.push(AppendMatch {
                tid,
                fingerprint,
                length,
                counts,
            });
        }
    }
    let scorer = Scorer::new(meta.options.k1, meta.options.b, weights, &stats);
    Ok(PreparedQuery {
        meta,
        stats,
        scorer,
        segments,
        append,
    })
}

impl<S: PageRead> PreparedQuery<'_, S> {
    /// Scores with `stats` instead of this index's own: the statistics of a whole collection
    /// this index holds a part of (a shard), so its scores are the whole collection's.
    pub fn with_stats(mut self, stats: &QueryStats) -> Self {
        let o = &self.meta.options;
        self.scorer = Scorer::new(o.k1, o.b, o.weights_array(), stats);
        self.stats = stats.clone();
        self
    }

    /// The `k` best documents, best first.
    pub fn top_k(&self, k: usize) -> Result<Vec<SearchHit>, Corrupt> {
        self.top_k_cached(k, &mut DocTableCache::default())
    }

    /// [`Self::top_k`] with document tables kept across queries in `cache`.
    pub fn top_k_cached(
        &self,
        k: usize,
        cache: &mut DocTableCache,
    ) -> Result<Vec<SearchHit>, Corrupt> {
        let mut top = TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(1 << 16) + 1),
        };
        for m in &self.append {
            if let Some(score) = self.scorer.score(&m.counts, m.length) {
                top.offer(SearchHit {
                    tid: m.tid,
                    score,
                    fingerprint: m.fingerprint,
                });
            }
        }
        for (reader, infos) in &self.segments {
            if infos.iter().all(Option::is_none) {
                continue;
            }
            let docs = cache.table(self.meta.generation, reader)?;
            self.search_segment(reader, &docs, infos, &mut top)?;
        }
        let mut hits: Vec<SearchHit> = top.heap.into_iter().map(|w| w.0).collect();
        hits.sort_by(hit_order);
        Ok(hits)
    }

    /// Every live document whose heap TID lies on one of `blocks` and that holds a query term,
    /// with its score: the score [`Self::top_k`] gives it, bit for bit. Only those documents'
    /// postings are read (a seek per query term and document), so scoring a few known rows
    /// costs a few block decodes however long the lists are. In TID order; a TID listed both
    /// in a segment and in the append area (during a merge) once.
    pub fn matches_on_blocks(
        &self,
        blocks: &[BlockNumber],
        cache: &mut DocTableCache,
    ) -> Result<Vec<(Tid, f64)>, Corrupt> {
        Ok(self
            .term_scores_on_blocks(blocks, cache)?
            .into_iter()
            .filter_map(|(tid, terms)| sum_of_terms(&terms).map(|score| (tid, score)))
            .collect())
    }

    /// As [`Self::matches_on_blocks`], each document with every query term's contribution to
    /// its score ([`Scorer::term`]; None where the term adds nothing): a query's score is the
    /// [`sum_of_terms`] of its terms' contributions, so the contributions of a query's terms
    /// score any query made of some of them ([`TermScoreMemo`]).
    pub fn term_scores_on_blocks(
        &self,
        blocks: &[BlockNumber],
        cache: &mut DocTableCache,
    ) -> Result<Vec<(Tid, Vec<Option<f64>>)>, Corrupt> {
        let mut blocks = blocks.to_vec();
        blocks.sort_unstable();
        blocks.dedup();
        let wanted = |tid: &Tid| blocks.binary_search(&tid.block).is_ok();
        let mut out: Vec<(Tid, Vec<Option<f64>>)> = Vec::new();
        for m in self.append.iter().filter(|m| wanted(&m.tid)) {
            let terms = self.scorer.term_scores(&m.counts, m.length);
            if terms.iter().any(Option::is_some) {
                out.push((m.tid, terms));
            }
        }
        for (reader, infos) in &self.segments {
            if infos.iter().all(Option::is_none) {
                continue;
            }
            let docs = cache.table(self.meta.generation, reader)?;
            let mut ids: Vec<u32> = blocks
                .iter()
                .flat_map(|&b| docs.on_block(b))
                .map(|&(_, d)| d)
                .filter(|&d| !docs.lengths[d as usize].is_nan())
                .collect();
            if ids.is_empty() {
                continue;
            }
            ids.sort_unstable();
            // counts[j][i]: query term i in document ids[j].
            let mut counts: Vec<Vec<Option<FieldCounts>>> =
                vec![vec![None; infos.len()]; ids.len()];
            for (i, info) in infos.iter().enumerate() {
                let Some(info) = info else { continue };
                let mut cursor = reader.postings(info)?;
                for (j, &d) in ids.iter().enumerate() {
                    cursor.advance_far(d)?;
                    if cursor.doc() == END {
                        break;
                    }
                    if cursor.doc() == d {
                        counts[j][i] = Some(cursor.counts());
                    }
                }
            }
            for (j, &d) in ids.iter().enumerate() {
                let terms = self
                    .scorer
                    .term_scores(&counts[j], docs.lengths[d as usize]);
                if terms.iter().any(Option::is_some) {
                    out.push((docs.tids[d as usize], terms));
                }
            }
        }
        out.sort_by_key(|m| m.0);
        out.dedup_by_key(|(tid, _)| *tid);
        Ok(out)
    }

    fn search_segment(
        &self,
        reader: &SegmentReader<'_, S>,
        docs: &DocTable,
        infos: &[Option<TermInfo>],
        top: &mut TopK,
    ) -> Result<(), Corrupt> {
        let scorer = &self.scorer;
        let written_avg = written_avg_length(reader.desc.total_length, reader.desc.num_docs);
        let scored: Vec<(usize, &TermInfo)> = infos
            .iter()
            .enumerate()
            .filter_map(|(i, info)| Some((i, info.as_ref()?)))
            .filter(|(i, _)| scorer.idf[*i].is_some())
            .collect();
        // A long list's skip entries give a tighter bound than the dictionary's corner.
        let list_bound =
            |i: usize, info: &TermInfo, cursor: &PostingCursor<S>| match cursor.list_saturated() {
                Some(saturated) => {
                    scorer.block_bound(i, info.max_tf, info.min_length, saturated, written_avg)
                }
                None => scorer.bound(i, info.max_tf, info.min_length),
            };
        if let [(i, info)] = scored[..] {
            let mut cursor = reader.block_cursor(info)?;
            let bound = list_bound(i, info, &cursor);
            return one_term(scorer, i, bound, &mut cursor, docs, written_avg, top);
        }
        let mut terms: Vec<Term<S>> = Vec::with_capacity(scored.len());
        for (i, info) in scored {
            let cursor = reader.postings(info)?;
            let bound = list_bound(i, info, &cursor);
            terms.push(Term {
                index: i,
                bound,
                cursor,
                block_bound: 0.0,
                block_bound_of: 0,
            });
        }
        if terms.is_empty() {
            return Ok(());
        }
        terms.sort_by(|a, b| a.bound.total_cmp(&b.bound));
        // prefix[i] = Σ bounds of terms[..i]
        let mut prefix = vec![0.0; terms.len() + 1];
        for (i, t) in terms.iter().enumerate() {
            prefix[i + 1] = prefix[i] + t.bound;
        }
        let mut contributions = vec![0.0; infos.len()];
        let block_bound = |t: &mut Term<S>| {
            let sequence = t.cursor.block_sequence();
            if t.block_bound_of != sequence {
                let h = t.cursor.block_header();
                t.block_bound = scorer.block_bound(
                    t.index,
                    h.max_tf,
                    h.min_length,
                    h.max_saturated,
                    written_avg,
                );
                t.block_bound_of = sequence;
            }
            t.block_bound
        };

        let mut theta = f64::NAN;
        let mut essential = 0;
        // The non-essential lists' block bounds at their current blocks and the first document
        // past the earliest of those blocks: they hold for every candidate below it, so each
        // candidate does not walk the non-essential lists again (recomputed when a candidate
        // reaches it or when θ moves a list out of the essential ones).
        let mut nonessential_bound = 0.0;
        let mut nonessential_until = 0u32;
        let mut nonessential_of = usize::MAX;
        loop {
            let current = top.threshold();
            if current.to_bits() != theta.to_bits() {
                theta = current;
                // Terms [..essential] cannot lift a document to θ on their own.
                essential = (0..terms.len())
                    .take_while(|&i| prefix[i + 1] < theta)
                    .count();
                if essential == terms.len() {
                    return Ok(());
                }
            }
            let d = terms[essential..]
                .iter()
                .map(|t| t.cursor.doc())
                .min()
                .unwrap_or(END);
            if d == END {
                return Ok(());
            }

            // Block-level bound for d and everything up to the nearest block end.
            let mut bound = 0.0;
            let mut skip_to = END;
            for t in terms[essential..].iter_mut() {
                if t.cursor.doc() == d {
                    bound += block_bound(t);
                    skip_to = skip_to.min(t.cursor.block_header().last_doc.saturating_add(1));
                } else {
                    skip_to = skip_to.min(t.cursor.doc());
                }
            }
            if nonessential_of != essential || d >= nonessential_until {
                nonessential_bound = 0.0;
                nonessential_until = END;
                for t in terms[..essential].iter_mut() {
                    if t.cursor.seek_block(d)? {
                        nonessential_bound += block_bound(t);
                        nonessential_until = nonessential_until
                            .min(t.cursor.block_header().last_doc.saturating_add(1));
                    }
                }
                nonessential_of = essential;
            }
            bound += nonessential_bound;
            skip_to = skip_to.min(nonessential_until);
            if bound < theta {
                for t in terms[essential..].iter_mut() {
                    if t.cursor.doc() < skip_to {
                        t.cursor.advance(skip_to)?;
                    }
                }
                continue;
            }

            if essential + 1 == terms.len() {
                // One essential list: each of its documents from d up to `skip_to` is a
                // candidate under the bound just computed, so they are taken in one loop over
                // its decoded block instead of once around this one each.
                let (probed, rest) = terms.split_at_mut(essential);
                let walked = &mut rest[0];
                if let Some((run, counts)) = walked.cursor.rest_of_block() {
                    for (j, &doc) in run.iter().enumerate() {
                        if doc >= skip_to {
                            break;
                        }
                        let length = docs.lengths[doc as usize];
                        if length.is_nan() {
                            continue;
                        }
                        let own = [counts[0][j], counts[1][j], counts[2][j]];
                        let c = scorer.term(walked.index, &own, length);
                        let theta = top.threshold();
                        if below(c + prefix[essential], theta) {
                            continue;
                        }
                        contributions.iter_mut().for_each(|c| *c = 0.0);
                        contributions[walked.index] = c;
                        let score = complete_score(
                            scorer,
                            probed,
                            &prefix,
                            c,
                            doc,
                            length,
                            theta,
                            &mut contributions,
                        )?;
                        // Below the k-th score a hit cannot enter (ties are for `offer` to
                        // order by TID), so it is not built: its TID and fingerprint are two
                        // cache misses in a segment of a million documents.
                        if let Some(score) = score.filter(|&s| s >= top.threshold()) {
                            top.offer(docs.hit(doc, score));
                        }
                    }
                    walked.cursor.advance(skip_to)?;
                    continue;
                }
            }

            let length = docs.lengths[d as usize];
            if !length.is_nan() {
                // Contributions are summed in query-term order at the end, exactly as the
                // sequential operator sums them, so equal scores stay bit-for-bit equal.
                contributions.iter_mut().for_each(|c| *c = 0.0);
                let mut partial = 0.0;
                for t in terms[essential..].iter() {
                    if t.cursor.doc() == d {
                        let c = scorer.term(t.index, &t.cursor.counts(), length);
                        contributions[t.index] = c;
                        partial += c;
                    }
                }
                let score = complete_score(
                    scorer,
                    &mut terms[..essential],
                    &prefix,
                    partial,
                    d,
                    length,
                    theta,
                    &mut contributions,
                )?;
                if let Some(score) = score.filter(|&s| s >= top.threshold()) {
                    top.offer(docs.hit(d, score));
                }
            }
            for t in terms[essential..].iter_mut() {
                if t.cursor.doc() == d {
                    t.cursor.next()?;
                }
            }
        }
    }
}

/// One query term's list in a segment, as the MaxScore walk holds it.
struct Term<'a, S: PageRead> {
    /// The term's place in the query.
    index: usize,
    /// Bound of its contribution to any document of the list.
    bound: f64,
    cursor: PostingCursor<'a, S>,
    /// The bound of the current block, computed once per block.
    block_bound: f64,
    block_bound_of: u32,
}

/// Completes a candidate's score, `partial` so far, with the lists below the essential ones
/// (`probed`, in bound order; `prefix[i + 1]` the sum of their first i + 1 bounds): each, the
/// highest bound first, is moved to `doc` and adds its contribution, until what the rest could
/// add leaves the candidate certainly below `theta` (None). Contributions are kept by query
/// term in `contributions` (the caller's set, the others zero) and summed in query-term order,
/// as the sequential operator sums them, so equal scores stay equal bit for bit.
#[allow(clippy::too_many_arguments)]
fn complete_score<S: PageRead>(
    scorer: &Scorer,
    probed: &mut [Term<'_, S>],
    prefix: &[f64],
    mut partial: f64,
    doc: u32,
    length: f32,
    theta: f64,
    contributions: &mut [f64],
) -> Result<Option<f64>, Corrupt> {
    for i in (0..probed.len()).rev() {
        if below(partial + prefix[i + 1], theta) {
            return Ok(None);
        }
        let t = &mut probed[i];
        t.cursor.advance(doc)?;
        if t.cursor.doc() == doc {
            let c = scorer.term(t.index, &t.cursor.counts(), length);
            contributions[t.index] = c;
            partial += c;
        }
    }
    Ok(Some(contributions.iter().sum()))
}

/// A segment in which one query term has postings (the others are absent or in no document).
/// The list's block entries (its skip entries, or its headers for a short list) give every
/// block's best score; blocks are decoded best first, so the k-th score rises at once and the
/// walk stops at the first block whose bound is below it. Each score is the one the general
/// loop gives (its one contribution, summed there with zeros), and the top k do not depend on
/// the order hits are offered in, so hits are the same.
fn one_term<S: PageRead>(
    scorer: &Scorer,
    index: usize,
    list_bound: f64,
    cursor: &mut PostingCursor<'_, S>,
    docs: &DocTable,
    written_avg: f64,
    top: &mut TopK,
) -> Result<(), Corrupt> {
    if list_bound < top.threshold() {
        return Ok(());
    }
    // Blocks by max_saturated, the largest first (earlier blocks first among equal ones). Only
    // the few blocks above the k-th score are ever taken, so they are picked a few at a time
    // by `BestBlocks` instead of ordering every entry of a list of thousands of blocks.
    let mut best = BestBlocks::new(cursor.block_entries()?);
    // The bound from max_saturated alone falls in that order, so the first one below the k-th
    // score ends the walk; a block's full bound from its header (lower still, or the only one
    // where an average length is 0) decides whether it is decoded.
    while let Some((saturated, j)) = best.next(cursor.block_entries()?) {
        let theta = top.threshold();
        if scorer
            .saturated_bound(index, saturated, written_avg)
            .is_some_and(|bound| bound < theta)
        {
            break;
        }
        let worth = |h: &BlockHeader| {
            scorer.block_bound(index, h.max_tf, h.min_length, h.max_saturated, written_avg) >= theta
        };
        let Some((block_docs, counts)) = cursor.decode_block_if(j, worth)? else {
            continue;
        };
        for (i, &d) in block_docs.iter().enumerate() {
            let length = docs.lengths[d as usize];
            if length.is_nan() {
                continue;
            }
            let score = scorer.term(index, &[counts[0][i], counts[1][i], counts[2][i]], length);
            // Below the k-th score a hit cannot enter (ties are for `offer` to order).
            if score >= top.threshold() {
                top.offer(docs.hit(d, score));
            }
        }
    }
    Ok(())
}

/// A list's blocks in the order a one-word search takes them: `max_saturated` falling, the
/// earlier block first among equal ones. Each entry's place in that order is one `u64`
/// (`max_saturated`'s bits, which order as the value does for a value ≥ 0 (a -0.0 taken as 0),
/// above the complement of the block's number), so the order is strict. The blocks are picked
/// in rounds: a round keeps the largest keys below the last round's smallest in one pass over
/// the entries, each round twice as many as the one before, since the walk mostly stops within
/// the first few blocks.
struct BestBlocks {
    /// This round's keys, the largest first; `taken` of them are taken.
    round: Vec<u64>,
    taken: usize,
    /// Keys below this one are left for later rounds (`u64::MAX`: no round yet).
    below: u64,
    exhausted: bool,
}

impl BestBlocks {
    const FIRST_ROUND: usize = 16;

    fn new(entries: &[SkipEntry]) -> Self {
        let mut best = BestBlocks {
            round: Vec::with_capacity(Self::FIRST_ROUND),
            taken: 0,
            below: u64::MAX,
            exhausted: entries.is_empty(),
        };
        best.fill(entries, Self::FIRST_ROUND);
        best
    }

    fn key(j: usize, e: &SkipEntry) -> u64 {
        let bits = if e.max_saturated > 0.0 {
            e.max_saturated.to_bits()
        } else {
            0
        };
        (u64::from(bits) << 32) | u64::from(u32::MAX - j as u32)
    }

    /// The next block: its `max_saturated` and its number. `entries` are the ones `new` got.
    fn next(&mut self, entries: &[SkipEntry]) -> Option<(f32, usize)> {
        if self.taken == self.round.len() {
            if self.exhausted {
                return None;
            }
            let size = (self.round.len() * 2).max(Self::FIRST_ROUND);
            self.fill(entries, size);
            if self.round.is_empty() {
                return None;
            }
        }
        let key = self.round[self.taken];
        self.taken += 1;
        Some((
            f32::from_bits((key >> 32) as u32),
            (u32::MAX - key as u32) as usize,
        ))
    }

    /// The next round: the `size` largest keys below `self.below`, largest first.
    fn fill(&mut self, entries: &[SkipEntry], size: usize) {
        let below = self.below;
        let round = &mut self.round;
        round.clear();
        for (j, e) in entries.iter().enumerate() {
            let key = Self::key(j, e);
            if key >= below || (round.len() == size && key <= round[size - 1]) {
                continue;
            }
            let at = round.partition_point(|&k| k > key);
            if round.len() == size {
                round.pop();
            }
            round.insert(at, key);
        }
        self.taken = 0;
        self.exhausted = round.len() < size;
        if let Some(&last) = round.last() {
            self.below = last;
        }
    }
}

/// True when a partial sum (added in another order than the final score) is certainly below θ.
fn below(partial: f64, theta: f64) -> bool {
    partial * (1.0 + 1e-12) + 1e-12 < theta
}

/// Every live document's TID, in TID order: [`documents_after`] in one batch, what the tests
/// compare the index's contents with.
#[cfg(test)]
pub fn all_documents<S: PageRead>(store: &S) -> Result<Vec<Tid>, Corrupt> {
    let (docs, _) = documents_after(store, &mut DocTableCache::default(), None, usize::MAX)?;
    Ok(docs.into_iter().map(|(tid, _)| tid).collect())
}

/// The `n` smallest TIDs of live documents above `after`, in TID order, with their
/// fingerprints, and whether more follow them: the rest of an ordered scan (score 0, after the
/// matches) a batch at a time.
/// One pass over the (cached) document tables and the append area; only the `n` kept are
/// sorted, so a LIMIT that the matches leave short does not sort the whole index.
pub fn documents_after<S: PageRead>(
    store: &S,
    cache: &mut DocTableCache,
    after: Option<Tid>,
    n: usize,
) -> Result<(Vec<(Tid, u64)>, bool), Corrupt> {
    let n = n.max(1);
    let meta = read_meta(store)?;
    let above = |t: &Tid| after.is_none_or(|a| *t > a);
    let mut out = Vec::new();
    for desc in &meta.segments {
        let reader = SegmentReader::open(store, *desc)?;
        let table = cache.table(meta.generation, &reader)?;
        for (i, tid) in table.tids.iter().enumerate() {
            if !table.lengths[i].is_nan() && above(tid) {
                out.push((*tid, table.fingerprints[i]));
            }
        }
    }
    for head in [meta.frozen_head, meta.append_head] {
        if head != NO_BLOCK {
            for_each_record(store, head, |rec| {
                if !rec.deleted && !rec.continuation && above(&rec.tid) {
                    out.push((rec.tid, rec.fingerprint));
                }
            })?;
        }
    }
    // A TID can be listed twice (an append record and a segment during a merge), so whether
    // more follow is judged before duplicates are removed: a short batch never ends the rest.
    let more = out.len() > n;
    if more {
        out.select_nth_unstable(n);
        out.truncate(n);
    }
    out.sort_unstable();
    out.dedup_by_key(|(tid, _)| *tid);
    Ok((out, more))
}

#[cfg(test)]
mod best_blocks_tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn entry(max_saturated: f32) -> SkipEntry {
        SkipEntry {
            last_doc: 0,
            max_saturated,
            at: (0, 0),
        }
    }

    /// Every block once, in the order of a full sort by (max_saturated falling, block rising),
    /// over lists shorter and far longer than a round, with many equal values, zeros and -0.0.
    #[test]
    fn blocks_come_in_the_order_of_a_full_sort() {
        let mut rng = SplitMix64(5);
        for n in [0usize, 1, 2, 15, 16, 17, 33, 100, 1_000, 5_000] {
            for distinct in [1u64, 3, 50, 1 << 20] {
                let entries: Vec<SkipEntry> = (0..n)
                    .map(|i| match i % 97 {
                        0 => entry(-0.0),
                        1 => entry(0.0),
                        _ => entry((rng.next_u64() % distinct) as f32 / 7.0),
                    })
                    .collect();
                let mut expected: Vec<(f32, usize)> = entries
                    .iter()
                    .enumerate()
                    .map(|(j, e)| (e.max_saturated.max(0.0).abs(), j))
                    .collect();
                expected.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let mut best = BestBlocks::new(&entries);
                let mut got = Vec::new();
                while let Some((saturated, j)) = best.next(&entries) {
                    got.push((saturated, j));
                }
                assert_eq!(got, expected, "{n} blocks, {distinct} distinct values");
            }
        }
    }
}
