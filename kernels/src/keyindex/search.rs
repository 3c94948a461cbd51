//! Queries: rank the centroids, read the nearest lists, exact distances for their entries.

use half::f16;

use super::format::{centroids_per_page, Meta};
use super::lists::{for_each_entry, list_chain, list_header, list_ref};
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
        Ok(Centroids {
            dim,
            geometry,
            half_norms: kmeans::half_squared_norms(&rows, dim, geometry),
            rows8: Int8Rows::new(&rows, dim),
            rows,
            build_id: meta.build_id,
        })
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

/// Appends every entry of list `list` with its distance to `query`. Each page is read under
/// its own share lock; returns the pages read.
pub fn scan_list<S: PageRead>(
    store: &S,
    meta: &Meta,
    list: u32,
    query: &WideQuery,
    out: &mut Vec<Candidate>,
) -> Result<usize, Corrupt> {
    if query.len() != meta.dim as usize {
        return corrupt(format_args!(
            "a {}-d query for a {}-d index",
            query.len(),
            meta.dim
        ));
    }
    let mut chain = list_chain(meta);
    let mut block = list_ref(store, meta, list)?.head;
    let mut scratch = Vec::new();
    while block != NO_BLOCK {
        chain.visit(store, block)?;
        let page = store.read(block);
        let next = list_header(&page, meta).in_block(block)?.next;
        for_each_entry(&page, meta, &mut scratch, |tid, key| {
            out.push(Candidate {
                distance: meta.metric.distance_to(query, key),
                tid,
            });
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
    centroids.check_dim(meta, query)?;
    let query = WideQuery::new(query);
    let mut out = Vec::new();
    let mut order = centroids.probe_order(&query);
    let end = probes.max(1).min(order.len());
    for &list in order.lists(0, end) {
        scan_list(store, meta, list, &query, &mut out)?;
    }
    out.sort_by(candidate_order);
    out.truncate(k);
    Ok(out)
}
