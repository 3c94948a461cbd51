//! Encoder throughput on fixed texts, for the side-by-side run with sentence-transformers
//! (benches/throughput/run.sh, which also writes the texts with `--write-texts`).
//!
//! Texts: the 123 SkillsBench skills as the extension embeds them (name, description,
//! instructions; 256-token truncation) and the first 1,000 MetaTool queries.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

use pg_skills_kernels::encoder::{
    document_text, Encoder, Precision, BATCH_SIZE, DEFAULT_MODEL_DIR,
};

/// Queries encoded one per call for the single-query rate.
const SINGLE_QUERIES: usize = 300;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = DEFAULT_MODEL_DIR)]
    model: PathBuf,
    /// The shared data folder (only read by --write-texts).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    /// Write the benchmark texts to this JSON file ({"documents": [...], "queries": [...]}) and exit.
    #[arg(long)]
    write_texts: Option<PathBuf>,
    /// Read the texts from this file.
    #[arg(long)]
    texts: Option<PathBuf>,
    /// Only the single-query rate (one query per call, as a search encodes it).
    #[arg(long)]
    single_only: bool,
    /// Cut each single query to its first N words (a short search request).
    #[arg(long)]
    single_words: Option<usize>,
    /// Products of the single queries: f32, int16 (16-bit integer products where the CPU has
    /// AVX-512 VNNI or AVX2), int8 (8-bit ones where it has AVX-512 VNNI, else int16) or bf16
    /// (bfloat16 on AMX tiles where the CPU has AMX-BF16, else int16), as
    /// `pg_skills.query_precision` sets them in a search.
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Products of the batches (documents, query batches): f32, or bf16 (AMX tiles, where
    /// the CPU has AMX-BF16), as `pg_skills.document_precision` sets them.
    #[arg(long, default_value = "f32")]
    batch_precision: String,
    /// Each single query with the parts a search covers (`needs::parts`, where it has two or
    /// more): `one-pass` encodes the request and its parts together, as a search does since
    /// they are encoded with the request; `two-pass` the request, then its parts.
    #[arg(long)]
    parts: Option<String>,
}

fn write_texts(shared: &std::path::Path, out: &std::path::Path) {
    let bench = shared.join("bench-data");
    let corpus = std::fs::read_to_string(bench.join("skillsbench-tasks/corpus.jsonl")).unwrap();
    let documents: Vec<String> = corpus
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let title = v["title"].as_str().unwrap_or_default();
            let body = v["text"].as_str().unwrap_or_default();
            match pg_skills_corpus::skill::parse_skill_md(body, Some(title)) {
                Ok(s) => document_text(&s.name, &s.description, &s.instructions),
                Err(_) => document_text(title, "", body),
            }
        })
        .collect();
    let queries: Vec<String> = std::fs::read_to_string(bench.join("metatool/queries.jsonl"))
        .unwrap()
        .lines()
        .take(1000)
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["text"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    let json = serde_json::json!({ "documents": documents, "queries": queries });
    std::fs::write(out, serde_json::to_string(&json).unwrap()).unwrap();
}

fn main() {
    let args = Args::parse();
    let precision = match args.precision.as_str() {
        "f32" => Precision::F32,
        "int16" => Precision::Int16,
        "int8" => Precision::Int8,
        "bf16" => Precision::Bf16,
        other => panic!("--precision {other}: f32, int16, int8 or bf16"),
    };
    let batch_precision = match args.batch_precision.as_str() {
        "f32" => Precision::F32,
        "bf16" if Precision::bf16_available() => Precision::Bf16,
        "bf16" => panic!("--batch-precision bf16: no AMX-BF16 here"),
        other => panic!("--batch-precision {other}: f32 or bf16"),
    };
    if let Some(out) = &args.write_texts {
        write_texts(&args.shared, out);
        return;
    }
    let texts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(args.texts.expect("--texts FILE")).unwrap())
            .unwrap();
    let list = |key: &str| -> Vec<String> {
        texts[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    };
    let (documents, queries) = (list("documents"), list("queries"));
    pg_skills_kernels::encoder::keep_freed_memory();
    let encoder = Encoder::load(&args.model).unwrap_or_else(|e| {
        eprintln!("embed_throughput: {e} (./x model fetches the model)");
        std::process::exit(2)
    });
    // One warm-up batch (allocator, thread pool).
    let warm: Vec<&str> = queries
        .iter()
        .take(BATCH_SIZE)
        .map(String::as_str)
        .collect();
    encoder.embed(&warm).unwrap();
    // And one single query (an Int16 pass quantises the weights on its first use).
    encoder.embed_queries(&warm[..1], precision).unwrap();
    let rate = |texts: &[String]| -> f64 {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let t = Instant::now();
        encoder
            .embed_on(None, &refs, BATCH_SIZE, batch_precision, &mut |_| {})
            .unwrap();
        texts.len() as f64 / t.elapsed().as_secs_f64()
    };
    let (docs, qs) = if args.single_only {
        (f64::NAN, f64::NAN)
    } else {
        (rate(&documents), rate(&queries))
    };
    // One query per call, as a search encodes it: latency rather than batch throughput.
    let single: Vec<String> = queries[..SINGLE_QUERIES.min(queries.len())]
        .iter()
        .map(|q| match args.single_words {
            Some(n) => q.split_whitespace().take(n).collect::<Vec<_>>().join(" "),
            None => q.clone(),
        })
        .collect();
    let parts: Vec<Vec<String>> = single
        .iter()
        .map(|q| match args.parts {
            Some(_) => Some(pg_skills_kernels::needs::parts(q)).filter(|p| p.len() >= 2),
            None => None,
        })
        .map(Option::unwrap_or_default)
        .collect();
    let one_pass = match args.parts.as_deref() {
        None | Some("one-pass") => true,
        Some("two-pass") => false,
        Some(other) => panic!("--parts {other}: one-pass or two-pass"),
    };
    let t = Instant::now();
    let mut latencies_ms: Vec<f64> = single
        .iter()
        .zip(&parts)
        .map(|(q, parts)| {
            let t = Instant::now();
            let parts = parts.iter().map(String::as_str);
            if one_pass {
                let texts: Vec<&str> = std::iter::once(q.as_str()).chain(parts).collect();
                encoder.embed_queries(&texts, precision).unwrap();
            } else {
                encoder.embed_queries(&[q.as_str()], precision).unwrap();
                let parts: Vec<&str> = parts.collect();
                if !parts.is_empty() {
                    encoder.embed_queries(&parts, precision).unwrap();
                }
            }
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let with_parts = parts.iter().filter(|p| !p.is_empty()).count();
    let single_qs = single.len() as f64 / t.elapsed().as_secs_f64();
    latencies_ms.sort_by(f64::total_cmp);
    let at = |p: f64| latencies_ms[((latencies_ms.len() - 1) as f64 * p).round() as usize];
    let tokens: Vec<usize> = single
        .iter()
        .map(|q| encoder.token_ids(q).unwrap().len())
        .collect();
    println!(
        "{}",
        serde_json::json!({"engine": "pg_skills (own BERT forward)", "documents_per_s": docs,
                           "queries_per_s": qs, "single_queries_per_s": single_qs,
                           "single_p50_ms": at(0.5), "precision": format!("{precision:?}"),
                           "parts": args.parts, "queries_with_parts": with_parts,
                           "batch_precision": format!("{batch_precision:?}"),
                           "int16_products": precision != Precision::F32 && Precision::int16_available() && !(precision == Precision::Bf16 && Precision::bf16_available()) && !(precision == Precision::Int8 && Precision::int8_available()),
                           "int8_products": precision == Precision::Int8 && Precision::int8_available(),
                           "bf16_products": precision == Precision::Bf16 && Precision::bf16_available(), "single_p95_ms": at(0.95),
                           "single_mean_tokens": tokens.iter().sum::<usize>() as f64 / tokens.len().max(1) as f64})
    );
}
