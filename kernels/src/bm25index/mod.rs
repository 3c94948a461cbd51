//! The BM25 index, written against the page trait ([`crate::page`]) and nothing else.
//!
//! Storage (every byte in index pages; see `format.rs` for the layouts):
//! - block 0, the metapage: magic, format version, options, the list of segments, the append area;
//! - segments (`segment.rs`): immutable; a document table (heap TID, stored length, tombstone),
//!   posting lists of bit-packed 128-document blocks with per-block score bounds (`codec.rs`), and
//!   a B-tree term dictionary with document frequencies (`dictionary.rs`);
//! - the append area (`append.rs`): recent inserts, one record per document, searched whole;
//!   merged into a segment past a size limit and by VACUUM (`maintenance.rs`).
//!
//! Queries (`search.rs`) read corpus statistics (documents, total length, document frequencies)
//! from the segments and the append area, then run block-max MaxScore over every segment.
//! Scores are computed by one formula (`document.rs`) shared with the sequential-scan operator.

pub mod append;
pub mod codec;
pub mod corpus;
pub mod dictionary;
pub mod document;
pub mod format;
pub mod maintenance;
pub mod search;
pub mod segment;
pub mod skips;
pub mod term_memo;

pub use corpus::Corpus;
pub use document::{analyze, query_terms, AnalyzedDoc, QueryStats, Scorer};
pub use format::{IndexOptions, Meta, MetaError, Tid, FORMAT_VERSION};
pub use maintenance::{Exclusion, NoReaders};
#[cfg(test)]
pub use search::all_documents;
pub use search::{documents_after, try_prepare, DocTableCache, SearchHit};
pub use term_memo::TermScoreMemo;

pub use crate::page::Corrupt;
use crate::page::PageRead;
use crate::text::Analyzer;

/// The `k` best documents for `query`, best first (score descending, TID ascending).
pub fn search<S: PageRead>(
    store: &S,
    analyzer: &mut Analyzer,
    query: &str,
    k: usize,
) -> Result<Vec<SearchHit>, Corrupt> {
    let terms = query_terms(analyzer, query);
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    try_prepare(store, &terms)?.top_k(k)
}

#[cfg(test)]
mod corruption_tests;
#[cfg(test)]
mod tests;
