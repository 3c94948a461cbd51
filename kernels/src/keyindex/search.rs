//! Queries: rank the centroids, read the nearest lists, exact distances for their entries.

use half::f16;

use super::format::{centroids_per_page, Meta};
use super::lists::{for_each_entry, list_header, list_ref};
use crate::kmeans::{self, Geometry};
use crate::layout::{corrupt, ByteReader, PageHeader, PageKind, Tid, HEADER_SIZE};
use crate::page::{PageRead, NO_BLOCK};

/// The centroids of one build, in memory (they never change after it; a new build has a new
/// [`Meta::build_id`]).
pub struct Centroids {
    pub dim: usize,
    pub geometry: Geometry,
    pub rows: Vec<f32>,
    /// [`kmeans::half_squared_norms`] of `rows`, computed once per load (not per key or query).
    half_norms: Vec<f32>,
    pub build_id: u64,
}

impl Centroids {
    pub fn load<S: PageRead>(store: &S, meta: &Meta) -> Centroids {
        let dim = meta.dim as usize;
        let per_page = centroids_per_page(store.page_size(), dim);
        let mut rows = Vec::with_capacity(meta.lists as usize * dim);
        for i in 0..meta.centroid_pages {
            let page = store.read(meta.centroid_start + i);
            let h = PageHeader::read(&page, PageKind::Centroids);
            if h.count as usize > per_page {
                corrupt(format_args!("centroid page claims {} centroids", h.count));
            }
            let mut r = ByteReader::new(&page, HEADER_SIZE);
            for _ in 0..h.count as usize * dim {
                rows.push(r.f32());
            }
        }
        if rows.len() != meta.lists as usize * dim {
            corrupt(format_args!(
                "{} centroid values for {} lists of {dim}",
                rows.len(),
                meta.lists
            ));
        }
        let geometry = meta.metric.geometry();
        Centroids {
            dim,
            geometry,
            half_norms: kmeans::half_squared_norms(&rows, dim, geometry),
            rows,
            build_id: meta.build_id,
        }
    }

    fn widen(key: &[f16]) -> Vec<f32> {
        key.iter().map(|x| x.to_f32()).collect()
    }

    /// The list a key is filed under.
    pub fn nearest(&self, key: &[f16]) -> u32 {
        kmeans::nearest_with(&self.rows, &self.half_norms, &Self::widen(key))
    }

    /// Every list, nearest first: the order a query probes them in.
    pub fn probe_order(&self, query: &[f16]) -> Vec<u32> {
        kmeans::ranked_with(&self.rows, &self.half_norms, &Self::widen(query))
    }
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
    query: &[f16],
    out: &mut Vec<Candidate>,
) -> usize {
    if query.len() != meta.dim as usize {
        corrupt(format_args!(
            "a {}-d query for a {}-d index",
            query.len(),
            meta.dim
        ));
    }
    let mut block = list_ref(store, meta, list).head;
    let mut scratch = Vec::new();
    let mut pages = 0;
    let mut guard = 0u64;
    while block != NO_BLOCK {
        let page = store.read(block);
        let next = list_header(&page, meta).next;
        for_each_entry(&page, meta, &mut scratch, |tid, key| {
            out.push(Candidate {
                distance: meta.metric.distance(query, key),
                tid,
            });
        });
        pages += 1;
        block = next;
        guard += 1;
        if guard > u32::MAX as u64 {
            corrupt("a key list chain loops");
        }
    }
    pages
}

/// The `k` nearest entries over the `probes` nearest lists, nearest first.
pub fn search<S: PageRead>(
    store: &S,
    meta: &Meta,
    centroids: &Centroids,
    query: &[f16],
    probes: usize,
    k: usize,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for &list in centroids.probe_order(query).iter().take(probes.max(1)) {
        scan_list(store, meta, list, query, &mut out);
    }
    out.sort_by(candidate_order);
    out.truncate(k);
    out
}
