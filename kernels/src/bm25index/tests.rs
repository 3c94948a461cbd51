//! The index against the reference scorer: random corpora, random inserts, deletes, merges and
//! VACUUM, every query answered by both and compared (same documents in the same order, same
//! scores). A failure prints the seed; `PGS_FUZZ_SEED=<seed>` replays it.

use std::collections::{BTreeMap, HashMap};

use super::maintenance::{
    add_merged_segment, add_segment, bulk_delete, flush_append, initialize, start_scratch,
    vacuum_cleanup,
};
use super::segment::SegmentBuilder;
use super::*;
use crate::bm25::{Bm25Params, FieldWeights, ReferenceScorer};
use crate::page::MemoryStore;
use crate::text::AnalyzerConfig;

use crate::rng::SplitMix64 as Rng;

trait Skewed {
    /// Zipf-like: small indexes far more often.
    fn skewed(&mut self, n: u64) -> u64;
}

impl Skewed for Rng {
    fn skewed(&mut self, n: u64) -> u64 {
        ((n as f64).powf(self.unit()) - 1.0) as u64 % n
    }
}

const WORDS: &[&str] = &[
    "rust",
    "test",
    "runner",
    "python",
    "debug",
    "trace",
    "panic",
    "refactor",
    "review",
    "docker",
    "deploy",
    "kubernetes",
    "helm",
    "terraform",
    "schema",
    "migration",
    "query",
    "index",
    "vector",
    "embedding",
    "model",
    "train",
    "dataset",
    "pandas",
    "numpy",
    "plot",
    "chart",
    "markdown",
    "docs",
    "lint",
    "format",
    "cargo",
    "build",
    "compile",
    "error",
    "stack",
    "memory",
    "leak",
    "profile",
    "benchmark",
    "cache",
    "http",
    "server",
    "client",
    "api",
    "json",
    "yaml",
    "config",
    "secret",
    "token",
    "auth",
    "login",
    "session",
    "cookie",
    "browser",
    "selenium",
    "playwright",
    "react",
    "component",
    "state",
    "hook",
    "async",
    "await",
    "thread",
    "lock",
    "mutex",
    "channel",
    "queue",
    "worker",
    "retry",
    "timeout",
    "latency",
    "throughput",
    "shard",
    "replica",
    "backup",
    "restore",
    "pdf",
    "excel",
    "csv",
    "parquet",
    "arrow",
    "spark",
    "airflow",
    "dag",
    "pipeline",
    "ci",
    "github",
    "actions",
    "release",
    "version",
    "changelog",
    "semver",
    "license",
    "audit",
    "security",
    "fuzz",
];

fn word(rng: &mut Rng) -> String {
    let i = rng.skewed(WORDS.len() as u64 * 3) as usize;
    if i < WORDS.len() {
        WORDS[i].to_string()
    } else {
        // A long tail of rare terms.
        format!("{}{}", WORDS[i % WORDS.len()], i / WORDS.len())
    }
}

fn text(rng: &mut Rng, min: u64, max: u64) -> String {
    let n = min + rng.below(max - min + 1);
    let mut out: Vec<String> = (0..n).map(|_| word(rng)).collect();
    if n > 0 && rng.below(4) == 0 {
        out.push("the and of".into()); // stop words only
    }
    out.join(" ")
}

#[derive(Clone)]
struct Doc {
    fields: [String; 3],
}

fn random_doc(rng: &mut Rng) -> Doc {
    Doc {
        fields: [text(rng, 0, 3), text(rng, 0, 25), text(rng, 0, 400)],
    }
}

fn tid_of(id: i64) -> Tid {
    Tid {
        block: (id / 50) as u32,
        offset: (id % 50 + 1) as u16,
    }
}

fn id_of(tid: Tid) -> i64 {
    tid.block as i64 * 50 + tid.offset as i64 - 1
}

struct Harness {
    seed: u64,
    rng: Rng,
    store: MemoryStore,
    options: IndexOptions,
    analyzer: Analyzer,
    live: BTreeMap<i64, Doc>,
    next_id: i64,
}

impl Harness {
    fn new(seed: u64, page_size: usize) -> Harness {
        let mut rng = Rng(seed);
        let weights = match rng.below(3) {
            0 => FieldWeights::default(),
            1 => FieldWeights {
                name: 2.0,
                description: 1.0,
                instructions: 0.5,
            },
            _ => FieldWeights {
                name: 3.0,
                description: 0.0,
                instructions: 1.0,
            },
        };
        let options = IndexOptions {
            k1: [1.2, 1.5, 2.0][rng.below(3) as usize],
            b: [0.75, 0.3, 1.0][rng.below(3) as usize],
            weights,
            stemming: rng.below(2) == 0,
            append_pages: 1 + rng.below(6) as u32,
        };
        let store = MemoryStore::new(page_size);
        initialize(&store, options);
        let analyzer = Analyzer::new(AnalyzerConfig {
            stemming: options.stemming,
        });
        Harness {
            seed,
            rng,
            store,
            options,
            analyzer,
            live: BTreeMap::new(),
            next_id: 0,
        }
    }

    fn analyzed(&mut self, doc: &Doc) -> AnalyzedDoc {
        let [a, b, c] = &doc.fields;
        analyze(&mut self.analyzer, [a, b, c], self.options.weights_array())
    }

    /// CREATE INDEX: documents into builders that spill past `budget` bytes to a scratch store,
    /// then one merge of the spills into the index (a build that never spilled writes its
    /// builder straight in). Returns how many segments were spilled.
    fn build(&mut self, n: usize, budget: usize) -> usize {
        let mut builder = SegmentBuilder::new(self.options.term_scoring());
        let scratch = MemoryStore::new(self.store.page_size());
        start_scratch(&scratch);
        let mut spilled = Vec::new();
        for _ in 0..n {
            let doc = random_doc(&mut self.rng);
            let id = self.next_id;
            self.next_id += 1;
            let analyzed = self.analyzed(&doc);
            builder.add(tid_of(id), &analyzed);
            self.live.insert(id, doc);
            if builder.memory_bytes() > budget {
                let full = std::mem::replace(
                    &mut builder,
                    SegmentBuilder::new(self.options.term_scoring()),
                );
                spilled.push(full.write(&scratch));
            }
        }
        if spilled.is_empty() {
            if !builder.is_empty() {
                let segment = builder.write(&self.store);
                add_segment(&self.store, segment, &NoReaders).unwrap();
            }
        } else {
            if !builder.is_empty() {
                spilled.push(builder.write(&scratch));
            }
            add_merged_segment(&self.store, &scratch, &spilled, None, &NoReaders).unwrap();
        }
        spilled.len()
    }

    fn insert(&mut self) {
        let doc = random_doc(&mut self.rng);
        let id = self.next_id;
        self.next_id += 1;
        let analyzed = self.analyzed(&doc);
        if append::insert(&self.store, tid_of(id), &analyzed).unwrap() {
            flush_append(&self.store, &NoReaders).unwrap();
        }
        self.live.insert(id, doc);
    }

    fn delete_some(&mut self, fraction: u64) {
        let dead: Vec<i64> = self
            .live
            .keys()
            .copied()
            .filter(|_| self.rng.below(100) < fraction)
            .collect();
        for id in &dead {
            self.live.remove(id);
        }
        let counts = bulk_delete(&self.store, &mut |tid| {
            dead.binary_search(&id_of(tid)).is_ok()
        })
        .unwrap();
        assert_eq!(counts.removed, dead.len() as u64, "seed {}", self.seed);
        assert_eq!(
            counts.remaining,
            self.live.len() as u64,
            "seed {}",
            self.seed
        );
    }

    /// [`Self::delete_some`], and a reference over the documents the index's statistics count
    /// after it: a dead document of a segment still counts (its tombstone does, until VACUUM's
    /// cleanup rewrites the segment), one of the append area no longer does (queries skip a
    /// deleted record, statistics included).
    fn delete_some_counting(&mut self, fraction: u64) -> ReferenceScorer {
        let meta = append::read_meta(&self.store).unwrap();
        let mut in_append = std::collections::BTreeSet::new();
        for head in [meta.frozen_head, meta.append_head] {
            if head != crate::page::NO_BLOCK {
                append::for_each_record(&self.store, head, |rec| {
                    in_append.insert(id_of(rec.tid));
                })
                .unwrap();
            }
        }
        let before = self.live.clone();
        self.delete_some(fraction);
        self.reference_of(
            before
                .iter()
                .filter(|(id, _)| self.live.contains_key(id) || !in_append.contains(id)),
        )
    }

    fn reference(&self) -> ReferenceScorer {
        self.reference_of(&self.live)
    }

    fn reference_of<'a>(
        &self,
        docs: impl IntoIterator<Item = (&'a i64, &'a Doc)>,
    ) -> ReferenceScorer {
        let params = Bm25Params {
            k1: self.options.k1,
            b: self.options.b,
            weights: self.options.weights,
        };
        let mut r = ReferenceScorer::new(
            params,
            AnalyzerConfig {
                stemming: self.options.stemming,
            },
        )
        .unwrap();
        for (id, d) in docs {
            r.add(*id, &d.fields[0], &d.fields[1], &d.fields[2]);
        }
        r
    }

    /// Every query, top-k for several k, index against the reference.
    fn check(&mut self, queries: usize) {
        let mut reference = self.reference();
        self.check_against(&mut reference, queries);
    }

    /// [`Self::check`] against a given reference: one of a corpus whose deleted documents
    /// still count in the statistics (as they do in the index until VACUUM removes them) and
    /// are filtered out of its results.
    fn check_against(&mut self, reference: &mut ReferenceScorer, queries: usize) {
        self.check_queries_of(reference, queries, 8);
    }

    /// [`Self::check_against`] with queries of 1 to `max_words` words.
    fn check_queries_of(
        &mut self,
        reference: &mut ReferenceScorer,
        queries: usize,
        max_words: u64,
    ) {
        for q in 0..queries {
            let query = text(&mut self.rng, 1, max_words);
            self.check_query(reference, &query, &[1, 10, 1000], &format!("query {q}"));
            self.check_known_rows(&query);
        }
    }

    /// One query's top k, for each of `ks`, index against the reference.
    fn check_query(
        &mut self,
        reference: &mut ReferenceScorer,
        query: &str,
        ks: &[usize],
        label: &str,
    ) {
        for &k in ks {
            let live = &self.live;
            let want = reference.search(query, Some(k), |id| live.contains_key(&id));
            let got = search(&self.store, &mut self.analyzer, query, k).unwrap();
            let context = format!("seed {} {label} {query:?} k {k}", self.seed);
            assert_eq!(got.len(), want.len(), "{context}");
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g.score - w.score).abs() <= 1e-9 * w.score.abs().max(1.0),
                    "{context}: {g:?} vs {w:?}"
                );
                if id_of(g.tid) != w.id {
                    // Only a tie within rounding may swap two documents.
                    let other = want.iter().find(|h| h.id == id_of(g.tid));
                    assert!(
                        other.is_some_and(|o| (o.score - w.score).abs() <= 1e-9 * w.score.abs()),
                        "{context}: got id {} where {} belongs",
                        id_of(g.tid),
                        w.id
                    );
                }
            }
        }
    }

    /// Scoring the documents on a few heap blocks ([`search::PreparedQuery::matches_on_blocks`])
    /// gives exactly the scores the full top-k gives them, and none reaches the supremum.
    fn check_known_rows(&mut self, query: &str) {
        let terms = query_terms(&mut self.analyzer, query);
        if terms.is_empty() {
            return;
        }
        let last_block = (self.next_id / 50) as u64;
        let blocks: Vec<u32> = (0..3)
            .map(|_| self.rng.below(last_block + 1) as u32)
            .collect();
        let prepared = try_prepare(&self.store, &terms).unwrap();
        let mut want: Vec<(Tid, f64)> = prepared
            .top_k(usize::MAX)
            .unwrap()
            .into_iter()
            .filter(|h| h.score > 0.0 && blocks.contains(&h.tid.block))
            .map(|h| (h.tid, h.score))
            .collect();
        want.sort_by_key(|w| w.0);
        want.dedup_by_key(|(tid, _)| *tid);
        let got = prepared
            .matches_on_blocks(&blocks, &mut DocTableCache::default())
            .unwrap();
        let context = format!("seed {} query {query:?} blocks {blocks:?}", self.seed);
        assert_eq!(got, want, "{context}");
        let supremum = prepared.scorer.supremum();
        assert!(
            got.iter().all(|&(_, score)| score < supremum),
            "{context}: a score reaches the supremum {supremum}"
        );
        self.check_term_memo(&terms, &blocks, &got, supremum, &context);
    }

    /// The terms' contributions recorded once score the whole query and any query made of some
    /// of its terms, in any order, exactly as scoring that query alone does.
    fn check_term_memo(
        &mut self,
        terms: &[String],
        blocks: &[u32],
        whole: &[(Tid, f64)],
        supremum: f64,
        context: &str,
    ) {
        let prepared = try_prepare(&self.store, terms).unwrap();
        let scored = prepared
            .term_scores_on_blocks(blocks, &mut DocTableCache::default())
            .unwrap();
        let docs: Vec<Tid> = scored.iter().map(|s| s.0).collect();
        let suprema: Vec<Option<f64>> = (0..terms.len())
            .map(|i| prepared.scorer.term_supremum(i))
            .collect();
        let mut memo = TermScoreMemo::default();
        assert_eq!(memo.missing(terms, &docs).1, docs, "{context}");
        memo.record(terms, &suprema, &docs, &scored);
        assert_eq!(memo.missing(terms, &docs), (vec![], vec![]), "{context}");
        assert_eq!(
            docs,
            whole.iter().map(|w| w.0).collect::<Vec<_>>(),
            "{context}"
        );
        for (tid, score) in whole {
            assert_eq!(memo.score(terms, tid), Some(*score), "{context}: {tid:?}");
        }
        assert_eq!(memo.supremum(terms), supremum, "{context}");
        let mut part: Vec<String> = terms
            .iter()
            .filter(|_| self.rng.below(2) == 0)
            .cloned()
            .collect();
        self.rng.shuffle(&mut part);
        if part.is_empty() {
            return;
        }
        let alone = try_prepare(&self.store, &part).unwrap();
        let want: HashMap<Tid, f64> = alone
            .matches_on_blocks(blocks, &mut DocTableCache::default())
            .unwrap()
            .into_iter()
            .collect();
        for tid in &docs {
            assert_eq!(
                memo.score(&part, tid),
                want.get(tid).copied(),
                "{context}: part {part:?}, {tid:?}"
            );
        }
        assert_eq!(
            memo.supremum(&part),
            alone.scorer.supremum(),
            "{context}: part {part:?}"
        );
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("PGS_FUZZ_SEED") {
        Ok(s) => vec![s.parse().expect("PGS_FUZZ_SEED is a number")],
        Err(_) => (1..=6).collect(),
    }
}

#[test]
fn built_index_matches_reference() {
    for seed in seeds() {
        println!("seed {seed}");
        let mut h = Harness::new(seed, 8168);
        h.build(600, 1 << 20);
        h.check(40);
    }
}

/// Segments wider than the search's window of documents: windows end at block ends and at the
/// window's width, lists are essential in some windows and probed in others, and some of the
/// documents they hold are deleted.
#[test]
fn segments_wider_than_a_window_match_reference() {
    for seed in seeds().into_iter().take(2) {
        println!("seed {seed}");
        let mut h = Harness::new(seed, 8168);
        h.build(9_000, 1 << 30);
        let mut before_deletes = h.reference();
        h.check_against(&mut before_deletes, 8);
        h.delete_some(10);
        h.check_against(&mut before_deletes, 8);
    }
}

/// One-word queries take their own path (every block's best score read from its skip entry or
/// header, the best blocks decoded first): over several segments, a wide one, with deleted
/// documents and an append area.
#[test]
fn one_term_queries_match_reference() {
    for seed in seeds().into_iter().take(3) {
        println!("seed {seed}");
        let mut h = Harness::new(seed, 8168);
        h.build(6_000, 1 << 30);
        // Inserted after the build: the append area, and the segments its merges write.
        for _ in 0..800 {
            h.insert();
        }
        assert!(read_meta_segments(&h.store) > 1);
        let mut reference = h.reference();
        h.check_queries_of(&mut reference, 40, 1);
        let mut after_deletes = h.delete_some_counting(10);
        h.check_queries_of(&mut after_deletes, 40, 1);
    }
}

#[test]
fn spilled_build_small_pages_and_merges_match_reference() {
    for seed in seeds() {
        println!("seed {seed}");
        let mut h = Harness::new(seed, 2600);
        let spills = h.build(500, 40_000);
        assert!(spills > 2, "seed {seed}: the build spilled ({spills})");
        assert_eq!(
            read_meta_segments(&h.store),
            1,
            "spilled segments are merged into one"
        );
        // The spills stayed in the scratch store: the index holds its one segment and no
        // freed pages, as many pages as a build that never spilled.
        assert_eq!(h.store.num_free(), 0, "seed {seed}");
        let mut unspilled = Harness::new(seed, 2600);
        assert_eq!(unspilled.build(500, 1 << 30), 0);
        assert_eq!(
            h.store.num_pages(),
            unspilled.store.num_pages(),
            "seed {seed}"
        );
        h.check(20);
    }
}

#[test]
fn inserts_deletes_and_vacuum_match_reference() {
    for seed in seeds() {
        println!("seed {seed}");
        let mut h = Harness::new(seed, if seed % 2 == 0 { 8168 } else { 2600 });
        h.build(200, 1 << 20);
        for round in 0..4 {
            for _ in 0..(50 + h.rng.below(150)) {
                h.insert();
            }
            // Inserts alone keep statistics exact, before any VACUUM.
            h.check(10);
            h.delete_some(15);
            if round % 2 == 1 {
                // Updates: a new version is a new TID, the old one dies.
                for _ in 0..20 {
                    h.insert();
                }
            }
            vacuum_cleanup(&h.store, &NoReaders).unwrap();
            let meta = append::read_meta(&h.store).unwrap();
            assert!(
                meta.segments.iter().all(|s| !s.has_tombstones),
                "seed {seed}"
            );
            let indexed: u64 = meta.segments.iter().map(|s| s.num_docs as u64).sum();
            assert_eq!(
                indexed,
                h.live.len() as u64,
                "seed {seed}: cleanup leaves only live documents"
            );
            h.check(15);
        }
        // Deleting everything leaves an empty, working index.
        h.delete_some(100);
        vacuum_cleanup(&h.store, &NoReaders).unwrap();
        assert!(search(&h.store, &mut h.analyzer, "rust test", 10)
            .unwrap()
            .is_empty());
        h.insert();
        h.check(5);
    }
}

#[test]
fn freed_pages_are_reused_so_the_index_does_not_grow_without_bound() {
    let mut h = Harness::new(42, 8168);
    h.build(300, 1 << 20);
    for _ in 0..3 {
        for _ in 0..200 {
            h.insert();
        }
        h.delete_some(40);
        vacuum_cleanup(&h.store, &NoReaders).unwrap();
    }
    let after_warmup = h.store.num_pages();
    for _ in 0..3 {
        for _ in 0..200 {
            h.insert();
        }
        h.delete_some(40);
        vacuum_cleanup(&h.store, &NoReaders).unwrap();
    }
    // Same workload again: the relation may grow a little, not by another warm-up's worth.
    assert!(
        h.store.num_pages() < after_warmup * 3 / 2,
        "{} pages after {}",
        h.store.num_pages(),
        after_warmup
    );
    assert!(h.store.num_free() > 0);
    h.check(10);
}

#[test]
fn documents_larger_than_a_page_are_split_and_found() {
    let mut h = Harness::new(7, 2600);
    h.build(10, 1 << 20);
    // 600 distinct terms: several append pages for one document.
    let big = (0..600)
        .map(|i| format!("uniq{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let id = h.next_id;
    h.next_id += 1;
    let doc = Doc {
        fields: ["big".into(), "".into(), big],
    };
    let analyzed = h.analyzed(&doc);
    assert!(append::encode_parts(tid_of(id), &analyzed, 2600).len() > 1);
    append::insert(&h.store, tid_of(id), &analyzed).unwrap();
    h.live.insert(id, doc);
    let hits = search(&h.store, &mut h.analyzer, "uniq599 uniq3", 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(id_of(hits[0].tid), id);
    h.check(5);
    vacuum_cleanup(&h.store, &NoReaders).unwrap();
    h.check(5);
}

#[test]
fn all_documents_lists_live_tids_once() {
    let mut h = Harness::new(3, 8168);
    h.build(50, 1 << 20);
    for _ in 0..30 {
        h.insert();
    }
    h.delete_some(30);
    let got: Vec<i64> = all_documents(&h.store)
        .unwrap()
        .into_iter()
        .map(id_of)
        .collect();
    let want: Vec<i64> = h.live.keys().copied().collect();
    assert_eq!(got, want);

    // A batch at a time, growing as the ordered scan asks: the same documents in the same order.
    let mut cache = DocTableCache::default();
    let (mut after, mut n, mut batched) = (None, 1, Vec::new());
    loop {
        let (tids, more) = documents_after(&h.store, &mut cache, after, n).unwrap();
        assert!(tids.len() <= n);
        assert!(tids.windows(2).all(|w| w[0] < w[1]));
        after = tids.last().map(|(tid, _)| *tid).or(after);
        batched.extend(tids.into_iter().map(|(tid, _)| id_of(tid)));
        if !more {
            break;
        }
        n *= 2;
    }
    assert_eq!(batched, want);
}

fn read_meta_segments(store: &MemoryStore) -> usize {
    append::read_meta(store).unwrap().segments.len()
}

/// A session's bulk inserts: documents gathered in builders that spill past `budget` into a
/// scratch store, some of them rows of a rolled-back subtransaction, merged into the index as
/// one segment of the others only: searches and statistics agree with a reference that never
/// saw the left-out documents.
#[test]
fn bulk_inserts_merge_their_spills_keeping_only_the_named_documents() {
    for seed in seeds().into_iter().take(4) {
        let mut h = Harness::new(seed, 4096);
        h.build(150, 1 << 20);
        for _ in 0..40 {
            h.insert();
        }
        let scratch = MemoryStore::new(h.store.page_size());
        start_scratch(&scratch);
        let (mut builder, mut spilled, mut keep) = (
            SegmentBuilder::new(h.options.term_scoring()),
            Vec::new(),
            Vec::new(),
        );
        for _ in 0..400 {
            let doc = random_doc(&mut h.rng);
            let id = h.next_id;
            h.next_id += 1;
            builder.add(tid_of(id), &h.analyzed(&doc));
            let kept = h.rng.below(5) != 0;
            keep.push(kept);
            if kept {
                h.live.insert(id, doc);
            }
            if builder.memory_bytes() > 16 << 10 {
                let full =
                    std::mem::replace(&mut builder, SegmentBuilder::new(h.options.term_scoring()));
                spilled.push(full.write(&scratch));
            }
        }
        spilled.push(builder.write(&scratch));
        assert!(spilled.len() > 3, "seed {seed}: {} spills", spilled.len());
        add_merged_segment(&h.store, &scratch, &spilled, Some(&keep), &NoReaders).unwrap();
        h.check(12);
        // A flag per document, or nothing is merged.
        assert!(
            add_merged_segment(&h.store, &scratch, &spilled, Some(&keep[1..]), &NoReaders).is_err()
        );
    }
}

#[test]
fn cached_document_tables_see_new_tombstones() {
    let mut h = Harness::new(11, 8168);
    h.build(300, 1 << 20);
    let mut cache = DocTableCache::default();
    let query = "rust test docker python";
    let terms = query_terms(&mut h.analyzer, query);
    let before = try_prepare(&h.store, &terms)
        .unwrap()
        .top_k_cached(50, &mut cache)
        .unwrap();
    assert!(!before.is_empty());
    // Delete every document the query found; the cache must not bring them back.
    let dead: Vec<i64> = before.iter().map(|hit| id_of(hit.tid)).collect();
    let mut sorted = dead.clone();
    sorted.sort();
    bulk_delete(&h.store, &mut |tid| {
        sorted.binary_search(&id_of(tid)).is_ok()
    })
    .unwrap();
    let after = try_prepare(&h.store, &terms)
        .unwrap()
        .top_k_cached(50, &mut cache)
        .unwrap();
    assert!(
        after.iter().all(|hit| !dead.contains(&id_of(hit.tid))),
        "{after:?}"
    );
}

/// Documents that tie at the k-th score are kept by TID, lowest first, whatever order the walk
/// meets them in: queries over many identical documents, filed with their TIDs falling, so the
/// lowest TIDs come last, at a score equal to the k-th kept.
#[test]
fn ties_at_the_kth_score_keep_the_lowest_tids() {
    let mut h = Harness::new(seeds()[0], 8168);
    let mut builder = SegmentBuilder::new(h.options.term_scoring());
    let copy = Doc {
        fields: [
            "zyxwaltz quovadis".into(),
            "zyxwaltz".into(),
            "quovadis zyxwaltz tango".into(),
        ],
    };
    let copies: Vec<i64> = (0..600).rev().map(|i| 10_000 + 3 * i).collect();
    for (n, &id) in copies.iter().enumerate() {
        // Other documents between the copies, some holding one of the words.
        let mut other = random_doc(&mut h.rng);
        if n % 5 == 0 {
            other.fields[2].push_str(" quovadis");
        }
        let other_id = id + 1;
        let analyzed = h.analyzed(&other);
        builder.add(tid_of(other_id), &analyzed);
        let analyzed = h.analyzed(&copy);
        builder.add(tid_of(id), &analyzed);
    }
    let segment = builder.write(&h.store);
    add_segment(&h.store, segment, &NoReaders).unwrap();
    let mut lowest = copies.clone();
    lowest.sort();
    // Two words (the MaxScore walk) and one (the best blocks first).
    for query in ["quovadis zyxwaltz", "zyxwaltz"] {
        for k in [1usize, 7, 130] {
            let got = search(&h.store, &mut h.analyzer, query, k).unwrap();
            let ids: Vec<i64> = got.iter().map(|g| id_of(g.tid)).collect();
            assert_eq!(ids, lowest[..k], "{query:?} k {k}");
            assert!(
                got.iter().all(|g| g.score == got[0].score),
                "{query:?} k {k}"
            );
        }
    }
}

/// A rare word beside a common one, as many two-word requests are: the common word's list turns
/// non-essential once the k-th score passes its bound and is then only probed, with deleted
/// documents among the rare word's best ones and k around the rare word's document count.
#[test]
fn a_rare_and_a_common_word_match_reference() {
    for seed in seeds().into_iter().take(3) {
        let mut h = Harness::new(seed, 8168);
        let mut builder = SegmentBuilder::new(h.options.term_scoring());
        for id in 0..6000i64 {
            let mut doc = random_doc(&mut h.rng);
            let common = 1 + h.rng.below(6) as usize;
            doc.fields[2].push_str(&" omnipresent".repeat(common));
            if id % 20 == 0 {
                let rare = 1 + h.rng.below(4) as usize;
                doc.fields[1].push_str(&" scarcity".repeat(rare));
            }
            let analyzed = h.analyzed(&doc);
            builder.add(tid_of(id), &analyzed);
            h.live.insert(id, doc);
        }
        h.next_id = 6000;
        let segment = builder.write(&h.store);
        add_segment(&h.store, segment, &NoReaders).unwrap();
        let mut reference = h.reference();
        for query in [
            "scarcity omnipresent",
            "omnipresent scarcity rust",
            "scarcity the omnipresent",
        ] {
            h.check_query(&mut reference, query, &[1, 2, 10, 100, 299, 301], "built");
        }
        let mut reference = h.delete_some_counting(15);
        for query in ["scarcity omnipresent", "omnipresent scarcity rust"] {
            h.check_query(&mut reference, query, &[1, 10, 100, 260], "after deletes");
        }
    }
}
