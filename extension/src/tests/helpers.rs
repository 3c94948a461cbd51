//! What the `#[pg_test]`s share: running SQL as a test client would (straight through `Spi`,
//! under the session's own search_path), the demo skills and their searches, random corpora.

#![allow(dead_code)]

use pgrx::prelude::*;

pub fn exec(sql: &str) {
    Spi::run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `f` under a fresh snapshot, as a search statement started now reads: called directly, the
/// searches would see the snapshot of the test's own statement, taken before the rows the test
/// wrote since.
pub fn as_a_statement<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: the snapshot pushed here is popped before returning; on an ERROR in `f` the
    // test's transaction aborts, which releases it.
    unsafe {
        pgrx::pg_sys::CommandCounterIncrement();
        pgrx::pg_sys::PushActiveSnapshot(pgrx::pg_sys::GetTransactionSnapshot());
    }
    let out = f();
    // SAFETY: pops the snapshot pushed above.
    unsafe { pgrx::pg_sys::PopActiveSnapshot() };
    out
}

pub fn one<T: pgrx::IntoDatum + pgrx::FromDatum>(sql: &str) -> T {
    Spi::get_one::<T>(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: NULL"))
}

pub fn insert(name: &str, description: &str, instructions: &str) -> i64 {
    one(&format!(
        "INSERT INTO skills.skill (name, description, instructions) VALUES ({}, {}, {}) RETURNING id",
        quote(name),
        quote(description),
        quote(instructions)
    ))
}

pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// (id, float) rows of a query whose first two columns are those.
pub fn id_scores(sql: &str) -> Vec<(i64, f64)> {
    Spi::connect(|c| {
        c.select(sql, None, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .map(|r| {
                (
                    r.get::<i64>(1).unwrap().unwrap(),
                    r.get::<f64>(2).unwrap().unwrap(),
                )
            })
            .collect()
    })
}

/// The first column of every row, as text.
pub fn column(sql: &str) -> Vec<String> {
    Spi::connect(|c| {
        c.select(sql, None, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .map(|r| r.get::<String>(1).unwrap().unwrap())
            .collect()
    })
}

/// skills.search; unless the arguments say otherwise, BM25 and k => 10 (what these tests
/// were written for; the request's defaults are keyopt and no limit).
pub fn search(sql_args: &str) -> Vec<(i64, f64)> {
    let mut args = sql_args.to_string();
    if !args.contains("method =>") {
        args += ", method => 'bm25'";
    }
    if !args.contains("k =>") {
        args += ", k => 10";
    }
    id_scores(&format!("SELECT id, score FROM skills.search({args})"))
}

/// Drops the extension's bm25 index inside this (rolled back) test, so skills.search uses
/// the reference scan. Taken first, the table's lock orders this test after concurrent ones:
/// the shared index also counts their uncommitted and aborted rows until a VACUUM. Before it,
/// the loader's lock, as in [`without_content_hash_constraint`]: a concurrent test's load holds
/// that lock while it waits for the table, and a test that locked the table first and then
/// loaded waited for the loader's lock (a deadlock seen in CI).
pub fn without_index() {
    loader_lock();
    exec("LOCK TABLE skills.skill IN ACCESS EXCLUSIVE MODE");
    exec("DROP INDEX skills.skill_bm25");
}

/// Drops skill_content_hash_unique, as on Citus, so that copies of one content can be stored.
/// The loader's lock first (skills.merge_duplicate_skills takes it; a concurrent
/// apply_staging holds it and then waits for the table), then the table's.
pub fn without_content_hash_constraint() {
    loader_lock();
    exec("ALTER TABLE skills.skill DROP CONSTRAINT skill_content_hash_unique");
}

pub fn tiny_corpus() -> [i64; 3] {
    without_index();
    exec("SET LOCAL pg_skills.bm25_stemming = off");
    [
        insert("rust", "test runner", ""),
        insert("python", "", "debugger"),
        insert("rust", "rust", "borrow checker"),
    ]
}

/// Stages (name, instructions, location) rows, description 'd', for skills.apply_staging().
pub fn stage<S: AsRef<str>>(rows: &[(S, S, S)]) {
    exec("DROP TABLE IF EXISTS pg_temp.skill_staging");
    exec(
        "CREATE TEMP TABLE skill_staging (ord bigint, content_hash text PRIMARY KEY, name text, description text,
         instructions text, category skills.category, provenance jsonb)",
    );
    for (i, (name, body, location)) in rows.iter().enumerate() {
        let (name, body, location) = (name.as_ref(), body.as_ref(), location.as_ref());
        let hash = pg_skills_corpus::skill::content_hash(name, "d", body);
        exec(&format!(
            "INSERT INTO pg_temp.skill_staging VALUES ({i}, '{hash}', {}, 'd', {}, NULL, jsonb_build_array(jsonb_build_object('location', {})))",
            quote(name),
            quote(body),
            quote(location)
        ));
    }
}

/// The loader's lock, which `skills.apply_staging` takes first. A test that touches
/// skills.skill before it loads must take it before that touch: a concurrent test holding it
/// and locking the table (as [`without_index`] does) would otherwise wait for this test's table
/// lock while this test's load waits for its lock, a deadlock (seen in CI).
pub fn loader_lock() {
    exec("SELECT pg_advisory_xact_lock(hashtext('pg_skills.apply_staging'))");
}

/// Whether this transaction took skills.skill's lock before the loader's lock: the order
/// that can deadlock against a concurrent test, see [`loader_lock`].
fn table_locked_before_loader() -> bool {
    one(
        "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'
                          AND relation = 'skills.skill'::regclass)
            AND NOT EXISTS (SELECT FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'
                              AND ((classid::bigint << 32) | objid::bigint) = hashtext('pg_skills.apply_staging'))",
    )
}

pub fn apply() -> (i64, i64, i64, i64) {
    assert!(
        !table_locked_before_loader(),
        "this test touched skills.skill before its first load: call loader_lock() first"
    );
    Spi::connect(|c| {
        let r = c
            .select("SELECT * FROM skills.apply_staging()", None, &[])
            .unwrap()
            .first();
        (
            r.get::<i64>(1).unwrap().unwrap(),
            r.get::<i64>(2).unwrap().unwrap(),
            r.get::<i64>(3).unwrap().unwrap(),
            r.get::<i64>(4).unwrap().unwrap(),
        )
    })
}

// The bm25 index

pub use pg_skills_kernels::rng::SplitMix64 as Rng;

pub fn random_skills(rng: &mut Rng, n: usize) {
    for i in 0..n {
        let name = format!("{}-{i}", rng.words(1, 2).replace(' ', "-"));
        insert(&name, &rng.words(3, 15), &rng.words(0, 120));
    }
}

pub const DOC: &str = "ARRAY[name, description, instructions]";

pub fn create_index(with: &str) {
    exec(&format!(
        "CREATE INDEX skill_bm25 ON skills.skill USING bm25 (({DOC})) {with}"
    ));
}

/// (id, operator value) in the order the query returns rows.
pub fn ordered(query: &str, limit: &str) -> Vec<(i64, f64)> {
    let sql = format!(
        "SELECT id, {DOC} OPERATOR(skills.<&>) skills.bm25query({q}) FROM skills.skill \
         ORDER BY {DOC} OPERATOR(skills.<&>) skills.bm25query({q}) {limit}",
        q = quote(query)
    );
    id_scores(&sql)
}

pub fn plan(sql: &str) -> String {
    Spi::connect(|c| {
        c.select(&format!("EXPLAIN (COSTS OFF) {sql}"), None, &[])
            .unwrap()
            .map(|r| r.get::<String>(1).unwrap().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// The index path of skills.search against the reference scan, and the index scan against
/// a sequential scan of the same operator.
pub fn check_index_against_references(rng: &mut Rng, queries: usize, with_reference: bool) {
    for q in 0..queries {
        let query = rng.words(1, 6);
        for k in ["10", "NULL"] {
            if !with_reference {
                break;
            }
            let via_index = search(&format!("{}, k => {k}", quote(&query)));
            let reference = id_scores(&format!(
                "SELECT id, score FROM skills.bm25_scan({}, {k}, NULL)",
                quote(&query)
            ));
            assert_eq!(
                via_index.len(),
                reference.len(),
                "query {q} {query:?} k {k}"
            );
            for (a, b) in via_index.iter().zip(&reference) {
                assert_eq!(
                    a.0, b.0,
                    "query {q} {query:?} k {k}: {via_index:?} vs {reference:?}"
                );
                assert!(
                    (a.1 - b.1).abs() <= 1e-9 * b.1.abs(),
                    "query {q} {query:?}: {a:?} vs {b:?}"
                );
            }
        }
        // The index returns every row, best first (non-decreasing operator values).
        exec("SET LOCAL enable_seqscan = off");
        let by_index = ordered(&query, "");
        exec("SET LOCAL enable_seqscan = on");
        exec("SET LOCAL enable_indexscan = off");
        let by_seqscan = ordered(&query, "");
        exec("SET LOCAL enable_indexscan = on");
        assert_eq!(by_index.len(), by_seqscan.len(), "{query:?}");
        assert!(
            by_index.windows(2).all(|w| w[0].1 <= w[1].1),
            "{query:?}: index order {by_index:?}"
        );
        let (mut a, mut b) = (by_index.clone(), by_seqscan.clone());
        a.sort_by(|x, y| x.0.cmp(&y.0));
        b.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(a, b, "{query:?}");
    }
}

pub use pg_skills_kernels::synthetic::{centres, clustered};

pub const KEY_DIM: usize = 512;

pub fn key_literal(values: &[f32]) -> String {
    let parts: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
    format!("'[{}]'::skills.key", parts.join(","))
}

pub fn unit(i: usize) -> Vec<f32> {
    let mut v = vec![0.0; KEY_DIM];
    v[i] = 1.0;
    v
}

/// A table of `n` clustered keys with a category 0..9; returns the query keys.
pub fn key_table(n: usize, seed: u64) -> Vec<Vec<f32>> {
    exec("CREATE TABLE key_test (id bigint PRIMARY KEY, category int NOT NULL, key skills.key)");
    let c = centres(40, KEY_DIM, seed);
    let keys = clustered(&c, KEY_DIM, n, seed + 1);
    for (start, chunk) in keys.chunks(KEY_DIM * 200).enumerate() {
        let rows: Vec<String> = chunk
            .chunks_exact(KEY_DIM)
            .enumerate()
            .map(|(j, k)| {
                let id = start * 200 + j;
                format!("({id}, {}, {})", id % 10, key_literal(k))
            })
            .collect();
        exec(&format!("INSERT INTO key_test VALUES {}", rows.join(",")));
    }
    clustered(&c, KEY_DIM, 20, seed + 2)
        .chunks_exact(KEY_DIM)
        .map(<[f32]>::to_vec)
        .collect()
}

pub fn key_ids(sql: &str) -> Vec<(i64, f64)> {
    id_scores(sql)
}

pub fn nearest(op: &str, q: &[f32], filter: &str, limit: usize) -> Vec<(i64, f64)> {
    let q = key_literal(q);
    key_ids(&format!(
        "SELECT id, key OPERATOR(skills.{op}) {q} FROM key_test {filter} \
         ORDER BY key OPERATOR(skills.{op}) {q} LIMIT {limit}"
    ))
}

/// `n` skills named `prefix` 1..n, each with a pseudo-random unit-ish key (their nearest keys
/// have q·k about 0.1) and a zero embedding. Call [`own_skill_keys`] first.
pub fn keyed_skills(prefix: &str, n: usize) {
    exec(&format!(
        "INSERT INTO skills.skill (name, description, instructions) \
         SELECT {p} || g, 'keyed skill ' || g, 'step ' || g FROM generate_series(1, {n}) AS g",
        p = quote(prefix)
    ));
    exec(
        "INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0) \
         SELECT s.id, s.content_hash, array_fill(0::real, ARRAY[384]), \
                skills.key(ARRAY(SELECT ((abs(hashtext(s.id || ':' || i)) % 2001) - 1000) / 12900.0 \
                                 FROM generate_series(1, 512) AS i)::real[]) \
         FROM skills.skill AS s",
    );
}

/// Serialises the tests that build an index on skills.skill_key. Each inserts keys (a row
/// exclusive lock) and then builds the index (a share lock, which conflicts with the other's
/// row exclusive lock): two at once would wait for each other, a deadlock. The skills are
/// locked too: a test that inserts a skill of the same name would wait for this one while
/// this one waits for its keys. Call before the test writes anything; the locks go with the
/// test's transaction.
pub fn own_skill_keys() {
    exec("LOCK TABLE skills.skill, skills.skill_key IN SHARE ROW EXCLUSIVE MODE");
}

/// `f` with index scans off and sequential scans on (whatever the test set for them), then
/// both as they were.
pub fn seqscan<T>(f: impl FnOnce() -> T) -> T {
    let seq: String = one("SELECT current_setting('enable_seqscan')");
    exec("SET LOCAL enable_indexscan = off");
    exec("SET LOCAL enable_seqscan = on");
    let out = f();
    exec("SET LOCAL enable_indexscan = on");
    exec(&format!(
        "SET LOCAL enable_seqscan = {}",
        if seq == "on" { "on" } else { "off" }
    ));
    out
}

// Encoder, keys, the embedding queue, semantic search, the compressor. These need the model
// (`./x model`); without it they pass after saying SKIP.

pub fn have_model() -> bool {
    let dir: String = one("SELECT current_setting('pg_skills.model_dir')");
    let ok = std::path::Path::new(&dir)
        .join("model.safetensors")
        .exists();
    if !ok {
        eprintln!("SKIP: no encoder model in {dir} (run ./x model)");
    }
    ok
}

pub fn demo_skills() -> Vec<i64> {
    [
        (
            "pytest-fixtures",
            "Write pytest fixtures for database setup shared across tests",
            "Use conftest.py and scope=session.",
        ),
        (
            "kubernetes-probes",
            "Configure liveness and readiness probes for a Kubernetes deployment",
            "Add httpGet probes.",
        ),
        (
            "rust-backtrace",
            "Find where a Rust program panicked with RUST_BACKTRACE",
            "Run with RUST_BACKTRACE=1.",
        ),
        (
            "sql-index-tuning",
            "Speed up slow PostgreSQL queries with the right index",
            "Read EXPLAIN ANALYZE.",
        ),
        (
            "git-bisect",
            "Find the commit that introduced a bug with git bisect",
            "git bisect start.",
        ),
    ]
    .iter()
    .map(|(n, d, i)| insert(n, d, i))
    .collect()
}

// KeyOpt: recorded runs, rounds, the reading. Need the model (task keys).

/// Runs `statement` and checks it fails with `condition` (a PL/pgSQL condition name) and a
/// message LIKE `like`.
pub fn assert_refused(statement: &str, condition: &str, like: &str) {
    exec(&format!(
        "DO $do$ DECLARE m text; BEGIN \
             {statement}; RAISE EXCEPTION 'not refused: %', {}; \
         EXCEPTION WHEN {condition} THEN \
             GET STACKED DIAGNOSTICS m = MESSAGE_TEXT; \
             IF m NOT LIKE {} THEN RAISE EXCEPTION 'unexpected message: %', m; END IF; \
         END $do$",
        quote(statement),
        quote(like)
    ));
}

pub fn ids_of(rows: &[(i64, f64)]) -> Vec<i64> {
    rows.iter().map(|r| r.0).collect()
}

/// 24 runs in which git-bisect (ids[4]) passes on "tests fail after a merge" tasks and the
/// other skills fail; 4 source questions.
pub fn record_bisect_runs(ids: &[i64]) {
    for i in 0..24 {
        let arms: Vec<String> = ids
            .iter()
            .map(|id| format!("{{\"skill_id\": {id}, \"passed\": {}}}", *id == ids[4]))
            .collect();
        exec(&format!(
            "SELECT skills.record_run('my tests started failing after merging branch {i}', \
             '[{}]', executor => 'agent-a', source_group => 'merge-{}')",
            arms.join(", "),
            i % 4
        ));
    }
}

/// (id, score, tokens) of a skills.search call.
pub fn served(sql_args: &str) -> Vec<(i64, f64, i32)> {
    let sql = format!("SELECT id, score, tokens FROM skills.search({sql_args})");
    Spi::connect(|c| {
        c.select(&sql, None, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .map(|r| {
                (
                    r.get::<i64>(1).unwrap().unwrap(),
                    r.get::<f64>(2).unwrap().unwrap(),
                    r.get::<i32>(3).unwrap().unwrap(),
                )
            })
            .collect()
    })
}

/// Six skills about rust of growing length (more tokens further down the ranking is not
/// guaranteed: the test computes what greedy serving must give from the full ranking).
pub fn budget_corpus() -> Vec<i64> {
    without_index();
    (0..12)
        .map(|i| {
            insert(
                &format!("rust-skill-{i}"),
                &format!("rust {}", "rust ".repeat(i % 4)),
                &"borrow checker lifetimes and traits explained at length. "
                    .repeat(1 + 7 * (i % 3)),
            )
        })
        .collect()
}

/// The hint of the error `sql` raises (NULL when it does not raise).
pub fn hint_of(sql: &str) -> String {
    exec(
        "CREATE OR REPLACE FUNCTION pg_temp.hint_of(q text) RETURNS text LANGUAGE plpgsql AS $$ \
         DECLARE h text; BEGIN EXECUTE q; RETURN NULL; \
         EXCEPTION WHEN OTHERS THEN GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT; RETURN h; END $$",
    );
    one(&format!("SELECT pg_temp.hint_of({})", quote(sql)))
}
