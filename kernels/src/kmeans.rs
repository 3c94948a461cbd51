//! k-means over keys: the lists of the key index.
//!
//! Lloyd's algorithm from a k-means++ start (each next centre drawn with probability ∝ squared
//! distance to the nearest chosen one, so no two start in one cluster while another has none),
//! a fixed number of iterations, empty clusters re-seeded from a random sample point. `Spherical` is for
//! inner product and cosine (centroids are re-normalised; a point belongs to the centroid of
//! largest inner product); `Euclidean` is for L2. The assignment step, the only expensive one,
//! runs on rayon's threads: pure computation, it never calls into Postgres.

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::rng::SplitMix64;
use crate::vector::dot_batch;

/// A coordinate type k-means reads points in: f32, or f16 (an index build keeps its sample in
/// the keys' own f16, twice the keys in the same memory, and widens a block at a time).
pub trait Coordinate: Copy + Send + Sync {
    /// `src` as f32: `src` itself for f32, else widened into `buf`.
    fn as_f32<'a>(src: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32];
}

impl Coordinate for f32 {
    fn as_f32<'a>(src: &'a [f32], _buf: &'a mut Vec<f32>) -> &'a [f32] {
        src
    }
}

impl Coordinate for f16 {
    fn as_f32<'a>(src: &'a [f16], buf: &'a mut Vec<f32>) -> &'a [f32] {
        buf.clear();
        buf.resize(src.len(), 0.0);
        src.convert_to_f32_slice(buf);
        buf
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Geometry {
    Spherical,
    Euclidean,
}

/// `k` centroids (row-major, `dim` values each) trained on `sample` (row-major). Fewer distinct
/// points than `k` gives fewer centroids; an empty sample gives none.
pub fn train<T: Coordinate>(
    sample: &[T],
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
pub fn train_with<T: Coordinate>(
    sample: &[T],
    dim: usize,
    k: usize,
    geometry: Geometry,
    iterations: usize,
    seed: u64,
    between_steps: &mut dyn FnMut(),
) -> Vec<f32> {
    assert!(
        dim > 0 && sample.len().is_multiple_of(dim),
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
    let mut buf = Vec::new();
    for _ in 0..iterations {
        let assignment = assign_cancellable(&centroids, dim, sample, geometry);
        let mut sums = vec![0.0f64; k * dim];
        let mut counts = vec![0usize; k];
        for (p, &c) in assignment.iter().enumerate() {
            counts[c as usize] += 1;
            let row = &mut sums[c as usize * dim..(c as usize + 1) * dim];
            for (s, &x) in row
                .iter_mut()
                .zip(T::as_f32(&sample[p * dim..(p + 1) * dim], &mut buf))
            {
                *s += x as f64;
            }
        }
        for c in 0..k {
            let row = &mut centroids[c * dim..(c + 1) * dim];
            if counts[c] == 0 {
                let p = rng.below(n as u64) as usize;
                row.copy_from_slice(T::as_f32(&sample[p * dim..(p + 1) * dim], &mut buf));
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

/// Seeding candidates per centre, at most: the seeding reads them once per pass.
const SEED_POINTS_PER_CENTRE: usize = 16;
/// Centres a seeding pass may draw together are `k / SEED_PASSES` (at least one): about this
/// many passes over the candidates, however many centres.
const SEED_PASSES: usize = 64;

/// k-means++ seeding over at most 16 points per centre. Up to 64 centres (and at least until
/// 64 are chosen) each pass draws one centre, exactly k-means++; past that, a pass draws
/// k/64 centres, each ∝ squared distance to the centres chosen before the pass (a point drawn
/// counts as covered, so no point is drawn twice). One pass per centre would read the
/// candidates k times: seconds at a thousand lists, for little gain over batches once the
/// centres are many.
fn plus_plus<T: Coordinate>(sample: &[T], dim: usize, k: usize, rng: &mut SplitMix64) -> Vec<f32> {
    crate::threads::global_pool();
    let n = sample.len() / dim;
    let m = n.min(SEED_POINTS_PER_CENTRE * k).max(k);
    // A uniform subset of m points: a partial Fisher-Yates shuffle of the indices.
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..m {
        let j = i + rng.below((n - i) as u64) as usize;
        order.swap(i, j);
    }
    let points: Vec<&[T]> = order[..m]
        .iter()
        .map(|&i| &sample[i * dim..(i + 1) * dim])
        .collect();
    let per_pass = (k / SEED_PASSES).max(1);
    let mut centroids = Vec::with_capacity(k * dim);
    let mut buf = Vec::new();
    centroids.extend_from_slice(T::as_f32(points[rng.below(m as u64) as usize], &mut buf));
    let mut chosen = 1;
    let mut measured = 0;
    let mut nearest: Vec<f64> = vec![f64::INFINITY; m];
    while chosen < k {
        crate::interrupt::check();
        let new = &centroids[measured * dim..chosen * dim];
        nearest
            .par_iter_mut()
            .zip(&points)
            .for_each_init(Vec::new, |buf, (d, p)| {
                let p = T::as_f32(p, buf);
                for c in new.chunks_exact(dim) {
                    let dist = crate::vector::l2sq(p, c) as f64;
                    if dist < *d {
                        *d = dist;
                    }
                }
            });
        measured = chosen;
        let mut total: f64 = nearest.iter().sum();
        for _ in 0..per_pass.min(k - chosen) {
            // The last positive term if rounding leaves the target past every one; a random
            // candidate if every one is covered (fewer distinct points than centres).
            let mut pick = None;
            if total > 0.0 {
                let mut target = rng.unit() * total;
                for (i, d) in nearest.iter().enumerate() {
                    if *d > 0.0 {
                        pick = Some(i);
                        if target < *d {
                            break;
                        }
                        target -= d;
                    }
                }
            }
            let pick = pick.unwrap_or_else(|| rng.below(m as u64) as usize);
            total -= nearest[pick];
            // Drawn: not again in this pass (the next pass measures it as a centre anyway).
            nearest[pick] = 0.0;
            centroids.extend_from_slice(T::as_f32(points[pick], &mut buf));
            chosen += 1;
        }
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
fn assign_cancellable<T: Coordinate>(
    centroids: &[f32],
    dim: usize,
    points: &[T],
    geometry: Geometry,
) -> Vec<u32> {
    let mut out = Vec::with_capacity(points.len() / dim);
    for block in points.chunks(ASSIGN_BLOCK * dim) {
        out.extend(assign(centroids, dim, block, geometry));
        crate::interrupt::check();
    }
    out
}

/// Scores one matrix product holds at most (16 MB of f32): a block of points times every
/// centroid, so the block shrinks as the lists grow.
const PRODUCT_SCORES: usize = 1 << 22;

/// The centroid each point belongs to (see [`nearest`]), computed in parallel: blocks of points
/// scored against every centroid as one matrix product (what makes training and the build's
/// filing fast: a product reuses each centroid across the block, where one point at a time
/// streams every centroid through the cache again). The sums run in another order than
/// [`nearest`]'s, so a point almost equidistant from two centroids may go to either.
pub fn assign<T: Coordinate>(
    centroids: &[f32],
    dim: usize,
    points: &[T],
    geometry: Geometry,
) -> Vec<u32> {
    crate::threads::global_pool();
    let norms = half_squared_norms(centroids, dim, geometry);
    let lists = norms.len();
    if lists == 0 {
        return vec![0; points.len() / dim];
    }
    let block = (PRODUCT_SCORES / lists).clamp(1, 256);
    points
        .par_chunks(dim * block)
        .flat_map_iter(|chunk| {
            let mut buf = Vec::new();
            let chunk = T::as_f32(chunk, &mut buf);
            let rows = chunk.len() / dim;
            let mut scores = vec![0.0f32; rows * lists];
            scores_product(chunk, rows, centroids, lists, dim, &mut scores);
            scores
                .chunks_exact(lists)
                .map(|s| argmax_less(s, &norms))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `scores[i·lists + j] = points[i] · centroids[j]` for `rows` points and `lists` centroids
/// (both row-major, `dim` values each), on the calling thread.
fn scores_product(
    points: &[f32],
    rows: usize,
    centroids: &[f32],
    lists: usize,
    dim: usize,
    scores: &mut [f32],
) {
    assert!(
        points.len() >= rows * dim
            && centroids.len() >= lists * dim
            && scores.len() >= rows * lists,
        "a product's operands are shorter than its shape"
    );
    // SAFETY: the lengths are asserted above; scores is rows × lists, points rows × dim, and
    // centroids lists × dim read as its transpose (column stride dim), all row-major. Nothing
    // else aliases `scores`.
    unsafe {
        gemm::gemm(
            rows,
            lists,
            dim,
            scores.as_mut_ptr(),
            1,
            lists as isize,
            false,
            points.as_ptr(),
            1,
            dim as isize,
            centroids.as_ptr(),
            dim as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
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
    let key = nearness(centroids, norms, point);
    let mut order: Vec<u32> = (0..key.len() as u32).collect();
    order.sort_by(|&a, &b| nearer_first(&key, a, b));
    order
}

/// How near each centroid is to `point`, larger nearer: p·c for spheres; p·c − |c|²/2 =
/// (|p|² − |p − c|²)/2 − const for L2.
fn nearness(centroids: &[f32], norms: &[f32], point: &[f32]) -> Vec<f32> {
    let mut scores = vec![0.0f32; norms.len()];
    dot_batch(point, centroids, &mut scores);
    scores.iter_mut().zip(norms).for_each(|(s, n)| *s -= n);
    scores
}

/// The order of [`ranked`] by [`nearness`] `key`: nearer first, then the lower index.
pub fn nearer_first(key: &[f32], a: u32, b: u32) -> std::cmp::Ordering {
    key[b as usize].total_cmp(&key[a as usize]).then(a.cmp(&b))
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
    argmax_less(scores, half_norms)
}

/// The index of the largest `score − half_norm` (the first of equals).
fn argmax_less(scores: &[f32], half_norms: &[f32]) -> u32 {
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
    fn an_f16_sample_trains_and_assigns_as_its_widened_f32_copy() {
        // More points than a seeding pass draws from and than one assignment block holds, so
        // every widening path runs; both geometries.
        let (points, _) = blobs(70, 80, 24, 5);
        let halves: Vec<f16> = points.iter().map(|&x| f16::from_f32(x)).collect();
        let widened: Vec<f32> = halves.iter().map(|x| x.to_f32()).collect();
        assert_ne!(
            widened, points,
            "f16 rounds the blobs: the copies differ from the input"
        );
        for geometry in [Geometry::Euclidean, Geometry::Spherical] {
            let from_halves = train(&halves, 24, 70, geometry, 4, 11);
            let from_widened = train(&widened, 24, 70, geometry, 4, 11);
            assert_eq!(from_halves, from_widened, "{geometry:?}");
            assert_eq!(
                assign(&from_halves, 24, &halves, geometry),
                assign(&from_halves, 24, &widened, geometry),
                "{geometry:?}"
            );
        }
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

    /// The product's assignment picks a centroid whose score is the best one up to rounding,
    /// for blocks of every size (a partial last block, lists past one block's worth of scores).
    #[test]
    fn assignment_by_product_picks_the_best_centroid() {
        let dim = 24;
        let mut rng = SplitMix64(11);
        for (points, lists) in [(1_000, 37), (100, PRODUCT_SCORES / 100 + 3)] {
            let xs: Vec<f32> = (0..points * dim).map(|_| rng.unit() as f32 - 0.5).collect();
            let cs: Vec<f32> = (0..lists * dim).map(|_| rng.unit() as f32 - 0.5).collect();
            for geometry in [Geometry::Spherical, Geometry::Euclidean] {
                let got = assign(&cs, dim, &xs, geometry);
                assert_eq!(got.len(), points);
                let mut agree = 0;
                for (p, &g) in xs.chunks_exact(dim).zip(&got) {
                    let key = |c: usize| {
                        let row = &cs[c * dim..(c + 1) * dim];
                        let dot: f64 = p.iter().zip(row).map(|(a, b)| *a as f64 * *b as f64).sum();
                        match geometry {
                            Geometry::Spherical => dot,
                            Geometry::Euclidean => {
                                dot - row.iter().map(|x| *x as f64 * *x as f64).sum::<f64>() / 2.0
                            }
                        }
                    };
                    let best = (0..lists).map(key).fold(f64::NEG_INFINITY, f64::max);
                    assert!(
                        key(g as usize) >= best - 1e-5,
                        "{} < {best}",
                        key(g as usize)
                    );
                    agree += (g == nearest(&cs, dim, p, geometry)) as usize;
                }
                assert!(
                    agree >= points * 99 / 100,
                    "{agree} of {points} agree with nearest"
                );
            }
        }
    }

    #[test]
    fn fewer_points_than_clusters_and_empty_samples() {
        let points = vec![1.0, 0.0, 0.0, 1.0];
        assert_eq!(train(&points, 2, 10, Geometry::Spherical, 5, 0).len(), 4);
        assert!(train::<f32>(&[], 2, 10, Geometry::Spherical, 5, 0).is_empty());
    }
}
