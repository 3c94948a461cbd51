//! What encoding a search request in reduced precision (`pg_skills.query_precision = int16`:
//! 16-bit integer products; `int8`: 8-bit ones; `bf16`: bfloat16 on AMX tiles) changes against f32 (`f32`): each
//! test request is encoded alone in each, as a search encodes it, and ranked against the skill
//! keys (stored keys are always f32, encoded in batches). Reports how close each query key is to
//! the f32 one, how often the rankings differ, and the retrieval quality of each, side by side.
//! A precision this CPU does not run is left out (bf16 without AMX would be int16's products).
//!
//!   cargo run --release -p pg_skills_benches --bin query_precision_eval -- --shared ../shared

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

use pg_skills_benches::eval::{
    bucket, cached_embeddings, evaluate, key_ranking, load, row, Dataset,
};
use pg_skills_kernels::compressor;
use pg_skills_kernels::encoder::{
    document_text, Encoder, Precision, BATCH_SIZE, DEFAULT_MODEL_DIR,
};
use pg_skills_kernels::vector::scalar::dot;

#[derive(Parser)]
struct Args {
    /// The shared data folder (bench-data/metatool, bench-data/skillsbench-tasks).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    #[arg(long, default_value = DEFAULT_MODEL_DIR)]
    model: PathBuf,
    /// Cut every request to its first N words (short requests: fewer rows to average the
    /// products' rounding over).
    #[arg(long)]
    words: Option<usize>,
}

fn main() {
    let args = Args::parse();
    let encoder = Encoder::load(&args.model).unwrap_or_else(|e| panic!("{e} (run ./x model)"));
    let mut reduced = Vec::new();
    if Precision::int16_available() {
        reduced.push(("int16", Precision::Int16));
    } else {
        eprintln!("query_precision_eval: neither AVX-512 VNNI nor AVX2 here: int16 left out");
    }
    if Precision::int8_available() {
        reduced.push(("int8", Precision::Int8));
    } else {
        eprintln!("query_precision_eval: no AVX-512 VNNI here: int8 left out");
    }
    if Precision::bf16_available() {
        reduced.push(("bf16", Precision::Bf16));
    } else {
        eprintln!("query_precision_eval: no AMX-BF16 here: bf16 left out");
    }
    if reduced.is_empty() {
        std::process::exit(2);
    }
    let bench = args.shared.join("bench-data");
    let mut metatool = load(&bench.join("metatool"), false);
    let mut skillsbench = load(&bench.join("skillsbench-tasks"), true);
    if let Some(n) = args.words {
        for data in [&mut metatool, &mut skillsbench] {
            for query in &mut data.queries {
                query.1 = query.1.split_whitespace().take(n).collect::<Vec<_>>().join(" ");
            }
        }
    }
    // MetaTool's test split of the other evaluations (every query id in bucket < 20), and all
    // 52 SkillsBench tasks (their instructions: long requests).
    let test: Vec<usize> = (0..metatool.queries.len())
        .filter(|&q| bucket(&metatool.queries[q].0) < 20)
        .collect();
    compare("MetaTool (199 tools)", &encoder, &metatool, &test, &reduced);
    let all: Vec<usize> = (0..skillsbench.queries.len()).collect();
    compare(
        "SkillsBench (123 skills)",
        &encoder,
        &skillsbench,
        &all,
        &reduced,
    );
}

fn compare(
    name: &str,
    encoder: &Encoder,
    data: &Dataset,
    queries: &[usize],
    reduced: &[(&str, Precision)],
) {
    let texts: Vec<String> = data
        .docs
        .iter()
        .map(|d| document_text(&d.1, &d.2, &d.3))
        .collect();
    let keys: Vec<Vec<f32>> = cached_embeddings(encoder, &texts)
        .iter()
        .map(|e| compressor::skill_key(None, e))
        .collect();
    let started = Instant::now();
    let key_in = |q: usize, precision: Precision| {
        let text = data.queries[q].1.as_str();
        compressor::query_key(&encoder.embed_queries(&[text], precision).expect("encode")[0])
    };
    // Per request: its f32 key, then one key per reduced precision.
    let keys_of: Vec<Vec<Vec<f32>>> = queries
        .iter()
        .map(|&q| {
            std::iter::once(Precision::F32)
                .chain(reduced.iter().map(|r| r.1))
                .map(|p| key_in(q, p))
                .collect()
        })
        .collect();
    let seconds = started.elapsed().as_secs_f64();
    let n = keys_of.len();
    println!("### {name}: {n} requests, each encoded alone in every precision ({seconds:.0} s)\n");
    println!("| query key | lowest cosine to f32 | mean cosine | top-1 unchanged | top-10 entries unchanged | top-10 lists identical |");
    println!("|---|---|---|---|---|---|");
    for (i, (label, _)) in reduced.iter().enumerate() {
        let (mut lowest, mut total) = (1f64, 0f64);
        let (mut same_first, mut same_entries, mut same_lists) = (0usize, 0usize, 0usize);
        for keys_here in &keys_of {
            let (exact, other) = (&keys_here[0], &keys_here[i + 1]);
            let cosine = dot(exact, other);
            lowest = lowest.min(cosine);
            total += cosine;
            let (a, b) = (key_ranking(exact, &keys), key_ranking(other, &keys));
            same_first += usize::from(a.first() == b.first());
            same_entries += a.iter().filter(|d| b.contains(d)).count();
            same_lists += usize::from(a == b);
        }
        println!(
            "| {label} | {lowest:.7} | {:.7} | {same_first} / {n} | {:.2} % | {same_lists} / {n} |",
            total / n as f64,
            100.0 * same_entries as f64 / (10 * n) as f64
        );
    }
    println!();
    let index: std::collections::HashMap<usize, usize> =
        queries.iter().enumerate().map(|(i, &q)| (q, i)).collect();
    println!("| query key | NDCG@10 | Recall@10 | Hit@1 | MRR@10 |");
    println!("|---|---|---|---|---|");
    for (column, label) in std::iter::once("f32")
        .chain(reduced.iter().map(|r| r.0))
        .enumerate()
    {
        let metrics = evaluate(data, queries, |q| {
            key_ranking(&keys_of[index[&q]][column], &keys)
        });
        println!("{}", row(label, &metrics));
    }
    // The skill keys in bfloat16 too (`pg_skills.document_precision = bf16`), ranked by the
    // bf16 request keys: a library whose documents and requests are both encoded on AMX tiles.
    if let Some(column) = reduced.iter().position(|r| r.1 == Precision::Bf16) {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let tile_keys: Vec<Vec<f32>> = encoder
            .embed_on(None, &refs, BATCH_SIZE, Precision::Bf16, &mut |_| {})
            .expect("encode")
            .iter()
            .map(|e| compressor::skill_key(None, e))
            .collect();
        let lowest = tile_keys
            .iter()
            .zip(&keys)
            .map(|(a, b)| dot(a, b))
            .fold(1f64, f64::min);
        let metrics = evaluate(data, queries, |q| {
            key_ranking(&keys_of[index[&q]][column + 1], &tile_keys)
        });
        println!("{}", row("bf16, skill keys in bf16 too", &metrics));
        println!("\nSkill keys in bf16: lowest cosine to the f32 skill key {lowest:.7}.");
    }
    println!();
}
