//! KeyOpt against a real server: the fitter worker fits on its schedule and publishes a round
//! that `skills.search(..., method => 'keyopt')` then reads; the experience tables and rounds
//! survive pg_dump / pg_restore and rank the same afterwards.

use std::time::{Duration, Instant};

use pg_skills_server_tests::{
    dump_and_restore, pairs, setup_extension, skip_without_model, Client, Cluster,
};

const CONF: &str = "shared_preload_libraries = 'pg_skills'\n\
                    pg_skills.embedder_naptime = 200\n\
                    pg_skills.fit_interval = 1\n";

fn wait_for(client: &mut Client, what: &str, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let done: bool = client.query_one(sql, &[]).unwrap().get(0);
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits for the worker's scheduled round on the keys of compressor `version`.
fn wait_for_round_on(client: &mut Client, version: i32) {
    wait_for(
        client,
        &format!("a scheduled round on compressor {version}'s keys"),
        &format!(
            "SELECT EXISTS (SELECT FROM skills.keyopt_round WHERE active AND trigger = 'schedule' \
                            AND (report ->> 'compressor_version')::integer = {version})"
        ),
    );
}

fn keyopt(client: &mut Client, query: &str) -> Vec<(String, f64)> {
    pairs(
        client,
        "SELECT s.name, r.score FROM skills.search($1, k => 3, method => 'keyopt') AS r \
         JOIN skills.skill AS s USING (id)",
        &[&query],
    )
}

/// Records a run of `task` in which git-bisect passed and every other skill failed.
fn record_bisect_run(client: &mut Client, task: &str, source_group: &str) {
    client
        .execute(
            "SELECT skills.record_run($1, \
                 (SELECT jsonb_agg(jsonb_build_object('skill_id', id, 'passed', name = 'git-bisect')) \
                  FROM skills.skill), \
                 executor => 'agent', source_group => $2)",
            &[&task, &source_group],
        )
        .unwrap();
}

const SKILLS: &[(&str, &str)] = &[
    (
        "pytest-fixtures",
        "Share database setup between pytest tests with fixtures",
    ),
    (
        "kubernetes-probes",
        "Configure liveness and readiness probes for a deployment",
    ),
    (
        "rust-backtrace",
        "Find where a Rust program panicked with RUST_BACKTRACE",
    ),
    (
        "sql-index-tuning",
        "Speed up slow PostgreSQL queries with the right index",
    ),
    (
        "git-bisect",
        "Find the commit that introduced a bug with git bisect",
    ),
];

/// A server with the workers running, the extension, SKILLS keyed and the fitter up.
fn cluster_with_skills(name: &str, port: u16) -> (Cluster, Client) {
    let cluster = Cluster::start_with(name, port, CONF);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    for (name, description) in SKILLS {
        admin
            .execute(
                "INSERT INTO skills.skill (name, description, instructions) VALUES ($1, $2, '')",
                &[name, description],
            )
            .unwrap();
    }
    wait_for(
        &mut admin,
        "keys",
        "SELECT queued = 0 AND done = 5 FROM skills.embedder_status",
    );
    wait_for(
        &mut admin,
        "the fitter in pg_stat_activity",
        "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'pg_skills fitter')",
    );
    (cluster, admin)
}

#[test]
fn the_fitter_worker_publishes_rounds_that_search_reads_and_dump_restore_keeps_them() {
    if skip_without_model() {
        return;
    }
    let (cluster, mut admin) = cluster_with_skills("fitter", 54372);
    let query = "my tests fail since I merged a branch";
    let before = keyopt(&mut admin, query);
    assert_ne!(before[0].0, "git-bisect", "{before:?}");
    // Runs where git-bisect passed and every other skill failed.
    for i in 0..16 {
        record_bisect_run(
            &mut admin,
            &format!("my tests started failing after merging branch {i}"),
            &format!("merge-{}", i % 4),
        );
    }
    wait_for(
        &mut admin,
        "a scheduled round",
        "SELECT EXISTS (SELECT FROM skills.keyopt_round WHERE active AND trigger = 'schedule' \
                        AND max_event_id = (SELECT max(id) FROM skills.event))",
    );
    let after = keyopt(&mut admin, query);
    assert_eq!(after[0].0, "git-bisect", "{after:?}");
    // Nothing new recorded: the worker does not fit again.
    let rounds: i64 = admin
        .query_one("SELECT count(*) FROM skills.keyopt_round", &[])
        .unwrap()
        .get(0);
    std::thread::sleep(Duration::from_secs(3));
    let again: i64 = admin
        .query_one("SELECT count(*) FROM skills.keyopt_round", &[])
        .unwrap()
        .get(0);
    assert_eq!(rounds, again, "no new runs, no new round");

    // pg_dump / pg_restore keep the runs, the rounds and the ranking.
    dump_and_restore(&cluster, "postgres", "restored");
    let mut restored = cluster.client_db("restored");
    for table in [
        "skills.event",
        "skills.event_arm",
        "skills.keyopt_round",
        "skills.keyopt_skill",
    ] {
        let count = |c: &mut Client| -> i64 {
            c.query_one(&format!("SELECT count(*) FROM {table}"), &[])
                .unwrap()
                .get(0)
        };
        assert_eq!(count(&mut restored), count(&mut admin), "{table}");
    }
    let ranked = keyopt(&mut restored, query);
    assert_eq!(ranked[0].0, "git-bisect", "{ranked:?}");
    for (a, b) in ranked.iter().zip(&after) {
        assert_eq!(a.0, b.0);
        assert!((a.1 - b.1).abs() < 1e-5, "{ranked:?} vs {after:?}");
    }

    // A compressor trained on the recorded runs rewrites the keys; with no new run the worker
    // still fits again, on the new keys.
    let version: i32 = admin
        .query_one(
            "SELECT skills.train_compressor(hidden => 16, epochs => 3)",
            &[],
        )
        .unwrap()
        .get(0);
    wait_for_round_on(&mut admin, version);
    let refitted = keyopt(&mut admin, query);
    assert_eq!(refitted[0].0, "git-bisect", "{refitted:?}");

    // With pg_skills.compressor_retrain_runs the worker trains the next compressor itself once
    // that many runs with a passing skill were recorded after the last one trained on the
    // runs, and not before.
    for statement in [
        "ALTER SYSTEM SET pg_skills.compressor_retrain_runs = 6",
        "SELECT pg_reload_conf()",
    ] {
        admin.execute(statement, &[]).unwrap();
    }
    let record = |admin: &mut Client, from: usize, to: usize| {
        for i in from..to {
            record_bisect_run(
                admin,
                &format!("a test broke after the merge of branch {i}"),
                &format!("broke-{}", i % 3),
            );
        }
    };
    let newest = |admin: &mut Client| -> i32 {
        admin
            .query_one("SELECT max(version) FROM skills.compressor", &[])
            .unwrap()
            .get(0)
    };
    // The newest compressor once the worker has had a look (it looks every 5 s).
    let newest_after_a_look = |admin: &mut Client| -> i32 {
        std::thread::sleep(Duration::from_secs(7));
        newest(admin)
    };
    record(&mut admin, 0, 5);
    assert_eq!(
        newest_after_a_look(&mut admin),
        version,
        "5 of 6 runs: no retraining yet"
    );
    record(&mut admin, 5, 6);
    wait_for(
        &mut admin,
        "a compressor the worker trained on the runs",
        &format!(
            "SELECT EXISTS (SELECT FROM skills.compressor WHERE active AND version > {version} \
                            AND training ->> 'source' = 'runs' \
                            AND (training ->> 'through_event')::bigint = (SELECT max(id) FROM skills.event))"
        ),
    );
    let retrained = newest(&mut admin);
    let stale_keys: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM skills.skill_key WHERE compressor_version <> {retrained}"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(stale_keys, 0, "the new compressor rewrote every key");
    wait_for_round_on(&mut admin, retrained);
    let served = keyopt(&mut admin, query);
    assert_eq!(served[0].0, "git-bisect", "{served:?}");

    // A compressor trained from a pairs query is the administrator's: the worker keeps it.
    let chosen: i32 = admin
        .query_one(
            "SELECT skills.train_compressor('SELECT t, s.id FROM skills.skill AS s, unnest(ARRAY[ \
                 ''a merge broke my tests'', ''tests fail since the merge'', \
                 ''which commit broke the build'', ''the build broke after a merge'']) AS t \
                 WHERE s.name = ''git-bisect''', hidden => 16, epochs => 3)",
            &[],
        )
        .unwrap()
        .get(0);
    record(&mut admin, 6, 14);
    assert_eq!(
        newest_after_a_look(&mut admin),
        chosen,
        "the worker left the pairs-query compressor"
    );
}

/// The fitter worker's backend pid.
fn fitter_pid(client: &mut Client) -> i32 {
    client
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_skills fitter'",
            &[],
        )
        .unwrap()
        .get(0)
}

/// A scheduled fit that fails (here: the relevance function setting names no function) is
/// rolled back and logged, and the worker stays up and waits longer after each failure in a
/// row; once the cause is gone it fits. Before, the ERROR ended the worker, and the postmaster
/// started it again 10 s later to fail the same way.
#[test]
fn a_failing_fit_keeps_the_worker_up_and_backs_off() {
    if skip_without_model() {
        return;
    }
    let (cluster, mut admin) = cluster_with_skills("fitter-failing", 54373);
    let pid = fitter_pid(&mut admin);
    for statement in [
        "ALTER SYSTEM SET pg_skills.relevance_function = 'public.no_such_relevance'",
        "SELECT pg_reload_conf()",
    ] {
        admin.execute(statement, &[]).unwrap();
    }
    for i in 0..4 {
        record_bisect_run(
            &mut admin,
            &format!("my tests started failing after merging branch {i}"),
            "merge",
        );
    }
    // Long enough for a worker that ended at its first failure to be back with a new pid.
    std::thread::sleep(Duration::from_secs(16));
    assert_eq!(fitter_pid(&mut admin), pid, "the worker stayed up");
    let rounds: i64 = admin
        .query_one(
            "SELECT count(*) FROM skills.keyopt_round WHERE trigger = 'schedule'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rounds, 0, "no round came out of a failing fit");
    let log = std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("pg_skills fitter") && l.contains("no_such_relevance"))
        .collect();
    assert!(
        failures.iter().any(|l| l.contains("tries again in 1 s"))
            && failures.iter().any(|l| l.contains("tries again in 2 s")),
        "the failures are logged with a growing wait: {failures:?}"
    );
    // 1 + 2 + 4 + 8 s of waits fit in 16 s: no more than five tries, where looking every 5 s
    // with no wait would not fail less often, and restarting would have left another pid.
    assert!(failures.len() <= 5, "{failures:?}");
    for statement in [
        "ALTER SYSTEM RESET pg_skills.relevance_function",
        "SELECT pg_reload_conf()",
    ] {
        admin.execute(statement, &[]).unwrap();
    }
    wait_for(
        &mut admin,
        "a scheduled round once the setting is fixed",
        "SELECT EXISTS (SELECT FROM skills.keyopt_round WHERE active AND trigger = 'schedule' \
                        AND max_event_id = (SELECT max(id) FROM skills.event))",
    );
    assert_eq!(fitter_pid(&mut admin), pid);
}
