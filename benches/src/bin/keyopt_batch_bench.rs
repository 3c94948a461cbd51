//! KeyOpt batch scoring, GPU against the CPU twin, on synthetic skills: agreement of the top k
//! (same ids in both orders, scores within f32 tolerance), GPU throughput in queries/s and in
//! GB/s of skill records read (against the H200's HBM bandwidth), CPU queries/s on the same data.
//!
//!   benches/cuda/build.sh              # here: the release binary and libnvrtc into target/cuda-bench
//!   benches/cuda/run.sh                # on the GPU machine: 10^4 queries × 10^5 and 10^6 skills
//!   keyopt_batch_bench --skills 100000 --queries 10000 --cpu-queries 200
//!
//! Built without the `cuda` feature (or run without a GPU) it measures the CPU alone and says
//! why the GPU was not measured.

use std::time::Instant;

use clap::Parser;
use half::f16;

use pg_skills_kernels::keyopt::batch::{top_k, Hit, Order, Query, Reading, Records};
use pg_skills_kernels::keyopt::Settings;
use pg_skills_kernels::rng::SplitMix64;

#[derive(Parser)]
struct Args {
    /// Skill records.
    #[arg(long, default_value_t = 100_000)]
    skills: usize,
    /// Queries scored on the GPU.
    #[arg(long, default_value_t = 10_000)]
    queries: usize,
    /// Queries scored on the CPU too (its rate, and the agreement check).
    #[arg(long, default_value_t = 200)]
    cpu_queries: usize,
    #[arg(long, default_value_t = 10)]
    k: usize,
    #[arg(long, default_value_t = 512)]
    dim: usize,
    /// The GPU's memory bandwidth in GB/s, for the share of it reached (H200: 4800).
    #[arg(long, default_value_t = 4800.0)]
    bandwidth_gbs: f64,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Only compile the kernels to PTX into this folder (for a GPU machine without NVRTC).
    #[arg(long)]
    write_ptx: Option<std::path::PathBuf>,
}

fn unit_vector(rng: &mut SplitMix64, dim: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 - 0.5).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.into_iter().map(|x| x / norm).collect()
}

fn synthetic(args: &Args) -> (Records, Vec<Query>, Reading) {
    let mut rng = SplitMix64(args.seed);
    let mut records = Records::new(args.dim);
    for i in 0..args.skills {
        let k0: Vec<f16> = unit_vector(&mut rng, args.dim)
            .into_iter()
            .map(f16::from_f32)
            .collect();
        let dk: Vec<f32> = unit_vector(&mut rng, args.dim)
            .into_iter()
            .map(|x| x * 0.3)
            .collect();
        let beta = (rng.unit() as f32 - 0.5) * 0.2;
        let fitted = i % 4 != 0;
        records.push(&k0, fitted.then_some((&dk[..], beta)), (i % 7) as u8);
    }
    let mu: Vec<f32> = unit_vector(&mut rng, args.dim)
        .into_iter()
        .map(|x| x * 0.1)
        .collect();
    let queries = (0..args.queries)
        .map(|i| {
            // One query in eight asks for two pools only.
            let mask = if i % 8 == 0 { 0b0000_0110 } else { u8::MAX };
            Query::new(&unit_vector(&mut rng, args.dim), &mu, mask)
        })
        .collect();
    let reading = Reading {
        rho: 2.0,
        settings: Settings {
            use_dk: true,
            clip: 0.05,
            alpha: 0.0,
            kappa: 0.0,
        },
    };
    (records, queries, reading)
}

/// Same ids (as sets) per query, and the largest score difference of matching ids.
fn agreement(gpu: &[Vec<Hit>], cpu: &[Vec<Hit>], order: Order) -> (usize, usize, f32) {
    let mut same_sets = 0;
    let mut same_order = 0;
    let mut max_diff = 0f32;
    for (g, c) in gpu.iter().zip(cpu) {
        let mut gi: Vec<u32> = g.iter().map(|h| h.index).collect();
        let mut ci: Vec<u32> = c.iter().map(|h| h.index).collect();
        if gi == ci {
            same_order += 1;
        }
        gi.sort_unstable();
        ci.sort_unstable();
        if gi == ci {
            same_sets += 1;
        }
        for h in g {
            if let Some(o) = c.iter().find(|o| o.index == h.index) {
                max_diff = max_diff.max((h.key(order) - o.key(order)).abs());
            }
        }
    }
    (same_sets, same_order, max_diff)
}

fn main() {
    let args = Args::parse();
    if let Some(dir) = &args.write_ptx {
        write_ptx(dir, args.dim);
        return;
    }
    let (records, queries, reading) = synthetic(&args);
    let gb = records.len() as f64 * records.record_bytes() as f64 / 1e9;
    println!(
        "## KeyOpt batch scoring: {} skills × {} dims ({gb:.2} GB of records), {} queries, k {}\n",
        records.len(),
        args.dim,
        queries.len(),
        args.k
    );
    let cpu_n = args.cpu_queries.min(queries.len());
    let started = Instant::now();
    let cpu = top_k(&records, &queries[..cpu_n], &reading, Order::KeyOpt, args.k);
    let cpu_s = started.elapsed().as_secs_f64();
    println!(
        "| CPU ({} threads), KeyOpt order | {cpu_n} queries | {:.3} s | {:.1} queries/s | {:.1} GB/s of records |",
        rayon::current_num_threads(),
        cpu_s,
        cpu_n as f64 / cpu_s,
        gb * cpu_n as f64 / cpu_s
    );
    gpu(&args, records, &queries, &reading, &cpu, cpu_n, gb);
}

#[cfg(feature = "cuda")]
fn write_ptx(dir: &std::path::Path, dim: usize) {
    let archs = ["compute_80", "compute_86", "compute_89", "compute_90"];
    pg_skills_kernels::keyopt::cuda::write_ptx(dir, dim, &archs).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    println!("kernels for {dim}-d keys in {}", dir.display());
}

#[cfg(not(feature = "cuda"))]
fn write_ptx(_: &std::path::Path, _: usize) {
    eprintln!("built without the cuda feature");
    std::process::exit(1);
}

#[cfg(not(feature = "cuda"))]
fn gpu(_: &Args, _: Records, _: &[Query], _: &Reading, _: &[Vec<Hit>], _: usize, _: f64) {
    println!(
        "\nGPU not measured: built without the cuda feature (benches/cuda/build.sh builds it)."
    );
}

#[cfg(feature = "cuda")]
fn gpu(
    args: &Args,
    records: Records,
    queries: &[Query],
    reading: &Reading,
    cpu: &[Vec<Hit>],
    cpu_n: usize,
    gb: f64,
) {
    use pg_skills_kernels::keyopt::cuda::{CudaScorer, QUERY_BATCH};
    let copy = records.clone();
    let started = Instant::now();
    let scorer = match CudaScorer::new(records) {
        Ok(s) => s,
        Err(e) => {
            println!("\nGPU not measured: {e}");
            return;
        }
    };
    let upload_s = started.elapsed().as_secs_f64();
    // The first batch also loads the module's code: warm up once.
    let _ = scorer.top_k(&queries[..1], reading, Order::KeyOpt, args.k);
    let mut failed = false;
    for order in [Order::KeyOpt, Order::Relevance] {
        let started = Instant::now();
        let hits = match scorer.top_k(queries, reading, order, args.k) {
            Ok(h) => h,
            Err(e) => {
                println!("GPU scoring failed: {e}");
                failed = true;
                break;
            }
        };
        let s = started.elapsed().as_secs_f64();
        let batches = queries.len().div_ceil(QUERY_BATCH) as f64;
        let gbs = gb * batches / s;
        println!(
            "| GPU {} ({order:?} order) | {} queries | {s:.3} s | {:.1} queries/s | {gbs:.1} GB/s of records ({:.0} % of {} GB/s) |",
            scorer.device(),
            queries.len(),
            queries.len() as f64 / s,
            100.0 * gbs / args.bandwidth_gbs,
            args.bandwidth_gbs
        );
        let reference = match order {
            Order::KeyOpt => cpu.to_vec(),
            Order::Relevance => top_k(&copy, &queries[..cpu_n], reading, order, args.k),
        };
        let (sets, same, diff) = agreement(&hits[..cpu_n], &reference, order);
        println!(
            "|   agreement with the CPU ({order:?}) | {cpu_n} queries | same ids {sets}/{cpu_n}, same order {same}/{cpu_n} | max |Δscore| {diff:.2e} |"
        );
        if sets != cpu_n {
            failed = true;
        }
    }
    println!("\nrecords uploaded in {upload_s:.2} s");
    if failed {
        eprintln!("the GPU and the CPU disagree");
        std::process::exit(1);
    }
}
