//! SQL behaviour of the extension, run inside Postgres by `cargo pgrx test`.
//! Each test runs in its own transaction, which is rolled back, so the tables start empty.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn exec(sql: &str) {
        Spi::run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    fn one<T: pgrx::IntoDatum + pgrx::FromDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .unwrap_or_else(|| panic!("{sql}: NULL"))
    }

    fn insert(name: &str, description: &str, instructions: &str) -> i64 {
        one(&format!(
            "INSERT INTO skills.skill (name, description, instructions) VALUES ({}, {}, {}) RETURNING id",
            quote(name),
            quote(description),
            quote(instructions)
        ))
    }

    fn quote(s: &str) -> String {
        format!("'{}'", s.replace('\'', "''"))
    }

    /// (id, float) rows of a query whose first two columns are those.
    fn id_scores(sql: &str) -> Vec<(i64, f64)> {
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

    /// skills.search; unless the arguments say otherwise, BM25 and k => 10 (what these tests
    /// were written for; the request's defaults are keyopt and no limit).
    fn search(sql_args: &str) -> Vec<(i64, f64)> {
        let mut args = sql_args.to_string();
        if !args.contains("method =>") {
            args += ", method => 'bm25'";
        }
        if !args.contains("k =>") {
            args += ", k => 10";
        }
        id_scores(&format!("SELECT id, score FROM skills.search({args})"))
    }

    #[pg_test]
    fn insert_derives_hash_tokens_category_and_version() {
        let id = insert(
            "pytest-fixtures",
            "Write pytest fixtures for unit tests",
            "Use conftest.py.",
        );
        let (hash, tokens, category, version): (String, i32, String, i32) = (
            one(&format!(
                "SELECT content_hash FROM skills.skill WHERE id = {id}"
            )),
            one(&format!(
                "SELECT token_count FROM skills.skill WHERE id = {id}"
            )),
            one(&format!(
                "SELECT category::text FROM skills.skill WHERE id = {id}"
            )),
            one(&format!("SELECT version FROM skills.skill WHERE id = {id}")),
        );
        assert_eq!(
            hash,
            pg_skills_corpus::skill::content_hash(
                "pytest-fixtures",
                "Write pytest fixtures for unit tests",
                "Use conftest.py."
            )
        );
        assert!(tokens > 5 && tokens < 40, "{tokens}");
        assert_eq!(category, "testing");
        assert_eq!(version, 1);
    }

    #[pg_test]
    fn explicit_category_overrides_classifier() {
        exec("INSERT INTO skills.skill (name, description, category) VALUES ('pytest-x', 'unit tests', 'docs_tooling')");
        assert_eq!(
            one::<String>("SELECT category::text FROM skills.skill"),
            "docs_tooling"
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.pool_docs_tooling"),
            1
        );
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.pool_testing"), 0);
    }

    #[pg_test(error = "a skill needs a non-empty name")]
    fn empty_name_rejected() {
        insert("   ", "d", "i");
    }

    #[pg_test(error = "invalid input value for enum skills.category: \"cooking\"")]
    fn unknown_category_rejected() {
        exec("INSERT INTO skills.skill (name, category) VALUES ('x', 'cooking')");
    }

    #[pg_test(error = "skill \"big\" is 2003 bytes, over the limit of 1024 bytes")]
    fn oversized_document_rejected() {
        exec("SET LOCAL pg_skills.max_document_size = '1kB'");
        insert("big", "", &"x".repeat(2000));
    }

    #[pg_test(
        error = "duplicate key value violates unique constraint \"skill_content_hash_unique\""
    )]
    fn same_normalised_content_is_one_skill() {
        insert("a", "desc", "body");
        insert(" a ", "desc ", "body\r\n");
    }

    #[pg_test]
    fn same_name_different_content_is_two_skills() {
        insert("a", "desc", "body one");
        insert("a", "desc", "body two");
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.skill WHERE name = 'a'"),
            2
        );
    }

    #[pg_test]
    fn content_change_bumps_version_and_keeps_history() {
        let id = insert("a", "desc", "body one");
        let old_hash: String = one(&format!(
            "SELECT content_hash FROM skills.skill WHERE id = {id}"
        ));
        exec(&format!(
            "UPDATE skills.skill SET category = 'testing' WHERE id = {id}"
        ));
        assert_eq!(
            one::<i32>(&format!("SELECT version FROM skills.skill WHERE id = {id}")),
            1
        );
        exec(&format!(
            "UPDATE skills.skill SET instructions = 'body two' WHERE id = {id}"
        ));
        assert_eq!(
            one::<i32>(&format!("SELECT version FROM skills.skill WHERE id = {id}")),
            2
        );
        assert_ne!(
            one::<String>(&format!(
                "SELECT content_hash FROM skills.skill WHERE id = {id}"
            )),
            old_hash
        );
        assert_eq!(
            one::<String>(&format!("SELECT content_hash FROM skills.skill_version WHERE skill_id = {id} AND version = 1")),
            old_hash
        );
    }

    #[pg_test]
    fn pools_partition_the_table() {
        insert("pytest-fixtures", "unit tests", "");
        insert("k8s-deploy", "deploy a container to kubernetes", "");
        insert("readme", "write docs", "");
        let pools: i64 = one(
            "SELECT (SELECT count(*) FROM skills.pool_code_generation) + (SELECT count(*) FROM skills.pool_testing)
                  + (SELECT count(*) FROM skills.pool_debugging) + (SELECT count(*) FROM skills.pool_refactoring_review)
                  + (SELECT count(*) FROM skills.pool_data_ml) + (SELECT count(*) FROM skills.pool_devops_infra)
                  + (SELECT count(*) FROM skills.pool_docs_tooling)",
        );
        assert_eq!(pools, 3);
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.pool_devops_infra"),
            1
        );
    }

    /// Drops the extension's bm25 index inside this (rolled back) test, so skills.search uses
    /// the reference scan. Taken first, the lock orders this test after concurrent ones: the
    /// shared index also counts their uncommitted and aborted rows until a VACUUM.
    fn without_index() {
        exec("LOCK TABLE skills.skill IN ACCESS EXCLUSIVE MODE");
        exec("DROP INDEX skills.skill_bm25");
    }

    fn tiny_corpus() -> [i64; 3] {
        without_index();
        exec("SET LOCAL pg_skills.bm25_stemming = off");
        [
            insert("rust", "test runner", ""),
            insert("python", "", "debugger"),
            insert("rust", "rust", "borrow checker"),
        ]
    }

    #[pg_test]
    fn bm25_scores_match_hand_computed_values() {
        let [a, _, c] = tiny_corpus();
        let hits = search("'rust'");
        // See pg_skills_kernels::bm25 tests for the arithmetic.
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].0, c);
        assert!((hits[0].1 - 0.606_456_3).abs() < 1e-6, "{hits:?}");
        assert_eq!(hits[1].0, a);
        assert!((hits[1].1 - 0.470_003_6).abs() < 1e-6, "{hits:?}");
    }

    #[pg_test]
    fn bm25_parameters_come_from_gucs() {
        tiny_corpus();
        let default = search("'rust'");
        exec("SET LOCAL pg_skills.bm25_b = 0");
        let no_norm = search("'rust'");
        assert_ne!(default[0].1, no_norm[0].1);
        // b = 0: doc 3 (tf 2) = ln(1.6)·2·2.5 / (2 + 1.5)
        assert!((no_norm[0].1 - (1.6f64).ln() * 5.0 / 3.5).abs() < 1e-9);
    }

    #[pg_test]
    fn category_filter_and_limits() {
        let [a, b, c] = tiny_corpus();
        exec(&format!(
            "UPDATE skills.skill SET category = 'testing' WHERE id IN ({a}, {b})"
        ));
        exec(&format!(
            "UPDATE skills.skill SET category = 'debugging' WHERE id = {c}"
        ));
        let all = search("'rust python', k => NULL");
        assert_eq!(all.len(), 3);
        let testing = search("'rust python', categories => '{testing}', k => NULL");
        assert_eq!(
            testing.iter().map(|h| h.0).collect::<Vec<_>>(),
            all.iter()
                .map(|h| h.0)
                .filter(|id| *id != c)
                .collect::<Vec<_>>()
        );
        for (id, score) in &testing {
            assert_eq!(
                all.iter().find(|h| h.0 == *id).unwrap().1,
                *score,
                "filter must not change scores"
            );
        }
        assert_eq!(search("'rust python', k => 1"), all[..1].to_vec());
        assert_eq!(search("'rust python', categories => '{data_ml}'").len(), 0);
    }

    #[pg_test]
    fn functions_shadowing_builtins_are_not_called() {
        // With the extension's bm25 index (the path that calls array_length).
        insert("rust-backtrace", "find where a rust program panicked", "RUST_BACKTRACE=1");
        insert("cargo-test", "run rust tests", "cargo test");
        // The reproduction: exact argument types in public beat pg_catalog's
        // polymorphic array_length and the casting numeric * float8.
        exec(
            "CREATE FUNCTION public.array_length(regclass[], integer) RETURNS integer \
             LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the shadowing array_length ran'; END $$",
        );
        exec(
            "CREATE FUNCTION public.trap_mul(numeric, double precision) RETURNS double precision \
             LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the shadowing * ran'; END $$",
        );
        exec("CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = double precision, FUNCTION = public.trap_mul)");
        exec("SET LOCAL search_path = public, pg_catalog");
        assert_eq!(search("'rust'").len(), 2);
        exec("SET LOCAL search_path = public");
        assert_eq!(search("'rust'").len(), 2);
        exec("SELECT skills.render_context('rust', method => 'bm25')");
        if have_model() {
            // The embedder's progress update computes 0.7 * rate (numeric * float8).
            exec("SELECT skills.embed_pending()");
            insert("rust-fmt", "format rust code", "cargo fmt");
            exec("SELECT skills.embed_pending()");
            assert!(!search("'rust', method => 'semantic'").is_empty());
        }
        // The statements ran under their own path; the session's is as it was.
        assert_eq!(one::<String>("SHOW search_path"), "public");
        exec("DROP OPERATOR public.* (numeric, double precision)");
        exec("DROP FUNCTION public.trap_mul(numeric, double precision)");
        exec("DROP FUNCTION public.array_length(regclass[], integer)");
    }

    #[pg_test]
    fn degenerate_queries_return_nothing() {
        tiny_corpus();
        assert!(search("''").is_empty());
        assert!(search("'the and of'").is_empty());
        assert!(search("'  ?!  '").is_empty());
        let long = "rust ".repeat(20_000);
        // Over pg_skills.max_query_size (32kB): refused; a superuser may raise the bound.
        assert_refused(
            &format!("PERFORM * FROM skills.search({}, method => 'bm25')", quote(&long)),
            "program_limit_exceeded",
            "the query text is 100000 bytes, over the limit of 32768 bytes",
        );
        exec("SET LOCAL pg_skills.max_query_size = '1MB'");
        assert_eq!(search(&quote(&long)).len(), 2);
    }

    #[pg_test]
    fn empty_table_searches_fine() {
        assert!(search("'anything'").is_empty());
        without_index();
        assert!(search("'anything'").is_empty());
    }

    #[pg_test(error = "k must be at least 1, got 0")]
    fn zero_k_rejected() {
        search("'x', k => 0");
    }

    #[pg_test(error = "unknown search method \"magic\"")]
    fn unknown_method_rejected() {
        search("'x', method => 'magic'");
    }

    #[pg_test(error = "unknown category \"cooking\"")]
    fn unknown_search_category_rejected() {
        search("'x', categories => '{testing,cooking}'");
    }

    #[pg_test(error = "query must not be NULL")]
    fn null_query_rejected() {
        search("NULL");
    }

    #[pg_test]
    fn tokenize_matches_the_analyzer() {
        let tokens: Vec<String> = one("SELECT skills.tokenize('The Tests are Failing')");
        assert_eq!(tokens, vec!["test", "fail"]);
    }

    fn stage(rows: &[(&str, &str, &str)]) {
        exec("DROP TABLE IF EXISTS pg_temp.skill_staging");
        exec(
            "CREATE TEMP TABLE skill_staging (ord bigint, content_hash text PRIMARY KEY, name text, description text,
             instructions text, category skills.category, provenance jsonb)",
        );
        for (i, (name, body, location)) in rows.iter().enumerate() {
            let hash = pg_skills_corpus::skill::content_hash(name, "d", body);
            exec(&format!(
                "INSERT INTO pg_temp.skill_staging VALUES ({i}, '{hash}', {}, 'd', {}, NULL, jsonb_build_array(jsonb_build_object('location', {})))",
                quote(name),
                quote(body),
                quote(location)
            ));
        }
    }

    fn apply() -> (i64, i64, i64, i64) {
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

    #[pg_test]
    fn apply_staging_new_unchanged_merged_updated() {
        stage(&[("a", "one", "r1:a"), ("b", "two", "r1:b")]);
        assert_eq!(apply(), (2, 0, 0, 0));
        stage(&[("a", "one", "r1:a"), ("b", "two", "r1:b")]);
        assert_eq!(
            apply(),
            (0, 0, 0, 2),
            "re-running unchanged sources changes nothing"
        );
        stage(&[("a", "one", "r2:a")]);
        assert_eq!(
            apply(),
            (0, 0, 1, 0),
            "same content from a new place merges provenance"
        );
        assert_eq!(
            one::<Vec<String>>(
                "SELECT skills.provenance_locations(provenance) FROM skills.skill WHERE name = 'a'"
            ),
            vec!["r1:a", "r2:a"]
        );
        stage(&[("b", "two, edited", "r1:b")]);
        assert_eq!(apply(), (0, 1, 0, 0), "changed file becomes a new version");
        assert_eq!(
            one::<i32>("SELECT version FROM skills.skill WHERE name = 'b'"),
            2
        );
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.skill"), 2);
        // r1:a now holds new content while r2:a keeps the old: a new skill, and r1:a leaves the old one.
        stage(&[("a", "one, edited", "r1:a")]);
        assert_eq!(apply(), (1, 0, 0, 0));
        assert_eq!(
            one::<Vec<String>>("SELECT skills.provenance_locations(provenance) FROM skills.skill WHERE instructions = 'one'"),
            vec!["r2:a"]
        );
    }

    #[pg_test(error = "no staging table pg_temp.skill_staging in this session")]
    fn apply_staging_without_staging_table() {
        apply();
    }

    // ---------------------------------------------------------------------------------------
    // The bm25 index
    // ---------------------------------------------------------------------------------------

    use pg_skills_kernels::rng::SplitMix64 as Rng;

    fn random_skills(rng: &mut Rng, n: usize) {
        for i in 0..n {
            let name = format!("{}-{i}", rng.words(1, 2).replace(' ', "-"));
            insert(&name, &rng.words(3, 15), &rng.words(0, 120));
        }
    }

    const DOC: &str = "ARRAY[name, description, instructions]";

    fn create_index(with: &str) {
        exec(&format!(
            "CREATE INDEX skill_bm25 ON skills.skill USING bm25 (({DOC})) {with}"
        ));
    }

    /// (id, operator value) in the order the query returns rows.
    fn ordered(query: &str, limit: &str) -> Vec<(i64, f64)> {
        let sql = format!(
            "SELECT id, {DOC} OPERATOR(skills.<&>) skills.bm25query({q}) FROM skills.skill \
             ORDER BY {DOC} OPERATOR(skills.<&>) skills.bm25query({q}) {limit}",
            q = quote(query)
        );
        id_scores(&sql)
    }

    fn plan(sql: &str) -> String {
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
    fn check_index_against_references(rng: &mut Rng, queries: usize, with_reference: bool) {
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

    #[pg_test]
    fn bm25_index_agrees_with_reference_and_seqscan() {
        without_index();
        let mut rng = Rng(20261130);
        random_skills(&mut rng, 300);
        create_index("WITH (append_pages = 1)");
        check_index_against_references(&mut rng, 20, true);
        // Inserts after the build go through the append area and its merges into segments.
        random_skills(&mut rng, 150);
        check_index_against_references(&mut rng, 20, true);
        // Updates leave dead versions in the index until VACUUM (which a pg_test cannot run), so
        // statistics differ from the reference until then (tests/ checks after VACUUM); index and
        // sequential scans still agree with each other.
        exec(
            "UPDATE skills.skill SET instructions = instructions || ' rust panic' WHERE id % 7 = 0",
        );
        check_index_against_references(&mut rng, 20, false);
    }

    #[pg_test]
    fn bm25_index_options_set_the_formula() {
        without_index();
        let mut rng = Rng(7);
        random_skills(&mut rng, 120);
        exec("SET LOCAL pg_skills.bm25_k1 = 1.2");
        exec("SET LOCAL pg_skills.bm25_b = 0.5");
        exec("SET LOCAL pg_skills.bm25_stemming = off");
        create_index("WITH (k1 = 1.2, b = 0.5, stemming = off)");
        check_index_against_references(&mut rng, 10, true);
    }

    #[pg_test]
    fn explain_shows_the_index_only_for_order_by() {
        without_index();
        let mut rng = Rng(3);
        random_skills(&mut rng, 50);
        create_index("");
        exec("ANALYZE skills.skill");
        let ordered_plan = plan(&format!(
            "SELECT id FROM skills.skill ORDER BY {DOC} OPERATOR(skills.<&>) skills.bm25query('rust panic') LIMIT 5"
        ));
        assert!(
            ordered_plan.contains("Index Scan using skill_bm25"),
            "{ordered_plan}"
        );
        let filtered_plan = plan("SELECT id FROM skills.skill WHERE name = 'x'");
        assert!(!filtered_plan.contains("skill_bm25"), "{filtered_plan}");
    }

    #[pg_test]
    fn bm25_index_category_filter_still_returns_k_rows() {
        without_index();
        let mut rng = Rng(11);
        random_skills(&mut rng, 200);
        exec("UPDATE skills.skill SET category = CASE WHEN id % 10 = 0 THEN 'data_ml'::skills.category ELSE 'testing' END");
        create_index("");
        let query = "'rust test python docker', categories => '{data_ml}', k => 15";
        let hits = search(query);
        let reference: i64 = one(
            "SELECT count(*) FROM skills.bm25_scan('rust test python docker', 15, ARRAY['data_ml'])",
        );
        assert_eq!(hits.len() as i64, reference);
        assert_eq!(
            hits.len(),
            15,
            "20 data_ml skills exist, most contain a query term"
        );
    }

    #[pg_test]
    fn bm25_index_degenerate_queries() {
        without_index();
        let mut rng = Rng(5);
        random_skills(&mut rng, 40);
        create_index("");
        assert!(search("''").is_empty());
        assert!(search("'the and of'").is_empty());
        let long = "rust docker ".repeat(9_000);
        exec("SET LOCAL pg_skills.max_query_size = '1MB'");
        assert!(!search(&quote(&long)).is_empty());
        // ORDER BY with a query that matches nothing still returns every row (score 0).
        exec("SET LOCAL enable_seqscan = off");
        let all = ordered("the and of", "");
        assert_eq!(all.len(), 40);
        assert!(all.iter().all(|r| r.1 == 0.0));
    }

    #[pg_test(error = "unrecognized parameter \"colour\"")]
    fn bm25_index_unknown_option() {
        without_index();
        create_index("WITH (colour = 1)");
    }

    #[pg_test(error = "value -1 out of bounds for option \"k1\"")]
    fn bm25_index_option_out_of_range() {
        without_index();
        create_index("WITH (k1 = -1)");
    }

    #[pg_test(error = "invalid bm25 index options: at least one field weight must be positive")]
    fn bm25_index_all_weights_zero() {
        without_index();
        create_index("WITH (name_weight = 0, description_weight = 0, instructions_weight = 0)");
    }

    #[pg_test(error = "skills.skill has no bm25 index")]
    fn bm25query_without_index() {
        without_index();
        exec("SELECT skills.bm25query('rust')");
    }

    #[pg_test(error = "a bm25 document has at most 3 fields, got 4")]
    fn bm25_index_rejects_wider_documents() {
        without_index();
        insert("a", "b", "c");
        exec("CREATE INDEX wide ON skills.skill USING bm25 ((ARRAY[name, description, instructions, name]))");
    }

    #[pg_test]
    fn bm25_index_rebuilds_with_reindex() {
        without_index();
        let mut rng = Rng(13);
        random_skills(&mut rng, 60);
        create_index("");
        let before = search("'rust panic docker', k => 5");
        exec("REINDEX INDEX skills.skill_bm25");
        assert_eq!(search("'rust panic docker', k => 5"), before);
    }

    #[pg_test]
    fn the_extension_ships_its_bm25_index() {
        assert_eq!(
            one::<String>("SELECT skills.bm25_index()::text"),
            "skills.skill_bm25"
        );
        let id = insert(
            "rust-panic-backtrace",
            "Find where a Rust program panicked",
            "RUST_BACKTRACE=1",
        );
        assert_eq!(
            search("'rust backtrace', k => 1").first().map(|h| h.0),
            Some(id)
        );
    }

    // ---- skill keys (skills.key, operators, the skeys index) ----

    use pg_skills_kernels::synthetic::{centres, clustered};

    const KEY_DIM: usize = 512;

    fn key_literal(values: &[f32]) -> String {
        let parts: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
        format!("'[{}]'::skills.key", parts.join(","))
    }

    fn unit(i: usize) -> Vec<f32> {
        let mut v = vec![0.0; KEY_DIM];
        v[i] = 1.0;
        v
    }

    /// A table of `n` clustered keys with a category 0..9; returns the query keys.
    fn key_table(n: usize, seed: u64) -> Vec<Vec<f32>> {
        exec(
            "CREATE TABLE key_test (id bigint PRIMARY KEY, category int NOT NULL, key skills.key)",
        );
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

    fn key_ids(sql: &str) -> Vec<(i64, f64)> {
        id_scores(sql)
    }

    fn nearest(op: &str, q: &[f32], filter: &str, limit: usize) -> Vec<(i64, f64)> {
        let q = key_literal(q);
        key_ids(&format!(
            "SELECT id, key OPERATOR(skills.{op}) {q} FROM key_test {filter} \
             ORDER BY key OPERATOR(skills.{op}) {q} LIMIT {limit}"
        ))
    }

    fn seqscan<T>(f: impl FnOnce() -> T) -> T {
        exec("SET LOCAL enable_indexscan = off");
        let out = f();
        exec("SET LOCAL enable_indexscan = on");
        out
    }

    #[pg_test]
    fn key_text_and_array_input_round_trip() {
        let mut v = vec![0.0f32; KEY_DIM];
        v[0] = 0.5;
        v[1] = -2.0;
        v[511] = 0.1;
        let text: String = one(&format!("SELECT {}::text", key_literal(&v)));
        assert!(text.starts_with("[0.5,-2,0,"), "{}", &text[..20]);
        assert!(text.ends_with(",0.1]"), "{}", &text[text.len() - 20..]);
        let again: String = one(&format!("SELECT '{text}'::skills.key::text"));
        assert_eq!(again, text);
        let dims: i32 = one(&format!("SELECT skills.key_dims({})", key_literal(&v)));
        assert_eq!(dims, 512);
        let from_array: String =
            one("SELECT (array_fill(0.25::real, ARRAY[512]))::skills.key::real[]::text");
        assert!(from_array.starts_with("{0.25,0.25"), "{from_array}");
        let norm: f64 =
            one("SELECT skills.key_norm(array_fill(0.5::float8, ARRAY[512])::skills.key)");
        assert!((norm - (512.0f64 * 0.25).sqrt()).abs() < 1e-9, "{norm}");
    }

    #[pg_test(error = "a skill key has 512 dimensions, not 3")]
    fn key_wrong_dimensions_rejected() {
        exec("SELECT '[1,2,3]'::skills.key");
    }

    #[pg_test(error = "NaN in dimension 1 of a skill key")]
    fn key_nan_rejected() {
        exec("SELECT (ARRAY['NaN'::real] || array_fill(1::real, ARRAY[511]))::skills.key");
    }

    #[pg_test(error = "infinity in dimension 2 of a skill key")]
    fn key_infinity_rejected() {
        exec("SELECT (ARRAY[1::real, 'Infinity'::real] || array_fill(1::real, ARRAY[510]))::skills.key");
    }

    #[pg_test(error = "value 70000 in dimension 1 of a skill key is out of range")]
    fn key_beyond_f16_rejected() {
        exec("SELECT (ARRAY[70000::real] || array_fill(1::real, ARRAY[511]))::skills.key");
    }

    #[pg_test(error = "a skill key must not be the zero vector")]
    fn key_zero_rejected() {
        exec("SELECT array_fill(0::real, ARRAY[512])::skills.key");
    }

    #[pg_test(error = "invalid input syntax for type skills.key: \"abc\" is not a number")]
    fn key_garbage_rejected() {
        exec("SELECT '[abc, 1]'::skills.key");
    }

    #[pg_test(error = "a skill key cannot contain NULL")]
    fn key_null_element_rejected() {
        exec("SELECT (ARRAY[NULL::real] || array_fill(1::real, ARRAY[511]))::skills.key");
    }

    #[pg_test]
    fn key_operators_follow_pgvector() {
        let (a, b) = (key_literal(&unit(0)), {
            let mut v = unit(0);
            v[1] = 1.0;
            key_literal(&v)
        });
        let ip: f64 = one(&format!("SELECT {a} OPERATOR(skills.<#>) {b}"));
        assert_eq!(ip, -1.0);
        let cos: f64 = one(&format!("SELECT {a} OPERATOR(skills.<=>) {b}"));
        assert!((cos - (1.0 - 1.0 / 2f64.sqrt())).abs() < 1e-3, "{cos}");
        let l2: f64 = one(&format!("SELECT {a} OPERATOR(skills.<->) {b}"));
        assert!((l2 - 1.0).abs() < 1e-6, "{l2}");
    }

    #[pg_test]
    fn key_index_recall_and_exactness_at_full_breadth() {
        let queries = key_table(3000, 5);
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key)");
        let lists: i32 = one("SELECT lists FROM skills.key_index_stats('key_test_ip')");
        assert_eq!(lists, 55, "√3000 lists");
        let entries: i64 = one("SELECT entries FROM skills.key_index_stats('key_test_ip')");
        assert_eq!(entries, 3000);
        let sql = format!(
            "SELECT id FROM key_test ORDER BY key OPERATOR(skills.<#>) {} LIMIT 10",
            key_literal(&queries[0])
        );
        assert!(
            plan(&sql).contains("Index Scan using key_test_ip"),
            "{}",
            plan(&sql)
        );

        let mut found = 0;
        for q in &queries {
            let exact = seqscan(|| nearest("<#>", q, "", 10));
            let approx = nearest("<#>", q, "", 10);
            assert_eq!(approx.len(), 10);
            // Distances the index orders by are the operator's, so the rows come back sorted.
            assert!(approx.windows(2).all(|w| w[0].1 <= w[1].1), "{approx:?}");
            let truth: std::collections::HashSet<i64> = exact.iter().map(|r| r.0).collect();
            found += approx.iter().filter(|r| truth.contains(&r.0)).count();
            let recall: f64 = one(&format!(
                "SELECT skills.key_recall('key_test_ip', {}, 10)",
                key_literal(q)
            ));
            assert!((0.0..=1.0).contains(&recall));
        }
        let recall = found as f64 / (queries.len() * 10) as f64;
        assert!(recall >= 0.95, "recall@10 {recall} at the default breadth");

        exec("SET LOCAL pg_skills.key_probes = 55");
        for q in &queries[..5] {
            let exact = seqscan(|| nearest("<#>", q, "", 10));
            assert_eq!(
                nearest("<#>", q, "", 10),
                exact,
                "every list read = exact search"
            );
            let recall: f64 = one(&format!(
                "SELECT skills.key_recall('key_test_ip', {}, 10)",
                key_literal(q)
            ));
            assert_eq!(recall, 1.0);
        }
    }

    #[pg_test]
    fn key_index_cosine_and_l2_classes_agree_with_seqscan() {
        let queries = key_table(600, 8);
        for (class, op) in [
            ("skills.key_cosine_ops", "<=>"),
            ("skills.key_l2_ops", "<->"),
        ] {
            exec(&format!(
                "CREATE INDEX key_test_m ON key_test USING skeys (key {class}) WITH (lists = 8)"
            ));
            exec("SET LOCAL pg_skills.key_probes = 8");
            for q in &queries[..4] {
                let exact = seqscan(|| nearest(op, q, "", 10));
                assert_eq!(nearest(op, q, "", 10), exact, "{class}");
            }
            let metric: String = one("SELECT metric FROM skills.key_index_stats('key_test_m')");
            assert_eq!(metric, if op == "<=>" { "cosine" } else { "l2" });
            exec("DROP INDEX key_test_m");
        }
    }

    #[pg_test]
    fn key_index_sees_inserts_and_hides_deleted_rows() {
        let queries = key_table(1000, 13);
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key) WITH (lists = 10)");
        // New rows go into lists; an update is a delete plus an insert.
        let extra = clustered(&centres(40, KEY_DIM, 13), KEY_DIM, 300, 99);
        for (j, k) in extra.chunks_exact(KEY_DIM).enumerate() {
            exec(&format!(
                "INSERT INTO key_test VALUES ({}, 0, {})",
                5000 + j,
                key_literal(k)
            ));
        }
        exec("DELETE FROM key_test WHERE id % 3 = 0");
        exec("UPDATE key_test SET key = key WHERE id % 7 = 0");
        exec("SET LOCAL pg_skills.key_probes = 10");
        for q in &queries[..6] {
            let exact = seqscan(|| nearest("<#>", q, "", 15));
            let got = nearest("<#>", q, "", 15);
            assert_eq!(got, exact);
            assert!(got.iter().all(|r| r.0 % 3 != 0));
        }
    }

    #[pg_test]
    fn key_iterative_scan_fills_filtered_queries() {
        let queries = key_table(2000, 17);
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key) WITH (lists = 40)");
        exec("ANALYZE key_test");
        exec("SET LOCAL pg_skills.key_probes = 1");
        for q in &queries[..5] {
            let sql = format!(
                "SELECT id FROM key_test WHERE category = 3 ORDER BY key OPERATOR(skills.<#>) {} LIMIT 10",
                key_literal(q)
            );
            let shown = plan(&sql);
            assert!(shown.contains("Index Scan using key_test_ip"), "{shown}");
            // One category in ten and one list in forty: the first list rarely holds 10 of them.
            let got = nearest("<#>", q, "WHERE category = 3", 10);
            assert_eq!(
                got.len(),
                10,
                "a filtered query returns k rows when k rows match"
            );
        }
        exec("SET LOCAL pg_skills.key_max_probes = 1");
        let capped = nearest("<#>", &queries[0], "WHERE category = 3", 10);
        let per_list: i64 = one("SELECT largest_list FROM skills.key_index_stats('key_test_ip')");
        assert!(
            capped.len() as i64 <= per_list,
            "max_probes bounds the scan"
        );
    }

    #[pg_test]
    fn key_index_built_empty_takes_inserts() {
        exec(
            "CREATE TABLE key_test (id bigint PRIMARY KEY, category int NOT NULL, key skills.key)",
        );
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key)");
        let lists: i32 = one("SELECT lists FROM skills.key_index_stats('key_test_ip')");
        assert_eq!(lists, 1);
        for i in 0..20 {
            exec(&format!(
                "INSERT INTO key_test VALUES ({i}, 0, {})",
                key_literal(&unit(i))
            ));
        }
        exec("INSERT INTO key_test VALUES (100, 0, NULL)");
        let got = nearest("<#>", &unit(7), "", 3);
        assert_eq!(got[0], (7, -1.0));
        assert_eq!(got.len(), 3);
    }

    #[pg_test(error = "value -1 out of bounds for option \"lists\"")]
    fn key_index_lists_out_of_range() {
        key_table(10, 1);
        exec("CREATE INDEX ON key_test USING skeys (key) WITH (lists = -1)");
    }

    #[pg_test(error = "\"skill_bm25\" is not a skeys index")]
    fn key_stats_of_another_index() {
        exec("SELECT * FROM skills.key_index_stats('skills.skill_bm25')");
    }

    // ---------------------------------------------------------------------------------------
    // Encoder, keys, the embedding queue, semantic search, the compressor. These need the model
    // (`./x model`); without it they pass after saying SKIP.
    // ---------------------------------------------------------------------------------------

    fn have_model() -> bool {
        let dir: String = one("SELECT current_setting('pg_skills.model_dir')");
        let ok = std::path::Path::new(&dir)
            .join("model.safetensors")
            .exists();
        if !ok {
            eprintln!("SKIP: no encoder model in {dir} (run ./x model)");
        }
        ok
    }

    fn demo_skills() -> Vec<i64> {
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

    #[pg_test]
    fn embed_matches_the_golden_values_and_keys_are_unit_length() {
        if !have_model() {
            return;
        }
        let v: Vec<f32> = one("SELECT skills.embed('This is an example sentence')");
        assert_eq!(v.len(), 384);
        for (got, want) in v.iter().zip([0.067657f32, 0.063496, 0.048713, 0.079305]) {
            assert!((got - want).abs() < 1e-4, "{:?}", &v[..4]);
        }
        let (dims, norm, tail): (i32, f64, f64) = (
            one("SELECT skills.key_dims(skills.query_key('deploy a service'))"),
            one("SELECT skills.key_norm(skills.query_key('deploy a service'))"),
            one("SELECT sum(abs(x))::float8 FROM unnest((skills.query_key('deploy a service')::real[])[385:512]) AS x"),
        );
        assert_eq!(dims, 512);
        assert!((norm - 1.0).abs() < 1e-3);
        assert_eq!(tail, 0.0, "a query key is the padded embedding");
    }

    #[pg_test]
    fn new_and_changed_skills_are_queued_and_embed_pending_keys_them() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        assert_eq!(one::<i64>("SELECT queued FROM skills.embedder_status"), 5);
        assert_eq!(one::<i64>("SELECT skills.embed_pending()"), 5);
        assert_eq!(one::<i64>("SELECT queued FROM skills.embedder_status"), 0);
        assert_eq!(one::<i64>("SELECT done FROM skills.embedder_status"), 5);
        // Nothing left: a second call does nothing.
        assert_eq!(one::<i64>("SELECT skills.embed_pending()"), 0);
        // A category edit keeps the key; a content edit queues the skill again.
        exec(&format!(
            "UPDATE skills.skill SET category = 'testing' WHERE id = {}",
            ids[1]
        ));
        assert_eq!(one::<i64>("SELECT queued FROM skills.embedder_status"), 0);
        exec(&format!(
            "UPDATE skills.skill SET instructions = 'Use startupProbe too.' WHERE id = {}",
            ids[1]
        ));
        assert_eq!(one::<i64>("SELECT queued FROM skills.embedder_status"), 1);
        assert_eq!(
            one::<i64>("SELECT done FROM skills.embedder_status"),
            4,
            "the stale key does not count"
        );
        assert_eq!(
            one::<i64>("SELECT skills.embed_pending(max_skills => 1)"),
            1
        );
        assert_eq!(
            one::<i64>("SELECT embedded_total FROM skills.embedder_status"),
            6
        );
        // Deleting a skill deletes its key.
        exec(&format!("DELETE FROM skills.skill WHERE id = {}", ids[0]));
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.skill_key"), 4);
    }

    #[pg_test]
    fn semantic_search_ranks_by_key_and_the_index_agrees_with_the_scan() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'my program crashed with a panic, where did it happen'";
        let exact = search(&format!("{q}, k => 3, method => 'semantic'"));
        assert_eq!(exact.len(), 3);
        assert_eq!(exact[0].0, ids[2], "{exact:?}");
        assert!(exact.windows(2).all(|w| w[0].1 >= w[1].1));
        let filtered = search(&format!(
            "{q}, categories => '{{devops_infra}}', k => NULL, method => 'semantic'"
        ));
        let devops: i64 = one("SELECT count(*) FROM skills.skill WHERE category = 'devops_infra'");
        assert_eq!(filtered.len() as i64, devops);
        // With an skeys index that reads every list, the same rows and scores.
        exec("CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0)");
        exec("SET LOCAL pg_skills.key_probes = 65535");
        exec("SET LOCAL enable_seqscan = off");
        let plan: String = Spi::connect(|c| {
            c.select(
                &format!("EXPLAIN (COSTS OFF) SELECT skill_id FROM skills.skill_key ORDER BY k0 OPERATOR(skills.<#>) skills.query_key({q}) LIMIT 3"),
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<String>(1).unwrap().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
        });
        assert!(plan.contains("skill_key_k0"), "{plan}");
        let indexed = search(&format!("{q}, k => 3, method => 'semantic'"));
        assert_eq!(indexed.len(), exact.len());
        for (a, b) in indexed.iter().zip(&exact) {
            assert_eq!(a.0, b.0);
            assert!((a.1 - b.1).abs() < 1e-6);
        }
    }

    #[pg_test]
    fn a_trained_compressor_is_stored_checked_and_rewrites_keys() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        exec("CREATE TEMP TABLE pairs (task text, skill_id bigint)");
        for (i, id) in ids.iter().enumerate() {
            for variant in ["how do I", "help me", "I need to", "show me how to"] {
                exec(&format!(
                    "INSERT INTO pairs VALUES ('{variant} handle case {i} of my project', {id})"
                ));
            }
        }
        let version: i32 = one(
            "SELECT skills.train_compressor('SELECT task, skill_id FROM pairs', hidden => 16, epochs => 3)",
        );
        let (active, sha, report): (bool, String, pgrx::JsonB) = (
            one(&format!(
                "SELECT active FROM skills.compressor WHERE version = {version}"
            )),
            one(&format!(
                "SELECT sha256 FROM skills.compressor WHERE version = {version}"
            )),
            one(&format!(
                "SELECT training FROM skills.compressor WHERE version = {version}"
            )),
        );
        assert!(active);
        assert_eq!(sha.len(), 64);
        assert_eq!(report.0["pairs"], 20);
        assert!(
            report.0["validation_mrr"].as_f64().unwrap()
                >= report.0["validation_mrr_raw"].as_f64().unwrap()
        );
        assert_eq!(
            one::<i64>(&format!(
                "SELECT count(*) FROM skills.skill_key WHERE compressor_version = {version}"
            )),
            5,
            "every key rewritten with the new compressor"
        );
        assert_eq!(one::<i64>("SELECT done FROM skills.embedder_status"), 5);
        // Keys equal compress(embedding) of the stored embedding.
        let off: i64 = one(
            "SELECT count(*) FROM skills.skill_key WHERE (k0 OPERATOR(skills.<=>) skills.key(skills.compress(embedding))) > 1e-6",
        );
        assert_eq!(off, 0);
        // Weights that do not match their sha256 are refused on load (SQLSTATE XX001).
        exec(&format!(
            "UPDATE skills.compressor SET sha256 = repeat('0', 64) WHERE version = {version}"
        ));
        exec(
            "DO $$ BEGIN PERFORM skills.compress(skills.embed('x')); RAISE EXCEPTION 'not refused'; \
             EXCEPTION WHEN data_corrupted THEN NULL; END $$",
        );
    }

    #[pg_test(error = "the pairs name skill 999999, which does not exist")]
    fn training_pairs_must_name_skills() {
        if !have_model() {
            panic!("the pairs name skill 999999, which does not exist");
        }
        demo_skills();
        exec("SELECT skills.train_compressor('SELECT ''query '' || s, 999999::bigint FROM generate_series(1, 4) AS s')");
    }

    #[pg_test]
    fn a_missing_model_is_a_clear_error_naming_the_setup_command() {
        exec("SET LOCAL pg_skills.model_dir = '/nonexistent/pg_skills-model'");
        exec(
            "DO $$ DECLARE m text; h text; BEGIN \
                 PERFORM skills.embed('x'); RAISE EXCEPTION 'not refused'; \
             EXCEPTION WHEN undefined_file THEN \
                 GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, h = PG_EXCEPTION_HINT; \
                 IF m NOT LIKE 'model file /nonexistent/pg_skills-model/config.json is missing%' \
                    OR h NOT LIKE '%./x model%' THEN \
                     RAISE EXCEPTION 'unexpected error: % (hint: %)', m, h; \
                 END IF; \
             END $$",
        );
    }

    // ---------------------------------------------------------------------------------------
    // KeyOpt: recorded runs, rounds, the reading. Need the model (task keys).
    // ---------------------------------------------------------------------------------------

    /// Runs `statement` and checks it fails with `condition` (a PL/pgSQL condition name) and a
    /// message LIKE `like`.
    fn assert_refused(statement: &str, condition: &str, like: &str) {
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

    fn ids_of(rows: &[(i64, f64)]) -> Vec<i64> {
        rows.iter().map(|r| r.0).collect()
    }

    /// 24 runs in which git-bisect (ids[4]) passes on "tests fail after a merge" tasks and the
    /// other skills fail; 4 source questions.
    fn record_bisect_runs(ids: &[i64]) {
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

    #[pg_test]
    fn keyopt_without_rounds_or_pairs_ranks_like_semantic() {
        if !have_model() {
            return;
        }
        demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'tests started failing after a merge, which commit broke them'";
        let semantic = search(&format!("{q}, k => 5, method => 'semantic'"));
        let keyopt = search(&format!("{q}, k => 5, method => 'keyopt'"));
        assert_eq!(ids_of(&keyopt), ids_of(&semantic));
        for (a, b) in keyopt.iter().zip(&semantic) {
            assert!((a.1 - b.1).abs() < 1e-6, "{keyopt:?} vs {semantic:?}");
        }
        // A fit with only tied runs (everything failed) gives a round of exact zeros.
        let ids: Vec<i64> = ids_of(&semantic);
        exec(&format!(
            "SELECT skills.record_run('a task nothing helped with', '[{{\"skill_id\": {}, \"passed\": false}}, {{\"skill_id\": {}, \"passed\": false}}]')",
            ids[0], ids[1]
        ));
        let round: i32 = one("SELECT skills.fit()");
        assert_eq!(
            one::<i64>(&format!(
                "SELECT count(*) FROM skills.keyopt_skill WHERE round = {round} AND beta <> 0"
            )),
            0
        );
        assert_eq!(
            one::<pgrx::JsonB>(&format!(
                "SELECT settings FROM skills.keyopt_round WHERE round = {round}"
            ))
            .0["use_dk"],
            serde_json::json!(false)
        );
        let after = search(&format!("{q}, k => 5, method => 'keyopt'"));
        assert_eq!(ids_of(&after), ids_of(&semantic));
        for (a, b) in after.iter().zip(&semantic) {
            assert!(
                (a.1 - b.1).abs() < 1e-6,
                "ρ = 1 and no correction: {after:?}"
            );
        }
    }

    #[pg_test]
    fn recorded_outcomes_change_the_ranking_and_rounds_roll_back() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'my tests fail since I merged a branch'";
        let before = search(&format!("{q}, k => 5, method => 'keyopt'"));
        assert_ne!(
            before[0].0, ids[4],
            "git-bisect is not the semantic favourite: {before:?}"
        );
        let empty: i32 = one("SELECT skills.fit()");
        record_bisect_runs(&ids);
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.event"), 24);
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.event_arm"), 120);
        assert_eq!(
            one::<i32>("SELECT round FROM skills.event ORDER BY id LIMIT 1"),
            empty,
            "a run names the round that served it"
        );
        let round: i32 = one("SELECT skills.fit()");
        assert_eq!(
            one::<i32>("SELECT round FROM skills.keyopt_round WHERE active"),
            round
        );
        let report: pgrx::JsonB = one(&format!(
            "SELECT report FROM skills.keyopt_round WHERE round = {round}"
        ));
        assert_eq!(report.0["discordant_groups"], serde_json::json!(24));
        assert!(report.0["chosen"].is_object(), "{}", report.0);
        let after = search(&format!("{q}, k => 5, method => 'keyopt'"));
        assert_eq!(after[0].0, ids[4], "{after:?}");
        let (score, beta): (f64, f64) = (
            one(&format!(
                "SELECT (skills.keyopt_score({q}, {})).score",
                ids[4]
            )),
            one(&format!(
                "SELECT (skills.keyopt_score({q}, {})).beta",
                ids[4]
            )),
        );
        assert!(beta > 0.0);
        assert!((score - after[0].1).abs() < 1e-5, "{score} vs {after:?}");
        // A round stored without publishing does not change what readers see.
        let unpublished: i32 = one("SELECT skills.keyopt_fit('test', false)");
        assert!(unpublished > round);
        assert_eq!(
            one::<i32>("SELECT round FROM skills.keyopt_round WHERE active"),
            round
        );
        // Roll back to the empty round: the semantic ranking again; then forward.
        exec(&format!("SELECT skills.use_round({empty})"));
        assert_eq!(
            ids_of(&search(&format!("{q}, k => 5, method => 'keyopt'"))),
            ids_of(&before)
        );
        exec(&format!("SELECT skills.use_round({round})"));
        assert_eq!(
            search(&format!("{q}, k => 5, method => 'keyopt'"))[0].0,
            ids[4]
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.keyopt_round WHERE active"),
            1
        );
        assert_refused(
            "PERFORM skills.use_round(999)",
            "invalid_parameter_value",
            "no KeyOpt round 999",
        );
    }

    #[pg_test]
    fn a_token_budget_or_no_k_does_not_widen_the_keyopt_pool() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        // Twelve Kubernetes skills: git-bisect is far outside the semantic top 10 below.
        for i in 0..12 {
            exec(&format!(
                "INSERT INTO skills.skill (name, description, instructions) VALUES \
                 ('k8s-probe-{i}', 'Kubernetes liveness and readiness probes, variant {i}', \
                  'Probe endpoint /healthz-{i} with a {i} second period.')"
            ));
        }
        exec("SELECT skills.embed_pending()");
        record_bisect_runs(&ids);
        exec("SELECT skills.fit()");
        let bisect = ids[4];
        let q = "'configure readiness probes for my kubernetes deployment'";
        assert!(
            one::<f64>(&format!("SELECT (skills.keyopt_score({q}, {bisect})).beta")) > 0.5,
            "git-bisect has a large β after its runs"
        );
        let top10 = ids_of(&search(&format!("{q}, k => 10, method => 'keyopt'")));
        assert!(!top10.contains(&bisect), "{top10:?}");
        // A budget makes the search read deeper; the pool, and so the answer, stay the same.
        let two = ids_of(&search(&format!("{q}, k => 2, method => 'keyopt'")));
        let budgeted = ids_of(&search(&format!(
            "{q}, k => 2, token_budget => 1000000, method => 'keyopt'"
        )));
        assert_eq!(budgeted, two);
        // No k: the pool's ranking first, the rest after it.
        let all = ids_of(&search(&format!("{q}, k => NULL, method => 'keyopt'")));
        assert_eq!(all[..10], top10[..]);
        assert!(all[10..].contains(&bisect), "{all:?}");
        let block: String = one(&format!(
            "SELECT skills.render_context({q}, k => 2, token_budget => 100000)"
        ));
        assert!(!block.contains("## Skill: git-bisect"), "{block}");
    }

    #[pg_test]
    fn a_token_budget_or_no_k_does_not_reorder_hybrid() {
        if !have_model() {
            return;
        }
        // 180 skills that all mention caching, on 12 topics: both of hybrid's lists run past
        // their depth of 100, and skills strong in one list sit deep in the other.
        let topics = [
            "HTTP cache headers for a web service",
            "Redis cache eviction policies",
            "CPU cache misses in a tight loop",
            "browser cache busting for static assets",
            "the pip download cache in CI",
            "DNS cache poisoning in a security review",
            "Docker layer cache when building images",
            "memoization of a recursive function",
            "cache invalidation after a database write",
            "a CDN edge cache for images",
            "the query plan cache of PostgreSQL",
            "Gradle build cache across machines",
        ];
        for i in 0..180 {
            let topic = topics[i % topics.len()];
            let repeats = "cache ".repeat(1 + i % 7);
            exec(&format!(
                "INSERT INTO skills.skill (name, description, instructions) VALUES \
                 ('cache-{i}', 'Notes {i} on {topic}', 'Steps {i}: {repeats} then check {topic}.')"
            ));
        }
        exec("SELECT skills.embed_pending()");
        let q = "'invalidate the cache of a web service after a write'";
        let top5 = ids_of(&search(&format!("{q}, k => 5, method => 'hybrid'")));
        assert_eq!(top5.len(), 5);
        let budgeted = ids_of(&search(&format!(
            "{q}, k => 5, token_budget => 1000000, method => 'hybrid'"
        )));
        assert_eq!(budgeted, top5, "a budget reads deeper; the first five stay");
        let all = ids_of(&search(&format!("{q}, k => NULL, method => 'hybrid'")));
        assert_eq!(all.len(), 180, "every skill, each once");
        assert_eq!(all[..5], top5[..], "no k: the pool first");
        let top100 = ids_of(&search(&format!("{q}, k => 100, method => 'hybrid'")));
        assert_eq!(all[..100], top100[..]);
    }

    #[pg_test]
    fn a_relevance_function_replaces_r_in_readings_and_fits() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        // A stand-in cross-encoder with an opinion of its own: rust-backtrace is relevant to
        // everything, the others by a small score (1e-4 per id: below 1 for any id tests reach,
        // whatever other tests inserted before).
        exec(
            "CREATE FUNCTION public.stub_cross_encoder(query text, skill_ids bigint[]) \
             RETURNS TABLE (skill_id bigint, score double precision) LANGUAGE sql STABLE AS $$ \
                 SELECT s.id, CASE WHEN s.name = 'rust-backtrace' THEN 1.0 ELSE 0.0001 * s.id END \
                 FROM skills.skill AS s WHERE s.id = ANY (skill_ids) $$",
        );
        exec(
            "CREATE FUNCTION public.forgetful_cross_encoder(query text, skill_ids bigint[]) \
             RETURNS TABLE (skill_id bigint, score double precision) LANGUAGE sql STABLE AS $$ \
                 SELECT skill_ids[1], 0.5 $$",
        );
        let q = "'my tests fail since I merged a branch'";
        let semantic = search(&format!("{q}, k => 5, method => 'semantic'"));
        assert_ne!(semantic[0].0, ids[2], "{semantic:?}");
        // No round: the setting reranks the semantic pool with the function's scores.
        exec("SET pg_skills.relevance_function = 'public.stub_cross_encoder'");
        let reranked: Vec<(i64, f64)> = id_scores(&format!(
            "SELECT id, semantic FROM skills.search({q}, k => 5, method => 'keyopt')"
        ));
        assert_eq!(reranked[0], (ids[2], 1.0), "{reranked:?}");
        for (id, r) in &reranked[1..] {
            assert!((r - 0.0001 * *id as f64).abs() < 1e-6, "{reranked:?}");
        }
        // A fit uses it for r and records it; readings of the round keep using it.
        record_bisect_runs(&ids);
        let round: i32 = one("SELECT skills.fit()");
        assert_eq!(
            one::<String>(&format!(
                "SELECT relevance_function FROM skills.keyopt_rounds WHERE round = {round}"
            )),
            "public.stub_cross_encoder(text,bigint[])"
        );
        // The round table only says which function the round needs: with the setting reset
        // (or naming another function) its readings are refused, not run.
        exec("RESET pg_skills.relevance_function");
        assert_refused(
            &format!("PERFORM skills.keyopt_score({q}, {})", ids[2]),
            "object_not_in_prerequisite_state",
            "KeyOpt round % was fitted with the relevance function public.stub_cross_encoder(text,bigint[]), which pg_skills.relevance_function does not name (it names none)",
        );
        exec("SET pg_skills.relevance_function = 'public.stub_cross_encoder'");
        let rho: f64 = one(&format!(
            "SELECT rho::float8 FROM skills.keyopt_round WHERE round = {round}"
        ));
        let relevance: f64 = one(&format!(
            "SELECT (skills.keyopt_score({q}, {})).relevance",
            ids[2]
        ));
        assert!(
            (relevance - rho).abs() < 1e-5,
            "ρ·r with r = 1: {relevance} vs ρ {rho}"
        );
        // Errors: a setting naming no function, a function that skips ids, a dropped function.
        exec("SET pg_skills.relevance_function = 'public.no_such_ranker'");
        assert_refused(
            "PERFORM skills.fit()",
            "undefined_function",
            "pg_skills.relevance_function names no function public.no_such_ranker(text, bigint[])",
        );
        exec("SET pg_skills.relevance_function = 'public.forgetful_cross_encoder'");
        assert_refused(
            "PERFORM skills.fit()",
            "data_exception",
            "relevance function public.forgetful_cross_encoder(text,bigint[]) returned no score for skill %",
        );
        exec("SET pg_skills.relevance_function = 'public.stub_cross_encoder'");
        exec("DROP FUNCTION public.stub_cross_encoder(text, bigint[])");
        assert_refused(
            &format!("PERFORM * FROM skills.search({q}, k => 3)"),
            "undefined_function",
            "pg_skills.relevance_function names no function public.stub_cross_encoder(text, bigint[])",
        );
        exec("RESET pg_skills.relevance_function");
    }

    #[pg_test]
    fn record_run_validates_arms_and_flags_stale_versions() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        assert_refused(
            "PERFORM skills.record_run('t', '[{\"skill_id\": 999999, \"passed\": true}]')",
            "foreign_key_violation",
            "arm 1: skill 999999 does not exist",
        );
        assert_refused(
            &format!(
                "PERFORM skills.record_run('t', '[{{\"skill_id\": {}}}]')",
                ids[0]
            ),
            "invalid_parameter_value",
            "arm 1 is malformed%",
        );
        assert_refused(
            "PERFORM skills.record_run('t', '[]')",
            "invalid_parameter_value",
            "arms must be a non-empty JSON array",
        );
        assert_refused(
            &format!(
                "PERFORM skills.record_run('t', '[{{\"skill_id\": {0}, \"passed\": true}}, {{\"skill_id\": {0}, \"passed\": false}}]')",
                ids[0]
            ),
            "unique_violation",
            "arm 2: skill % appears twice in one run",
        );
        // Served at version 1, changed since: refused, or recorded stale on request.
        exec(&format!(
            "UPDATE skills.skill SET instructions = 'Use conftest.py and scope=module.' WHERE id = {}",
            ids[0]
        ));
        let served = format!(
            "'[{{\"skill_id\": {}, \"passed\": true, \"version\": 1}}, {{\"skill_id\": {}, \"passed\": false}}]'",
            ids[0], ids[1]
        );
        assert_refused(
            &format!("PERFORM skills.record_run('write fixtures', {served})"),
            "object_not_in_prerequisite_state",
            "arm 1: skill % changed since it was served (served version 1, now version 2)",
        );
        exec(&format!(
            "SELECT skills.record_run('write fixtures', {served}, allow_stale => true)"
        ));
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.event_arm WHERE stale"),
            1
        );
        // The fit skips the stale arm: one arm left, no pair.
        exec("SELECT skills.embed_pending()");
        let round: i32 = one("SELECT skills.fit()");
        let report: pgrx::JsonB = one(&format!(
            "SELECT report FROM skills.keyopt_round WHERE round = {round}"
        ));
        assert_eq!(report.0["arms"], serde_json::json!(1), "{}", report.0);
        assert_eq!(report.0["discordant_groups"], serde_json::json!(0));
    }

    #[pg_test]
    fn keyopt_through_the_key_index_agrees_with_the_exact_scan() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        record_bisect_runs(&ids);
        exec("SELECT skills.fit()");
        let queries = [
            "'my tests fail since I merged a branch'",
            "'slow postgres query'",
            "'kubernetes pod restarts'",
        ];
        let exact: Vec<Vec<(i64, f64)>> = queries
            .iter()
            .map(|q| search(&format!("{q}, k => 3, method => 'keyopt'")))
            .collect();
        let all = search(&format!("{}, k => NULL, method => 'keyopt'", queries[0]));
        assert_eq!(all.len(), 5, "k => NULL scores every keyed skill");
        exec("CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0)");
        exec("CREATE INDEX event_task_key ON skills.event USING skeys (task_key)");
        exec("SET LOCAL pg_skills.key_probes = 65535");
        exec("SET LOCAL enable_seqscan = off");
        for (q, want) in queries.iter().zip(&exact) {
            let got = search(&format!("{q}, k => 3, method => 'keyopt'"));
            assert_eq!(ids_of(&got), ids_of(want), "{q}");
            for (a, b) in got.iter().zip(want) {
                assert!((a.1 - b.1).abs() < 1e-5, "{q}: {got:?} vs {want:?}");
            }
        }
        let filtered = search(&format!(
            "{}, categories => '{{devops_infra}}', k => 3, method => 'keyopt'",
            queries[2]
        ));
        let devops: i64 = one("SELECT count(*) FROM skills.skill WHERE category = 'devops_infra'");
        assert_eq!(filtered.len() as i64, devops.min(3));
    }

    // ---------------------------------------------------------------------------------------
    // The FastAdapt request (issue 7): limits, parts, hybrid, graph, skilltrace, context.
    // ---------------------------------------------------------------------------------------

    /// (id, score, tokens) of a skills.search call.
    fn served(sql_args: &str) -> Vec<(i64, f64, i32)> {
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
    fn budget_corpus() -> Vec<i64> {
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

    #[pg_test]
    fn token_budget_and_min_score_serve_greedily_in_rank_order() {
        budget_corpus();
        let all = served("'rust borrow', method => 'bm25'");
        assert_eq!(all.len(), 12);
        for budget in [0, 50, 120, 400, 1000, 5000] {
            for k in [None, Some(1), Some(3), Some(20)] {
                let k_arg = k.map_or("NULL".to_string(), |k: usize| k.to_string());
                let got = served(&format!(
                    "'rust borrow', k => {k_arg}, token_budget => {budget}, method => 'bm25'"
                ));
                // Greedy over the full ranking: skip what does not fit, stop at k.
                let mut left = budget as i64;
                let mut want = Vec::new();
                for row in &all {
                    if k.is_some_and(|k| want.len() >= k) {
                        break;
                    }
                    if row.2 as i64 <= left {
                        left -= row.2 as i64;
                        want.push(*row);
                    }
                }
                assert_eq!(got, want, "budget {budget}, k {k:?}");
                assert!(got.iter().map(|r| r.2 as i64).sum::<i64>() <= budget as i64);
            }
        }
        let threshold = all[4].1;
        let above = served(&format!(
            "'rust borrow', min_score => {threshold}, method => 'bm25'"
        ));
        assert_eq!(
            above,
            all.iter()
                .copied()
                .filter(|r| r.1 >= threshold)
                .collect::<Vec<_>>()
        );
        assert!(served("'rust borrow', min_score => 1e9, method => 'bm25'").is_empty());
    }

    #[pg_test]
    fn bm25_rows_carry_their_parts_and_tokens() {
        let ids = budget_corpus();
        let row: (Option<f64>, Option<f64>, Option<f64>, Option<f64>, f64, i32) = Spi::connect(
            |c| {
                let r = c
                .select(
                    "SELECT bm25, semantic, graph, beta, score, tokens FROM skills.search('rust', k => 1, method => 'bm25')",
                    None,
                    &[],
                )
                .unwrap()
                .first();
                (
                    r.get(1).unwrap(),
                    r.get(2).unwrap(),
                    r.get(3).unwrap(),
                    r.get(4).unwrap(),
                    r.get::<f64>(5).unwrap().unwrap(),
                    r.get::<i32>(6).unwrap().unwrap(),
                )
            },
        );
        assert_eq!(row.0, Some(row.4));
        assert_eq!((row.1, row.2, row.3), (None, None, None));
        let max_tokens: i32 = one(&format!(
            "SELECT max(token_count) FROM skills.skill WHERE id = ANY (ARRAY{ids:?})"
        ));
        assert!(row.5 > 0 && row.5 <= max_tokens);
    }

    #[pg_test(error = "token_budget must be at least 0, got -1")]
    fn negative_budget_rejected() {
        served("'x', token_budget => -1, method => 'bm25'");
    }

    #[pg_test(error = "min_score must be a number, got NaN")]
    fn nan_threshold_rejected() {
        served("'x', min_score => 'NaN', method => 'bm25'");
    }

    /// The hint of the error `sql` raises (NULL when it does not raise).
    fn hint_of(sql: &str) -> String {
        exec(
            "CREATE OR REPLACE FUNCTION pg_temp.hint_of(q text) RETURNS text LANGUAGE plpgsql AS $$ \
             DECLARE h text; BEGIN EXECUTE q; RETURN NULL; \
             EXCEPTION WHEN OTHERS THEN GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT; RETURN h; END $$",
        );
        one(&format!("SELECT pg_temp.hint_of({})", quote(sql)))
    }

    #[pg_test]
    fn unknown_method_and_category_errors_list_the_valid_ones() {
        let hint = hint_of("SELECT * FROM skills.search('x', method => 'magic')");
        assert_eq!(
            hint,
            "Valid methods: bm25, semantic, hybrid, graph, skilltrace, keyopt."
        );
        let hint = hint_of(
            "SELECT * FROM skills.search('x', categories => '{cooking}', method => 'bm25')",
        );
        assert!(
            hint.starts_with("Valid categories: code_generation, testing, debugging,"),
            "{hint}"
        );
    }

    #[pg_test]
    fn render_context_stays_within_the_budget() {
        budget_corpus();
        let full: String =
            one("SELECT skills.render_context('rust borrow', k => 3, method => 'bm25')");
        assert_eq!(full.matches("## Skill: ").count(), 3);
        assert!(full.contains("(source: local; pg_skills skill "));
        let full_tokens: i32 = one(&format!("SELECT skills.prompt_tokens({})", quote(&full)));
        for budget in [0, 40, full_tokens / 2, full_tokens, full_tokens * 10] {
            let block: String = one(&format!(
                "SELECT skills.render_context('rust borrow', k => 3, token_budget => {budget}, method => 'bm25')"
            ));
            let used: i32 = one(&format!("SELECT skills.prompt_tokens({})", quote(&block)));
            assert!(used <= budget, "budget {budget}: {used} tokens");
            if budget >= full_tokens {
                assert_eq!(block, full);
            }
        }
        let empty: String = one("SELECT skills.render_context('zebra', method => 'bm25')");
        assert_eq!(empty, "");
    }

    #[pg_test]
    fn build_graph_reads_rules_and_keeps_hand_made_edges() {
        let build = insert(
            "docker-build",
            "Build container images",
            "## Outputs\nA Dockerfile and an image.\n",
        );
        let deploy = insert(
            "k8s-deploy",
            "Deploy a service to Kubernetes",
            "## Prerequisites\n- an image from `docker-build`\n- the Dockerfile\n",
        );
        let docs = insert(
            "write-docs",
            "Write docs",
            "## See also\n- [k8s-deploy](../k8s-deploy/)\n",
        );
        exec(&format!(
            "INSERT INTO skills.edge (from_skill, to_skill, type, weight) VALUES ({docs}, {build}, 'workflow', 2)"
        ));
        let version: i64 = one("SELECT version FROM skills.graph_state");
        exec("SELECT skills.build_graph()");
        assert!(one::<i64>("SELECT version FROM skills.graph_state") > version);
        let edges =
            |sql: &str| -> i64 { one(&format!("SELECT count(*) FROM skills.edge WHERE {sql}")) };
        // needs-mention and artifact both give build -> deploy (one row, the first rule's name).
        assert_eq!(edges(&format!("from_skill = {build} AND to_skill = {deploy} AND type = 'dependency' AND provenance LIKE 'auto:%'")), 1);
        assert_eq!(edges(&format!("from_skill = {docs} AND to_skill = {deploy} AND type = 'workflow' AND weight = 0.5")), 1);
        assert_eq!(edges(&format!("from_skill = {docs} AND to_skill = {build} AND provenance = 'manual' AND weight = 2")), 1);
        // A rebuild replaces only automatic edges.
        exec("SELECT skills.build_graph()");
        assert_eq!(edges("provenance = 'manual'"), 1);
        assert_eq!(edges("true"), 3);
    }

    #[pg_test(
        error = "new row for relation \"edge\" violates check constraint \"edge_not_a_loop\""
    )]
    fn self_edges_rejected() {
        let a = insert("alpha", "", "");
        exec(&format!(
            "INSERT INTO skills.edge (from_skill, to_skill, type, weight) VALUES ({a}, {a}, 'semantic', 1)"
        ));
    }

    #[pg_test]
    fn every_listed_method_answers() {
        if !have_model() {
            return;
        }
        demo_skills();
        exec("SELECT skills.embed_pending()");
        for method in pg_skills_kernels::serving::SEARCH_METHODS {
            let rows = search(&format!(
                "'write pytest fixtures for a database', k => 3, method => '{method}'"
            ));
            assert!(!rows.is_empty(), "{method} served nothing");
        }
    }

    #[pg_test]
    fn hybrid_is_reciprocal_rank_fusion_of_bm25_and_semantic() {
        if !have_model() {
            return;
        }
        demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'find which commit broke the rust tests'";
        let bm25 = search(&format!("{q}, k => NULL, method => 'bm25'"));
        let semantic = search(&format!("{q}, k => NULL, method => 'semantic'"));
        let hybrid = search(&format!(
            "{q}, k => NULL, method => 'hybrid', bm25_weight => 2"
        ));
        let mut want: Vec<(i64, f64)> = semantic
            .iter()
            .map(|s| s.0)
            .chain(bm25.iter().map(|b| b.0))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|id| {
                let rr = |list: &[(i64, f64)]| {
                    list.iter()
                        .position(|x| x.0 == id)
                        .map_or(0.0, |p| 1.0 / (61.0 + p as f64))
                };
                (id, 2.0 * rr(&bm25) + rr(&semantic))
            })
            .collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        assert_eq!(ids_of(&hybrid), ids_of(&want));
        for (a, b) in hybrid.iter().zip(&want) {
            assert!((a.1 - b.1).abs() < 1e-12);
        }
    }

    #[pg_test]
    fn graph_walk_follows_edges_and_sees_edge_changes_at_once() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'configure liveness probes for my kubernetes deployment'";
        let before = search(&format!("{q}, k => NULL, method => 'graph'"));
        // Without edges only the seeds score, the first-stage favourite (the probes skill) first.
        assert_eq!(before[0].0, ids[1], "{before:?}");
        let sql_tuning = ids[3];
        let position = |rows: &[(i64, f64)], id: i64| rows.iter().position(|r| r.0 == id);
        let score_of =
            |rows: &[(i64, f64)], id: i64| rows.iter().find(|r| r.0 == id).map_or(0.0, |r| r.1);
        // The probes skill depends on sql-index-tuning (by hand): the walk carries mass there.
        exec(&format!(
            "INSERT INTO skills.edge (from_skill, to_skill, type, weight) VALUES ({}, {sql_tuning}, 'dependency', 5)",
            ids[1]
        ));
        let after = search(&format!("{q}, k => NULL, method => 'graph'"));
        assert!(
            score_of(&after, sql_tuning) > score_of(&before, sql_tuning),
            "{before:?} {after:?}"
        );
        assert_eq!(position(&after, sql_tuning), Some(1), "{after:?}");
        let total: f64 = after.iter().map(|r| r.1).sum();
        assert!(
            (total - 1.0).abs() < 1e-6,
            "the walk's scores sum to 1: {total}"
        );
        // The pools filter after the walk.
        let testing = search(&format!(
            "{q}, categories => '{{testing}}', k => NULL, method => 'graph'"
        ));
        let in_testing: Vec<i64> = ids_of(&after)
            .into_iter()
            .filter(|id| {
                one::<bool>(&format!(
                    "SELECT category = 'testing' FROM skills.skill WHERE id = {id}"
                ))
            })
            .collect();
        assert_eq!(ids_of(&testing), in_testing);
        exec("DELETE FROM skills.edge");
        assert_eq!(
            search(&format!("{q}, k => NULL, method => 'graph'")),
            before
        );
    }

    #[pg_test]
    fn skilltrace_learns_from_recorded_runs() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'tests fail since we merged the feature branch'";
        let before = search(&format!("{q}, k => 5, method => 'skilltrace'"));
        assert!(!before.is_empty());
        record_bisect_runs(&ids);
        let after = search(&format!("{q}, k => 5, method => 'skilltrace'"));
        assert_eq!(
            after[0].0, ids[4],
            "git-bisect passed on similar tasks: {after:?}"
        );
        assert!(
            after[0].1 > before.iter().find(|r| r.0 == ids[4]).map_or(0.0, |r| r.1),
            "{before:?} -> {after:?}"
        );
    }
}
