//! The reference BM25 scorer.
//!
//! Formula (bm25s / Lucene defaults):
//!
//! ```text
//! idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
//! score(q, d) = Σ_{t ∈ q} idf(t) · tf(t,d)·(k1 + 1) / (tf(t,d) + k1·(1 - b + b·|d| / avgdl))
//! ```
//!
//! Skills have three fields. Field weights scale term frequencies and lengths before the formula
//! (the simple BM25F form): `tf(t,d) = Σ_f w_f·tf_f(t,d)`, `|d| = Σ_f w_f·|d_f|`. With all weights 1
//! this is plain BM25 over the concatenated text. A term repeated in the query counts once.
//! Documents that contain no query term are not results (their score would be 0). Results are
//! ordered by score descending, then id ascending, so rankings are deterministic.
//!
//! This scorer does everything by brute force on purpose: it is the oracle an index must match.

use std::collections::{HashMap, HashSet};

use crate::text::{Analyzer, AnalyzerConfig};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldWeights {
    pub name: f64,
    pub description: f64,
    pub instructions: f64,
}

impl Default for FieldWeights {
    fn default() -> Self {
        FieldWeights {
            name: 1.0,
            description: 1.0,
            instructions: 1.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25Params {
    pub k1: f64,
    pub b: f64,
    pub weights: FieldWeights,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params {
            k1: 1.5,
            b: 0.75,
            weights: FieldWeights::default(),
        }
    }
}

impl Bm25Params {
    /// Rejects parameters for which the formula is meaningless.
    pub fn validate(&self) -> Result<(), String> {
        let w = self.weights;
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(format!("k1 must be a finite number >= 0, got {}", self.k1));
        }
        if !(0.0..=1.0).contains(&self.b) {
            return Err(format!("b must be between 0 and 1, got {}", self.b));
        }
        for (field, v) in [
            ("name", w.name),
            ("description", w.description),
            ("instructions", w.instructions),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!(
                    "weight of {field} must be a finite number >= 0, got {v}"
                ));
            }
        }
        if w.name + w.description + w.instructions <= 0.0 {
            return Err("at least one field weight must be positive".into());
        }
        Ok(())
    }
}

/// One document's weighted bag of terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DocTerms {
    pub length: f64,
    pub tf: HashMap<String, f64>,
}

/// Analyzes the three fields of a skill into one weighted bag of terms.
pub fn analyze_fields(
    analyzer: &mut Analyzer,
    fields: [&str; 3],
    weights: FieldWeights,
) -> DocTerms {
    let mut doc = DocTerms::default();
    for (text, w) in fields
        .iter()
        .zip([weights.name, weights.description, weights.instructions])
    {
        if w == 0.0 {
            continue;
        }
        analyzer.for_each_token(text, |t| {
            doc.length += w;
            *doc.tf.entry(t.to_owned()).or_insert(0.0) += w;
        });
    }
    doc
}

/// A scored document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub id: i64,
    pub score: f64,
}

/// Deterministic result order: score descending, then id ascending.
pub fn rank_order(a: &Hit, b: &Hit) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then(a.id.cmp(&b.id))
}

/// Brute-force BM25 over an in-memory corpus.
pub struct ReferenceScorer {
    params: Bm25Params,
    analyzer: Analyzer,
    docs: Vec<(i64, DocTerms)>,
    df: HashMap<String, u64>,
    total_length: f64,
}

impl ReferenceScorer {
    pub fn new(params: Bm25Params, analyzer: AnalyzerConfig) -> Result<Self, String> {
        params.validate()?;
        Ok(ReferenceScorer {
            params,
            analyzer: Analyzer::new(analyzer),
            docs: Vec::new(),
            df: HashMap::new(),
            total_length: 0.0,
        })
    }

    pub fn add(&mut self, id: i64, name: &str, description: &str, instructions: &str) {
        let doc = analyze_fields(
            &mut self.analyzer,
            [name, description, instructions],
            self.params.weights,
        );
        for term in doc.tf.keys() {
            *self.df.entry(term.clone()).or_insert(0) += 1;
        }
        self.total_length += doc.length;
        self.docs.push((id, doc));
    }

    pub fn num_docs(&self) -> u64 {
        self.docs.len() as u64
    }

    pub fn avg_length(&self) -> f64 {
        if self.docs.is_empty() {
            0.0
        } else {
            self.total_length / self.docs.len() as f64
        }
    }

    pub fn doc_freq(&self, term: &str) -> u64 {
        self.df.get(term).copied().unwrap_or(0)
    }

    pub fn idf(&self, term: &str) -> f64 {
        idf(self.num_docs(), self.doc_freq(term))
    }

    /// The distinct analyzed terms of a query, in first-occurrence order.
    pub fn query_terms(&mut self, query: &str) -> Vec<String> {
        let mut seen = HashSet::new();
        self.analyzer
            .tokens(query)
            .into_iter()
            .filter(|t| seen.insert(t.clone()))
            .collect()
    }

    /// The most any document could score for `query`: Σ idf · (k1 + 1) over its terms found
    /// in the corpus (the index's `Scorer::supremum`).
    pub fn supremum(&mut self, query: &str) -> f64 {
        let terms = self.query_terms(query);
        terms
            .iter()
            .filter(|t| self.doc_freq(t) > 0)
            .map(|t| self.idf(t) * (self.params.k1 + 1.0))
            .sum()
    }

    /// Every matching document, best first. `keep` filters by id after scoring, so a filter
    /// never changes scores (corpus statistics are always those of the whole corpus).
    pub fn search(
        &mut self,
        query: &str,
        k: Option<usize>,
        keep: impl Fn(i64) -> bool,
    ) -> Vec<Hit> {
        let terms = self.query_terms(query);
        let weighted: Vec<(&str, f64)> = terms
            .iter()
            .map(|t| (t.as_str(), self.idf(t)))
            .filter(|(t, _)| self.doc_freq(t) > 0)
            .collect();
        let avg = self.avg_length();
        let Bm25Params { k1, b, .. } = self.params;
        let mut hits: Vec<Hit> = self
            .docs
            .iter()
            .filter(|(id, _)| keep(*id))
            .filter_map(|(id, doc)| {
                let mut score = 0.0;
                let mut matched = false;
                for (term, idf) in &weighted {
                    if let Some(&tf) = doc.tf.get(*term) {
                        matched = true;
                        score += term_score(*idf, tf, doc.length, avg, k1, b);
                    }
                }
                matched.then_some(Hit { id: *id, score })
            })
            .collect();
        hits.sort_by(rank_order);
        if let Some(k) = k {
            hits.truncate(k);
        }
        hits
    }
}

pub fn idf(num_docs: u64, doc_freq: u64) -> f64 {
    let (n, df) = (num_docs as f64, doc_freq as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// One term's contribution. `avg_length` is > 0 whenever a document contains a term.
/// A weighted frequency of 0 (the term only in fields of weight 0) contributes 0: with k1 = 0
/// the formula would be 0/0.
pub fn term_score(idf: f64, tf: f64, length: f64, avg_length: f64, k1: f64, b: f64) -> f64 {
    if !(tf > 0.0) {
        return 0.0;
    }
    let norm = if avg_length > 0.0 {
        length / avg_length
    } else {
        0.0
    };
    idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * norm))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// k1 = 0 and a field of weight 0 are both valid options; a term found only in that field
    /// scores 0, not NaN (which broke the top-k order; the random-damage fuzz met it, seed 28).
    #[test]
    fn a_term_only_in_fields_of_weight_zero_scores_zero() {
        for (k1, b, length) in [(0.0, 0.75, 10.0), (0.0, 1.0, 0.0), (1.2, 1.0, 0.0)] {
            assert_eq!(term_score(2.0, 0.0, length, 10.0, k1, b), 0.0);
        }
        assert!(term_score(2.0, 1.0, 10.0, 10.0, 0.0, 0.75) > 0.0);
    }

    fn plain() -> AnalyzerConfig {
        AnalyzerConfig { stemming: false }
    }

    fn tiny() -> ReferenceScorer {
        let mut s = ReferenceScorer::new(Bm25Params::default(), plain()).unwrap();
        // lengths after analysis: 3, 2, 4 -> avgdl = 3
        s.add(1, "rust", "test runner", "");
        s.add(2, "python", "", "debugger");
        s.add(3, "rust", "rust", "borrow checker");
        s
    }

    #[test]
    fn hand_computed_scores() {
        let mut s = tiny();
        assert_eq!(s.num_docs(), 3);
        assert_eq!(s.avg_length(), 3.0);
        let hits = s.search("rust", None, |_| true);
        // idf(rust) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6)
        // doc 3: tf 2, |d| 4 -> ln(1.6)·2·2.5 / (2 + 1.5·(0.25 + 0.75·4/3)) = 0.6064563...
        // doc 1: tf 1, |d| 3 -> ln(1.6)·2.5 / (1 + 1.5) = 0.4700036...
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].id, 3);
        assert!(
            (hits[0].score - 0.606_456_3).abs() < 1e-6,
            "{}",
            hits[0].score
        );
        assert_eq!(hits[1].id, 1);
        assert!(
            (hits[1].score - 0.470_003_6).abs() < 1e-6,
            "{}",
            hits[1].score
        );
    }

    #[test]
    fn multi_term_query_sums_and_repeats_count_once() {
        let mut s = tiny();
        let once = s.search("python debugger", None, |_| true);
        let twice = s.search("python debugger python", None, |_| true);
        assert_eq!(once, twice);
        // doc 2: |d| 2, each term tf 1, idf = ln(1 + 2.5/1.5) = ln(8/3)
        // each term: ln(8/3)·2.5 / (1 + 1.5·(0.25 + 0.75·2/3)) = 1.1539168... ; sum 2.3078335...
        assert_eq!(once.len(), 1);
        assert!(
            (once[0].score - 2.307_833_5).abs() < 1e-6,
            "{}",
            once[0].score
        );
    }

    #[test]
    fn no_match_stop_words_and_empty_corpus() {
        let mut s = tiny();
        assert!(s.search("javascript", None, |_| true).is_empty());
        assert!(s.search("the and of", None, |_| true).is_empty());
        assert!(s.search("", None, |_| true).is_empty());
        let mut empty = ReferenceScorer::new(Bm25Params::default(), plain()).unwrap();
        assert!(empty.search("rust", None, |_| true).is_empty());
    }

    #[test]
    fn ties_break_by_id_and_filter_keeps_scores() {
        let mut s = ReferenceScorer::new(Bm25Params::default(), plain()).unwrap();
        s.add(20, "alpha", "", "");
        s.add(10, "alpha", "", "");
        s.add(30, "beta", "", "");
        let hits = s.search("alpha", None, |_| true);
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![10, 20]);
        assert_eq!(hits[0].score, hits[1].score);
        let filtered = s.search("alpha", None, |id| id == 20);
        assert_eq!(filtered, vec![hits[1]]);
        assert_eq!(s.search("alpha", Some(1), |_| true), vec![hits[0]]);
    }

    #[test]
    fn field_weights_scale_tf_and_length() {
        let params = Bm25Params {
            weights: FieldWeights {
                name: 3.0,
                description: 1.0,
                instructions: 1.0,
            },
            ..Bm25Params::default()
        };
        let mut a = Analyzer::new(plain());
        let d = analyze_fields(&mut a, ["rust", "rust guide", ""], params.weights);
        assert_eq!(d.length, 5.0);
        assert_eq!(d.tf["rust"], 4.0);
        assert_eq!(d.tf["guide"], 1.0);
        // A name match outranks a description match under a name weight of 3.
        let mut s = ReferenceScorer::new(params, plain()).unwrap();
        s.add(1, "deploy", "kubernetes", "");
        s.add(2, "kubernetes", "deploy", "");
        assert_eq!(s.search("kubernetes", None, |_| true)[0].id, 2);
    }

    #[test]
    fn invalid_parameters_rejected() {
        for p in [
            Bm25Params {
                k1: -1.0,
                ..Default::default()
            },
            Bm25Params {
                b: 1.5,
                ..Default::default()
            },
            Bm25Params {
                k1: f64::NAN,
                ..Default::default()
            },
            Bm25Params {
                weights: FieldWeights {
                    name: 0.0,
                    description: 0.0,
                    instructions: 0.0,
                },
                ..Default::default()
            },
        ] {
            assert!(ReferenceScorer::new(p, plain()).is_err(), "{p:?}");
        }
    }
}
