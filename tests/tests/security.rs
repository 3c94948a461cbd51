//! The security suite: attacks by roles that can connect, against a real server.
//!
//! Every test is one class of attack. It runs the attack as an unprivileged role (a plain
//! reader, a writer, the database's owner who is not a superuser) and asserts that the attack
//! fails with a clear SQLSTATE and that nothing was gained: no role became superuser, and no
//! attacker function ran (each one writes a row into `public.pwned` and raises a NOTICE).
//!
//! Roles in every cluster: `mallory` owns database `shared` (not a superuser); `alice` has
//! skills_reader, `bob` skills_reporter, `carol` skills_loader, `dave` skills_admin, `eve`
//! nothing. Ports 54391-54396.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg_skills_server_tests::{model_dir, skip, skip_without_model, Client, Cluster};
use postgres::NoTls;

/// A client and the NOTICEs its server sent.
struct Session {
    client: Client,
    notices: Arc<Mutex<Vec<String>>>,
    last_error: String,
}

impl Session {
    fn connect(cluster: &Cluster, user: &str, db: &str) -> Session {
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        let mut config: postgres::Config = format!(
            "host=127.0.0.1 port={} user={user} dbname={db}",
            cluster.port
        )
        .parse()
        .unwrap();
        config.notice_callback(move |n| sink.lock().unwrap().push(n.message().to_string()));
        let client = config
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
        Session {
            client,
            notices,
            last_error: String::new(),
        }
    }

    /// A superuser session that walks into no trap: for setting up data and for looking at the
    /// results (the attacked sessions keep the database's search_path).
    fn connect_safe(cluster: &Cluster, db: &str) -> Session {
        let mut s = Session::connect(cluster, "postgres", db);
        s.exec("SET search_path = pg_catalog");
        s
    }

    fn exec(&mut self, sql: &str) {
        self.client
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
    }

    /// The SQLSTATE `sql` fails with (panics when it succeeds).
    fn refused(&mut self, sql: &str) -> String {
        match self.client.batch_execute(sql) {
            Ok(()) => panic!("not refused: {sql}"),
            Err(e) => {
                self.last_error = describe(&e);
                e.code()
                    .map(|c| c.code().to_string())
                    .unwrap_or_else(|| panic!("{sql}: no SQLSTATE: {e}"))
            }
        }
    }

    fn assert_refused(&mut self, sql: &str, sqlstate: &str) {
        let got = self.refused(sql);
        assert_eq!(got, sqlstate, "{sql}: {}", self.last_error);
    }

    fn count(&mut self, sql: &str) -> i64 {
        self.client
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)))
            .get(0)
    }

    fn attacker_notices(&self) -> Vec<String> {
        self.notices
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n.contains("attacker code ran"))
            .cloned()
            .collect()
    }
}

/// An error with the server's message and SQLSTATE (postgres' Display says only "db error").
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{} {} (hint: {:?})",
            db.code().code(),
            db.message(),
            db.hint()
        ),
        None => e.to_string(),
    }
}

const ROLES: &[(&str, &str)] = &[
    ("alice", "skills_reader"),
    ("bob", "skills_reporter"),
    ("carol", "skills_loader"),
    ("dave", "skills_admin"),
];

/// A cluster with database `shared` owned by mallory, the extension installed there by the
/// superuser, and the test roles.
fn shared_cluster(name: &str, port: u16, conf: &str) -> Cluster {
    let cluster = Cluster::start_with(name, port, conf);
    let mut admin = Session::connect(&cluster, "postgres", "postgres");
    admin.exec(
        "CREATE ROLE mallory LOGIN; CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; \
         CREATE ROLE carol LOGIN; CREATE ROLE dave LOGIN; CREATE ROLE eve LOGIN",
    );
    admin.exec("CREATE DATABASE shared OWNER mallory");
    cluster
}

fn install_extension(cluster: &Cluster) {
    let mut root = Session::connect(cluster, "postgres", "shared");
    root.exec("CREATE EXTENSION pg_skills");
    for (user, role) in ROLES {
        root.exec(&format!("GRANT {role} TO {user}"));
    }
}

/// Functions and operators with the exact argument types of built-ins the extension's SQL
/// uses, in a schema mallory puts first on the database's search_path, and two in `public`
/// that win on the default path (exact types beat pg_catalog's polymorphic or casting
/// candidates). Each runs `evil.trap`, which records who ran it and tries to make mallory a
/// superuser.
fn plant_traps(cluster: &Cluster) {
    let mut mallory = Session::connect(cluster, "mallory", "shared");
    mallory.exec(
        "CREATE TABLE public.pwned (who text, session_user_name text, what text); \
         GRANT INSERT, SELECT ON public.pwned TO PUBLIC; \
         CREATE SCHEMA evil; GRANT USAGE ON SCHEMA evil TO PUBLIC; \
         CREATE FUNCTION evil.trap(what text) RETURNS void LANGUAGE plpgsql \
             SET search_path = pg_catalog AS $$ \
         BEGIN \
             INSERT INTO public.pwned VALUES (current_user, session_user, what); \
             BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END; \
             RAISE NOTICE 'attacker code ran as %: %', current_user, what; \
         END $$;",
    );
    // (schema, name, argument types, result type, the built-in it stands in for)
    let functions: &[(&str, &str, &str, &str, &str)] = &[
        (
            "public",
            "array_length",
            "regclass[], integer",
            "integer",
            "pg_catalog.array_length($1, $2)",
        ),
        ("evil", "now", "", "timestamptz", "pg_catalog.now()"),
        ("evil", "btrim", "text", "text", "pg_catalog.btrim($1)"),
        (
            "evil",
            "octet_length",
            "text",
            "integer",
            "pg_catalog.octet_length($1)",
        ),
        (
            "evil",
            "cardinality",
            "bigint[]",
            "integer",
            "pg_catalog.cardinality($1)",
        ),
        (
            "evil",
            "jsonb_typeof",
            "jsonb",
            "text",
            "pg_catalog.jsonb_typeof($1)",
        ),
        (
            "evil",
            "to_regprocedure",
            "text",
            "regprocedure",
            "pg_catalog.to_regprocedure($1)",
        ),
        ("evil", "format", "text", "text", "pg_catalog.format($1)"),
        (
            "evil",
            "left",
            "text, integer",
            "text",
            "pg_catalog.left($1, $2)",
        ),
    ];
    for (schema, name, args, result, builtin) in functions {
        mallory.exec(&format!(
            "CREATE FUNCTION {schema}.{name}({args}) RETURNS {result} LANGUAGE plpgsql \
                 SET search_path = pg_catalog AS $$ \
             BEGIN PERFORM evil.trap('{name}({args})'); RETURN {builtin}; END $$"
        ));
    }
    // (schema, operator, left, right, result, function name)
    let operators: &[(&str, &str, &str, &str, &str, &str)] = &[
        (
            "public",
            "*",
            "numeric",
            "double precision",
            "double precision",
            "mul_numeric_float8",
        ),
        ("evil", "=", "bigint", "bigint", "boolean", "eq_int8"),
        ("evil", "=", "text", "text", "boolean", "eq_text"),
        ("evil", ">", "bigint", "bigint", "boolean", "gt_int8"),
        (
            "evil",
            ">",
            "timestamptz",
            "timestamptz",
            "boolean",
            "gt_timestamptz",
        ),
        (
            "evil",
            "<=",
            "double precision",
            "double precision",
            "boolean",
            "le_float8",
        ),
        ("evil", "||", "text", "text", "text", "concat_text"),
        (
            "evil",
            "-",
            "timestamptz",
            "interval",
            "timestamptz",
            "minus_interval",
        ),
        ("evil", "->>", "jsonb", "text", "text", "jsonb_field"),
    ];
    for (schema, op, left, right, result, f) in operators {
        let builtin = format!("$1 OPERATOR(pg_catalog.{op}) $2");
        let builtin = if *op == "*" {
            "$1::double precision OPERATOR(pg_catalog.*) $2".to_string()
        } else {
            builtin
        };
        mallory.exec(&format!(
            "CREATE FUNCTION {schema}.{f}({left}, {right}) RETURNS {result} LANGUAGE plpgsql \
                 SET search_path = pg_catalog AS $$ \
             BEGIN PERFORM evil.trap('{op}({left}, {right})'); RETURN {builtin}; END $$; \
             CREATE OPERATOR {schema}.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = {schema}.{f})"
        ));
    }
    // The owner's right: the path of every new session in the database, workers included.
    mallory.exec("ALTER DATABASE shared SET search_path = evil, pg_catalog, public");
}

fn assert_nothing_gained(cluster: &Cluster, sessions: &[&Session]) {
    let mut root = Session::connect_safe(cluster, "shared");
    let ran: Vec<String> = root
        .client
        .query("SELECT who || ' ran ' || what FROM public.pwned", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(ran.is_empty(), "attacker functions ran: {ran:?}");
    for s in sessions {
        assert!(
            s.attacker_notices().is_empty(),
            "{:?}",
            s.attacker_notices()
        );
    }
    let supers = root
        .count("SELECT count(*) FROM pg_catalog.pg_roles WHERE rolsuper AND rolname <> 'postgres'");
    assert_eq!(supers, 0, "a role became superuser");
    let log = std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
    assert!(
        !log.contains("attacker code ran"),
        "attacker code ran in a server process (see {})",
        cluster.dir.display()
    );
}

fn wait_until(session: &mut Session, what: &str, sql: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while session.count(sql) == 0 {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Inserts `n` skills with keys made of random numbers (no encoder needed).
fn seed_skills_with_keys(root: &mut Session, n: i64) {
    root.exec(&format!(
        "INSERT INTO skills.skill (name, description, instructions) \
         SELECT 'skill-' || g, 'describes task ' || g, 'step one; step two for ' || g \
         FROM generate_series(1, {n}) AS g; \
         INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0) \
         SELECT s.id, s.content_hash, \
                array(SELECT (random() - 0.5)::real FROM generate_series(1, 384) WHERE s.id > 0), \
                skills.key(array(SELECT (random() - 0.5)::real FROM generate_series(1, 512) WHERE s.id > 0)) \
         FROM skills.skill AS s ON CONFLICT DO NOTHING; \
         DELETE FROM skills.embed_queue;"
    ));
}

/// `events` recorded runs with random task keys, each over `arms` random skills (of the first
/// 400).
fn seed_events(root: &mut Session, events: i64, arms: i64) {
    root.exec(&format!(
        "INSERT INTO skills.event (task, task_key, source_group) \
         SELECT 'task ' || g, \
                skills.key(array(SELECT (random() - 0.5)::real FROM generate_series(1, 512) WHERE g > 0)), \
                'group ' || (g % 50) \
         FROM generate_series(1, {events}) AS g; \
         INSERT INTO skills.event_arm (event_id, skill_id, skill_version, content_hash, passed) \
         SELECT e.id, s.id, s.version, s.content_hash, random() < 0.3 \
         FROM skills.event AS e \
         CROSS JOIN LATERAL (SELECT * FROM skills.skill AS s \
                             WHERE e.id > 0 AND s.id < (SELECT min(id) + 400 FROM skills.skill) \
                             ORDER BY random() LIMIT {arms}) AS s \
         WHERE NOT EXISTS (SELECT FROM skills.event_arm AS a WHERE a.event_id = e.id);"
    ));
}

/// Shadowed functions and operators, in `public` and in a schema the database owner puts
/// first on the search_path, before the extension is installed and before searches, loads,
/// fits and the workers' rounds: none of them runs, for any role, the superuser included.
#[test]
fn shadowed_functions_and_operators_never_run() {
    if skip() {
        return;
    }
    let conf = "shared_preload_libraries = 'pg_skills'\n\
                pg_skills.embedder_database = 'shared'\n\
                pg_skills.embedder_naptime = 200\n\
                pg_skills.fit_interval = 1\n";
    let cluster = shared_cluster("sec-shadow", 54391, conf);
    plant_traps(&cluster);
    install_extension(&cluster);

    // The traps work: a function without a fixed search_path walks into them.
    let mut setup = Session::connect_safe(&cluster, "shared");
    let mut root = Session::connect(&cluster, "postgres", "shared");
    root.exec(
        "CREATE FUNCTION public.unhardened(a bigint, b bigint) RETURNS boolean \
         LANGUAGE plpgsql AS $$ BEGIN RETURN a = b; END $$",
    );
    let mut alice = Session::connect(&cluster, "alice", "shared");
    alice.exec("SELECT public.unhardened(1, 1)");
    assert_eq!(setup.count("SELECT count(*) FROM public.pwned"), 1);
    assert_eq!(alice.attacker_notices().len(), 1);
    setup.exec("DELETE FROM public.pwned; DROP FUNCTION public.unhardened(bigint, bigint)");
    alice.notices.lock().unwrap().clear();

    // Loads, as the loader role: the loader binary when built, and plain SQL.
    let mut carol = Session::connect(&cluster, "carol", "shared");
    carol.exec(
        "INSERT INTO skills.skill (name, description, instructions) VALUES \
             ('pytest-fixtures', 'Share setup between pytest tests', 'Use conftest.py fixtures.'), \
             ('git-bisect', 'Find the commit that broke the build', 'git bisect start; good; bad.'); \
         UPDATE skills.skill SET instructions = pg_catalog.concat(instructions, ' Then reset.') \
             WHERE name OPERATOR(pg_catalog.=) 'git-bisect'",
    );
    if let Some(loader) = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| std::path::PathBuf::from(d).join("debug/skills-load"))
        .filter(|p| p.exists())
    {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus/demo");
        let out = std::process::Command::new(loader)
            .arg("--tree")
            .arg(&corpus)
            .arg("--dsn")
            .arg(format!(
                "host=127.0.0.1 port={} user=carol dbname=shared",
                cluster.port
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "skills-load as carol: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("note: skills-load is not built; the load attack runs through SQL only");
    }

    // Searches, as a reader and as the superuser (whose session has mallory's path too).
    let mut methods = vec!["bm25"];
    if model_dir().is_some() {
        setup.exec("SELECT skills.embed_pending()");
        methods.extend(["semantic", "hybrid", "graph", "skilltrace", "keyopt"]);
    }
    for who in [&mut alice, &mut root] {
        for method in &methods {
            who.exec(&format!(
                "SELECT * FROM skills.search('which commit broke the build', k => 3, \
                 token_budget => 5000, categories => '{{debugging,testing}}', method => '{method}'); \
                 SELECT * FROM skills.search('which commit broke the build', k => 3, \
                 method => '{method}', complements => 2); \
                 SELECT skills.render_context('share pytest setup', k => 2, method => '{method}')"
            ));
        }
        who.exec("SELECT * FROM skills.bm25_index_stats('skills.skill_bm25'::regclass)");
        who.exec("SELECT skills.search_methods()");
        if model_dir().is_some() {
            who.exec(
                "SELECT * FROM skills.keyopt_rank_batch(ARRAY['which commit broke the build', \
                 'share pytest setup'], 3, '{debugging,testing}')",
            );
        }
    }
    // Batch scoring asked to use a GPU (none here: the device check, a NOTICE, the CPU),
    // under the same path; only a superuser may choose the device.
    if model_dir().is_some() {
        root.exec(
            "SET pg_skills.device = 'cuda'; \
             SELECT * FROM skills.keyopt_rank_batch(ARRAY['which commit broke the build'], 3); \
             RESET pg_skills.device",
        );
    }

    // Reports, as the reporter (needs the encoder for the task key). The attacked roles' own
    // statements name pg_catalog's operators: their own SQL is theirs to protect.
    let mut bob = Session::connect(&cluster, "bob", "shared");
    if model_dir().is_some() {
        bob.exec(
            "SELECT skills.record_run('the nightly build broke', \
                 jsonb_build_array(jsonb_build_object('skill_id', \
                     (SELECT id FROM skills.skill WHERE name OPERATOR(pg_catalog.=) 'git-bisect'), \
                     'passed', true)), executor => 'agent', source_group => 'g1')",
        );
    }

    // Administration: fit, graph, rounds, as the admin role and as the superuser.
    let mut dave = Session::connect(&cluster, "dave", "shared");
    for who in [&mut dave, &mut root] {
        who.exec(
            "SELECT skills.fit(); SELECT * FROM skills.build_graph(semantic_threshold => 0.5); \
             SELECT skills.use_round((SELECT max(round) FROM skills.keyopt_round))",
        );
    }

    // The workers' rounds: the fitter fits recorded runs on its schedule; the embedder drains
    // the queue (or notes that it cannot load the model) and rebuilds the graph.
    seed_skills_with_keys(&mut setup, 20);
    seed_events(&mut setup, 30, 3);
    let before = setup.count("SELECT coalesce(max(round), 0)::bigint FROM skills.keyopt_round");
    wait_until(
        &mut setup,
        "a round fitted by the fitter worker",
        &format!("SELECT count(*) FROM skills.keyopt_round WHERE round > {before} AND trigger = 'schedule'"),
        Duration::from_secs(60),
    );
    carol.exec(
        "INSERT INTO skills.skill (name, description) VALUES ('new-one', 'queued for a key')",
    );
    wait_until(
        &mut setup,
        "the embedder worker's round",
        "SELECT count(*) FROM skills.embedder_status WHERE queued = 0 OR last_error IS NOT NULL",
        Duration::from_secs(120),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_nothing_gained(&cluster, &[&alice, &bob, &carol, &dave, &root]);

    // The workers run as skills_worker, not as the superuser they connect as: without the
    // right to write rounds, the fitter's round fails with a permission error.
    setup.exec("REVOKE INSERT ON skills.keyopt_round FROM skills_worker");
    seed_events(&mut setup, 5, 3);
    let log = cluster.dir.join("server.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("permission denied for table keyopt_round") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the fitter wrote rounds without the privilege: it does not run as skills_worker"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    setup.exec("GRANT INSERT ON skills.keyopt_round TO skills_worker");
}

/// Settings that bound resources or name code: no role but a superuser can change them, by
/// SET, set_config, ALTER ROLE or ALTER DATABASE (as the database's owner).
#[test]
fn bounds_cannot_be_raised_by_set() {
    if skip() {
        return;
    }
    let cluster = shared_cluster("sec-settings", 54392, "");
    install_extension(&cluster);
    Session::connect_safe(&cluster, "shared").exec("GRANT skills_reader TO mallory");
    // Before the library is loaded in a session, SET only makes a placeholder, which Postgres
    // checks when the library defines the setting: that must not raise the bound either.
    let mut early = Session::connect(&cluster, "carol", "shared");
    let _ = early
        .client
        .batch_execute("SET pg_skills.max_document_size = '100MB'");
    early.assert_refused(
        "INSERT INTO skills.skill (name, instructions) VALUES ('huge', repeat('x', 2 * 1024 * 1024))",
        "54000",
    );
    let mut mallory = Session::connect(&cluster, "mallory", "shared");
    let mut carol = Session::connect(&cluster, "carol", "shared");
    for who in [&mut mallory, &mut carol] {
        who.exec("SELECT skills.max_document_bytes()"); // loads the library

        for (setting, value) in [
            ("pg_skills.max_document_size", "100MB"),
            ("pg_skills.max_query_size", "1MB"),
            ("pg_skills.relevance_function", "public.anything"),
            ("pg_skills.encoder_threads", "64"),
            ("pg_skills.model_dir", "/tmp"),
        ] {
            who.assert_refused(&format!("SET {setting} = '{value}'"), "42501");
            who.assert_refused(
                &format!("SELECT set_config('{setting}', '{value}', false)"),
                "42501",
            );
        }
        for setting in [
            "pg_skills.worker_role",
            "pg_skills.embedder_threads",
            "pg_skills.encoder_threads_total",
            "pg_skills.fit_interval",
        ] {
            who.assert_refused(&format!("SET {setting} = '1'"), "55P02");
        }
    }
    carol.assert_refused(
        "ALTER ROLE carol SET pg_skills.max_document_size = '100MB'",
        "42501",
    );
    mallory.assert_refused(
        "ALTER DATABASE shared SET pg_skills.max_document_size = '100MB'",
        "42501",
    );
    // The bounds hold for them: a document and a query over the limits.
    carol.assert_refused(
        "INSERT INTO skills.skill (name, instructions) VALUES ('huge', repeat('x', 2 * 1024 * 1024))",
        "54000",
    );
    let mut alice = Session::connect(&cluster, "alice", "shared");
    alice.assert_refused(
        "SELECT * FROM skills.search(repeat('long query ', 4000), method => 'bm25')",
        "54000",
    );
    alice.assert_refused(
        "SELECT skills.render_context(repeat('long query ', 4000), method => 'bm25')",
        "54000",
    );
    alice.assert_refused("SELECT skills.query_key(repeat('q', 40000))", "54000");
    // The document functions take any text, but none larger than a document can be.
    for f in [
        "skills.classify_label('n', '', repeat('word ', 25000000))",
        "skills.content_hash('n', '', repeat('word ', 25000000))",
        "skills.token_count('n', '', repeat('word ', 25000000))",
        "skills.prompt_tokens(repeat('word ', 25000000))",
        "skills.tokenize(repeat('word ', 25000000))",
    ] {
        alice.assert_refused(&format!("SELECT {f}"), "54000");
    }
    let supers =
        alice.count("SELECT count(*) FROM pg_roles WHERE rolsuper AND rolname <> 'postgres'");
    assert_eq!(supers, 0);
}

/// Functions that take an index by name or OID read what the index holds (its terms and their
/// frequencies, its keys): only a role that may read the indexed table may call them.
#[test]
fn index_contents_need_select_on_the_table() {
    if skip() {
        return;
    }
    let cluster = shared_cluster("sec-index", 54393, "");
    install_extension(&cluster);
    let mut root = Session::connect(&cluster, "postgres", "shared");
    root.exec(
        "CREATE SCHEMA private; GRANT USAGE ON SCHEMA private TO PUBLIC; \
         CREATE TABLE private.notes (id bigint PRIMARY KEY, doc text[]); \
         INSERT INTO private.notes SELECT g, ARRAY['note ' || g, 'the secret word is swordfish', ''] \
             FROM generate_series(1, 50) AS g; \
         CREATE INDEX notes_bm25 ON private.notes USING bm25 (doc); \
         CREATE TABLE private.vectors (id bigint, k skills.key); \
         INSERT INTO private.vectors SELECT g, skills.key(array(SELECT (random() - 0.5)::real \
             FROM generate_series(1, 512) WHERE g > 0)) FROM generate_series(1, 50) AS g; \
         CREATE INDEX vectors_skeys ON private.vectors USING skeys (k) WITH (lists = 2)",
    );
    let bm25: u32 = root
        .client
        .query_one("SELECT 'private.notes_bm25'::regclass::oid", &[])
        .unwrap()
        .get(0);
    let skeys: u32 = root
        .client
        .query_one("SELECT 'private.vectors_skeys'::regclass::oid", &[])
        .unwrap()
        .get(0);
    let key = "skills.key(array_fill(0.01::real, ARRAY[512]))";
    let attacks = [
        format!("SELECT * FROM skills.bm25_index_stats({bm25}::oid)"),
        format!("SELECT * FROM skills.key_index_stats({skeys}::oid::regclass)"),
        format!("SELECT skills.key_recall({skeys}::oid::regclass, {key}, 5)"),
        format!(
            "SELECT ARRAY['swordfish', '', ''] OPERATOR(skills.<&>) skills.bm25query('swordfish', {bm25}::oid::regclass)"
        ),
        format!(
            "SELECT ARRAY['swordfish', '', ''] OPERATOR(skills.<&>) ROW({bm25}, 'swordfish', NULL)::skills.bm25query"
        ),
        // The statistics a distributed search gathers (document frequencies are contents too).
        format!("SELECT skills.bm25_corpus({bm25}::oid, 'swordfish')"),
        format!("SELECT skills.bm25_global_query('swordfish', {bm25}::oid::regclass)"),
        // The most a document could score: the query terms' document frequencies again.
        format!(
            "SELECT skills.bm25_score_supremum(ROW({bm25}, 'swordfish', NULL)::skills.bm25query)"
        ),
    ];
    let mut alice = Session::connect(&cluster, "alice", "shared");
    for attack in &attacks {
        alice.assert_refused(attack, "42501");
    }
    // The direct top-k reads rows through the index it is given: refused before anything is read.
    let direct = format!("SELECT * FROM skills.bm25_top_k('swordfish', 5, NULL, {bm25}::oid)");
    alice.assert_refused(&direct, "42501");
    // With SELECT on the tables the same calls answer.
    root.exec("GRANT SELECT ON private.notes, private.vectors TO alice");
    for attack in &attacks {
        alice.exec(attack);
    }
    // ... and the direct top-k still reads only skills.skill through its own index.
    alice.assert_refused(&direct, "22023");
    // key_recall's k is bounded (it sizes both searches' candidate lists).
    alice.assert_refused(
        &format!("SELECT skills.key_recall({skeys}::oid::regclass, {key}, 2000000000)"),
        "22023",
    );
}

/// An administrator (not a superuser) who can write the round table plants a function there;
/// searches of that round must not run it: only the function the superuser-level setting
/// names may run.
#[test]
fn a_planted_relevance_function_is_refused() {
    if skip_without_model() {
        return;
    }
    let cluster = shared_cluster("sec-relevance", 54394, "");
    install_extension(&cluster);
    plant_traps(&cluster);
    let mut mallory = Session::connect(&cluster, "mallory", "shared");
    mallory.exec(
        "CREATE FUNCTION public.evil_rank(query text, skill_ids bigint[]) \
         RETURNS TABLE (skill_id bigint, score double precision) LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM evil.trap('evil_rank'); \
               RETURN QUERY SELECT u, 1.0::float8 FROM unnest(skill_ids) AS u; END $$; \
         CREATE FUNCTION public.good_rank(query text, skill_ids bigint[]) \
         RETURNS TABLE (skill_id bigint, score double precision) LANGUAGE sql AS $$ \
             SELECT u, 0.5::float8 FROM unnest(skill_ids) AS u $$",
    );
    let mut carol = Session::connect(&cluster, "carol", "shared");
    carol.exec(
        "INSERT INTO skills.skill (name, description) VALUES \
         ('git-bisect', 'find the commit that broke the build'), ('pytest', 'test fixtures')",
    );
    let mut root = Session::connect_safe(&cluster, "shared");
    root.exec("SELECT skills.embed_pending()");
    let mut dave = Session::connect(&cluster, "dave", "shared");
    dave.exec(
        "INSERT INTO skills.keyopt_round (rho, mu, settings, report, trigger, relevance_function) \
         VALUES (1, array_fill(0::real, ARRAY[512]), '{}', '{}', 'planted', \
                 'public.evil_rank(text,bigint[])'); \
         SELECT skills.use_round((SELECT max(round) FROM skills.keyopt_round))",
    );
    let mut alice = Session::connect(&cluster, "alice", "shared");
    let search = "SELECT * FROM skills.search('which commit broke the build', k => 2)";
    alice.assert_refused(search, "55000");
    root.exec("ALTER SYSTEM SET pg_skills.relevance_function = 'public.good_rank'");
    root.exec("SELECT pg_reload_conf()");
    std::thread::sleep(Duration::from_millis(500));
    let mut alice = Session::connect(&cluster, "alice", "shared");
    alice.assert_refused(search, "55000");
    assert_nothing_gained(&cluster, &[&alice, &dave]);
}

/// What each role may do, and that the rest fails with 42501.
#[test]
fn roles_grant_what_they_say() {
    if skip() {
        return;
    }
    let cluster = shared_cluster("sec-roles", 54395, "");
    install_extension(&cluster);
    let mut eve = Session::connect(&cluster, "eve", "shared");
    let mut alice = Session::connect(&cluster, "alice", "shared");
    let mut bob = Session::connect(&cluster, "bob", "shared");
    let mut carol = Session::connect(&cluster, "carol", "shared");
    let mut dave = Session::connect(&cluster, "dave", "shared");
    let search = "SELECT * FROM skills.search('share pytest setup', k => 3, method => 'bm25')";

    // Anyone else: not even the schema.
    eve.assert_refused(search, "42501");
    eve.assert_refused("SELECT count(*) FROM skills.skill", "42501");

    // The loader loads and edits skills, and nothing administrative.
    carol.exec(
        "INSERT INTO skills.skill (name, description, instructions) VALUES \
         ('pytest-fixtures', 'share setup between pytest tests', 'conftest.py'), \
         ('to-delete', 'temporary', ''); \
         UPDATE skills.skill SET category = 'testing' WHERE name = 'pytest-fixtures'; \
         DELETE FROM skills.skill WHERE name = 'to-delete'",
    );
    for sql in [
        "SELECT skills.fit()",
        "SELECT * FROM skills.build_graph()",
        "SELECT skills.embed_pending()",
        "SELECT skills.recompress_keys()",
        "SELECT skills.use_round(1)",
        "SELECT skills.train_compressor('SELECT ''q''::text, 1::bigint')",
        "SELECT skills.record_run('t', '[{\"skill_id\": 1, \"passed\": true}]')",
        "INSERT INTO skills.keyopt_round (rho, mu, settings, report, trigger) \
             VALUES (1, array_fill(0::real, ARRAY[512]), '{}', '{}', 'x')",
        "DELETE FROM skills.edge",
        "CREATE TRIGGER t BEFORE INSERT ON skills.skill FOR EACH ROW \
             EXECUTE FUNCTION skills.skill_before_write()",
    ] {
        carol.assert_refused(sql, "42501");
    }

    // The reader searches and reads; writes nothing; sees events' keys, not their texts.
    alice.exec(search);
    alice.exec("SELECT skills.render_context('share pytest setup', method => 'bm25')");
    alice.exec("SELECT id, task_key, round FROM skills.event");
    alice.assert_refused("SELECT task FROM skills.event", "42501");
    alice.assert_refused("SELECT executor, environment FROM skills.event", "42501");
    for sql in [
        "INSERT INTO skills.skill (name) VALUES ('x')",
        "UPDATE skills.skill SET name = 'x'",
        "SELECT skills.record_run('t', '[{\"skill_id\": 1, \"passed\": true}]')",
        "SELECT skills.apply_staging()",
        "SELECT skills.fit()",
        "INSERT INTO skills.event_arm (event_id, skill_id, skill_version, content_hash, passed) \
             VALUES (1, 1, 1, 'x', true)",
    ] {
        alice.assert_refused(sql, "42501");
    }

    // The reporter reports (the task key needs the encoder) and loads nothing.
    bob.assert_refused("INSERT INTO skills.skill (name) VALUES ('x')", "42501");
    bob.assert_refused("SELECT skills.fit()", "42501");
    if model_dir().is_some() {
        bob.exec(
            "SELECT skills.record_run('share setup between tests', \
             jsonb_build_array(jsonb_build_object('skill_id', \
                 (SELECT id FROM skills.skill WHERE name = 'pytest-fixtures'), 'passed', true)))",
        );
    }

    // The admin administers, but cannot add triggers or alter the extension's tables.
    dave.exec("SELECT skills.fit(); SELECT * FROM skills.build_graph()");
    dave.assert_refused(
        "CREATE TRIGGER t BEFORE INSERT ON skills.skill FOR EACH ROW \
             EXECUTE FUNCTION skills.skill_before_write()",
        "42501",
    );
    dave.assert_refused("ALTER TABLE skills.skill ADD COLUMN x int", "42501");
    dave.assert_refused("ALTER FUNCTION skills.search(text, text[], integer, integer, double precision, text, double precision, double precision, integer) RESET ALL", "42501");
    let supers =
        dave.count("SELECT count(*) FROM pg_roles WHERE rolsuper AND rolname <> 'postgres'");
    assert_eq!(supers, 0);
}

/// Long operations stop within about a second of statement_timeout or pg_cancel_backend.
#[test]
fn long_operations_are_cancelled_promptly() {
    if skip() {
        return;
    }
    let cluster = shared_cluster("sec-cancel", 54396, "");
    install_extension(&cluster);
    let mut root = Session::connect(&cluster, "postgres", "shared");
    // The data the long operations work on, made before any timeout is set.
    seed_skills_with_keys(&mut root, 20_000);
    seed_events(&mut root, 6000, 6);
    root.exec(
        "CREATE TABLE public.many_keys AS \
         SELECT skills.key(array(SELECT (random() - 0.5)::real FROM generate_series(1, 512) WHERE g > 0)) AS k \
         FROM generate_series(1, 30000) AS g",
    );
    // 98 MB of 128-letter words that are no token (md5 digits turned into letters): every word
    // is merged byte pair by byte pair, seconds of work. Repeated sentences are counted in
    // under a second now, before a 1 s timeout could stop them.
    root.exec(
        "CREATE TABLE public.long_words AS \
         SELECT string_agg(translate(md5(g::text) || md5((-g)::text) || md5((g * 7)::text) \
                                     || md5((g * 13)::text), '0123456789', 'ghijklmnop'), ' ') AS t \
         FROM generate_series(1, 760000) AS g",
    );
    let long_text = "repeat('Tokenise this sentence, and this one too.\\n', 2000000)";
    root.exec(
        "CREATE TEMP TABLE skill_staging (ord bigint NOT NULL, content_hash text PRIMARY KEY, \
             name text NOT NULL, description text NOT NULL, instructions text NOT NULL, \
             category skills.category, provenance jsonb NOT NULL); \
         INSERT INTO skill_staging \
         SELECT g, md5(g::text), 'load-' || g, 'A staged skill', \
                repeat('Run the tests of module ' || g || ' and read the failures. ', 100), NULL, \
                jsonb_build_array(jsonb_build_object('location', 'cancel:' || g)) \
         FROM generate_series(1, 20000) AS g",
    );
    let operations = [
        (
            "counting prompt tokens",
            "SELECT skills.prompt_tokens(t) FROM public.long_words".to_string(),
        ),
        (
            "BM25 analysis",
            format!("SELECT cardinality(skills.tokenize({long_text}))"),
        ),
        (
            "a huge document's token count",
            format!(
                "SET pg_skills.max_document_size = '100MB'; \
                 INSERT INTO skills.skill (name, instructions) VALUES ('huge', {long_text})"
            ),
        ),
        // The chunk loop of a load, where the backend computes the derived values the
        // encoder's thread has not reached (20,000 staged skills: about ten seconds of work).
        (
            "a load's inserts",
            "SELECT * FROM skills.apply_staging()".to_string(),
        ),
        ("the KeyOpt fit", "SELECT skills.fit()".to_string()),
        (
            "building the skill graph",
            "SELECT * FROM skills.build_graph(semantic_threshold => 0.0)".to_string(),
        ),
        (
            "k-means in CREATE INDEX",
            "CREATE INDEX ON public.many_keys USING skeys (k) WITH (lists = 1500)".to_string(),
        ),
    ];
    for (what, sql) in &operations {
        root.exec("SET statement_timeout = '1s'");
        let started = Instant::now();
        let code = root.refused(sql);
        let took = started.elapsed();
        root.exec("RESET statement_timeout; RESET pg_skills.max_document_size");
        println!("{what}: stopped after {took:?} ({code})");
        assert_eq!(code, "57014", "{what}: {sql}");
        assert!(
            took < Duration::from_secs(3),
            "{what} took {took:?} to stop after a 1 s statement_timeout"
        );
    }
    // pg_cancel_backend from another session.
    let pid: i32 = root
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let dsn = cluster.dsn("shared");
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        let mut other = postgres::Client::connect(&dsn, NoTls).unwrap();
        other
            .execute("SELECT pg_cancel_backend($1)", &[&pid])
            .unwrap();
        Instant::now()
    });
    let code = root.refused("SELECT skills.prompt_tokens(t) FROM public.long_words");
    let stopped = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    assert_eq!(code, "57014");
    assert!(stopped.duration_since(cancelled_at) < Duration::from_secs(2));
    root.exec("SELECT 1");
}

/// Bytes flipped in index pages (a disk fault, or someone with access to the data files): every
/// scan, statistics call, insert and VACUUM over such an index ends with a result or an ERROR,
/// never a crash (the postmaster would restart every backend) or a hang.
#[test]
fn corrupted_index_pages_give_errors() {
    if skip() {
        return;
    }
    let seed = pg_skills_server_tests::seed("corrupted_index_pages_give_errors");
    corrupt_and_query(seed, "sec-corrupt", 54397);
}

/// A seed the random test once found: a flipped posting handed the executor a TID past the
/// table's end, which the heap fetch reported as XX000 "could not open file ..." before the
/// scans checked TIDs (am::return_tid).
#[test]
fn corrupted_heap_pointers_give_index_errors() {
    if skip() {
        return;
    }
    corrupt_and_query(115_987_611, "sec-corrupt-tid", 54398);
}

fn corrupt_and_query(seed: u64, name: &str, port: u16) {
    let cluster = Cluster::start_with(name, port, "");
    let mut root = Session::connect(&cluster, "postgres", "postgres");
    root.exec("CREATE EXTENSION pg_skills");
    const COPIES: usize = 8;
    for i in 0..COPIES {
        root.exec(&format!(
            "CREATE TABLE docs{i} (id bigint, doc text[]); \
             INSERT INTO docs{i} SELECT g, ARRAY['title ' || g, 'words about topic ' || (g % 17), \
                 repeat('body text with several terms ', 1 + g % 40)] FROM generate_series(1, 3000) AS g; \
             CREATE INDEX docs{i}_bm25 ON docs{i} USING bm25 (doc); \
             INSERT INTO docs{i} SELECT g, ARRAY['late ' || g, 'appended rows', 'topic'] \
                 FROM generate_series(3001, 3200) AS g; \
             CREATE TABLE keys{i} (id bigint, k skills.key); \
             INSERT INTO keys{i} SELECT g, skills.key(array(SELECT (random() - 0.5)::real \
                 FROM generate_series(1, 512) WHERE g > 0)) FROM generate_series(1, 2000) AS g; \
             CREATE INDEX keys{i}_skeys ON keys{i} USING skeys (k) WITH (lists = 8);"
        ));
    }
    root.exec("CHECKPOINT");
    let files: Vec<(String, std::path::PathBuf)> = (0..COPIES)
        .flat_map(|i| [format!("docs{i}_bm25"), format!("keys{i}_skeys")])
        .map(|index| {
            let path: String = root
                .client
                .query_one("SELECT pg_relation_filepath($1::text::regclass)", &[&index])
                .unwrap()
                .get(0);
            (index, cluster.dir.join("data").join(path))
        })
        .collect();
    drop(root);
    cluster.stop();
    let mut rng = pg_skills_server_tests::Rng(seed);
    for (n, (index, file)) in files.iter().enumerate() {
        let mut bytes = std::fs::read(file).unwrap();
        let pages = bytes.len() / 8192;
        // Copy 0 of each kind: the metapage; the others: random pages. Most flips land in
        // the first bytes of the content, where headers, counts and links live; copy 3 also
        // garbles the page header.
        let page = if n < 2 {
            0
        } else {
            1 + (rng.next_u64() as usize) % (pages - 1).max(1)
        };
        let (start, span) = match n % 4 {
            3 => (0, 8192),
            1 => (24, 8168),
            _ => (24, 256),
        };
        for _ in 0..(8 + rng.next_u64() % 56) {
            let at = page * 8192 + start + (rng.next_u64() as usize) % span;
            bytes[at] ^= 1 << (rng.next_u64() % 8);
        }
        std::fs::write(file, &bytes).unwrap();
        println!("{index}: flipped bytes in page {page} of {pages}");
    }
    cluster.start_again();
    let mut s = Session::connect(&cluster, "postgres", "postgres");
    let started: String = s
        .client
        .query_one("SELECT pg_postmaster_start_time()::text", &[])
        .unwrap()
        .get(0);
    s.exec("SET statement_timeout = '20s'; SET enable_seqscan = off");
    let mut errors = 0;
    for i in 0..COPIES {
        let statements = [
            format!("SELECT id FROM docs{i} ORDER BY doc OPERATOR(skills.<&>) skills.bm25query('topic words', 'docs{i}_bm25') LIMIT 10"),
            format!("SELECT * FROM skills.bm25_index_stats('docs{i}_bm25'::regclass)"),
            format!("INSERT INTO docs{i} VALUES (9999, ARRAY['new', 'row', 'topic'])"),
            format!("VACUUM docs{i}"),
            format!("SELECT id FROM keys{i} ORDER BY k OPERATOR(skills.<#>) (SELECT k FROM keys{i} WHERE id = 7) LIMIT 10"),
            format!("SELECT * FROM skills.key_index_stats('keys{i}_skeys'::regclass)"),
            format!("SELECT skills.key_recall('keys{i}_skeys'::regclass, (SELECT k FROM keys{i} WHERE id = 7), 10)"),
            format!("INSERT INTO keys{i} SELECT 9999, k FROM keys{i} WHERE id = 8"),
            format!("VACUUM keys{i}"),
        ];
        for sql in &statements {
            match s.client.batch_execute(sql) {
                Ok(()) => {}
                Err(e) => {
                    let code = e.code().map(|c| c.code().to_string());
                    assert!(code.is_some(), "{sql}: the connection broke: {e}");
                    assert_ne!(
                        code.as_deref(),
                        Some("57014"),
                        "{sql}: hung until the timeout"
                    );
                    // Damage is reported as such (XX001 page, XX002 index; 55000 a metapage
                    // of another format), not as an internal error from an unchecked read.
                    assert!(
                        matches!(code.as_deref(), Some("XX001" | "XX002" | "55000")),
                        "{sql}: {}",
                        describe(&e)
                    );
                    println!("{sql}: {}", describe(&e));
                    errors += 1;
                }
            }
        }
    }
    let now: String = s
        .client
        .query_one("SELECT pg_postmaster_start_time()::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(started, now, "the server restarted: a backend crashed");
    let log = std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
    assert!(
        !log.contains("terminated by signal") && !log.contains("PANIC"),
        "a backend crashed (see {})",
        cluster.dir.display()
    );
    assert!(
        errors > 0,
        "no corruption was noticed: the flips did not reach the indexes"
    );
}
