//! 8-bit products for a query's few rows: out += x·Wᵀ with the weights as signed 8-bit integers
//! (one scale per output) and each input row as unsigned 8-bit integers with a zero point (one
//! step and zero per row, over the row's own range), multiplied by AVX-512 VNNI's `vpdpbusd`:
//! 64 multiply-adds per instruction, twice `vpdpwssd`'s, reading half the weight bytes.
//!
//! Why: the products are about half of a request's forward pass in 16-bit integers
//! ([`super::int16_rows`]), at about one `vpdpwssd` a cycle. What it costs: request keys within
//! cosine 0.997 of f32 (0.9995 on average, smoothed), against 0.99999 for the 16-bit products;
//! retrieval quality measured equal in `benches/RESULTS.md` ("8-bit products").
//!
//! An input row x is stored as q = round(x / step) + zero in 0..=255 (its range widened to take
//! 0, so that zero is a whole step), so Σ_k x_k·w_k = step·w_scale·(Σ_k q_k·w_k − zero·Σ_k w_k):
//! the weights' sums per output are kept with them. The integer sums are exact: each lane
//! receives at most 255·127 per input, so a product of up to [`MAX_INPUTS`] inputs cannot
//! overflow 32 bits, even with the zero point's correction.
//!
//! Smoothing ([`Int8Weight::smoothed`]): a few input channels of the model's products carry values
//! tens of times larger than the rest in every row (layer-norm outputs above all), so a row's
//! 255 steps span them and the other channels get only a few steps each. Each input channel j
//! then has a factor c_j: rows are quantised as x_j·c_j and the weights as W_oj / c_j, the same
//! product in exact arithmetic, with the channels' ranges evened out (SmoothQuant's migration of
//! the range from activations to weights).
//!
//! Layout: the weights are packed once into panels of 64 outputs, each panel a run of input
//! quads holding the 64 outputs' four weights side by side: one 512-bit load gives 16 outputs'
//! quads, and each 32-bit lane is one output. x86-64 with AVX-512 VNNI only (checked once at
//! run time); elsewhere [`product`] answers `false` and the caller takes the 16-bit product.

use std::sync::OnceLock;

use super::int16_rows::Start;

/// Steps of an input row's range on the unsigned grid.
const INPUT_STEPS: f32 = 255.0;
/// Outputs per panel (and per parallel task): four 512-bit vectors of 16 lanes.
const PANEL: usize = 64;
/// Input quads of a panel (8 KB) read from memory once and used by every row tile from L1.
const QUADS_PER_BLOCK: usize = 32;
/// Most inputs a product takes: |Σ q·w − zero·Σ w| ≤ 2·255·127·inputs < 2³¹.
const MAX_INPUTS: usize = 16_384;

/// A weight matrix (outputs × inputs) on the signed 8-bit grid, packed in panels.
pub struct Int8Weight {
    /// Panel p, input quad k, output j of the panel, member t of the quad at
    /// ((p·quads + k)·PANEL + j)·4 + t; outputs past the last are zeros.
    packed: Vec<i8>,
    /// Per output (padded to whole panels with zeros): the weight value of one integer step.
    scales: Vec<f32>,
    /// Per output (padded likewise): the sum of its integer weights, for the zero point.
    sums: Vec<i32>,
    /// Per input channel, the factor its values are multiplied by before the row's grid
    /// (the weights were divided by it); None: every factor is 1.
    input_factors: Option<Vec<f32>>,
    inputs: usize,
    outputs: usize,
}

impl Int8Weight {
    /// Rounds each output's weights (`weight` is outputs × inputs, row-major) to the nearest of
    /// 2·127+1 steps over their own largest magnitude, and packs them; None where a weight is
    /// not finite, inputs is not a multiple of 4, or there are more than [`MAX_INPUTS`].
    pub fn new(weight: &[f32], inputs: usize, outputs: usize) -> Option<Int8Weight> {
        Self::packed(weight, inputs, outputs, None)
    }

    /// As [`Int8Weight::new`] for inputs multiplied by `factors` (one per input, positive and
    /// finite) before their row's grid: the weights are divided by them, so that the product
    /// stays x·Wᵀ. None also where a factor is not positive and finite.
    pub fn smoothed(
        weight: &[f32],
        inputs: usize,
        outputs: usize,
        factors: &[f32],
    ) -> Option<Int8Weight> {
        assert_eq!(factors.len(), inputs);
        if !factors.iter().all(|&c| c.is_finite() && c > 0.0) {
            return None;
        }
        Self::packed(weight, inputs, outputs, Some(factors))
    }

    fn packed(
        weight: &[f32],
        inputs: usize,
        outputs: usize,
        factors: Option<&[f32]>,
    ) -> Option<Int8Weight> {
        assert_eq!(weight.len(), inputs * outputs);
        if !inputs.is_multiple_of(4) || inputs > MAX_INPUTS {
            return None;
        }
        let panels = outputs.div_ceil(PANEL);
        let quads = inputs / 4;
        let mut packed = vec![0i8; panels * PANEL * inputs];
        let mut scales = vec![0f32; panels * PANEL];
        let mut sums = vec![0i32; panels * PANEL];
        let mut row = Vec::with_capacity(inputs);
        let mut divided = Vec::with_capacity(if factors.is_some() { inputs } else { 0 });
        for (o, weights) in weight.chunks_exact(inputs.max(1)).enumerate() {
            let weights = match factors {
                Some(factors) => {
                    divided.clear();
                    divided.extend(weights.iter().zip(factors).map(|(w, c)| w / c));
                    divided.as_slice()
                }
                None => weights,
            };
            scales[o] = quantize_weights(weights, &mut row)?;
            sums[o] = row.iter().map(|&w| w as i32).sum();
            let (p, j) = (o / PANEL, o % PANEL);
            for k in 0..quads {
                let at = ((p * quads + k) * PANEL + j) * 4;
                packed[at..at + 4].copy_from_slice(&row[4 * k..4 * k + 4]);
            }
        }
        Some(Int8Weight {
            packed,
            scales,
            sums,
            input_factors: factors.map(<[f32]>::to_vec),
            inputs,
            outputs,
        })
    }
}

/// The smoothing factor of an input channel whose values reach `activations` in magnitude
/// (over calibration rows) and whose weights reach `weights`: √(weights / activations), which
/// leaves the channel √(activations·weights) wide on both sides (SmoothQuant with migration
/// strength ½); 1 for a channel never seen or with no weight.
pub fn smoothing_factor(activations: f32, weights: f32) -> f32 {
    let c = (weights / activations).sqrt();
    if activations > 0.0 && weights > 0.0 && c.is_finite() && c > 0.0 {
        c
    } else {
        1.0
    }
}

/// One output's weights on the symmetric grid of ±127 steps (`crate::int8_rows::quantise`, as
/// the key index's centroids); returns the value of one step (0 for weights of zero), or None
/// where a weight is not finite.
fn quantize_weights(row: &[f32], out: &mut Vec<i8>) -> Option<f32> {
    if !row.iter().all(|v| v.is_finite()) {
        return None;
    }
    out.clear();
    Some(crate::int8_rows::quantise(row, out))
}

/// Where an input row lies on its grid: x ≈ step·(q − zero).
#[derive(Clone, Copy, Debug, PartialEq)]
struct RowGrid {
    step: f32,
    zero: i32,
}

/// The grid of a row whose smallest and largest values are `low` and `high` (both finite):
/// 255 steps over [min(low, 0), max(high, 0)], zero at a whole step. A row of zeros gets step 0.
fn grid_of(low: f32, high: f32) -> (RowGrid, f32) {
    let (low, high) = (low.min(0.0), high.max(0.0));
    if high == low {
        return (RowGrid { step: 0.0, zero: 0 }, 0.0);
    }
    let inverse = INPUT_STEPS / (high - low);
    // -low·inverse lies in [0, 255]: the zero point is on the grid.
    let zero = (-low * inverse).round_ties_even() as i32;
    (
        RowGrid {
            step: (high - low) / INPUT_STEPS,
            zero,
        },
        inverse,
    )
}

/// A row, each value times its factor (None: 1), on its unsigned grid (the definition
/// [`vnni::quantize_row`] follows bit for bit); None where a value is not finite.
#[cfg(test)]
fn quantize_row(row: &[f32], factors: Option<&[f32]>, out: &mut [u8]) -> Option<RowGrid> {
    if !row.iter().all(|v| v.is_finite()) {
        return None;
    }
    let row: Vec<f32> = match factors {
        Some(factors) => row.iter().zip(factors).map(|(v, c)| v * c).collect(),
        None => row.to_vec(),
    };
    let low = row.iter().fold(f32::INFINITY, |m, &v| m.min(v));
    let high = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let (grid, inverse) = grid_of(low, high);
    for (q, v) in out.iter_mut().zip(&row) {
        *q = ((v * inverse).round_ties_even() as i32 + grid.zero).clamp(0, 255) as u8;
    }
    Some(grid)
}

/// Whether this CPU has the instructions [`product`] needs (checked once).
pub fn available() -> bool {
    static HERE: OnceLock<bool> = OnceLock::new();
    *HERE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            has!("avx512f") && has!("avx512bw") && has!("avx512vnni")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// out[r][o] += Σ_k input[r][k]·weight[o][k] for `rows` rows, in parallel
/// ([`super::team::for_each`]); `out` already holds what is added to, or with `start` is
/// written whole from it. Returns false, having done nothing, where the CPU lacks AVX-512 VNNI
/// or the product is not one this path takes (more than `max_rows` rows, an input that is not
/// finite).
pub fn product(
    input: &[f32],
    rows: usize,
    weight: &Int8Weight,
    max_rows: usize,
    start: Option<&Start>,
    out: &mut [f32],
) -> bool {
    let (inputs, outputs) = (weight.inputs, weight.outputs);
    assert_eq!(input.len(), rows * inputs);
    assert_eq!(out.len(), rows * outputs);
    if let Some(start) = start {
        assert_eq!(start.bias.len(), outputs);
        assert!(start.residual.is_none_or(|r| r.len() == rows * outputs));
    }
    if rows == 0 || rows > max_rows || !available() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut x = vec![0u8; rows * inputs];
        let mut grids = Vec::with_capacity(rows);
        let factors = weight.input_factors.as_deref();
        for (row, q) in input.chunks_exact(inputs).zip(x.chunks_exact_mut(inputs)) {
            // SAFETY: the CPU has AVX-512 F and BW (`available`); q and the factors are as long
            // as row.
            match unsafe { vnni::quantize_row(row, factors, q) } {
                Some(grid) => grids.push(grid),
                None => return false,
            }
        }
        let shared = super::bert::SharedRows(out.as_mut_ptr());
        let job = Job {
            x: &x,
            grids: &grids,
            rows,
            weight,
            start,
        };
        super::team::for_each(outputs.div_ceil(PANEL), |panel| {
            // SAFETY: the CPU has AVX-512 VNNI (checked above); the lengths are asserted above
            // and the packing holds whole panels; this task writes only the panel's columns of
            // `out`, which no other task writes, and `out` outlives the parallel loop.
            unsafe { add_panel(&job, panel, shared.at(0)) };
        });
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The quantised operands of one product.
struct Job<'a> {
    x: &'a [u8],
    grids: &'a [RowGrid],
    rows: usize,
    weight: &'a Int8Weight,
    start: Option<&'a Start<'a>>,
}

/// The value of row r's integer sum against output o: step·w_scale·(sum − zero·Σ w), in this
/// order (the tests' scalar product computes it alike).
fn value(sum: i32, grid: RowGrid, weight_sum: i32, weight_scale: f32) -> f32 {
    (sum - grid.zero * weight_sum) as f32 * (weight_scale * grid.step)
}

/// out[r][o] += x[r]·w[o] for every row r and every output o of `panel`: the integer sums of
/// each block of [`QUADS_PER_BLOCK`] quads added up per row (rows × 64, in L1), then turned into
/// values and added to `out`.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VNNI; `job.x` is rows × inputs and `job.weight` holds
/// `panel`; `out` points to rows × outputs floats; no other thread touches the panel's columns
/// of `out` meanwhile.
#[cfg(target_arch = "x86_64")]
unsafe fn add_panel(job: &Job, panel: usize, out: *mut f32) {
    let w = job.weight;
    let quads = w.inputs / 4;
    let mut sums = vec![0i32; job.rows * PANEL];
    let mut k = 0;
    while k < quads {
        let block = k..(k + QUADS_PER_BLOCK).min(quads);
        k = block.end;
        // SAFETY: as this function's; `block` lies within the quads; `sums` is rows × 64.
        unsafe { vnni::add_block(job, panel, block, &mut sums) };
    }
    let first = panel * PANEL;
    let width = (w.outputs - first).min(PANEL);
    for (r, row_sums) in sums.chunks_exact(PANEL).enumerate() {
        // SAFETY: row r's columns first..first+width lie in `out` (rows × outputs), and only
        // this task writes them.
        let row = unsafe { std::slice::from_raw_parts_mut(out.add(r * w.outputs + first), width) };
        let start = job.start.map(|start| {
            let residual = start
                .residual
                .map(|residual| &residual[r * w.outputs + first..][..width]);
            (&start.bias[first..first + width], residual)
        });
        let weights = (
            &w.sums[first..first + width],
            &w.scales[first..first + width],
        );
        // SAFETY: the CPU has AVX-512 F (this function's contract); the slices are `width`
        // long or longer (row_sums: 64).
        unsafe { vnni::finish_row(row, start, &row_sums[..width], weights, job.grids[r]) };
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{grid_of, Job, RowGrid, PANEL};

    /// Lanes of a 16-lane step at `at` that lie within a row of `len` values.
    fn lanes(len: usize, at: usize) -> __mmask16 {
        let left = len - at;
        if left >= 16 {
            0xffff
        } else {
            (1u16 << left) - 1
        }
    }

    /// [`super::quantize_row`] in 16-lane steps (an input row is quantised for every product).
    ///
    /// # Safety
    /// The CPU supports AVX-512 F and BW; `out`, and `factors` where given, are as long as
    /// `row`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn quantize_row(
        row: &[f32],
        factors: Option<&[f32]>,
        out: &mut [u8],
    ) -> Option<RowGrid> {
        debug_assert_eq!(row.len(), out.len());
        debug_assert!(factors.is_none_or(|f| f.len() == row.len()));
        // Lanes past the row read 0 (either way).
        let load = |mask: __mmask16, at: usize| {
            let v = _mm512_maskz_loadu_ps(mask, row.as_ptr().add(at));
            match factors {
                Some(f) => _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, f.as_ptr().add(at))),
                None => v,
            }
        };
        let mut low = _mm512_set1_ps(f32::INFINITY);
        let mut high = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut not_finite: __mmask16 = 0;
        let finite_limit = _mm512_set1_ps(f32::MAX);
        let mut at = 0;
        while at < row.len() {
            let mask = lanes(row.len(), at);
            let v = load(mask, at);
            // NaN compares unordered and infinity above f32::MAX: either sets a bit.
            not_finite |= _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(_mm512_abs_ps(v), finite_limit);
            // Lanes past the row are 0, which the grid takes in anyway.
            low = _mm512_min_ps(low, v);
            high = _mm512_max_ps(high, v);
            at += 16;
        }
        if not_finite != 0 {
            return None;
        }
        let (grid, inverse) = grid_of(_mm512_reduce_min_ps(low), _mm512_reduce_max_ps(high));
        let inverse = _mm512_set1_ps(inverse);
        let zero = _mm512_set1_epi32(grid.zero);
        let (bottom, top) = (_mm512_setzero_si512(), _mm512_set1_epi32(255));
        let mut at = 0;
        while at < row.len() {
            let mask = lanes(row.len(), at);
            let v = load(mask, at);
            // Round to nearest (even), move by the zero point, keep within 0..=255, narrow.
            let q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, inverse)), zero);
            let q = _mm512_min_epi32(_mm512_max_epi32(q, bottom), top);
            _mm512_mask_cvtepi32_storeu_epi8(out.as_mut_ptr().add(at) as *mut _, mask, q);
            at += 16;
        }
        Some(grid)
    }

    /// Row values of a panel from its integer sums: out = start + value, where `start` is
    /// (bias, residual) as [`super::Start::fill`] adds them, else out += value. The same
    /// arithmetic as the scalar loop it is (LLVM vectorises it 16 lanes wide here; the crate's
    /// baseline gets four).
    ///
    /// # Safety
    /// The CPU supports AVX-512 F; every slice is at least as long as `row`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn finish_row(
        row: &mut [f32],
        start: Option<(&[f32], Option<&[f32]>)>,
        sums: &[i32],
        (weight_sums, scales): (&[i32], &[f32]),
        grid: RowGrid,
    ) {
        let values = sums
            .iter()
            .zip(weight_sums)
            .zip(scales)
            .map(|((&sum, &weight_sum), &scale)| super::value(sum, grid, weight_sum, scale));
        match start {
            None => row.iter_mut().zip(values).for_each(|(o, v)| *o += v),
            Some((bias, None)) => row
                .iter_mut()
                .zip(bias)
                .zip(values)
                .for_each(|((o, &b), v)| *o = b + v),
            Some((bias, Some(residual))) => row
                .iter_mut()
                .zip(bias)
                .zip(residual)
                .zip(values)
                .for_each(|(((o, &b), &add), v)| *o = (b + add) + v),
        }
    }

    /// Vectors of 16 outputs in a panel.
    const VECTORS: usize = PANEL / 16;
    /// Input rows per register tile: 6 × 4 sums, 4 weight vectors and one broadcast input quad
    /// are 29 of the 32 vector registers.
    const TILE_ROWS: usize = 6;

    /// The integer sums of every row against the panel's 64 outputs over the input quads of
    /// `block`, added to `sums` (rows × 64), in tiles of 6 rows.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F, BW and VNNI; `job.x` is rows × inputs and `job.weight` holds
    /// `panel`; `block` lies within the input quads.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn add_block(
        job: &Job,
        panel: usize,
        block: std::ops::Range<usize>,
        sums: &mut [i32],
    ) {
        assert_eq!(sums.len(), job.rows * PANEL);
        let mut r = 0;
        while r < job.rows {
            let height = (job.rows - r).min(TILE_ROWS);
            tile(job, panel, block.clone(), r, height, sums.as_mut_ptr());
            r += height;
        }
    }

    /// Rows r..r+height (height ≤ 6) against the panel's 64 outputs over the input quads of
    /// `block`, added to `sums`. Short tiles repeat their last row in the spare registers and
    /// do not store it.
    ///
    /// # Safety
    /// As [`add_block`], with r+height ≤ rows and `sums` pointing to rows × 64 integers.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile(
        job: &Job,
        panel: usize,
        block: std::ops::Range<usize>,
        r: usize,
        height: usize,
        sums: *mut i32,
    ) {
        let inputs = job.weight.inputs;
        let quads = inputs / 4;
        // Rows past r+height repeat the last row; each row's quads read as 32-bit values
        // (the rows are byte-aligned: read them unaligned).
        let xs: [*const i32; TILE_ROWS] = std::array::from_fn(|i| {
            job.x[(r + i.min(height - 1)) * inputs..].as_ptr() as *const i32
        });
        let weights = job.weight.packed.as_ptr().add(panel * quads * PANEL * 4);
        let mut acc = [[_mm512_setzero_si512(); VECTORS]; TILE_ROWS];
        for kk in block {
            let wv: [__m512i; VECTORS] = std::array::from_fn(|v| {
                _mm512_loadu_si512(weights.add((kk * PANEL + v * 16) * 4) as *const _)
            });
            for i in 0..TILE_ROWS {
                let quad = _mm512_set1_epi32(xs[i].add(kk).read_unaligned());
                for v in 0..VECTORS {
                    acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], quad, wv[v]);
                }
            }
        }
        for (i, row_acc) in acc.iter().enumerate().take(height) {
            let row = sums.add((r + i) * PANEL);
            for (v, &a) in row_acc.iter().enumerate() {
                let at = row.add(v * 16) as *mut __m512i;
                _mm512_storeu_si512(at, _mm512_add_epi32(_mm512_loadu_si512(at), a));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::few_rows::tests::{reference, values};
    use super::*;

    /// Whether the CPU runs the kernel (if not, the tests say so and check nothing else).
    fn here() -> bool {
        if !available() {
            eprintln!("no AVX-512 VNNI here: the 8-bit product is not used");
        }
        available()
    }

    /// The product as defined: every row and weight on its grid, integer sums, then
    /// [`value`]; what the kernel must give bit for bit.
    fn scalar_product(
        input: &[f32],
        rows: usize,
        weight: &[f32],
        inputs: usize,
        factors: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let outputs = weight.len() / inputs;
        let mut w = Vec::with_capacity(inputs);
        let mut x = vec![0u8; inputs];
        for o in 0..outputs {
            let mut weights = weight[o * inputs..][..inputs].to_vec();
            if let Some(factors) = factors {
                weights.iter_mut().zip(factors).for_each(|(w, c)| *w /= c);
            }
            let scale = quantize_weights(&weights, &mut w).unwrap();
            let weight_sum: i32 = w.iter().map(|&v| v as i32).sum();
            for r in 0..rows {
                let grid = quantize_row(&input[r * inputs..][..inputs], factors, &mut x).unwrap();
                let sum: i32 = x.iter().zip(&w).map(|(&a, &b)| a as i32 * b as i32).sum();
                out[r * outputs + o] += value(sum, grid, weight_sum, scale);
            }
        }
    }

    #[test]
    fn gives_the_defined_sums_bit_for_bit_and_the_exact_product_within_the_grid() {
        if !here() {
            return;
        }
        // Rows and outputs that leave short tiles (rows % 6, outputs % 64 non-zero), inputs
        // over several blocks and a part of one.
        for (rows, inputs, outputs) in [
            (1, 4, 1),
            (2, 64, 5),
            (7, 384, 131),
            (21, 1536, 70),
            (64, 96, 9),
            (5, 132, 3),
        ] {
            // Inputs all of one sign too: a zero point at either end of the grid.
            for shift in [0.0, 1.0, -1.0] {
                let input: Vec<f32> = values(rows * inputs, 3).iter().map(|v| v + shift).collect();
                let weight = values(outputs * inputs, 5);
                let start = values(rows * outputs, 7);
                let q = Int8Weight::new(&weight, inputs, outputs).unwrap();
                let mut got = start.clone();
                assert!(product(&input, rows, &q, 256, None, &mut got));
                let mut defined = start.clone();
                scalar_product(&input, rows, &weight, inputs, None, &mut defined);
                assert_eq!(got, defined, "{rows}×{inputs}→{outputs} shift {shift}");
                let mut want = start.clone();
                reference(&input, rows, &weight, inputs, &mut want);
                // Each product is off by at most half a step of each operand (the input's
                // range, ≤ 2, over 255; the weight's, ≤ 1, over 127) times the other operand
                // (≤ 2 and ≤ 1): a sum of `inputs` of them, plus f32 rounding.
                let bound = inputs as f32 * (1.0 / 255.0 + 1.0 / 127.0) + 1e-3;
                let mut worst = 0f32;
                for (g, w) in got.iter().zip(&want) {
                    worst = worst.max((g - w).abs());
                    assert!(
                        (g - w).abs() < bound,
                        "{rows}×{inputs}→{outputs}: {g} vs {w}"
                    );
                }
                // Not exact: the test would pass an f32 product by mistake otherwise.
                assert!(worst > 0.0, "{rows}×{inputs}→{outputs} matched exactly");
            }
        }
    }

    #[test]
    fn a_start_given_is_the_start_filled_in_first_bit_for_bit() {
        if !here() {
            return;
        }
        for (rows, inputs, outputs) in [(1, 32, 1), (7, 384, 131), (30, 1536, 384)] {
            let input = values(rows * inputs, 3);
            let q = Int8Weight::new(&values(outputs * inputs, 5), inputs, outputs).unwrap();
            let bias = values(outputs, 11);
            let residual = values(rows * outputs, 13);
            for residual in [None, Some(residual.as_slice())] {
                let mut filled: Vec<f32> = (0..rows).flat_map(|_| bias.iter().copied()).collect();
                if let Some(residual) = residual {
                    filled.iter_mut().zip(residual).for_each(|(o, r)| *o += r);
                }
                assert!(product(&input, rows, &q, 256, None, &mut filled));
                let mut written = vec![f32::NAN; rows * outputs];
                let start = Start {
                    bias: &bias,
                    residual,
                };
                assert!(product(&input, rows, &q, 256, Some(&start), &mut written));
                assert_eq!(written, filled, "{rows}×{inputs}→{outputs}");
            }
        }
    }

    #[test]
    fn rows_are_quantised_as_defined() {
        if !here() {
            return;
        }
        for len in [1, 15, 16, 37, 384] {
            for shift in [0.0, 2.0, -2.0] {
                let mut row: Vec<f32> = values(len, len as u64).iter().map(|v| v + shift).collect();
                row[len / 2] = 0.5 + shift; // a value on the grid of some rows: both round alike
                let (mut scalar, mut vector) = (vec![0u8; len], vec![0u8; len]);
                let a = quantize_row(&row, None, &mut scalar);
                // SAFETY: the CPU has AVX-512 (here()); the lengths match.
                let b = unsafe { vnni::quantize_row(&row, None, &mut vector) };
                assert_eq!(a, b, "{len} {shift}");
                assert_eq!(scalar, vector, "{len} {shift}");
                // With factors: the same definition, row times factors.
                let factors: Vec<f32> = values(len, 17).iter().map(|v| 0.25 + v.abs()).collect();
                let (mut scalar_f, mut vector_f) = (vec![0u8; len], vec![0u8; len]);
                let a_f = quantize_row(&row, Some(&factors), &mut scalar_f);
                // SAFETY: as above.
                let b_f = unsafe { vnni::quantize_row(&row, Some(&factors), &mut vector_f) };
                assert_eq!(a_f, b_f, "{len} {shift} with factors");
                assert_eq!(scalar_f, vector_f, "{len} {shift} with factors");
                // The range spans the grid: 0 and 255 are both used but where 0 is an end.
                let grid = a.unwrap();
                assert!(scalar.contains(&255) || grid.zero == 255, "{len} {shift}");
                assert!(scalar.contains(&0) || grid.zero == 0, "{len} {shift}");
                for bad in [f32::NAN, f32::NEG_INFINITY] {
                    // Not finite, in a whole step and in the tail.
                    for at in [0, len - 1] {
                        let mut row = row.clone();
                        row[at] = bad;
                        // SAFETY: as above.
                        assert_eq!(unsafe { vnni::quantize_row(&row, None, &mut vector) }, None);
                    }
                }
            }
        }
    }

    #[test]
    fn the_largest_magnitudes_do_not_overflow() {
        if !here() {
            return;
        }
        // Every product at the top of both grids: inputs all at one end, weights at ±127.
        let inputs = MAX_INPUTS;
        for (x, w) in [(-1.5f32, 0.25f32), (1.5, 0.25), (-1.5, -0.25)] {
            let rows = 2;
            let input = vec![x; rows * inputs];
            let weight = vec![w; inputs];
            let q = Int8Weight::new(&weight, inputs, 1).unwrap();
            let mut out = vec![0f32; rows];
            assert!(product(&input, rows, &q, 256, None, &mut out));
            let want = x * w * inputs as f32;
            for v in out {
                assert!((v - want).abs() < 1e-3 * want.abs(), "{v} vs {want}");
            }
        }
        assert!(Int8Weight::new(&vec![0.5; MAX_INPUTS + 4], MAX_INPUTS + 4, 1).is_none());
    }

    #[test]
    fn declines_what_it_does_not_take() {
        let inputs = 64;
        let q = Int8Weight::new(&[1.0; 128], inputs, 2).unwrap();
        // Too many rows.
        let mut out = vec![0.0; 5 * 2];
        assert!(!product(&[1.0; 5 * 64], 5, &q, 4, None, &mut out));
        // Inputs not a multiple of 4 are not packed; weights that are not finite neither.
        assert!(Int8Weight::new(&[1.0; 42], 21, 2).is_none());
        assert!(Int8Weight::new(&[f32::NAN; 8], 4, 2).is_none());
        // A row that is not finite: the caller's other products carry it.
        let mut row = vec![1.0; inputs];
        row[3] = f32::INFINITY;
        let mut out = vec![0.0; 2];
        assert!(!product(&row, 1, &q, 256, None, &mut out));
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn a_row_of_zeros_gives_exactly_what_was_there() {
        if !here() {
            return;
        }
        let q = Int8Weight::new(&values(64 * 3, 9), 64, 3).unwrap();
        let mut out = vec![0.5, -2.0, 3.0];
        assert!(product(&[0.0; 64], 1, &q, 256, None, &mut out));
        assert_eq!(out, [0.5, -2.0, 3.0]);
    }

    #[test]
    fn smoothing_keeps_the_product_and_evens_out_a_wide_channel() {
        if !here() {
            return;
        }
        // Rows whose channel 5 is 40 times the others (as a layer norm's outlier channel).
        let (rows, inputs, outputs) = (9, 384, 131);
        let mut input = values(rows * inputs, 3);
        for row in input.chunks_exact_mut(inputs) {
            row[5] *= 40.0;
            row[5] += 30.0;
        }
        let weight = values(outputs * inputs, 5);
        let largest =
            |values: &mut dyn Iterator<Item = f32>| values.fold(0f32, |m, v| m.max(v.abs()));
        let factors: Vec<f32> = (0..inputs)
            .map(|j| {
                let a = largest(&mut input.chunks_exact(inputs).map(|row| row[j]));
                let b = largest(&mut weight.chunks_exact(inputs).map(|row| row[j]));
                smoothing_factor(a, b)
            })
            .collect();
        assert!(
            factors[5] < 0.5 * factors[6],
            "{} {}",
            factors[5],
            factors[6]
        );
        assert_eq!(smoothing_factor(0.0, 1.0), 1.0);
        assert_eq!(smoothing_factor(1.0, 0.0), 1.0);
        assert_eq!(smoothing_factor(4.0, 1.0), 0.5);
        let plain = Int8Weight::new(&weight, inputs, outputs).unwrap();
        let smooth = Int8Weight::smoothed(&weight, inputs, outputs, &factors).unwrap();
        let mut exact = vec![0f32; rows * outputs];
        reference(&input, rows, &weight, inputs, &mut exact);
        let error = |q: &Int8Weight| {
            let mut got = vec![0f32; rows * outputs];
            assert!(product(&input, rows, q, 256, None, &mut got));
            got.iter()
                .zip(&exact)
                .map(|(g, e)| (g - e).abs())
                .fold(0f32, f32::max)
        };
        // The definition bit for bit, and a smaller error than without the factors.
        let mut got = vec![0f32; rows * outputs];
        assert!(product(&input, rows, &smooth, 256, None, &mut got));
        let mut defined = vec![0f32; rows * outputs];
        scalar_product(&input, rows, &weight, inputs, Some(&factors), &mut defined);
        assert_eq!(got, defined);
        let (without, with) = (error(&plain), error(&smooth));
        assert!(
            with * 2.0 < without,
            "error {with} with factors, {without} without"
        );
        // Factors that are not positive and finite are refused.
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let mut factors = factors.clone();
            factors[7] = bad;
            assert!(Int8Weight::smoothed(&weight, inputs, outputs, &factors).is_none());
        }
    }
}
