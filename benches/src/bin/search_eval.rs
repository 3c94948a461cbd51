//! search_eval: every `skills.search` method in one run, in a real database.
//!
//! For SkillsBench (its 123 skills plus the ../shared/corpus SKILL.md files as distractors) and
//! MetaTool (split by query text, seed 7: 80 % support, 20 % test, as keyopt_eval), it:
//! 1. loads the documents into a fresh database (`INSERT`, identical content merged), keys them
//!    (`skills.embed_pending()`) and builds the skill graph (`skills.build_graph()`);
//! 2. records the support runs with `skills.record_run` (a run serves the semantic top 10 of a
//!    support query; the labelled skill passes, the others fail: simulated outcomes on real
//!    queries) and fits a round (`skills.fit()`); SkillsBench is cross-fitted over 2 folds;
//! 3. runs every test query through `skills.search(q, k => 10, method => m)` for each method
//!    (NDCG@10, Recall@10, Hit@1, MRR@10, latency p50/p95 at one client), and again with a token
//!    budget and a min_score, asserting that the served tokens fit the budget, no score is below
//!    the threshold and at most k rows come back, on every query;
//! 4. measures queries per second with two clients for each method.
//!
//! ```text
//! search_eval --shared ../shared --dsn "host=127.0.0.1 port=54329 user=postgres dbname=postgres"
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use pg_skills_benches::eval::{distractors, hash, load, Dataset};
use pg_skills_benches::metrics::{mean, query_metrics, Metrics, CUTOFF};
use pg_skills_kernels::serving::SearchMethod;
use postgres::{Client, NoTls};

/// The budget of the constrained pass, in prompt tokens.
const BUDGET: i32 = 1500;

#[derive(Parser, Debug)]
#[command(
    name = "search_eval",
    about = "Every skills.search method on SkillsBench and MetaTool"
)]
struct Args {
    /// The ../shared folder (bench-data and corpus).
    #[arg(long, default_value = "../shared")]
    shared: PathBuf,
    /// A server with pg_skills installed (databases are made and dropped).
    #[arg(long)]
    dsn: String,
    /// Seeds the MetaTool split and the SkillsBench folds.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Test queries per dataset, at most (default: all).
    #[arg(long)]
    max_test: Option<usize>,
    /// MetaTool support queries recorded as runs, at most (default: all; every 1 in n is kept).
    #[arg(long)]
    max_support: Option<usize>,
    /// Queries per method in the two-client throughput pass.
    #[arg(long, default_value_t = 400)]
    qps_queries: usize,
    /// Skip MetaTool.
    #[arg(long)]
    no_metatool: bool,
    /// Skip SkillsBench.
    #[arg(long)]
    no_skillsbench: bool,
}

type Error = Box<dyn std::error::Error>;

/// A dataset in a database: skill id → the documents it stands for.
struct Loaded {
    dsn: String,
    docs_of: HashMap<i64, Vec<String>>,
    skill_of: HashMap<String, i64>,
}

fn create_database(admin: &mut Client, dsn: &str, db: &str) -> Result<(Client, String), Error> {
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))?;
    admin.batch_execute(&format!("CREATE DATABASE {db}"))?;
    let mut config: postgres::Config = dsn.parse()?;
    config.dbname(db);
    let client = config.connect(NoTls)?;
    Ok((client, format!("{dsn} dbname={db}")))
}

/// Inserts the documents (identical content merges its provenance), keys them, builds the graph.
fn load_documents(client: &mut Client, dsn: String, data: &Dataset) -> Result<Loaded, Error> {
    client.batch_execute("CREATE EXTENSION pg_skills")?;
    let t = Instant::now();
    let insert = client.prepare(
        "INSERT INTO skills.skill (name, description, instructions, provenance) \
         VALUES ($1, $2, $3, jsonb_build_array(jsonb_build_object('doc_id', $4::text))) \
         ON CONFLICT (content_hash) DO UPDATE SET provenance = skills.skill.provenance || EXCLUDED.provenance",
    )?;
    let mut tx = client.transaction()?;
    for (id, name, description, instructions) in &data.docs {
        let name = if name.trim().is_empty() { id } else { name };
        tx.execute(&insert, &[name, description, instructions, id])?;
    }
    tx.commit()?;
    let keyed: i64 = client
        .query_one("SELECT skills.embed_pending()", &[])?
        .get(0);
    client.batch_execute("VACUUM ANALYZE skills.skill")?;
    let graph: Vec<String> = client
        .query(
            "SELECT type::text || ' ' || edges FROM skills.build_graph()",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    eprintln!(
        "  loaded {} documents, keyed {keyed} skills, graph {:?} ({:.0} s)",
        data.docs.len(),
        graph,
        t.elapsed().as_secs_f64()
    );
    let mut docs_of: HashMap<i64, Vec<String>> = HashMap::new();
    let mut skill_of = HashMap::new();
    for row in client.query(
        "SELECT s.id, e ->> 'doc_id' FROM skills.skill s, jsonb_array_elements(s.provenance) e",
        &[],
    )? {
        docs_of.entry(row.get(0)).or_default().push(row.get(1));
        skill_of.insert(row.get(1), row.get(0));
    }
    Ok(Loaded {
        dsn,
        docs_of,
        skill_of,
    })
}

/// Support runs: the semantic top 10 of each query is served; labelled skills pass.
fn record_support(
    client: &mut Client,
    data: &Dataset,
    loaded: &Loaded,
    queries: &[usize],
) -> Result<(), Error> {
    client.batch_execute("TRUNCATE skills.event, skills.keyopt_round CASCADE")?;
    let record = client.prepare(
        "SELECT skills.record_run($1, (SELECT jsonb_agg(jsonb_build_object('skill_id', r.id, 'passed', r.id = ANY ($2))) \
                                       FROM skills.search($1, k => 10, method => 'semantic') AS r), \
                                  source_group => $1) \
         WHERE EXISTS (SELECT 1 FROM skills.skill_key)",
    )?;
    let t = Instant::now();
    let mut tx = client.transaction()?;
    for &q in queries {
        let (qid, text) = &data.queries[q];
        let relevant: Vec<i64> = data
            .qrels
            .get(qid)
            .into_iter()
            .flat_map(|r| r.keys())
            .filter_map(|d| loaded.skill_of.get(d).copied())
            .collect();
        tx.query(&record, &[text, &relevant])?;
    }
    tx.commit()?;
    let round: i32 = client.query_one("SELECT skills.fit()", &[])?.get(0);
    let report: String = client
        .query_one(
            "SELECT format('round %s: %s events, %s discordant tasks, settings %s, CV accuracy r alone %s, chosen %s', \
                    round, events, discordant_tasks, settings, round(cv_accuracy_relevance_only::numeric, 3), \
                    round(cv_accuracy_chosen::numeric, 3)) FROM skills.keyopt_rounds WHERE round = $1",
            &[&round],
        )?
        .get(0);
    eprintln!(
        "  {} support runs recorded and fitted ({:.0} s): {report}",
        queries.len(),
        t.elapsed().as_secs_f64()
    );
    println!("- {report}");
    Ok(())
}

#[derive(Default)]
struct MethodRun {
    metrics: Vec<Metrics>,
    latencies_ms: Vec<f64>,
    /// The constrained call: the same query again, its key cached.
    repeat_latencies_ms: Vec<f64>,
    constrained_queries: usize,
    violations: Vec<String>,
}

/// Every test query through one method: metrics, latency, and the constrained pass.
fn run_method(
    data: &Dataset,
    loaded: &Loaded,
    test: &[usize],
    method: &str,
    run: &mut MethodRun,
) -> Result<(), Error> {
    // A fresh connection per method: its backend has not seen these queries, so the timed call
    // includes encoding the query (backends cache recent query keys); the second, constrained
    // call of the same query is timed apart as the cost without the encoder.
    let mut client = Client::connect(&loaded.dsn, NoTls)?;
    let plain =
        client.prepare("SELECT id, score, tokens FROM skills.search($1, k => $2, method => $3)")?;
    let constrained = client.prepare(
        "SELECT id, score, tokens FROM skills.search($1, k => $2, token_budget => $3, min_score => $4, method => $5)",
    )?;
    for &q in test {
        let (qid, text) = &data.queries[q];
        let t = Instant::now();
        let rows = client.query(&plain, &[text, &(CUTOFF as i32), &method])?;
        run.latencies_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let ranked: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                loaded
                    .docs_of
                    .get(&r.get::<_, i64>(0))
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        let empty = HashMap::new();
        let relevant = data.qrels.get(qid).unwrap_or(&empty);
        run.metrics.push(query_metrics(&ranked, relevant, |d| {
            loaded.skill_of.get(d).copied()
        }));
        // The constrained pass: threshold at the third score (or none), the fixed budget.
        let min_score: Option<f64> = rows.get(2).map(|r| r.get(1));
        let k = 5i32;
        let t = Instant::now();
        let got = client.query(&constrained, &[text, &k, &BUDGET, &min_score, &method])?;
        run.repeat_latencies_ms
            .push(t.elapsed().as_secs_f64() * 1000.0);
        run.constrained_queries += 1;
        let tokens: i64 = got.iter().map(|r| r.get::<_, i32>(2) as i64).sum();
        let below = got
            .iter()
            .filter(|r| min_score.is_some_and(|m| r.get::<_, f64>(1) < m))
            .count();
        if tokens > BUDGET as i64 || below > 0 || got.len() > k as usize {
            run.violations.push(format!(
                "{method} {qid}: {} rows, {tokens} tokens (budget {BUDGET}), {below} below {min_score:?}",
                got.len()
            ));
        }
    }
    Ok(())
}

/// Queries per second of one method with two clients, each on its own connection.
fn throughput(
    dsn: &str,
    data: &Dataset,
    test: &[usize],
    method: &str,
    n: usize,
) -> Result<f64, Error> {
    let queries: Vec<String> = test
        .iter()
        .take(n)
        .map(|&q| data.queries[q].1.clone())
        .collect();
    let halves: Vec<Vec<String>> = vec![
        queries.iter().step_by(2).cloned().collect(),
        queries.iter().skip(1).step_by(2).cloned().collect(),
    ];
    let started = Instant::now();
    let results: Vec<Result<usize, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = halves
            .iter()
            .map(|part| {
                scope.spawn(move || -> Result<usize, String> {
                    let mut client = Client::connect(dsn, NoTls).map_err(|e| e.to_string())?;
                    let stmt = client
                        .prepare("SELECT id FROM skills.search($1, k => 10, method => $2)")
                        .map_err(|e| e.to_string())?;
                    for q in part {
                        client
                            .query(&stmt, &[q, &method])
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(part.len())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let mut done = 0;
    for r in results {
        done += r?;
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// The table of one dataset; violations are returned for the final assertion.
fn table(title: &str, runs: &[(&str, MethodRun, f64)]) -> (String, Vec<String>) {
    let mut out = format!(
        "\n### {title}\n\n| method | NDCG@10 | Recall@10 | Hit@1 | MRR@10 | p50 ms | p95 ms | p50 ms, query key cached | QPS, 2 clients | budget/threshold checks |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut violations = Vec::new();
    for (method, run, qps) in runs {
        let m = mean(&run.metrics);
        let mut lat = run.latencies_ms.clone();
        lat.sort_by(f64::total_cmp);
        let mut repeat = run.repeat_latencies_ms.clone();
        repeat.sort_by(f64::total_cmp);
        out += &format!(
            "| {method} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.1} | {:.1} | {qps:.1} | {} of {} held |\n",
            m.ndcg_at_10,
            m.recall_at_10,
            m.hit_at_1,
            m.mrr_at_10,
            percentile(&lat, 0.5),
            percentile(&lat, 0.95),
            percentile(&repeat, 0.5),
            run.constrained_queries - run.violations.len(),
            run.constrained_queries
        );
        violations.extend(run.violations.iter().cloned());
    }
    (out, violations)
}

fn evaluate_folds(
    args: &Args,
    data: &Dataset,
    loaded: &Loaded,
    client: &mut Client,
    folds: &[(Vec<usize>, Vec<usize>)],
) -> Result<Vec<(&'static str, MethodRun, f64)>, Error> {
    let mut runs: Vec<(&str, MethodRun, f64)> = SearchMethod::ALL
        .iter()
        .map(|m| (m.name(), MethodRun::default(), 0.0))
        .collect();
    for (support, test) in folds {
        record_support(client, data, loaded, support)?;
        for (method, run, qps) in runs.iter_mut() {
            let t = Instant::now();
            run_method(data, loaded, test, method, run)?;
            // Throughput over the test queries of the last fold only (enough for a rate).
            *qps = throughput(&loaded.dsn, data, test, method, args.qps_queries)?;
            eprintln!(
                "  {method}: {} queries ({:.0} s)",
                test.len(),
                t.elapsed().as_secs_f64()
            );
        }
    }
    Ok(runs)
}

fn run(args: &Args) -> Result<Vec<String>, Error> {
    let bench = args.shared.join("bench-data");
    let mut admin = Client::connect(&args.dsn, NoTls)?;
    let mut violations = Vec::new();
    let started = Instant::now();
    println!("## All search methods, one harness run\n");
    println!(
        "search_eval --seed {}; k = 10; constrained pass: k = 5, token_budget = {BUDGET}, min_score = the query's third score\n",
        args.seed
    );

    if !args.no_skillsbench {
        let mut data = load(&bench.join("skillsbench-tasks"), true);
        let own = data.docs.len();
        data.docs.extend(distractors(
            &args.shared.join("corpus"),
            "KaiserWhoLearns__skillsbench",
        ));
        let (mut client, dsn) = create_database(&mut admin, &args.dsn, "pgs_eval_skillsbench")?;
        let loaded = load_documents(&mut client, dsn, &data)?;
        let judged: Vec<usize> = (0..data.queries.len())
            .filter(|&q| data.qrels.contains_key(&data.queries[q].0))
            .collect();
        let fold_of = |q: usize| (hash(args.seed, &data.queries[q].0) % 2) as usize;
        let folds: Vec<(Vec<usize>, Vec<usize>)> = (0..2)
            .map(|f| {
                let test: Vec<usize> = judged
                    .iter()
                    .copied()
                    .filter(|&q| fold_of(q) == f)
                    .collect();
                let support: Vec<usize> = judged
                    .iter()
                    .copied()
                    .filter(|&q| fold_of(q) != f)
                    .collect();
                (support, test)
            })
            .collect();
        println!(
            "SkillsBench rounds (each fold ranked by a round fitted on the other fold's runs):"
        );
        let runs = evaluate_folds(args, &data, &loaded, &mut client, &folds)?;
        let (out, v) = table(
            &format!(
                "SkillsBench: {} tasks, {own} skills + {} distractors from ../shared/corpus",
                judged.len(),
                data.docs.len() - own
            ),
            &runs,
        );
        println!("{out}");
        violations.extend(v);
        drop(client);
        admin.batch_execute("DROP DATABASE IF EXISTS pgs_eval_skillsbench WITH (FORCE)")?;
    }

    if !args.no_metatool {
        let data = load(&bench.join("metatool"), false);
        let (mut client, dsn) = create_database(&mut admin, &args.dsn, "pgs_eval_metatool")?;
        let loaded = load_documents(&mut client, dsn, &data)?;
        let is_test = |q: usize| hash(args.seed, &data.queries[q].1) % 100 < 20;
        let judged = |q: &usize| data.qrels.contains_key(&data.queries[*q].0);
        let mut test: Vec<usize> = (0..data.queries.len())
            .filter(|&q| is_test(q))
            .filter(judged)
            .collect();
        if let Some(n) = args.max_test {
            let step = test.len().div_ceil(n.max(1));
            test = test.into_iter().step_by(step.max(1)).collect();
        }
        let mut support: Vec<usize> = (0..data.queries.len())
            .filter(|&q| !is_test(q))
            .filter(judged)
            .collect();
        if let Some(n) = args.max_support {
            // An even sample over the file (queries come grouped by tool).
            let step = support.len().div_ceil(n.max(1));
            support = support.into_iter().step_by(step.max(1)).collect();
        }
        println!("\nMetaTool round:");
        let runs = evaluate_folds(
            args,
            &data,
            &loaded,
            &mut client,
            &[(support.clone(), test.clone())],
        )?;
        let (out, v) = table(
            &format!(
                "MetaTool: {} test queries (support {} queries, split by text, seed {})",
                test.len(),
                support.len(),
                args.seed
            ),
            &runs,
        );
        println!("{out}");
        violations.extend(v);
        drop(client);
        admin.batch_execute("DROP DATABASE IF EXISTS pgs_eval_metatool WITH (FORCE)")?;
    }
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    Ok(violations)
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !args.shared.join("bench-data").is_dir() {
        println!("SKIPPED: {} has no bench-data", args.shared.display());
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(violations) if violations.is_empty() => ExitCode::SUCCESS,
        Ok(violations) => {
            for v in &violations {
                eprintln!("VIOLATION {v}");
            }
            eprintln!("{} budget/threshold violations", violations.len());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("search_eval: {e:?}");
            ExitCode::FAILURE
        }
    }
}
