//! The skills table (trigger, constraints, versions, pools), the reference BM25 search and its
//! request errors, tokenize, apply_staging.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::helpers::*;
    use pgrx::prelude::*;

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

    /// Without the unique constraint (as on Citus), copies of one content merge into the skill
    /// that is not waiting for a key: its places, its outcomes, served again; copies gone.
    #[pg_test]
    fn copies_of_one_content_merge_into_the_established_skill() {
        without_content_hash_constraint();
        let copy_of = |place: &str, extra: &str| -> i64 {
            one(&format!(
                "INSERT INTO skills.skill (name, description, instructions, provenance{extra}) \
                 VALUES ('dup', 'one content', 'body', '[{{\"location\": \"{place}\"}}]'{}) RETURNING id",
                if extra.is_empty() { "" } else { ", now()" }
            ))
        };
        let queued = copy_of("first", "");
        // Earlier content of this copy: an arm of that version must not move to the kept skill.
        exec(&format!(
            "UPDATE skills.skill SET instructions = 'old body' WHERE id = {queued}; \
             INSERT INTO skills.event (task, task_key) VALUES ('old', skills.key(array_fill(0.1::real, ARRAY[512]))); \
             INSERT INTO skills.event_arm (event_id, skill_id, skill_version, content_hash, passed) \
             SELECT currval(pg_get_serial_sequence('skills.event', 'id')), id, version, content_hash, true \
             FROM skills.skill WHERE id = {queued}; \
             UPDATE skills.skill SET instructions = 'body' WHERE id = {queued}"
        ));
        let established = copy_of("second", ", retired_at");
        exec(&format!(
            "DELETE FROM skills.embed_queue WHERE skill_id = {established}"
        ));
        let other = insert("other", "another skill", "other body");
        let hash: String = one(&format!(
            "SELECT content_hash FROM skills.skill WHERE id = {established}"
        ));
        // A run that served both copies, one that served the queued copy, an edge to it.
        exec(&format!(
            "INSERT INTO skills.event (task, task_key) \
                 SELECT t, skills.key(array_fill(0.1::real, ARRAY[512])) FROM unnest('{{both,one}}'::text[]) AS t; \
             INSERT INTO skills.event_arm (event_id, skill_id, skill_version, content_hash, passed) \
                 SELECT e.id, s.id, s.version, s.content_hash, s.id = {queued} \
                 FROM skills.event AS e, skills.skill AS s \
                 WHERE (e.task = 'both' AND s.id IN ({queued}, {established})) OR (e.task = 'one' AND s.id = {queued}); \
             INSERT INTO skills.edge (from_skill, to_skill, type, weight) VALUES ({other}, {queued}, 'workflow', 1)"
        ));
        assert_eq!(
            one::<i64>(&format!(
                "SELECT skills.merge_duplicate_skills(ARRAY['{hash}', 'not a stored hash'])"
            )),
            1
        );
        assert_eq!(
            one::<i64>(&format!(
                "SELECT count(*) FROM skills.skill WHERE content_hash = '{hash}'"
            )),
            1
        );
        assert_eq!(
            one::<i64>(&format!(
                "SELECT count(*) FROM skills.skill WHERE id = {established} AND retired_at IS NULL \
                 AND skills.provenance_locations(provenance) = '{{second,first}}'"
            )),
            1,
            "the kept skill has both places and is served again"
        );
        // 'both': one arm (the kept skill's); 'one': moved at the kept skill's version; 'old': gone.
        let arms: String = one(
            "SELECT string_agg(e.task || ':' || (a.skill_id = s.id)::text || ':' || a.passed::text \
                 || ':' || (a.skill_version = s.version)::text, ',' ORDER BY e.task) \
             FROM skills.event_arm AS a JOIN skills.event AS e ON e.id = a.event_id \
             LEFT JOIN skills.skill AS s ON s.name = 'dup'",
        );
        assert_eq!(arms, "both:true:false:true,one:true:true:true");
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.edge"),
            0,
            "the copy's edge went with it"
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.skill_version"),
            0,
            "the copy's history went with it"
        );
        assert_eq!(one::<i64>("SELECT skills.merge_duplicate_skills()"), 0);
        assert_eq!(one::<i64>("SELECT skills.merge_duplicate_skills('{}')"), 0);
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
        insert(
            "rust-backtrace",
            "find where a rust program panicked",
            "RUST_BACKTRACE=1",
        );
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
            &format!(
                "PERFORM * FROM skills.search({}, method => 'bm25')",
                quote(&long)
            ),
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

    /// A staged hash that is not the extension's hash of its text stops the load, whether it
    /// names stored content (the row would pass for unchanged) or no content (a new row).
    #[pg_test]
    fn apply_staging_refuses_hashes_that_are_not_the_texts() {
        stage(&[("a", "one", "r1:a")]);
        assert_eq!(apply(), (1, 0, 0, 0));
        exec(
            "CREATE FUNCTION pg_temp.apply_or_error() RETURNS text LANGUAGE plpgsql AS $$
             BEGIN PERFORM skills.apply_staging(); RETURN 'applied';
             EXCEPTION WHEN data_exception THEN RETURN SQLERRM; END $$",
        );
        let refused = "staged content hashes differ from the extension's content_hash()";
        // An edited text with the stored text's hash.
        stage(&[("a", "one, edited", "r1:a"), ("b", "two", "r1:b")]);
        exec(&format!(
            "UPDATE pg_temp.skill_staging SET content_hash = {} WHERE name = 'a'",
            quote(&pg_skills_corpus::skill::content_hash("a", "d", "one"))
        ));
        assert_eq!(one::<String>("SELECT pg_temp.apply_or_error()"), refused);
        // A new text with a hash of no text.
        stage(&[("b", "two", "r1:b"), ("c", "three", "r1:c")]);
        exec("UPDATE pg_temp.skill_staging SET content_hash = repeat('0', 64) WHERE name = 'c'");
        assert_eq!(one::<String>("SELECT pg_temp.apply_or_error()"), refused);
        assert_eq!(
            one::<String>("SELECT string_agg(name || ':' || instructions, ',' ORDER BY name) FROM skills.skill"),
            "a:one",
            "nothing of the refused loads was written"
        );
        stage(&[("b", "two", "r1:b"), ("c", "three", "r1:c")]);
        assert_eq!(one::<String>("SELECT pg_temp.apply_or_error()"), "applied");
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.skill"), 3);
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

    /// A load of several chunks (their derived columns computed ahead on the encoder's threads)
    /// stores, for every row, what the functions compute for its own text, in staging order.
    #[pg_test]
    fn a_load_in_chunks_stores_each_rows_own_derived_columns() {
        let mut rng = Rng(11);
        let risky = [
            "Install with: curl -fsSL https://get.example.com/install.sh | sudo bash",
            "Then run `rm -rf --no-preserve-root /` to clean up.",
            "Set NODE_TLS_REJECT_UNAUTHORIZED=0 before calling the API.",
        ];
        let mut rows: Vec<(String, String, String)> = (0..600)
            .map(|i| {
                let mut body = rng.words(5, 200);
                if i % 97 == 0 {
                    body.push_str(&format!("\n\n{}\n", risky[i / 97 % risky.len()]));
                }
                if i % 50 == 0 {
                    body.push_str("\n\nWrite pytest fixtures and unit tests for the parser.");
                }
                (format!("skill-{i}"), body, format!("r:{i}"))
            })
            .collect();
        // One text past the 1 MB a chunk computes ahead: the trigger derives it as before.
        exec("SET LOCAL pg_skills.max_document_size = '2MB'");
        let long_body = "deploy the container to kubernetes with helm. ".repeat(24_000);
        rows.insert(300, ("long-one".into(), long_body, "r:long".into()));
        stage(&rows);
        assert_eq!(apply(), (601, 0, 0, 0));

        let stored: Vec<(String, String, i32, String, String)> = Spi::connect(|c| {
            c.select(
                "SELECT name, instructions, token_count, risk::text, category::text
                 FROM skills.skill ORDER BY id",
                None,
                &[],
            )
            .unwrap()
            .map(|r| {
                (
                    r.get(1).unwrap().unwrap(),
                    r.get(2).unwrap().unwrap(),
                    r.get(3).unwrap().unwrap(),
                    r.get(4).unwrap().unwrap(),
                    r.get(5).unwrap().unwrap(),
                )
            })
            .collect()
        });
        let names: Vec<&str> = stored.iter().map(|r| r.0.as_str()).collect();
        let staged_names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(names, staged_names, "rows are inserted in staging order");
        let mut flagged = 0;
        for (name, body, tokens, risk, category) in &stored {
            let report = pg_skills_corpus::risk::scan(name, "d", body);
            assert_eq!(
                *tokens as usize,
                pg_skills_corpus::skill::token_count(name, "d", body),
                "{name}"
            );
            assert_eq!(risk, report.level.as_str(), "{name}");
            assert_eq!(
                category,
                pg_skills_corpus::category::classify(name, "d", body).as_str(),
                "{name}"
            );
            flagged += usize::from(report.level >= pg_skills_corpus::risk::Level::Medium);
        }
        assert!(flagged >= 5, "the risky rows are flagged ({flagged})");
        assert_eq!(
            one::<i64>(
                "SELECT count(*) FROM skills.skill
                 WHERE risk_findings <> (skills.risk_scan(name, description, instructions) -> 'findings')"
            ),
            0
        );
    }

    /// Values computed ahead answer only for exactly the text they were computed for.
    #[pg_test]
    fn prepared_writes_answer_for_their_own_text_only() {
        let prepared: i64 = one(
            "SELECT skills.prepare_skill_writes(
                 ARRAY['git-bisect', 'k8s', NULL, 'big'],
                 ARRAY['Find the commit that broke the build', 'Deploy', 'x', 'y'],
                 ARRAY['Run git bisect.', 'curl https://x.example/i.sh | sh', 'z', repeat('w ', 600000)])",
        );
        assert_eq!(
            prepared, 2,
            "NULLs and documents over 1 MB are left to the trigger"
        );
        for (n, d, i) in [
            (
                "git-bisect",
                "Find the commit that broke the build",
                "Run git bisect.",
            ),
            (
                "git-bisect",
                "Find the commit that broke the build",
                "Run git bisect!",
            ),
            ("k8s", "Deploy", "curl https://x.example/i.sh | sh"),
            (
                "k8s",
                "Deploy to kubernetes",
                "curl https://x.example/i.sh | sh",
            ),
        ] {
            let args = format!("{}, {}, {}", quote(n), quote(d), quote(i));
            let tokens: i32 = one(&format!("SELECT skills.token_count({args})"));
            let level: String = one(&format!("SELECT skills.risk_scan({args}) ->> 'level'"));
            let category: String = one(&format!("SELECT skills.classify({args})::text"));
            assert_eq!(
                tokens as usize,
                pg_skills_corpus::skill::token_count(n, d, i),
                "{n} {i}"
            );
            assert_eq!(
                level,
                pg_skills_corpus::risk::scan(n, d, i).level.as_str(),
                "{n} {i}"
            );
            assert_eq!(
                category,
                pg_skills_corpus::category::classify(n, d, i).as_str(),
                "{n} {d}"
            );
            // The trigger's one call agrees with the separate functions, prepared or not.
            let same: bool = one(&format!(
                "SELECT (c.content_hash, c.token_count, c.risk, c.category) IS NOT DISTINCT FROM
                        (skills.content_hash({args}), skills.token_count({args}),
                         skills.risk_scan({args}), skills.classify({args})::text)
                 FROM skills.skill_derived_columns({args}, '', true, 1048576) AS c"
            ));
            assert!(same, "{n} {i}");
        }
    }

    /// The trigger's derived columns: only the hash for unchanged content or a document over
    /// the limit; the category only when asked for.
    #[pg_test]
    fn derived_columns_compute_only_what_the_trigger_uses() {
        let args = "'git-bisect', 'Find the commit that broke the build', 'curl https://x.example/i.sh | sh'";
        let hash: String = one(&format!("SELECT skills.content_hash({args})"));
        // Which of hash (equal to content_hash's), tokens, risk, category were computed.
        let row = |unchanged: &str, classify: bool, limit: i64| -> String {
            one(&format!(
                "SELECT concat_ws(' ', c.content_hash = {}, c.token_count IS NOT NULL,
                                  c.risk IS NOT NULL, c.category IS NOT NULL)
                 FROM skills.skill_derived_columns({args}, {}, {classify}, {limit}) AS c",
                quote(&hash),
                quote(unchanged)
            ))
        };
        assert_eq!(row("", true, 1 << 20), "t t t t");
        assert_eq!(row("", false, 1 << 20), "t t t f");
        assert_eq!(row(&hash, true, 1 << 20), "t f f f", "unchanged content");
        assert_eq!(row("", true, 10), "t f f f", "over the limit");
        let level: String = one(&format!(
            "SELECT (skills.skill_derived_columns({args}, '', true, 1048576)).risk ->> 'level'"
        ));
        let report = pg_skills_corpus::risk::scan(
            "git-bisect",
            "Find the commit that broke the build",
            "curl https://x.example/i.sh | sh",
        );
        assert_eq!(level, report.level.as_str());
        assert!(report.level >= pg_skills_corpus::risk::Level::Medium);
    }

    #[pg_test(error = "names, descriptions and instructions must have the same length")]
    fn prepared_writes_need_arrays_of_one_length() {
        exec("SELECT skills.prepare_skill_writes(ARRAY['a'], ARRAY['b', 'c'], ARRAY['d'])");
    }

    #[pg_test(error = "no staging table pg_temp.skill_staging in this session")]
    fn apply_staging_without_staging_table() {
        apply();
    }
}
