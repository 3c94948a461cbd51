//! What writing one skill costs in the functions a write runs, in process: the content hash, the
//! prompt token count, the risk rules, the category classifier and the BM25 analysis, each timed
//! over the same documents (a JSONL file of `{name, description, instructions}` records, as
//! benches/ingest/run.sh writes it). Microseconds per document, so that a change to one of them
//! can be measured against the others and against the load's rate.
//!
//! cargo build --release -p pg_skills_benches --bin write_cost
//! target/release/write_cost --jsonl skills.jsonl --rows 5000

use std::time::Instant;

use clap::Parser;
use pg_skills_corpus::{category, risk, skill};
use pg_skills_kernels::bm25index;
use pg_skills_kernels::text::{Analyzer, AnalyzerConfig};

#[derive(Parser)]
struct Args {
    /// JSONL records with name, description and instructions.
    #[arg(long)]
    jsonl: String,
    /// How many records (from the start of the file).
    #[arg(long, default_value_t = 5000)]
    rows: usize,
    /// Passes over the records; the best pass is reported. With 1, what a step remembers
    /// between documents has seen each document once (the first is called once before).
    #[arg(long, default_value_t = 3)]
    passes: usize,
    /// Only the steps whose name contains this (e.g. "risk", to profile one of them).
    #[arg(long, default_value = "")]
    only: String,
}

struct Doc {
    name: String,
    description: String,
    instructions: String,
}

fn time_per_doc(docs: &[Doc], passes: usize, mut f: Box<dyn FnMut(&Doc) -> usize>) -> (f64, usize) {
    let mut best = f64::INFINITY;
    let mut check = 0;
    // Tables built on first use (tokenizer ranks, rule sets) are not a document's cost.
    if let Some(first) = docs.first() {
        f(first);
    }
    for _ in 0..passes {
        let t = Instant::now();
        check = docs.iter().map(&mut f).sum();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best * 1e6 / docs.len() as f64, check)
}

fn main() {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.jsonl).expect("read the JSONL file");
    let docs: Vec<Doc> = text
        .lines()
        .take(args.rows)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON record");
            let field = |k: &str| v[k].as_str().unwrap_or("").to_owned();
            Doc {
                name: field("name"),
                description: field("description"),
                instructions: field("instructions"),
            }
        })
        .collect();
    let bytes: usize = docs
        .iter()
        .map(|d| d.name.len() + d.description.len() + d.instructions.len())
        .sum();
    println!(
        "{} documents, {:.1} KB on average",
        docs.len(),
        bytes as f64 / docs.len() as f64 / 1024.0
    );
    println!("| step | µs per document | check |");
    println!("|---|---|---|");
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    #[allow(clippy::type_complexity)]
    let steps: Vec<(&str, Box<dyn FnMut(&Doc) -> usize>)> = vec![
        (
            "content hash",
            Box::new(|d| skill::content_hash(&d.name, &d.description, &d.instructions).len()),
        ),
        (
            "prompt tokens",
            Box::new(|d| skill::token_count(&d.name, &d.description, &d.instructions)),
        ),
        (
            // The same count by tiktoken-rs's encoder, which the extension used before.
            "prompt tokens, tiktoken-rs",
            Box::new(|d| {
                let text = skill::prompt_text(&d.name, &d.description, &d.instructions);
                tiktoken_rs::o200k_base_singleton()
                    .encode_ordinary(&text)
                    .len()
            }),
        ),
        (
            "risk rules",
            Box::new(|d| {
                risk::scan(&d.name, &d.description, &d.instructions)
                    .findings
                    .len()
            }),
        ),
        (
            "category",
            Box::new(|d| category::classify(&d.name, &d.description, &d.instructions) as usize),
        ),
        (
            "bm25 analysis",
            Box::new(move |d| {
                bm25index::analyze(
                    &mut analyzer,
                    [&d.name, &d.description, &d.instructions],
                    [1.0; 3],
                )
                .terms
                .len()
            }),
        ),
    ];
    for (step, f) in steps {
        if step.contains(&args.only) {
            let (us, check) = time_per_doc(&docs, args.passes, f);
            println!("| {step} | {us:.1} | {check} |");
        }
    }
}
