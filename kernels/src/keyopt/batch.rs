//! Batch scoring: many query keys against every skill record at once, the best `k` of each.
//!
//! A record holds what the KeyOpt reading needs of one skill: its current key k0 (f16, as
//! `skills.skill_key` stores it), the round's Δk (f32, as `skills.keyopt_skill` stores it; zeros
//! when the round has no row fitted on the skill's current content) and β, and its pool as a bit
//! of a category mask. Per query and record:
//!
//! - r = q·k0 with the query key rounded to f16, as `k0 <#> skills.key(q)` computes it in SQL;
//! - S = ρ·r + β + clip((q − μ)ᵀΔk, −c, c) (the Δk term only when the round uses it).
//!
//! [`Order::Relevance`] ranks by ρ·r (the reading's first stage: its candidate pool),
//! [`Order::KeyOpt`] by S. Ties go to the lower record index, so records sorted by skill id rank
//! ties as SQL does. The event term α·E depends on past runs near each query and is added by the
//! caller. [`top_k`] is the CPU path (SIMD inner products, rayon over queries) and the reference
//! the CUDA kernel (`cuda.rs`, feature `cuda`) is tested against.

use half::f16;
use rayon::prelude::*;

use super::Settings;
use crate::vector::{dot, dot_f16};

/// Every category: a query mask that filters nothing.
pub const ALL_CATEGORIES: u8 = u8::MAX;

/// The skill side of a batch, one record per skill, structure of arrays.
#[derive(Clone, Debug, Default)]
pub struct Records {
    pub dim: usize,
    /// Record-major keys, `dim` per record.
    pub k0: Vec<f16>,
    /// Record-major Δk, `dim` per record.
    pub dk: Vec<f32>,
    pub beta: Vec<f32>,
    /// The record's pool, 0..8 (a bit of [`Query::categories`]).
    pub category: Vec<u8>,
}

impl Records {
    pub fn new(dim: usize) -> Records {
        Records {
            dim,
            ..Records::default()
        }
    }

    pub fn len(&self) -> usize {
        self.beta.len()
    }

    pub fn is_empty(&self) -> bool {
        self.beta.is_empty()
    }

    /// Appends a record; `corrections` is (Δk, β) of the round, None for a skill it did not fit.
    pub fn push(&mut self, k0: &[f16], corrections: Option<(&[f32], f32)>, category: u8) {
        assert_eq!(k0.len(), self.dim, "a key of another dimension");
        assert!(category < 8, "category {category} does not fit the mask");
        self.k0.extend_from_slice(k0);
        match corrections {
            Some((dk, beta)) => {
                assert_eq!(dk.len(), self.dim, "a Δk of another dimension");
                self.dk.extend_from_slice(dk);
                self.beta.push(beta);
            }
            None => {
                self.dk.resize(self.dk.len() + self.dim, 0.0);
                self.beta.push(0.0);
            }
        }
        self.category.push(category);
    }

    /// Bytes one record occupies (what a full scan reads per record).
    pub fn record_bytes(&self) -> usize {
        self.dim * (std::mem::size_of::<f16>() + std::mem::size_of::<f32>())
            + std::mem::size_of::<f32>()
            + 1
    }
}

/// One query of a batch.
#[derive(Clone, Debug)]
pub struct Query {
    /// The query key rounded to f16 (r is computed from it, as SQL does).
    pub key: Vec<f16>,
    /// The query key (f32) minus the round's μ.
    pub centered: Vec<f32>,
    /// Bit c set: records of category c may be returned.
    pub categories: u8,
}

impl Query {
    pub fn new(key: &[f32], mu: &[f32], categories: u8) -> Query {
        assert_eq!(key.len(), mu.len(), "query key and μ differ in length");
        Query {
            key: key.iter().map(|&x| f16::from_f32(x)).collect(),
            centered: key.iter().zip(mu).map(|(q, m)| q - m).collect(),
            categories,
        }
    }
}

/// The round's reading parameters (ρ, and whether and how far the Δk term counts).
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    pub rho: f32,
    pub settings: Settings,
}

/// What a batch ranks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// ρ·r: the first stage.
    Relevance,
    /// S = ρ·r + β + the clipped Δk term.
    KeyOpt,
}

/// One ranked record and the parts of its score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub index: u32,
    /// ρ·r.
    pub relevance: f32,
    pub beta: f32,
    pub dk_term: f32,
}

impl Hit {
    pub fn score(&self) -> f32 {
        self.relevance + self.beta + self.dk_term
    }

    pub fn key(&self, order: Order) -> f32 {
        match order {
            Order::Relevance => self.relevance,
            Order::KeyOpt => self.score(),
        }
    }
}

/// Record `i` read against `query`.
pub fn read(records: &Records, i: usize, query: &Query, reading: &Reading) -> Hit {
    let dim = records.dim;
    let r = dot_f16(&query.key, &records.k0[i * dim..(i + 1) * dim]);
    let settings = &reading.settings;
    let dk_term = if settings.use_dk {
        dot(&query.centered, &records.dk[i * dim..(i + 1) * dim])
            .clamp(-settings.clip, settings.clip)
    } else {
        0.0
    };
    Hit {
        index: i as u32,
        relevance: reading.rho * r,
        beta: records.beta[i],
        dk_term,
    }
}

/// Best first: the larger key, then the lower index. NaN (never produced from finite inputs)
/// sorts last.
pub fn better(a: (f32, u32), b: (f32, u32)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// The best `k` records of each query by `order`, best first, among the records its category
/// mask admits. The CPU path: SIMD inner products, queries in parallel.
pub fn top_k(
    records: &Records,
    queries: &[Query],
    reading: &Reading,
    order: Order,
    k: usize,
) -> Vec<Vec<Hit>> {
    crate::threads::global_pool();
    for q in queries {
        assert_eq!(q.key.len(), records.dim, "a query of another dimension");
    }
    queries
        .par_iter()
        .map(|query| {
            crate::interrupt::check();
            let mut keys: Vec<(f32, u32)> = (0..records.len())
                .filter(|&i| query.categories & (1 << records.category[i]) != 0)
                .map(|i| {
                    let hit = read(records, i, query, reading);
                    (hit.key(order), i as u32)
                })
                .collect();
            let k = k.min(keys.len());
            if k == 0 {
                return Vec::new();
            }
            if k < keys.len() {
                keys.select_nth_unstable_by(k - 1, |a, b| better(*a, *b));
                keys.truncate(k);
            }
            keys.sort_unstable_by(|a, b| better(*a, *b));
            keys.iter()
                .map(|&(_, i)| read(records, i as usize, query, reading))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn random_records(rng: &mut SplitMix64, n: usize, dim: usize) -> Records {
        let mut records = Records::new(dim);
        for i in 0..n {
            let k0: Vec<f16> = (0..dim)
                .map(|_| f16::from_f32(rng.unit() as f32 - 0.5))
                .collect();
            let dk: Vec<f32> = (0..dim).map(|_| (rng.unit() as f32 - 0.5) * 0.2).collect();
            let beta = (rng.unit() as f32 - 0.5) * 0.3;
            let fitted = i % 3 != 0;
            records.push(&k0, fitted.then_some((&dk[..], beta)), (i % 7) as u8);
        }
        records
    }

    fn random_query(rng: &mut SplitMix64, dim: usize, mu: &[f32], categories: u8) -> Query {
        let key: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 - 0.5).collect();
        Query::new(&key, mu, categories)
    }

    fn reading() -> Reading {
        Reading {
            rho: 1.7,
            settings: Settings {
                use_dk: true,
                clip: 0.05,
                alpha: 0.0,
                kappa: 0.0,
            },
        }
    }

    /// Every record scored and sorted: what a top-k must be a prefix of.
    fn everything(records: &Records, query: &Query, reading: &Reading, order: Order) -> Vec<Hit> {
        let mut all: Vec<Hit> = (0..records.len())
            .filter(|&i| query.categories & (1 << records.category[i]) != 0)
            .map(|i| read(records, i, query, reading))
            .collect();
        all.sort_by(|a, b| better((a.key(order), a.index), (b.key(order), b.index)));
        all
    }

    #[test]
    fn top_k_is_the_prefix_of_a_full_sort_in_both_orders() {
        let mut rng = SplitMix64(21);
        let dim = 32;
        let records = random_records(&mut rng, 500, dim);
        let mu: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 * 0.1).collect();
        let queries: Vec<Query> = (0..9)
            .map(|i| {
                let mask = if i % 3 == 0 {
                    ALL_CATEGORIES
                } else {
                    0b0101_0011
                };
                random_query(&mut rng, dim, &mu, mask)
            })
            .collect();
        for order in [Order::Relevance, Order::KeyOpt] {
            for k in [1, 10, 499, 600] {
                let got = top_k(&records, &queries, &reading(), order, k);
                for (q, hits) in queries.iter().zip(&got) {
                    let want = everything(&records, q, &reading(), order);
                    assert_eq!(hits[..], want[..k.min(want.len())], "{order:?} k {k}");
                }
            }
        }
    }

    #[test]
    fn the_orders_differ_when_corrections_do_and_agree_without_them() {
        let mut rng = SplitMix64(5);
        let dim = 16;
        let records = random_records(&mut rng, 300, dim);
        let mu = vec![0.0; dim];
        let queries = vec![random_query(&mut rng, dim, &mu, ALL_CATEGORIES)];
        let ids = |order, reading: &Reading| -> Vec<u32> {
            top_k(&records, &queries, reading, order, 20)[0]
                .iter()
                .map(|h| h.index)
                .collect()
        };
        let corrected = reading();
        assert_ne!(
            ids(Order::Relevance, &corrected),
            ids(Order::KeyOpt, &corrected)
        );
        // Without β and Δk (a neutral round) S is ρ·r: the same ranking.
        let mut neutral = Records::new(dim);
        for i in 0..records.len() {
            neutral.push(
                &records.k0[i * dim..(i + 1) * dim],
                None,
                records.category[i],
            );
        }
        let by = |order| -> Vec<u32> {
            top_k(&neutral, &queries, &corrected, order, 20)[0]
                .iter()
                .map(|h| h.index)
                .collect()
        };
        assert_eq!(by(Order::Relevance), by(Order::KeyOpt));
    }

    #[test]
    fn parts_are_the_readings_of_keyopt_read_row() {
        let mut rng = SplitMix64(9);
        let dim = 8;
        let records = random_records(&mut rng, 20, dim);
        let mu: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 * 0.1).collect();
        let q = random_query(&mut rng, dim, &mu, ALL_CATEGORIES);
        let reading = reading();
        for i in 0..records.len() {
            // read_row takes f32 rows: the same values widened.
            let k0: Vec<f32> = records.k0[i * dim..(i + 1) * dim]
                .iter()
                .map(|x| x.to_f32())
                .collect();
            let row = super::super::pack(&k0, &records.dk[i * dim..(i + 1) * dim], records.beta[i]);
            let key: Vec<f32> = q.key.iter().map(|x| x.to_f32()).collect();
            let reference = super::super::read_row(
                &row,
                &super::super::QueryKey {
                    key,
                    centered: q.centered.clone(),
                },
                reading.rho,
                &reading.settings,
            );
            let hit = read(&records, i, &q, &reading);
            assert!((hit.relevance - reference.relevance).abs() < 1e-5);
            assert_eq!(hit.beta, reference.beta);
            assert!((hit.dk_term - reference.dk_term).abs() < 1e-6);
        }
    }

    #[test]
    fn masks_admit_only_their_categories() {
        let mut rng = SplitMix64(3);
        let dim = 8;
        let records = random_records(&mut rng, 70, dim);
        let q = random_query(&mut rng, dim, &vec![0.0; dim], 1 << 2);
        let hits = top_k(&records, &[q], &reading(), Order::KeyOpt, 100);
        assert_eq!(hits[0].len(), 10);
        assert!(hits[0]
            .iter()
            .all(|h| records.category[h.index as usize] == 2));
        let none = random_query(&mut rng, dim, &vec![0.0; dim], 0);
        assert!(top_k(&records, &[none], &reading(), Order::KeyOpt, 5)[0].is_empty());
    }
}
