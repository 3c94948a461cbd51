//! The skeys index against real servers: crash recovery under insert load, streaming
//! replication, pg_dump/pg_restore and REINDEX CONCURRENTLY. Each test starts its own cluster on
//! its own loopback port (54366–54369) and removes it at the end, also on failure.
//!
//! The tests use the L2 operator class: a key's own row is at distance 0, so "is this committed
//! row findable" is "is it the nearest row to its own key". With `key_probes` = every list the
//! index reads all entries, so its answer must equal a sequential scan's exactly.

use pg_skills_kernels::synthetic::{centres, clustered};
use pg_skills_server_tests::*;

const DIM: usize = 512;
const LISTS: i32 = 12;

fn key_text(key: &[f32]) -> String {
    let parts: Vec<String> = key.iter().map(|v| v.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// `n` keys around the test's cluster centres.
fn keys(seed: u64, n: usize) -> Vec<String> {
    clustered(&centres(30, DIM, 77), DIM, n, seed)
        .chunks_exact(DIM)
        .map(key_text)
        .collect()
}

fn create_table(c: &mut Client, rows: &[String]) {
    c.batch_execute("CREATE TABLE key_t (id bigserial PRIMARY KEY, key skills.key NOT NULL);")
        .unwrap();
    for k in rows {
        c.execute(
            "INSERT INTO key_t (key) VALUES ($1::text::skills.key)",
            &[k],
        )
        .unwrap();
    }
    c.batch_execute(&format!(
        "CREATE INDEX key_t_l2 ON key_t USING skeys (key skills.key_l2_ops) WITH (lists = {LISTS})"
    ))
    .unwrap();
}

/// (id, distance) of the 10 nearest rows, through the index (every list) or a sequential scan.
fn nearest(c: &mut Client, key: &str, index: bool) -> Vec<(i64, f64)> {
    let mut tx = c.transaction().unwrap();
    tx.batch_execute(&format!(
        "SET LOCAL pg_skills.key_probes = {LISTS}; SET LOCAL enable_indexscan = {index}; \
         SET LOCAL enable_seqscan = {};",
        !index
    ))
    .unwrap();
    pairs(
        &mut tx,
        "SELECT id, key OPERATOR(skills.<->) $1::text::skills.key FROM key_t \
         ORDER BY key OPERATOR(skills.<->) $1::text::skills.key, id LIMIT 10",
        &[&key],
    )
}

/// Whether the planner takes the index at a breadth that reads some of its lists (reading all
/// of them, a sequential scan and a sort of these few hundred rows cost less).
fn uses_index(c: &mut Client) -> bool {
    let mut tx = c.transaction().unwrap();
    tx.batch_execute("SET LOCAL pg_skills.key_probes = 2")
        .unwrap();
    tx.query(
        "EXPLAIN SELECT id FROM key_t ORDER BY key OPERATOR(skills.<->) (SELECT key FROM key_t LIMIT 1) LIMIT 5",
        &[],
    )
    .unwrap()
    .iter()
    .any(|r| r.get::<_, String>(0).contains("Index Scan using key_t_l2"))
}

fn index_equals_seqscan(c: &mut Client, queries: &[String], context: &str) {
    for (i, q) in queries.iter().enumerate() {
        let got = nearest(c, q, true);
        let want = nearest(c, q, false);
        assert_eq!(got, want, "{context}: query {i}");
    }
}

#[test]
fn key_index_crash_recovery_keeps_every_committed_key() {
    if skip() {
        return;
    }
    let seed = seed("key_crash");
    let cluster = Cluster::start("keycrash", 54366);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    create_table(&mut admin, &keys(seed, 300));

    let committed = committed_across_a_crash(&cluster, 2, seed, move |client, w, n| {
        if n % 50 == 49 {
            let _ = client.batch_execute("DELETE FROM key_t WHERE id % 97 = 0");
        }
        let key = keys(seed ^ (w << 40) ^ (n + 1), 1).remove(0);
        let row = client.query_one(
            "INSERT INTO key_t (key) VALUES ($1::text::skills.key) RETURNING id",
            &[&key],
        )?;
        Ok((row.get(0), key))
    });
    let mut c = cluster.client();
    for (id, key) in &committed {
        if id % 97 == 0 {
            continue;
        }
        let top = nearest(&mut c, key, true);
        assert_eq!(
            top.first().map(|r| r.0),
            Some(*id),
            "seed {seed}: committed key {id} not found through the index after the crash"
        );
    }
    c.batch_execute("VACUUM key_t").unwrap();
    index_equals_seqscan(
        &mut c,
        &keys(seed + 9, 10),
        &format!("seed {seed} after crash"),
    );
}

#[test]
fn key_index_standby_returns_the_primarys_results() {
    if skip() {
        return;
    }
    let seed = seed("key_standby");
    let primary = Cluster::start("keyprimary", 54367);
    let mut p = primary.client();
    setup_extension(&mut p);
    create_table(&mut p, &keys(seed, 300));
    let standby = Cluster::standby_of(&primary, "keystandby", 54368);
    // Changes after the base backup reach the standby only through WAL.
    for k in keys(seed + 1, 200) {
        p.execute(
            "INSERT INTO key_t (key) VALUES ($1::text::skills.key)",
            &[&k],
        )
        .unwrap();
    }
    p.batch_execute("DELETE FROM key_t WHERE id % 5 = 0")
        .unwrap();
    p.batch_execute("VACUUM key_t").unwrap();
    for k in keys(seed + 2, 50) {
        p.execute(
            "INSERT INTO key_t (key) VALUES ($1::text::skills.key)",
            &[&k],
        )
        .unwrap();
    }
    let mut s = standby.client();
    wait_for_replay(&mut p, &mut s);
    for (i, q) in keys(seed + 3, 15).iter().enumerate() {
        let on_primary = nearest(&mut p, q, true);
        assert_eq!(
            nearest(&mut s, q, true),
            on_primary,
            "seed {seed} query {i}"
        );
    }
    index_equals_seqscan(
        &mut s,
        &keys(seed + 4, 5),
        &format!("seed {seed} on the standby"),
    );
    assert!(uses_index(&mut s));
}

#[test]
fn key_index_dump_restore_and_reindex_concurrently_keep_results() {
    if skip() {
        return;
    }
    let seed = seed("key_dump");
    let cluster = Cluster::start("keydump", 54369);
    let mut c = cluster.client();
    setup_extension(&mut c);
    create_table(&mut c, &keys(seed, 400));
    let queries = keys(seed + 1, 10);
    let before: Vec<_> = queries.iter().map(|q| nearest(&mut c, q, true)).collect();

    dump_and_restore(&cluster, "postgres", "restored");
    let mut r = cluster.client_db("restored");
    assert!(uses_index(&mut r), "the restored database has the index");
    let lists: i32 = r
        .query_one("SELECT lists FROM skills.key_index_stats('key_t_l2')", &[])
        .unwrap()
        .get(0);
    assert_eq!(lists, LISTS, "WITH (lists = ...) survives the dump");
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(
            &nearest(&mut r, q, true),
            want,
            "seed {seed}: after restore"
        );
    }

    c.batch_execute("REINDEX INDEX CONCURRENTLY key_t_l2")
        .unwrap();
    assert!(uses_index(&mut c));
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(
            &nearest(&mut c, q, true),
            want,
            "seed {seed}: after REINDEX CONCURRENTLY"
        );
    }
}
