//! The key index against exact search, over synthetic clustered keys, in a MemoryStore.

use std::collections::{BTreeMap, HashSet};

use half::f16;

use super::*;
use crate::kmeans;
use crate::layout::Tid;
use crate::page::MemoryStore;
use crate::rng::SplitMix64;
use crate::synthetic::{centres, clustered};

pub(super) const DIM: usize = 512;
pub(super) const PAGE: usize = 8160;

pub(super) fn tid(i: u32) -> Tid {
    Tid {
        block: i / 100,
        offset: (i % 100 + 1) as u16,
    }
}

pub(super) fn to_f16(rows: &[f32]) -> Vec<f16> {
    rows.iter().map(|&x| f16::from_f32(x)).collect()
}

struct Fixture {
    store: MemoryStore,
    meta: Meta,
    centroids: Centroids,
    live: BTreeMap<Tid, Vec<f16>>,
    centres: Vec<f32>,
    next: u32,
    seed: u64,
}

impl Fixture {
    /// CREATE INDEX over `n` keys: train on all of them, file them with the bulk loader.
    fn build(n: usize, lists: usize, metric: Metric, seed: u64) -> Fixture {
        let centres = centres(64, DIM, seed);
        let points = clustered(&centres, DIM, n, seed + 1);
        let store = MemoryStore::new(PAGE);
        let trained = kmeans::train(&points, DIM, lists, metric.geometry(), 8, seed);
        let meta = initialize(&store, DIM as u16, metric, &trained, seed, n as u64);
        let centroids = Centroids::load(&store, &meta).unwrap();
        let keys = to_f16(&points);
        let assignment: Vec<u32> = keys
            .chunks_exact(DIM)
            .map(|k| centroids.nearest(k))
            .collect();
        let tids: Vec<Tid> = (0..n as u32).map(tid).collect();
        let mut loader = BulkLoader::new(&store, meta);
        // Two batches, as a build that flushes at maintenance_work_mem does.
        let half = n / 2;
        loader.add_batch(
            &centroids,
            &assignment[..half],
            &tids[..half],
            &keys[..half * DIM],
        );
        loader.add_batch(
            &centroids,
            &assignment[half..],
            &tids[half..],
            &keys[half * DIM..],
        );
        assert_eq!(loader.entries, n as u64);
        let meta = loader.finish();
        let live = tids
            .iter()
            .zip(keys.chunks_exact(DIM))
            .map(|(t, k)| (*t, k.to_vec()))
            .collect();
        Fixture {
            store,
            meta,
            centroids,
            live,
            centres,
            next: n as u32,
            seed,
        }
    }

    fn insert(&mut self, n: usize) {
        let points = clustered(&self.centres, DIM, n, self.seed + 100 + self.next as u64);
        for k in to_f16(&points).chunks_exact(DIM) {
            let t = tid(self.next);
            self.next += 1;
            insert(&self.store, &self.meta, &self.centroids, t, k).unwrap();
            self.live.insert(t, k.to_vec());
        }
    }

    fn exact(&self, query: &[f16], k: usize) -> Vec<Candidate> {
        let mut all: Vec<Candidate> = self
            .live
            .iter()
            .map(|(t, key)| Candidate {
                distance: self.meta.metric.distance(query, key),
                tid: *t,
            })
            .collect();
        all.sort_by(search::candidate_order);
        all.truncate(k);
        all
    }

    /// A scan's candidates from every list (`coded`: the query for codes, None to compute
    /// every distance as the lists are read).
    fn scan_every_list(
        &self,
        query: &crate::vector::WideQuery,
        coded: Option<&super::codes::CodedQuery>,
    ) -> search::Batch {
        let mut batch = search::Batch::default();
        for list in 0..self.meta.lists {
            search::scan_list(
                &self.store,
                &self.meta,
                &self.centroids,
                list,
                query,
                coded,
                &mut batch,
            )
            .unwrap();
        }
        batch
    }

    /// Up to `n` candidates from `batch`, nearest first.
    fn pop(
        &self,
        batch: &mut search::Batch,
        query: &crate::vector::WideQuery,
        n: usize,
    ) -> Vec<Candidate> {
        let mut got = Vec::new();
        while got.len() < n {
            match batch.pop(&self.store, &self.meta, query).unwrap() {
                Some(c) => got.push(c),
                None => break,
            }
        }
        got
    }

    fn queries(&self, n: usize) -> Vec<Vec<f16>> {
        to_f16(&clustered(&self.centres, DIM, n, self.seed + 7777))
            .chunks_exact(DIM)
            .map(<[f16]>::to_vec)
            .collect()
    }

    /// Mean recall@10 at `probes`; also checks every returned entry is live and its distance exact.
    fn recall(&self, probes: usize) -> f64 {
        let queries = self.queries(40);
        let mut hits = 0;
        for q in &queries {
            let truth: HashSet<Tid> = self.exact(q, 10).iter().map(|c| c.tid).collect();
            let got =
                search::search(&self.store, &self.meta, &self.centroids, q, probes, 10).unwrap();
            for c in &got {
                let key = self
                    .live
                    .get(&c.tid)
                    .expect("the index returned a deleted or unknown entry");
                assert_eq!(c.distance, self.meta.metric.distance(q, key));
            }
            assert!(got
                .windows(2)
                .all(|w| search::candidate_order(&w[0], &w[1]).is_le()));
            hits += got.iter().filter(|c| truth.contains(&c.tid)).count();
        }
        hits as f64 / (queries.len() * 10) as f64
    }
}

/// A tenth of the fixture's 40 lists: the fraction of the keys the default breadth reads on
/// 4·√N lists at a few thousand keys.
const PROBES: usize = 4;

#[test]
fn recall_at_build_after_inserts_and_after_vacuum() {
    for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
        let mut f = Fixture::build(3000, 40, metric, 11);
        let r = f.recall(PROBES);
        assert!(r >= 0.95, "{metric:?}: recall {r} at build");
        // Probing every list is exact search.
        assert_eq!(f.recall(40), 1.0, "{metric:?}");

        f.insert(1000);
        let r = f.recall(PROBES);
        assert!(r >= 0.95, "{metric:?}: recall {r} after inserts");

        let mut rng = SplitMix64(5);
        let dead: HashSet<Tid> = f
            .live
            .keys()
            .copied()
            .filter(|_| rng.below(3) == 0)
            .collect();
        let mut asked = HashSet::new();
        let stats = bulk_delete(
            &f.store,
            &f.meta,
            |t| {
                assert!(asked.insert(t), "asked about {t:?} twice");
                dead.contains(&t)
            },
            || {},
        )
        .unwrap();
        assert_eq!(stats.removed as usize, dead.len());
        f.live.retain(|t, _| !dead.contains(t));
        assert_eq!(stats.remaining as usize, f.live.len());
        let r = f.recall(PROBES);
        assert!(r >= 0.95, "{metric:?}: recall {r} after VACUUM");
        assert_eq!(f.recall(40), 1.0, "{metric:?}: exact after VACUUM");
    }
}

#[test]
fn vacuumed_space_is_reused_by_inserts() {
    let mut f = Fixture::build(2000, 20, Metric::InnerProduct, 21);
    f.insert(700);
    let pages_before = f.store.num_pages();
    let mut rng = SplitMix64(9);
    let dead: HashSet<Tid> = f
        .live
        .keys()
        .copied()
        .filter(|_| rng.below(2) == 0)
        .collect();
    bulk_delete(&f.store, &f.meta, |t| dead.contains(&t), || {}).unwrap();
    f.live.retain(|t, _| !dead.contains(t));
    // Re-insert as many as were removed: the free pages VACUUM recorded take most of them.
    f.insert(dead.len());
    let grown = f.store.num_pages() - pages_before;
    let added_pages = dead.len().div_ceil(7);
    assert!(
        grown < added_pages / 2,
        "{grown} new pages for {} entries ({added_pages} pages' worth)",
        dead.len()
    );
    assert_eq!(f.recall(20), 1.0);
}

#[test]
fn an_index_built_empty_has_one_list_and_is_exact() {
    let store = MemoryStore::new(PAGE);
    let meta = initialize(&store, DIM as u16, Metric::L2, &[], 1, 0);
    assert_eq!(meta.lists, 1);
    let centroids = Centroids::load(&store, &meta).unwrap();
    let mut f = Fixture {
        centres: centres(8, DIM, 3),
        store,
        meta,
        centroids,
        live: BTreeMap::new(),
        next: 0,
        seed: 3,
    };
    f.insert(300);
    assert_eq!(f.recall(1), 1.0);
}

#[test]
fn a_reader_of_a_different_metapage_version_is_told_to_reindex() {
    let f = Fixture::build(50, 4, Metric::Cosine, 2);
    use crate::page::{PageRead, PageWrite};
    {
        let mut page = f.store.write(format::META_BLOCK);
        // Version 1: entries without codes.
        page[crate::layout::HEADER_SIZE + 4] = 1;
    }
    let err = Meta::read(&f.store.read(format::META_BLOCK)).unwrap_err();
    assert!(err.to_string().contains("REINDEX required"));
}

/// Top-10 overlap of exact search over f16-stored keys with exact search over the f32 keys,
/// on the benchmark's clustered data (where near-ties inside a cluster are the norm, so this is
/// the hard case for reduced precision). Printed for benches/RESULTS.md.
pub fn f16_top10_overlap(n: usize, queries: usize, seed: u64) -> f64 {
    let c = centres(100, DIM, seed);
    let keys = clustered(&c, DIM, n, seed + 1);
    let qs = clustered(&c, DIM, queries, seed + 2);
    let keys16 = to_f16(&keys);
    let mut same = 0;
    for q in qs.chunks_exact(DIM) {
        let q16 = to_f16(q);
        let top = |score: &dyn Fn(usize) -> f64| {
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
            idx.truncate(10);
            idx
        };
        let exact32 = top(&|i| crate::vector::scalar::dot(q, &keys[i * DIM..(i + 1) * DIM]));
        let exact16: HashSet<usize> =
            top(&|i| -Metric::InnerProduct.distance(&q16, &keys16[i * DIM..(i + 1) * DIM]))
                .into_iter()
                .collect();
        same += exact32.iter().filter(|i| exact16.contains(i)).count();
    }
    same as f64 / (queries * 10) as f64
}

#[test]
fn f16_storage_keeps_rankings() {
    let overlap = f16_top10_overlap(20_000, 50, 31);
    eprintln!("f16 vs f32 exact top-10 overlap: {overlap:.4}");
    assert!(
        overlap >= 0.97,
        "f16 keys change rankings: overlap {overlap}"
    );
}

/// The probe order, asked for a piece at a time as an iterative scan asks, is the full sort's
/// (nearer first, then the lower list), ties included.
#[test]
fn probe_order_in_pieces_is_the_ranking() {
    let mut rng = SplitMix64(21);
    for (case, lists) in [1usize, 2, 9, 50, 1000].into_iter().enumerate() {
        // Values from a small set, so that many lists tie.
        let nearness: Vec<f32> = (0..lists).map(|_| rng.below(17) as f32 / 4.0).collect();
        let mut want: Vec<u32> = (0..lists as u32).collect();
        want.sort_by(|&a, &b| kmeans::nearer_first(&nearness, a, b));
        let mut order = probe::ProbeOrder::new(nearness);
        assert_eq!(order.len(), lists);
        let mut got = Vec::new();
        let mut start = 0;
        for step in [1, 3, 4, 7, 50].iter().cycle().skip(case) {
            let end = (start + step).min(lists);
            got.extend_from_slice(order.lists(start, end));
            start = end;
            if start == lists {
                break;
            }
        }
        assert_eq!(got, want, "{lists} lists");
        // Asking again for a range already ordered gives the same lists.
        let end = lists.min(5);
        assert_eq!(order.lists(0, end), &want[..end]);
    }
}

/// The 8-bit centroids rank a query's lists as the f32 ones do, apart from near ties: the
/// nearest list nearly always, and the same five nearest lists (in any order) for nearly all.
#[test]
fn probe_order_follows_the_centroids() {
    for metric in [Metric::InnerProduct, Metric::L2] {
        let f = Fixture::build(600, 50, metric, 21);
        let queries = to_f16(&clustered(&f.centres, DIM, 40, 99));
        let (mut same_nearest, mut shared_of_five) = (0, 0);
        for q in queries.chunks_exact(DIM) {
            let widened: Vec<f32> = q.iter().map(|x| x.to_f32()).collect();
            let want = kmeans::ranked(&f.centroids.rows, DIM, &widened, metric.geometry());
            let mut order = f.centroids.probe_order(&crate::vector::WideQuery::new(q));
            let got = order.lists(0, want.len()).to_vec();
            let mut sorted = got.clone();
            sorted.sort();
            assert_eq!(sorted, (0..50).collect::<Vec<u32>>(), "{metric:?}");
            same_nearest += (got[0] == want[0]) as usize;
            shared_of_five += got[..5].iter().filter(|l| want[..5].contains(l)).count();
        }
        assert!(
            same_nearest >= 38,
            "{metric:?}: {same_nearest} of 40 nearest lists agree"
        );
        assert!(
            shared_of_five >= 190,
            "{metric:?}: {shared_of_five} of 200 of the first five lists agree"
        );
    }
}

/// Entry codes spare most exact distances of a LIMIT 10 scan, and the scan still returns every
/// entry of the lists it reads nearest first in exact distances, as a full sort does (pending
/// entries are resolved as the scan reaches them), for every metric, after inserts and VACUUM.
#[test]
fn codes_spare_distances_and_keep_the_exact_order() {
    for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
        let mut f = Fixture::build(3000, 12, metric, 21);
        f.insert(300);
        let dead: HashSet<Tid> = f
            .live
            .keys()
            .filter(|t| t.offset % 7 == 0)
            .copied()
            .collect();
        crate::keyindex::bulk_delete(&f.store, &f.meta, |t| dead.contains(&t), || {}).unwrap();
        f.live.retain(|t, _| !dead.contains(t));
        let (mut computed, mut entries) = (0, 0);
        for q in f.queries(10) {
            let query = crate::vector::WideQuery::new(&q);
            let coded = f.centroids.coded_query(&query);
            assert!(coded.is_some(), "512-d keys carry codes");
            let mut batch = f.scan_every_list(&query, coded.as_ref());
            let mut got = f.pop(&mut batch, &query, 10);
            assert_eq!(got.len(), 10);
            computed += batch.exact + batch.resolved + batch.walked;
            entries += f.live.len();
            got.extend(f.pop(&mut batch, &query, usize::MAX));
            let want = f.exact(&q, usize::MAX);
            assert_eq!(got, want, "{metric:?}: the full exact order");
            assert!(
                batch.walked > 0,
                "a full drain reads the rest of the keys in a row"
            );
            // Without codes (every distance computed as the lists are read), the same.
            let mut plain = f.scan_every_list(&query, None);
            let got = f.pop(&mut plain, &query, usize::MAX);
            assert_eq!(got, want, "{metric:?}: the full exact order without codes");
        }
        assert!(
            computed * 2 < entries,
            "{metric:?}: {computed} exact distances for {entries} entries read"
        );
    }
}

/// A code whose key is not on the page it names (an insert that crashed between its two
/// pages; its transaction never committed) is skipped by scans and removed by VACUUM.
#[test]
fn a_code_without_its_key_is_skipped_and_vacuumed() {
    use super::lists::{append, code_entry, directory_slot, read_list_ref, write_list_ref};
    use crate::page::PageWrite;
    let f = Fixture::build(400, 4, Metric::InnerProduct, 31);
    let query = f.queries(1).remove(0);
    let nearest = f.exact(&query, 1)[0];
    let key = &f.live[&nearest.tid];
    // The orphan: the nearest key's own code, under a TID no key page holds, naming the page
    // the nearest key is on.
    let orphan = tid(99_999);
    let list = f.centroids.nearest(key);
    let code = f.centroids.code(list, key);
    let (dir_block, offset) = directory_slot(&f.store, &f.meta, list).unwrap();
    let key_page = {
        let mut found = None;
        let r = read_list_ref(&f.store.write(dir_block), offset).unwrap();
        let mut block = r.keys.head;
        while block != crate::page::NO_BLOCK {
            let page = crate::page::PageRead::read(&f.store, block);
            lists::for_each_entry(&page, &f.meta, &mut Vec::new(), |t, _| {
                if t == nearest.tid {
                    found = Some(block);
                }
            })
            .unwrap();
            block = lists::list_header(&page, &f.meta).unwrap().next;
        }
        found.unwrap()
    };
    {
        let mut dir = f.store.write(dir_block);
        let mut r = read_list_ref(&dir, offset).unwrap();
        append(
            &f.store,
            &f.meta,
            f.meta.codes(),
            &mut r.codes,
            &code_entry(
                orphan,
                lists::Place {
                    block: key_page,
                    slot: 0,
                },
                &code,
            ),
        )
        .unwrap();
        write_list_ref(&mut dir, offset, r);
    }
    let got = search::search(&f.store, &f.meta, &f.centroids, &query, 4, 10).unwrap();
    assert_eq!(got, f.exact(&query, 10), "the orphan is skipped");
    // VACUUM asks about the orphan (its transaction aborted: dead) and removes it.
    let mut asked = false;
    bulk_delete(
        &f.store,
        &f.meta,
        |t| {
            asked |= t == orphan;
            t == orphan
        },
        || {},
    )
    .unwrap();
    assert!(asked, "VACUUM asked about the code's TID");
    let mut codes = 0;
    for l in 0..f.meta.lists {
        let mut block = lists::list_ref(&f.store, &f.meta, l).unwrap().codes.head;
        while block != crate::page::NO_BLOCK {
            let page = crate::page::PageRead::read(&f.store, block);
            lists::for_each_code(&page, &f.meta, |t, _, _| {
                assert_ne!(t, orphan, "VACUUM removed the orphan code");
                codes += 1;
            })
            .unwrap();
            block = lists::chain_header(&page, f.meta.codes()).unwrap().next;
        }
    }
    assert_eq!(codes, f.live.len(), "one code per key");
}

/// Many equal keys: a LIMIT 10 would read hundreds of keys one page at a time, so the scan
/// reads its lists' keys in a row from the start; the rows are the exact ones, ties by TID.
#[test]
fn many_equal_keys_are_read_in_a_row() {
    let mut f = Fixture::build(1000, 4, Metric::InnerProduct, 41);
    let query = f.queries(1).remove(0);
    let copy = f.live[&f.exact(&query, 1)[0].tid].clone();
    for i in 0..400 {
        let t = tid(50_000 + i);
        insert(&f.store, &f.meta, &f.centroids, t, &copy).unwrap();
        f.live.insert(t, copy.clone());
    }
    let wide = crate::vector::WideQuery::new(&query);
    let coded = f.centroids.coded_query(&wide);
    let mut batch = f.scan_every_list(&wide, coded.as_ref());
    let got = f.pop(&mut batch, &wide, 10);
    assert_eq!(got, f.exact(&query, 10));
    assert!(batch.walked > 0, "read in a row");
    assert!(
        batch.resolved < 16,
        "{} keys read one at a time",
        batch.resolved
    );
    // Only the entries that may be among the first rows: the 400 copies and the few near
    // them, not every entry of the lists.
    assert!(
        batch.walked >= 400 && batch.walked * 2 < f.live.len(),
        "{} keys read in a row of {}",
        batch.walked,
        f.live.len()
    );
    // Draining the scan reads the rest in a row too, and every row comes in the exact order.
    let mut all = got;
    all.extend(f.pop(&mut batch, &wide, usize::MAX));
    assert_eq!(all, f.exact(&query, usize::MAX));
}
