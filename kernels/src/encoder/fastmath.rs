//! The element-wise and row-wise parts of the encoder's forward pass, written so the compiler
//! vectorises them: a branch-free exp and erf, GELU, softmax and layer normalisation over
//! slices. libm's scalar erff and expf were a fifth of candle's forward pass.
//!
//! Every function has one generic body; on x86-64 CPUs with AVX2 and FMA (checked once at run
//! time) the same body is compiled for those features, since the crate's baseline is SSE2.

/// Lanes of the partial sums in reductions: the compiler keeps them in one vector register.
/// Floating-point sums are not reassociated on their own, so a plain `sum()` stays scalar.
const LANES: usize = 8;

/// exp(x) for f32, relative error below 2e-7 on [-87, 88]; inputs outside are clamped
/// (exp(-87) ≈ 1.6e-38 stands in for smaller results).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two, so n·ln2 is subtracted without losing the low bits of x.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5·2^23: adding it rounds to an integer, which then sits in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x.mul_add(LOG2_E, ROUNDER);
    let n = shifted - ROUNDER;
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    // Taylor series of e^r to r^7 on |r| ≤ ln2/2: the first term left out is below 1e-8.
    let mut p: f32 = 1.0 / 5040.0;
    p = p.mul_add(r, 1.0 / 720.0);
    p = p.mul_add(r, 1.0 / 120.0);
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    // 2^n from the integer in shifted's mantissa: (n + 127) moved into the exponent field.
    let scale = f32::from_bits(shifted.to_bits().wrapping_add(127) << 23);
    p * scale
}

/// erf(x) for f32 by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7 in exact
/// arithmetic, 5e-7 in f32).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152,
        1.061_405_4,
    ];
    let a = x.abs();
    let t = 1.0 / P.mul_add(a, 1.0);
    let mut poly = A[4];
    poly = poly.mul_add(t, A[3]);
    poly = poly.mul_add(t, A[2]);
    poly = poly.mul_add(t, A[1]);
    poly = poly.mul_add(t, A[0]);
    let y = 1.0 - poly * t * exp(-a * a);
    y.copysign(x)
}

/// GELU as BERT defines it: x·Φ(x) = x/2·(1 + erf(x/√2)).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Runs `$body` (a generic function of this module) compiled for AVX2+FMA when the CPU has
/// them, and for the baseline otherwise.
macro_rules! dispatch {
    ($name:ident, $generic:ident, ($($arg:ident: $ty:ty),*)) => {
        pub fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    $generic($($arg),*)
                }
                if has_avx2_fma() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $generic($($arg),*)
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

#[inline(always)]
fn gelu_slice_generic(values: &mut [f32]) {
    for v in values {
        *v = gelu(*v);
    }
}
dispatch!(gelu_in_place, gelu_slice_generic, (values: &mut [f32]));

/// Folds `values` into LANES partial results with `step`, then combines those with `combine`
/// (which must agree with `step` on partial results: max/max, sum/sum, sum of squares/sum).
#[inline(always)]
fn lane_fold(
    values: &[f32],
    init: f32,
    step: impl Fn(f32, f32) -> f32,
    combine: impl Fn(f32, f32) -> f32,
) -> f32 {
    let mut lanes = [init; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(chunk) {
            *l = step(*l, *v);
        }
    }
    let tail = chunks.remainder().iter().fold(init, |a, v| step(a, *v));
    lanes.iter().fold(tail, |a, l| combine(a, *l))
}

#[inline(always)]
fn lane_max(values: &[f32]) -> f32 {
    lane_fold(values, f32::NEG_INFINITY, f32::max, f32::max)
}

#[inline(always)]
fn lane_sum(values: &[f32]) -> f32 {
    lane_fold(values, 0.0, |s, v| s + v, |s, v| s + v)
}

/// Softmax of each `width`-long row of `values`, in place.
#[inline(always)]
fn softmax_rows_generic(values: &mut [f32], width: usize) {
    for row in values.chunks_exact_mut(width) {
        let max = lane_max(row);
        for v in row.iter_mut() {
            *v = exp(*v - max);
        }
        let inverse = 1.0 / lane_sum(row);
        for v in row.iter_mut() {
            *v *= inverse;
        }
    }
}
dispatch!(softmax_rows, softmax_rows_generic, (values: &mut [f32], width: usize));

/// Layer normalisation of each row of `values` (as wide as `gamma`), in place:
/// (x − mean)/√(var + eps)·gamma + beta.
#[inline(always)]
fn layer_norm_rows_generic(values: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let width = gamma.len();
    for row in values.chunks_exact_mut(width) {
        let mean = lane_sum(row) / width as f32;
        for v in row.iter_mut() {
            *v -= mean;
        }
        let variance = lane_fold(row, 0.0, |s, v| v.mul_add(v, s), |s, v| s + v) / width as f32;
        let scale = 1.0 / (variance + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = (*v * scale).mul_add(*g, *b);
        }
    }
}
dispatch!(
    layer_norm_rows,
    layer_norm_rows_generic,
    (values: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32)
);

#[cfg(test)]
mod tests {
    use super::*;

    /// erf by its Taylor series in f64: exact to ~1e-12 on |x| ≤ 4, the range that matters.
    fn erf_reference(x: f64) -> f64 {
        if x.abs() > 4.0 {
            return x.signum() * (1.0 - 1e-8);
        }
        let mut term = x;
        let mut sum = x;
        for n in 1..120 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    fn grid(from: f32, to: f32, steps: usize) -> impl Iterator<Item = f32> {
        (0..=steps).map(move |i| from + (to - from) * i as f32 / steps as f32)
    }

    #[test]
    fn exp_is_within_two_ulp_like_bounds_of_std() {
        let mut worst = 0f64;
        for x in grid(-87.0, 88.0, 200_000) {
            let want = (x as f64).exp();
            let rel = ((exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) < 1e-37 && exp(-1000.0) >= 0.0);
        assert!(exp(1000.0).is_finite());
    }

    #[test]
    fn erf_and_gelu_match_the_series() {
        let mut worst = 0f64;
        for x in grid(-6.0, 6.0, 100_000) {
            worst = worst.max((erf(x) as f64 - erf_reference(x as f64)).abs());
        }
        // 1.5e-7 from the approximation, the rest from f32 rounding of its terms.
        assert!(worst < 6e-7, "worst absolute erf error {worst}");
        for x in grid(-10.0, 10.0, 10_000) {
            let want = 0.5 * x as f64 * (1.0 + erf_reference(x as f64 / 2f64.sqrt()));
            let got = gelu(x) as f64;
            assert!((got - want).abs() < 2e-6, "gelu({x}) = {got}, want {want}");
        }
        let mut slice: Vec<f32> = grid(-3.0, 3.0, 37).collect();
        let scalar: Vec<f32> = slice.iter().map(|x| gelu(*x)).collect();
        gelu_in_place(&mut slice);
        assert_eq!(
            slice, scalar,
            "the dispatched slice version computes the same"
        );
    }

    #[test]
    fn softmax_rows_sum_to_one_and_keep_order() {
        let width = 13;
        let mut values: Vec<f32> = (0..width * 3)
            .map(|i| ((i * 7919) % 23) as f32 - 11.0)
            .collect();
        values[width] = 80.0; // a large logit must not overflow
        let before = values.clone();
        softmax_rows(&mut values, width);
        for (row, original) in values.chunks(width).zip(before.chunks(width)) {
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "row sums to {sum}");
            let max = original.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let want: Vec<f64> = original.iter().map(|v| ((v - max) as f64).exp()).collect();
            let total: f64 = want.iter().sum();
            for (got, w) in row.iter().zip(&want) {
                assert!((*got as f64 - w / total).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn layer_norm_matches_the_definition() {
        let width = 19;
        let gamma: Vec<f32> = (0..width).map(|i| 0.5 + i as f32 / 10.0).collect();
        let beta: Vec<f32> = (0..width).map(|i| i as f32 / 100.0 - 0.1).collect();
        let mut values: Vec<f32> = (0..width * 2)
            .map(|i| ((i * 31) % 17) as f32 * 0.37 - 2.0)
            .collect();
        let original = values.clone();
        layer_norm_rows(&mut values, &gamma, &beta, 1e-12);
        for (row, x) in values.chunks(width).zip(original.chunks(width)) {
            let mean = x.iter().map(|v| *v as f64).sum::<f64>() / width as f64;
            let var = x.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / width as f64;
            for i in 0..width {
                let want = (x[i] as f64 - mean) / var.sqrt() * gamma[i] as f64 + beta[i] as f64;
                assert!((row[i] as f64 - want).abs() < 1e-5, "{} vs {want}", row[i]);
            }
        }
    }
}
