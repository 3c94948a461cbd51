//! Products for a query's few rows on AMX tiles: out += x·Wᵀ with weights and inputs rounded to
//! bfloat16 and summed in f32 by `tdpbf16ps`, which multiplies a 16 × 32 tile of inputs by a
//! 32 × 16 tile of weights (8,192 multiply-adds) per instruction.
//!
//! Why: a 30-token query is 320 M multiply-adds. The 16-bit integer products of
//! [`super::int16_rows`] do 32 per instruction and need about 2.8 ms of one core for them; the
//! tile unit does the arithmetic of a query in a small fraction of that, so what is left is
//! reading the 21 MB of 16-bit weights once per pass. bfloat16 keeps 8 significant bits of each
//! value relative to the value itself (an integer grid keeps them relative to the row's largest),
//! which for these weights is about as close as 11-bit integers (measured in
//! `benches/RESULTS.md`).
//!
//! Layout: the weights are packed once into tiles of 16 outputs × 32 inputs, each tile 16 rows of
//! input pairs with the 16 outputs' two weights side by side (the order `tdpbf16ps` reads), the
//! tiles of one output block one after the other along the inputs; so a block's weights stream
//! from memory in order, 1 KB per tile. Inputs and outputs are padded with zeros to whole tiles.
//!
//! Linux on x86-64 with AMX-TILE, AMX-BF16 and AVX-512 BF16 only: the kernel must grant the
//! process the tile state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), asked once. Elsewhere
//! [`available`] is false and [`product`] answers `false`, and the caller multiplies otherwise.
//! The instructions are written as inline assembly: Rust's AMX intrinsics are not stable.

use std::sync::OnceLock;

/// Outputs per tile (the columns of a 16 × 16 f32 sum tile).
const TILE_OUTPUTS: usize = 16;
/// Inputs per tile step: 32 bfloat16 values are one 64-byte tile row.
const TILE_INPUTS: usize = 32;
/// Rows per tile.
const TILE_ROWS: usize = 16;
/// Outputs per kernel call and per parallel task: two weight tiles side by side.
const BLOCK_OUTPUTS: usize = 2 * TILE_OUTPUTS;
/// Rows per parallel task (a whole number of pairs of row tiles): a task's inputs, 512 rows of
/// up to 1,536 bfloat16 values (1.5 MB), stay in its core's cache for every output block.
const ROW_CHUNK: usize = 512;
/// Bytes of one packed weight tile.
const TILE_BYTES: usize = TILE_INPUTS * TILE_OUTPUTS * 2;

/// A weight matrix (outputs × inputs) in bfloat16, packed in tiles.
pub struct TiledWeight {
    /// Output tile t, input step s, pair p, output j of the tile, member m of the pair at
    /// (((t·steps + s)·16 + p)·16 + j)·2 + m; padding is zeros.
    packed: Vec<u16>,
    inputs: usize,
    outputs: usize,
    /// Input steps of 32 (the inputs rounded up).
    steps: usize,
}

impl TiledWeight {
    /// Rounds `weight` (outputs × inputs, row-major) to bfloat16 (nearest, ties to even) and
    /// packs it; None where a weight is not finite.
    pub fn new(weight: &[f32], inputs: usize, outputs: usize) -> Option<TiledWeight> {
        assert_eq!(weight.len(), inputs * outputs);
        if !weight.iter().all(|v| v.is_finite()) {
            return None;
        }
        let steps = inputs.div_ceil(TILE_INPUTS);
        let tiles = outputs.div_ceil(BLOCK_OUTPUTS) * (BLOCK_OUTPUTS / TILE_OUTPUTS);
        let mut packed = vec![0u16; tiles * steps * TILE_BYTES / 2];
        for (o, row) in weight.chunks_exact(inputs.max(1)).enumerate() {
            let (t, j) = (o / TILE_OUTPUTS, o % TILE_OUTPUTS);
            for (k, &v) in row.iter().enumerate() {
                let (s, within) = (k / TILE_INPUTS, k % TILE_INPUTS);
                let (p, m) = (within / 2, within % 2);
                packed[(((t * steps + s) * 16 + p) * TILE_OUTPUTS + j) * 2 + m] = to_bf16(v);
            }
        }
        Some(TiledWeight {
            packed,
            inputs,
            outputs,
            steps,
        })
    }
}

/// `v` rounded to bfloat16, to nearest with ties to even (finite `v`), as the vector
/// conversion `vcvtne2ps2bf16` rounds.
fn to_bf16(v: f32) -> u16 {
    half::bf16::from_f32(v).to_bits()
}

/// Whether this CPU and kernel run the tile products (checked, and the tile state asked for,
/// once per process). `PG_SKILLS_AMX=off` turns them off (to measure without them).
pub fn available() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| std::env::var("PG_SKILLS_AMX").as_deref() != Ok("off") && tiles::ready())
}

/// out[r][o] += Σ_k input[r][k]·weight[o][k] for `rows` rows, on rayon's threads; `out` already
/// holds what is added to. Returns false, having done nothing, where the tile products are not
/// [`available`] or the product is not one this path takes (more than `max_rows` rows, an input
/// that is not finite).
pub fn product(
    input: &[f32],
    rows: usize,
    weight: &TiledWeight,
    max_rows: usize,
    out: &mut [f32],
) -> bool {
    let (inputs, outputs) = (weight.inputs, weight.outputs);
    assert_eq!(input.len(), rows * inputs);
    assert_eq!(out.len(), rows * outputs);
    if rows == 0 || rows > max_rows || inputs == 0 || !available() {
        return false;
    }
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        use super::bert::SharedRows;
        use rayon::prelude::*;
        // The inputs in bfloat16, whole tiles of rows and of inputs, the padding zeros.
        let stride = weight.steps * TILE_INPUTS;
        let padded_rows = rows.div_ceil(TILE_ROWS) * TILE_ROWS;
        let mut x = vec![0u16; padded_rows * stride];
        // In parallel for a batch's thousands of rows; a request's few stay on one thread.
        let all_finite = x
            .par_chunks_exact_mut(stride)
            .zip(input.par_chunks_exact(inputs))
            .with_min_len(256)
            .all(|(converted, row)| {
                // SAFETY: available() checked AVX-512 F, BW and BF16; `converted` is at least
                // as long as `row`.
                unsafe { tiles::convert_row(row, &mut converted[..inputs]) }
            });
        if !all_finite {
            return false;
        }
        let shared = SharedRows(out.as_mut_ptr());
        let x = &x;
        // Tasks of ROW_CHUNK rows × one block of outputs, the blocks of a chunk one after the
        // other: a thread keeps the chunk's inputs in its cache while the weights stream.
        let blocks = outputs.div_ceil(BLOCK_OUTPUTS);
        super::team::for_each(rows.div_ceil(ROW_CHUNK) * blocks, |task| {
            let (chunk, block) = (task / blocks, task % blocks);
            let first = chunk * ROW_CHUNK;
            let chunk_rows = first..(first + ROW_CHUNK).min(rows);
            // SAFETY: the tile state is granted and the CPU has AMX-BF16 (available());
            // `x` holds padded_rows × stride values and the packing whole blocks of
            // `steps` tiles; this task writes only its rows of the block's columns of `out`
            // (rows × outputs), which no other task writes, and `out` outlives the loop.
            unsafe { tiles::add_block(x, chunk_rows, weight, block, shared.at(0)) };
        });
        true
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod tiles {
    use std::arch::asm;
    use std::arch::x86_64::*;

    use super::{TiledWeight, BLOCK_OUTPUTS, TILE_BYTES, TILE_INPUTS, TILE_ROWS};

    /// The tile configuration every kernel loads: palette 1, tiles 0–7 all 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    const CONFIG: Config = {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        let mut t = 0;
        while t < 8 {
            bytes[16 + 2 * t] = 64; // bytes per row (u16, little-endian)
            bytes[48 + t] = TILE_ROWS as u8;
            t += 1;
        }
        Config(bytes)
    };

    /// Whether the CPU has AMX-TILE, AMX-BF16 and AVX-512 F, BW and BF16, and the kernel granted
    /// this process the tile data state.
    pub fn ready() -> bool {
        // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22 AMX-BF16 (std's detection of them is not
        // stable yet).
        let leaf7 = __cpuid_count(7, 0);
        let max_leaf = __cpuid(0).eax;
        let amx = max_leaf >= 7 && leaf7.edx & (1 << 24) != 0 && leaf7.edx & (1 << 22) != 0;
        if !amx
            || !std::arch::is_x86_feature_detected!("avx512f")
            || !std::arch::is_x86_feature_detected!("avx512bw")
            || !std::arch::is_x86_feature_detected!("avx512bf16")
        {
            return false;
        }
        // Linux keeps the 8 KB tile state off until a process asks for it (5.16 and later);
        // asked for once, it holds for every thread of the process.
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with this code only changes the process's permitted features.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }

    /// Writes `row` in bfloat16 (nearest, ties to even) into `out`; false where a value is not
    /// finite.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F, BW and BF16; `out` is as long as `row`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub unsafe fn convert_row(row: &[f32], out: &mut [u16]) -> bool {
        debug_assert_eq!(row.len(), out.len());
        let finite_limit = _mm512_set1_ps(f32::MAX);
        let mut not_finite: __mmask16 = 0;
        let mut at = 0;
        while at < row.len() {
            let mask = |from: usize| -> __mmask16 {
                let left = row.len().saturating_sub(from);
                if left >= 16 {
                    0xffff
                } else {
                    (1u16 << left) - 1
                }
            };
            let (low_mask, high_mask) = (mask(at), mask(at + 16));
            // Masked-off lanes are not read: past the end, the address is only computed.
            let low = _mm512_maskz_loadu_ps(low_mask, row.as_ptr().wrapping_add(at));
            let high = _mm512_maskz_loadu_ps(high_mask, row.as_ptr().wrapping_add(at + 16));
            // NaN compares unordered and infinity above f32::MAX: either sets a bit.
            not_finite |= _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(_mm512_abs_ps(low), finite_limit);
            not_finite |= _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(_mm512_abs_ps(high), finite_limit);
            let both: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(high, low));
            let lanes = (low_mask as u32) | ((high_mask as u32) << 16);
            _mm512_mask_storeu_epi16(out.as_mut_ptr().wrapping_add(at) as *mut i16, lanes, both);
            at += 32;
        }
        not_finite == 0
    }

    /// out[r][o] += x[r]·w[o] for the rows r of `rows` (starting at a multiple of 32) and the
    /// 32 outputs of `block`, in kernel calls of 32 rows (16 for an odd last tile of rows).
    ///
    /// # Safety
    /// The tile state is granted and the CPU has AMX-BF16; `x` holds whole tiles of rows
    /// (at least `rows.end` rounded up to 16) of `w.steps · 32` values; `w` holds `block`; `out`
    /// points to at least rows.end × w.outputs floats and no other thread touches these rows of
    /// the block's columns.
    pub unsafe fn add_block(
        x: &[u16],
        rows: std::ops::Range<usize>,
        w: &TiledWeight,
        block: usize,
        out: *mut f32,
    ) {
        let stride = w.steps * TILE_INPUTS;
        assert!(rows.start.is_multiple_of(2 * TILE_ROWS));
        let row_tiles = rows.end.div_ceil(TILE_ROWS);
        assert!(x.len() >= row_tiles * TILE_ROWS * stride);
        let weights = w.packed.as_ptr().add(block * 2 * w.steps * TILE_BYTES / 2);
        assert!(w.packed.len() >= (block + 1) * 2 * w.steps * TILE_BYTES / 2);
        let first = block * BLOCK_OUTPUTS;
        let width = (w.outputs - first).min(BLOCK_OUTPUTS);
        // Sums of 32 rows × the block's 32 outputs.
        let mut sums = [0f32; 2 * TILE_ROWS * BLOCK_OUTPUTS];
        let mut tile = rows.start / TILE_ROWS;
        while tile < row_tiles {
            let pair = tile + 1 < row_tiles;
            let rows_here = if pair { 2 * TILE_ROWS } else { TILE_ROWS };
            let x_at = x.as_ptr().add(tile * TILE_ROWS * stride);
            if pair {
                two_row_tiles(x_at, stride * 2, weights, w.steps, sums.as_mut_ptr());
            } else {
                one_row_tile(x_at, stride * 2, weights, w.steps, sums.as_mut_ptr());
            }
            let first_row = tile * TILE_ROWS;
            for i in 0..rows_here.min(rows.end - first_row) {
                let row = std::slice::from_raw_parts_mut(
                    out.add((first_row + i) * w.outputs + first),
                    width,
                );
                for (o, s) in row.iter_mut().zip(&sums[i * BLOCK_OUTPUTS..]) {
                    *o += s;
                }
            }
            tile += if pair { 2 } else { 1 };
        }
        // Back to the initial tile state, so a context switch does not save 8 KB of it.
        asm!("tilerelease", options(nostack, nomem));
    }

    /// sums (32 × 32 f32, rows of 128 bytes) = the rows at `x` (two tiles of 16 rows, `x_bytes`
    /// apart row to row) times the two weight tiles side by side at `weights`, over `steps`
    /// input steps.
    ///
    /// # Safety
    /// The tile state is granted and the CPU has AMX-BF16; `x` is readable for 32 rows of
    /// `steps` · 64 bytes, `weights` for 2 · steps tiles, `sums` writable for 32 × 32 floats.
    #[inline]
    unsafe fn two_row_tiles(
        x: *const u16,
        x_bytes: usize,
        weights: *const u16,
        steps: usize,
        sums: *mut f32,
    ) {
        asm!(
            "ldtilecfg [{config}]",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "2:",
            "tileloadd tmm4, [{x0} + {x_bytes}*1]",
            "tileloadd tmm5, [{x1} + {x_bytes}*1]",
            "tileloadd tmm6, [{w0} + {w_bytes}*1]",
            "tileloadd tmm7, [{w1} + {w_bytes}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {x0}, 64",
            "add {x1}, 64",
            "add {w0}, {tile_bytes}",
            "add {w1}, {tile_bytes}",
            "dec {steps}",
            "jnz 2b",
            "tilestored [{sums} + {sum_bytes}*1], tmm0",
            "tilestored [{sums} + {sum_bytes}*1 + 64], tmm1",
            "tilestored [{sums} + {sum_bytes}*1 + 2048], tmm2",
            "tilestored [{sums} + {sum_bytes}*1 + 2112], tmm3",
            config = in(reg) CONFIG.0.as_ptr(),
            x0 = inout(reg) x => _,
            x1 = inout(reg) (x as *const u8).add(TILE_ROWS * x_bytes) => _,
            x_bytes = in(reg) x_bytes,
            w0 = inout(reg) weights => _,
            w1 = inout(reg) weights.add(steps * TILE_BYTES / 2) => _,
            w_bytes = in(reg) 64usize,
            tile_bytes = const TILE_BYTES,
            steps = inout(reg) steps => _,
            sums = in(reg) sums,
            sum_bytes = in(reg) BLOCK_OUTPUTS * 4,
            options(nostack),
        );
    }

    /// As [`two_row_tiles`] for one tile of 16 rows (the first 16 rows of `sums`).
    ///
    /// # Safety
    /// As [`two_row_tiles`], with `x` readable for 16 rows.
    #[inline]
    unsafe fn one_row_tile(
        x: *const u16,
        x_bytes: usize,
        weights: *const u16,
        steps: usize,
        sums: *mut f32,
    ) {
        asm!(
            "ldtilecfg [{config}]",
            "tilezero tmm0",
            "tilezero tmm1",
            "2:",
            "tileloadd tmm4, [{x0} + {x_bytes}*1]",
            "tileloadd tmm6, [{w0} + {w_bytes}*1]",
            "tileloadd tmm7, [{w1} + {w_bytes}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "add {x0}, 64",
            "add {w0}, {tile_bytes}",
            "add {w1}, {tile_bytes}",
            "dec {steps}",
            "jnz 2b",
            "tilestored [{sums} + {sum_bytes}*1], tmm0",
            "tilestored [{sums} + {sum_bytes}*1 + 64], tmm1",
            config = in(reg) CONFIG.0.as_ptr(),
            x0 = inout(reg) x => _,
            x_bytes = in(reg) x_bytes,
            w0 = inout(reg) weights => _,
            w1 = inout(reg) weights.add(steps * TILE_BYTES / 2) => _,
            w_bytes = in(reg) 64usize,
            tile_bytes = const TILE_BYTES,
            steps = inout(reg) steps => _,
            sums = in(reg) sums,
            sum_bytes = in(reg) BLOCK_OUTPUTS * 4,
            options(nostack),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::few_rows::tests::{reference, values};
    use super::*;

    fn here() -> bool {
        if !available() {
            eprintln!("no AMX-BF16 here (or the kernel withholds the tile state): not used");
        }
        available()
    }

    #[test]
    fn agrees_with_the_product_of_the_rounded_values_for_every_tile_shape() {
        if !here() {
            return;
        }
        // Rows, inputs and outputs that leave partial tiles (rows % 16, rows % 32, inputs % 32,
        // outputs % 32 non-zero) and odd and even numbers of row tiles.
        for (rows, inputs, outputs) in [
            (1, 32, 1),
            (2, 64, 5),
            (7, 384, 131),
            (16, 384, 32),
            (17, 40, 33),
            (21, 1536, 70),
            (48, 96, 9),
            (64, 384, 384),
            (5, 38, 3),
        ] {
            let input = values(rows * inputs, 3);
            let weight = values(outputs * inputs, 5);
            let start = values(rows * outputs, 7);
            let tiled = TiledWeight::new(&weight, inputs, outputs).unwrap();
            let mut got = start.clone();
            assert!(product(&input, rows, &tiled, 256, &mut got));
            // The exact product of the bfloat16 values: the tile unit differs from it only by
            // f32 rounding of the sums.
            let round = |v: &[f32]| -> Vec<f32> {
                v.iter()
                    .map(|&x| half::bf16::from_f32(x).to_f32())
                    .collect()
            };
            let mut of_rounded = start.clone();
            reference(
                &round(&input),
                rows,
                &round(&weight),
                inputs,
                &mut of_rounded,
            );
            let mut exact = start.clone();
            reference(&input, rows, &weight, inputs, &mut exact);
            let mut off_exact = 0f32;
            for ((g, r), e) in got.iter().zip(&of_rounded).zip(&exact) {
                assert!(
                    (g - r).abs() < 1e-4 * (inputs as f32).sqrt(),
                    "{rows}×{inputs}→{outputs}: {g} vs {r}"
                );
                off_exact = off_exact.max((g - e).abs());
            }
            // And the inputs were rounded: the test would pass an f32 product by mistake
            // otherwise.
            assert!(off_exact > 1e-4, "{rows}×{inputs}→{outputs} matched f32");
        }
    }

    #[test]
    fn many_rows_are_split_into_chunks_and_each_row_is_its_own() {
        if !here() {
            return;
        }
        // More rows than a task takes (ROW_CHUNK), ending in an odd tile.
        let (rows, inputs, outputs) = (ROW_CHUNK * 2 + 40, 96, 70);
        let input = values(rows * inputs, 13);
        let weight = values(outputs * inputs, 17);
        let tiled = TiledWeight::new(&weight, inputs, outputs).unwrap();
        let mut all = vec![0f32; rows * outputs];
        assert!(product(&input, rows, &tiled, usize::MAX, &mut all));
        let mut want = vec![0f32; rows * outputs];
        reference(&input, rows, &weight, inputs, &mut want);
        for (g, w) in all.iter().zip(&want) {
            assert!((g - w).abs() < 0.05, "{g} vs {w}");
        }
        // A row's sums do not depend on the rows multiplied with it: bit for bit.
        for r in [0, 31, ROW_CHUNK - 1, ROW_CHUNK, ROW_CHUNK + 17, rows - 1] {
            let mut alone = vec![0f32; outputs];
            let row = &input[r * inputs..(r + 1) * inputs];
            assert!(product(row, 1, &tiled, 1, &mut alone));
            assert_eq!(alone, all[r * outputs..(r + 1) * outputs], "row {r}");
        }
    }

    #[test]
    fn rounding_is_to_nearest_even_as_the_scalar_conversion() {
        if !here() {
            return;
        }
        for len in [1, 15, 16, 31, 32, 33, 384] {
            let mut row = values(len, len as u64);
            // A tie in bfloat16 (1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷): to even.
            row[0] = 1.0 + 1.0 / 256.0;
            let mut vector = vec![0u16; len];
            // SAFETY: available() checked the CPU; the lengths match.
            assert!(unsafe { tiles::convert_row(&row, &mut vector) });
            let scalar: Vec<u16> = row.iter().map(|&v| to_bf16(v)).collect();
            assert_eq!(vector, scalar, "{len}");
            assert_eq!(vector[0], 0x3f80);
            for bad in [f32::NAN, f32::INFINITY] {
                for at in [0, len - 1] {
                    let mut row = row.clone();
                    row[at] = bad;
                    // SAFETY: as above.
                    assert!(!unsafe { tiles::convert_row(&row, &mut vector) }, "{len}");
                }
            }
        }
    }

    #[test]
    fn declines_what_it_does_not_take() {
        let inputs = 64;
        let tiled = TiledWeight::new(&[1.0; 128], inputs, 2).unwrap();
        let mut out = vec![0.0; 5 * 2];
        assert!(!product(&[1.0; 5 * 64], 5, &tiled, 4, &mut out));
        assert!(TiledWeight::new(&[1.0, f32::NAN], 1, 2).is_none());
        let mut row = vec![1.0; inputs];
        row[3] = f32::INFINITY;
        let mut out = vec![0.0; 2];
        assert!(!product(&row, 1, &tiled, 256, &mut out));
        assert!(out.iter().all(|&v| v == 0.0));
    }
}
