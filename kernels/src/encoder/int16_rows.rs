//! Reduced-precision products for a query's few rows: out += x·Wᵀ with the weights as 12-bit
//! integers (one scale per output) and each input row as 14-bit integers (one scale per row),
//! multiplied by 16-bit dot products into 32-bit sums: AVX-512 VNNI's `vpdpwssd` (32
//! multiply-adds per instruction), else AVX2's `vpmaddwd` and `vpaddd` (16 per two).
//!
//! Why: at 30 tokens a query is 320 M multiply-adds, more than two cores' f32 FMA units do in
//! the 3 ms a search can spend on it. The 16-bit dot product does twice the multiply-adds per
//! instruction of f32 FMA at the same rate, and reads half the weight bytes. What it costs:
//! embeddings within cosine 0.99999 of f32 (measured in `benches/RESULTS.md`).
//!
//! Layout: the weights are packed once into panels of 64 outputs, each panel a run of input
//! pairs holding the 64 outputs' two weights side by side, so one 512-bit load gives 16 outputs'
//! pair (a 256-bit load 8 outputs') and a product needs no horizontal sum: each 32-bit lane is
//! one output. A lane then receives every input's product; the integer sums are moved into f32
//! every [`PAIRS_PER_FLUSH`] input pairs, before they could overflow (2·32·2047·8191 < 2³¹).
//!
//! Both kernels give the same sums bit for bit. x86-64 only (the CPU checked once at run time);
//! elsewhere [`product`] answers `false` and the caller multiplies in f32.

use std::sync::OnceLock;

/// Largest weight magnitude on the integer grid (12 bits with sign).
const WEIGHT_STEPS: f32 = 2047.0;
/// Largest input magnitude on the integer grid (14 bits with sign).
const INPUT_STEPS: f32 = 8191.0;
/// Outputs per panel (and per parallel task): four 512-bit vectors of 16 lanes.
const PANEL: usize = 64;
/// Input pairs summed in 32-bit integers before the sums move to f32.
const PAIRS_PER_FLUSH: usize = 32;

/// A weight matrix (outputs × inputs) on the 12-bit grid, packed in panels.
pub struct QuantizedWeight {
    /// Panel p, input pair k, output j of the panel, member t of the pair at
    /// ((p·pairs + k)·PANEL + j)·2 + t; outputs past the last are zeros.
    packed: Vec<i16>,
    /// Per output (padded to whole panels with zeros): the weight value of one integer step.
    scales: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

impl QuantizedWeight {
    /// Rounds each output's weights (`weight` is outputs × inputs, row-major) to the nearest of
    /// 2·2047+1 steps over their own largest magnitude, and packs them; None where a weight is
    /// not finite or inputs is odd.
    pub fn new(weight: &[f32], inputs: usize, outputs: usize) -> Option<QuantizedWeight> {
        assert_eq!(weight.len(), inputs * outputs);
        if !inputs.is_multiple_of(2) {
            return None;
        }
        let panels = outputs.div_ceil(PANEL);
        let pairs = inputs / 2;
        let mut packed = vec![0i16; panels * PANEL * inputs];
        let mut scales = vec![0f32; panels * PANEL];
        let mut row = vec![0i16; inputs];
        for (o, weights) in weight.chunks_exact(inputs.max(1)).enumerate() {
            scales[o] = quantize_row(weights, WEIGHT_STEPS, &mut row)?;
            let (p, j) = (o / PANEL, o % PANEL);
            for k in 0..pairs {
                let at = ((p * pairs + k) * PANEL + j) * 2;
                packed[at] = row[2 * k];
                packed[at + 1] = row[2 * k + 1];
            }
        }
        Some(QuantizedWeight {
            packed,
            scales,
            inputs,
            outputs,
        })
    }
}

/// Writes `row` on a symmetric grid of ±`steps` integer steps into `out`; returns the value of
/// one step (0 for a row of zeros, which then stays zeros), or None where a value is not finite.
fn quantize_row(row: &[f32], steps: f32, out: &mut [i16]) -> Option<f32> {
    if !row.iter().all(|v| v.is_finite()) {
        return None;
    }
    let largest = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    if largest == 0.0 {
        out.fill(0);
        return Some(0.0);
    }
    let scale = largest / steps;
    let inverse = steps / largest;
    for (q, v) in out.iter_mut().zip(row) {
        // Round to nearest by adding and removing 1.5·2²³ (|v·inverse| ≤ steps < 2²²): no call
        // to roundf per value.
        const SHIFT: f32 = 12_582_912.0;
        *q = ((v * inverse + SHIFT) - SHIFT) as i16;
    }
    Some(scale)
}

/// The instructions a product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// AVX-512 VNNI's `vpdpwssd`: 32 multiply-adds per instruction, 6 rows × 64 outputs a tile.
    Vnni,
    /// AVX2's `vpmaddwd` and `vpaddd`: 16 multiply-adds per two instructions, 3 rows × 32
    /// outputs a tile (16 vector registers).
    Avx2,
}

impl Kernel {
    /// Whether this CPU runs the kernel.
    fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Kernel::Vnni => has!("avx512f") && has!("avx512bw") && has!("avx512vnni"),
                Kernel::Avx2 => super::fastmath::has_avx2_fma(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }
}

/// The kernel products run on here: the widest this CPU has, checked once. The environment
/// variable `PG_SKILLS_INT16_KERNEL=avx2` picks AVX2 on a CPU that has both (to measure it).
fn kernel() -> Option<Kernel> {
    static KERNEL: OnceLock<Option<Kernel>> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        let forced = std::env::var("PG_SKILLS_INT16_KERNEL").ok();
        [Kernel::Vnni, Kernel::Avx2]
            .into_iter()
            .filter(|k| forced.as_deref() != Some("avx2") || *k == Kernel::Avx2)
            .find(|k| k.runs_here())
    })
}

/// Whether this CPU has the instructions [`product`] needs (checked once).
pub fn available() -> bool {
    kernel().is_some()
}

/// What a product's outputs start from when the product writes them whole: out[r][o] =
/// bias[o] + residual[r][o] + Σ_k …, the sum added last as when `out` is filled first. Each
/// parallel task then starts its own columns: filled beforehand by one thread, they had to move
/// to the other core's cache first.
pub struct Start<'a> {
    pub bias: &'a [f32],
    /// rows × outputs, or none.
    pub residual: Option<&'a [f32]>,
}

impl Start<'_> {
    /// Row r's columns first..first + out.len() of the start: the bias, then the residual added.
    pub fn fill(&self, r: usize, first: usize, out: &mut [f32]) {
        let width = out.len();
        out.copy_from_slice(&self.bias[first..first + width]);
        if let Some(residual) = self.residual {
            let outputs = self.bias.len();
            for (o, &add) in out
                .iter_mut()
                .zip(&residual[r * outputs + first..][..width])
            {
                *o += add;
            }
        }
    }
}

/// out[r][o] += Σ_k input[r][k]·weight[o][k] for `rows` rows, in parallel
/// ([`super::team::for_each`]); `out` already holds what is added to, or with `start` is
/// written whole from it. Returns false, having done nothing, where the CPU has neither kernel
/// or the product is not one this path takes (more than `max_rows` rows, an input that is not
/// finite).
pub fn product(
    input: &[f32],
    rows: usize,
    weight: &QuantizedWeight,
    max_rows: usize,
    start: Option<&Start>,
    out: &mut [f32],
) -> bool {
    match kernel() {
        Some(kernel) => product_on(kernel, input, rows, weight, max_rows, start, out),
        None => false,
    }
}

/// As [`product`], on `kernel` (false where this CPU does not run it).
fn product_on(
    kernel: Kernel,
    input: &[f32],
    rows: usize,
    weight: &QuantizedWeight,
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
    if rows == 0 || rows > max_rows || !kernel.runs_here() {
        return false;
    }
    let mut x = vec![0i16; rows * inputs];
    let mut x_scales = vec![0f32; rows];
    #[cfg(target_arch = "x86_64")]
    for ((row, q), scale) in input
        .chunks_exact(inputs)
        .zip(x.chunks_exact_mut(inputs))
        .zip(&mut x_scales)
    {
        // SAFETY: the CPU runs `kernel` (checked above); q is as long as row.
        let step = unsafe {
            match kernel {
                Kernel::Vnni => vnni::quantize_row(row, INPUT_STEPS, q),
                Kernel::Avx2 => avx2::quantize_row(row, INPUT_STEPS, q),
            }
        };
        match step {
            Some(step) => *scale = step,
            None => return false,
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        use super::bert::SharedRows;
        let shared = SharedRows(out.as_mut_ptr());
        let job = Job {
            x: &x,
            x_scales: &x_scales,
            rows,
            weight,
            start,
        };
        super::team::for_each(outputs.div_ceil(PANEL), |panel| {
            // SAFETY: the CPU runs `kernel` (checked above); the lengths are asserted above and
            // the packing holds whole panels; this task writes only the panel's columns of
            // `out`, which no other task writes, and `out` outlives the parallel loop.
            unsafe { add_panel(kernel, &job, panel, shared.at(0)) };
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
    x: &'a [i16],
    x_scales: &'a [f32],
    rows: usize,
    weight: &'a QuantizedWeight,
    start: Option<&'a Start<'a>>,
}

impl Job<'_> {
    /// Where the input pairs of rows r..r+N start, each pair read as one 32-bit value (the rows
    /// are 2-byte aligned: read them unaligned); rows past r+height repeat the last row.
    #[cfg(target_arch = "x86_64")]
    fn row_pairs<const N: usize>(&self, r: usize, height: usize) -> [*const i32; N] {
        let inputs = self.weight.inputs;
        std::array::from_fn(|i| self.x[(r + i.min(height - 1)) * inputs..].as_ptr() as *const i32)
    }
}

/// out[r][o] += x[r]·w[o] for every row r and every output o of `panel`.
///
/// Blocked by input pairs: a block of [`PAIRS_PER_FLUSH`] pairs of the panel (8 KB) is read from
/// memory once and used from L1 by every row tile of the kernel, its integer sums added to the
/// f32 sums of each row (rows × 64 floats, also in L1) before the next block. The sums are then
/// scaled and added to `out`: multiply, then add, so both kernels round alike.
///
/// # Safety
/// The CPU runs `kernel`; `job.x` is rows × inputs and `job.weight` holds `panel`; `out` points
/// to rows × outputs floats; no other thread touches the panel's columns of `out` meanwhile.
#[cfg(target_arch = "x86_64")]
unsafe fn add_panel(kernel: Kernel, job: &Job, panel: usize, out: *mut f32) {
    let w = job.weight;
    let pairs = w.inputs / 2;
    let mut sums = vec![0f32; job.rows * PANEL];
    let mut k = 0;
    while k < pairs {
        let block = k..(k + PAIRS_PER_FLUSH).min(pairs);
        k = block.end;
        // SAFETY: as this function's; `block` lies within the pairs and holds at most
        // PAIRS_PER_FLUSH of them; `sums` is rows × 64.
        unsafe {
            match kernel {
                Kernel::Vnni => vnni::add_block(job, panel, block, &mut sums),
                Kernel::Avx2 => avx2::add_block(job, panel, block, &mut sums),
            }
        }
    }
    let first = panel * PANEL;
    let width = (w.outputs - first).min(PANEL);
    for (r, row_sums) in sums.chunks_exact(PANEL).enumerate() {
        let x_scale = job.x_scales[r];
        // SAFETY: row r's columns first..first+width lie in `out` (rows × outputs), and only
        // this task writes them.
        let row = unsafe { std::slice::from_raw_parts_mut(out.add(r * w.outputs + first), width) };
        if let Some(start) = job.start {
            start.fill(r, first, row);
        }
        for ((o, &sum), &scale) in row.iter_mut().zip(row_sums).zip(&w.scales[first..]) {
            *o += sum * (scale * x_scale);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{Job, PANEL};

    /// [`super::quantize_row`] in 16-lane steps (an input row is quantised for every product).
    ///
    /// # Safety
    /// The CPU supports AVX-512 F and BW; `out` is as long as `row`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn quantize_row(row: &[f32], steps: f32, out: &mut [i16]) -> Option<f32> {
        debug_assert_eq!(row.len(), out.len());
        let lanes = |at: usize| -> __mmask16 {
            let left = row.len() - at;
            if left >= 16 {
                0xffff
            } else {
                (1u16 << left) - 1
            }
        };
        let mut largest = _mm512_setzero_ps();
        let mut not_finite: __mmask16 = 0;
        let finite_limit = _mm512_set1_ps(f32::MAX);
        let mut at = 0;
        while at < row.len() {
            let v = _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes(at), row.as_ptr().add(at)));
            // NaN compares unordered and infinity above f32::MAX: either sets a bit.
            not_finite |= _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(v, finite_limit);
            largest = _mm512_max_ps(largest, v);
            at += 16;
        }
        if not_finite != 0 {
            return None;
        }
        let largest = _mm512_reduce_max_ps(largest);
        if largest == 0.0 {
            out.fill(0);
            return Some(0.0);
        }
        let inverse = _mm512_set1_ps(steps / largest);
        let mut at = 0;
        while at < row.len() {
            let mask = lanes(at);
            let v = _mm512_maskz_loadu_ps(mask, row.as_ptr().add(at));
            // Round to nearest (even) and narrow: |v·inverse| ≤ steps fits 16 bits.
            let q = _mm512_cvtps_epi32(_mm512_mul_ps(v, inverse));
            _mm512_mask_cvtepi32_storeu_epi16(out.as_mut_ptr().add(at) as *mut _, mask, q);
            at += 16;
        }
        Some(largest / steps)
    }

    /// Vectors of 16 outputs in a panel.
    const VECTORS: usize = PANEL / 16;
    /// Input rows per register tile: 6 × 4 sums, 4 weight vectors and one broadcast input pair
    /// are 29 of the 32 vector registers.
    const TILE_ROWS: usize = 6;

    /// The integer sums of every row against the panel's 64 outputs over the input pairs of
    /// `block`, added to `sums` (rows × 64 floats), in tiles of 6 rows.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F, BW and VNNI; `job.x` is rows × inputs and `job.weight` holds
    /// `panel`; `block` lies within the input pairs and is at most [`super::PAIRS_PER_FLUSH`] long.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn add_block(
        job: &Job,
        panel: usize,
        block: std::ops::Range<usize>,
        sums: &mut [f32],
    ) {
        assert_eq!(sums.len(), job.rows * PANEL);
        let mut r = 0;
        while r < job.rows {
            let height = (job.rows - r).min(TILE_ROWS);
            tile(job, panel, block.clone(), r, height, sums.as_mut_ptr());
            r += height;
        }
    }

    /// Rows r..r+height (height ≤ 6) against the panel's 64 outputs over the input pairs of
    /// `block`, added to `sums` (rows × 64 floats). Short tiles repeat their last row in the
    /// spare registers and do not store it.
    ///
    /// # Safety
    /// As [`add_block`], with r+height ≤ rows and `sums` pointing to rows × 64 floats.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile(
        job: &Job,
        panel: usize,
        block: std::ops::Range<usize>,
        r: usize,
        height: usize,
        sums: *mut f32,
    ) {
        let w = job.weight;
        let pairs = w.inputs / 2;
        let xs: [*const i32; TILE_ROWS] = job.row_pairs(r, height);
        let weights = w.packed.as_ptr().add(panel * pairs * PANEL * 2);
        let mut acc = [[_mm512_setzero_si512(); VECTORS]; TILE_ROWS];
        for kk in block {
            let wv: [__m512i; VECTORS] = std::array::from_fn(|v| {
                _mm512_loadu_si512(weights.add((kk * PANEL + v * 16) * 2) as *const _)
            });
            for i in 0..TILE_ROWS {
                let pair = _mm512_set1_epi32(xs[i].add(kk).read_unaligned());
                for v in 0..VECTORS {
                    acc[i][v] = _mm512_dpwssd_epi32(acc[i][v], pair, wv[v]);
                }
            }
        }
        for (i, row_acc) in acc.iter().enumerate().take(height) {
            let row = sums.add((r + i) * PANEL);
            for (v, &a) in row_acc.iter().enumerate() {
                let at = row.add(v * 16);
                _mm512_storeu_ps(
                    at,
                    _mm512_add_ps(_mm512_loadu_ps(at), _mm512_cvtepi32_ps(a)),
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Job, PANEL};

    /// Vectors of 8 outputs a tile covers: half a panel.
    const VECTORS: usize = 4;
    /// Input rows per register tile: 3 × 4 sums, 3 broadcast input pairs and one product are
    /// the 16 vector registers (the weights are read from L1 as operands).
    const TILE_ROWS: usize = 3;

    /// [`super::quantize_row`] in 16-value steps.
    ///
    /// # Safety
    /// The CPU supports AVX2; `out` is as long as `row`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_row(row: &[f32], steps: f32, out: &mut [i16]) -> Option<f32> {
        debug_assert_eq!(row.len(), out.len());
        let whole = row.len() / 16 * 16;
        let sign = _mm256_set1_ps(-0.0);
        let mut largest = _mm256_setzero_ps();
        // Infinity and NaN have every exponent bit set; no finite value has.
        let exponent = _mm256_set1_epi32(0x7f80_0000);
        let mut not_finite = _mm256_setzero_si256();
        let mut at = 0;
        while at < whole {
            for half in [at, at + 8] {
                let v = _mm256_andnot_ps(sign, _mm256_loadu_ps(row.as_ptr().add(half)));
                let bits = _mm256_and_si256(_mm256_castps_si256(v), exponent);
                not_finite = _mm256_or_si256(not_finite, _mm256_cmpeq_epi32(bits, exponent));
                largest = _mm256_max_ps(largest, v);
            }
            at += 16;
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), largest);
        let mut largest = lanes.iter().fold(0f32, |m, &v| m.max(v));
        for v in &row[whole..] {
            if !v.is_finite() {
                return None;
            }
            largest = largest.max(v.abs());
        }
        if _mm256_testz_si256(not_finite, not_finite) == 0 {
            return None;
        }
        if largest == 0.0 {
            out.fill(0);
            return Some(0.0);
        }
        let inverse = steps / largest;
        let scale = _mm256_set1_ps(inverse);
        let mut at = 0;
        while at < whole {
            // Round to nearest (even), then narrow 16 values: packs interleaves the 128-bit
            // halves, the permute puts them back in order.
            let a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row.as_ptr().add(at)), scale));
            let b = _mm256_cvtps_epi32(_mm256_mul_ps(
                _mm256_loadu_ps(row.as_ptr().add(at + 8)),
                scale,
            ));
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a, b));
            _mm256_storeu_si256(out.as_mut_ptr().add(at) as *mut __m256i, packed);
            at += 16;
        }
        for (q, v) in out[whole..].iter_mut().zip(&row[whole..]) {
            *q = (v * inverse).round_ties_even() as i16;
        }
        Some(largest / steps)
    }

    /// As the VNNI kernel's `add_block`, in tiles of 3 rows and 32 outputs.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; otherwise as the VNNI kernel's `add_block`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn add_block(
        job: &Job,
        panel: usize,
        block: std::ops::Range<usize>,
        sums: &mut [f32],
    ) {
        assert_eq!(sums.len(), job.rows * PANEL);
        for half in 0..PANEL / (8 * VECTORS) {
            let mut r = 0;
            while r < job.rows {
                let height = (job.rows - r).min(TILE_ROWS);
                tile(
                    job,
                    panel,
                    half,
                    block.clone(),
                    r,
                    height,
                    sums.as_mut_ptr(),
                );
                r += height;
            }
        }
    }

    /// Rows r..r+height (height ≤ 3) against outputs 32·half..32·half+32 of the panel over the
    /// input pairs of `block`, added to `sums` (rows × 64 floats).
    ///
    /// # Safety
    /// As [`add_block`], with r+height ≤ rows, half < 2 and `sums` pointing to rows × 64 floats.
    // Index loops: the sums stay in registers as a fixed grid.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile(
        job: &Job,
        panel: usize,
        half: usize,
        block: std::ops::Range<usize>,
        r: usize,
        height: usize,
        sums: *mut f32,
    ) {
        let w = job.weight;
        let pairs = w.inputs / 2;
        let xs: [*const i32; TILE_ROWS] = job.row_pairs(r, height);
        let weights = w
            .packed
            .as_ptr()
            .add(panel * pairs * PANEL * 2 + half * VECTORS * 8 * 2);
        let mut acc = [[_mm256_setzero_si256(); VECTORS]; TILE_ROWS];
        for kk in block {
            let pairs_of_rows: [__m256i; TILE_ROWS] =
                std::array::from_fn(|i| _mm256_set1_epi32(xs[i].add(kk).read_unaligned()));
            for v in 0..VECTORS {
                let wv = _mm256_loadu_si256(weights.add((kk * PANEL + v * 8) * 2) as *const _);
                for i in 0..TILE_ROWS {
                    acc[i][v] =
                        _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(pairs_of_rows[i], wv));
                }
            }
        }
        for (i, row_acc) in acc.iter().enumerate().take(height) {
            let row = sums.add((r + i) * PANEL + half * VECTORS * 8);
            for (v, &a) in row_acc.iter().enumerate() {
                let at = row.add(v * 8);
                _mm256_storeu_ps(
                    at,
                    _mm256_add_ps(_mm256_loadu_ps(at), _mm256_cvtepi32_ps(a)),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::few_rows::tests::{reference, values};
    use super::*;

    /// The kernels this CPU runs (none: the tests say so and check nothing else).
    fn kernels_here() -> Vec<Kernel> {
        let here: Vec<Kernel> = [Kernel::Vnni, Kernel::Avx2]
            .into_iter()
            .filter(|k| k.runs_here())
            .collect();
        if here.is_empty() {
            eprintln!("neither AVX-512 VNNI nor AVX2 here: the 16-bit product is not used");
        }
        here
    }

    fn quantize_on(kernel: Kernel, row: &[f32], out: &mut [i16]) -> Option<f32> {
        assert!(kernel.runs_here());
        // SAFETY: the CPU runs the kernel (asserted); the lengths match (callers).
        unsafe {
            match kernel {
                Kernel::Vnni => vnni::quantize_row(row, INPUT_STEPS, out),
                Kernel::Avx2 => avx2::quantize_row(row, INPUT_STEPS, out),
            }
        }
    }

    #[test]
    fn agrees_with_the_exact_product_within_the_grid_for_every_tile_shape() {
        let kernels = kernels_here();
        // Rows and outputs that leave short tiles (rows % 6, rows % 3, outputs % 64 non-zero).
        for (rows, inputs, outputs) in [
            (1, 32, 1),
            (2, 64, 5),
            (7, 384, 131),
            (21, 1536, 70),
            (64, 96, 9),
            (5, 38, 3),
        ] {
            let input = values(rows * inputs, 3);
            let weight = values(outputs * inputs, 5);
            let start = values(rows * outputs, 7);
            let mut want = start.clone();
            reference(&input, rows, &weight, inputs, &mut want);
            let q = QuantizedWeight::new(&weight, inputs, outputs).unwrap();
            let results: Vec<Vec<f32>> = kernels
                .iter()
                .map(|&kernel| {
                    let mut got = start.clone();
                    assert!(product_on(kernel, &input, rows, &q, 256, None, &mut got));
                    got
                })
                .collect();
            // The integer sums are exact and both kernels round the rest alike.
            for other in results.iter().skip(1) {
                assert_eq!(
                    other, &results[0],
                    "{rows}×{inputs}→{outputs}: kernels differ"
                );
            }
            let Some(got) = results.first() else { return };
            // Each product is off by at most half a step of each operand (1/4094 and 1/16382 of
            // its row's largest magnitude, here ≤ 1, times the other operand, ≤ 1): a sum of
            // `inputs` of them, plus f32 rounding.
            let bound = inputs as f32 * (0.5 / 2047.0 + 0.5 / 8191.0) + 1e-4;
            let mut worst = 0f32;
            for (g, w) in got.iter().zip(&want) {
                worst = worst.max((g - w).abs());
                assert!(
                    (g - w).abs() < bound,
                    "{rows}×{inputs}→{outputs}: {g} vs {w}"
                );
            }
            // And it is not exact: the test would pass an f32 product by mistake otherwise.
            assert!(worst > 0.0, "{rows}×{inputs}→{outputs} matched exactly");
        }
    }

    #[test]
    fn a_start_given_is_the_start_filled_in_first_bit_for_bit() {
        for kernel in kernels_here() {
            for (rows, inputs, outputs) in [(1, 32, 1), (7, 384, 131), (30, 1536, 384)] {
                let input = values(rows * inputs, 3);
                let q =
                    QuantizedWeight::new(&values(outputs * inputs, 5), inputs, outputs).unwrap();
                let bias = values(outputs, 11);
                let residual = values(rows * outputs, 13);
                for residual in [None, Some(residual.as_slice())] {
                    let mut filled: Vec<f32> =
                        (0..rows).flat_map(|_| bias.iter().copied()).collect();
                    if let Some(residual) = residual {
                        filled.iter_mut().zip(residual).for_each(|(o, r)| *o += r);
                    }
                    assert!(product_on(kernel, &input, rows, &q, 256, None, &mut filled));
                    let mut written = vec![f32::NAN; rows * outputs];
                    let start = Start {
                        bias: &bias,
                        residual,
                    };
                    assert!(product_on(
                        kernel,
                        &input,
                        rows,
                        &q,
                        256,
                        Some(&start),
                        &mut written
                    ));
                    assert_eq!(written, filled, "{kernel:?} {rows}×{inputs}→{outputs}");
                }
            }
        }
    }

    #[test]
    fn inputs_are_quantised_as_the_weights_are() {
        for kernel in kernels_here() {
            for len in [1, 15, 16, 37, 384] {
                let mut row = values(len, len as u64);
                row[len / 2] = 0.5; // a tie on the grid of some rows: both round it alike
                let (mut scalar, mut vector) = (vec![0i16; len], vec![0i16; len]);
                let a = quantize_row(&row, INPUT_STEPS, &mut scalar);
                let b = quantize_on(kernel, &row, &mut vector);
                assert_eq!(a, b, "{kernel:?} {len}");
                assert_eq!(scalar, vector, "{kernel:?} {len}");
                assert_eq!(scalar.iter().map(|v| v.abs()).max(), Some(8191));
                for bad in [f32::NAN, f32::NEG_INFINITY] {
                    // Not finite, in the vector part and in the tail.
                    for at in [0, len - 1] {
                        let mut row = row.clone();
                        row[at] = bad;
                        assert_eq!(quantize_on(kernel, &row, &mut vector), None, "{kernel:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_largest_magnitudes_do_not_overflow() {
        // Every product at the top of both grids, all of one sign: the worst case per lane.
        let (rows, inputs, outputs) = (3, 4096, 2);
        let input = vec![-1.5f32; rows * inputs];
        let weight = vec![0.25f32; outputs * inputs];
        let q = QuantizedWeight::new(&weight, inputs, outputs).unwrap();
        for kernel in kernels_here() {
            let mut out = vec![0f32; rows * outputs];
            assert!(product_on(kernel, &input, rows, &q, 256, None, &mut out));
            let want = -1.5 * 0.25 * inputs as f32;
            for v in out {
                assert!(
                    (v - want).abs() < 1e-3 * want.abs(),
                    "{kernel:?}: {v} vs {want}"
                );
            }
        }
    }

    #[test]
    fn declines_what_it_does_not_take() {
        let inputs = 64;
        let q = QuantizedWeight::new(&[1.0; 128], inputs, 2).unwrap();
        // Too many rows.
        let mut out = vec![0.0; 5 * 2];
        assert!(!product(&[1.0; 5 * 64], 5, &q, 4, None, &mut out));
        // An odd number of inputs is not packed.
        assert!(QuantizedWeight::new(&[1.0; 42], 21, 2).is_none());
        // A row that is not finite: the f32 path then carries it as IEEE arithmetic would.
        let mut row = vec![1.0; inputs];
        row[3] = f32::INFINITY;
        let mut out = vec![0.0; 2];
        assert!(!product(&row, 1, &q, 256, None, &mut out));
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn a_row_of_zeros_gives_exactly_what_was_there() {
        let q = QuantizedWeight::new(&values(64 * 3, 9), 64, 3).unwrap();
        for kernel in kernels_here() {
            let mut out = vec![0.5, -2.0, 3.0];
            assert!(product_on(kernel, &[0.0; 64], 1, &q, 256, None, &mut out));
            assert_eq!(out, [0.5, -2.0, 3.0], "{kernel:?}");
        }
    }
}
