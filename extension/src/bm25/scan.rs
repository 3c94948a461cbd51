//! Index scans for `ORDER BY doc <&> query`: best documents first, in batches.
//!
//! The first batch is the top `pg_skills.bm25_scan_batch` (10, the usual LIMIT) by block-max
//! MaxScore; when the executor wants more (a LIMIT past it, or rows filtered out), the next batch
//! is the top 4× as many, skipping what was already returned. When the matches run out, every
//! other live document follows with score 0, in TID order and in batches that grow the same way
//! (a query that matches fewer rows than its LIMIT reads a few more, not the whole index), so the
//! index returns exactly the rows a sequential scan would, in the same order up to ties.
//! A batch is computed under the readers lock; between batches a merge may run.

use std::collections::{HashSet, VecDeque};

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use std::cell::RefCell;
use std::collections::HashMap;

use pg_skills_kernels::bm25index::{
    documents_after, query_terms, try_prepare, Corrupt, DocTableCache, QueryStats, SearchHit, Tid,
};

use super::{checked_meta, reading, with_analyzer};
use crate::errors::raise;
use crate::storage::{BufferStore, Mode, OrRaise};

thread_local! {
    /// Document tables per index file (relfilenode): REINDEX and TRUNCATE get a new file, so a
    /// new index never meets an old index's tables; within one file the metapage generation
    /// decides validity.
    static DOC_TABLES: RefCell<HashMap<u32, DocTableCache>> = RefCell::new(HashMap::new());
}

/// Runs `read` under the readers lock with the document tables cached for the index's file.
fn with_doc_tables<T>(
    index: pg_sys::Relation,
    store: &BufferStore,
    read: impl FnOnce(&mut DocTableCache) -> Result<T, Corrupt>,
) -> T {
    // SAFETY: `index` is an open relation (the caller's scan or search).
    let file = unsafe { (*index).rd_node.relNode.to_u32() };
    reading(index, store, || {
        DOC_TABLES.with(|cell| read(cell.borrow_mut().entry(file).or_default()))
    })
    .or_raise(index)
}

/// The `want` best documents of `index` for `terms`, best first, under the readers lock, with the
/// document tables cached for the index's file; scored with `stats` when given (a distributed
/// collection's), else the index's own. The ordered scan's batches and the direct top-k
/// (`top_k.rs`) both read the index this way.
pub(super) fn top_hits(
    index: pg_sys::Relation,
    store: &BufferStore,
    terms: &[String],
    stats: Option<&QueryStats>,
    want: usize,
) -> Vec<SearchHit> {
    with_doc_tables(index, store, |cache| {
        try_prepare(store, terms).and_then(|p| match stats {
            Some(stats) => p.with_stats(stats).top_k_cached(want, cache),
            None => p.top_k_cached(want, cache),
        })
    })
}

/// The documents of `index` on heap blocks `blocks` that hold a query term, with each term's
/// contribution to their scores (as [`top_hits`] scores them), and each term's share of the most
/// any document could score (`Scorer::term_supremum`), under the readers lock with the cached
/// document tables.
pub(super) fn term_scores_on_blocks(
    index: pg_sys::Relation,
    store: &BufferStore,
    terms: &[String],
    blocks: &[u32],
) -> TermScores {
    with_doc_tables(index, store, |cache| {
        let prepared = try_prepare(store, terms)?;
        let scored = prepared.term_scores_on_blocks(blocks, cache)?;
        let suprema = (0..terms.len())
            .map(|i| prepared.scorer.term_supremum(i))
            .collect();
        Ok((scored, suprema))
    })
}

/// Each document with its query terms' contributions, and each term's share of the supremum.
pub(super) type TermScores = (Vec<(Tid, Vec<Option<f64>>)>, Vec<Option<f64>>);

#[derive(Default)]
struct ScanState {
    index_oid: u32,
    /// The query's text part of the score hints' key (text and carried statistics).
    key_text: String,
    terms: Vec<String>,
    /// Statistics carried with the query (a distributed collection's), else the index's own.
    stats: Option<QueryStats>,
    batch: VecDeque<Tid>,
    returned: HashSet<Tid>,
    asked: usize,
    matches_done: bool,
    /// The rest (documents without a match): how many the last batch asked for, and the
    /// largest TID it returned.
    rest_asked: usize,
    rest_after: Option<Tid>,
    rest_done: bool,
}

crate::am::ordered_scan_callbacks!(ScanState);

impl crate::am::OrderedScan for ScanState {
    const AM: &'static str = "bm25";
    const USAGE: &'static str = "a bm25 index can only be scanned in ORDER BY doc <&> query order";

    unsafe fn start(&mut self, index: pg_sys::Relation, key: Option<&pg_sys::ScanKeyData>) {
        match key {
            Some(key) => start_query(index, self, key.sk_argument),
            // ORDER BY ... <&> NULL: nothing matches, every document follows with score 0.
            None => self.matches_done = true,
        }
    }

    unsafe fn next(&mut self, index: pg_sys::Relation) -> Option<Tid> {
        loop {
            if let Some(tid) = self.batch.pop_front() {
                if self.returned.insert(tid) {
                    return Some(tid);
                }
                continue;
            }
            if self.matches_done && self.rest_done {
                return None;
            }
            next_batch(index, self);
        }
    }
}

unsafe fn start_query(index: pg_sys::Relation, state: &mut ScanState, argument: pg_sys::Datum) {
    let query = super::operator::decode_query(argument);
    let store = BufferStore::new(index, Mode::Logged);
    let meta = checked_meta(&store, index);
    let scanned = (*index).rd_id;
    match &query.corpus {
        // Statistics carried with the query: any bm25 index that analyses and weighs documents
        // the same way scores its part of the collection with them (a Citus shard's index,
        // whose OID the node that built the query cannot know).
        Some(corpus) if !corpus.matches_options(&meta.options) => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "the bm25query's statistics were gathered with other index options than index {}'s",
                scanned.to_u32()
            ),
            Some("Indexes that share statistics must have the same k1, b, weights and stemming."),
        ),
        Some(_) => {}
        None if query.index == scanned || is_shard_of(index, query.index) => {}
        None => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "the bm25query names index {} but the scan uses index {}",
                query.index.to_u32(),
                scanned.to_u32()
            ),
            Some(
                "Build the query with skills.bm25query(query, index) for the index being scanned.",
            ),
        ),
    }
    state.terms = with_analyzer(&meta.options, |a| query_terms(a, &query.text));
    state.stats = query.corpus.as_ref().map(|c| c.query_stats(&state.terms));
    state.index_oid = query.index.to_u32();
    state.key_text = query.key_text();
    state.matches_done = state.terms.is_empty();
}

/// Whether `index` is a Citus shard's copy of index `named` (the query was built by
/// `skills.bm25query` evaluated on a worker, which names the distributed table's index; the
/// worker scans the shard's). Citus names a shard `<table>_<shard id>` and its indexes
/// `<index>_<shard id>` in the same schema; the shard id must also be one of the table's shards
/// in Citus's metadata. Such a scan scores with the shard's own statistics. (A shard index whose
/// name Citus had to shorten does not match, and the scan refuses the query as before.)
///
/// Safety: `index` is the open relation of the running scan; the catalog lookups take OIDs and
/// return NULL or InvalidOid for relations that do not exist.
unsafe fn is_shard_of(index: pg_sys::Relation, named: pg_sys::Oid) -> bool {
    let name_of = |oid: pg_sys::Oid| -> Option<(String, pg_sys::Oid)> {
        let rel_name = pg_sys::get_rel_name(oid);
        if rel_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(rel_name)
            .to_string_lossy()
            .into_owned();
        Some((name, pg_sys::get_rel_namespace(oid)))
    };
    let (Some((named_name, named_ns)), Some((own_name, own_ns))) =
        (name_of(named), name_of((*index).rd_id))
    else {
        return false;
    };
    let Some(shard) = own_name.strip_prefix(&format!("{named_name}_")) else {
        return false;
    };
    if named_ns != own_ns || shard.is_empty() || !shard.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let named_table = pg_sys::IndexGetRelation(named, true);
    if named_table == pg_sys::InvalidOid {
        return false;
    }
    let Ok(shard_id) = shard.parse::<i64>() else {
        return false;
    };
    let citus = crate::spi::select_one::<bool>(
        "SELECT to_regclass('pg_catalog.pg_dist_shard') IS NOT NULL",
        &[],
    )
    .unwrap_or(false);
    citus
        && crate::spi::select_one::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_shard \
                            WHERE logicalrelid = $1 AND shardid = $2)",
            &[named_table.into(), shard_id.into()],
        )
        .unwrap_or(false)
}

/// How many rows the next batch computes after batches that asked for `asked`: first
/// `pg_skills.bm25_scan_batch`, then 4× as many each time.
fn batch_size(asked: usize) -> usize {
    if asked == 0 {
        crate::guc::BM25_SCAN_BATCH.get().max(1) as usize
    } else {
        asked.saturating_mul(4)
    }
}

unsafe fn next_batch(index: pg_sys::Relation, state: &mut ScanState) {
    let store = BufferStore::new(index, Mode::Logged);
    if !state.matches_done {
        let want = batch_size(state.asked);
        let hits = top_hits(index, &store, &state.terms, state.stats.as_ref(), want);
        super::operator::remember_scores(
            pg_sys::Oid::from(state.index_oid),
            &state.key_text,
            &hits,
        );
        state.matches_done = hits.len() < want;
        state.asked = want;
        for hit in hits {
            if !state.returned.contains(&hit.tid) {
                state.batch.push_back(hit.tid);
            }
        }
    }
    if state.batch.is_empty() && state.matches_done && !state.rest_done {
        let want = batch_size(state.rest_asked);
        let (docs, more) = with_doc_tables(index, &store, |cache| {
            documents_after(&store, cache, state.rest_after, want)
        });
        state.rest_asked = want;
        state.rest_after = docs.last().map(|(tid, _)| *tid).or(state.rest_after);
        state.rest_done = !more;
        // Every document with a query term was among the matches, so the rest scores 0: the
        // operator's evaluation of each returned row looks that up instead of analysing it.
        let zeros: Vec<SearchHit> = docs
            .iter()
            .filter(|(tid, _)| !state.returned.contains(tid))
            .map(|&(tid, fingerprint)| SearchHit {
                tid,
                score: 0.0,
                fingerprint,
            })
            .collect();
        super::operator::remember_scores(
            pg_sys::Oid::from(state.index_oid),
            &state.key_text,
            &zeros,
        );
        state.batch.extend(zeros.iter().map(|h| h.tid));
    }
}
