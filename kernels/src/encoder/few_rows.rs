//! Dense products for few rows (a single query is 10–30 tokens): out += x·Wᵀ straight from the
//! checkpoint's row-major W (one row of `inputs` weights per output), with no packing.
//!
//! `gemm` packs the weight matrix into its own panel layout for every product; at a few rows
//! that copy costs more than the arithmetic, and a query's 24 products pack the model's 42 MB of
//! layer weights each time. Here each output's weight row is read once from memory and used from
//! L1 for every input row: a tile of 2 rows × 6 outputs keeps 12 eight-lane partial sums in
//! registers, so each step loads 8 vectors for 12 fused multiply-adds (with 15 of the 16
//! vector registers; a 3 × 4 tile needs 17 and ran at half the speed). Output blocks are spread
//! over rayon's threads.
//!
//! x86-64 with AVX2 and FMA only (checked once at run time); elsewhere [`product`] answers
//! `false` and the caller uses `gemm`.

/// Rows up to which the few-rows product is used: every single text (the model reads at most
/// 256 tokens). From 80 to 256 rows it measured as fast as `gemm`, below that clearly faster;
/// batches of texts stay with `gemm`.
pub const MAX_ROWS: usize = 256;

/// Outputs per parallel task: 64 outputs of 384 inputs are 96 KB of weights.
const OUTPUTS_PER_TASK: usize = 64;

/// out[r][o] += Σ_k input[r][k]·weight[o][k] for `rows` rows; `out` already holds what is added
/// to (bias, residual). Returns false, having done nothing, where the CPU lacks AVX2+FMA or the
/// product is not one this path takes (more than [`MAX_ROWS`] rows, inputs not a multiple of 8).
pub fn product(
    input: &[f32],
    rows: usize,
    weight: &[f32],
    inputs: usize,
    outputs: usize,
    out: &mut [f32],
) -> bool {
    assert_eq!(input.len(), rows * inputs);
    assert_eq!(weight.len(), outputs * inputs);
    assert_eq!(out.len(), rows * outputs);
    #[cfg(target_arch = "x86_64")]
    {
        use super::bert::SharedRows;
        if rows == 0
            || rows > MAX_ROWS
            || !inputs.is_multiple_of(8)
            || !super::fastmath::has_avx2_fma()
        {
            return false;
        }
        let shared = SharedRows(out.as_mut_ptr());
        super::team::for_each(outputs.div_ceil(OUTPUTS_PER_TASK), |task| {
            let first = task * OUTPUTS_PER_TASK;
            let last = (first + OUTPUTS_PER_TASK).min(outputs);
            // SAFETY: the CPU has AVX2 and FMA (checked above); lengths are asserted above;
            // this task writes only columns first..last of `out`, which no other task
            // writes, and `out` outlives the parallel loop.
            unsafe {
                avx2::columns(
                    input,
                    rows,
                    weight,
                    inputs,
                    outputs,
                    first..last,
                    shared.at(0),
                )
            };
        });
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (input, rows, weight, inputs, outputs, out);
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    const LANES: usize = 8;
    /// Outputs per register tile.
    const TILE_OUTPUTS: usize = 6;
    /// Input rows per register tile.
    const TILE_ROWS: usize = 2;

    /// out[r][o] += x[r]·w[o] for every row r and o in `columns`.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `input` is rows × inputs, `weight` outputs × inputs,
    /// `out` points to rows × outputs floats; `columns` lies within 0..outputs; `inputs` is a
    /// multiple of 8; no other thread touches `out`'s `columns` meanwhile.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn columns(
        input: &[f32],
        rows: usize,
        weight: &[f32],
        inputs: usize,
        outputs: usize,
        columns: Range<usize>,
        out: *mut f32,
    ) {
        let mut o = columns.start;
        while o < columns.end {
            let width = (columns.end - o).min(TILE_OUTPUTS);
            let mut r = 0;
            while r < rows {
                let height = (rows - r).min(TILE_ROWS);
                tile(input, r, height, weight, o, width, inputs, outputs, out);
                r += height;
            }
            o += width;
        }
    }

    /// One tile: rows r..r+height against outputs o..o+width (height ≤ 2, width ≤ 6). Short
    /// tiles repeat their last row or output in the spare registers and do not store them.
    ///
    /// # Safety
    /// As [`columns`], with r+height ≤ rows and o+width ≤ outputs.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        input: &[f32],
        r: usize,
        height: usize,
        weight: &[f32],
        o: usize,
        width: usize,
        inputs: usize,
        outputs: usize,
        out: *mut f32,
    ) {
        let x: [*const f32; TILE_ROWS] =
            std::array::from_fn(|i| input.as_ptr().add((r + i.min(height - 1)) * inputs));
        let w: [*const f32; TILE_OUTPUTS] =
            std::array::from_fn(|j| weight.as_ptr().add((o + j.min(width - 1)) * inputs));
        let mut acc = [[_mm256_setzero_ps(); TILE_OUTPUTS]; TILE_ROWS];
        let mut k = 0;
        while k < inputs {
            let xv: [__m256; TILE_ROWS] = std::array::from_fn(|i| _mm256_loadu_ps(x[i].add(k)));
            for j in 0..TILE_OUTPUTS {
                let wv = _mm256_loadu_ps(w[j].add(k));
                for i in 0..TILE_ROWS {
                    acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
                }
            }
            k += LANES;
        }
        for (i, sums) in acc.iter().enumerate().take(height) {
            let row = out.add((r + i) * outputs + o);
            for (j, &partial) in sums.iter().enumerate().take(width) {
                *row.add(j) += sum(partial);
            }
        }
    }

    /// The sum of a vector's eight lanes.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sum(v: __m256) -> f32 {
        let pairs = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let halves = _mm_add_ps(pairs, _mm_movehl_ps(pairs, pairs));
        _mm_cvtss_f32(_mm_add_ss(halves, _mm_shuffle_ps(halves, halves, 1)))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// n values in [-1, 1) from `seed` (the product kernels' test operands).
    pub(in crate::encoder) fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = crate::rng::SplitMix64(seed);
        (0..n).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect()
    }

    /// out[r][o] += input[r]·weight[o] in f64: the definition the fast products are checked
    /// against.
    pub(in crate::encoder) fn reference(
        input: &[f32],
        rows: usize,
        weight: &[f32],
        inputs: usize,
        out: &mut [f32],
    ) {
        let outputs = weight.len() / inputs;
        for r in 0..rows {
            for o in 0..outputs {
                let dot: f64 = (0..inputs)
                    .map(|k| input[r * inputs + k] as f64 * weight[o * inputs + k] as f64)
                    .sum();
                out[r * outputs + o] += dot as f32;
            }
        }
    }

    #[test]
    fn matches_the_definition_for_every_tile_shape() {
        let mut rng = crate::rng::SplitMix64(11);
        let mut value = || (rng.unit() * 2.0 - 1.0) as f32;
        // Rows and outputs that leave short tiles (rows % 3, outputs % 4 and % 64 non-zero).
        for (rows, inputs, outputs) in [
            (1, 8, 1),
            (2, 16, 5),
            (7, 384, 131),
            (20, 96, 70),
            (64, 40, 9),
        ] {
            let input: Vec<f32> = (0..rows * inputs).map(|_| value()).collect();
            let weight: Vec<f32> = (0..outputs * inputs).map(|_| value()).collect();
            let start: Vec<f32> = (0..rows * outputs).map(|_| value()).collect();
            let mut want = start.clone();
            reference(&input, rows, &weight, inputs, &mut want);
            let mut got = start.clone();
            if !product(&input, rows, &weight, inputs, outputs, &mut got) {
                eprintln!("no AVX2+FMA here: the few-rows product is not used");
                return;
            }
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() < 1e-4 * (1.0 + w.abs()),
                    "{rows}×{inputs}→{outputs}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn declines_what_it_does_not_take() {
        let (inputs, outputs) = (12, 3);
        let mut out = vec![0.0; outputs];
        assert!(!product(
            &[1.0; 12], 1, &[1.0; 36], inputs, outputs, &mut out
        ));
        let rows = MAX_ROWS + 1;
        let mut out = vec![0.0; rows * 2];
        assert!(!product(
            &vec![1.0; rows * 8],
            rows,
            &[1.0; 16],
            8,
            2,
            &mut out
        ));
        assert!(out.iter().all(|&v| v == 0.0));
    }
}
