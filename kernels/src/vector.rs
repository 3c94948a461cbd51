//! Vector kernels for skill keys: inner product, cosine distance and squared L2 distance over
//! f32 and f16 slices.
//!
//! Every kernel has a scalar reference (`scalar::*`, f64 accumulation: the most accurate answer)
//! and a fast path through simsimd, which picks the best instruction set of the running CPU at
//! run time (AVX-512, AVX2/F16C, NEON, SVE, or its own serial code). Tests hold every fast path
//! to its scalar twin for every length from 1 to 600. The batched kernels score one query against
//! many keys stored contiguously (row-major, `dim` values per key), the layout the key index and
//! KeyOpt scoring read.
//!
//! simsimd's Sapphire Rapids kernels (AVX512-FP16) add f16 products in f16: results come back
//! with f16 resolution (about 3 decimal digits; measured errors of 1.5e-4 at length 2), enough to
//! reorder close candidates. The workspace's `.cargo/config.toml` builds simsimd without that
//! target (`SIMSIMD_TARGET_SAPPHIRE=0`), so f16 inputs are widened and summed in f32 on every CPU;
//! `f16_kernels_match_scalar_at_every_length` fails if that is lost.
//!
//! On such CPUs simsimd's f16 inner product is its AVX2/F16C kernel: 8 lanes and one chain of
//! dependent additions, a third of a key index scan's time. [`dot_f16`] runs its own AVX-512
//! kernel where the CPU has AVX-512F (16 lanes widened to f32, four independent sums); the index
//! and the SQL operators both call [`dot_f16`], so they still agree bit for bit.

use half::f16;
use simsimd::SpatialSimilarity;

/// Dimension of a skill key.
pub const KEY_DIM: usize = 512;

/// Reinterprets `half::f16` values as simsimd's f16.
fn as_simsimd_f16(x: &[f16]) -> &[simsimd::f16] {
    // SAFETY: both `half::f16` and `simsimd::f16` are `#[repr(transparent)]` wrappers of a u16,
    // so the slices have the same size, alignment and bit validity; the lifetime is carried over.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<simsimd::f16>(), x.len()) }
}

fn check_len(a: usize, b: usize) {
    assert_eq!(a, b, "vector kernels need equal lengths ({a} vs {b})");
}

/// Scalar reference kernels: f64 accumulation, no SIMD.
pub mod scalar {
    use half::f16;

    pub fn dot(a: &[f32], b: &[f32]) -> f64 {
        a.iter()
            .zip(b)
            .fold(0.0, |s, (x, y)| s + *x as f64 * *y as f64)
    }

    pub fn l2sq(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).fold(0.0, |s, (x, y)| {
            let d = *x as f64 - *y as f64;
            s + d * d
        })
    }

    /// 1 − cos(a, b); 1 when either vector is zero (no direction: treated as orthogonal).
    pub fn cos_distance(a: &[f32], b: &[f32]) -> f64 {
        let (ab, aa, bb) = a
            .iter()
            .zip(b)
            .fold((0.0, 0.0, 0.0), |(ab, aa, bb), (x, y)| {
                let (x, y) = (*x as f64, *y as f64);
                (ab + x * y, aa + x * x, bb + y * y)
            });
        if aa == 0.0 || bb == 0.0 {
            1.0
        } else {
            1.0 - ab / (aa.sqrt() * bb.sqrt())
        }
    }

    fn widen(x: &[f16]) -> Vec<f32> {
        x.iter().map(|v| v.to_f32()).collect()
    }

    pub fn dot_f16(a: &[f16], b: &[f16]) -> f64 {
        dot(&widen(a), &widen(b))
    }

    pub fn l2sq_f16(a: &[f16], b: &[f16]) -> f64 {
        l2sq(&widen(a), &widen(b))
    }

    pub fn cos_distance_f16(a: &[f16], b: &[f16]) -> f64 {
        cos_distance(&widen(a), &widen(b))
    }
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    check_len(a.len(), b.len());
    <f32 as SpatialSimilarity>::dot(a, b).unwrap_or_else(|| scalar::dot(a, b)) as f32
}

pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    check_len(a.len(), b.len());
    <f32 as SpatialSimilarity>::l2sq(a, b).unwrap_or_else(|| scalar::l2sq(a, b)) as f32
}

/// Cosine distance 1 − cos(a, b).
pub fn cos_distance(a: &[f32], b: &[f32]) -> f32 {
    check_len(a.len(), b.len());
    <f32 as SpatialSimilarity>::cos(a, b).unwrap_or_else(|| scalar::cos_distance(a, b)) as f32
}

pub fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    check_len(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if wide_f16::runs_here() {
        // SAFETY: the CPU has AVX-512F (checked just above); the lengths are equal.
        return unsafe { wide_f16::dot(a, b) };
    }
    simsimd_dot_f16(a, b)
}

fn simsimd_dot_f16(a: &[f16], b: &[f16]) -> f32 {
    <simsimd::f16 as SpatialSimilarity>::dot(as_simsimd_f16(a), as_simsimd_f16(b))
        .unwrap_or_else(|| scalar::dot_f16(a, b)) as f32
}

/// An f16 query widened to f32 once, for many inner products with f16 keys: each product
/// widens only the key. f16 → f32 is exact, and [`WideQuery::dot`] sums in [`dot_f16`]'s
/// order, so the two agree bit for bit.
#[derive(Clone, Debug, Default)]
pub struct WideQuery {
    narrow: Vec<f16>,
    wide: Vec<f32>,
}

impl WideQuery {
    pub fn new(query: &[f16]) -> WideQuery {
        WideQuery {
            narrow: query.to_vec(),
            wide: query.iter().map(|x| x.to_f32()).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.narrow.len()
    }

    pub fn is_empty(&self) -> bool {
        self.narrow.is_empty()
    }

    /// The query as given.
    pub fn values(&self) -> &[f16] {
        &self.narrow
    }

    /// The query in f32 (exactly its values).
    pub fn widened(&self) -> &[f32] {
        &self.wide
    }

    /// Exactly `dot_f16(query, key)`.
    pub fn dot(&self, key: &[f16]) -> f32 {
        check_len(self.narrow.len(), key.len());
        #[cfg(target_arch = "x86_64")]
        if wide_f16::runs_here() {
            // SAFETY: the CPU has AVX-512F (checked just above); the lengths are equal.
            return unsafe { wide_f16::dot_wide(&self.wide, key) };
        }
        simsimd_dot_f16(&self.narrow, key)
    }
}

/// The f16 inner product on AVX-512F: 16 values a load, widened to f32 (`vcvtph2ps`), four
/// independent fused multiply-add chains, the last < 16 values in scalar f32. `dot` widens
/// both sides, `dot_wide` takes the first already widened; they add the same products in the
/// same order.
#[cfg(target_arch = "x86_64")]
mod wide_f16 {
    use half::f16;
    use std::arch::x86_64::*;

    /// Whether this CPU has AVX-512F (std caches the detection).
    pub fn runs_here() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
    }

    /// One kernel body for both loaders of `a`: `$load_a(i)` is chunk i (16 values) of `a` as
    /// f32 lanes, `$a_at(i)` value i as f32.
    macro_rules! dot_body {
        ($a:ident, $b:ident, $load_a:expr, $a_at:expr) => {{
            let n = $a.len().min($b.len());
            let pb = $b.as_ptr() as *const __m256i;
            let mut acc = [_mm512_setzero_ps(); 4];
            let chunks = n / 16;
            let mut c = 0;
            while c + 4 <= chunks {
                for (j, sum) in acc.iter_mut().enumerate() {
                    *sum = _mm512_fmadd_ps($load_a(c + j), widen(pb, c + j), *sum);
                }
                c += 4;
            }
            while c < chunks {
                acc[0] = _mm512_fmadd_ps($load_a(c), widen(pb, c), acc[0]);
                c += 1;
            }
            let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            let mut total = _mm512_reduce_add_ps(sum);
            for i in chunks * 16..n {
                total += $a_at(i) * $b[i].to_f32();
            }
            total
        }};
    }

    /// # Safety
    /// The CPU has AVX-512F, and `a` and `b` have the same length.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot(a: &[f16], b: &[f16]) -> f32 {
        let pa = a.as_ptr() as *const __m256i;
        dot_body!(a, b, |i| widen(pa, i), |i: usize| a[i].to_f32())
    }

    /// # Safety
    /// The CPU has AVX-512F, and `a` and `b` have the same length.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_wide(a: &[f32], b: &[f16]) -> f32 {
        let pa = a.as_ptr();
        dot_body!(
            a,
            b,
            |i: usize| _mm512_loadu_ps(pa.add(16 * i)),
            |i: usize| a[i]
        )
    }

    /// The 16 values of chunk `i` (32 bytes) widened to f32; an unaligned load, so any f16
    /// slice will do.
    ///
    /// # Safety
    /// The CPU has AVX-512F, and chunk `i` lies inside the slice `p` points into.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn widen(p: *const __m256i, i: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p.add(i)))
    }
}

pub fn l2sq_f16(a: &[f16], b: &[f16]) -> f32 {
    check_len(a.len(), b.len());
    <simsimd::f16 as SpatialSimilarity>::l2sq(as_simsimd_f16(a), as_simsimd_f16(b))
        .unwrap_or_else(|| scalar::l2sq_f16(a, b)) as f32
}

pub fn cos_distance_f16(a: &[f16], b: &[f16]) -> f32 {
    check_len(a.len(), b.len());
    <simsimd::f16 as SpatialSimilarity>::cos(as_simsimd_f16(a), as_simsimd_f16(b))
        .unwrap_or_else(|| scalar::cos_distance_f16(a, b)) as f32
}

/// Inner product of `query` with every key in `keys` (row-major, `query.len()` values per key).
/// `out` receives one score per key.
pub fn dot_batch(query: &[f32], keys: &[f32], out: &mut [f32]) {
    score_rows(query, keys, out, dot);
}

/// [`dot_batch`] over f16 keys (half the bytes per key).
pub fn dot_batch_f16(query: &[f16], keys: &[f16], out: &mut [f32]) {
    score_rows(query, keys, out, dot_f16);
}

fn score_rows<T>(query: &[T], keys: &[T], out: &mut [f32], kernel: fn(&[T], &[T]) -> f32) {
    let dim = query.len();
    assert!(
        dim > 0 && keys.len() == dim * out.len(),
        "dot_batch: {} keys of {dim} need {} values, got {}",
        out.len(),
        dim * out.len(),
        keys.len()
    );
    for (row, score) in keys.chunks_exact(dim).zip(out.iter_mut()) {
        *score = kernel(query, row);
    }
}

/// Names the instruction sets simsimd found on this CPU (for benchmark reports).
pub fn simd_capabilities() -> Vec<&'static str> {
    use simsimd::capabilities as c;
    let all: [(&str, fn() -> bool); 8] = [
        ("haswell", c::uses_haswell),
        ("skylake", c::uses_skylake),
        ("ice", c::uses_ice),
        ("genoa", c::uses_genoa),
        ("sapphire", c::uses_sapphire),
        ("neon", c::uses_neon),
        ("neon_f16", c::uses_neon_f16),
        ("sve", c::uses_sve),
    ];
    all.iter().filter(|(_, f)| f()).map(|(n, _)| *n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random values in [-1, 1) (SplitMix64), so failures reproduce.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn close(fast: f32, reference: f64, rel: f64, what: &str, n: usize) {
        let err = (fast as f64 - reference).abs();
        assert!(
            err <= rel * (1.0 + reference.abs()),
            "{what} at length {n}: fast {fast}, scalar {reference}, error {err}"
        );
    }

    fn lengths() -> impl Iterator<Item = usize> {
        (1..=600).chain([KEY_DIM, 1024, 1025])
    }

    #[test]
    fn f32_kernels_match_scalar_at_every_length() {
        for n in lengths() {
            let (a, b) = (values(n as u64, n), values(1000 + n as u64, n));
            close(dot(&a, &b), scalar::dot(&a, &b), 1e-5, "dot", n);
            close(l2sq(&a, &b), scalar::l2sq(&a, &b), 1e-5, "l2sq", n);
            close(
                cos_distance(&a, &b),
                scalar::cos_distance(&a, &b),
                1e-5,
                "cos",
                n,
            );
        }
    }

    #[test]
    fn f16_kernels_match_scalar_at_every_length() {
        for n in lengths() {
            let a: Vec<f16> = values(n as u64, n).into_iter().map(f16::from_f32).collect();
            let b: Vec<f16> = values(2000 + n as u64, n)
                .into_iter()
                .map(f16::from_f32)
                .collect();
            // simsimd accumulates f16 products in f32: allow f32 rounding over n terms
            close(dot_f16(&a, &b), scalar::dot_f16(&a, &b), 1e-4, "dot_f16", n);
            close(
                l2sq_f16(&a, &b),
                scalar::l2sq_f16(&a, &b),
                1e-4,
                "l2sq_f16",
                n,
            );
            close(
                cos_distance_f16(&a, &b),
                scalar::cos_distance_f16(&a, &b),
                1e-3,
                "cos_f16",
                n,
            );
        }
    }

    /// [`values`] rounded to f16.
    fn halves(seed: u64, n: usize) -> Vec<f16> {
        values(seed, n).into_iter().map(f16::from_f32).collect()
    }

    /// The AVX-512 kernel and simsimd's agree to f32 rounding at every length (where the CPU
    /// has AVX-512F; elsewhere `dot_f16` is simsimd's and this compares it with itself).
    #[test]
    fn wide_f16_dot_matches_simsimd() {
        for n in lengths() {
            let (a, b) = (halves(3000 + n as u64, n), halves(4000 + n as u64, n));
            let reference = simsimd_dot_f16(&a, &b) as f64;
            close(dot_f16(&a, &b), reference, 1e-5, "dot_f16 vs simsimd", n);
        }
    }

    /// A widened query's products are `dot_f16`'s, bit for bit, at every length.
    #[test]
    fn wide_query_equals_dot_f16() {
        for n in lengths() {
            let (a, b) = (halves(5000 + n as u64, n), halves(6000 + n as u64, n));
            let q = WideQuery::new(&a);
            assert_eq!(q.dot(&b).to_bits(), dot_f16(&a, &b).to_bits(), "length {n}");
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
        assert_eq!(l2sq(&[1.0, 2.0], &[4.0, 6.0]), 25.0);
        assert!(cos_distance(&[1.0, 0.0], &[0.0, 1.0]) - 1.0 < 1e-6);
        assert!(cos_distance(&[1.0, 1.0], &[2.0, 2.0]).abs() < 1e-6);
        assert_eq!(scalar::cos_distance(&[0.0, 0.0], &[1.0, 0.0]), 1.0);
        let h = |v: &[f32]| v.iter().map(|x| f16::from_f32(*x)).collect::<Vec<_>>();
        assert_eq!(dot_f16(&h(&[1.0, 2.0, 3.0]), &h(&[4.0, 5.0, 6.0])), 32.0);
    }

    #[test]
    fn batched_kernels_equal_row_by_row() {
        let dim = KEY_DIM;
        let rows = 37;
        let q = values(7, dim);
        let keys = values(8, dim * rows);
        let mut out = vec![0.0; rows];
        dot_batch(&q, &keys, &mut out);
        for (i, row) in keys.chunks_exact(dim).enumerate() {
            assert_eq!(out[i], dot(&q, row));
            close(out[i], scalar::dot(&q, row), 1e-5, "dot_batch", dim);
        }
        let qh: Vec<f16> = q.iter().map(|x| f16::from_f32(*x)).collect();
        let kh: Vec<f16> = keys.iter().map(|x| f16::from_f32(*x)).collect();
        dot_batch_f16(&qh, &kh, &mut out);
        for (i, row) in kh.chunks_exact(dim).enumerate() {
            assert_eq!(out[i], dot_f16(&qh, row));
        }
    }

    #[test]
    #[should_panic(expected = "equal lengths")]
    fn unequal_lengths_panic() {
        dot(&[1.0], &[1.0, 2.0]);
    }

    #[test]
    #[should_panic(expected = "dot_batch")]
    fn ragged_batch_panics() {
        dot_batch(&[1.0, 2.0], &[1.0, 2.0, 3.0], &mut [0.0; 2]);
    }
}
