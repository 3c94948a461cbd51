//! CREATE INDEX: the metapage, centroid pages and directory, then entries filed list by list.

use half::f16;

use super::format::{
    centroids_per_page, list_refs_per_page, ChainRef, Layout, ListRef, Meta, Metric, META_BLOCK,
};
use super::lists::{
    code_entry, directory_slot, init_list_page, key_entry, try_append, write_list_ref, Place,
};
use super::search::Centroids;
use crate::layout::{ByteWriter, PageHeader, PageKind, Tid, HEADER_SIZE};
use crate::page::{BlockNumber, PageWrite, NO_BLOCK};

/// Allocates `n` pages that must be consecutive (the index is being built in an empty relation).
fn allocate_run<S: PageWrite>(
    store: &S,
    n: u32,
    mut fill: impl FnMut(u32, &mut [u8]),
) -> BlockNumber {
    let mut start = NO_BLOCK;
    for i in 0..n {
        let (block, mut page) = store.allocate();
        if i == 0 {
            start = block;
        } else if block != start + i {
            // A build writes into an empty relation (the extension checks it first).
            panic!(
                "key index pages {start}.. are not consecutive (got {block}): build into an empty relation"
            );
        }
        fill(i, &mut page);
    }
    start
}

/// Writes an empty index with these centroids (row-major f32, `dim` each) into an empty store.
/// No centroids (nothing to train on) gives one list with a zero centroid: every key goes there
/// and every query reads it, an exact scan until the index is rebuilt on data.
pub fn initialize<S: PageWrite>(
    store: &S,
    dim: u16,
    metric: Metric,
    centroids: &[f32],
    build_id: u64,
    trained_on: u64,
) -> Meta {
    let dim_us = dim as usize;
    assert!(
        dim > 0 && centroids.len().is_multiple_of(dim_us),
        "centroids are not whole rows"
    );
    let zero;
    let centroids = if centroids.is_empty() {
        zero = vec![0.0f32; dim_us];
        &zero[..]
    } else {
        centroids
    };
    let lists = (centroids.len() / dim_us) as u32;
    let page_size = store.page_size();
    let (meta_block, meta_page) = store.allocate();
    assert_eq!(
        meta_block, META_BLOCK,
        "the key index metapage must be the relation's first page"
    );
    drop(meta_page);

    let per_page = centroids_per_page(page_size, dim_us);
    assert!(per_page > 0, "a {dim}-d centroid does not fit a page");
    let centroid_pages = lists.div_ceil(per_page as u32);
    let centroid_start = allocate_run(store, centroid_pages, |i, page| {
        let first = i as usize * per_page;
        let rows = &centroids[first * dim_us..((first + per_page) * dim_us).min(centroids.len())];
        let mut h = PageHeader::new(PageKind::Centroids);
        h.count = (rows.len() / dim_us) as u16;
        let mut w = ByteWriter::new(page, HEADER_SIZE);
        for &x in rows {
            w.f32(x);
        }
        h.used = w.pos as u16;
        h.write(page);
    });

    let refs = list_refs_per_page(page_size) as u32;
    let directory_pages = lists.div_ceil(refs);
    let directory_start = allocate_run(store, directory_pages, |i, page| {
        let here = (lists - i * refs).min(refs);
        let mut h = PageHeader::new(PageKind::ListDirectory);
        h.count = here as u16;
        let mut w = ByteWriter::new(page, HEADER_SIZE);
        for _ in 0..here {
            ListRef::EMPTY.write(&mut w);
        }
        h.used = w.pos as u16;
        h.write(page);
    });

    let meta = Meta {
        dim,
        metric,
        lists,
        centroid_start,
        centroid_pages,
        directory_start,
        directory_pages,
        build_id,
        trained_on,
    };
    meta.write(&mut store.write(META_BLOCK));
    meta
}

/// Files entries into the lists of a freshly initialised index, a batch at a time; the
/// directory is written once at the end.
pub struct BulkLoader<'s, S: PageWrite> {
    store: &'s S,
    meta: Meta,
    /// Every list's chains so far (their free pages stay NO_BLOCK: a build fills its pages).
    lists: Vec<ListRef>,
    pub entries: u64,
}

impl<'s, S: PageWrite> BulkLoader<'s, S> {
    pub fn new(store: &'s S, meta: Meta) -> Self {
        BulkLoader {
            store,
            meta,
            lists: vec![ListRef::EMPTY; meta.lists as usize],
            entries: 0,
        }
    }

    /// Adds entry `i` = (`lists[i]`, `tids[i]`, `keys[i·dim..]`) for every i, grouped by list;
    /// `centroids` are the index's own (its codes are relative to them).
    pub fn add_batch(&mut self, centroids: &Centroids, lists: &[u32], tids: &[Tid], keys: &[f16]) {
        let dim = self.meta.dim as usize;
        assert!(lists.len() == tids.len() && keys.len() == tids.len() * dim);
        let mut order: Vec<usize> = (0..lists.len()).collect();
        order.sort_by_key(|&i| (lists[i], tids[i]));
        let mut at = 0;
        while at < order.len() {
            let list = lists[order[at]];
            let end = at
                + order[at..]
                    .iter()
                    .take_while(|&&i| lists[i] == list)
                    .count();
            self.append_run(
                centroids,
                list,
                order[at..end]
                    .iter()
                    .map(|&i| (tids[i], &keys[i * dim..(i + 1) * dim])),
            );
            at = end;
        }
    }

    fn append_run<'k>(
        &mut self,
        centroids: &Centroids,
        list: u32,
        entries: impl Iterator<Item = (Tid, &'k [f16])>,
    ) {
        assert!(list < self.meta.lists, "list {list} of {}", self.meta.lists);
        let l = list as usize;
        let store = self.store;
        let open = |tail: BlockNumber| (tail != NO_BLOCK).then(|| (tail, store.write(tail)));
        let mut keys_page = open(self.lists[l].keys.tail);
        let mut codes_page = open(self.lists[l].codes.tail);
        for (tid, key) in entries {
            let place = push(
                store,
                self.meta.keys(),
                &mut self.lists[l].keys,
                &mut keys_page,
                &key_entry(tid, key),
            );
            if self.meta.code_size() > 0 {
                let code = centroids.code(list, key);
                push(
                    store,
                    self.meta.codes(),
                    &mut self.lists[l].codes,
                    &mut codes_page,
                    &code_entry(tid, place, &code),
                );
            }
            self.entries += 1;
        }
    }

    /// Writes every list's head and tail into the directory.
    pub fn finish(self) -> Meta {
        let mut open: Option<(BlockNumber, S::WriteGuard<'s>)> = None;
        for list in 0..self.meta.lists {
            let (block, offset) =
                directory_slot(self.store, &self.meta, list).expect("the build's own layout");
            if open.as_ref().map(|(b, _)| *b) != Some(block) {
                drop(open.take());
                open = Some((block, self.store.write(block)));
            }
            let (_, page) = open.as_mut().expect("opened above");
            write_list_ref(page, offset, self.lists[list as usize]);
        }
        self.meta
    }
}

/// Appends `entry` to the build's open page of a chain, or to a new page linked after it;
/// returns where it went. The pages are the build's own, written just now: a failed check is
/// a bug.
fn push<'s, S: PageWrite>(
    store: &'s S,
    layout: Layout,
    chain: &mut ChainRef,
    current: &mut Option<(BlockNumber, S::WriteGuard<'s>)>,
    entry: &[u8],
) -> Place {
    if let Some((block, page)) = current {
        if let Some(slot) = try_append(page, layout, entry).expect("a built page") {
            return Place {
                block: *block,
                slot,
            };
        }
    }
    let (block, mut page) = store.allocate();
    init_list_page(&mut page, layout);
    assert!(
        try_append(&mut page, layout, entry)
            .expect("a new page")
            .is_some(),
        "an empty list page has no room for one entry"
    );
    match current.take() {
        Some((_, mut previous)) => {
            let mut h = PageHeader::read(&previous, layout.kind).expect("a built page");
            h.next = block;
            h.write(&mut previous);
        }
        None => chain.head = block,
    }
    chain.tail = block;
    *current = Some((block, page));
    Place { block, slot: 0 }
}
