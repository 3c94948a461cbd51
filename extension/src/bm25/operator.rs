//! `doc <&> query`: the negative BM25 score of one document, as a sequential scan computes it.
//!
//! Corpus statistics come from the index the query names, read once per statement (and again
//! after each command of the statement that changed data), so an index scan and a sequential scan
//! in the same statement score with the same statistics and the same formula, bit for bit. A query
//! that carries statistics (`skills.bm25_global_query`: a whole distributed collection's) scores
//! with those and its own options, and needs no index.

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::bm25index::{query_terms, try_prepare, Corpus, IndexOptions, Scorer};

use super::{checked_meta, document_fields, with_analyzer};
use crate::errors::raise;
use crate::storage::{BufferStore, Mode, OrRaise};

/// (index oid, query text and carried statistics, statement start, command id): what cached
/// query state is valid for.
type StatementKey = (u32, String, i64, u32);

/// A decoded `skills.bm25query`.
pub struct Bm25Query {
    pub index: pg_sys::Oid,
    pub text: String,
    /// Statistics carried with the query (NULL: the named index's own).
    pub corpus: Option<Corpus>,
}

impl Bm25Query {
    /// The text part of the cache keys: the query, and the statistics it carries.
    pub fn key_text(&self) -> String {
        match &self.corpus {
            None => self.text.clone(),
            Some(c) => format!("{}\u{0}{}", self.text, c.to_json()),
        }
    }
}

struct Prepared {
    key: StatementKey,
    options: IndexOptions,
    terms: Vec<String>,
    /// None: the named index is a distributed table's, whose statistics do not score a
    /// shard's rows (see [`refuse_shard_scoring`]); documents without a query term still
    /// score 0.
    scorer: Option<Scorer>,
}

thread_local! {
    static PREPARED: RefCell<Option<Prepared>> = const { RefCell::new(None) };
    static SCORE_HINTS: RefCell<Option<ScoreHints>> = const { RefCell::new(None) };
}

/// Scores an index scan just computed, by document fingerprint. The executor evaluates the
/// ORDER BY expression (`doc <&> query`) for every row an ordered index scan returns; with these
/// hints that evaluation is a hash of the document instead of a new analysis of it. Valid only
/// for the statement and command that computed them.
struct ScoreHints {
    key: StatementKey,
    scores: std::collections::HashMap<u64, f64>,
}

fn statement_key(index_oid: pg_sys::Oid, query: String) -> StatementKey {
    unsafe {
        (
            index_oid.to_u32(),
            query,
            pg_sys::GetCurrentStatementStartTimestamp(),
            pg_sys::GetCurrentCommandId(false),
        )
    }
}

/// Called by the scan with every batch it returns.
pub fn remember_scores(
    index_oid: pg_sys::Oid,
    query: &str,
    hits: &[pg_skills_kernels::bm25index::SearchHit],
) {
    let key = statement_key(index_oid, query.to_owned());
    SCORE_HINTS.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|h| h.key != key) {
            *slot = Some(ScoreHints {
                key,
                scores: Default::default(),
            });
        }
        let hints = slot.as_mut().expect("just set");
        hints
            .scores
            .extend(hits.iter().map(|h| (h.fingerprint, h.score)));
    });
}

fn prepare_query(key: StatementKey, query: &Bm25Query) -> Prepared {
    if let Some(corpus) = &query.corpus {
        let options = corpus.options();
        let terms = with_analyzer(&options, |a| query_terms(a, &query.text));
        let scorer = Scorer::new(
            options.k1,
            options.b,
            options.weights_array(),
            &corpus.query_stats(&terms),
        );
        return Prepared {
            key,
            options,
            terms,
            scorer: Some(scorer),
        };
    }
    let distributed = names_distributed_index(query.index);
    unsafe {
        let rel = super::open_bm25_index(query.index);
        let store = BufferStore::new(rel, Mode::Logged);
        let meta = checked_meta(&store, rel);
        let terms = with_analyzer(&meta.options, |a| query_terms(a, &query.text));
        let scorer = (!distributed).then(|| {
            super::reading(rel, &store, || {
                try_prepare(&store, &terms).or_raise(rel).scorer.clone()
            })
        });
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        Prepared {
            key,
            options: meta.options,
            terms,
            scorer,
        }
    }
}

/// A query without statistics names the index whose statistics score it. When that index is on
/// a table Citus distributes, a sequential scan of one of its shards (on a worker) cannot score
/// with it: the named index is the distributed table's, which holds no rows there, and which
/// shard a row comes from is not known here. An index scan of the shard binds to the shard's
/// index instead (scan.rs) and leaves the scores of what it returns as hints; a query built by
/// skills.bm25_global_query carries the statistics.
fn names_distributed_index(index: pg_sys::Oid) -> bool {
    crate::spi::select_one::<bool>(
        "SELECT skills.is_distributed(i.indrelid) FROM pg_catalog.pg_index AS i WHERE i.indexrelid = $1",
        &[index.into()],
    )
    .unwrap_or(false)
}

/// The error for a document with a query term that only a shard's index scan could score.
fn refuse_shard_scoring(index: pg_sys::Oid) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!(
            "a bm25query naming index {} of a distributed table cannot be scored outside its shards' index scans",
            index.to_u32()
        ),
        Some("Build the query with skills.bm25_global_query(query), which carries the whole table's statistics, or ORDER BY the <&> operator alone (LIMIT k) so that each shard's bm25 index scans it."),
    )
}

/// The parts of a `skills.bm25query` datum.
pub unsafe fn decode_query(datum: pg_sys::Datum) -> Bm25Query {
    let tuple = pgrx::heap_tuple::PgHeapTuple::from_composite_datum(datum);
    let at = |i: usize| std::num::NonZeroUsize::new(i).unwrap();
    let index = tuple.get_by_index::<pg_sys::Oid>(at(1)).ok().flatten();
    let text = tuple
        .get_by_index::<String>(at(2))
        .ok()
        .flatten()
        .unwrap_or_default();
    let corpus = tuple
        .get_by_index::<pgrx::JsonB>(at(3))
        .ok()
        .flatten()
        .map(|j| {
            Corpus::from_json(&j.0.to_string()).unwrap_or_else(|e| {
                raise(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("the bm25query's statistics are not valid: {e}"),
                    Some("Build them with skills.bm25_global_query(query) or skills.bm25_corpus(index, query)."),
                )
            })
        });
    match index {
        Some(index) => Bm25Query {
            index,
            text,
            corpus,
        },
        None => raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "bm25query has no index",
            Some("Build queries with skills.bm25query(query, index)."),
        ),
    }
}

/// This index's statistics for `query`'s terms, with its scoring options: one part of a
/// distributed collection's statistics (skills.bm25_corpus_sum adds the parts).
#[pg_extern(stable, parallel_safe)]
fn bm25_corpus(index: pg_sys::Oid, query: &str) -> pgrx::JsonB {
    unsafe {
        let rel = super::open_bm25_index(index);
        let store = BufferStore::new(rel, Mode::Logged);
        let meta = checked_meta(&store, rel);
        let terms = with_analyzer(&meta.options, |a| query_terms(a, query));
        let stats = super::reading(rel, &store, || {
            try_prepare(&store, &terms).or_raise(rel).stats.clone()
        });
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let corpus = Corpus::of_index(&meta.options, &terms, &stats);
        pgrx::JsonB(serde_json::from_str(&corpus.to_json()).expect("valid JSON"))
    }
}

/// The statistics of disjoint parts of one collection (each from skills.bm25_corpus), summed.
#[pg_extern(immutable, parallel_safe)]
fn bm25_corpus_sum(parts: Vec<Option<pgrx::JsonB>>) -> pgrx::JsonB {
    let parsed: Result<Vec<Corpus>, String> = parts
        .iter()
        .map(|p| match p {
            Some(p) => Corpus::from_json(&p.0.to_string()),
            None => Err("a part is NULL".to_string()),
        })
        .collect();
    match parsed.and_then(|p| Corpus::sum(&p)) {
        Ok(total) => pgrx::JsonB(serde_json::from_str(&total.to_json()).expect("valid JSON")),
        Err(e) => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("cannot sum these bm25 statistics: {e}"),
            Some("Every part must come from skills.bm25_corpus on indexes built with the same options, for the same query."),
        ),
    }
}

/// The most any document could score for `query`, with the statistics it is scored with (its
/// index's, or those it carries): Σ idf · (k1 + 1) over its terms found in the corpus, each
/// term's limit as its frequency grows; 0 when none is. A score over it lies in [0, 1) and
/// means the same whichever documents are scored (the BM25 part of a KeyOpt base relevance).
#[pg_extern(stable, parallel_safe)]
fn bm25_score_supremum(query: pgrx::composite_type!("bm25query")) -> f64 {
    let datum = query.into_datum().expect("a composite is a datum");
    let q = unsafe { decode_query(datum) };
    let prepared = prepare_query(statement_key(q.index, q.key_text()), &q);
    match &prepared.scorer {
        Some(scorer) => scorer.supremum(),
        None => refuse_shard_scoring(q.index),
    }
}

/// Negative BM25 score of `doc` (ARRAY[name, description, instructions]) for `query`; 0 when
/// the document contains no query term. Ascending order is best first.
#[pg_extern(stable, parallel_safe)]
fn bm25_distance(doc: pgrx::Array<'_, &str>, query: pgrx::composite_type!("bm25query")) -> f64 {
    let datum = query.into_datum().expect("a composite is a datum");
    let q = unsafe { decode_query(datum) };
    let key = statement_key(q.index, q.key_text());
    let fields = document_fields(doc);
    let hinted = SCORE_HINTS.with(|cell| {
        let slot = cell.borrow();
        let hints = slot.as_ref().filter(|h| h.key == key)?;
        let fp = pg_skills_kernels::bm25index::document::fingerprint([
            &fields[0], &fields[1], &fields[2],
        ]);
        hints.scores.get(&fp).copied()
    });
    if let Some(score) = hinted {
        return if score == 0.0 { 0.0 } else { -score };
    }
    PREPARED.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|p| p.key != key) {
            *slot = Some(prepare_query(key, &q));
        }
        let p = slot.as_ref().expect("just prepared");
        let analyzed = with_analyzer(&p.options, |a| {
            pg_skills_kernels::bm25index::analyze(
                a,
                [&fields[0], &fields[1], &fields[2]],
                p.options.weights_array(),
            )
        });
        let counts: Vec<_> = p
            .terms
            .iter()
            .map(|t| {
                analyzed
                    .terms
                    .binary_search_by(|(x, _)| x.as_str().cmp(t))
                    .ok()
                    .map(|i| analyzed.terms[i].1)
            })
            .collect();
        let length = pg_skills_kernels::bm25index::document::stored_length(
            &p.options.weights_array(),
            &analyzed.lengths,
        );
        if counts.iter().all(Option::is_none) {
            return 0.0;
        }
        let Some(scorer) = &p.scorer else {
            refuse_shard_scoring(q.index)
        };
        match scorer.score(&counts, length) {
            Some(score) => -score,
            None => 0.0,
        }
    })
}
