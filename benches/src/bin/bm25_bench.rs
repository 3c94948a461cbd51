//! BM25 index benchmark, side by side in one run on the same rows and queries:
//! - the pg_skills `bm25` index (`ORDER BY doc <&> query LIMIT 10`),
//! - PostgreSQL's built-in full text search (tsvector + GIN, `ts_rank_cd ... LIMIT 10`, OR
//!   semantics between query words),
//! - tantivy in-process on the same documents with the same analyzer (the library bound).
//!
//! Documents: SkillsBench SKILL.md files replicated with perturbation (a fifth of the words
//! replaced by words drawn from the corpus vocabulary by frequency, lengths scaled 0.5–1.5×).
//! Queries: MetaTool task queries (short, natural language). Reports build time, size, latency
//! percentiles by query length (one client) and pgbench QPS at 1, 2 and 8 clients.
//!
//! `cargo run --release -p pg_skills_benches --bin bm25_bench -- --dsn ... --sizes 10000,100000`

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use pg_skills_benches::timing::{latencies_ms, pgbench};
use postgres::{Client, NoTls};

use pg_skills_kernels::text::{Analyzer, AnalyzerConfig};

#[derive(Parser)]
struct Args {
    /// Server to run on (a database pgs_bm25_bench is created there and dropped after).
    #[arg(long, required_unless_present = "in_process")]
    dsn: Option<String>,
    /// Corpus sizes.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    sizes: Vec<usize>,
    /// Queries timed per system.
    #[arg(long, default_value_t = 500)]
    queries: usize,
    /// Seconds per pgbench run.
    #[arg(long, default_value_t = 15)]
    pgbench_seconds: u32,
    #[arg(long, default_value = "../shared/bench-data")]
    data: PathBuf,
    /// pg_config of the server (for pgbench).
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin/pg_config")]
    pg_config: String,
    /// Queries timed for built-in FTS (the first ones of `--queries`): at 1M rows one FTS query
    /// takes seconds.
    #[arg(long)]
    fts_queries: Option<usize>,
    /// Time only pg_skills (no FTS, no tantivy; in `--in-process`, no tantivy index): for
    /// profiling.
    #[arg(long)]
    bm25_only: bool,
    /// Leave out built-in FTS (pg_skills and tantivy only; at 1M one FTS query takes seconds).
    #[arg(long)]
    no_fts: bool,
    /// Keep the database pgs_bm25_bench after the last size (for profiling by hand).
    #[arg(long)]
    keep: bool,
    /// Run every pg_skills query once, untimed, before timing them (the connection's caches
    /// warm, as tantivy's are after its build).
    #[arg(long)]
    warm: bool,
    /// No server: the index's own search (the kernel, pages in memory) against tantivy, both
    /// in this process on the same documents and queries — the algorithm without SQL.
    #[arg(long)]
    in_process: bool,
    /// Keyword queries instead of sentences: each query keeps its first 1, 2 or 3 words (in
    /// turn) that the analyzer keeps, so every query has 1 to 3 terms.
    #[arg(long)]
    short_queries: bool,
    /// Passes over the queries in `--in-process` (the first warms caches; the last is timed).
    #[arg(long, default_value_t = 3)]
    passes: usize,
    /// In `--in-process`, also write each query's latencies of the timed pass to this file (a
    /// line each: distinct analyzed terms, pg_skills ms, tantivy ms, the query), to see which
    /// queries take longer than tantivy's.
    #[arg(long)]
    per_query: Option<std::path::PathBuf>,
    /// Keep only the queries of this many distinct analyzed terms (for profiling one length).
    #[arg(long)]
    query_terms: Option<usize>,
}

use pg_skills_kernels::rng::SplitMix64 as Rng;

struct Doc {
    name: String,
    description: String,
    instructions: String,
}

fn base_documents(data: &Path) -> Vec<Doc> {
    let text = std::fs::read_to_string(data.join("skillsbench-tasks/corpus.jsonl"))
        .expect("SkillsBench corpus");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let raw = v["text"].as_str()?;
            let skill = pg_skills_corpus::skill::parse_skill_md(raw, v["_id"].as_str()).ok()?;
            Some(Doc {
                name: skill.name,
                description: skill.description,
                instructions: skill.instructions,
            })
        })
        .collect()
}

/// Words of the base corpus with their frequencies, for sampling by frequency.
struct Vocabulary {
    words: Vec<String>,
    cumulative: Vec<u64>,
}

impl Vocabulary {
    fn new(docs: &[Doc]) -> Self {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for d in docs {
            for w in d
                .description
                .split_whitespace()
                .chain(d.instructions.split_whitespace())
            {
                *counts.entry(w).or_default() += 1;
            }
        }
        let mut pairs: Vec<_> = counts.into_iter().collect();
        pairs.sort();
        let mut total = 0;
        let mut words = Vec::new();
        let mut cumulative = Vec::new();
        for (w, c) in pairs {
            total += c;
            words.push(w.to_string());
            cumulative.push(total);
        }
        Vocabulary { words, cumulative }
    }

    fn sample(&self, rng: &mut Rng) -> &str {
        let x = rng.next_u64() % self.cumulative.last().unwrap();
        &self.words[self.cumulative.partition_point(|&c| c <= x)]
    }
}

fn perturb(text: &str, vocab: &Vocabulary, rng: &mut Rng, scale: f64) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return String::new();
    }
    let n = ((words.len() as f64) * scale).max(1.0) as usize;
    (0..n)
        .map(|i| {
            if rng.unit() < 0.2 {
                vocab.sample(rng)
            } else {
                words[i % words.len()]
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn synthetic(base: &[Doc], vocab: &Vocabulary, n: usize) -> Vec<Doc> {
    let mut rng = Rng(42);
    (0..n)
        .map(|i| {
            let b = &base[i % base.len()];
            let scale = 0.5 + rng.unit();
            Doc {
                name: format!("{}-{i}", b.name),
                description: perturb(&b.description, vocab, &mut rng, 1.0),
                instructions: perturb(&b.instructions, vocab, &mut rng, scale),
            }
        })
        .collect()
}

fn copy_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// Query lengths (distinct analyzed terms) that latencies are reported by.
const BUCKETS: [&str; 5] = ["1 term", "2 terms", "3 terms", "4-6 terms", "7+ terms"];

fn bucket(terms: usize) -> &'static str {
    match terms {
        0..=1 => "1 term",
        2 => "2 terms",
        3 => "3 terms",
        4..=6 => "4-6 terms",
        _ => "7+ terms",
    }
}

fn main() {
    let args = Args::parse();
    let base = base_documents(&args.data);
    let vocab = Vocabulary::new(&base);
    let queries: Vec<String> = std::fs::read_to_string(args.data.join("metatool/queries.jsonl"))
        .expect("MetaTool queries")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_owned))
        .step_by(37)
        .take(args.queries)
        .collect();
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    let queries: Vec<String> = if args.short_queries {
        queries
            .iter()
            .enumerate()
            .map(|(i, q)| {
                q.split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !analyzer.tokens(w).is_empty())
                    .take(1 + i % 3)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|q| !q.is_empty())
            .collect()
    } else {
        queries
    };
    let query_terms: Vec<usize> = queries
        .iter()
        .map(|q| {
            let mut t = analyzer.tokens(q);
            t.sort();
            t.dedup();
            t.len()
        })
        .collect();
    let (queries, query_terms): (Vec<String>, Vec<usize>) = queries
        .into_iter()
        .zip(query_terms)
        .filter(|(_, n)| args.query_terms.is_none_or(|want| *n == want))
        .unzip();

    if args.in_process {
        for &n in &args.sizes {
            let docs = synthetic(&base, &vocab, n);
            println!(
                "{}",
                in_process(
                    &docs,
                    &queries,
                    &query_terms,
                    args.passes,
                    !args.bm25_only,
                    args.per_query.as_deref(),
                )
            );
        }
        return;
    }
    let dsn = args.dsn.clone().expect("--dsn");
    let mut admin = Client::connect(&dsn, NoTls).expect("connect");
    let mut report = String::new();
    for &n in &args.sizes {
        eprintln!("== {n} documents");
        let docs = synthetic(&base, &vocab, n);
        admin
            .batch_execute("DROP DATABASE IF EXISTS pgs_bm25_bench")
            .unwrap();
        admin
            .batch_execute("CREATE DATABASE pgs_bm25_bench")
            .unwrap();
        let dsn_db = format!("{dsn} dbname=pgs_bm25_bench");
        let mut db = Client::connect(&dsn_db, NoTls).unwrap();
        db.batch_execute(
            "CREATE EXTENSION pg_skills;
             DROP INDEX skills.skill_bm25;
             ALTER TABLE skills.skill DISABLE TRIGGER USER;",
        )
        .unwrap();
        let t = Instant::now();
        {
            let mut w = db
                .copy_in("COPY skills.skill (name, description, instructions, category, content_hash) FROM STDIN")
                .unwrap();
            for (i, d) in docs.iter().enumerate() {
                let hash = pg_skills_corpus::skill::content_hash(
                    &format!("{}{i}", d.name),
                    &d.description,
                    &d.instructions,
                );
                writeln!(
                    w,
                    "{}\t{}\t{}\tcode_generation\t{hash}",
                    copy_escape(&d.name),
                    copy_escape(&d.description),
                    copy_escape(&d.instructions)
                )
                .unwrap();
            }
            w.finish().unwrap();
        }
        eprintln!("loaded in {:.1} s", t.elapsed().as_secs_f64());
        db.batch_execute("VACUUM ANALYZE skills.skill").unwrap();
        db.batch_execute("SET maintenance_work_mem = '1GB'")
            .unwrap();
        let text_bytes: i64 = db
            .query_one("SELECT sum(octet_length(name) + octet_length(description) + octet_length(instructions))::bigint FROM skills.skill", &[])
            .unwrap()
            .get(0);

        let t = Instant::now();
        db.batch_execute("CREATE INDEX bench_bm25 ON skills.skill USING bm25 ((ARRAY[name, description, instructions]))").unwrap();
        let bm25_build = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let fts = !(args.bm25_only || args.no_fts);
        db.batch_execute(if !fts { "" } else {
            "CREATE TABLE fts AS SELECT id, to_tsvector('english', name || ' ' || description || ' ' || instructions) AS tsv FROM skills.skill;
             CREATE INDEX fts_gin ON fts USING gin (tsv); ANALYZE fts;"
        })
        .unwrap();
        let fts_build = t.elapsed().as_secs_f64();
        let sizes = db
            .query_one("SELECT pg_relation_size('skills.bench_bm25'), coalesce(pg_relation_size(to_regclass('fts_gin')), 0), coalesce(pg_relation_size(to_regclass('fts')), 0)", &[])
            .unwrap();
        let (bm25_size, gin_size, tsv_size): (i64, i64, i64) =
            (sizes.get(0), sizes.get(1), sizes.get(2));

        db.batch_execute("CREATE TABLE bench_queries (id int PRIMARY KEY, q text, tsq tsquery)")
            .unwrap();
        for (i, q) in queries.iter().enumerate() {
            db.execute(
                "INSERT INTO bench_queries VALUES ($1, $2, \
                 (SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery FROM unnest(to_tsvector('english', $2))))",
                &[&(i as i32 + 1), q],
            )
            .unwrap();
        }
        let plan: Vec<String> = db
            .query(
                "EXPLAIN SELECT id FROM skills.skill ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) \
                 skills.bm25query((SELECT q FROM bench_queries WHERE id = 1), 'skills.bench_bm25') LIMIT 10",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            plan.iter()
                .any(|l| l.contains("Index Scan using bench_bm25")),
            "{plan:?}"
        );

        // One client, prepared statements: latency per query.
        let bm25_stmt = db
            .prepare(
                "SELECT id FROM skills.skill ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) \
                 skills.bm25query($1, 'skills.bench_bm25') LIMIT 10",
            )
            .unwrap();
        let fts_stmt = fts.then(|| db
            .prepare("SELECT id FROM fts WHERE tsv @@ $1::text::tsquery ORDER BY ts_rank_cd(tsv, $1::text::tsquery) DESC LIMIT 10")
            .unwrap());
        let tsqs: Vec<String> = db
            .query("SELECT tsq::text FROM bench_queries ORDER BY id", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut bm25_lat: HashMap<&str, Vec<f64>> = HashMap::new();
        let mut fts_lat: HashMap<&str, Vec<f64>> = HashMap::new();
        if args.warm {
            for q in &queries {
                db.query(&bm25_stmt, &[q]).unwrap();
            }
        }
        for (i, q) in queries.iter().enumerate() {
            let t = Instant::now();
            db.query(&bm25_stmt, &[q]).unwrap();
            bm25_lat
                .entry(bucket(query_terms[i]))
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3);
            let Some(fts_stmt) = &fts_stmt else { continue };
            if args.fts_queries.is_some_and(|cap| i >= cap) {
                continue;
            }
            let t = Instant::now();
            db.query(fts_stmt, &[&tsqs[i]]).unwrap();
            fts_lat
                .entry(bucket(query_terms[i]))
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3);
        }

        if args.bm25_only {
            let mut text = format!(
                "{n} skills: build {bm25_build:.1} s, {:.1} MB; p50 / p95 / p99 ms:",
                bm25_size as f64 / (1 << 20) as f64
            );
            for b in BUCKETS {
                if let Some(l) = bm25_lat.get(b) {
                    let (p50, p95, p99) = latencies_ms(l.clone());
                    text += &format!(" {b} ({}) {p50:.2} / {p95:.2} / {p99:.2};", l.len());
                }
            }
            let (p50, p95, p99) = latencies_ms(bm25_lat.values().flatten().copied().collect());
            println!("{text} all {p50:.2} / {p95:.2} / {p99:.2}");
            if args.keep {
                return;
            }
            drop(db);
            admin.batch_execute("DROP DATABASE pgs_bm25_bench").unwrap();
            continue;
        }

        // tantivy in-process, same documents and analyzer (one text field: weights 1).
        let (tantivy_build, tantivy_lat) = tantivy_run(&docs, &queries, &query_terms);

        // pgbench QPS.
        let nq = queries.len();
        let bm25_script = format!(
            "\\set qid random(1, {nq})\nSELECT id FROM skills.skill ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) \
             skills.bm25query((SELECT q FROM bench_queries WHERE id = :qid), 'skills.bench_bm25') LIMIT 10;\n"
        );
        let fts_script = format!(
            "\\set qid random(1, {nq})\nSELECT id FROM fts WHERE tsv @@ (SELECT tsq FROM bench_queries WHERE id = :qid) \
             ORDER BY ts_rank_cd(tsv, (SELECT tsq FROM bench_queries WHERE id = :qid)) DESC LIMIT 10;\n"
        );
        let pgbench_db = dsn_db.clone();
        let mut qps = Vec::new();
        for clients in [1u32, 2, 8] {
            let b = pgbench(
                &args.pg_config,
                &pgbench_db,
                &bm25_script,
                clients,
                args.pgbench_seconds,
            );
            let f = if fts {
                pgbench(
                    &args.pg_config,
                    &pgbench_db,
                    &fts_script,
                    clients,
                    args.pgbench_seconds,
                )
            } else {
                f64::NAN
            };
            eprintln!("{clients} clients: bm25 {b:.1} QPS, FTS {f:.2} QPS");
            qps.push((clients, b, f));
        }
        let tantivy_qps = 1000.0 / (tantivy_lat.values().flatten().sum::<f64>() / nq as f64);

        // Report.
        let mb = |b: i64| b as f64 / (1 << 20) as f64;
        report += &format!(
            "\n### {n} skills ({:.0} MB of text)\n\n| | build | size |\n|---|---|---|\n\
             | pg_skills bm25 | {bm25_build:.1} s | {:.1} MB |\n{}\
             | tantivy in-process (RAM) | {tantivy_build:.1} s | |\n\n\
             Latency of top-10, one client, ms (p50 / p95 / p99):\n\n| query length | queries | pg_skills bm25 | built-in FTS | tantivy | bm25 p50 vs tantivy |\n|---|---|---|---|---|---|\n",
            mb(text_bytes),
            mb(bm25_size),
            if fts {
                format!(
                    "| built-in FTS (tsvector table + GIN) | {fts_build:.1} s | {:.1} MB + {:.1} MB |\n",
                    mb(tsv_size),
                    mb(gin_size)
                )
            } else {
                String::new()
            }
        );
        for b in BUCKETS {
            let (Some(bl), Some(tl)) = (bm25_lat.get(b), tantivy_lat.get(b)) else {
                continue;
            };
            let (b50, b95, b99) = latencies_ms(bl.clone());
            let (t50, t95, t99) = latencies_ms(tl.clone());
            let fts_cell = match fts_lat.get(b) {
                Some(fl) if fl.len() == bl.len() => {
                    let (f50, f95, f99) = latencies_ms(fl.clone());
                    format!("{f50:.2} / {f95:.2} / {f99:.2}")
                }
                Some(fl) => {
                    let (f50, f95, f99) = latencies_ms(fl.clone());
                    format!("{f50:.2} / {f95:.2} / {f99:.2} ({} queries)", fl.len())
                }
                None if fts => "not timed".into(),
                None => "not run".into(),
            };
            report += &format!(
                "| {b} | {} | {b50:.2} / {b95:.2} / {b99:.2} | {fts_cell} | {t50:.3} / {t95:.3} / {t99:.3} | {:.2}× |\n",
                bl.len(),
                b50 / t50
            );
        }
        let all =
            |m: &HashMap<&str, Vec<f64>>| latencies_ms(m.values().flatten().copied().collect());
        let ((b50, b95, b99), (f50, f95, f99), (t50, t95, t99)) =
            (all(&bm25_lat), all(&fts_lat), all(&tantivy_lat));
        let fts_timed: usize = fts_lat.values().map(Vec::len).sum();
        let fts_all = if !fts {
            "not run".to_string()
        } else if fts_timed < nq {
            format!("{f50:.2} / {f95:.2} / {f99:.2} ({fts_timed} queries)")
        } else {
            format!("{f50:.2} / {f95:.2} / {f99:.2}")
        };
        report += &format!(
            "| all | {nq} | {b50:.2} / {b95:.2} / {b99:.2} | {fts_all} | {t50:.3} / {t95:.3} / {t99:.3} | {:.2}× |\n\n\
             QPS (pgbench -M prepared, {} s per run; tantivy: one thread, sequential):\n\n| clients | pg_skills bm25 | built-in FTS | bm25 / FTS |\n|---|---|---|---|\n",
            b50 / t50,
            args.pgbench_seconds
        );
        for (c, b, f) in &qps {
            report += &if fts {
                format!("| {c} | {b:.1} | {f:.2} | {:.0}× |\n", b / f)
            } else {
                format!("| {c} | {b:.1} | not run | |\n")
            };
        }
        report += &format!("| tantivy, 1 thread | {tantivy_qps:.0} | | |\n");
        eprintln!("{report}");
        if args.keep {
            break;
        }
        drop(db);
        admin.batch_execute("DROP DATABASE pgs_bm25_bench").unwrap();
    }
    println!("{report}");
}

/// The kernel's index (pages in memory, built as CREATE INDEX builds it) against tantivy, both
/// in this process, the same documents and queries, query by query alternating between them.
fn in_process(
    docs: &[Doc],
    queries: &[String],
    query_terms: &[usize],
    passes: usize,
    with_tantivy: bool,
    per_query: Option<&std::path::Path>,
) -> String {
    use pg_skills_kernels::bm25index::maintenance::{add_segment, initialize};
    use pg_skills_kernels::bm25index::segment::SegmentBuilder;
    use pg_skills_kernels::bm25index::{
        analyze, query_terms as terms_of, try_prepare, DocTableCache, IndexOptions, NoReaders, Tid,
    };
    use pg_skills_kernels::page::MemoryStore;

    let options = IndexOptions::default();
    let mut analyzer = Analyzer::new(AnalyzerConfig::default());
    let t = Instant::now();
    let store = MemoryStore::new(8192);
    initialize(&store, options);
    let mut builder = SegmentBuilder::new(options.term_scoring());
    for (i, d) in docs.iter().enumerate() {
        let doc = analyze(
            &mut analyzer,
            [&d.name, &d.description, &d.instructions],
            options.weights_array(),
        );
        let tid = Tid {
            block: (i / 8) as u32,
            offset: (i % 8) as u16 + 1,
        };
        builder.add(tid, &doc);
    }
    let segment = builder.write(&store);
    add_segment(&store, segment, &NoReaders).unwrap();
    let kernel_build = t.elapsed().as_secs_f64();
    let pages = store.num_pages();
    // Searches read the pages in place, as the server reads a buffer's page (`MemoryStore`
    // copies every page it reads).
    let store = store.freeze();
    let (tantivy_build, tantivy) = if with_tantivy {
        let (build, index) = tantivy_index(docs);
        (build, Some(index))
    } else {
        (f64::NAN, None)
    };
    eprintln!("built in {kernel_build:.1} s; searching");

    let mut cache = DocTableCache::default();
    let mut kernel_lat: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut tantivy_lat: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut lines = String::new();
    for pass in 0..passes.max(1) {
        let last = pass + 1 == passes.max(1);
        for (i, q) in queries.iter().enumerate() {
            let t = Instant::now();
            let terms = terms_of(&mut analyzer, q);
            if !terms.is_empty() {
                let hits = try_prepare(&store, &terms)
                    .unwrap()
                    .top_k_cached(10, &mut cache)
                    .unwrap();
                std::hint::black_box(hits);
            }
            let k = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            if let Some(tantivy) = &tantivy {
                std::hint::black_box(tantivy.search(q));
            }
            let tv = t.elapsed().as_secs_f64() * 1e3;
            if last {
                let b = bucket(query_terms[i]);
                kernel_lat.entry(b).or_default().push(k);
                tantivy_lat.entry(b).or_default().push(tv);
                if per_query.is_some() {
                    let text = q.replace(['\t', '\n'], " ");
                    lines += &format!("{}\t{k:.4}\t{tv:.4}\t{text}\n", query_terms[i]);
                }
            }
        }
    }
    if let Some(path) = per_query {
        std::fs::write(path, lines).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    }
    let mut report = format!(
        "\n### {} skills, in process: the index's search against tantivy\n\n\
         Build: kernel {kernel_build:.1} s ({:.1} MB of pages), tantivy {tantivy_build:.1} s. \
         Latency of top-10 (pass {passes} of {passes}), ms p50 / p95 / p99:\n\n\
         | query length | queries | pg_skills index (kernel) | tantivy | p50 ratio |\n|---|---|---|---|---|\n",
        docs.len(),
        pages as f64 * 8192.0 / (1 << 20) as f64,
    );
    let mut buckets: Vec<(&str, Vec<f64>, Vec<f64>)> = BUCKETS
        .iter()
        .filter_map(|b| Some((*b, kernel_lat.get(b)?.clone(), tantivy_lat.get(b)?.clone())))
        .collect();
    buckets.push((
        "all",
        kernel_lat.values().flatten().copied().collect(),
        tantivy_lat.values().flatten().copied().collect(),
    ));
    for (b, kl, tl) in buckets {
        let (k50, k95, k99) = latencies_ms(kl.clone());
        if tantivy.is_none() {
            report += &format!(
                "| {b} | {} | {k50:.3} / {k95:.3} / {k99:.3} | not run | |\n",
                kl.len()
            );
            continue;
        }
        let (t50, t95, t99) = latencies_ms(tl);
        report += &format!(
            "| {b} | {} | {k50:.3} / {k95:.3} / {k99:.3} | {t50:.3} / {t95:.3} / {t99:.3} | {:.2}× |\n",
            kl.len(),
            k50 / t50
        );
    }
    report
}

/// tantivy over the same documents: one text field, the same analyzer, one writer thread.
struct TantivyIndex {
    searcher: tantivy::Searcher,
    parser: tantivy::query::QueryParser,
}

impl TantivyIndex {
    fn search(&self, q: &str) -> Vec<(tantivy::Score, tantivy::DocAddress)> {
        use tantivy::collector::TopDocs;
        let (query, _) = self.parser.parse_query_lenient(q);
        self.searcher
            .search(&query, &TopDocs::with_limit(10).order_by_score())
            .unwrap()
    }
}

fn tantivy_index(docs: &[Doc]) -> (f64, TantivyIndex) {
    use tantivy::query::QueryParser;
    use tantivy::schema::{IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
    use tantivy::{doc, Index};

    let analyzer = Analyzer::new(AnalyzerConfig::default());
    let mut schema = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer("pgs")
        .set_index_option(IndexRecordOption::WithFreqs);
    let text = schema.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(indexing),
    );
    let index = Index::create_in_ram(schema.build());
    index.tokenizers().register("pgs", analyzer.text_analyzer());
    let t = Instant::now();
    let mut writer = index.writer_with_num_threads(1, 512 << 20).unwrap();
    for d in docs {
        writer
            .add_document(
                doc!(text => format!("{}\n{}\n{}", d.name, d.description, d.instructions)),
            )
            .unwrap();
    }
    writer.commit().unwrap();
    let build = t.elapsed().as_secs_f64();
    let reader = index.reader().unwrap();
    let searcher = reader.searcher();
    let parser = QueryParser::for_index(&index, vec![text]);
    (build, TantivyIndex { searcher, parser })
}

fn tantivy_run(
    docs: &[Doc],
    queries: &[String],
    query_terms: &[usize],
) -> (f64, HashMap<&'static str, Vec<f64>>) {
    let (build, index) = tantivy_index(docs);
    let mut lat: HashMap<&'static str, Vec<f64>> = HashMap::new();
    for (i, q) in queries.iter().enumerate() {
        let t = Instant::now();
        std::hint::black_box(index.search(q));
        lat.entry(bucket(query_terms[i]))
            .or_default()
            .push(t.elapsed().as_secs_f64() * 1e3);
    }
    (build, lat)
}
