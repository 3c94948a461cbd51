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

/// `pool` in its order, then the rows of `deeper` whose id is not in it, in theirs.
///
/// For rankings whose order depends on how deep their inputs were read (fusion of truncated
/// lists): the pool is read at a depth fixed by the request alone, and a deeper reading only
/// appends, so asking for more rows (a token budget, no k) never reorders the first ones.
pub fn pool_first<T>(pool: Vec<T>, deeper: Vec<T>, id: impl Fn(&T) -> i64) -> Vec<T> {
    let in_pool: std::collections::HashSet<i64> = pool.iter().map(&id).collect();
    let mut out = pool;
    out.extend(deeper.into_iter().filter(|row| !in_pool.contains(&id(row))));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deeper_lists_reorder_a_fusion_but_not_its_pool_first_extension() {
        // Two lists of 300: a and b are 2nd and 3rd by bm25 and near the bottom semantically,
        // b (rank 201) above a (rank 299).
        let (a, b) = (1000, 1001);
        let bm25: Vec<i64> = [7, a, b].into_iter().chain(2000..2297).collect();
        let mut semantic: Vec<i64> = (3000..3298).collect();
        semantic.insert(200, b);
        semantic.push(a);
        let fuse_at = |depth: usize| {
            let lists = [&bm25[..depth], &semantic[..depth]];
            reciprocal_rank_fusion(&lists.map(|ids| Ranking { ids, weight: 1.0 }), RRF_K)
        };
        let place = |rows: &[(i64, f64)], id: i64| rows.iter().position(|r| r.0 == id).unwrap();
        let shallow = fuse_at(100);
        let deep = fuse_at(300);
        assert!(
            place(&shallow, a) < place(&shallow, b),
            "read to 100: a before b"
        );
        assert!(
            place(&deep, b) < place(&deep, a),
            "read to 300: b overtakes a"
        );
        let extended = pool_first(shallow.clone(), deep, |r| r.0);
        assert_eq!(extended[..shallow.len()], shallow[..]);
        let ids: std::collections::HashSet<i64> = extended.iter().map(|r| r.0).collect();
        assert_eq!(ids.len(), extended.len(), "no id twice");
        // bm25's 300 ids and semantic's 298 others (a and b are in both).
        assert_eq!(extended.len(), 598, "every id of both lists once");
    }

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
