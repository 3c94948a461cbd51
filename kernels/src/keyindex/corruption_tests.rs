//! Damaged pages of a key index: every operation returns a plausible result or a [`Corrupt`]
//! error — never a panic, a loop, a lock taken twice or an allocation sized by a damaged field.
//! As for bm25 (`bm25index/corruption_tests.rs`): seeded random damage to every page, then
//! targeted cases. Helpers: [`crate::page::fuzz`].

use std::collections::HashSet;

use half::f16;

use super::format::{ListRef, META_BLOCK};
use super::lists::{directory_slot, list_lengths, list_ref};
use super::search::{scan_list, search};
use super::tests::{tid, to_f16, DIM, PAGE};
use super::*;
use crate::kmeans;
use crate::layout::{Corrupt, MetaError, PageHeader, PageKind, Tid, HEADER_SIZE};
use crate::page::fuzz::{bounded, damage_every_page, Tally};
use crate::page::{BlockNumber, MemoryStore, PageRead, NO_BLOCK};
use crate::synthetic::{centres, clustered};
use crate::vector::WideQuery;

const LISTS: usize = 6;

fn keys(n: usize, seed: u64) -> Vec<Vec<f16>> {
    let c = centres(8, DIM, 5);
    to_f16(&clustered(&c, DIM, n, seed))
        .chunks_exact(DIM)
        .map(<[f16]>::to_vec)
        .collect()
}

/// Six lists of several pages each, grown by inserts after the build and vacuumed (so lists
/// have free-space pages): every kind of key index page.
fn built_index() -> MemoryStore {
    let store = MemoryStore::new(PAGE);
    let points = clustered(&centres(8, DIM, 5), DIM, 240, 6);
    let trained = kmeans::train(&points, DIM, LISTS, Metric::Cosine.geometry(), 4, 5);
    let meta = initialize(&store, DIM as u16, Metric::Cosine, &trained, 1, 240);
    let centroids = Centroids::load(&store, &meta).unwrap();
    let built = keys(240, 6);
    let flat: Vec<f16> = built.iter().flatten().copied().collect();
    let lists: Vec<u32> = built.iter().map(|k| centroids.nearest(k)).collect();
    let tids: Vec<Tid> = (0..240).map(tid).collect();
    let mut loader = BulkLoader::new(&store, meta);
    loader.add_batch(&centroids, &lists, &tids, &flat);
    let meta = loader.finish();
    for (i, k) in keys(40, 7).iter().enumerate() {
        insert(&store, &meta, &centroids, tid(240 + i as u32), k).unwrap();
    }
    bulk_delete(&store, &meta, |t| t.offset % 5 == 0, || {}).unwrap();
    store
}

/// What the access method does with an index: open it, scan every list, insert, VACUUM,
/// statistics.
fn exercise(store: &MemoryStore) -> Tally {
    let mut t = Tally::default();
    let meta = match Meta::load(store) {
        Ok(meta) => meta,
        // A damaged magic number or version is "not this index" or "another format": typed
        // errors that ask for REINDEX too.
        Err(MetaError::NotAnIndex { .. } | MetaError::FormatVersion { .. }) => {
            t.corrupt += 1;
            return t;
        }
        Err(e) => {
            t.note(Err::<(), MetaError>(e), |_| {});
            return t;
        }
    };
    let centroids = match Centroids::load(store, &meta) {
        Ok(c) => c,
        Err(e) => {
            t.note(Err::<(), Corrupt>(e), |_| {});
            return t;
        }
    };
    for q in keys(3, 8) {
        t.note(
            search(store, &meta, &centroids, &q, meta.lists as usize, 10),
            // Not checked: the order. A damaged code (codes carry no checksum; data
            // checksums catch damage on disk) bounds its entry wrongly, which can put a
            // farther entry first; the distances returned stay the keys' own.
            |hits| assert!(hits.len() <= 10),
        );
    }
    for (i, k) in keys(3, 9).iter().enumerate() {
        t.note(
            insert(store, &meta, &centroids, tid(10_000 + i as u32), k),
            |_| {},
        );
    }
    t.note(
        bulk_delete(store, &meta, |t| t.offset % 3 == 0, || {}),
        |_| {},
    );
    t.note(list_lengths(store, &meta), |lengths| {
        assert_eq!(lengths.len(), meta.lists as usize)
    });
    t
}

#[test]
fn the_intact_index_passes_every_operation() {
    let t = exercise(&built_index());
    assert_eq!(t.corrupt, 0, "{t:?}");
}

#[test]
fn random_damage_to_any_page_is_an_error_or_a_plausible_result() {
    let total = damage_every_page(&built_index(), 3, exercise);
    assert!(total.corrupt > 0 && total.ok > 0);
}

/// A list of at least two pages, its directory entry, and the pages in order.
fn long_list(store: &MemoryStore, meta: &Meta) -> (u32, ListRef, Vec<BlockNumber>) {
    for list in 0..meta.lists {
        let r = list_ref(store, meta, list).unwrap();
        let mut pages = Vec::new();
        let mut block = r.keys.head;
        while block != NO_BLOCK {
            pages.push(block);
            block = PageHeader::read(&store.read(block), PageKind::KeyList)
                .unwrap()
                .next;
        }
        if pages.len() >= 2 {
            return (list, r, pages);
        }
    }
    panic!("no list of two pages")
}

fn set_next(store: &MemoryStore, block: BlockNumber, next: BlockNumber) {
    store.overwrite(block, |page| {
        let mut h = PageHeader::read(page, PageKind::KeyList).unwrap();
        h.next = next;
        h.write(page);
    });
}

fn scan_err(store: &MemoryStore, list: u32) -> Corrupt {
    let store = store.clone();
    bounded(format!("scan of list {list}"), move || {
        let meta = Meta::load(&store).unwrap();
        let centroids = Centroids::load(&store, &meta).unwrap();
        let query = WideQuery::new(&keys(1, 3)[0]);
        // Without the query for codes: the walk along the key pages.
        scan_list(
            &store,
            &meta,
            &centroids,
            list,
            &query,
            None,
            &mut Default::default(),
        )
        .unwrap_err()
    })
}

#[test]
fn a_list_into_itself_or_past_the_end_is_an_error() {
    let store = built_index();
    let meta = Meta::load(&store).unwrap();
    let (list, _, pages) = long_list(&store, &meta);
    set_next(&store, pages[1], pages[0]);
    assert!(scan_err(&store, list).what.contains("twice"));
    set_next(&store, pages[1], 1 << 20);
    assert!(scan_err(&store, list).what.contains("outside"));
    // Into the fixed area (here the directory page).
    set_next(&store, pages[1], meta.directory_start);
    assert!(scan_err(&store, list).what.contains("outside"));
    let stats = bounded("VACUUM".into(), move || {
        bulk_delete(&store, &meta, |_| false, || {}).unwrap_err()
    });
    assert!(stats.what.contains("outside"));
}

#[test]
fn an_insert_never_follows_a_list_into_the_directory_page_it_holds() {
    // The directory entry's tail (where an insert starts) set to the directory page itself:
    // following it would lock that page a second time (a self-deadlock in Postgres; the
    // MemoryStore panics).
    let store = built_index();
    let meta = Meta::load(&store).unwrap();
    let centroids = Centroids::load(&store, &meta).unwrap();
    let key = keys(1, 11).remove(0);
    let list = centroids.nearest(&key);
    let (dir, offset) = directory_slot(&store, &meta, list).unwrap();
    store.overwrite(dir, |page| {
        page[offset + 4..offset + 8].copy_from_slice(&dir.to_le_bytes());
    });
    let err = bounded("insert".into(), move || {
        insert(&store, &meta, &centroids, tid(77_777), &key).unwrap_err()
    });
    assert!(err.what.contains("outside"), "{err}");
    assert_eq!(err.block, Some(dir));
}

#[test]
fn absurd_counts_and_metapages_are_errors_before_allocation() {
    let store = built_index();
    let meta = Meta::load(&store).unwrap();
    let (list, _, pages) = long_list(&store, &meta);
    store.overwrite(pages[0], |page| {
        page[2..4].copy_from_slice(&u16::MAX.to_le_bytes())
    });
    let err = scan_err(&store, list);
    assert!(err.what.contains("65535 entries"), "{err}");
    assert_eq!(err.block, Some(pages[0]));

    // Four billion lists of 512 dimensions: refused before the centroids are allocated.
    let store = built_index();
    let mut absurd = meta;
    absurd.lists = u32::MAX;
    store.overwrite(META_BLOCK, |page| absurd.write(page));
    assert!(matches!(Meta::load(&store), Err(MetaError::Corrupt(_))));
    assert!(Centroids::load(&store, &absurd).is_err());

    // A directory page claiming more lists than fit it.
    let store = built_index();
    store.overwrite(meta.directory_start, |page| {
        page[2..4].copy_from_slice(&u16::MAX.to_le_bytes())
    });
    assert!(scan_err(&store, 0).what.contains("items"));

    // A metapage dimension that disagrees with the keys (and the centroids).
    let store = built_index();
    let centroids = Centroids::load(&store, &meta).unwrap();
    let mut narrow = meta;
    narrow.dim = DIM as u16 - 1;
    store.overwrite(META_BLOCK, |page| narrow.write(page));
    let key = keys(1, 4).remove(0);
    assert!(search(&store, &narrow, &centroids, &key, 2, 10).is_err());
    assert!(insert(&store, &narrow, &centroids, tid(5), &key).is_err());
}

#[test]
fn vacuum_reports_damage_and_leaves_other_lists_alone() {
    let store = built_index();
    let meta = Meta::load(&store).unwrap();
    let (list, _, pages) = long_list(&store, &meta);
    // The used size disagreeing with the count.
    store.overwrite(pages[1], |page| {
        let used = u16::from_le_bytes([page[4], page[5]]);
        page[4..6].copy_from_slice(&(used - 2).to_le_bytes());
    });
    let err = bounded("VACUUM".into(), {
        let store = store.clone();
        move || bulk_delete(&store, &meta, |_| true, || {}).unwrap_err()
    });
    assert_eq!(err.block, Some(pages[1]), "{err}");
    // Lists before the damaged one were vacuumed; none was touched past a check.
    let seen: HashSet<u32> = (0..list).collect();
    for l in seen {
        let r = list_ref(&store, &meta, l).unwrap();
        if r.keys.head != NO_BLOCK {
            let h = PageHeader::read(&store.read(r.keys.head), PageKind::KeyList).unwrap();
            assert_eq!(
                h.count, 0,
                "list {l} was vacuumed before the damage was found"
            );
            assert_eq!(h.used as usize, HEADER_SIZE);
        }
    }
}
