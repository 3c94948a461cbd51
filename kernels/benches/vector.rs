//! Vector kernel throughput next to the machine's memory bandwidth, in one run.
//!
//! `cargo bench -p pg_skills_kernels --bench vector`
//!
//! The batched kernels stream 64k keys (128 MiB as f32, 64 MiB as f16: far beyond the caches), so
//! their bytes/s are comparable with the two bandwidth references measured on the same buffer:
//! a streaming read (sum of u64 words) and a memcpy.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use half::f16;
use pg_skills_kernels::vector::{self, KEY_DIM};

const KEYS: usize = 65_536;

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn single_pairs(c: &mut Criterion) {
    let (a, b) = (data(KEY_DIM, 1), data(KEY_DIM, 2));
    let (ah, bh): (Vec<f16>, Vec<f16>) = (
        a.iter().map(|x| f16::from_f32(*x)).collect(),
        b.iter().map(|x| f16::from_f32(*x)).collect(),
    );
    let mut g = c.benchmark_group("pair_512");
    g.bench_function("dot_f32_simd", |bench| {
        bench.iter(|| vector::dot(black_box(&a), black_box(&b)))
    });
    g.bench_function("dot_f32_scalar", |bench| {
        bench.iter(|| vector::scalar::dot(black_box(&a), black_box(&b)))
    });
    g.bench_function("dot_f16_simd", |bench| {
        bench.iter(|| vector::dot_f16(black_box(&ah), black_box(&bh)))
    });
    g.bench_function("cos_f32_simd", |bench| {
        bench.iter(|| vector::cos_distance(black_box(&a), black_box(&b)))
    });
    g.bench_function("l2sq_f32_simd", |bench| {
        bench.iter(|| vector::l2sq(black_box(&a), black_box(&b)))
    });
    g.finish();
}

fn batched_vs_bandwidth(c: &mut Criterion) {
    eprintln!("simsimd capabilities: {:?}", vector::simd_capabilities());
    let q = data(KEY_DIM, 3);
    let keys = data(KEY_DIM * KEYS, 4);
    let qh: Vec<f16> = q.iter().map(|x| f16::from_f32(*x)).collect();
    let keys_h: Vec<f16> = keys.iter().map(|x| f16::from_f32(*x)).collect();
    let mut out = vec![0f32; KEYS];

    let bytes_f32 = (keys.len() * 4) as u64;
    let mut g = c.benchmark_group("stream_64k_keys");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(bytes_f32));
    g.bench_function("dot_batch_f32", |bench| {
        bench.iter(|| vector::dot_batch(black_box(&q), black_box(&keys), &mut out))
    });
    let words: &[u64] = bytemuck::cast_slice(&keys);
    g.bench_function("read_bandwidth_sum_u64", |bench| {
        bench.iter(|| {
            black_box(words)
                .iter()
                .fold(0u64, |s, w| s.wrapping_add(*w))
        })
    });
    let mut dst = vec![0f32; keys.len()];
    g.bench_function("memcpy", |bench| {
        bench.iter(|| dst.copy_from_slice(black_box(&keys)))
    });
    g.throughput(Throughput::Bytes(bytes_f32 / 2));
    g.bench_function("dot_batch_f16", |bench| {
        bench.iter(|| vector::dot_batch_f16(black_box(&qh), black_box(&keys_h), &mut out))
    });
    g.finish();
}

criterion_group!(benches, single_pairs, batched_vs_bandwidth);
criterion_main!(benches);
