//! One-bit codes of list entries (the RaBitQ estimator): a query bounds every entry's distance
//! from 80 bytes instead of reading its 1 KB key, and computes the exact distance only for
//! entries whose bound can still place them among the nearest.
//!
//! An entry filed under centroid `c` stores the signs of its residual `r = k − c` after a random
//! orthogonal rotation `P` (random signs, then a normalised Walsh–Hadamard transform over the
//! dimensions padded to a power of two), and four factors. For a query `q`, with `d = q − c`:
//!
//! ```text
//! q·k = q·c + c·r + d·r,    d·r ≈ |r|² / Σ|Pr|ᵢ · Σ sign(Pr)ᵢ (Pd)ᵢ
//! ```
//!
//! and the error of the estimate is at most `CONFIDENCE · |d| · |r| · √(1−a²) / (a·√(D−1))`
//! (a = Σ|Pr|ᵢ / (√D·|r|)) except with probability about `2·exp(−c₀·CONFIDENCE²)` (Gao & Long,
//! RaBitQ, SIGMOD 2024, theorem 3.2). A bound that fails only delays an entry behind farther
//! ones; distances returned are always the exact operator distances.

use half::f16;

use super::format::Metric;
use crate::rng::SplitMix64;

/// Below this many dimensions entries carry no code: the estimate's concentration needs many
/// dimensions, and small keys are cheap to compare exactly.
pub const MIN_CODED_DIM: usize = 64;

/// How many standard errors the bound allows. The estimator's error is sub-Gaussian: at 3 a
/// bound fails for about one entry in a few hundred to a thousand, and a failure only delays
/// that entry behind farther ones, so it is missed only when it also lies at the LIMIT's cut.
/// On 1,000 real MiniLM queries over 100,000 and 300,000 real keys (`key_scan`), 3 returned the
/// same top 10 as 5 to within one row in 10,000, and read a quarter of the keys 5 read: wider
/// bounds leave more entries that might still be among the nearest, and a scan that meets many
/// reads every key of its lists (`search::Batch::pop`).
pub const CONFIDENCE: f32 = 3.0;

/// The four f32 factors after the sign bits: `|r|²/Σ|Pr|ᵢ`, the error scale, `c·r`, `|r|²`.
const FACTORS: usize = 4;

/// Rotated dimensions of a `dim`-d key (0: no code).
pub fn padded_dim(dim: usize) -> usize {
    if dim < MIN_CODED_DIM {
        0
    } else {
        dim.next_power_of_two()
    }
}

/// Bytes of one entry's code (0: no code).
pub fn code_size(dim: usize) -> usize {
    match padded_dim(dim) {
        0 => 0,
        d => d / 8 + 4 * FACTORS,
    }
}

/// The random rotation of one index build (seeded by its build id, so build, inserts and
/// queries all rotate alike).
#[derive(Clone, Debug)]
pub struct Rotation {
    dim: usize,
    signs: Vec<f32>,
}

impl Rotation {
    /// None when `dim` keys carry no code.
    pub fn new(dim: usize, seed: u64) -> Option<Rotation> {
        let padded = padded_dim(dim);
        if padded == 0 {
            return None;
        }
        let mut rng = SplitMix64(seed ^ 0x5253_4b42_6974_7321);
        let signs = (0..padded)
            .map(|_| if rng.next_u64() >> 63 == 0 { 1.0 } else { -1.0 })
            .collect();
        Some(Rotation { dim, signs })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn padded(&self) -> usize {
        self.signs.len()
    }

    /// `out` = P·x (x padded with zeros): orthonormal, so norms and inner products are kept.
    pub fn apply(&self, x: &[f32], out: &mut Vec<f32>) {
        debug_assert_eq!(x.len(), self.dim);
        out.clear();
        out.extend(x.iter().zip(&self.signs).map(|(v, s)| v * s));
        out.resize(self.padded(), 0.0);
        walsh_hadamard(out);
        let scale = 1.0 / (self.padded() as f32).sqrt();
        out.iter_mut().for_each(|v| *v *= scale);
    }
}

/// In-place unnormalised Walsh–Hadamard transform of a power-of-two length.
fn walsh_hadamard(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(n.is_power_of_two());
    let mut h = 1;
    while h < n {
        for block in x.chunks_exact_mut(2 * h) {
            let (a, b) = block.split_at_mut(h);
            for (u, v) in a.iter_mut().zip(b.iter_mut()) {
                let (s, t) = (*u + *v, *u - *v);
                *u = s;
                *v = t;
            }
        }
        h *= 2;
    }
}

/// Writes the code of `key` filed under `centroid` into `out` (`code_size` bytes).
pub fn encode(rotation: &Rotation, key: &[f16], centroid: &[f32], out: &mut [u8]) {
    let dim = rotation.dim();
    debug_assert!(key.len() == dim && centroid.len() == dim);
    let padded = rotation.padded();
    debug_assert_eq!(out.len(), padded / 8 + 4 * FACTORS);
    let residual: Vec<f32> = key
        .iter()
        .zip(centroid)
        .map(|(k, c)| k.to_f32() - c)
        .collect();
    let mut rotated = Vec::with_capacity(padded);
    rotation.apply(&residual, &mut rotated);
    let (bits, factors) = out.split_at_mut(padded / 8);
    bits.fill(0);
    for (i, &v) in rotated.iter().enumerate() {
        if v > 0.0 {
            bits[i / 8] |= 1 << (i % 8);
        }
    }
    let sum_abs: f64 = rotated.iter().map(|v| v.abs() as f64).sum();
    let norm_sq: f64 = residual.iter().map(|&v| v as f64 * v as f64).sum();
    let centroid_dot: f64 = residual
        .iter()
        .zip(centroid)
        .map(|(&r, &c)| r as f64 * c as f64)
        .sum();
    let (scale, error) = if sum_abs > 0.0 && norm_sq > 0.0 {
        let norm = norm_sq.sqrt();
        // a = ⟨sign(Pr)/√D, Pr/|r|⟩, in (0, 1]: how well the signs point along the residual.
        let a = (sum_abs / ((padded as f64).sqrt() * norm)).min(1.0);
        let error = norm * (1.0 - a * a).max(0.0).sqrt() / (a * ((padded - 1) as f64).sqrt());
        (norm_sq / sum_abs, error)
    } else {
        (0.0, 0.0)
    };
    for (i, v) in [scale, error, centroid_dot, norm_sq]
        .into_iter()
        .enumerate()
    {
        factors[4 * i..4 * i + 4].copy_from_slice(&(v as f32).to_le_bytes());
    }
}

/// A query, rotated once per scan.
pub struct CodedQuery {
    /// P·q.
    rotated: Vec<f32>,
    norm: f32,
}

/// The query against one list's centroid.
pub struct ListQuery {
    /// P·(q − c).
    rotated: Vec<f32>,
    rotated_sum: f32,
    /// |q − c|.
    offset_norm: f32,
    /// q·c.
    query_centroid: f32,
    /// |c|².
    centroid_sq: f32,
    query_norm: f32,
}

impl CodedQuery {
    pub fn new(rotation: &Rotation, query: &[f32]) -> CodedQuery {
        let mut rotated = Vec::with_capacity(rotation.padded());
        rotation.apply(query, &mut rotated);
        CodedQuery {
            norm: dot(query, query).sqrt(),
            rotated,
        }
    }

    /// Against the centroid whose rotation P·c is `rotated_centroid` and whose |c|² is
    /// `centroid_sq` (the rotation keeps inner products, so everything is computed rotated).
    pub fn for_list(&self, rotated_centroid: &[f32], centroid_sq: f32) -> ListQuery {
        let rotated: Vec<f32> = self
            .rotated
            .iter()
            .zip(rotated_centroid)
            .map(|(q, c)| q - c)
            .collect();
        ListQuery {
            rotated_sum: sum(&rotated),
            offset_norm: dot(&rotated, &rotated).sqrt(),
            query_centroid: dot(&self.rotated, rotated_centroid),
            centroid_sq,
            query_norm: self.norm,
            rotated,
        }
    }
}

/// f32 inner product in SIMD (a plain iterator sum is one long dependency chain).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    crate::vector::dot(a, b)
}

/// Σ x in 16 independent lanes.
fn sum(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = x.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (l, v) in lanes.iter_mut().zip(chunk) {
            *l += v;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

impl ListQuery {
    /// A lower and an upper bound of `metric`'s distance from the query to the entry with
    /// this `code` (−∞ and +∞ when the code's factors are not finite: the entry is then simply
    /// read first).
    pub fn bounds(&self, metric: Metric, code: &[u8]) -> (f64, f64) {
        let (lower, upper) = self.raw_bounds(metric, code);
        if lower.is_nan() || upper.is_nan() {
            (f64::NEG_INFINITY, f64::INFINITY)
        } else {
            (lower, upper)
        }
    }

    fn raw_bounds(&self, metric: Metric, code: &[u8]) -> (f64, f64) {
        let (bits, factors) = code.split_at(self.rotated.len() / 8);
        let factor =
            |i: usize| f32::from_le_bytes(factors[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        let (scale, error, centroid_dot, norm_sq) = (factor(0), factor(1), factor(2), factor(3));
        let signed = 2.0 * masked_sum(bits, &self.rotated) - self.rotated_sum;
        let estimate = self.query_centroid + centroid_dot + scale * signed;
        let key_sq = (self.centroid_sq + 2.0 * centroid_dot + norm_sq).max(0.0);
        // Rounding: the exact distance is an f32 sum in another order (and simsimd's cosine
        // uses an approximate square root), so the bounds leave room for it.
        let rounding = 1e-4 * self.query_norm * key_sq.sqrt();
        let width = CONFIDENCE * error * self.offset_norm + rounding;
        // The range of q·k.
        let (lowest, highest) = ((estimate - width) as f64, (estimate + width) as f64);
        match metric {
            Metric::InnerProduct => (-highest, -lowest),
            Metric::Cosine => {
                let norms = self.query_norm as f64 * (key_sq as f64).sqrt();
                if norms < 1e-12 {
                    (f64::NEG_INFINITY, f64::INFINITY)
                } else {
                    (1.0 - highest / norms - 1e-3, 1.0 - lowest / norms + 1e-3)
                }
            }
            Metric::L2 => {
                let (q_sq, k_sq) = (
                    self.query_norm as f64 * self.query_norm as f64,
                    key_sq as f64,
                );
                let slack = 1e-4 * (q_sq + k_sq);
                let at = |ip: f64, slack: f64| (q_sq + k_sq - 2.0 * ip + slack).max(0.0).sqrt();
                (at(highest, -slack), at(lowest, slack))
            }
        }
    }
}

/// Σ xᵢ over the set bits i of `bits` (bit i is bit i % 8 of byte i / 8).
pub fn masked_sum(bits: &[u8], x: &[f32]) -> f32 {
    debug_assert_eq!(bits.len() * 8, x.len());
    #[cfg(target_arch = "x86_64")]
    if x.len().is_multiple_of(16) && std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above) and x holds 8 values per byte of bits,
        // a multiple of 16.
        return unsafe { avx512::masked_sum(bits, x) };
    }
    masked_sum_scalar(bits, x)
}

pub fn masked_sum_scalar(bits: &[u8], x: &[f32]) -> f32 {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            if bits[i / 8] >> (i % 8) & 1 == 1 {
                v
            } else {
                0.0
            }
        })
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// Independent sums: a 512-d code is 32 masked adds, and with four sums each waited on the
    /// add before it (latency 4) for 8 steps; eight halve that chain.
    const SUMS: usize = 8;

    /// Requires AVX-512F and `x.len() == 8 · bits.len()`, a multiple of 16.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn masked_sum(bits: &[u8], x: &[f32]) -> f32 {
        let masks = bits.len() / 2;
        debug_assert_eq!(x.len(), 16 * masks);
        // Mask i is bytes 2i and 2i + 1, little-endian: one 16-bit load (i < masks, so both
        // bytes lie in `bits`), instead of two checked byte reads a mask.
        let mask = |i: usize| (bits.as_ptr().add(2 * i) as *const u16).read_unaligned();
        // In bounds: x holds 16 values per mask.
        let load = |i: usize| _mm512_loadu_ps(x.as_ptr().add(16 * i));
        let mut sums = [_mm512_setzero_ps(); SUMS];
        let mut i = 0;
        while i + SUMS <= masks {
            for (j, sum) in sums.iter_mut().enumerate() {
                *sum = _mm512_mask_add_ps(*sum, mask(i + j), *sum, load(i + j));
            }
            i += SUMS;
        }
        while i < masks {
            sums[i % SUMS] = _mm512_mask_add_ps(sums[i % SUMS], mask(i), sums[i % SUMS], load(i));
            i += 1;
        }
        let quarter = |k: usize| _mm512_add_ps(sums[k], sums[k + 1]);
        let half = _mm512_add_ps(quarter(0), quarter(2));
        let other = _mm512_add_ps(quarter(4), quarter(6));
        _mm512_reduce_add_ps(_mm512_add_ps(half, other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{centres, clustered};

    fn normal(rng: &mut SplitMix64) -> f32 {
        crate::synthetic::normal(rng) as f32
    }

    #[test]
    fn the_rotation_keeps_norms_and_inner_products() {
        for dim in [64, 100, 384, 512] {
            let rotation = Rotation::new(dim, 7).unwrap();
            let mut rng = SplitMix64(dim as u64);
            let a: Vec<f32> = (0..dim).map(|_| normal(&mut rng)).collect();
            let b: Vec<f32> = (0..dim).map(|_| normal(&mut rng)).collect();
            let (mut ra, mut rb) = (Vec::new(), Vec::new());
            rotation.apply(&a, &mut ra);
            rotation.apply(&b, &mut rb);
            assert_eq!(ra.len(), dim.next_power_of_two());
            let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
            assert!((dot(&a, &b) - dot(&ra, &rb)).abs() < 1e-3 * dim as f32);
            assert!((dot(&a, &a) - dot(&ra, &ra)).abs() < 1e-4 * dot(&a, &a));
            assert_ne!(ra[..dim], a[..], "it rotates");
        }
        assert!(Rotation::new(MIN_CODED_DIM - 1, 7).is_none());
        assert_eq!(code_size(512), 64 + 16);
        assert_eq!(code_size(8), 0);
    }

    #[test]
    fn the_wide_masked_sum_is_the_scalar_one() {
        let mut rng = SplitMix64(3);
        for len in [16, 64, 144, 512, 1024] {
            let x: Vec<f32> = (0..len).map(|_| normal(&mut rng)).collect();
            let bits: Vec<u8> = (0..len / 8).map(|_| rng.next_u64() as u8).collect();
            let want = masked_sum_scalar(&bits, &x);
            assert!((masked_sum(&bits, &x) - want).abs() < 1e-4 * len as f32);
        }
        // All bits set: the plain sum; none: zero.
        let x = vec![0.5f32; 64];
        assert_eq!(masked_sum(&[0xff; 8], &x), 32.0);
        assert_eq!(masked_sum(&[0; 8], &x), 0.0);
    }

    /// An exact distance lies between its bounds but for a few entries in a thousand, for
    /// every metric, on clustered keys and queries (the shape of real keys) and on keys far
    /// from their centroid; and the bounds are tight enough to leave most entries unread.
    #[test]
    fn bounds_seldom_fail_and_are_tight() {
        let dim = 512;
        let c = centres(16, dim, 5);
        let keys = crate::keyindex::tests::to_f16(&clustered(&c, dim, 3000, 6));
        let queries = crate::keyindex::tests::to_f16(&clustered(&c, dim, 30, 7));
        let rotation = Rotation::new(dim, 11).unwrap();
        for metric in [Metric::InnerProduct, Metric::Cosine, Metric::L2] {
            let (mut below, mut total, mut pruned) = (0usize, 0usize, 0usize);
            // The keys' own cluster centre, and a centroid far from every key.
            for centroid in [c[..dim].to_vec(), vec![0.0; dim]] {
                let codes: Vec<Vec<u8>> = keys
                    .chunks_exact(dim)
                    .map(|k| {
                        let mut out = vec![0u8; code_size(dim)];
                        encode(&rotation, k, &centroid, &mut out);
                        out
                    })
                    .collect();
                for q in queries.chunks_exact(dim) {
                    let wide: Vec<f32> = q.iter().map(|v| v.to_f32()).collect();
                    let mut rotated_centroid = Vec::new();
                    rotation.apply(&centroid, &mut rotated_centroid);
                    let lq = CodedQuery::new(&rotation, &wide)
                        .for_list(&rotated_centroid, dot(&centroid, &centroid));
                    let mut exact: Vec<f64> = keys
                        .chunks_exact(dim)
                        .map(|k| metric.distance(q, k))
                        .collect();
                    for (k, code) in codes.iter().enumerate() {
                        let (lower, upper) = lq.bounds(metric, code);
                        total += 1;
                        if lower <= exact[k] && exact[k] <= upper {
                            below += 1;
                        }
                    }
                    exact.sort_by(f64::total_cmp);
                    let tenth = exact[9];
                    pruned += codes
                        .iter()
                        .filter(|code| lq.bounds(metric, code).0 > tenth)
                        .count();
                }
            }
            // At CONFIDENCE standard errors a bound fails for a few entries in a thousand.
            let failed = total - below;
            eprintln!("{metric:?}: {failed} of {total} bounds failed");
            assert!(
                failed * 200 <= total,
                "{metric:?}: at most one pair of bounds in 200 fails ({failed} of {total})"
            );
            assert!(
                pruned * 2 > total,
                "{metric:?}: most entries are ruled out by their bound ({pruned} of {total})"
            );
        }
    }
}
