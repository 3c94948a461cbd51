//! Encoder throughput on fixed texts, for the side-by-side run with sentence-transformers
//! (benches/throughput/run.sh, which also writes the texts with `--write-texts`).
//!
//! Texts: the 123 SkillsBench skills as the extension embeds them (name, description,
//! instructions; 256-token truncation) and the first 1,000 MetaTool queries.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

use pg_skills_kernels::encoder::{document_text, Encoder, BATCH_SIZE, DEFAULT_MODEL_DIR};

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
    let rate = |texts: &[String]| -> f64 {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let t = Instant::now();
        encoder.embed(&refs).unwrap();
        texts.len() as f64 / t.elapsed().as_secs_f64()
    };
    let (docs, qs) = if args.single_only {
        (f64::NAN, f64::NAN)
    } else {
        (rate(&documents), rate(&queries))
    };
    // One query per call, as a search encodes it: latency rather than batch throughput.
    let single = &queries[..SINGLE_QUERIES.min(queries.len())];
    let t = Instant::now();
    for q in single {
        encoder.embed(&[q.as_str()]).unwrap();
    }
    let single_qs = single.len() as f64 / t.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"engine": "pg_skills (own BERT forward, gemm)", "documents_per_s": docs,
                           "queries_per_s": qs, "single_queries_per_s": single_qs})
    );
}
