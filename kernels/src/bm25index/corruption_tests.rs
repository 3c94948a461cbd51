//! Damaged pages: every operation on a corrupted index returns a plausible result or a
//! [`Corrupt`] error — it never panics, never loops, never sizes an allocation by a damaged field.
//!
//! The fuzz test flips seeded random bytes in every page of a built index (segments with
//! tombstones, a multi-block posting list, an append area) and runs searches, the full document
//! listing, statistics, VACUUM and inserts on each damaged copy, each batch in a thread with a
//! deadline. Targeted tests build the cases a fuzzer rarely hits: a chain into itself, a chain
//! past the end, decreasing documents, absurd counts. `PGS_FUZZ_SEED=<seed>` replays one seed.
//! Helpers: [`crate::page::fuzz`].

use super::append::{self, chain_pages, count_live, read_meta};
use super::dictionary::TermInfo;
use super::format::{PageHeader, PageKind, Tid, HEADER_SIZE, META_BLOCK};
use super::maintenance::{add_segment, bulk_delete, flush_append, initialize, vacuum_cleanup};
use super::search::hit_order;
use super::segment::{SegmentBuilder, SegmentReader};
use super::*;
use crate::page::fuzz::{bounded, damage_every_page, Tally};
use crate::page::{BlockNumber, MemoryStore, NO_BLOCK};
use crate::rng::SplitMix64;
use crate::text::AnalyzerConfig;

const PAGE: usize = 2048;

fn tid(i: u32) -> Tid {
    Tid {
        block: i / 40,
        offset: (i % 40 + 1) as u16,
    }
}

fn analyzer() -> Analyzer {
    Analyzer::new(AnalyzerConfig { stemming: true })
}

fn random_doc(
    rng: &mut SplitMix64,
    analyzer: &mut Analyzer,
    options: &IndexOptions,
) -> AnalyzedDoc {
    // "rust" in every description: a posting list of several full blocks.
    let fields = [
        rng.words(1, 3),
        format!("rust {}", rng.words(2, 12)),
        rng.words(10, 60),
    ];
    analyze(
        analyzer,
        [&fields[0], &fields[1], &fields[2]],
        options.weights_array(),
    )
}

/// Two segments (the first with posting lists of several full blocks), tombstones in one, and
/// an append area of a few pages: every kind of bm25 page.
fn built_index() -> MemoryStore {
    let store = MemoryStore::new(PAGE);
    let options = IndexOptions {
        append_pages: 1000,
        ..Default::default()
    };
    initialize(&store, options);
    let mut rng = SplitMix64(7);
    let mut a = analyzer();
    let mut id = 0;
    for size in [400, 60] {
        let mut builder = SegmentBuilder::new(options.term_scoring());
        for _ in 0..size {
            builder.add(tid(id), &random_doc(&mut rng, &mut a, &options));
            id += 1;
        }
        add_segment(&store, builder.write(&store), &NoReaders).unwrap();
    }
    bulk_delete(&store, &mut |t| t.offset % 11 == 0).unwrap();
    for _ in 0..40 {
        let doc = random_doc(&mut rng, &mut a, &options);
        assert!(!append::insert(&store, tid(id), &doc).unwrap());
        id += 1;
    }
    let meta = read_meta(&store).unwrap();
    assert_eq!(meta.segments.len(), 2);
    assert!(meta.segments.iter().any(|s| s.has_tombstones));
    assert!(chain_pages(&store, meta.append_head).unwrap().len() > 1);
    store
}

const QUERIES: &[&str] = &[
    "rust test",
    "python debug trace panic",
    "docker deploy kubernetes helm terraform",
    "query index vector",
    "rust3 test7 cache",
];

/// Hits as a search may return them: at most k, best first, finite scores.
fn plausible_hits(k: usize) -> impl Fn(&Vec<SearchHit>) {
    move |hits| {
        assert!(hits.len() <= k);
        assert!(hits.iter().all(|h| h.score.is_finite()), "{hits:?}");
        assert!(hits.windows(2).all(|w| hit_order(&w[0], &w[1]).is_le()));
    }
}

/// Everything a backend does with an index: read it, then VACUUM it and insert into it.
fn exercise(store: &MemoryStore) -> Tally {
    let mut t = Tally::default();
    let mut a = analyzer();
    let run_queries = |t: &mut Tally, a: &mut Analyzer| {
        for q in QUERIES {
            for k in [10, 1000] {
                t.note(search(store, a, q, k), plausible_hits(k));
            }
        }
        t.note(all_documents(store), |tids| {
            assert!(tids.windows(2).all(|w| w[0] < w[1]))
        });
    };
    run_queries(&mut t, &mut a);
    t.note(append_stats(store), |_| {});
    t.note(bulk_delete(store, &mut |tid| tid.offset % 7 == 0), |_| {});
    let mut rng = SplitMix64(99);
    let doc = random_doc(&mut rng, &mut a, &IndexOptions::default());
    t.note(append::insert(store, tid(100_000), &doc), |_| {});
    t.note(flush_append(store, &NoReaders), |_| {});
    t.note(vacuum_cleanup(store, &NoReaders), |_| {});
    run_queries(&mut t, &mut a);
    t
}

/// What `skills.bm25_index_stats` reads of the append area.
fn append_stats(store: &MemoryStore) -> Result<(u64, usize), Corrupt> {
    let meta = read_meta(store)?;
    let (mut docs, mut pages) = (0, 0);
    for head in [meta.frozen_head, meta.append_head] {
        if head != NO_BLOCK {
            docs += count_live(store, head)?;
            pages += chain_pages(store, head)?.len();
        }
    }
    Ok((docs, pages))
}

#[test]
fn the_intact_index_passes_every_operation() {
    let store = built_index();
    let t = exercise(&store);
    assert_eq!(t.corrupt, 0);
}

#[test]
fn random_damage_to_any_page_is_an_error_or_a_plausible_result() {
    let total = damage_every_page(&built_index(), 4, exercise);
    assert!(total.corrupt > 0 && total.ok > 0);
}

/// The append area's first page.
fn append_head(store: &MemoryStore) -> BlockNumber {
    read_meta(store).unwrap().append_head
}

fn set_next(store: &MemoryStore, blkno: BlockNumber, kind: PageKind, next: BlockNumber) {
    store.overwrite(blkno, |page| {
        let mut h = PageHeader::read(page, kind).unwrap();
        h.next = next;
        h.write(page);
    });
}

fn search_err(store: &MemoryStore) -> Corrupt {
    bounded("search".into(), {
        let store = store.clone();
        move || search(&store, &mut analyzer(), "rust test docker", 10).unwrap_err()
    })
}

#[test]
fn an_append_chain_into_itself_is_a_cycle_not_a_loop() {
    let store = built_index();
    // The last page: searches reach it from the head, inserts start there.
    let tail = read_meta(&store).unwrap().append_tail;
    set_next(&store, tail, PageKind::Append, tail);
    assert!(search_err(&store).what.contains("twice"));
    let err = bounded("insert".into(), move || {
        let doc = random_doc(
            &mut SplitMix64(1),
            &mut analyzer(),
            &IndexOptions::default(),
        );
        append::insert(&store, tid(9999), &doc).unwrap_err()
    });
    assert!(err.what.contains("twice"), "{err}");
}

#[test]
fn a_chain_past_the_end_or_into_the_metapage_is_an_error() {
    for next in [u32::MAX - 1, 5000, META_BLOCK] {
        let store = built_index();
        // The last page: VACUUM starts freezing there.
        let tail = read_meta(&store).unwrap().append_tail;
        set_next(&store, tail, PageKind::Append, next);
        let err = search_err(&store);
        assert!(err.what.contains("outside"), "{next}: {err}");
        // VACUUM freezes the chain while it holds the metapage: it must not follow the link
        // into the metapage (a lock it already holds), and reports the damage.
        let err = bounded("vacuum".into(), move || {
            vacuum_cleanup(&store, &NoReaders).unwrap_err()
        });
        assert!(err.what.contains("outside"), "{next}: {err}");
    }
}

/// A term of the first segment whose posting list has at least three blocks.
fn long_list(store: &MemoryStore) -> TermInfo {
    let meta = read_meta(store).unwrap();
    let reader = SegmentReader::open(store, meta.segments[0]).unwrap();
    let mut a = analyzer();
    for word in [
        "rust", "test", "python", "debug", "docker", "query", "index",
    ] {
        let term = &query_terms(&mut a, word)[0];
        if let Some(info) = reader.term(term.as_bytes()).unwrap() {
            if info.doc_freq > 2 * 128 {
                return info;
            }
        }
    }
    panic!("no term with three posting blocks")
}

/// Reads the first segment's list `info` document by document; returns how many it has.
fn walk_list(store: &MemoryStore, info: &TermInfo) -> Result<u32, Corrupt> {
    let meta = read_meta(store).unwrap();
    let reader = SegmentReader::open(store, meta.segments[0]).unwrap();
    let mut cursor = reader.postings(info)?;
    let mut n = 0;
    while cursor.doc() != super::segment::END {
        cursor.next()?;
        n += 1;
    }
    Ok(n)
}

#[test]
fn decreasing_documents_in_a_posting_list_are_corruption() {
    let store = built_index();
    let info = long_list(&store);
    // The second block's recorded last document, set below the first block's.
    let (at_block, at) = {
        let meta = read_meta(&store).unwrap();
        let reader = SegmentReader::open(&store, meta.segments[0]).unwrap();
        let mut cursor = reader.postings(&info).unwrap();
        let (blkno, offset) = cursor.block_entries().unwrap()[1].at;
        (blkno, offset as usize)
    };
    store.overwrite(at_block, |page| {
        page[at + 8..at + 12].copy_from_slice(&1u32.to_le_bytes())
    });
    let err = walk_list(&store, &info).unwrap_err();
    assert!(
        err.what.contains("posting block ends at document 1"),
        "{err}"
    );
    assert_eq!(err.block, Some(at_block));
}

#[test]
fn absurd_counts_are_errors_before_anything_is_sized_by_them() {
    // A document page, an append page and a directory page claiming 65535 items.
    let store = built_index();
    let meta = read_meta(&store).unwrap();
    let reader = SegmentReader::open(&store, meta.segments[0]).unwrap();
    let doc_page = reader.document_pages().unwrap()[1];
    drop(reader);
    store.overwrite(doc_page, |page| {
        page[2..4].copy_from_slice(&u16::MAX.to_le_bytes())
    });
    let err = search_err(&store);
    assert_eq!(err.block, Some(doc_page), "{err}");
    assert!(err.what.contains("65535"), "{err}");

    let store = built_index();
    let head = append_head(&store);
    store.overwrite(head, |page| {
        page[2..4].copy_from_slice(&u16::MAX.to_le_bytes())
    });
    let err = search_err(&store);
    assert_eq!(err.block, Some(head), "{err}");

    // A segment claiming 4 billion documents: the directory disagrees, nothing is allocated.
    let store = built_index();
    store.overwrite(META_BLOCK, |page| {
        let mut meta = Meta::read(page).unwrap();
        meta.segments[0].num_docs = u32::MAX;
        meta.write(page);
    });
    assert!(search_err(&store).what.contains("document pages"));

    // A dictionary taller than levels can be numbered.
    let store = built_index();
    store.overwrite(META_BLOCK, |page| {
        let mut meta = Meta::read(page).unwrap();
        meta.segments[1].dict_height = u32::MAX;
        meta.write(page);
    });
    assert!(search_err(&store).what.contains("height"));
}

#[test]
fn a_garbage_page_header_is_an_error() {
    let store = built_index();
    let head = append_head(&store);
    // `used` past the page.
    store.overwrite(head, |page| {
        page[4..6].copy_from_slice(&u16::MAX.to_le_bytes())
    });
    assert!(search_err(&store).what.contains("bytes in use"));
    // An unknown kind.
    let store = built_index();
    store.overwrite(head, |page| page[0] = 0xee);
    assert!(search_err(&store).what.contains("kind"));
    // Zeroed, as a page never written is.
    let store = built_index();
    store.overwrite(head, |page| page[..HEADER_SIZE].fill(0));
    assert!(search_err(&store).to_string().contains("data corruption"));
}

#[test]
fn skip_entries_that_disagree_with_the_list_are_corruption() {
    use super::skips::{has_skips, SKIP_ENTRY_SIZE};
    let store = built_index();
    let info = long_list(&store);
    assert!(has_skips(info.doc_freq), "the list has skip entries");
    let walk = |store: &MemoryStore| walk_list(store, &info);
    assert_eq!(walk(&store).unwrap(), info.doc_freq);
    // The entries start where the dictionary points; the second one follows the first on its
    // page or starts the next page.
    let second = |store: &MemoryStore| {
        let (blkno, offset) = (info.postings_block, info.postings_offset as usize);
        let mut out = (blkno, offset + SKIP_ENTRY_SIZE);
        store.overwrite(blkno, |page| {
            let h = PageHeader::read(page, PageKind::Postings).unwrap();
            if offset + 2 * SKIP_ENTRY_SIZE > h.used as usize {
                out = (h.next, HEADER_SIZE);
            }
        });
        out
    };

    // Last documents that do not rise.
    let damaged = built_index();
    let (blkno, at) = second(&damaged);
    damaged.overwrite(blkno, |page| {
        page[at..at + 4].copy_from_slice(&0u32.to_le_bytes())
    });
    let err = walk(&damaged).unwrap_err();
    assert!(err.what.contains("skip entry ends at document 0"), "{err}");
    assert_eq!(err.block, Some(blkno));

    // A best score that is not the block's.
    let damaged = built_index();
    let (blkno, at) = second(&damaged);
    damaged.overwrite(blkno, |page| {
        page[at + 4..at + 8].copy_from_slice(&1000f32.to_le_bytes())
    });
    let err = walk(&damaged).unwrap_err();
    assert!(err.what.contains("disagrees with its skip entry"), "{err}");

    // An entry that points at the wrong place of the list's page.
    let damaged = built_index();
    let (blkno, at) = second(&damaged);
    damaged.overwrite(blkno, |page| {
        let offset = u16::from_le_bytes([page[at + 12], page[at + 13]]);
        page[at + 12..at + 14].copy_from_slice(&(offset + 2).to_le_bytes())
    });
    assert!(walk(&damaged).is_err());

    // An entry past the end of the relation.
    let damaged = built_index();
    let (blkno, at) = second(&damaged);
    damaged.overwrite(blkno, |page| {
        page[at + 8..at + 12].copy_from_slice(&u32::MAX.to_le_bytes())
    });
    let err = walk(&damaged).unwrap_err();
    assert!(err.what.contains("next block is missing"), "{err}");

    // A negative best score, and an entry that points inside a page header: the entries are
    // read with one check for all of a page, and such a page is read again to say which.
    let damaged = built_index();
    let (blkno, at) = second(&damaged);
    damaged.overwrite(blkno, |page| {
        page[at + 4..at + 8].copy_from_slice(&(-1f32).to_le_bytes())
    });
    let err = walk(&damaged).unwrap_err();
    assert!(
        err.what.contains("a skip entry's best score is -1"),
        "{err}"
    );
    assert_eq!(err.block, Some(blkno));
    let damaged = built_index();
    let (blkno, at) = second(&damaged);
    damaged.overwrite(blkno, |page| {
        page[at + 12..at + 14].copy_from_slice(&2u16.to_le_bytes())
    });
    let err = walk(&damaged).unwrap_err();
    assert!(
        err.what.contains("a skip entry points at offset 2"),
        "{err}"
    );
    assert_eq!(err.block, Some(blkno));
}
