//! KeyOpt reading cost, in one run:
//!
//! - `read_candidate`: one packed row `[k0; Δk; β]` read against a query (two 512-d inner
//!   products, a clip, an add), the cost a KeyOpt search pays per candidate (target ≤ 1 µs);
//! - `scan_32k_skills`: the full-scan path over 32k packed rows (128 MiB of f32: beyond the
//!   caches) next to a memcpy of the same buffer, both as bytes per second (target ≥ 70 % of
//!   memcpy).
//!
//! `cargo bench -p pg_skills_kernels --bench keyopt`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pg_skills_kernels::keyopt::{packed_len, read_row, scan, QueryKey, Settings};
use pg_skills_kernels::vector::KEY_DIM;

const SKILLS: usize = 32_768;

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn settings() -> Settings {
    Settings {
        use_dk: true,
        clip: 0.5,
        alpha: 0.0,
        kappa: 0.0,
    }
}

fn read_candidate(c: &mut Criterion) {
    let len = packed_len(KEY_DIM);
    let rows = data(len * 1024, 1);
    let query = QueryKey::new(&data(KEY_DIM, 2), &data(KEY_DIM, 3));
    let s = settings();
    let mut g = c.benchmark_group("keyopt");
    // Ten candidates spread over a round of 1,024 skills (rows not adjacent), per iteration.
    g.throughput(Throughput::Elements(10));
    g.bench_function("read_10_candidates", |bench| {
        bench.iter(|| {
            let mut total = 0.0f32;
            for i in 0..10 {
                let row = &rows[(i * 97 % 1024) * len..][..len];
                total += read_row(black_box(row), black_box(&query), 1.3, &s).total();
            }
            total
        })
    });
    g.finish();
}

fn scan_vs_memcpy(c: &mut Criterion) {
    let len = packed_len(KEY_DIM);
    let rows = data(len * SKILLS, 4);
    let query = QueryKey::new(&data(KEY_DIM, 5), &data(KEY_DIM, 6));
    let s = settings();
    let mut out = vec![0f32; SKILLS];
    let bytes = (rows.len() * 4) as u64;
    let mut g = c.benchmark_group("scan_32k_skills");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("keyopt_scan", |bench| {
        bench.iter(|| scan(black_box(&rows), black_box(&query), 1.3, &s, &mut out))
    });
    let mut dst = vec![0f32; rows.len()];
    g.bench_function("memcpy", |bench| {
        bench.iter(|| dst.copy_from_slice(black_box(&rows)))
    });
    g.finish();
}

criterion_group!(benches, read_candidate, scan_vs_memcpy);
criterion_main!(benches);
