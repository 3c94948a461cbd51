//! Queries: rank the centroids, read the nearest lists, bound every entry's distance from its
//! code and compute the exact distance of those that can still be among the nearest.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use half::f16;

use super::codes::{CodedQuery, ListQuery, Rotation};
use super::format::{centroids_per_page, Meta};
use super::lists::{
    chain_header, distance_on_page, for_each_code, for_each_list_key, list_chain, list_ref, Place,
};
use super::probe::ProbeOrder;
use crate::int8_rows::Int8Rows;
use crate::kmeans::{self, Geometry};
use crate::layout::{
    corrupt, ByteReader, Corrupt, InBlock, PageHeader, PageKind, Tid, HEADER_SIZE,
};
use crate::page::{PageRead, NO_BLOCK};
use crate::vector::WideQuery;

/// The centroids of one build, in memory (they never change after it; a new build has a new
/// [`Meta::build_id`]).
pub struct Centroids {
    pub dim: usize,
    pub geometry: Geometry,
    pub rows: Vec<f32>,
    /// `rows` in 8-bit codes, what queries rank: a quarter of the bytes to stream per query
    /// (ranking a thousand f32 centroids read more bytes than the lists a query probes). Which
    /// lists a query reads may differ from the f32 ranking where two centroids are within the
    /// codes' rounding of each other; the distances of the entries read are exact either way.
    rows8: Int8Rows,
    /// [`kmeans::half_squared_norms`] of `rows`, computed once per load (not per key or query).
    half_norms: Vec<f32>,
    /// The build's rotation for entry codes (None: its keys carry none), and the centroids
    /// rotated by it (P·c, padded) with their |c|², so a query is rotated once per scan.
    rotation: Option<Rotation>,
    rotated: Vec<f32>,
    squares: Vec<f32>,
    pub build_id: u64,
}

impl Centroids {
    /// Reads the centroid pages. The metapage's layout is checked first, so the allocation is
    /// sized by pages that exist; every page but the last is full, and every value is finite
    /// (k-means only makes finite ones; a NaN would make every distance NaN).
    pub fn load<S: PageRead>(store: &S, meta: &Meta) -> Result<Centroids, Corrupt> {
        meta.check_layout(store.page_size(), store.num_blocks())
            .map_err(|e| e.in_block(super::format::META_BLOCK))?;
        let dim = meta.dim as usize;
        let per_page = centroids_per_page(store.page_size(), dim);
        let mut rows = Vec::with_capacity(meta.lists as usize * dim);
        for i in 0..meta.centroid_pages {
            crate::interrupt::check();
            let block = meta.centroid_start + i;
            let page = store.read(block);
            let before = i as usize * per_page;
            let expected = per_page.min(meta.lists as usize - before);
            read_centroid_page(&page, expected, dim, &mut rows).in_block(block)?;
        }
        let geometry = meta.metric.geometry();
        let rotation = meta.rotation();
        let (mut rotated, mut squares) = (Vec::new(), Vec::new());
        if let Some(rotation) = &rotation {
            let mut one = Vec::with_capacity(rotation.padded());
            for c in rows.chunks_exact(dim) {
                rotation.apply(c, &mut one);
                rotated.extend_from_slice(&one);
                squares.push(crate::vector::dot(c, c));
            }
        }
        Ok(Centroids {
            dim,
            geometry,
            half_norms: kmeans::half_squared_norms(&rows, dim, geometry),
            rows8: Int8Rows::new(&rows, dim),
            rows,
            rotation,
            rotated,
            squares,
            build_id: meta.build_id,
        })
    }

    /// The query against list `list`'s centroid, for its codes.
    pub fn list_query(&self, coded: &CodedQuery, list: u32) -> ListQuery {
        let padded = self.rotated.len() / self.squares.len().max(1);
        let l = list as usize;
        coded.for_list(&self.rotated[l * padded..(l + 1) * padded], self.squares[l])
    }

    pub fn centroid(&self, list: u32) -> &[f32] {
        &self.rows[list as usize * self.dim..(list as usize + 1) * self.dim]
    }

    /// The code of `key` filed under `list` (empty when the index's keys carry none).
    pub fn code(&self, list: u32, key: &[f16]) -> Vec<u8> {
        match &self.rotation {
            None => Vec::new(),
            Some(rotation) => {
                let mut code = vec![0u8; super::codes::code_size(self.dim)];
                super::codes::encode(rotation, key, self.centroid(list), &mut code);
                code
            }
        }
    }

    /// The query as codes are compared with (None when the index's keys carry none).
    pub fn coded_query(&self, query: &WideQuery) -> Option<CodedQuery> {
        self.rotation
            .as_ref()
            .map(|r| CodedQuery::new(r, query.widened()))
    }

    /// `key` has the dimension of the index and of these centroids (a metapage or cached
    /// centroids that disagree would make the distance kernels panic).
    pub fn check_dim(&self, meta: &Meta, key: &[f16]) -> Result<(), Corrupt> {
        if key.len() != meta.dim as usize || self.dim != key.len() {
            return corrupt(format_args!(
                "a {}-d key for a {}-d index with {}-d centroids",
                key.len(),
                meta.dim,
                self.dim
            ));
        }
        Ok(())
    }

    fn widen(key: &[f16]) -> Vec<f32> {
        key.iter().map(|x| x.to_f32()).collect()
    }

    /// The list a key is filed under.
    pub fn nearest(&self, key: &[f16]) -> u32 {
        kmeans::nearest_with(&self.rows, &self.half_norms, &Self::widen(key))
    }

    /// Every list, nearest first (by the 8-bit centroids): the order a query probes them in.
    pub fn probe_order(&self, query: &WideQuery) -> ProbeOrder {
        let mut nearness = vec![0.0f32; self.half_norms.len()];
        self.rows8.dots(query.widened(), &mut nearness);
        // As kmeans::nearness: p·c, less |c|²/2 for L2.
        nearness
            .iter_mut()
            .zip(&self.half_norms)
            .for_each(|(s, n)| *s -= n);
        ProbeOrder::new(nearness)
    }
}

/// Appends the `centroids` centroids (`dim` values each) of one page to `rows`.
fn read_centroid_page(
    page: &[u8],
    centroids: usize,
    dim: usize,
    rows: &mut Vec<f32>,
) -> Result<(), Corrupt> {
    let h = PageHeader::read(page, PageKind::Centroids)?;
    if h.count as usize != centroids {
        return corrupt(format_args!(
            "centroid page holds {} centroids, not {centroids}",
            h.count
        ));
    }
    let mut r = ByteReader::new(&page[..h.used as usize], HEADER_SIZE);
    for _ in 0..centroids * dim {
        let x = r.f32()?;
        if !x.is_finite() {
            return corrupt(format_args!("a centroid value is {x}"));
        }
        rows.push(x);
    }
    Ok(())
}

/// An entry and its distance to the query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub distance: f64,
    pub tid: Tid,
}

/// Nearest first, then by TID.
pub fn candidate_order(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    a.distance.total_cmp(&b.distance).then(a.tid.cmp(&b.tid))
}

/// A scan's candidates from the lists read so far: entries with their exact distance (an
/// index without codes), and entries with a lower bound of their distance from their code,
/// pending until the scan gets that far. Popping returns candidates nearest first in exact
/// distances, as a full sort would: a pending entry on top has its key read and its exact
/// distance computed, and goes back in.
#[derive(Default)]
pub struct Batch {
    /// Candidates not in the heap yet (a LIMIT 10 needs a few dozen of a thousand).
    rest: Vec<Item>,
    /// Pending entries whose lower bound was past the EXPECTED_ROWS-th smallest upper bound
    /// when they came: none of them is among the first EXPECTED_ROWS rows, so they stay out of
    /// `rest`'s selections until the nearest candidate left is no nearer than `far_min`, the
    /// smallest of their bounds (most entries of a LIMIT 10's lists end here, never selected).
    far: Vec<Item>,
    far_min: f64,
    /// Every item of `rest` orders at or after this one (None: not known).
    edge: Option<Item>,
    /// `rest` is sorted farthest first (after SELECTIONS refills: a scan that goes that far
    /// pops many, and one sort beats a selection per chunk).
    sorted: bool,
    refills: usize,
    heap: BinaryHeap<Item>,
    scratch: Vec<f16>,
    /// The lists whose entries wait behind their codes.
    lists: Vec<u32>,
    /// The EXPECTED_ROWS smallest estimates (the middle of the bounds) of pending entries (a
    /// max-heap), and whether the first pop has weighed them.
    estimates: BinaryHeap<Distance>,
    weighed: bool,
    /// The EXPECTED_ROWS smallest upper bounds of pending entries (a max-heap): no entry whose
    /// lower bound lies past the largest of them is among the first EXPECTED_ROWS rows.
    uppers: BinaryHeap<Distance>,
    /// Whether the entries the first rows may need were read (see [`Batch::walk`]), and
    /// `resolved` then: reading keys one page at a time counts again from there.
    near_walked: bool,
    resolved_before_walk: usize,
    /// Exact distances computed while reading lists (an index without codes).
    pub exact: usize,
    /// Exact distances computed for pending entries.
    pub resolved: usize,
    /// Entries added with a bound.
    pub pending: usize,
    /// Exact distances computed by reading the lists' keys in a row (see [`Batch::pop`]).
    pub walked: usize,
}

/// A candidate: an entry with its exact distance, or pending with a lower bound of it and the
/// key page its code names.
#[derive(Clone, Copy, Debug)]
struct Item {
    value: f64,
    /// 0: pending (first among equal values: its exact distance may equal the other's with a
    /// smaller TID), 1: exact.
    exact: u8,
    tid: Tid,
    key: Place,
}

impl Item {
    fn exact(c: Candidate) -> Item {
        Item {
            value: c.distance,
            exact: 1,
            tid: c.tid,
            key: Place {
                block: NO_BLOCK,
                slot: 0,
            },
        }
    }

    fn pending(bound: f64, tid: Tid, key: Place) -> Item {
        Item {
            value: bound,
            exact: 0,
            tid,
            key,
        }
    }

    /// Nearest first, then pending before exact, then by TID.
    fn order(&self, other: &Item) -> Ordering {
        self.value
            .total_cmp(&other.value)
            .then(self.exact.cmp(&other.exact))
            .then(self.tid.cmp(&other.tid))
    }
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.order(other) == Ordering::Equal
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    /// Reversed: the heap's top is the nearest.
    fn cmp(&self, other: &Self) -> Ordering {
        other.order(self)
    }
}

/// Candidates moved from a batch's rest into its heap at a time.
const CHUNK: usize = 64;

/// Refills by selection (linear) before the rest is sorted once: a LIMIT 10 takes one to
/// three; a scan that takes more will likely take many.
const SELECTIONS: usize = 4;

/// The rows a scan is taken to want when it starts (a LIMIT 10, plus one for ties).
const EXPECTED_ROWS: usize = 11;

/// An f64 in total order.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Distance(f64);
impl Eq for Distance {}
impl PartialOrd for Distance {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Distance {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Adds `value` to `heap` (a max-heap) while it holds fewer than EXPECTED_ROWS values, else in
/// place of its largest when smaller: the heap keeps the EXPECTED_ROWS smallest values seen.
fn keep_smallest(heap: &mut BinaryHeap<Distance>, value: f64) {
    if heap.len() < EXPECTED_ROWS {
        heap.push(Distance(value));
    } else if heap.peek().is_some_and(|d| value < d.0) {
        heap.pop();
        heap.push(Distance(value));
    }
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty() && self.heap.is_empty() && self.far.is_empty()
    }

    fn add(&mut self, item: Item) {
        if self.edge.is_some_and(|e| item.order(&e) == Ordering::Less) {
            self.edge = None;
        }
        self.sorted = false;
        self.rest.push(item);
    }

    /// Moves the CHUNK nearest of `rest` into the heap.
    fn refill(&mut self) {
        let keep = self.rest.len().saturating_sub(CHUNK);
        if keep > 0 && !self.sorted {
            if self.refills < SELECTIONS {
                // Farthest first: after this, rest[keep..] are the nearest CHUNK, rest[keep]
                // the farthest of them.
                self.rest.select_nth_unstable_by(keep, |a, b| b.order(a));
            } else {
                self.rest.sort_unstable_by(|a, b| b.order(a));
                self.sorted = true;
            }
        }
        self.refills += 1;
        self.edge = (keep > 0).then(|| self.rest[keep]);
        self.heap.extend(self.rest.drain(keep..));
    }

    /// Reading keys one page at a time costs more per entry than reading every key of the
    /// lists in a row (10 to 20 times, measured): past 16 + pending/16 keys read one at a
    /// time, or when the first pop sees a quarter of the entries needed, the rest are read in
    /// a row. A scan that returns many rows (a wide LIMIT, a filter, many equal keys) then
    /// costs at most about twice what computing every distance did; a LIMIT 10 reads a few
    /// dozen keys and seldom gets here.
    fn should_walk(&mut self) -> bool {
        if self.lists.is_empty() {
            return false;
        }
        let enough = 16 + self.pending / 16;
        if !self.weighed {
            // About the entries whose lower bound is below the EXPECTED_ROWS-th smallest
            // estimate are read to return that many rows. When they are many (equal or
            // near-equal keys), reading every key in a row is cheaper from the start.
            self.weighed = true;
            let cut = if self.estimates.len() < EXPECTED_ROWS {
                f64::INFINITY
            } else {
                self.estimates.peek().map_or(f64::INFINITY, |d| d.0)
            };
            let needed = self
                .heap
                .iter()
                .chain(&self.rest)
                .filter(|i| i.exact == 0 && i.value <= cut)
                .count();
            // Only when they are a large share: an estimate is no promise, and reading a few
            // dozen keys one at a time costs less than reading every key of the lists.
            if needed >= enough.max(self.pending / 4) {
                return true;
            }
        }
        self.resolved - self.resolved_before_walk >= enough
    }

    /// Adds an entry with the bounds its code gives.
    fn add_pending(&mut self, (lower, upper): (f64, f64), tid: Tid, key: Place) {
        self.pending += 1;
        keep_smallest(&mut self.estimates, (lower + upper) / 2.0);
        keep_smallest(&mut self.uppers, upper);
        let item = Item::pending(lower, tid, key);
        // EXPECTED_ROWS entries are certainly within the largest of `uppers`, which only falls
        // as entries come.
        if self.uppers.len() >= EXPECTED_ROWS && self.uppers.peek().is_some_and(|u| lower > u.0) {
            if self.far.is_empty() || lower < self.far_min {
                self.far_min = lower;
            }
            self.far.push(item);
        } else {
            self.add(item);
        }
    }

    /// Moves the far entries into `rest` (see [`Batch::far`]).
    fn bring_far(&mut self) {
        if !self.far.is_empty() {
            self.rest.append(&mut self.far);
            self.edge = None;
            self.sorted = false;
        }
    }

    /// Every candidate of the batch, taken out of it (a walk puts back the exact ones).
    fn take_candidates(&mut self) -> impl Iterator<Item = Item> + '_ {
        self.bring_far();
        std::mem::take(&mut self.heap)
            .into_vec()
            .into_iter()
            .chain(self.rest.drain(..))
    }

    /// Makes `items`, every one exact, the batch's candidates: one heap of them all, as the
    /// scan before codes made.
    fn hold_exact(&mut self, items: Vec<Item>) {
        self.rest.clear();
        self.edge = None;
        self.sorted = false;
        self.heap = BinaryHeap::from(items);
    }

    /// Computes exact distances in a row. The first time, those of the pending entries whose
    /// lower bound is at most the EXPECTED_ROWS-th smallest upper bound (the only ones the
    /// first EXPECTED_ROWS rows can be), reading each of their key pages once: with many
    /// near-equal keys at a LIMIT 10's cut these are a hundred or two of a thousand or more.
    /// After that (a scan that wants more rows), every entry still pending, reading the key
    /// pages of the lists in a row.
    fn walk<S: PageRead>(
        &mut self,
        store: &S,
        meta: &Meta,
        query: &WideQuery,
    ) -> Result<(), Corrupt> {
        if !self.near_walked {
            self.near_walked = true;
            self.resolved_before_walk = self.resolved;
            if self.uppers.len() >= EXPECTED_ROWS {
                let cut = self.uppers.peek().map_or(f64::INFINITY, |d| d.0);
                return self.walk_near(store, meta, query, cut);
            }
        }
        self.walk_lists(store, meta, query)
    }

    /// Computes the exact distance of every pending entry whose lower bound is at most `cut`,
    /// reading each key page they name once (in block order). An entry whose key is no longer
    /// on its page goes, as in [`Batch::pop`].
    fn walk_near<S: PageRead>(
        &mut self,
        store: &S,
        meta: &Meta,
        query: &WideQuery,
        cut: f64,
    ) -> Result<(), Corrupt> {
        let (mut near, mut items): (Vec<Item>, Vec<Item>) = self
            .take_candidates()
            .partition(|i| i.exact == 0 && i.value <= cut);
        near.sort_unstable_by_key(|i| (i.key.block, i.key.slot));
        let mut at = 0;
        while at < near.len() {
            let block = near[at].key.block;
            let end = at + near[at..].partition_point(|i| i.key.block == block);
            let block = meta.list_block(store, block, "the key page a code names")?;
            let page = store.read(block);
            for item in &near[at..end] {
                let found = distance_on_page(
                    &page,
                    meta,
                    item.tid,
                    item.key.slot,
                    query,
                    &mut self.scratch,
                )
                .in_block(block)?;
                if let Some(distance) = found {
                    self.walked += 1;
                    items.push(Item::exact(Candidate {
                        distance,
                        tid: item.tid,
                    }));
                }
            }
            at = end;
        }
        self.hold_exact(items);
        Ok(())
    }

    /// Computes the exact distance of every entry still pending by reading the key pages of
    /// the lists in a row.
    fn walk_lists<S: PageRead>(
        &mut self,
        store: &S,
        meta: &Meta,
        query: &WideQuery,
    ) -> Result<(), Corrupt> {
        let (pending, mut items): (Vec<Item>, Vec<Item>) =
            self.take_candidates().partition(|i| i.exact == 0);
        // Sorted for binary search: a TID is on one key page of one list.
        let mut waiting: Vec<Tid> = pending.iter().map(|i| i.tid).collect();
        waiting.sort_unstable();
        // A TID found once is taken once (a damaged page may repeat one).
        let mut found = vec![false; waiting.len()];
        let mut left = waiting.len();
        let mut walked = 0;
        for list in std::mem::take(&mut self.lists) {
            if left == 0 {
                break;
            }
            for_each_list_key(store, meta, list, &mut self.scratch, |tid, key| {
                if let Ok(i) = waiting.binary_search(&tid) {
                    if std::mem::replace(&mut found[i], true) {
                        return;
                    }
                    left -= 1;
                    walked += 1;
                    items.push(Item::exact(Candidate {
                        distance: meta.metric.distance_to(query, key),
                        tid,
                    }));
                }
            })?;
        }
        self.walked += walked;
        // Pending entries not found have no key (see `pop`): they go. Every candidate left is
        // exact now.
        self.hold_exact(items);
        Ok(())
    }

    /// The nearest candidate left, with its exact distance. A pending entry whose key is no
    /// longer on the page its code names was removed by VACUUM since (dead to every scan) or
    /// never committed (an insert that crashed between its two pages), and is skipped.
    pub fn pop<S: PageRead>(
        &mut self,
        store: &S,
        meta: &Meta,
        query: &WideQuery,
    ) -> Result<Option<Candidate>, Corrupt> {
        loop {
            if !self.rest.is_empty() {
                let top_is_nearest = match (self.heap.peek(), self.edge) {
                    (Some(top), Some(edge)) => top.order(&edge) != Ordering::Greater,
                    _ => false,
                };
                if !top_is_nearest {
                    self.refill();
                }
            }
            // The heap's top is now the nearest candidate outside `far`; the far entries come
            // in before anything at or past their smallest bound is returned or resolved.
            if !self.far.is_empty() && self.heap.peek().is_none_or(|top| top.value >= self.far_min)
            {
                self.bring_far();
                continue;
            }
            if self.should_walk() {
                self.walk(store, meta, query)?;
                continue;
            }
            let Some(item) = self.heap.pop() else {
                return Ok(None);
            };
            let tid = item.tid;
            if item.exact == 1 {
                return Ok(Some(Candidate {
                    distance: item.value,
                    tid,
                }));
            }
            let block = meta.list_block(store, item.key.block, "the key page a code names")?;
            let page = store.read(block);
            let found = distance_on_page(&page, meta, tid, item.key.slot, query, &mut self.scratch)
                .in_block(block)?;
            if let Some(distance) = found {
                self.resolved += 1;
                self.heap.push(Item::exact(Candidate { distance, tid }));
            }
        }
    }
}

/// Adds every entry of list `list` to `batch`: pending with the bound its code gives
/// (`coded`: the query for codes) when the index has codes, else with its exact distance to
/// `query`. Each page is read under its own share lock; returns the pages read.
pub fn scan_list<S: PageRead>(
    store: &S,
    meta: &Meta,
    centroids: &Centroids,
    list: u32,
    query: &WideQuery,
    coded: Option<&CodedQuery>,
    batch: &mut Batch,
) -> Result<usize, Corrupt> {
    if query.len() != meta.dim as usize || centroids.dim != query.len() || list >= meta.lists {
        return corrupt(format_args!(
            "a {}-d query for a {}-d index of {} lists",
            query.len(),
            meta.dim,
            meta.lists
        ));
    }
    let Some(coded) = coded.filter(|_| meta.code_size() > 0) else {
        let mut scratch = Vec::new();
        return for_each_list_key(store, meta, list, &mut scratch, |tid, key| {
            batch.exact += 1;
            batch.add(Item::exact(Candidate {
                distance: meta.metric.distance_to(query, key),
                tid,
            }));
        });
    };
    batch.lists.push(list);
    let against = centroids.list_query(coded, list);
    let mut chain = list_chain(meta);
    let mut block = list_ref(store, meta, list)?.codes.head;
    while block != NO_BLOCK {
        chain.visit(store, block)?;
        let page = store.read(block);
        let next = chain_header(&page, meta.codes()).in_block(block)?.next;
        for_each_code(&page, meta, |tid, key, code| {
            batch.add_pending(against.bounds(meta.metric, code), tid, key);
        })
        .in_block(block)?;
        block = next;
    }
    Ok(chain.len())
}

/// The `k` nearest entries over the `probes` nearest lists, nearest first.
pub fn search<S: PageRead>(
    store: &S,
    meta: &Meta,
    centroids: &Centroids,
    query: &[f16],
    probes: usize,
    k: usize,
) -> Result<Vec<Candidate>, Corrupt> {
    search_counted(store, meta, centroids, query, probes, k).map(|(rows, _)| rows)
}

/// [`search`], with the batch it drew from (its counters say what the scan read).
pub fn search_counted<S: PageRead>(
    store: &S,
    meta: &Meta,
    centroids: &Centroids,
    query: &[f16],
    probes: usize,
    k: usize,
) -> Result<(Vec<Candidate>, Batch), Corrupt> {
    centroids.check_dim(meta, query)?;
    let query = WideQuery::new(query);
    let coded = centroids.coded_query(&query);
    let mut batch = Batch::default();
    let mut order = centroids.probe_order(&query);
    let end = probes.max(1).min(order.len());
    for &list in order.lists(0, end) {
        scan_list(
            store,
            meta,
            centroids,
            list,
            &query,
            coded.as_ref(),
            &mut batch,
        )?;
    }
    let mut out = Vec::with_capacity(k);
    while out.len() < k {
        match batch.pop(store, meta, &query)? {
            Some(c) => out.push(c),
            None => break,
        }
    }
    Ok((out, batch))
}
