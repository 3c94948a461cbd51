//! Ranking metrics at a cutoff, as BEIR / trec_eval define them (linear gain, log2 discount).
//!
//! A retrieved item is a skill, which may stand for several corpus documents when their content
//! was identical (deduplicated on load). Its gain is the highest relevance among them; recall
//! counts the relevant documents it covers. The ideal ranking is built over the same units (the
//! relevant documents grouped by the skill that holds them), so a perfect ranking scores 1.

use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    pub ndcg_at_10: f64,
    pub recall_at_10: f64,
    pub hit_at_1: f64,
    pub mrr_at_10: f64,
}

pub const CUTOFF: usize = 10;

/// Metrics of one query. `ranked[i]` is the set of document ids of the i-th result;
/// `unit_of(doc)` names the retrievable unit (skill) holding a document, if it was loaded.
pub fn query_metrics(
    ranked: &[Vec<String>],
    relevant: &HashMap<String, u32>,
    unit_of: impl Fn(&str) -> Option<i64>,
) -> Metrics {
    let top = &ranked[..ranked.len().min(CUTOFF)];
    let gain = |docs: &Vec<String>| {
        docs.iter()
            .filter_map(|d| relevant.get(d))
            .copied()
            .max()
            .unwrap_or(0)
    };
    let dcg = discounted(top.iter().map(gain));
    // Best grade per unit; a relevant document that was not loaded is a unit of its own.
    let mut per_unit: HashMap<Result<i64, &str>, u32> = HashMap::new();
    for (doc, grade) in relevant {
        let unit = unit_of(doc).ok_or(doc.as_str());
        let g = per_unit.entry(unit).or_insert(0);
        *g = (*g).max(*grade);
    }
    let mut ideal: Vec<u32> = per_unit.into_values().collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg = discounted(ideal.into_iter().take(CUTOFF));
    let covered: HashSet<&String> = top
        .iter()
        .flatten()
        .filter(|d| relevant.contains_key(*d))
        .collect();
    let first_hit = top.iter().position(|docs| gain(docs) > 0);
    Metrics {
        ndcg_at_10: if idcg > 0.0 { dcg / idcg } else { 0.0 },
        recall_at_10: if relevant.is_empty() {
            0.0
        } else {
            covered.len() as f64 / relevant.len() as f64
        },
        hit_at_1: if first_hit == Some(0) { 1.0 } else { 0.0 },
        mrr_at_10: first_hit.map_or(0.0, |p| 1.0 / (p + 1) as f64),
    }
}

/// Σ gain_i / log2(i + 2) over ranks i = 0, 1, ...
fn discounted(gains: impl Iterator<Item = u32>) -> f64 {
    gains
        .enumerate()
        .map(|(i, g)| g as f64 / ((i + 2) as f64).log2())
        .sum()
}

/// Mean over queries.
pub fn mean(per_query: &[Metrics]) -> Metrics {
    let n = per_query.len().max(1) as f64;
    let sum = per_query.iter().fold(Metrics::default(), |a, m| Metrics {
        ndcg_at_10: a.ndcg_at_10 + m.ndcg_at_10,
        recall_at_10: a.recall_at_10 + m.recall_at_10,
        hit_at_1: a.hit_at_1 + m.hit_at_1,
        mrr_at_10: a.mrr_at_10 + m.mrr_at_10,
    });
    Metrics {
        ndcg_at_10: sum.ndcg_at_10 / n,
        recall_at_10: sum.recall_at_10 / n,
        hit_at_1: sum.hit_at_1 / n,
        mrr_at_10: sum.mrr_at_10 / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(ids: &[&str]) -> Vec<Vec<String>> {
        ids.iter().map(|d| vec![d.to_string()]).collect()
    }

    fn rel(ids: &[&str]) -> HashMap<String, u32> {
        ids.iter().map(|d| (d.to_string(), 1)).collect()
    }

    fn each_doc_its_own_unit(d: &str) -> Option<i64> {
        Some(d.bytes().map(i64::from).sum())
    }

    #[test]
    fn perfect_ranking() {
        let m = query_metrics(
            &docs(&["a", "b", "x"]),
            &rel(&["a", "b"]),
            each_doc_its_own_unit,
        );
        assert!((m.ndcg_at_10 - 1.0).abs() < 1e-12);
        assert_eq!((m.recall_at_10, m.hit_at_1, m.mrr_at_10), (1.0, 1.0, 1.0));
    }

    #[test]
    fn hand_computed_ndcg() {
        // relevant a at rank 2, b at rank 4: DCG = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3)
        let m = query_metrics(
            &docs(&["x", "a", "y", "b"]),
            &rel(&["a", "b"]),
            each_doc_its_own_unit,
        );
        let expected = (1.0 / 3f64.log2() + 1.0 / 5f64.log2()) / (1.0 + 1.0 / 3f64.log2());
        assert!((m.ndcg_at_10 - expected).abs() < 1e-12);
        assert_eq!((m.recall_at_10, m.hit_at_1, m.mrr_at_10), (1.0, 0.0, 0.5));
    }

    #[test]
    fn cutoff_and_misses() {
        let mut ranked = docs(&["x"; 10]);
        ranked.push(vec!["a".into()]);
        let m = query_metrics(&ranked, &rel(&["a"]), each_doc_its_own_unit);
        assert_eq!(m, Metrics::default());
        assert_eq!(
            query_metrics(&[], &rel(&["a"]), |_| None),
            Metrics::default()
        );
    }

    #[test]
    fn merged_documents_are_one_unit() {
        // a and b were merged into skill 7: retrieving it first is a perfect ranking
        let ranked = vec![vec!["a".to_string(), "b".to_string()]];
        let m = query_metrics(&ranked, &rel(&["a", "b"]), |_| Some(7));
        assert_eq!(m.recall_at_10, 1.0);
        assert!((m.ndcg_at_10 - 1.0).abs() < 1e-12);
        // a relevant document that was never loaded still counts in the ideal ranking
        let m = query_metrics(&ranked, &rel(&["a", "b", "c"]), |d| (d != "c").then_some(7));
        assert!((m.ndcg_at_10 - 1.0 / (1.0 + 1.0 / 3f64.log2())).abs() < 1e-12);
    }

    #[test]
    fn mean_of_queries() {
        let a = Metrics {
            ndcg_at_10: 1.0,
            recall_at_10: 1.0,
            hit_at_1: 1.0,
            mrr_at_10: 1.0,
        };
        let m = mean(&[a, Metrics::default()]);
        assert_eq!(m.hit_at_1, 0.5);
    }
}
