//! The skeys scan in process, without SQL: per query cost and what the scan does (entries
//! bounded by their codes, keys read one page at a time, keys read in a row) on the same keys
//! as `key_bench`, against exact search. A tool to see where a search's time goes.
//!
//! `target/release/key_scan --data real --size 100000 --probes 8,16`

use std::collections::HashSet;
use std::time::Instant;

use clap::Parser;
use half::f16;

use pg_skills_benches::real_keys::{top_k, with_replicas, RealKeySource};
use pg_skills_kernels::keyindex::search::search_counted;
use pg_skills_kernels::keyindex::{initialize, BulkLoader, Centroids, Metric};
use pg_skills_kernels::kmeans;
use pg_skills_kernels::layout::Tid;
use pg_skills_kernels::page::MemoryStore;
use pg_skills_kernels::vector::dot_batch;

const DIM: usize = 512;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 100000)]
    size: usize,
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    #[arg(long, value_delimiter = ',', default_value = "8,16")]
    probes: Vec<usize>,
    /// Rows each query takes (a LIMIT).
    #[arg(long, default_value_t = 10)]
    limit: usize,
    #[command(flatten)]
    real: RealKeySource,
    /// Lists (0: 4·√N, the index's default).
    #[arg(long, default_value_t = 0)]
    lists: usize,
}

fn tid(i: u32) -> Tid {
    Tid {
        block: i / 100,
        offset: (i % 100 + 1) as u16,
    }
}

fn main() {
    let args = Args::parse();
    let (keys, queries) = args.real.load();
    let keys = with_replicas(&keys, args.size, 4);
    let nq = args.queries.min(queries.len() / DIM);
    let queries = &queries[..nq * DIM];
    let n = keys.len() / DIM;
    let lists = if args.lists > 0 {
        args.lists
    } else {
        (4.0 * (n as f64).sqrt()).round() as usize
    };
    let t = Instant::now();
    let sample_rows = (lists * 64).min(n);
    let trained = kmeans::train(
        &keys[..sample_rows * DIM],
        DIM,
        lists,
        Metric::InnerProduct.geometry(),
        10,
        1,
    );
    let store = MemoryStore::new(8160);
    let meta = initialize(
        &store,
        DIM as u16,
        Metric::InnerProduct,
        &trained,
        1,
        n as u64,
    );
    let centroids = Centroids::load(&store, &meta).unwrap();
    let keys16: Vec<f16> = keys.iter().map(|&x| f16::from_f32(x)).collect();
    let assignment: Vec<u32> = keys16
        .chunks_exact(DIM)
        .map(|k| centroids.nearest(k))
        .collect();
    let tids: Vec<Tid> = (0..n as u32).map(tid).collect();
    let mut loader = BulkLoader::new(&store, meta);
    loader.add_batch(&centroids, &assignment, &tids, &keys16);
    let meta = loader.finish();
    // Searches read the pages in place, as the server reads a buffer's page (`MemoryStore`
    // copies every page it reads).
    let store = store.freeze();
    eprintln!(
        "{n} keys, {lists} lists, built in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // Exact top `limit` by f32 inner product.
    let truth: Vec<HashSet<u32>> = queries
        .chunks_exact(DIM)
        .map(|q| {
            let mut scores = vec![0f32; n];
            dot_batch(q, &keys, &mut scores);
            top_k(&scores, args.limit).into_iter().collect()
        })
        .collect();

    for &probes in &args.probes {
        for pass in 0..2 {
            let (mut pending, mut resolved, mut walked, mut hits) =
                (0usize, 0usize, 0usize, 0usize);
            let mut walks = 0usize;
            let mut times = Vec::with_capacity(nq);
            for (qi, q) in queries.chunks_exact(DIM).enumerate() {
                let q16: Vec<f16> = q.iter().map(|&x| f16::from_f32(x)).collect();
                let t = Instant::now();
                let (out, batch) =
                    search_counted(&store, &meta, &centroids, &q16, probes, args.limit).unwrap();
                times.push(t.elapsed().as_secs_f64() * 1e3);
                pending += batch.pending;
                resolved += batch.resolved;
                walked += batch.walked;
                walks += (batch.walked > 0) as usize;
                let got: Vec<u32> = out
                    .iter()
                    .map(|c| c.tid.block * 100 + c.tid.offset as u32 - 1)
                    .collect();
                hits += got.iter().filter(|i| truth[qi].contains(i)).count();
            }
            if pass == 0 {
                continue; // warm-up
            }
            times.sort_by(f64::total_cmp);
            let mean: f64 = times.iter().sum::<f64>() / nq as f64;
            println!(
                "probes {probes}: recall@{} {:.4}, mean {:.3} ms, p50 {:.3} ms, per query: {:.0} bounded, {:.1} read one at a time, {:.0} read in a row ({:.0} % of queries walk)",
                args.limit,
                hits as f64 / (nq * args.limit) as f64,
                mean,
                times[nq / 2],
                pending as f64 / nq as f64,
                resolved as f64 / nq as f64,
                walked as f64 / nq as f64,
                100.0 * walks as f64 / nq as f64,
            );
        }
    }
}
