//! `doc <&> query`: the negative BM25 score of one document, as a sequential scan computes it.
//!
//! Corpus statistics come from the index the query names, read once per statement (and again
//! after each command of the statement that changed data), so an index scan and a sequential scan
//! in the same statement score with the same statistics and the same formula, bit for bit.

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::bm25index::{query_terms, try_prepare, IndexOptions, Scorer};

use super::{checked_meta, document_fields, with_analyzer};
use crate::errors::raise;
use crate::storage::{BufferStore, Mode, OrRaise};

/// (index oid, query text, statement start, command id): what cached query state is valid for.
type StatementKey = (u32, String, i64, u32);

struct Prepared {
    key: StatementKey,
    options: IndexOptions,
    terms: Vec<String>,
    scorer: Scorer,
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

fn prepare_query(key: StatementKey) -> Prepared {
    unsafe {
        let rel = super::open_bm25_index(pg_sys::Oid::from(key.0));
        let store = BufferStore::new(rel, Mode::Logged);
        let meta = checked_meta(&store, rel);
        let terms = with_analyzer(&meta.options, |a| query_terms(a, &key.1));
        let scorer = super::reading(rel, &store, || {
            try_prepare(&store, &terms).or_raise(rel).scorer.clone()
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

/// The (index, query) pair of a `skills.bm25query` datum.
pub unsafe fn decode_query(datum: pg_sys::Datum) -> (pg_sys::Oid, String) {
    let tuple = pgrx::heap_tuple::PgHeapTuple::from_composite_datum(datum);
    let one = std::num::NonZeroUsize::new(1).unwrap();
    let two = std::num::NonZeroUsize::new(2).unwrap();
    let index = tuple.get_by_index::<pg_sys::Oid>(one).ok().flatten();
    let query = tuple.get_by_index::<String>(two).ok().flatten();
    match index {
        Some(index) => (index, query.unwrap_or_default()),
        None => raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "bm25query has no index",
            Some("Build queries with skills.bm25query(query, index)."),
        ),
    }
}

/// Negative BM25 score of `doc` (ARRAY[name, description, instructions]) for `query`; 0 when
/// the document contains no query term. Ascending order is best first.
#[pg_extern(stable, parallel_safe)]
fn bm25_distance(doc: pgrx::Array<'_, &str>, query: pgrx::composite_type!("bm25query")) -> f64 {
    let datum = query.into_datum().expect("a composite is a datum");
    let (index_oid, text) = unsafe { decode_query(datum) };
    let key = statement_key(index_oid, text);
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
        return -score;
    }
    PREPARED.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|p| p.key != key) {
            *slot = Some(prepare_query(key));
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
        match p.scorer.score(&counts, length) {
            Some(score) => -score,
            None => 0.0,
        }
    })
}
