//! k-means over keys: the lists of the key index.
//!
//! Lloyd's algorithm from a k-means++ start (each next centre drawn with probability ∝ squared
//! distance to the nearest chosen one, so no two start in one cluster while another has none),
//! a fixed number of iterations, empty clusters re-seeded from a random sample point. `Spherical` is for
//! inner product and cosine (centroids are re-normalised; a point belongs to the centroid of
//! largest inner product); `Euclidean` is for L2. The assignment step, the only expensive one,
//! runs on rayon's threads: pure computation, it never calls into Postgres.

use rayon::prelude::*;

use crate::rng::SplitMix64;
use crate::vector::dot_batch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Geometry {
    Spherical,
    Euclidean,
}

/// `k` centroids (row-major, `dim` values each) trained on `sample` (row-major). Fewer distinct
/// points than `k` gives fewer centroids; an empty sample gives none.
pub fn train(
    sample: &[f32],
    dim: usize,
    k: usize,
    geometry: Geometry,
    iterations: usize,
    seed: u64,
) -> Vec<f32> {
    train_with(sample, dim, k, geometry, iterations, seed, &mut || {})
}

/// [`train`], calling `between_steps` on the calling thread after the seeding and after each
/// iteration (the extension checks for query cancellation there; rayon's threads never call it).
pub fn train_with(
    sample: &[f32],
    dim: usize,
    k: usize,
    geometry: Geometry,
    iterations: usize,
    seed: u64,
    between_steps: &mut dyn FnMut(),
) -> Vec<f32> {
    assert!(
        dim > 0 && sample.len() % dim == 0,
        "sample is not a whole number of points"
    );
    let n = sample.len() / dim;
    let k = k.min(n);
    if k == 0 {
        return Vec::new();
    }
    let mut rng = SplitMix64(seed);
    let mut centroids = plus_plus(sample, dim, k, &mut rng);
    between_steps();
    if geometry == Geometry::Spherical {
        normalize_rows(&mut centroids, dim);
    }
    for _ in 0..iterations {
        let assignment = assign_cancellable(&centroids, dim, sample, geometry);
        let mut sums = vec![0.0f64; k * dim];
        let mut counts = vec![0usize; k];
        for (p, &c) in assignment.iter().enumerate() {
            counts[c as usize] += 1;
            let row = &mut sums[c as usize * dim..(c as usize + 1) * dim];
            for (s, &x) in row.iter_mut().zip(&sample[p * dim..(p + 1) * dim]) {
                *s += x as f64;
            }
        }
        for c in 0..k {
            let row = &mut centroids[c * dim..(c + 1) * dim];
            if counts[c] == 0 {
                let p = rng.below(n as u64) as usize;
                row.copy_from_slice(&sample[p * dim..(p + 1) * dim]);
            } else {
                for (r, s) in row.iter_mut().zip(&sums[c * dim..(c + 1) * dim]) {
                    *r = (*s / counts[c] as f64) as f32;
                }
            }
        }
        if geometry == Geometry::Spherical {
            normalize_rows(&mut centroids, dim);
        }
        between_steps();
    }
    centroids
}

/// k-means++ seeding over at most 32 points per centre (the seeding pass is k·n·dim).
fn plus_plus(sample: &[f32], dim: usize, k: usize, rng: &mut SplitMix64) -> Vec<f32> {
    let n = sample.len() / dim;
    let m = n.min(32 * k).max(k);
    // A uniform subset of m points: a partial Fisher-Yates shuffle of the indices.
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..m {
        let j = i + rng.below((n - i) as u64) as usize;
        order.swap(i, j);
    }
    let points: Vec<&[f32]> = order[..m]
        .iter()
        .map(|&i| &sample[i * dim..(i + 1) * dim])
        .collect();
    let mut centroids = Vec::with_capacity(k * dim);
    centroids.extend_from_slice(points[rng.below(m as u64) as usize]);
    let mut nearest: Vec<f64> = vec![f64::INFINITY; m];
    for c in 1..k {
        crate::interrupt::check();
        let last = &centroids[(c - 1) * dim..c * dim];
        nearest.par_iter_mut().zip(&points).for_each(|(d, p)| {
            let dist = crate::vector::l2sq(p, last) as f64;
            if dist < *d {
                *d = dist;
            }
        });
        let total: f64 = nearest.iter().sum();
        let pick = if total > 0.0 {
            let mut target = rng.unit() * total;
            let mut pick = m - 1;
            for (i, d) in nearest.iter().enumerate() {
                if target < *d {
                    pick = i;
                    break;
                }
                target -= d;
            }
            pick
        } else {
            rng.below(m as u64) as usize
        };
        centroids.extend_from_slice(points[pick]);
    }
    centroids
}

/// Scales every row to unit length (zero rows stay zero).
pub fn normalize_rows(rows: &mut [f32], dim: usize) {
    for row in rows.chunks_exact_mut(dim) {
        let norm = row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
        if norm > 0.0 {
            row.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
        }
    }
}

/// Points [`assign_cancellable`] assigns between two cancellation points.
const ASSIGN_BLOCK: usize = 4096;

/// [`assign`] in blocks of points, with a cancellation point between blocks on the calling
/// thread (one pass over many points and lists takes seconds; rayon's threads never check).
fn assign_cancellable(
    centroids: &[f32],
    dim: usize,
    points: &[f32],
    geometry: Geometry,
) -> Vec<u32> {
    let mut out = Vec::with_capacity(points.len() / dim);
    for block in points.chunks(ASSIGN_BLOCK * dim) {
        out.extend(assign(centroids, dim, block, geometry));
        crate::interrupt::check();
    }
    out
}

/// The centroid each point belongs to (see [`nearest`]), computed in parallel.
pub fn assign(centroids: &[f32], dim: usize, points: &[f32], geometry: Geometry) -> Vec<u32> {
    let norms = half_squared_norms(centroids, dim, geometry);
    points
        .par_chunks(dim * 64)
        .flat_map_iter(|chunk| {
            let mut scores = vec![0.0f32; centroids.len() / dim];
            chunk
                .chunks_exact(dim)
                .map(|p| best(centroids, &norms, p, &mut scores))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The centroid `point` belongs to: largest inner product (spherical) or smallest distance.
pub fn nearest(centroids: &[f32], dim: usize, point: &[f32], geometry: Geometry) -> u32 {
    nearest_with(
        centroids,
        &half_squared_norms(centroids, dim, geometry),
        point,
    )
}

/// [`nearest`] with the centroids' [`half_squared_norms`] computed once by the caller.
pub fn nearest_with(centroids: &[f32], half_norms: &[f32], point: &[f32]) -> u32 {
    let mut scores = vec![0.0f32; half_norms.len()];
    best(centroids, half_norms, point, &mut scores)
}

/// Centroids ordered from nearest to farthest from `point` (the probe order of a query).
pub fn ranked(centroids: &[f32], dim: usize, point: &[f32], geometry: Geometry) -> Vec<u32> {
    ranked_with(
        centroids,
        &half_squared_norms(centroids, dim, geometry),
        point,
    )
}

/// [`ranked`] with the centroids' [`half_squared_norms`] computed once by the caller.
pub fn ranked_with(centroids: &[f32], norms: &[f32], point: &[f32]) -> Vec<u32> {
    let mut scores = vec![0.0f32; norms.len()];
    dot_batch(point, centroids, &mut scores);
    // Larger is nearer: p·c for spheres; p·c − |c|²/2 = (|p|² − |p − c|²)/2 − const for L2.
    let key: Vec<f32> = scores.iter().zip(norms).map(|(s, n)| s - n).collect();
    let mut order: Vec<u32> = (0..key.len() as u32).collect();
    order.sort_by(|&a, &b| key[b as usize].total_cmp(&key[a as usize]).then(a.cmp(&b)));
    order
}

/// |c|²/2 per centroid for L2 (what turns an inner product into a distance order), 0 for spheres.
pub fn half_squared_norms(centroids: &[f32], dim: usize, geometry: Geometry) -> Vec<f32> {
    centroids
        .chunks_exact(dim)
        .map(|c| match geometry {
            Geometry::Spherical => 0.0,
            Geometry::Euclidean => c.iter().map(|x| x * x).sum::<f32>() / 2.0,
        })
        .collect()
}

fn best(centroids: &[f32], half_norms: &[f32], point: &[f32], scores: &mut [f32]) -> u32 {
    dot_batch(point, centroids, scores);
    let mut best = 0;
    let mut best_key = f32::NEG_INFINITY;
    for (i, (s, n)) in scores.iter().zip(half_norms).enumerate() {
        let key = s - n;
        if key > best_key {
            best_key = key;
            best = i as u32;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    #[test]
    fn training_reaches_cancellation_points() {
        let dim = 8;
        let points: Vec<f32> = (0..10_000 * dim)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let n = crate::interrupt::tests::checks_made(|| {
            train(&points, dim, 16, Geometry::Euclidean, 3, 1);
        });
        // 15 while seeding 16 centres, then 3 blocks of points in each of 3 iterations.
        assert!(n >= 15 + 3 * 3, "{n} checks");
    }

    use super::*;

    /// Points around `k` well separated centres.
    fn blobs(k: usize, per: usize, dim: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
        let mut rng = SplitMix64(seed);
        let centres: Vec<f32> = (0..k * dim)
            .map(|_| rng.unit() as f32 * 20.0 - 10.0)
            .collect();
        let mut points = Vec::new();
        let mut labels = Vec::new();
        for i in 0..k * per {
            let c = i % k;
            labels.push(c);
            for d in 0..dim {
                points.push(centres[c * dim + d] + rng.unit() as f32 * 0.2 - 0.1);
            }
        }
        (points, labels)
    }

    #[test]
    fn recovers_separated_clusters() {
        let (points, labels) = blobs(8, 50, 16, 3);
        let centroids = train(&points, 16, 8, Geometry::Euclidean, 15, 9);
        assert_eq!(centroids.len(), 8 * 16);
        let assignment = assign(&centroids, 16, &points, Geometry::Euclidean);
        // Same label ⇔ same centroid (a clustering is correct up to renaming).
        for i in 0..labels.len() {
            for j in 0..labels.len() {
                assert_eq!(
                    labels[i] == labels[j],
                    assignment[i] == assignment[j],
                    "{i} {j}"
                );
            }
        }
    }

    #[test]
    fn spherical_centroids_are_unit_and_ranked_matches_nearest() {
        let (mut points, _) = blobs(5, 40, 12, 4);
        normalize_rows(&mut points, 12);
        let centroids = train(&points, 12, 5, Geometry::Spherical, 10, 1);
        for c in centroids.chunks_exact(12) {
            let norm: f32 = c.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        }
        for geometry in [Geometry::Spherical, Geometry::Euclidean] {
            for p in points.chunks_exact(12).take(30) {
                let order = ranked(&centroids, 12, p, geometry);
                assert_eq!(order[0], nearest(&centroids, 12, p, geometry));
                let mut sorted = order.clone();
                sorted.sort();
                assert_eq!(sorted, (0..5).collect::<Vec<u32>>());
            }
        }
    }

    #[test]
    fn fewer_points_than_clusters_and_empty_samples() {
        let points = vec![1.0, 0.0, 0.0, 1.0];
        assert_eq!(train(&points, 2, 10, Geometry::Spherical, 5, 0).len(), 4);
        assert!(train(&[], 2, 10, Geometry::Spherical, 5, 0).is_empty());
    }
}
