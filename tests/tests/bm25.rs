//! The bm25 index against real servers: concurrency + VACUUM, crash recovery, streaming
//! replication, dump/restore, REINDEX CONCURRENTLY. Each test starts its own cluster on its own
//! loopback port and removes it at the end, also on failure. Skipped (with a message) when the
//! extension is not installed; `./x test` installs it first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pg_skills_server_tests::*;

/// Rebuilds the extension's own index with `options` (options take effect at REINDEX).
fn set_index_options(client: &mut Client, options: &str) {
    client
        .batch_execute(&format!("ALTER INDEX skills.skill_bm25 SET ({options})"))
        .unwrap();
    client
        .batch_execute("REINDEX INDEX skills.skill_bm25")
        .unwrap();
}

/// Index path against the reference for `queries` random queries, k = 10 and all.
fn differential(client: &mut Client, rng: &mut Rng, queries: usize, context: &str) {
    for q in 0..queries {
        let query = rng.words(1, 6);
        for k in [Some(10), None] {
            let got = search(client, &query, k);
            let want = reference(client, &query, k);
            assert_same_ranking(
                &format!("{context}: query {q} {query:?} k {k:?}"),
                &got,
                &want,
            );
        }
    }
}

/// VACUUMs until the index's document count equals the table's live rows, then asserts it:
/// BM25 statistics (document count, lengths, frequencies) count every entry the index holds,
/// so they equal the reference's only once dead rows' entries are gone.
///
/// VACUUM removes a dead row only once no snapshot can see it (an autovacuum ANALYZE may hold
/// one for a moment), so VACUUM again until it did; entries the index kept for good would still
/// fail after the last try. INDEX_CLEANUP ON: with the default (auto), VACUUM skips the index
/// pass when under 2% of the heap's pages have dead items, and the index keeps those entries
/// (that, not the index, failed the concurrency test once in CI with 2 of 2509, and the crash
/// test with the rows its writers had in flight at the crash).
fn vacuum_until_index_holds_live_rows(client: &mut Client, seed: u64) {
    let mut attempts = 0;
    let (rows, stats) = loop {
        client
            .batch_execute("VACUUM (INDEX_CLEANUP ON) skills.skill")
            .unwrap();
        let rows: i64 = client
            .query_one("SELECT count(*) FROM skills.skill", &[])
            .unwrap()
            .get(0);
        let stats = client
            .query_one("SELECT segment_documents + append_documents, segments_with_tombstones FROM skills.bm25_index_stats('skills.skill_bm25'::regclass)", &[])
            .unwrap();
        attempts += 1;
        if stats.get::<_, i64>(0) == rows || attempts == 10 {
            break (rows, stats);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        stats.get::<_, i64>(0),
        rows,
        "seed {seed}: after VACUUM the index holds exactly the live rows"
    );
    assert_eq!(stats.get::<_, i32>(1), 0);
}

type Errors = Arc<Mutex<Vec<String>>>;

/// A thread that runs `vacuum` every `pause_ms` until `stop`, its failures into `errors`.
fn vacuum_meanwhile(
    cluster: &Cluster,
    stop: &Arc<AtomicBool>,
    errors: &Errors,
    vacuum: &'static str,
    pause_ms: u64,
) -> std::thread::JoinHandle<()> {
    let (dsn, stop, errors) = (cluster.dsn("postgres"), stop.clone(), errors.clone());
    std::thread::spawn(move || {
        let mut client = Client::connect(&dsn, NoTls).unwrap();
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = client.batch_execute(vacuum) {
                errors.lock().unwrap().push(format!("vacuum: {e:?}"));
            }
            std::thread::sleep(Duration::from_millis(pause_ms));
        }
    })
}

/// Lets `workers` run for `seconds`, stops and joins them, and fails on any error they met.
fn stop_after(
    seconds: u64,
    stop: &AtomicBool,
    workers: Vec<std::thread::JoinHandle<()>>,
    errors: &Errors,
    seed: u64,
) {
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let errors = errors.lock().unwrap();
    assert!(errors.is_empty(), "seed {seed}: {errors:?}");
}

#[test]
fn concurrent_writers_and_vacuum_then_index_equals_reference() {
    if skip() {
        return;
    }
    let seed = seed("concurrent_writers_and_vacuum");
    let cluster = Cluster::start("concurrent", 54361);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    let mut rng = Rng(seed);
    insert_random(&mut admin, &mut rng, 300, "base");
    set_index_options(&mut admin, "append_pages = 2");

    let stop = Arc::new(AtomicBool::new(false));
    let errors: Errors = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let (dsn, stop, errors) = (cluster.dsn("postgres"), stop.clone(), errors.clone());
        workers.push(std::thread::spawn(move || {
            let mut client = Client::connect(&dsn, NoTls).unwrap();
            let mut rng = Rng(seed ^ (w + 1) * 0x1234_5678);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let op = rng.below(10);
                let result = if op < 6 {
                    let name = format!("w{w}-{n}");
                    client
                        .execute(
                            "INSERT INTO skills.skill (name, description, instructions) VALUES ($1, $2, $3)",
                            &[&name, &rng.words(3, 12), &rng.words(0, 100)],
                        )
                        .map(|_| ())
                } else if op < 8 {
                    let extra = rng.words(1, 5);
                    client
                        .execute(
                            "UPDATE skills.skill SET instructions = instructions || ' ' || $1 \
                             WHERE id = (SELECT id FROM skills.skill ORDER BY random() LIMIT 1)",
                            &[&extra],
                        )
                        .map(|_| ())
                } else if op < 9 {
                    client
                        .execute("DELETE FROM skills.skill WHERE id = (SELECT id FROM skills.skill ORDER BY random() LIMIT 1)", &[])
                        .map(|_| ())
                } else {
                    let q = rng.words(1, 4);
                    client.query("SELECT * FROM skills.search($1, k => 5, method => 'bm25')", &[&q]).map(|_| ())
                };
                if let Err(e) = result {
                    // An update can make two skills' content identical: the content hash is
                    // unique, so that statement fails on its own, as it should.
                    if e.code() != Some(&postgres::error::SqlState::UNIQUE_VIOLATION) {
                        errors.lock().unwrap().push(format!("worker {w}: {e:?}"));
                    }
                }
                n += 1;
            }
        }));
    }
    workers.push(vacuum_meanwhile(
        &cluster,
        &stop,
        &errors,
        "VACUUM skills.skill",
        300,
    ));
    stop_after(8, &stop, workers, &errors, seed);
    vacuum_until_index_holds_live_rows(&mut admin, seed);
    differential(&mut admin, &mut rng, 25, &format!("seed {seed}"));
}

/// Bulk inserts (`pg_skills.bm25_bulk_insert`) from writers whose transactions commit, roll
/// back, and roll back to savepoints, with searches inside them and VACUUM running meanwhile:
/// every committed row is found, no rolled-back row is, and after VACUUM the index equals the
/// reference. The gathered documents of a subtransaction that rolled back must never reach
/// the index: VACUUM may have reused their rows' TIDs for other rows by then.
#[test]
fn bulk_writers_with_savepoints_and_vacuum_then_index_equals_reference() {
    if skip() {
        return;
    }
    let seed = seed("bulk_writers");
    let cluster = Cluster::start("bulk", 54378);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    let mut rng = Rng(seed);
    insert_random(&mut admin, &mut rng, 200, "base");

    let stop = Arc::new(AtomicBool::new(false));
    let errors: Errors = Arc::new(Mutex::new(Vec::new()));
    // Tokens of rows whose transaction committed, and of rows rolled back.
    let kept = Arc::new(Mutex::new(Vec::<(i64, String)>::new()));
    let gone = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for w in 0..2u64 {
        let (dsn, stop, errors) = (cluster.dsn("postgres"), stop.clone(), errors.clone());
        let (kept, gone) = (kept.clone(), gone.clone());
        workers.push(std::thread::spawn(move || {
            let mut client = Client::connect(&dsn, NoTls).unwrap();
            let mut rng = Rng(seed ^ (w + 1) * 0x5151_7373);
            let mut n = 0u64;
            let mut run = || -> Result<(), postgres::Error> {
                let mut tx = client.transaction()?;
                tx.batch_execute("SET LOCAL pg_skills.bm25_bulk_insert = on")?;
                if rng.below(2) == 0 {
                    // Small enough that the gathered documents spill to a temporary file.
                    tx.batch_execute("SET LOCAL maintenance_work_mem = '1MB'")?;
                }
                let (mut mine, mut rolled_back) = (Vec::new(), Vec::new());
                for _ in 0..1 + rng.below(4) {
                    let savepoint = rng.below(3) == 0;
                    if savepoint {
                        tx.batch_execute("SAVEPOINT s")?;
                    }
                    let mut batch = Vec::new();
                    for _ in 0..1 + rng.below(40) {
                        n += 1;
                        let token = format!("bulktoken{w}x{n}");
                        let id: i64 = tx
                            .query_one(
                                "INSERT INTO skills.skill (name, description, instructions) VALUES ($1, $2, $3) RETURNING id",
                                &[&format!("b{w}-{n}"), &rng.words(2, 10), &format!("{} {token}", rng.words(0, 80))],
                            )?
                            .get(0);
                        batch.push((id, token));
                    }
                    if rng.below(3) == 0 {
                        // A search inside the transaction finds its own rows.
                        let (id, token) = batch.last().unwrap().clone();
                        let hit: Option<i64> = tx
                            .query_opt("SELECT id FROM skills.search($1, k => 1, method => 'bm25')", &[&token])?
                            .map(|r| r.get(0));
                        assert_eq!(hit, Some(id), "seed {seed}: {token} inside its transaction");
                    }
                    if savepoint && rng.below(2) == 0 {
                        tx.batch_execute("ROLLBACK TO SAVEPOINT s")?;
                        rolled_back.extend(batch.into_iter().map(|(_, t)| t));
                    } else {
                        mine.extend(batch);
                    }
                }
                if rng.below(4) == 0 {
                    tx.rollback()?;
                    rolled_back.extend(mine.into_iter().map(|(_, t)| t));
                } else {
                    tx.commit()?;
                    kept.lock().unwrap().extend(mine);
                }
                gone.lock().unwrap().extend(rolled_back);
                Ok(())
            };
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = run() {
                    errors.lock().unwrap().push(format!("writer {w}: {e:?}"));
                }
            }
        }));
    }
    workers.push(vacuum_meanwhile(
        &cluster,
        &stop,
        &errors,
        "VACUUM (INDEX_CLEANUP ON) skills.skill",
        200,
    ));
    stop_after(8, &stop, workers, &errors, seed);
    let (kept, gone) = (kept.lock().unwrap(), gone.lock().unwrap());
    assert!(
        kept.len() > 50 && !gone.is_empty(),
        "seed {seed}: {} kept, {} rolled back",
        kept.len(),
        gone.len()
    );
    // A search for many tokens at once (any term matches) finds exactly the committed rows
    // that hold them: none of the rolled-back ones, whose TIDs other rows may hold by now.
    for chunk in kept.chunks(400) {
        let query: Vec<&str> = chunk.iter().map(|(_, t)| t.as_str()).collect();
        let mut found: Vec<i64> = search(&mut admin, &query.join(" "), None)
            .iter()
            .map(|h| h.0)
            .collect();
        let mut want: Vec<i64> = chunk.iter().map(|(id, _)| *id).collect();
        found.sort_unstable();
        want.sort_unstable();
        assert_eq!(found, want, "seed {seed}: committed rows");
    }
    for chunk in gone.chunks(400) {
        let hits = search(&mut admin, &chunk.join(" "), None);
        assert!(
            hits.is_empty(),
            "seed {seed}: rolled-back rows' tokens found in rows {hits:?}"
        );
    }
    vacuum_until_index_holds_live_rows(&mut admin, seed);
    differential(&mut admin, &mut rng, 20, &format!("seed {seed} bulk"));

    // A parallel plan in the transaction that gathered documents: its workers read the
    // index's statistics themselves, so the documents are written before they start.
    let mut tx = admin.transaction().unwrap();
    tx.batch_execute(
        "SET LOCAL pg_skills.bm25_bulk_insert = on; \
         INSERT INTO skills.skill (name, description, instructions) \
         SELECT 'par-' || g, 'parallel check', 'zqxparallelword ' || g FROM generate_series(1, 30) g; \
         SET LOCAL force_parallel_mode = on; SET LOCAL parallel_setup_cost = 0; \
         SET LOCAL parallel_tuple_cost = 0; SET LOCAL enable_indexscan = off",
    )
    .unwrap();
    let matched: i64 = tx
        .query_one(
            "SELECT count(*) FROM skills.skill \
             WHERE ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('zqxparallelword', 'skills.skill_bm25'::regclass) < 0",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(matched, 30, "seed {seed}: rows scored in parallel workers");
    tx.rollback().unwrap();
}

#[test]
fn crash_recovery_keeps_every_committed_row() {
    if skip() {
        return;
    }
    let seed = seed("crash_recovery");
    let cluster = Cluster::start("crash", 54362);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    let mut rng = Rng(seed);
    insert_random(&mut admin, &mut rng, 100, "base");
    set_index_options(&mut admin, "append_pages = 2");

    let committed = committed_across_a_crash(&cluster, 2, seed, move |client, w, n| {
        // Each writer's text is a function of (seed, writer, n): no state crosses calls.
        let mut rng = Rng(seed ^ (w << 40) ^ n.wrapping_mul(0x9e37_79b9));
        let token = format!("crashtoken{w}x{n}");
        let instructions = format!("{} {token}", rng.words(0, 60));
        let row = client.query_one(
            "INSERT INTO skills.skill (name, description, instructions) VALUES ($1, $2, $3) RETURNING id",
            &[&format!("c{w}-{n}"), &rng.words(2, 10), &instructions],
        )?;
        Ok((row.get(0), token))
    });
    let mut client = cluster.client();
    for (id, token) in &committed {
        let hits = search(&mut client, token, Some(1));
        assert_eq!(
            hits.first().map(|h| h.0),
            Some(*id),
            "seed {seed}: committed row {id} ({token}) lost by the index"
        );
    }
    // The writers' inserts in flight at the crash are aborted rows whose index entries may
    // have reached disk: the reference counts live rows only.
    vacuum_until_index_holds_live_rows(&mut client, seed);
    differential(
        &mut client,
        &mut rng,
        15,
        &format!("seed {seed} after crash"),
    );
}

#[test]
fn standby_returns_the_primarys_results() {
    if skip() {
        return;
    }
    let seed = seed("standby");
    let primary = Cluster::start("primary", 54363);
    let mut p = primary.client();
    setup_extension(&mut p);
    let mut rng = Rng(seed);
    insert_random(&mut p, &mut rng, 200, "base");
    set_index_options(&mut p, "append_pages = 2");
    let standby = Cluster::standby_of(&primary, "standby", 54364);
    // Changes after the base backup reach the standby only through WAL.
    insert_random(&mut p, &mut rng, 150, "later");
    p.batch_execute("DELETE FROM skills.skill WHERE id % 9 = 0")
        .unwrap();
    p.batch_execute("VACUUM skills.skill").unwrap();
    insert_random(&mut p, &mut rng, 30, "after-vacuum");
    // Keys, a skill graph and one fitted round, so every search method has something to read.
    let keyed = model_dir().is_some();
    if keyed {
        p.batch_execute(
            "SELECT skills.embed_pending(); SELECT skills.build_graph(semantic_threshold => 0.3); \
             SELECT skills.record_run(t.task, jsonb_build_array( \
                 jsonb_build_object('skill_id', (SELECT min(id) FROM skills.skill), 'passed', true), \
                 jsonb_build_object('skill_id', (SELECT max(id) FROM skills.skill), 'passed', false))) \
             FROM (VALUES ('parse the config file'), ('parse a config file')) AS t(task); \
             SELECT skills.fit();",
        )
        .unwrap();
    }
    let mut s = standby.client();
    wait_for_replay(&mut p, &mut s);
    for q in 0..25 {
        let query = rng.words(1, 5);
        let on_primary = search(&mut p, &query, Some(10));
        let on_standby = search(&mut s, &query, Some(10));
        assert_same_ranking(
            &format!("seed {seed} query {q} {query:?}"),
            &on_standby,
            &on_primary,
        );
    }
    // Every method reads without a transaction id, so a standby answers as the primary does.
    let methods: &[&str] = if keyed {
        &["semantic", "hybrid", "graph", "skilltrace", "keyopt"]
    } else {
        &[]
    };
    for method in methods {
        for q in 0..3 {
            let query = rng.words(1, 5);
            let sql = "SELECT id, score FROM skills.search($1, k => 5, method => $2)";
            let rows =
                |c: &mut postgres::Client| -> Vec<(i64, f64)> { pairs(c, sql, &[&query, method]) };
            let (on_primary, on_standby) = (rows(&mut p), rows(&mut s));
            assert!(!on_primary.is_empty(), "{method}: {query:?}");
            assert_same_ranking(
                &format!("{method} query {q} {query:?}"),
                &on_standby,
                &on_primary,
            );
        }
    }
    let plan: Vec<String> = s
        .query(
            "EXPLAIN SELECT id FROM skills.skill ORDER BY ARRAY[name, description, instructions] \
             OPERATOR(skills.<&>) skills.bm25query('rust') LIMIT 3",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        plan.iter()
            .any(|l| l.contains("Index Scan using skill_bm25")),
        "{plan:?}"
    );
}

#[test]
fn dump_restore_and_reindex_concurrently_keep_results() {
    if skip() {
        return;
    }
    let seed = seed("dump_restore");
    let cluster = Cluster::start("dump", 54365);
    let mut c = cluster.client();
    setup_extension(&mut c);
    let mut rng = Rng(seed);
    insert_random(&mut c, &mut rng, 250, "base");
    // Options changed by ALTER INDEX are not dumped: the index belongs to the extension, which
    // a restore recreates with its defaults. So this test keeps the defaults.
    let queries: Vec<String> = (0..15).map(|_| rng.words(1, 5)).collect();
    let before: Vec<_> = queries
        .iter()
        .map(|q| search(&mut c, q, Some(10)))
        .collect();

    dump_and_restore(&cluster, "postgres", "restored");
    let mut r = cluster.client_db("restored");
    let definition: String = r
        .query_one(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'skill_bm25'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(definition.contains("USING bm25"), "{definition}");
    for (q, want) in queries.iter().zip(&before) {
        assert_same_ranking(
            &format!("restored {q:?}"),
            &search(&mut r, q, Some(10)),
            want,
        );
    }
    c.batch_execute("REINDEX INDEX CONCURRENTLY skills.skill_bm25")
        .unwrap();
    for (q, want) in queries.iter().zip(&before) {
        assert_same_ranking(
            &format!("reindexed {q:?}"),
            &search(&mut c, q, Some(10)),
            want,
        );
    }
}
