//! Key index benchmark, side by side in one run on the same keys and queries:
//! - the pg_skills `skeys` index (`ORDER BY key <#> $1 LIMIT 10`, prepared) at several
//!   `pg_skills.key_probes`: the recall/QPS curve, latency at one client, pgbench QPS at 1 and 2;
//! - exact search in-process through the same SIMD kernel over the same f16 keys (the ceiling
//!   of recall and the floor of any scan);
//! - an in-process HNSW library (hnsw_rs, M = 16, ef_construction = 64, 2 threads) at several
//!   ef_search: a graph index with no SQL, no executor and no heap fetches;
//! - pgvector (`--pgvector-ef`, `--pgvector-probes`; the extension built into the same server,
//!   benches/keys/build_pgvector.sh): HNSW (m 16, ef_construction 64) and IVFFlat (lists √N) on
//!   the same keys as halfvec(512) (f16, as skeys stores them), `ORDER BY v <#> $1 LIMIT 10`.
//!
//! Data, `--data synthetic` (the key-index recipe): N unit-norm 512-d keys x = normalize(c + σ·z),
//! 1,000 random unit centres c, σ = 1/√512, z standard normal; queries the same way from another
//! seed. `--data real`: MiniLM keys of real text and held-out real queries, with perturbed
//! replicas past the real keys (`real_keys.rs`). Ground truth by exact f32 inner product.
//!
//! `target/release/key_bench --dsn ... --sizes 100000 --queries 1000`

use std::collections::HashSet;
use std::io::Write;
use std::time::Instant;

use clap::Parser;
use half::f16;
use postgres::{Client, NoTls};
use rayon::prelude::*;

use pg_skills_benches::real_keys::{top_k, with_replicas, RealKeySource};
use pg_skills_benches::timing::{latencies_ms, pgbench};
use pg_skills_kernels::synthetic::{centres, clustered};
use pg_skills_kernels::vector::{dot_batch, dot_batch_f16};

const DIM: usize = 512;

#[derive(Parser)]
struct Args {
    /// Server to run on (a database pgs_key_bench is created there and dropped after).
    #[arg(long)]
    dsn: String,
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    sizes: Vec<usize>,
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Search breadths to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    probes: Vec<u32>,
    /// hnsw_rs ef_search values (0 = skip the HNSW peer).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128")]
    hnsw_ef: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    pgbench_seconds: u32,
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin/pg_config")]
    pg_config: String,
    #[arg(long, default_value = "2GB")]
    maintenance_work_mem: String,
    /// Keep the database pgs_key_bench after the last size (for profiling by hand).
    #[arg(long)]
    keep: bool,
    /// synthetic (clustered) or real (MiniLM keys of real text).
    #[arg(long, default_value = "synthetic")]
    data: String,
    #[command(flatten)]
    real: RealKeySource,
    /// skeys lists (0: the index's default, √N).
    #[arg(long, default_value_t = 0)]
    lists: u32,
    /// pgvector HNSW ef_search values (none: no HNSW peer).
    #[arg(long, value_delimiter = ',')]
    pgvector_ef: Vec<u32>,
    /// pgvector IVFFlat probes values (none: no IVFFlat peer).
    #[arg(long, value_delimiter = ',')]
    pgvector_probes: Vec<u32>,
}

fn recall(truth: &[Vec<u32>], got: &[Vec<u32>]) -> f64 {
    let mut hits = 0;
    for (t, g) in truth.iter().zip(got) {
        let t: HashSet<u32> = t.iter().copied().collect();
        hits += g.iter().filter(|i| t.contains(i)).count();
    }
    hits as f64 / (truth.len() * 10) as f64
}

/// COPY BINARY rows (id bigint, key skills.key) in the key type's binary format.
fn load(db: &mut Client, keys: &[f16]) {
    let mut w = db
        .copy_in("COPY keys (id, key) FROM STDIN (FORMAT binary)")
        .unwrap();
    let mut buf = Vec::with_capacity(1 << 20);
    buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    buf.extend_from_slice(&0i32.to_be_bytes());
    buf.extend_from_slice(&0i32.to_be_bytes());
    for (id, key) in keys.chunks_exact(DIM).enumerate() {
        buf.extend_from_slice(&2i16.to_be_bytes());
        buf.extend_from_slice(&8i32.to_be_bytes());
        buf.extend_from_slice(&(id as i64).to_be_bytes());
        buf.extend_from_slice(&((4 + 2 * DIM) as i32).to_be_bytes());
        buf.extend_from_slice(&(DIM as u16).to_be_bytes());
        buf.extend_from_slice(&0u16.to_be_bytes());
        for v in key {
            buf.extend_from_slice(&v.to_bits().to_be_bytes());
        }
        if buf.len() > (1 << 20) {
            w.write_all(&buf).unwrap();
            buf.clear();
        }
    }
    buf.extend_from_slice(&(-1i16).to_be_bytes());
    w.write_all(&buf).unwrap();
    w.finish().unwrap();
}

/// A top-10 query to measure: `sql` with the query key as $1 (text), `script_sql` for pgbench
/// with `:qid` naming a row of the queries table, `lateral_sql` every query of that table in
/// one statement (one top-10 per query row), run with `setting` (name=value).
struct Search<'a> {
    sql: &'a str,
    script_sql: &'a str,
    lateral_sql: &'a str,
    setting: &'a str,
}

/// The plan of `sql`, a line a row.
fn explain(db: &mut Client, sql: &str) -> Vec<String> {
    db.query(&format!("EXPLAIN {sql}"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Searches per second inside one statement: every query's top-10 as a lateral index scan, so
/// the statement's own cost (round trip, parse, plan, executor start) is paid once, not per
/// search. The index's work is what is left. Best of three runs; checks that each query
/// returned ten rows through an index scan.
fn in_statement_qps(db: &mut Client, lateral_sql: &str, queries: usize) -> f64 {
    let plan = explain(db, lateral_sql);
    assert!(
        plan.iter().any(|l| l.contains("Index Scan")),
        "the lateral search is not an index scan: {plan:?}"
    );
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        let rows: i64 = db.query_one(lateral_sql, &[]).unwrap().get(0);
        best = best.min(t.elapsed().as_secs_f64());
        assert_eq!(rows, 10 * queries as i64, "{lateral_sql}");
    }
    queries as f64 / best
}

/// One breadth of one index: recall@10 and latency at one client over the queries (prepared
/// statement), QPS from pgbench at 1 and 2 clients; the table row's cells from recall on.
fn measure(
    args: &Args,
    db: &mut Client,
    dsn_db: &str,
    search: Search,
    qtexts: &[String],
    truth: &[Vec<u32>],
) -> String {
    db.batch_execute(&format!("SET {}", search.setting.replacen('=', " = ", 1)))
        .unwrap();
    let stmt = db.prepare(search.sql).unwrap();
    let mut lat = Vec::new();
    let mut got = Vec::new();
    for q in qtexts {
        let t = Instant::now();
        let rows = db.query(&stmt, &[q]).unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        got.push(rows.iter().map(|r| r.get::<_, i64>(0) as u32).collect());
    }
    let r = recall(truth, &got);
    let (p50, _, p99) = latencies_ms(lat);
    let script = format!(
        "\\set qid random(1, {})\n{};\n",
        qtexts.len(),
        search.script_sql
    );
    let conn = format!("{dsn_db} options='-c {}'", search.setting);
    let q1 = pgbench(&args.pg_config, &conn, &script, 1, args.pgbench_seconds);
    let q2 = pgbench(&args.pg_config, &conn, &script, 2, args.pgbench_seconds);
    let inside = in_statement_qps(db, search.lateral_sql, qtexts.len());
    eprintln!(
        "{}: recall {r:.3}, p50 {p50:.2} ms, QPS {q1:.0} / {q2:.0}, in one statement {inside:.0}",
        search.setting
    );
    format!("{r:.3} | {p50:.2} / {p99:.2} | {q1:.0} | {q2:.0} | {inside:.0} |")
}

/// The statement's floor: the shape of a search (the query's row read, an index scan, ten heap
/// rows fetched and sent to the client) in primary-key order, with no vector search. Every
/// system's QPS includes it, so a ratio between two indexes can be no larger than what their
/// own work leaves above it.
fn statement_floor_row(
    args: &Args,
    db: &mut Client,
    dsn_db: &str,
    rows: usize,
    queries: usize,
) -> String {
    let span = rows.saturating_sub(10).max(1);
    // Heap rows fetched, as a vector index scan fetches them.
    let setting = "enable_indexonlyscan=off";
    let script = format!(
        "\\set qid random(1, {queries})\n\
         SELECT id FROM keys WHERE id >= (SELECT (id * 97) % {span} FROM bench_queries \
         WHERE id = :qid AND q IS NOT NULL) ORDER BY id LIMIT 10;\n"
    );
    let conn = format!("{dsn_db} options='-c {setting}'");
    let q1 = pgbench(&args.pg_config, &conn, &script, 1, args.pgbench_seconds);
    let q2 = pgbench(&args.pg_config, &conn, &script, 2, args.pgbench_seconds);
    db.batch_execute("SET enable_indexonlyscan = off").unwrap();
    let inside = in_statement_qps(
        db,
        &format!(
            "SELECT count(*) FROM bench_queries b CROSS JOIN LATERAL \
             (SELECT id FROM keys WHERE id >= (b.id * 97) % {span} ORDER BY id LIMIT 10) s"
        ),
        queries,
    );
    db.batch_execute("RESET enable_indexonlyscan").unwrap();
    eprintln!("the statement alone: QPS {q1:.0} / {q2:.0}, in one statement {inside:.0}");
    format!(
        "| the statement alone (primary-key order, no vector search) | | | | {q1:.0} | {q2:.0} | {inside:.0} |\n"
    )
}

/// pgvector side by side: the same keys as halfvec(512), an HNSW and an IVFFlat index built in
/// turn, each measured at its breadths as skeys is (recall, latency at one client, pgbench QPS).
fn pgvector_rows(
    args: &Args,
    db: &mut Client,
    dsn_db: &str,
    data16: &[f16],
    queries16: &[f16],
    truth: &[Vec<u32>],
) -> String {
    let n = data16.len() / DIM;
    // The same f16 values: skills.key's text form is pgvector's ("[x,y,...]").
    db.batch_execute(
        "CREATE EXTENSION IF NOT EXISTS vector;
         CREATE TABLE pv (id bigint PRIMARY KEY, v halfvec(512) NOT NULL);
         CREATE TABLE pv_queries (id int PRIMARY KEY, q halfvec(512) NOT NULL);
         INSERT INTO pv SELECT id, key::text::halfvec(512) FROM keys;
         INSERT INTO pv_queries SELECT id, q::text::halfvec(512) FROM bench_queries;",
    )
    .expect("pgvector is installed in this server (benches/keys/build_pgvector.sh)");
    db.batch_execute("VACUUM ANALYZE pv").unwrap();
    db.batch_execute("VACUUM ANALYZE pv_queries").unwrap();
    let qtexts: Vec<String> = queries16.chunks_exact(DIM).map(key_text).collect();
    let lists = ((n as f64).sqrt().round() as u32).max(1);
    let mut rows = String::new();
    let kinds = [
        (
            "hnsw",
            "WITH (m = 16, ef_construction = 64)".to_string(),
            "hnsw.ef_search",
            "ef",
            &args.pgvector_ef,
        ),
        (
            "ivfflat",
            format!("WITH (lists = {lists})"),
            "ivfflat.probes",
            "probes",
            &args.pgvector_probes,
        ),
    ];
    for (kind, with, setting, breadth, values) in kinds {
        if values.is_empty() {
            continue;
        }
        let t = Instant::now();
        db.batch_execute(&format!(
            "CREATE INDEX pv_idx ON pv USING {kind} (v halfvec_ip_ops) {with}"
        ))
        .unwrap();
        let build = t.elapsed().as_secs_f64();
        let size: i64 = db
            .query_one("SELECT pg_relation_size('pv_idx')", &[])
            .unwrap()
            .get(0);
        let workers: String = db
            .query_one("SHOW max_parallel_maintenance_workers", &[])
            .unwrap()
            .get(0);
        eprintln!("pgvector {kind} built in {build:.1} s");
        rows += &format!(
            "| pgvector {kind} halfvec ({with}; build {build:.1} s, {workers} parallel workers, {:.0} MB) | | | | | | |\n",
            size as f64 / (1 << 20) as f64
        );
        for &value in values.iter() {
            let row = measure(
                args,
                db,
                dsn_db,
                Search {
                    sql: "SELECT id FROM pv ORDER BY v <#> $1::text::halfvec(512) LIMIT 10",
                    script_sql: "SELECT id FROM pv ORDER BY v <#> \
                                 (SELECT q FROM pv_queries WHERE id = :qid) LIMIT 10",
                    lateral_sql: "SELECT count(*) FROM pv_queries b CROSS JOIN LATERAL \
                                  (SELECT id FROM pv ORDER BY v <#> b.q LIMIT 10) s",
                    setting: &format!("{setting}={value}"),
                },
                &qtexts,
                truth,
            );
            rows += &format!("| pgvector {kind} | {breadth} {value} | {row}\n");
        }
        db.batch_execute("DROP INDEX pv_idx").unwrap();
    }
    rows
}

fn key_text(key: &[f16]) -> String {
    let parts: Vec<String> = key.iter().map(|v| v.to_f32().to_string()).collect();
    format!("[{}]", parts.join(","))
}

fn main() {
    let args = Args::parse();
    let mut report = String::new();
    let mut admin = Client::connect(&args.dsn, NoTls).expect("connect");
    let c = centres(1000, DIM, 1);
    for &n in &args.sizes {
        eprintln!("== {n} keys");
        let t = Instant::now();
        let (data, queries) = if args.data == "real" {
            let (keys, queries) = args.real.load();
            let nq = args.queries.min(queries.len() / DIM);
            eprintln!(
                "real keys: {} (replicated to {n}), {nq} queries",
                keys.len() / DIM
            );
            (with_replicas(&keys, n, 4), queries[..nq * DIM].to_vec())
        } else {
            (
                clustered(&c, DIM, n, 2),
                clustered(&c, DIM, args.queries, 3),
            )
        };
        let nq = queries.len() / DIM;
        let data16: Vec<f16> = data.iter().map(|&x| f16::from_f32(x)).collect();
        let queries16: Vec<f16> = queries.iter().map(|&x| f16::from_f32(x)).collect();
        let truth: Vec<Vec<u32>> = queries
            .par_chunks(DIM)
            .map(|q| {
                let mut s = vec![0f32; n];
                dot_batch(q, &data, &mut s);
                top_k(&s, 10)
            })
            .collect();
        eprintln!(
            "data and ground truth in {:.1} s",
            t.elapsed().as_secs_f64()
        );

        // Exact search in-process, same kernel as the index, one thread.
        let t = Instant::now();
        let mut scores = vec![0f32; n];
        let exact_runs = nq.min(if n > 200_000 { 50 } else { 200 });
        let exact: Vec<Vec<u32>> = queries16
            .chunks_exact(DIM)
            .take(exact_runs)
            .map(|q| {
                dot_batch_f16(q, &data16, &mut scores);
                top_k(&scores, 10)
            })
            .collect();
        let exact_qps = exact_runs as f64 / t.elapsed().as_secs_f64();
        let exact_recall = recall(&truth[..exact_runs], &exact);

        admin
            .batch_execute("DROP DATABASE IF EXISTS pgs_key_bench")
            .unwrap();
        admin
            .batch_execute("CREATE DATABASE pgs_key_bench TEMPLATE template0")
            .unwrap();
        let dsn_db = format!("{} dbname=pgs_key_bench", args.dsn);
        let mut db = Client::connect(&dsn_db, NoTls).unwrap();
        db.batch_execute(
            "CREATE EXTENSION pg_skills;
             CREATE TABLE keys (id bigint PRIMARY KEY, key skills.key NOT NULL);
             CREATE TABLE bench_queries (id int PRIMARY KEY, q skills.key NOT NULL);",
        )
        .unwrap();
        let t = Instant::now();
        load(&mut db, &data16);
        for (i, q) in queries16.chunks_exact(DIM).enumerate() {
            db.execute(
                &format!("INSERT INTO bench_queries VALUES ($1, '{}')", key_text(q)),
                &[&(i as i32 + 1)],
            )
            .unwrap();
        }
        db.batch_execute("VACUUM ANALYZE keys").unwrap();
        db.batch_execute("VACUUM ANALYZE bench_queries").unwrap();
        eprintln!("loaded in {:.1} s", t.elapsed().as_secs_f64());
        db.batch_execute(&format!(
            "SET maintenance_work_mem = '{}'",
            args.maintenance_work_mem
        ))
        .unwrap();
        let t = Instant::now();
        let with = if args.lists > 0 {
            format!(" WITH (lists = {})", args.lists)
        } else {
            String::new()
        };
        db.batch_execute(&format!(
            "CREATE INDEX keys_ip ON keys USING skeys (key skills.key_ip_ops){with}"
        ))
        .unwrap();
        let build = t.elapsed().as_secs_f64();
        let stats = db
            .query_one(
                "SELECT pg_relation_size('keys_ip'), lists, trained_on, largest_list FROM skills.key_index_stats('keys_ip')",
                &[],
            )
            .unwrap();
        let (size, lists, trained_on, largest): (i64, i32, i64, i64) =
            (stats.get(0), stats.get(1), stats.get(2), stats.get(3));
        eprintln!("built in {build:.1} s: {lists} lists, largest {largest}");

        let plan = explain(
            &mut db,
            "SELECT id FROM keys ORDER BY key OPERATOR(skills.<#>) (SELECT q FROM bench_queries WHERE id = 1) LIMIT 10",
        );
        assert!(
            plan.iter().any(|l| l.contains("Index Scan using keys_ip")),
            "{plan:?}"
        );

        let qtexts: Vec<String> = queries16.chunks_exact(DIM).map(key_text).collect();
        report += &format!(
            "\n### {n} keys\n\nBuild {build:.1} s (maintenance_work_mem {}), index {:.0} MB, {lists} lists \
             (k-means on {trained_on} sampled keys; largest list {largest}).\n\n\
             | system | breadth | recall@10 | p50 / p99 ms (1 client) | QPS 1 client | QPS 2 clients | searches/s in one statement |\n|---|---|---|---|---|---|---|\n",
            args.maintenance_work_mem,
            size as f64 / (1 << 20) as f64
        );
        for &probes in &args.probes {
            let row = measure(
                &args,
                &mut db,
                &dsn_db,
                Search {
                    sql: "SELECT id FROM keys ORDER BY key OPERATOR(skills.<#>) $1::text::skills.key LIMIT 10",
                    script_sql: "SELECT id FROM keys ORDER BY key OPERATOR(skills.<#>) \
                                 (SELECT q FROM bench_queries WHERE id = :qid) LIMIT 10",
                    lateral_sql: "SELECT count(*) FROM bench_queries b CROSS JOIN LATERAL \
                                  (SELECT id FROM keys ORDER BY key OPERATOR(skills.<#>) b.q LIMIT 10) s",
                    setting: &format!("pg_skills.key_probes={probes}"),
                },
                &qtexts,
                &truth,
            );
            report += &format!("| pg_skills skeys | probes {probes} | {row}\n");
        }
        report += &statement_floor_row(&args, &mut db, &dsn_db, n, qtexts.len());
        report += &format!(
            "| exact, in-process, same f16 kernel, 1 thread | all | {exact_recall:.3} | {:.2} | {exact_qps:.1} | | |\n",
            1e3 / exact_qps
        );
        if !args.pgvector_ef.is_empty() || !args.pgvector_probes.is_empty() {
            report += &pgvector_rows(&args, &mut db, &dsn_db, &data16, &queries16, &truth);
        }

        if !args.hnsw_ef.iter().all(|&e| e == 0) {
            use hnsw_rs::prelude::*;
            let t = Instant::now();
            let hnsw = Hnsw::<f32, DistDot>::new(16, n, 16, 64, DistDot {});
            let rows: Vec<(&[f32], usize)> = data
                .chunks_exact(DIM)
                .enumerate()
                .map(|(i, r)| (r, i))
                .collect();
            hnsw.parallel_insert_slice(&rows);
            let hnsw_build = t.elapsed().as_secs_f64();
            report += &format!("| hnsw_rs in-process (M 16, ef_construction 64; build {hnsw_build:.0} s, 2 threads) | | | | | | |\n");
            for &ef in args.hnsw_ef.iter().filter(|&&e| e > 0) {
                let t = Instant::now();
                let mut lat = Vec::new();
                let got: Vec<Vec<u32>> = queries
                    .chunks_exact(DIM)
                    .map(|q| {
                        let t = Instant::now();
                        let r = hnsw.search(q, 10, ef);
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                        r.iter().map(|n| n.d_id as u32).collect()
                    })
                    .collect();
                let qps = nq as f64 / t.elapsed().as_secs_f64();
                let (p50, _, p99) = latencies_ms(lat);
                let r = recall(&truth, &got);
                eprintln!("hnsw ef {ef}: recall {r:.3}, QPS {qps:.0}");
                report += &format!(
                    "| hnsw_rs, 1 thread | ef {ef} | {r:.3} | {p50:.2} / {p99:.2} | {qps:.0} | | |\n"
                );
            }
        }
        eprintln!("{report}");
        if args.keep {
            break;
        }
        drop(db);
        admin.batch_execute("DROP DATABASE pgs_key_bench").unwrap();
    }
    println!("{report}");
}
