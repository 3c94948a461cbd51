//! retrieval: load a BEIR-layout dataset into a fresh database with pg_skills, run every judged
//! query through `skills.search`, and print NDCG@10, Recall@10, Hit@1 and MRR@10.
//!
//! ```text
//! retrieval --dataset ../shared/bench-data/skillsbench-tasks --dsn "host=127.0.0.1 port=54329 user=postgres dbname=postgres"
//! ```
//! The dataset is loaded with the code filter off (benchmark corpora are not all code skills).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use pg_skills_benches::beir::{read_qrels, read_queries};
use pg_skills_benches::metrics::{mean, query_metrics, CUTOFF};
use pg_skills_corpus::dedup::{Pipeline, PipelineOptions};
use pg_skills_corpus::load;
use pg_skills_corpus::readers::{read_beir, ReadLimits};
use postgres::{Client, NoTls};

#[derive(Parser, Debug)]
#[command(
    name = "retrieval",
    about = "Retrieval quality of skills.search on a BEIR-layout dataset"
)]
struct Args {
    /// Folder with corpus.jsonl, queries.jsonl and qrels/test.tsv.
    #[arg(long)]
    dataset: PathBuf,
    /// Connection string of a server with pg_skills installed (any database; a fresh one is made).
    #[arg(long)]
    dsn: String,
    /// Search method passed to skills.search.
    #[arg(long, default_value = "bm25")]
    method: String,
    /// Evaluate only the first N judged queries (in file order).
    #[arg(long)]
    max_queries: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Keep the benchmark database afterwards.
    #[arg(long)]
    keep_db: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !args.dataset.join("corpus.jsonl").is_file() {
        println!(
            "SKIPPED: {} has no corpus.jsonl (is ../shared present?)",
            args.dataset.display()
        );
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("retrieval: {}", load::describe(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), load::LoadError> {
    let dataset = args.dataset.canonicalize()?;
    let name = dataset
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "beir".into());
    let db = format!(
        "pgs_bench_{}",
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
            .to_lowercase()
    );
    let mut admin = Client::connect(&args.dsn, NoTls)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))?;
    admin.batch_execute(&format!("CREATE DATABASE {db}"))?;
    let mut config: postgres::Config = args.dsn.parse()?;
    let mut client = config.dbname(&db).connect(NoTls)?;
    client.batch_execute("CREATE EXTENSION pg_skills")?;

    let load_start = Instant::now();
    let mut pipeline = Pipeline::new(PipelineOptions { code_filter: false });
    for item in read_beir(
        &dataset.join("corpus.jsonl"),
        &name,
        ReadLimits {
            max_bytes: load::server_max_document_bytes(&mut client)?,
        },
    )? {
        pipeline.push(item);
    }
    let (skills, counts) = pipeline.finish();
    let applied = load::load(&mut client, &skills, &[], |_| {})?;
    let load_secs = load_start.elapsed().as_secs_f64();

    // skill id -> the corpus documents it stands for, and back
    let mut docs_of: HashMap<i64, Vec<String>> = HashMap::new();
    let mut skill_of: HashMap<String, i64> = HashMap::new();
    for row in client.query(
        "SELECT s.id, e ->> 'doc_id' FROM skills.skill s, jsonb_array_elements(s.provenance) e WHERE e ? 'doc_id'",
        &[],
    )? {
        docs_of.entry(row.get(0)).or_default().push(row.get(1));
        skill_of.insert(row.get(1), row.get(0));
    }

    let qrels = read_qrels(&dataset)?;
    let mut queries: Vec<(String, String)> = read_queries(&dataset)?
        .into_iter()
        .filter(|(id, _)| qrels.contains_key(id))
        .collect();
    if let Some(n) = args.max_queries {
        queries.truncate(n);
    }
    let stmt = client
        .prepare("SELECT id FROM skills.search($1::text, k => $2::int, method => $3::text)")?;
    let mut per_query = Vec::with_capacity(queries.len());
    let mut latencies = Vec::with_capacity(queries.len());
    let run_start = Instant::now();
    for (qid, text) in &queries {
        let t = Instant::now();
        let rows = client.query(&stmt, &[text, &(CUTOFF as i32), &args.method])?;
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        let ranked: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                docs_of
                    .get(&r.get::<_, i64>(0))
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        per_query.push(query_metrics(&ranked, &qrels[qid], |d| {
            skill_of.get(d).copied()
        }));
    }
    let run_secs = run_start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let m = mean(&per_query);

    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "dataset": name, "method": args.method, "documents": counts.read, "skills": skills.len(),
                "merged_duplicates": counts.merged_duplicates, "new": applied.new, "queries": queries.len(),
                "ndcg_at_10": m.ndcg_at_10, "recall_at_10": m.recall_at_10, "hit_at_1": m.hit_at_1, "mrr_at_10": m.mrr_at_10,
                "latency_ms_p50": pct(0.5), "latency_ms_p95": pct(0.95), "load_seconds": load_secs, "run_seconds": run_secs,
            })
        );
    } else {
        println!(
            "{name} ({} documents -> {} skills, {} judged queries), method {}:",
            counts.read,
            skills.len(),
            queries.len(),
            args.method
        );
        println!(
            "  NDCG@10 {:.3}  Recall@10 {:.3}  Hit@1 {:.3}  MRR@10 {:.3}",
            m.ndcg_at_10, m.recall_at_10, m.hit_at_1, m.mrr_at_10
        );
        println!("  latency per query p50 {:.2} ms, p95 {:.2} ms (one client, sequential scan); load {load_secs:.1} s", pct(0.5), pct(0.95));
    }
    drop(client);
    if !args.keep_db {
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))?;
    }
    Ok(())
}
