//! Scores of several queries over some documents, assembled from their terms' contributions.
//!
//! A document's BM25 score is the sum, in query order, of each query term's contribution
//! ([`super::document::sum_of_terms`]), and a term's contribution depends on the term, the
//! document and the corpus statistics alone, not on the other terms of the query. So one search
//! that scores a request and its parts (whose terms are the request's) over overlapping
//! candidates needs each (term, document) pair read from the postings once: the memo says which
//! pairs a query still lacks, takes what a scoring of them found, and gives every query's scores
//! bit for bit as scoring that query alone would.

use std::collections::HashMap;
use std::hash::Hash;

use super::document::sum_of_terms;

/// What one term contributes: its share of the supremum and, for each document scored for it,
/// its contribution (None: the document does not hold it).
struct TermEntry<K> {
    supremum: Option<f64>,
    of: HashMap<K, Option<f64>>,
}

/// The contributions recorded so far, by term and document key `K` (a skill id, a TID). Valid
/// while the statistics are: one snapshot of one index.
pub struct TermScoreMemo<K> {
    terms: HashMap<String, TermEntry<K>>,
}

impl<K> Default for TermScoreMemo<K> {
    fn default() -> Self {
        TermScoreMemo {
            terms: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Copy> TermScoreMemo<K> {
    /// The documents of `docs` that lack a contribution of some term of `terms`, and the terms
    /// any of them lacks (in `terms` order): scoring those terms over those documents
    /// ([`Self::record`]) completes every pair.
    pub fn missing(&self, terms: &[String], docs: &[K]) -> (Vec<String>, Vec<K>) {
        let lacks = |term: &String, doc: &K| {
            self.terms
                .get(term)
                .is_none_or(|entry| !entry.of.contains_key(doc))
        };
        let mut need_docs: Vec<K> = Vec::new();
        for doc in docs {
            if !need_docs.contains(doc) && terms.iter().any(|t| lacks(t, doc)) {
                need_docs.push(*doc);
            }
        }
        let need_terms: Vec<String> = terms
            .iter()
            .filter(|t| need_docs.iter().any(|d| lacks(t, d)))
            .cloned()
            .collect();
        (need_terms, need_docs)
    }

    /// Records a scoring of `terms` over `docs`: `suprema` holds each term's share of the
    /// supremum ([`super::Scorer::term_supremum`]), `scored` each document of `docs` that
    /// holds a term, with the terms' contributions in `terms` order; a document of `docs` not
    /// in `scored` holds none of them.
    pub fn record(
        &mut self,
        terms: &[String],
        suprema: &[Option<f64>],
        docs: &[K],
        scored: &[(K, Vec<Option<f64>>)],
    ) {
        let found: HashMap<K, &Vec<Option<f64>>> = scored.iter().map(|(d, t)| (*d, t)).collect();
        for (i, term) in terms.iter().enumerate() {
            let entry = self.terms.entry(term.clone()).or_insert_with(|| TermEntry {
                supremum: suprema[i],
                of: HashMap::new(),
            });
            for doc in docs {
                entry.of.insert(
                    *doc,
                    found.get(doc).and_then(|contributions| contributions[i]),
                );
            }
        }
    }

    /// The score of the query of `terms` (distinct, in query order) for `doc`, once every
    /// pair is recorded: None when no term contributes (or a pair was never recorded).
    pub fn score(&self, terms: &[String], doc: &K) -> Option<f64> {
        let contributions: Vec<Option<f64>> = terms
            .iter()
            .map(|t| {
                self.terms
                    .get(t)
                    .and_then(|e| e.of.get(doc).copied().flatten())
            })
            .collect();
        sum_of_terms(&contributions)
    }

    /// The supremum of the query of `terms` ([`super::Scorer::supremum`]), from the recorded
    /// terms' shares.
    pub fn supremum(&self, terms: &[String]) -> f64 {
        terms
            .iter()
            .filter_map(|t| self.terms.get(t).and_then(|e| e.supremum))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn missing_names_only_the_pairs_not_recorded() {
        let mut memo = TermScoreMemo::<i64>::default();
        let (t, d) = memo.missing(&terms(&["a", "b"]), &[1, 2, 2]);
        assert_eq!((t, d), (terms(&["a", "b"]), vec![1, 2]));
        memo.record(
            &terms(&["a", "b"]),
            &[Some(3.0), None],
            &[1, 2],
            &[(1, vec![Some(1.5), None])],
        );
        assert_eq!(memo.missing(&terms(&["b", "a"]), &[2, 1]), (vec![], vec![]));
        // Document 3 lacks both; "c" is new for every document.
        assert_eq!(
            memo.missing(&terms(&["a", "c"]), &[1, 3]),
            (terms(&["a", "c"]), vec![1, 3])
        );
        assert_eq!(
            memo.missing(&terms(&["a"]), &[1, 3]),
            (terms(&["a"]), vec![3])
        );
        assert_eq!(memo.score(&terms(&["a", "b"]), &1), Some(1.5));
        assert_eq!(memo.score(&terms(&["a", "b"]), &2), None);
        assert_eq!(memo.supremum(&terms(&["b", "a"])), 3.0);
    }
}
