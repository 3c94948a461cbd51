//! Seeded synthetic keys for tests and benchmarks, as the key-index benchmark defines them:
//! x = normalize(c + σ·z) with `clusters` random unit centres c, σ = 1/√dim, z standard normal,
//! the centre of each point uniform. Queries are drawn the same way with another seed.

use crate::kmeans::normalize_rows;
use crate::rng::SplitMix64;

/// A standard normal sample (Box–Muller).
pub fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = (rng.unit()).max(f64::MIN_POSITIVE);
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Unit-norm cluster centres (row-major), from `seed`.
pub fn centres(clusters: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    let mut c: Vec<f32> = (0..clusters * dim)
        .map(|_| normal(&mut rng) as f32)
        .collect();
    normalize_rows(&mut c, dim);
    c
}

/// `n` unit-norm points around `centres` (row-major), from `seed`.
pub fn clustered(centres: &[f32], dim: usize, n: usize, seed: u64) -> Vec<f32> {
    let clusters = centres.len() / dim;
    let sigma = 1.0 / (dim as f64).sqrt();
    let mut rng = SplitMix64(seed);
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = rng.below(clusters as u64) as usize;
        for d in 0..dim {
            out.push((centres[c * dim + d] as f64 + sigma * normal(&mut rng)) as f32);
        }
    }
    normalize_rows(&mut out, dim);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_unit_and_near_their_centre() {
        let c = centres(4, 64, 1);
        let x = clustered(&c, 64, 200, 2);
        for p in x.chunks_exact(64) {
            let norm: f32 = p.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5);
            // |c + σz| ≈ √2, so p·c ≈ 1/√2 for its own centre and ≈ 0 for the others.
            let best = c
                .chunks_exact(64)
                .map(|q| q.iter().zip(p).map(|(a, b)| a * b).sum::<f32>())
                .fold(f32::MIN, f32::max);
            assert!(best > 0.5, "{best}");
        }
    }
}
