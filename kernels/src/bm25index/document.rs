//! A skill as the index sees it: per-field term counts and lengths, and the one scoring formula
//! both the index and the sequential-scan operator use (so they agree to the last bit).

use std::collections::{HashMap, HashSet};

use crate::bm25::term_score;
use crate::text::Analyzer;

/// Occurrences in name, description, instructions.
pub type FieldCounts = [u32; 3];

/// One analyzed document.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnalyzedDoc {
    /// [`fingerprint`] of the raw fields.
    pub fingerprint: u64,
    pub lengths: FieldCounts,
    /// Distinct terms in byte order, with their per-field counts.
    pub terms: Vec<(String, FieldCounts)>,
}

/// Analyzes the three fields; a field with weight 0 is skipped entirely (as the reference does).
pub fn analyze(analyzer: &mut Analyzer, fields: [&str; 3], weights: [f64; 3]) -> AnalyzedDoc {
    let mut lengths = [0u32; 3];
    let mut terms: HashMap<String, FieldCounts, rustc_hash::FxBuildHasher> = HashMap::default();
    for (f, text) in fields.iter().enumerate() {
        if weights[f] == 0.0 {
            continue;
        }
        analyzer.for_each_token(text, |t| {
            lengths[f] += 1;
            match terms.get_mut(t) {
                Some(c) => c[f] += 1,
                None => {
                    let mut c = [0; 3];
                    c[f] = 1;
                    terms.insert(t.to_owned(), c);
                }
            }
        });
    }
    // Terms in byte order, as segments and the append area store them.
    let mut terms: Vec<(String, FieldCounts)> = terms.into_iter().collect();
    terms.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    AnalyzedDoc {
        fingerprint: fingerprint(fields),
        lengths,
        terms,
    }
}

/// A 64-bit hash of a document's raw fields (xxh3). Index scans hand each result's score to the
/// `<&>` operator under this key, so the executor's per-row evaluation of the ORDER BY expression
/// does not analyse the document again.
pub fn fingerprint(fields: [&str; 3]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for f in fields {
        h.update(f.as_bytes());
        h.update(&[0xff]); // never part of UTF-8: fields cannot run into each other
    }
    h.digest()
}

/// The distinct terms of a query, in first-occurrence order (a repeated term counts once).
pub fn query_terms(analyzer: &mut Analyzer, query: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    analyzer
        .tokens(query)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// Weighted term frequency: Σ_f w_f · tf_f.
pub fn weighted_tf(weights: &[f64; 3], counts: &FieldCounts) -> f64 {
    weights[0] * counts[0] as f64 + weights[1] * counts[1] as f64 + weights[2] * counts[2] as f64
}

/// Document length as stored (f32), so the index and the operator see the same value.
pub fn stored_length(weights: &[f64; 3], lengths: &FieldCounts) -> f32 {
    weighted_tf(weights, lengths) as f32
}

/// Corpus statistics a score depends on, for one query.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryStats {
    pub num_docs: u64,
    pub total_length: f64,
    /// Per query term, in query order.
    pub doc_freq: Vec<u64>,
}

/// The query-side constants of the formula.
#[derive(Clone, Debug)]
pub struct Scorer {
    pub k1: f64,
    pub b: f64,
    pub weights: [f64; 3],
    pub avg_length: f64,
    /// idf per query term; terms no document contains have `None` and add nothing.
    pub idf: Vec<Option<f64>>,
}

impl Scorer {
    pub fn new(k1: f64, b: f64, weights: [f64; 3], stats: &QueryStats) -> Scorer {
        let avg_length = if stats.num_docs == 0 {
            0.0
        } else {
            stats.total_length / stats.num_docs as f64
        };
        let idf = stats
            .doc_freq
            .iter()
            .map(|&df| (df > 0).then(|| crate::bm25::idf(stats.num_docs, df)))
            .collect();
        Scorer {
            k1,
            b,
            weights,
            avg_length,
            idf,
        }
    }

    /// One term's contribution for a document of stored length `length`.
    #[inline]
    pub fn term(&self, term_index: usize, counts: &FieldCounts, length: f32) -> f64 {
        match self.idf[term_index] {
            Some(idf) => term_score(
                idf,
                weighted_tf(&self.weights, counts),
                length as f64,
                self.avg_length,
                self.k1,
                self.b,
            ),
            None => 0.0,
        }
    }

    /// An upper bound of one term's contribution for any document with weighted tf ≤ `max_tf`
    /// and length ≥ `min_length` (the formula grows with tf and shrinks with length). The slack
    /// absorbs rounding so the bound never falls below a real score.
    pub fn bound(&self, term_index: usize, max_tf: f32, min_length: f32) -> f64 {
        match self.idf[term_index] {
            Some(idf) => {
                term_score(
                    idf,
                    max_tf as f64,
                    min_length as f64,
                    self.avg_length,
                    self.k1,
                    self.b,
                ) * (1.0 + 1e-9)
                    + 1e-12
            }
            None => 0.0,
        }
    }

    /// An upper bound of one term's contribution for the documents of a posting block: the
    /// lower of [`Scorer::bound`] of its `max_tf` and `min_length` and one from its
    /// `max_saturated`, the block's best score at idf 1 with the segment's average length
    /// `written_avg` when it was written. At another average A, a document's score is at most
    /// max(1, A / written_avg) times its score at `written_avg` (only the length's share of the
    /// denominator changes, by the factor written_avg / A), so the bound holds while documents
    /// come and go.
    pub fn block_bound(
        &self,
        term_index: usize,
        max_tf: f32,
        min_length: f32,
        max_saturated: f32,
        written_avg: f64,
    ) -> f64 {
        let corner = self.bound(term_index, max_tf, min_length);
        match self.saturated_bound(term_index, max_saturated, written_avg) {
            Some(saturated) => corner.min(saturated),
            None => corner,
        }
    }

    /// The part of [`Scorer::block_bound`] that comes from `max_saturated` alone (None where
    /// either average length is 0): it grows with `max_saturated`, so blocks ordered by
    /// `max_saturated` are ordered by it.
    #[inline]
    pub fn saturated_bound(
        &self,
        term_index: usize,
        max_saturated: f32,
        written_avg: f64,
    ) -> Option<f64> {
        let idf = self.idf[term_index]?;
        if !(written_avg > 0.0 && self.avg_length > 0.0) {
            return None;
        }
        let scale = (self.avg_length / written_avg).max(1.0);
        Some(idf * max_saturated as f64 * scale * (1.0 + 1e-9) + 1e-12)
    }

    /// The supremum of a document's score for this query: every query term found in the corpus
    /// at a term frequency that tends to infinity, each then worth idf · (k1 + 1) whatever the
    /// document's length. It depends on the query and the corpus statistics alone, so scores
    /// divided by it mean the same whichever documents are scored.
    pub fn supremum(&self) -> f64 {
        self.idf
            .iter()
            .flatten()
            .map(|idf| idf * (self.k1 + 1.0))
            .sum()
    }

    /// One term's share of [`Scorer::supremum`]: idf · (k1 + 1), None for a term no document
    /// contains.
    pub fn term_supremum(&self, term_index: usize) -> Option<f64> {
        self.idf[term_index].map(|idf| idf * (self.k1 + 1.0))
    }

    /// Score of a document given the counts of each query term in it (None: absent), or None
    /// when it contains no query term that occurs in the corpus.
    pub fn score(&self, counts: &[Option<FieldCounts>], length: f32) -> Option<f64> {
        sum_of_terms(&self.term_scores(counts, length))
    }

    /// Each query term's contribution to the score of a document with `counts` (None: the
    /// term is absent from it or from the corpus, and adds nothing).
    pub fn term_scores(&self, counts: &[Option<FieldCounts>], length: f32) -> Vec<Option<f64>> {
        counts
            .iter()
            .enumerate()
            .map(|(i, c)| match (c, self.idf[i]) {
                (Some(c), Some(_)) if weighted_tf(&self.weights, c) > 0.0 => {
                    Some(self.term(i, c, length))
                }
                _ => None,
            })
            .collect()
    }
}

/// A document's score from its query terms' contributions ([`Scorer::term_scores`]), summed
/// in query order, or None when no term contributes.
pub fn sum_of_terms(terms: &[Option<f64>]) -> Option<f64> {
    let mut score = 0.0;
    let mut matched = false;
    for t in terms.iter().flatten() {
        matched = true;
        score += t;
    }
    matched.then_some(score)
}

/// Rounds a weighted tf up to f32 so a stored maximum never falls below the true value.
pub fn f32_at_least(v: f64) -> f32 {
    let f = v as f32;
    if (f as f64) < v {
        f.next_up()
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::AnalyzerConfig;

    #[test]
    fn counts_per_field_and_skips_zero_weight_fields() {
        let mut a = Analyzer::new(AnalyzerConfig { stemming: false });
        let d = analyze(
            &mut a,
            ["Rust tests", "run the tests", "cargo"],
            [1.0, 1.0, 0.0],
        );
        assert_eq!(d.lengths, [2, 2, 0]);
        assert_eq!(
            d.terms,
            vec![
                ("run".into(), [0, 1, 0]),
                ("rust".into(), [1, 0, 0]),
                ("tests".into(), [1, 1, 0])
            ]
        );
    }

    #[test]
    fn bound_is_never_below_a_score_it_covers() {
        let stats = QueryStats {
            num_docs: 100,
            total_length: 1234.0,
            doc_freq: vec![7],
        };
        let s = Scorer::new(1.5, 0.75, [2.0, 1.0, 0.5], &stats);
        for tf in 1..20u32 {
            for len in [1.0f32, 3.5, 12.0, 400.0] {
                let c = [tf, tf / 2, tf / 3];
                let score = s.term(0, &c, len);
                assert!(s.bound(0, f32_at_least(weighted_tf(&s.weights, &c)), len) >= score);
            }
        }
    }

    #[test]
    fn block_bound_holds_at_any_average_length() {
        // A block written at one average length, searched at others (documents added or
        // removed since): its bound must cover every document's score, and be tighter than the
        // max_tf / min_length corner where those come from two documents.
        let (k1, b, weights) = (1.2, 0.75, [2.0, 1.0, 0.5]);
        let block: Vec<(FieldCounts, f32)> =
            vec![([9, 0, 30], 900.0), ([1, 0, 0], 4.0), ([0, 3, 2], 40.0)];
        for written_avg in [5.0, 50.0, 500.0] {
            let max_saturated = block
                .iter()
                .map(|(c, len)| {
                    crate::bm25::term_score(
                        1.0,
                        weighted_tf(&weights, c),
                        *len as f64,
                        written_avg,
                        k1,
                        b,
                    )
                })
                .fold(0.0, f64::max);
            let max_tf = block
                .iter()
                .map(|(c, _)| weighted_tf(&weights, c))
                .fold(0.0, f64::max);
            let min_length = block.iter().map(|(_, l)| *l).fold(f32::INFINITY, f32::min);
            for total_length in [10.0, 480.0, 5_000.0, 48_000.0, 400_000.0] {
                let stats = QueryStats {
                    num_docs: 100,
                    total_length,
                    doc_freq: vec![7],
                };
                let s = Scorer::new(k1, b, weights, &stats);
                let bound = s.block_bound(
                    0,
                    f32_at_least(max_tf),
                    min_length,
                    f32_at_least(max_saturated),
                    written_avg,
                );
                for (c, len) in &block {
                    assert!(
                        bound >= s.term(0, c, *len),
                        "avg {written_avg} -> {}",
                        s.avg_length
                    );
                }
                assert!(bound <= s.bound(0, f32_at_least(max_tf), min_length));
            }
            // At the average it was written with, the bound is the best score itself.
            let s = Scorer::new(
                k1,
                b,
                weights,
                &QueryStats {
                    num_docs: 100,
                    total_length: written_avg * 100.0,
                    doc_freq: vec![7],
                },
            );
            let best = block
                .iter()
                .map(|(c, l)| s.term(0, c, *l))
                .fold(0.0, f64::max);
            let bound = s.block_bound(
                0,
                f32_at_least(max_tf),
                min_length,
                f32_at_least(max_saturated),
                written_avg,
            );
            assert!(
                bound >= best && bound <= best * (1.0 + 1e-6) + 1e-9,
                "{bound} {best}"
            );
            assert!(bound < s.bound(0, f32_at_least(max_tf), min_length));
        }
    }
}
