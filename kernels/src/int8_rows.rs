//! Rows quantised to 8-bit integers, for ranking many of them against one query cheaply.
//!
//! Each row keeps its own scale (its largest magnitude maps to 127); a query is quantised the
//! same way when it is scored. A product is then an integer dot product, exact in i32, times the
//! two scales: on AVX-512 VNNI, `vpdpbusd` multiplies 64 byte pairs per instruction. A row is a
//! quarter of its f32 bytes, which is what matters when the rows are streamed from the cache for
//! every query (the key index's centroids). The values are approximations (about three
//! significant digits), for choosing what to read, not for the distances a query returns.

/// Rows of `dim` values as i8 codes with a scale per row.
#[derive(Clone, Debug, Default)]
pub struct Int8Rows {
    dim: usize,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// Σ codes per row: what the unsigned query offset adds to `vpdpbusd`'s sums.
    code_sums: Vec<i32>,
}

/// `values` as i8 codes (largest magnitude → ±127) and the scale that maps a code back (also
/// the encoder's 8-bit weights, `encoder::int8_rows`).
pub(crate) fn quantise(values: &[f32], codes: &mut Vec<i8>) -> f32 {
    let largest = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = if largest > 0.0 && largest.is_finite() {
        largest / 127.0
    } else {
        0.0
    };
    codes.extend(values.iter().map(|v| {
        if scale == 0.0 {
            0
        } else {
            (v / scale).round().clamp(-127.0, 127.0) as i8
        }
    }));
    scale
}

impl Int8Rows {
    /// `rows` (row-major, `dim` values each).
    pub fn new(rows: &[f32], dim: usize) -> Int8Rows {
        assert!(
            dim > 0 && rows.len().is_multiple_of(dim),
            "rows are not whole rows of {dim}"
        );
        let mut codes = Vec::with_capacity(rows.len());
        let mut scales = Vec::with_capacity(rows.len() / dim);
        let mut code_sums = Vec::with_capacity(rows.len() / dim);
        for row in rows.chunks_exact(dim) {
            let start = codes.len();
            scales.push(quantise(row, &mut codes));
            code_sums.push(codes[start..].iter().map(|&c| c as i32).sum());
        }
        Int8Rows {
            dim,
            codes,
            scales,
            code_sums,
        }
    }

    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    /// Approximate inner products of `query` (`dim` values) with every row.
    pub fn dots(&self, query: &[f32], out: &mut [f32]) {
        assert_eq!(
            query.len(),
            self.dim,
            "a {}-d query for {}-d rows",
            query.len(),
            self.dim
        );
        assert_eq!(out.len(), self.len(), "one output per row");
        let mut q = Vec::with_capacity(self.dim);
        let q_scale = quantise(query, &mut q);
        let mut sums = vec![0i32; self.len()];
        self.integer_dots(&q, &mut sums);
        for ((o, &s), &scale) in out.iter_mut().zip(&sums).zip(&self.scales) {
            *o = s as f32 * scale * q_scale;
        }
    }

    /// Σ q·code per row, exactly.
    fn integer_dots(&self, q: &[i8], out: &mut [i32]) {
        #[cfg(target_arch = "x86_64")]
        if self.dim.is_multiple_of(64) && vnni::runs_here() {
            // The unsigned operand of vpdpbusd: q + 128 (in 1..=255, as q ≥ −127).
            let unsigned: Vec<u8> = q.iter().map(|&v| (v as i16 + 128) as u8).collect();
            // SAFETY: the CPU has AVX-512 VNNI (checked just above); `unsigned` has `dim`
            // values, `codes` `dim` per row and `out` one per row; `dim` is a multiple of 64.
            unsafe { vnni::dots(&unsigned, &self.codes, self.dim, out) };
            for (o, &sum) in out.iter_mut().zip(&self.code_sums) {
                *o -= 128 * sum;
            }
            return;
        }
        self.integer_dots_scalar(q, out);
    }

    fn integer_dots_scalar(&self, q: &[i8], out: &mut [i32]) {
        for (o, row) in out.iter_mut().zip(self.codes.chunks_exact(self.dim)) {
            *o = q.iter().zip(row).map(|(&a, &b)| a as i32 * b as i32).sum();
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    /// Whether this CPU has AVX-512F, BW and VNNI (std caches the detection).
    pub fn runs_here() -> bool {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512f") && has!("avx512bw") && has!("avx512vnni")
    }

    /// `out[r] = Σ_i unsigned[i] · codes[r·dim + i]` (u8 × i8, i32 sums: at most
    /// 255·127·dim, far inside i32 for key dimensions).
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VNNI; `dim` is a multiple of 64, `unsigned` has `dim`
    /// values and `codes` `dim` per entry of `out`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dots(unsigned: &[u8], codes: &[i8], dim: usize, out: &mut [i32]) {
        let chunks = dim / 64;
        let q = unsigned.as_ptr();
        for (r, o) in out.iter_mut().enumerate() {
            let row = codes.as_ptr().add(r * dim);
            let mut acc = _mm512_setzero_si512();
            for c in 0..chunks {
                let a = _mm512_loadu_si512(q.add(64 * c) as *const _);
                let b = _mm512_loadu_si512(row.add(64 * c) as *const _);
                acc = _mm512_dpbusd_epi32(acc, a, b);
            }
            *o = _mm512_reduce_add_epi32(acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn random(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.unit() as f32 * 2.0 - 1.0).collect()
    }

    /// The fast integer sums equal the scalar ones exactly, and the scaled products are within
    /// quantisation error of the f64 inner products.
    #[test]
    fn integer_sums_are_exact_and_products_close() {
        let mut rng = SplitMix64(3);
        for dim in [64, 512, 100] {
            let rows = random(&mut rng, 300 * dim);
            let q8rows = Int8Rows::new(&rows, dim);
            assert_eq!(q8rows.len(), 300);
            for _ in 0..5 {
                let query = random(&mut rng, dim);
                let mut codes = Vec::new();
                quantise(&query, &mut codes);
                let (mut fast, mut slow) = (vec![0; 300], vec![0; 300]);
                q8rows.integer_dots(&codes, &mut fast);
                q8rows.integer_dots_scalar(&codes, &mut slow);
                assert_eq!(fast, slow, "dim {dim}");
                let mut approx = vec![0.0; 300];
                q8rows.dots(&query, &mut approx);
                for (row, &a) in rows.chunks_exact(dim).zip(&approx) {
                    let exact: f64 = row
                        .iter()
                        .zip(&query)
                        .map(|(x, y)| *x as f64 * *y as f64)
                        .sum();
                    // Each code is within half a step (1/254 of the largest value) of its value;
                    // over dim terms of values in ±1 the errors add up to about 0.0019·√dim
                    // (one standard deviation).
                    let bound = 0.012 * (dim as f64).sqrt();
                    assert!(
                        (a as f64 - exact).abs() <= bound,
                        "{a} vs {exact} (dim {dim})"
                    );
                }
            }
        }
    }

    #[test]
    fn zero_rows_and_queries_score_zero() {
        let rows = Int8Rows::new(&[0.0; 128], 64);
        let mut out = [1.0; 2];
        rows.dots(&[0.5; 64], &mut out);
        assert_eq!(out, [0.0, 0.0]);
        let rows = Int8Rows::new(&[0.25; 64], 64);
        let mut out = [1.0];
        rows.dots(&[0.0; 64], &mut out);
        assert_eq!(out, [0.0]);
    }
}
