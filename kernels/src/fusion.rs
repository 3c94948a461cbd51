//! Reciprocal-rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009): a skill's fused score is
//! Σ wᵢ / (k + rankᵢ) over the rankings that contain it (rank from 1). Only ranks matter, so BM25
//! scores and key similarities, which live on different scales, fuse without calibration.

use std::collections::HashMap;

/// The usual constant: it damps the difference between the first few ranks.
pub const RRF_K: f64 = 60.0;

/// One ranking (ids best first) and its weight.
#[derive(Clone, Copy, Debug)]
pub struct Ranking<'a> {
    pub ids: &'a [i64],
    pub weight: f64,
}

/// Fused (id, score), score descending, ties by id. An id repeated within one ranking counts once,
/// at its first place; ranks count distinct ids.
pub fn reciprocal_rank_fusion(rankings: &[Ranking<'_>], k: f64) -> Vec<(i64, f64)> {
    let mut fused: HashMap<i64, f64> = HashMap::new();
    for ranking in rankings {
        let mut seen = std::collections::HashSet::new();
        for &id in ranking.ids {
            if seen.insert(id) {
                let rank = seen.len() as f64;
                *fused.entry(id).or_insert(0.0) += ranking.weight / (k + rank);
            }
        }
    }
    let mut out: Vec<(i64, f64)> = fused.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_ranks_first_and_weights_shift_the_order() {
        let bm25 = [1, 2, 3];
        let semantic = [2, 4, 1];
        let fused = reciprocal_rank_fusion(
            &[
                Ranking {
                    ids: &bm25,
                    weight: 1.0,
                },
                Ranking {
                    ids: &semantic,
                    weight: 1.0,
                },
            ],
            RRF_K,
        );
        let ids: Vec<i64> = fused.iter().map(|f| f.0).collect();
        // 2: 1/62 + 1/61; 1: 1/61 + 1/63; then 3 (1/63) and 4 (1/62): 4 before 3.
        assert_eq!(ids, vec![2, 1, 4, 3]);
        assert!((fused[0].1 - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);

        // Semantic weighted 0: BM25's order, and 4 (semantic only) scores 0 and comes last.
        let fused = reciprocal_rank_fusion(
            &[
                Ranking {
                    ids: &bm25,
                    weight: 1.0,
                },
                Ranking {
                    ids: &semantic,
                    weight: 0.0,
                },
            ],
            RRF_K,
        );
        let ids: Vec<i64> = fused.iter().map(|f| f.0).collect();
        assert_eq!(ids, vec![1, 2, 3, 4]);
        assert_eq!(fused[3].1, 0.0);
    }

    #[test]
    fn ties_break_by_id_and_repeats_count_once() {
        let a = [5, 5, 9];
        let b = [9, 5];
        let fused = reciprocal_rank_fusion(
            &[
                Ranking {
                    ids: &a,
                    weight: 1.0,
                },
                Ranking {
                    ids: &b,
                    weight: 1.0,
                },
            ],
            RRF_K,
        );
        // 5: 1/61 + 1/62, 9: 1/62 + 1/61 (the repeated 5 counts once): tied, smaller id first.
        assert_eq!(fused.iter().map(|f| f.0).collect::<Vec<_>>(), vec![5, 9]);
        assert_eq!(fused[0].1, fused[1].1);
        assert!(reciprocal_rank_fusion(&[], RRF_K).is_empty());
    }
}
