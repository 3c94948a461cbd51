//! Every SQL function of the extension on edge inputs: no crash, no hang, no unclear error.
//!
//! The functions are read from the catalogue (each function in schema `skills` a user can
//! call: not the triggers, access-method handlers and type I/O), so a new function is tested
//! without being listed here. Each argument gets a normal value, then, one argument at a time,
//! each edge value of its type (NULL, empty, zero, negative, extreme, NaN and infinities, very
//! long text, multi-dimensional and huge arrays, JSON of every shape, indexes of the wrong
//! access method, ...), and random combinations of those values (seeded). Then the operators,
//! through their indexes and in sequential scans, with queries made by the extension and forged
//! as rows (any index OID, statistics of every shape), and key literals. Then, as the superuser,
//! searches of every method, a rendered context and both scans under each setting of the
//! extension at its bounds (or each of its values, or odd strings).
//!
//! Each statement runs in a transaction that is rolled back, under a statement timeout: as the
//! superuser, as a role with every grant of the extension under a row-level security policy,
//! and as a role with none. The test fails when a statement
//! - takes the backend down (the connection is lost, or the server log reports a crash),
//! - is not stopped by the statement timeout within a few seconds (a loop that does not check
//!   for interrupts, or a wait that cannot be cancelled),
//! - or fails with an error that does not say what is wrong with the input ([`unclear`]):
//!   SQLSTATE XX000 (a Rust panic, or an ERROR without a code), a NOT NULL violation of a
//!   table the function writes, or a missing catalogue relation.
//!
//! `PGS_INPUTS_ONLY=name` tests that function alone (`operators`, `settings`: those alone);
//! `PGS_INPUTS_VERBOSE=1` prints each error; `PGS_FUZZ_SEED` replays the random combinations.

use std::time::{Duration, Instant};

use pg_skills_server_tests::{insert_random, seed, setup_extension, skip, Cluster, Rng};
use postgres::error::SqlState;
use postgres::Client;

/// What a call may take beyond the statement timeout before it counts as a hang.
const CANCEL_GRACE: Duration = Duration::from_secs(5);
const STATEMENT_TIMEOUT: &str = "3s";

/// Values of one SQL type, as literals: the first is the normal value the other arguments take
/// while one argument goes through its edge values.
fn values(ty: &str) -> Vec<String> {
    let key =
        |fill: &str, dims: usize| format!("skills.key(array_fill({fill}::real, ARRAY[{dims}]))");
    let v: Vec<&str> = match ty {
        "text" => vec![
            "'rust tests fail after a merge; find the commit'",
            "NULL",
            "''",
            "' '",
            "repeat('word ', 40000)",
            "repeat('é😀', 20000)",
            "'%s%n%x''; DROP TABLE skills.skill; --'",
            "E'\\x01\\x02\\t\\r\\n'",
            "'code_generation'",
            "'bm25'",
            "'keyopt'",
            "'[{\"skill_id\": 1, \"passed\": true}]'",
        ],
        "integer" => vec!["5", "NULL", "0", "-1", "1", "2147483647", "-2147483648"],
        "bigint" => vec![
            "1",
            "NULL",
            "0",
            "-1",
            "9223372036854775807",
            "-9223372036854775808",
        ],
        // The largest finite real; 1e308 overflows a real at the cast, before the call.
        "real" | "double precision" => vec![
            "0.5",
            "NULL",
            "0",
            "-1",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "3.4e38",
            "1e308",
        ],
        "numeric" => vec!["1000", "NULL", "0", "-1", "'NaN'", "1e100"],
        "boolean" => vec!["false", "NULL", "true"],
        "text[]" => vec![
            "ARRAY['rust tests', 'python debugger']",
            "NULL",
            "'{}'",
            "'{NULL}'",
            "'{\"\"}'",
            "'{{a,b},{c,d}}'",
            "array_fill('word'::text, ARRAY[100000])",
            "ARRAY['testing', 'debugging']",
        ],
        "real[]" | "double precision[]" => vec![
            "array_fill(0.05, ARRAY[384])",
            "NULL",
            "'{}'",
            "'{NULL}'",
            "'{NaN,1}'",
            "'{Infinity,-Infinity}'",
            "array_fill(0, ARRAY[384])",
            "array_fill(0.05, ARRAY[512])",
            "array_fill(0.05, ARRAY[2, 384])",
            "array_fill(1, ARRAY[1000000])",
            "array_fill('NaN'::float8, ARRAY[384])",
        ],
        "bigint[]" => vec![
            "ARRAY[1, 2]",
            "NULL",
            "'{}'",
            "'{NULL}'",
            "'{-1}'",
            "'{{1},{2}}'",
            "ARRAY[9223372036854775807]",
            "ARRAY(SELECT generate_series(1, 100000)::bigint)",
        ],
        "jsonb" => vec![
            "'[{\"skill_id\": 1, \"passed\": true}]'",
            "NULL",
            "'{}'",
            "'[]'",
            "'null'",
            "'\"x\"'",
            "'1'",
            "'[{\"skill_id\": \"x\", \"passed\": \"yes\"}]'",
            "'[{\"skill_id\": 9223372036854775807, \"passed\": true, \"tokens\": -5}]'",
            "'[{\"location\": 1}, {\"location\": null}, 5]'",
            "'{\"a\": [1, {\"b\": [null, 1e308]}]}'",
            "(SELECT repeat('[', 5000) || repeat(']', 5000))::jsonb",
        ],
        "jsonb[]" => vec![
            "ARRAY['{}'::jsonb]",
            "NULL",
            "'{}'",
            "ARRAY['null'::jsonb, NULL]",
        ],
        "oid" | "regclass" => vec![
            "'skills.skill_bm25'::regclass",
            "NULL",
            "0",
            "'skills.skill'::regclass",
            "'pg_class'::regclass",
            "'pg_class_oid_index'::regclass",
            "'skills.skill_key_k0'::regclass",
            "4294967295",
        ],
        "skills.category" => vec!["'testing'", "NULL", "'debugging'"],
        "skills.category[]" => vec!["'{testing}'", "NULL", "'{}'", "'{NULL}'"],
        "skills.key" => {
            return vec![
                key("0.05", 512),
                "NULL".into(),
                key("0", 512),
                key("1", 3),
                key("1", 16000),
                key("3e38", 512),
            ]
        }
        "skills.key[]" => {
            return vec![
                format!("ARRAY[{}]", key("0.05", 512)),
                "NULL".into(),
                "'{}'".into(),
                format!("ARRAY[{}, NULL]", key("0.05", 512)),
                format!("ARRAY[{}, {}]", key("0.05", 512), key("1", 3)),
            ]
        }
        "skills.keyquery" => {
            let k = key("0.05", 512);
            // Made by skills.key_query, and forged as a row.
            return vec![
                format!("skills.key_query({k}, 2, 4)"),
                "NULL".into(),
                format!("skills.key_query({k}, 1000000, 2147483647)"),
                format!("ROW({k}, -5, -1)"),
                format!("ROW({k}, 0, 0)"),
                format!("ROW({k}, 2147483647, 1)"),
                "ROW(NULL, 2, 4)".into(),
                format!("ROW({}, 2, 4)", key("1", 3)),
            ];
        }
        "skills.bm25query" => {
            // Made by skills.bm25query, and forged as a row: any index OID, any statistics.
            let mut v: Vec<String> = [
                "skills.bm25query('rust tests', NULL)",
                "NULL",
                "skills.bm25query('', NULL)",
                "skills.bm25query(repeat('word ', 40000), NULL)",
            ]
            .map(String::from)
            .to_vec();
            for index in [
                "0",
                "4294967295",
                "'pg_class'::regclass",
                "'pg_class_oid_index'::regclass",
                "'skills.skill'::regclass",
                "'skills.skill_key_k0'::regclass",
            ] {
                v.push(format!("ROW({index}, 'rust tests', NULL)"));
            }
            for corpus in forged_corpora() {
                v.push(format!(
                    "ROW('skills.skill_bm25'::regclass, 'rust tests', '{corpus}')"
                ));
            }
            return v;
        }
        other => panic!("no values for type {other}: add them to tests/tests/inputs.rs"),
    };
    v.into_iter().map(String::from).collect()
}

/// Statistics a bm25query carries (as skills.bm25_global_query makes them), each field forged:
/// negative, zero, huge, fractional, of another JSON type, missing.
fn forged_corpora() -> Vec<String> {
    let fields: [(&str, &str); 7] = [
        ("b", "0.75"),
        ("k1", "1.5"),
        ("weights", "[1.0, 1.0, 1.0]"),
        ("doc_freq", "{\"rust\": 1, \"test\": 1}"),
        ("stemming", "true"),
        ("documents", "2"),
        ("total_length", "10.0"),
    ];
    let forged: [(&str, &[&str]); 7] = [
        ("b", &["-1", "2", "1e308", "\"NaN\""]),
        ("k1", &["-1", "0", "1e308"]),
        (
            "weights",
            &[
                "[]",
                "[1]",
                "[-1, -1, -1]",
                "[0, 0, 0]",
                "[1e308, 1e308, 1e308]",
                "\"x\"",
            ],
        ),
        (
            "doc_freq",
            &[
                "{}",
                "{\"rust\": -5}",
                "{\"rust\": 100}",
                "{\"rust\": 1e19}",
                "{\"\": 1}",
                "[1]",
            ],
        ),
        ("stemming", &["\"yes\"", "null"]),
        ("documents", &["0", "-1", "1.5", "1e19"]),
        ("total_length", &["0", "-1", "1e308"]),
    ];
    let object = |replace: Option<(&str, &str)>| {
        let body: Vec<String> = fields
            .iter()
            .filter_map(|(name, value)| match replace {
                Some((n, "")) if n == *name => None,
                Some((n, v)) if n == *name => Some(format!("\"{name}\": {v}")),
                _ => Some(format!("\"{name}\": {value}")),
            })
            .collect();
        format!("{{{}}}", body.join(", "))
    };
    let mut out = vec!["{}".to_string(), "[]".to_string(), "null".to_string()];
    for (name, values) in forged {
        out.push(object(Some((name, ""))));
        for value in values {
            out.push(object(Some((name, value))));
        }
    }
    out
}

/// Each setting of the extension a session may change (read from pg_settings, so a new one is
/// covered), at its bounds and between them, or each of its values, or odd strings; under each,
/// a search by every method, a rendered context, a batch ranking and both operators' scans.
fn setting_statements(client: &mut Client) -> Vec<(String, String)> {
    let methods: Vec<String> = client
        .query_one("SELECT skills.search_methods()", &[])
        .expect("the search methods")
        .get(0);
    let mut under = vec![
        "(SELECT skills.render_context('python tests', k => 3) AS c)".to_string(),
        "skills.keyopt_rank_batch(ARRAY['a b c', 'git bisect'], 5)".to_string(),
        "(SELECT id FROM skills.skill ORDER BY ARRAY[name, description, instructions] \
          OPERATOR(skills.<&>) skills.bm25query('rust tests', NULL) LIMIT 5)"
            .to_string(),
        "(SELECT skill_id FROM skills.skill_key \
          ORDER BY k0 OPERATOR(skills.<#>) skills.query_key('deploy a container') LIMIT 5)"
            .to_string(),
    ];
    for m in &methods {
        under.push(format!(
            "skills.search('rust tests fail after a merge. Also deploy the container', \
             method => '{m}', k => 5)"
        ));
    }
    let settings = client
        .query(
            "SELECT name, vartype, coalesce(min_val, ''), coalesce(max_val, ''),
                    coalesce(enumvals, '{}')
             FROM pg_settings
             WHERE name LIKE 'pg_skills.%' AND context IN ('user', 'superuser')
             ORDER BY 1",
            &[],
        )
        .expect("the settings");
    let mut out = Vec::new();
    for row in settings {
        let (name, kind, min, max): (String, String, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let values: Vec<String> = match kind.as_str() {
            "enum" => row.get(4),
            "bool" => vec!["on".into(), "off".into()],
            "integer" => {
                let (lo, hi): (i64, i64) = (min.parse().unwrap(), max.parse().unwrap());
                vec![min, max, ((lo + hi) / 2).to_string()]
            }
            "real" => {
                let (lo, hi): (f64, f64) = (min.parse().unwrap(), max.parse().unwrap());
                vec![min, max, ((lo + hi) / 2.0).to_string()]
            }
            _ => ["", "garbage", "mit, apache-2.0", "/nonexistent"]
                .map(String::from)
                .to_vec(),
        };
        for value in values {
            let set = format!("SET LOCAL {name} = '{}';", value.replace('\'', "''"));
            out.extend(under.iter().map(|u| (set.clone(), u.clone())));
        }
    }
    out
}

/// Statements beyond the function calls: key literals, and the operators (through their
/// indexes and in sequential scans) with made and forged queries.
fn operator_statements() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for literal in [
        "[1,2,3]",
        "[]",
        "[",
        "[1,,2]",
        "[NaN]",
        "[1e39]",
        "[-inf]",
        "  [1, 2 ] ",
        "[1,2]x",
        "garbage",
    ] {
        out.push(format!("(SELECT '{literal}'::skills.key AS k)"));
    }
    out.push("(SELECT skills.key(ARRAY[1, 2]::real[]) OPERATOR(skills.<#>) skills.key(ARRAY[1, 2, 3]::real[]))".into());
    let mut scans = Vec::new();
    for q in values("skills.bm25query") {
        scans.push(format!(
            "(SELECT id FROM skills.skill \
              ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) ({q})::skills.bm25query LIMIT 5)"
        ));
    }
    for q in values("skills.keyquery") {
        scans.push(format!(
            "(SELECT skill_id FROM skills.skill_key ORDER BY k0 OPERATOR(skills.<#>) ({q})::skills.keyquery LIMIT 5)"
        ));
    }
    let mut out: Vec<(String, String)> = out.into_iter().map(|s| (String::new(), s)).collect();
    for settings in ["", "SET LOCAL enable_indexscan = off;"] {
        out.extend(scans.iter().map(|s| (settings.to_string(), s.clone())));
    }
    for doc in [
        "ARRAY[NULL, NULL, NULL]::text[]",
        "'{}'::text[]",
        "ARRAY['a', 'b', 'c', 'd']",
        "'{{a,b},{c,d}}'::text[]",
    ] {
        out.push((
            String::new(),
            format!(
                "(SELECT {doc} OPERATOR(skills.<&>) skills.bm25query('rust tests', NULL) AS s)"
            ),
        ));
    }
    out
}

/// The extension's callable functions: (name, argument types, identity for messages).
fn functions(client: &mut Client) -> Vec<(String, Vec<String>)> {
    client
        .query(
            "SELECT p.proname::text,
                    ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) AS t)
             FROM pg_proc AS p
             WHERE p.pronamespace = 'skills'::regnamespace AND p.prokind = 'f'
               AND p.prorettype NOT IN ('trigger'::regtype, 'index_am_handler'::regtype, 'cstring'::regtype)
               AND NOT p.proargtypes::oid[] && ARRAY['internal'::regtype, 'cstring'::regtype]::oid[]
             ORDER BY 1, 2",
            &[],
        )
        .expect("list the functions")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Random combinations of edge values per function with two arguments or more (seeded: the
/// test prints its seed, `PGS_FUZZ_SEED` replays it).
const RANDOM_CALLS: usize = 24;

/// Every call: each argument's normal value, all NULL, each edge value of one argument, and
/// [`RANDOM_CALLS`] random combinations of every argument's values.
fn calls(name: &str, types: &[String], rng: &mut Rng) -> Vec<String> {
    // Each value cast to the argument's type, so that the call resolves to this function.
    let per_arg: Vec<Vec<String>> = types
        .iter()
        .map(|t| {
            values(t)
                .into_iter()
                .map(|v| format!("({v})::{t}"))
                .collect()
        })
        .collect();
    let call = |args: Vec<String>| format!("skills.{name}({})", args.join(", "));
    let normal: Vec<String> = per_arg.iter().map(|v| v[0].clone()).collect();
    let mut out = vec![call(normal.clone())];
    if !types.is_empty() {
        out.push(call(types.iter().map(|t| format!("NULL::{t}")).collect()));
    }
    for (i, vs) in per_arg.iter().enumerate() {
        for v in &vs[1..] {
            let mut args = normal.clone();
            args[i] = v.clone();
            out.push(call(args));
        }
    }
    if types.len() >= 2 {
        for _ in 0..RANDOM_CALLS {
            let args = per_arg
                .iter()
                .map(|vs| vs[rng.below(vs.len() as u64) as usize].clone())
                .collect();
            out.push(call(args));
        }
    }
    out
}

enum Outcome {
    Ok,
    Error(SqlState, String),
    /// The statement ran past the timeout and its grace.
    Slow(Duration),
    /// The connection broke.
    Lost(String),
}

/// `call` (anything that can follow FROM) in a transaction that is rolled back, after `settings`.
fn run(client: &mut Client, settings: &str, call: &str) -> Outcome {
    let sql = format!(
        "BEGIN; SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'; {settings} \
         SELECT count(*) FROM {call} AS r; ROLLBACK"
    );
    let started = Instant::now();
    let result = client.batch_execute(&sql);
    let took = started.elapsed();
    let outcome = match result {
        Ok(()) => Outcome::Ok,
        Err(e) => match e.as_db_error() {
            Some(db) => Outcome::Error(db.code().clone(), db.message().to_string()),
            None if client.is_closed() => Outcome::Lost(e.to_string()),
            None => Outcome::Error(SqlState::INTERNAL_ERROR, format!("client: {e}")),
        },
    };
    if !client.is_closed() {
        let _ = client.batch_execute("ROLLBACK");
    }
    let limit = Duration::from_secs(3) + CANCEL_GRACE;
    if took > limit {
        return Outcome::Slow(took);
    }
    outcome
}

/// Why an error does not say what is wrong with the input, if it does not: an internal error
/// (a Rust panic, or an ERROR without a code), a NULL argument that reached a table's NOT NULL
/// constraint instead of being refused by the function, or a statement of the function failing
/// on a catalogue relation this server lacks (a feature that needs Citus, say).
fn unclear(code: &SqlState, message: &str) -> Option<&'static str> {
    if *code == SqlState::INTERNAL_ERROR {
        Some("internal error")
    } else if *code == SqlState::NOT_NULL_VIOLATION {
        Some("a NULL argument reached a table")
    } else if *code == SqlState::UNDEFINED_TABLE && message.contains("\"pg_catalog.") {
        Some("an internal statement failed")
    } else {
        None
    }
}

#[test]
fn every_function_survives_edge_inputs() {
    if skip() {
        return;
    }
    let cluster = Cluster::start("inputs", 54377);
    let mut client = cluster.client();
    setup_extension(&mut client);
    let mut rng = Rng(seed("inputs"));
    insert_random(&mut client, &mut rng, 60, "in");
    // Keys for the key index, a recorded run, and a graph: the paths that read them.
    client
        .batch_execute(
            "INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0)
             SELECT s.id, s.content_hash, array_fill(0::real, ARRAY[384]),
                    skills.key(ARRAY(SELECT sin(s.id * 7 + i)::real FROM generate_series(1, 512) AS i))
             FROM skills.skill AS s;
             DELETE FROM skills.embed_queue;
             CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0);",
        )
        .expect("keys");
    let only = std::env::var("PGS_INPUTS_ONLY").ok();
    let mut statements: Vec<(String, String)> = Vec::new();
    for (name, types) in functions(&mut client) {
        if only.as_deref().is_none_or(|o| o == name) {
            let calls = calls(&name, &types, &mut rng);
            statements.extend(calls.into_iter().map(|c| (String::new(), c)));
        }
    }
    if only.as_deref().is_none_or(|o| o == "operators") {
        statements.extend(operator_statements());
    }
    // As the superuser only: most of these settings are the superuser's to change.
    let settings = if only.as_deref().is_none_or(|o| o == "settings") {
        setting_statements(&mut client)
    } else {
        Vec::new()
    };
    let verbose = std::env::var_os("PGS_INPUTS_VERBOSE").is_some();
    let mut failures = Vec::new();
    let mut counts = (0usize, 0usize);
    // Three times: as the superuser, as a role with every grant of the extension under a
    // row-level security policy on skills.skill (the paths that apply it), and as a role with
    // no grant at all (the paths that meet a permission error inside a function).
    client
        .batch_execute(
            "CREATE ROLE fuzzer LOGIN IN ROLE skills_reader, skills_reporter, skills_loader, skills_admin;
             CREATE ROLE nobody LOGIN;
             CREATE POLICY fuzzer_half ON skills.skill USING (id % 2 = 0);",
        )
        .expect("the second role");
    let as_user = |user: &str| {
        Client::connect(
            &format!(
                "host=127.0.0.1 port={} user={user} dbname=postgres",
                cluster.port
            ),
            postgres::NoTls,
        )
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"))
    };
    for user in ["postgres", "fuzzer", "nobody"] {
        let mut client = as_user(user);
        if user == "fuzzer" {
            as_user("postgres")
                .batch_execute("ALTER TABLE skills.skill ENABLE ROW LEVEL SECURITY")
                .expect("row-level security");
        }
        let with_settings = if user == "postgres" {
            &settings[..]
        } else {
            &[]
        };
        for (settings, call) in statements.iter().chain(with_settings) {
            let shown: String = format!("{user}: {settings}{call}")
                .chars()
                .take(300)
                .collect();
            match run(&mut client, settings, call) {
                Outcome::Ok => counts.0 += 1,
                Outcome::Error(code, message) => {
                    counts.1 += 1;
                    if verbose {
                        eprintln!("{shown}: {} {message}", code.code());
                    }
                    if let Some(why) = unclear(&code, &message) {
                        failures.push(format!("{shown}: {why}: {} {message}", code.code()));
                    }
                }
                Outcome::Slow(took) => {
                    failures.push(format!(
                        "{shown}: not stopped by the statement timeout ({took:?})"
                    ));
                    client = as_user(user);
                }
                Outcome::Lost(e) => {
                    failures.push(format!("{shown}: the connection was lost: {e}"));
                    std::thread::sleep(Duration::from_secs(2));
                    client = as_user(user);
                }
            }
        }
    }
    let log = std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
    for line in log.lines() {
        if line.contains("terminated by signal") || line.contains("PANIC") {
            failures.push(format!("server log: {line}"));
        }
    }
    eprintln!(
        "{} calls succeeded, {} failed with an error",
        counts.0, counts.1
    );
    assert!(
        only.is_some() || counts.0 > 1000,
        "the calls run at all ({} succeeded)",
        counts.0
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
