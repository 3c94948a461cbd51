//! Corpus statistics carried with a query: the document count, total length and the query terms'
//! document frequencies of a whole collection, with the options that scoring depends on.
//!
//! A collection split over several indexes (a Citus shard each) scores like one index when every
//! part scores with the sum of the parts' statistics: each part's top k are then exactly the
//! single index's scores, and merging the parts' top k gives the single index's top k. (Like
//! Elasticsearch's dfs_query_then_fetch: first the statistics, then the search.)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::document::QueryStats;
use super::format::IndexOptions;

/// Statistics of one index or of several summed, as JSON in a `skills.bm25query`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Corpus {
    pub documents: u64,
    pub total_length: f64,
    /// Per analysed query term; a term no document contains has 0.
    pub doc_freq: BTreeMap<String, u64>,
    pub k1: f64,
    pub b: f64,
    /// Field weights of name, description and instructions.
    pub weights: [f64; 3],
    pub stemming: bool,
}

impl Corpus {
    /// What one index holds for the analysed `terms` (`stats` in the same order).
    pub fn of_index(options: &IndexOptions, terms: &[String], stats: &QueryStats) -> Corpus {
        Corpus {
            documents: stats.num_docs,
            total_length: stats.total_length,
            doc_freq: terms
                .iter()
                .cloned()
                .zip(stats.doc_freq.iter().copied())
                .collect(),
            k1: options.k1,
            b: options.b,
            weights: options.weights_array(),
            stemming: options.stemming,
        }
    }

    /// The statistics of the union of disjoint parts. Parts must score alike (same options and
    /// terms), else the sum would mix incomparable numbers.
    pub fn sum(parts: &[Corpus]) -> Result<Corpus, String> {
        let Some(first) = parts.first() else {
            return Err("no statistics to sum".into());
        };
        let mut total = first.clone();
        for p in &parts[1..] {
            if !p.scores_like(first) {
                return Err(format!(
                    "the parts were indexed with different options (k1 {} b {} weights {:?} stemming {} against k1 {} b {} weights {:?} stemming {})",
                    p.k1, p.b, p.weights, p.stemming, first.k1, first.b, first.weights, first.stemming
                ));
            }
            if p.doc_freq.keys().ne(first.doc_freq.keys()) {
                return Err("the parts analysed the query into different terms".into());
            }
            total.documents += p.documents;
            total.total_length += p.total_length;
            for (term, df) in &p.doc_freq {
                *total.doc_freq.get_mut(term).expect("same keys") += df;
            }
        }
        Ok(total)
    }

    /// Same scoring options (an index scoring this query must have these).
    pub fn scores_like(&self, other: &Corpus) -> bool {
        self.k1 == other.k1
            && self.b == other.b
            && self.weights == other.weights
            && self.stemming == other.stemming
    }

    /// Whether an index with `options` analyses and weighs documents as these statistics assume.
    pub fn matches_options(&self, options: &IndexOptions) -> bool {
        self.k1 == options.k1
            && self.b == options.b
            && self.weights == options.weights_array()
            && self.stemming == options.stemming
    }

    /// The statistics for `terms` in their order (a term absent from the map has 0 documents).
    pub fn query_stats(&self, terms: &[String]) -> QueryStats {
        QueryStats {
            num_docs: self.documents,
            total_length: self.total_length,
            doc_freq: terms
                .iter()
                .map(|t| self.doc_freq.get(t).copied().unwrap_or(0))
                .collect(),
        }
    }

    /// Options of an index that scores like these statistics (append_pages is not scoring).
    pub fn options(&self) -> IndexOptions {
        IndexOptions {
            k1: self.k1,
            b: self.b,
            weights: crate::bm25::FieldWeights {
                name: self.weights[0],
                description: self.weights[1],
                instructions: self.weights[2],
            },
            stemming: self.stemming,
            ..IndexOptions::default()
        }
    }

    pub fn from_json(text: &str) -> Result<Corpus, String> {
        let c: Corpus = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let finite = c.total_length.is_finite()
            && c.total_length >= 0.0
            && c.k1.is_finite()
            && c.k1 >= 0.0
            && (0.0..=1.0).contains(&c.b)
            && c.weights.iter().all(|w| w.is_finite() && *w >= 0.0);
        if !finite {
            return Err("statistics out of range (total_length ≥ 0, k1 ≥ 0, 0 ≤ b ≤ 1, weights ≥ 0, all finite)".into());
        }
        if c.doc_freq.values().any(|&df| df > c.documents) {
            return Err("a document frequency exceeds the document count".into());
        }
        Ok(c)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain data serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bm25index::append::insert;
    use crate::bm25index::format::{IndexOptions, Tid};
    use crate::bm25index::maintenance::{add_segment, initialize};
    use crate::bm25index::search::hit_order;
    use crate::bm25index::segment::SegmentBuilder;
    use crate::bm25index::{analyze, query_terms, try_prepare, NoReaders};
    use crate::page::MemoryStore;
    use crate::text::{Analyzer, AnalyzerConfig};

    fn terms(q: &str) -> Vec<String> {
        query_terms(&mut Analyzer::new(AnalyzerConfig::default()), q)
    }

    #[test]
    fn sum_adds_counts_and_refuses_other_options() {
        let t = terms("git bisect");
        let o = IndexOptions::default();
        let a = Corpus::of_index(
            &o,
            &t,
            &QueryStats {
                num_docs: 3,
                total_length: 30.0,
                doc_freq: vec![1, 0],
            },
        );
        let b = Corpus::of_index(
            &o,
            &t,
            &QueryStats {
                num_docs: 5,
                total_length: 20.0,
                doc_freq: vec![2, 4],
            },
        );
        let s = Corpus::sum(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(s.documents, 8);
        assert_eq!(s.total_length, 50.0);
        assert_eq!(s.query_stats(&t).doc_freq, vec![3, 4]);
        let mut other = b;
        other.k1 = 1.2;
        assert!(Corpus::sum(&[a, other]).is_err());
        assert!(Corpus::sum(&[]).is_err());
    }

    #[test]
    fn json_round_trip_and_validation() {
        let c = Corpus::of_index(
            &IndexOptions::default(),
            &terms("flaky tests"),
            &QueryStats {
                num_docs: 4,
                total_length: 12.5,
                doc_freq: vec![1, 2],
            },
        );
        assert_eq!(Corpus::from_json(&c.to_json()).unwrap(), c);
        let mut bad = c.clone();
        bad.doc_freq.insert("x".into(), 9);
        assert!(Corpus::from_json(&bad.to_json()).is_err());
        assert!(Corpus::from_json(&c.to_json().replace("0.75", "7.5")).is_err());
        assert!(Corpus::from_json("{}").is_err());
    }

    fn tid(i: usize) -> Tid {
        Tid {
            block: (i / 50) as u32,
            offset: (i % 50 + 1) as u16,
        }
    }

    /// An index of the documents `which` selects: a segment of the first half of them, the
    /// rest in the append area (both places statistics come from).
    fn index_of(docs: &[[String; 3]], which: &dyn Fn(usize) -> bool) -> MemoryStore {
        let options = IndexOptions::default();
        let store = MemoryStore::new(8192);
        initialize(&store, options);
        let mut analyzer = Analyzer::new(AnalyzerConfig::default());
        let chosen: Vec<usize> = (0..docs.len()).filter(|&i| which(i)).collect();
        let (segment_docs, append_docs) = chosen.split_at(chosen.len() / 2);
        let mut builder = SegmentBuilder::new(options.term_scoring());
        for &i in segment_docs {
            let [a, b, c] = &docs[i];
            builder.add(
                tid(i),
                &analyze(&mut analyzer, [a, b, c], options.weights_array()),
            );
        }
        add_segment(&store, builder.write(&store), &NoReaders).unwrap();
        for &i in append_docs {
            let [a, b, c] = &docs[i];
            insert(
                &store,
                tid(i),
                &analyze(&mut analyzer, [a, b, c], options.weights_array()),
            )
            .unwrap();
        }
        store
    }

    /// Two indexes holding halves of a collection, each scoring with the summed statistics,
    /// give exactly the scores and top k of one index holding all of it.
    #[test]
    fn parts_scoring_with_summed_statistics_equal_one_index() {
        let docs: Vec<[String; 3]> = (0..60)
            .map(|i| {
                [
                    format!("skill {i}"),
                    format!("{} regression {}", ["git", "flaky", "docker"][i % 3], i % 7),
                    "run the tests and bisect the change ".repeat(1 + i % 4),
                ]
            })
            .collect();
        let whole = index_of(&docs, &|_| true);
        let even = index_of(&docs, &|i| i % 2 == 0);
        let odd = index_of(&docs, &|i| i % 2 == 1);
        let q = terms("git bisect regression");
        let corpus_of = |s: &MemoryStore| {
            let p = try_prepare(s, &q).unwrap();
            Corpus::of_index(&p.meta.options, &q, &p.stats)
        };
        let global = Corpus::sum(&[corpus_of(&even), corpus_of(&odd)]).unwrap();
        let single_stats = try_prepare(&whole, &q).unwrap().stats;
        assert_eq!(global.documents, single_stats.num_docs);
        assert_eq!(global.query_stats(&q).doc_freq, single_stats.doc_freq);
        assert!((global.total_length - single_stats.total_length).abs() < 1e-6);
        let k = 7;
        let mut merged: Vec<_> = [&even, &odd]
            .iter()
            .flat_map(|s| {
                try_prepare(*s, &q)
                    .unwrap()
                    .with_stats(&global.query_stats(&q))
                    .top_k(k)
                    .unwrap()
            })
            .collect();
        merged.sort_by(hit_order);
        merged.truncate(k);
        let single = try_prepare(&whole, &q).unwrap().top_k(k).unwrap();
        assert_eq!(merged.len(), k);
        for (m, s) in merged.iter().zip(&single) {
            assert_eq!(m.tid, s.tid);
            assert!(
                (m.score - s.score).abs() < 1e-9,
                "{} vs {}",
                m.score,
                s.score
            );
        }
        // Without the summed statistics a part scores differently (the test can fail).
        let local = try_prepare(&even, &q).unwrap().top_k(1).unwrap();
        let whole_score = try_prepare(&whole, &q)
            .unwrap()
            .top_k(docs.len())
            .unwrap()
            .into_iter()
            .find(|h| h.tid == local[0].tid)
            .map(|h| h.score);
        assert!((Some(local[0].score).unwrap() - whole_score.unwrap()).abs() > 1e-6);
    }
}
