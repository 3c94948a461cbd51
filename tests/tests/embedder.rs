//! The embedder background worker against a real server: it keys every skill, re-keys changed
//! ones, reports a missing model and recovers, and across a kill -9 of the postmaster neither
//! loses nor repeats work (each key write and its queue deletion commit together). Backends'
//! encoders share `pg_skills.encoder_threads_total` slots. A failed pass, and a failed report of
//! it, leave the worker up.

use std::time::{Duration, Instant};

use pg_skills_server_tests::{
    insert_random, pairs, seed, setup_extension, skip_without_model, Client, Cluster, NoTls, Rng,
};

const WORKER_CONF: &str = "shared_preload_libraries = 'pg_skills'\n\
                           pg_skills.embedder_naptime = 200\n\
                           pg_skills.embedder_batch_size = 16\n";

/// (queued, failed, done, embedded_total, last_error) of skills.embedder_status.
fn status(client: &mut Client) -> (i64, i64, i64, i64, Option<String>) {
    let r = client
        .query_one(
            "SELECT queued, failed, done, embedded_total, last_error FROM skills.embedder_status",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

/// Waits until `skills.embedder_status.last_error` holds every one of `parts`.
fn wait_for_last_error(admin: &mut Client, timeout: Duration, parts: &[&str]) {
    wait_until(admin, "the error reported", timeout, |c| {
        status(c)
            .4
            .is_some_and(|e| parts.iter().all(|p| e.contains(p)))
    });
}

fn wait_until(
    client: &mut Client,
    what: &str,
    timeout: Duration,
    mut done: impl FnMut(&mut Client) -> bool,
) {
    let deadline = Instant::now() + timeout;
    while !done(client) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            status(client)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The embedder worker's pid (None: not running).
fn worker_pid(client: &mut Client) -> Option<i32> {
    client
        .query_one("SELECT worker_pid FROM skills.embedder_status", &[])
        .unwrap()
        .get(0)
}

fn skills(client: &mut Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM skills.skill", &[])
        .unwrap()
        .get(0)
}

/// Threads named as the encoder's pools name them, in process `pid`.
fn encoder_threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.starts_with("pg_skills enco"))
                .count()
        })
        .unwrap_or(0)
}

/// pg_locks rows of the encoder slots (advisory locks of class "pgsk"): (pid, granted).
fn slot_locks(client: &mut Client) -> Vec<(i32, bool)> {
    pairs(
        client,
        "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885827947",
        &[],
    )
}

#[test]
fn encoder_slots_bound_the_servers_encoder_threads() {
    if skip_without_model() {
        return;
    }
    let cluster = Cluster::start_with(
        "encoder-slots",
        54374,
        "pg_skills.encoder_threads_total = 1\n",
    );
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    let mut rng = Rng(seed("encoder_slots"));
    insert_random(&mut admin, &mut rng, 160, "s");
    let connect = || Client::connect(&cluster.dsn("postgres"), NoTls).unwrap();
    let backend =
        |c: &mut Client| -> i32 { c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0) };
    // A drains the queue (several batches, each encoded on its own claim) in one transaction,
    // set to encode on two threads; the server has one slot.
    let (mut a, mut b) = (connect(), connect());
    let (a_pid, b_pid) = (backend(&mut a), backend(&mut b));
    let drain = std::thread::spawn(move || {
        let mut tx = a.transaction().unwrap();
        tx.batch_execute("SET LOCAL pg_skills.encoder_threads = 2")
            .unwrap();
        let keyed: i64 = tx
            .query_one("SELECT skills.embed_pending()", &[])
            .unwrap()
            .get(0);
        let held_after: i64 = tx
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885827947 \
                 AND pid = pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get(0);
        let threads = encoder_threads(a_pid);
        tx.commit().unwrap();
        (keyed, held_after, threads)
    });
    // B encodes query after query meanwhile: it waits whenever A holds the slot.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let queries = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                b.query_one("SELECT skills.embed($1)", &[&format!("query number {n}")])
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    let (mut most_granted, mut saw_b_wait, mut a_held) = (0, false, false);
    while !drain.is_finished() {
        let locks = slot_locks(&mut admin);
        most_granted = most_granted.max(locks.iter().filter(|l| l.1).count());
        saw_b_wait |= locks.contains(&(b_pid, false));
        a_held |= locks.contains(&(a_pid, true));
        std::thread::sleep(Duration::from_millis(10));
    }
    let (keyed, held_after, threads) = drain.join().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let encoded = queries.join().unwrap();
    assert_eq!(keyed, 160);
    assert!(
        a_held,
        "the draining backend held the slot while it encoded"
    );
    assert_eq!(
        most_granted, 1,
        "never more slots granted than the server has"
    );
    assert!(
        saw_b_wait,
        "the other backend waited for the slot ({encoded} queries encoded)"
    );
    assert_eq!(
        held_after, 0,
        "slots are released after each encoding, not at commit"
    );
    assert_eq!(
        threads, 1,
        "one slot: one encoder thread, though encoder_threads is 2"
    );
    assert!(encoded > 0);
    assert!(slot_locks(&mut admin).is_empty());
}

#[test]
fn worker_keys_new_and_changed_skills_and_reports_a_missing_model() {
    if skip_without_model() {
        return;
    }
    let seed = seed("embedder_worker");
    let cluster = Cluster::start_with("embedder", 54370, WORKER_CONF);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    let mut rng = Rng(seed);
    insert_random(&mut admin, &mut rng, 40, "a");
    wait_until(&mut admin, "40 keys", Duration::from_secs(180), |c| {
        let s = status(c);
        s.0 == 0 && s.2 == 40
    });
    let pid = worker_pid(&mut admin);
    assert!(pid.is_some(), "the worker shows in pg_stat_activity");
    // The worker's encoder threads: one per core, then as many as pg_skills.embedder_threads.
    let pid = pid.unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(encoder_threads(pid), cores);
    // One statement each: ALTER SYSTEM refuses the implicit transaction of a batch.
    admin
        .batch_execute("ALTER SYSTEM SET pg_skills.embedder_threads = 1")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until(
        &mut admin,
        "one encoder thread",
        Duration::from_secs(30),
        |_| encoder_threads(pid) == 1,
    );
    admin
        .batch_execute("ALTER SYSTEM RESET pg_skills.embedder_threads")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    // Every key is k0 of the skill's current content with unit norm.
    let bad: i64 = admin
        .query_one(
            "SELECT count(*) FROM skills.skill_key k JOIN skills.skill s ON s.id = k.skill_id \
             WHERE k.content_hash <> s.content_hash OR abs(skills.key_norm(k.k0) - 1) > 1e-3",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(bad, 0);
    // The worker's key equals the one a session computes from the same text.
    let agree: bool = admin
        .query_one(
            "SELECT (k.k0 OPERATOR(skills.<=>) skills.key(skills.compress(skills.embed( \
                 concat_ws(E'\\n', nullif(btrim(s.name), ''), nullif(btrim(s.description), ''), nullif(btrim(s.instructions), '')))))) < 1e-3 \
             FROM skills.skill_key k JOIN skills.skill s ON s.id = k.skill_id ORDER BY s.id LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(agree, "worker and session keys differ");
    // A skill whose content changes is keyed again; one whose category alone changes is not.
    let (id, before): (i64, String) = {
        let r = admin
            .query_one(
                "SELECT skill_id, content_hash FROM skills.skill_key ORDER BY skill_id LIMIT 1",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    admin
        .execute("UPDATE skills.skill SET instructions = instructions || ' kubernetes rollout' WHERE id = $1", &[&id])
        .unwrap();
    admin
        .execute(
            "UPDATE skills.skill SET category = 'testing' WHERE id = $1",
            &[&(id + 1)],
        )
        .unwrap();
    wait_until(
        &mut admin,
        "the changed skill re-keyed",
        Duration::from_secs(60),
        |c| {
            let now: String = c
                .query_one(
                    "SELECT content_hash FROM skills.skill_key WHERE skill_id = $1",
                    &[&id],
                )
                .unwrap()
                .get(0);
            now != before && status(c).0 == 0
        },
    );
    assert_eq!(
        status(&mut admin).3,
        41,
        "40 keys and one re-key, nothing twice"
    );
    // Semantic search answers from the keys.
    let n: i64 = admin
        .query_one(
            "SELECT count(*) FROM skills.search('deploy a service', k => 5, method => 'semantic')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 5);
    // skills.embed_pending() as the first statement of a transaction (no xid yet: pgrx runs
    // SPI read-only until one exists, and the queue is read FOR UPDATE).
    let drained: i64 = admin
        .query_one("SELECT skills.embed_pending()", &[])
        .unwrap()
        .get(0);
    assert_eq!(drained, 0, "the worker drained the queue already");
    // With the queue drained, the worker built the skill graph from the new keys.
    wait_until(
        &mut admin,
        "the skill graph built after the drain",
        Duration::from_secs(60),
        |c| {
            c.query_one(
                "SELECT g.built_at >= (SELECT max(embedded_at) FROM skills.skill_key) FROM skills.graph_state AS g",
                &[],
            )
            .unwrap()
            .get::<_, Option<bool>>(0)
                == Some(true)
        },
    );

    // A missing model is reported, not fatal; fixing the setting resumes the work.
    admin
        .batch_execute("ALTER SYSTEM SET pg_skills.model_dir = '/nonexistent/model'")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    insert_random(&mut admin, &mut rng, 3, "b");
    wait_for_last_error(
        &mut admin,
        Duration::from_secs(30),
        &["/nonexistent/model", "missing"],
    );
    assert_eq!(
        status(&mut admin).0,
        3,
        "the queue keeps its rows while the model is missing"
    );
    admin
        .batch_execute("ALTER SYSTEM RESET pg_skills.model_dir")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until(
        &mut admin,
        "the queue drained after the fix",
        Duration::from_secs(60),
        |c| status(c).0 == 0,
    );
    assert_eq!(status(&mut admin).2, skills(&mut admin));
}

#[test]
fn a_crash_mid_queue_loses_and_repeats_nothing() {
    if skip_without_model() {
        return;
    }
    let seed = seed("embedder_crash");
    let cluster = Cluster::start_with("embedder-crash", 54371, WORKER_CONF);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    let mut rng = Rng(seed);
    insert_random(&mut admin, &mut rng, 300, "c");
    // Crash once the worker is part-way through.
    wait_until(&mut admin, "some keys", Duration::from_secs(120), |c| {
        status(c).2 >= 16
    });
    let before_crash = status(&mut admin);
    assert!(
        before_crash.0 > 0,
        "seed {seed}: the worker finished before the crash: {before_crash:?}"
    );
    drop(admin);
    cluster.crash_and_restart();
    let mut admin = cluster.client();
    wait_until(
        &mut admin,
        "every key after the crash",
        Duration::from_secs(300),
        |c| status(c).0 == 0,
    );
    let (queued, failed, done, embedded_total, _) = status(&mut admin);
    assert_eq!((queued, failed, done), (0, 0, 300));
    assert_eq!(
        embedded_total, 300,
        "seed {seed}: each skill keyed exactly once across the crash"
    );
}

/// A server with the worker running, the pid it runs under, and no key that can be written: a
/// trigger on skills.skill_key raises disk_full ('no room for keys today'), so every pass fails.
fn worker_that_cannot_write_keys(name: &str, port: u16) -> (Cluster, Client, Option<i32>) {
    let cluster = Cluster::start_with(name, port, WORKER_CONF);
    let mut admin = cluster.client();
    setup_extension(&mut admin);
    wait_until(&mut admin, "the worker", Duration::from_secs(60), |c| {
        worker_pid(c).is_some()
    });
    let pid = worker_pid(&mut admin);
    admin
        .batch_execute(
            "CREATE FUNCTION public.no_room() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'no room for keys today' USING ERRCODE = 'disk_full'; END $$; \
             CREATE TRIGGER no_room BEFORE INSERT ON skills.skill_key \
                 FOR EACH ROW EXECUTE FUNCTION public.no_room();",
        )
        .unwrap();
    (cluster, admin, pid)
}

/// Drops the trigger of [`worker_that_cannot_write_keys`]; the worker, still `pid`, then keys the
/// 3 skills queued.
fn keys_once_there_is_room(admin: &mut Client, pid: Option<i32>) {
    admin
        .batch_execute("DROP TRIGGER no_room ON skills.skill_key")
        .unwrap();
    wait_until(admin, "3 keys", Duration::from_secs(120), |c| {
        let s = status(c);
        s.0 == 0 && s.2 == 3
    });
    assert_eq!(worker_pid(admin), pid);
}

/// A pass that fails with an ERROR about the server's state (here a trigger on
/// skills.skill_key raising disk_full) is rolled back and shown in last_error, the skills stay
/// queued, and the worker stays up with its model loaded; once the cause is gone it keys them.
/// Before, the ERROR ended the worker, which the postmaster started again every 10 s.
#[test]
fn a_failing_pass_keeps_the_worker_up_and_the_skills_queued() {
    if skip_without_model() {
        return;
    }
    let (_cluster, mut admin, pid) = worker_that_cannot_write_keys("embedder-failing", 54374);
    let mut rng = Rng(seed("embedder_failing_pass"));
    insert_random(&mut admin, &mut rng, 3, "f");
    wait_for_last_error(
        &mut admin,
        Duration::from_secs(120),
        &["no room for keys today"],
    );
    // Long enough for a worker that ended to be back with a new pid.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(worker_pid(&mut admin), pid, "the worker stayed up");
    let (queued, failed, done, _, _) = status(&mut admin);
    assert_eq!((queued, failed, done), (3, 0, 0), "the skills stay queued");
    keys_once_there_is_room(&mut admin, pid);
}

#[test]
fn an_error_report_that_fails_keeps_the_worker_up() {
    if skip_without_model() {
        return;
    }
    let (_cluster, mut admin, pid) = worker_that_cannot_write_keys("embedder-report", 54375);
    // Every pass fails, and so does the report of it. The sequence counts the reports tried:
    // it is not rolled back with them.
    admin
        .batch_execute(
            "CREATE SEQUENCE public.reports_tried; \
             CREATE FUNCTION public.no_report() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM nextval('public.reports_tried'); \
                   RAISE EXCEPTION 'no report today' USING ERRCODE = 'disk_full'; END $$; \
             CREATE TRIGGER no_report BEFORE UPDATE ON skills.embedder_progress \
                 FOR EACH ROW EXECUTE FUNCTION public.no_report();",
        )
        .unwrap();
    let mut rng = Rng(seed("embedder_failing_report"));
    insert_random(&mut admin, &mut rng, 3, "r");
    let reports = |c: &mut Client| -> i64 {
        c.query_one(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.reports_tried",
            &[],
        )
        .unwrap()
        .get(0)
    };
    // Two failed reports: the worker went on after the first.
    wait_until(
        &mut admin,
        "two failed reports",
        Duration::from_secs(120),
        |c| reports(c) >= 2,
    );
    // Long enough for a worker that ended to be back with a new pid.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(worker_pid(&mut admin), pid, "the worker stayed up");
    assert!(reports(&mut admin) >= 3, "it kept trying to report");
    admin
        .batch_execute("DROP TRIGGER no_report ON skills.embedder_progress")
        .unwrap();
    wait_for_last_error(
        &mut admin,
        Duration::from_secs(60),
        &["no room for keys today"],
    );
    keys_once_there_is_room(&mut admin, pid);
}
