//! The search request: limits, score parts, hybrid, graph, skilltrace, render_context.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::helpers::*;
    use pgrx::prelude::*;

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

    /// `skills.rule_edges()` reads the texts in batches (one document at a time for the rules):
    /// over a library of several batches, with mentions that cross them, its edges are the
    /// kernel's rules over every document at once.
    #[pg_test]
    fn rule_edges_read_in_batches_are_the_rules_over_the_whole_library() {
        for i in 0..700 {
            let needs = if i % 5 == 0 {
                String::new()
            } else {
                format!(
                    "## Prerequisites\n- `chain-step-{}`\n- the file step{}.json\n",
                    (i * 7) % 700,
                    i - 1
                )
            };
            insert(
                &format!("chain-step-{i}"),
                "One step of a long chain",
                &format!(
                    "{needs}## Outputs\n- step{i}.json\n## Next steps\n- `chain-step-{}`\n",
                    (i + 1) % 700
                ),
            );
        }
        let mut sql = column(
            "SELECT concat_ws('|', from_skill, to_skill, type, weight, rule) FROM skills.rule_edges()",
        );
        sql.sort();
        let ids = column("SELECT s.id::text FROM skills.skill AS s ORDER BY s.id");
        let names = column("SELECT name FROM skills.skill ORDER BY id");
        let texts =
            column("SELECT description || E'\\n\\n' || instructions FROM skills.skill ORDER BY id");
        use pg_skills_kernels::graph::rules::{extract, Document};
        let documents: Vec<Document> = (0..ids.len())
            .map(|i| Document {
                id: ids[i].parse().unwrap(),
                name: &names[i],
                text: &texts[i],
            })
            .collect();
        let mut expected: Vec<String> = extract(&documents)
            .into_iter()
            .map(|e| {
                format!(
                    "{}|{}|{}|{}|{}",
                    e.from,
                    e.to,
                    e.kind.as_str(),
                    e.weight,
                    e.rule
                )
            })
            .collect();
        expected.sort();
        assert!(expected.len() >= 700 + 560, "{} edges", expected.len());
        assert_eq!(sql, expected);
    }

    #[pg_test]
    fn build_graph_finds_the_nearest_keys_through_the_skeys_index() {
        own_skill_keys();
        keyed_skills("g", 2000);
        exec("CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0) WITH (lists = 40)");
        exec("ANALYZE skills.skill_key");
        // The index serves the nearest-key search: one scan per key (a tie-break by id in it
        // made the planner sort every key for every key instead).
        let scans =
            || -> i64 { one("SELECT pg_stat_get_xact_numscans('skills.skill_key_k0'::regclass)") };
        let before = scans();
        exec("SELECT skills.build_graph(semantic_threshold => -1, alternative_threshold => 1, neighbours => 8)");
        assert!(
            scans() - before >= 2000,
            "{} skeys index scans",
            scans() - before
        );
        // Every list read (the planner kept on the index): the edges are the exact nearest keys.
        exec("SET LOCAL pg_skills.key_probes = 40");
        exec("SET LOCAL enable_seqscan = off");
        exec("SELECT skills.build_graph(semantic_threshold => -1, alternative_threshold => 1, neighbours => 8)");
        exec("SET LOCAL enable_seqscan = on");
        let edges = |id: i64| -> Vec<i64> {
            one(&format!(
                "SELECT coalesce(array_agg(to_skill), '{{}}') FROM skills.edge \
                 WHERE from_skill = {id} AND type = 'semantic'"
            ))
        };
        for id in one::<Vec<i64>>("SELECT array_agg(skill_id) FROM (SELECT skill_id FROM skills.skill_key ORDER BY skill_id LIMIT 20) AS s") {
            let exact: Vec<i64> = seqscan(|| {
                one(&format!(
                    "SELECT coalesce(array_agg(n.skill_id), '{{}}') FROM ( \
                       SELECT b.skill_id FROM skills.skill_key AS b, skills.skill_key AS a \
                       WHERE a.skill_id = {id} AND b.skill_id <> a.skill_id \
                         AND b.k0 OPERATOR(skills.<#>) a.k0 < 0 \
                       ORDER BY b.k0 OPERATOR(skills.<#>) a.k0, b.skill_id LIMIT 8) AS n"
                ))
            });
            assert!(!exact.is_empty());
            let (mut got, mut want) = (edges(id), exact);
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "the edges of skill {id}");
        }
    }

    /// Skills `prefix`0.. with the given keys (rows of KEY_DIM values); their ids in order.
    fn skills_with_keys(prefix: &str, keys: &[f32]) -> Vec<i64> {
        let mut ids = Vec::new();
        for (i, key) in keys.chunks_exact(KEY_DIM).enumerate() {
            let id = insert(
                &format!("{prefix}{i}"),
                "a keyed skill",
                &format!("step {i}"),
            );
            exec(&format!(
                "INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0) \
                 SELECT id, content_hash, array_fill(0::real, ARRAY[384]), {} \
                 FROM skills.skill WHERE id = {id}",
                key_literal(key)
            ));
            ids.push(id);
        }
        ids
    }

    fn automatic_edges() -> Vec<String> {
        column(
            "SELECT concat_ws('|', from_skill, to_skill, type, weight, provenance) FROM skills.edge \
             WHERE provenance LIKE 'auto:%' ORDER BY from_skill, to_skill, type",
        )
    }

    /// Panics with the edges only one of `got` and `want` has.
    fn assert_same_edges(got: &[String], want: &[String], context: &str) {
        let only_got: Vec<&String> = got.iter().filter(|e| !want.contains(e)).collect();
        let only_want: Vec<&String> = want.iter().filter(|e| !got.contains(e)).collect();
        assert!(
            only_got.is_empty() && only_want.is_empty() && got.len() == want.len(),
            "{context}: {} edges against {}; only in the update {only_got:?}; only in the build {only_want:?}",
            got.len(),
            want.len()
        );
    }

    /// After keys are written, rewritten and removed, `skills.update_graph()` leaves the edges a
    /// whole build writes, and searches again only around the changes.
    #[pg_test]
    fn update_graph_writes_the_edges_a_build_writes() {
        own_skill_keys();
        let centres = centres(40, KEY_DIM, 31);
        // Two points of one cluster have q·k about 0.5: at 0.5 some lists fill, some do not.
        let ids = skills_with_keys("u", &clustered(&centres, KEY_DIM, 600, 32));
        exec("CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0) WITH (lists = 20)");
        exec("ANALYZE skills.skill_key");
        // The nearest-key searches through the index, as on a library of real size (on 600
        // keys the planner may sort them instead), so that its scans count the searches.
        exec("SET LOCAL enable_seqscan = off");
        let settings = "semantic_threshold => 0.5, alternative_threshold => 0.9, neighbours => 8";
        exec(&format!("SELECT skills.build_graph({settings})"));
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.graph_pending"), 0);
        let full_lists: i64 = one("SELECT count(*) FROM (SELECT from_skill FROM skills.edge \
             WHERE type IN ('semantic', 'alternative') GROUP BY from_skill HAVING count(*) = 8) AS f");
        let short_lists: i64 = one("SELECT count(*) FROM (SELECT from_skill FROM skills.edge \
             WHERE type IN ('semantic', 'alternative') GROUP BY from_skill HAVING count(*) < 8) AS f");
        assert!(
            full_lists > 50 && short_lists > 50,
            "{full_lists} full and {short_lists} short lists"
        );

        // New skills (two near copies of existing keys among them), rewritten keys, removed
        // skills, and one key removed from a skill that stays.
        let mut new_keys = clustered(&centres, KEY_DIM, 30, 33);
        for (copy, of) in [(0, ids[5]), (1, ids[77])] {
            let original: Vec<f32> = one::<Vec<f32>>(&format!(
                "SELECT k0::real[] FROM skills.skill_key WHERE skill_id = {of}"
            ));
            let noise = clustered(&centres, KEY_DIM, 1, 34 + copy as u64);
            let mut near: Vec<f32> = original
                .iter()
                .zip(&noise)
                .map(|(a, b)| a + 0.05 * b)
                .collect();
            let norm = near.iter().map(|v| v * v).sum::<f32>().sqrt();
            near.iter_mut().for_each(|v| *v /= norm);
            new_keys[copy * KEY_DIM..(copy + 1) * KEY_DIM].copy_from_slice(&near);
        }
        skills_with_keys("new", &new_keys);
        let rewritten = clustered(&centres, KEY_DIM, 20, 35);
        for (i, key) in rewritten.chunks_exact(KEY_DIM).enumerate() {
            exec(&format!(
                "UPDATE skills.skill_key SET k0 = {} WHERE skill_id = {}",
                key_literal(key),
                ids[100 + 7 * i]
            ));
        }
        let removed: Vec<String> = (0..20).map(|i| ids[300 + 11 * i].to_string()).collect();
        exec(&format!(
            "DELETE FROM skills.skill WHERE id IN ({})",
            removed.join(",")
        ));
        exec(&format!(
            "DELETE FROM skills.skill_key WHERE skill_id = {}",
            ids[599]
        ));
        assert_eq!(
            one::<i64>("SELECT count(DISTINCT skill_id) FROM skills.graph_pending"),
            71
        );

        let scans =
            || -> i64 { one("SELECT pg_stat_get_xact_numscans('skills.skill_key_k0'::regclass)") };
        let before = scans();
        exec(&format!("SELECT skills.update_graph({settings})"));
        let update_scans = scans() - before;
        let updated = automatic_edges();
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.graph_pending"), 0);
        assert!(
            updated.iter().any(|e| e.contains("|alternative|")),
            "the near copies make alternative edges"
        );

        let before = scans();
        exec(&format!("SELECT skills.build_graph({settings})"));
        let build_scans = scans() - before;
        assert_same_edges(
            &updated,
            &automatic_edges(),
            "the update's edges are the build's",
        );
        assert!(
            update_scans < build_scans,
            "the update searched {update_scans} keys' neighbours, a build {build_scans}"
        );

        // One new skill: its own neighbours and those of the few skills it comes near.
        skills_with_keys("one", &clustered(&centres, KEY_DIM, 1, 36));
        let before = scans();
        exec(&format!("SELECT skills.update_graph({settings})"));
        let update_scans = scans() - before;
        let updated = automatic_edges();
        exec(&format!("SELECT skills.build_graph({settings})"));
        assert_same_edges(&updated, &automatic_edges(), "after one new key");
        assert!(
            (1..=30).contains(&update_scans),
            "one new key: the update searched {update_scans} keys' neighbours"
        );

        // Other settings, or a TRUNCATE of the keys, build the whole graph again.
        let other = "semantic_threshold => 0.45, alternative_threshold => 0.9, neighbours => 6";
        exec(&format!("SELECT skills.update_graph({other})"));
        let updated = automatic_edges();
        exec(&format!("SELECT skills.build_graph({other})"));
        assert_same_edges(&updated, &automatic_edges(), "with other settings");
        exec("TRUNCATE skills.skill_key");
        exec(&format!("SELECT skills.update_graph({other})"));
        assert_eq!(
            one::<i64>(
                "SELECT count(*) FROM skills.edge WHERE type IN ('semantic', 'alternative')"
            ),
            0
        );
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
        let published: Vec<String> = one("SELECT skills.search_methods()");
        assert_eq!(published, pg_skills_kernels::serving::SearchMethod::names());
        for method in published {
            let rows = search(&format!(
                "'write pytest fixtures for a database', k => 3, method => '{method}'"
            ));
            assert!(!rows.is_empty(), "{method} served nothing");
        }
    }

    /// A request of several parts is encoded in one forward pass with its parts (the model's
    /// weights read once, not once for the request and again for the parts); the ranking then
    /// finds the parts' keys in the backend's cache.
    #[pg_test]
    fn a_request_and_its_parts_are_encoded_in_one_pass() {
        if !have_model() {
            return;
        }
        demo_skills();
        exec("SELECT skills.embed_pending()");
        for method in ["semantic", "keyopt"] {
            let request = format!(
                "Bisect the commit that broke the {method} build last night. \
                 Then write the release notes for the new version."
            );
            let parts = pg_skills_kernels::needs::parts(&request);
            assert_eq!(parts.len(), 2, "{parts:?}");
            let before = crate::embedding::passes_run();
            let rows = search(&format!("'{request}', k => 3, method => '{method}'"));
            assert!(!rows.is_empty(), "{method} served nothing");
            assert_eq!(crate::embedding::passes_run() - before, 1, "{method}");
            for part in &parts {
                assert!(crate::embedding::query_key_cached(part), "{part}");
            }
        }
    }

    #[pg_test]
    fn hybrid_and_graph_searches_encode_the_request_while_they_read_bm25() {
        if !have_model() {
            return;
        }
        demo_skills();
        exec("SELECT skills.embed_pending()");
        for method in ["hybrid", "graph", "skilltrace"] {
            let request = format!("Find the commit that broke the {method} build");
            let before = crate::embedding::keys_encoded_alongside();
            let rows = search(&format!("'{request}', k => 5, method => '{method}'"));
            assert!(!rows.is_empty(), "{method} served nothing");
            assert_eq!(
                crate::embedding::keys_encoded_alongside() - before,
                1,
                "{method}"
            );
            // The key it kept is the one a search encodes on its own thread.
            assert!(crate::embedding::query_key_cached(&request), "{method}");
            let encoder = crate::embedding::encoder();
            let alone = encoder
                .embed_queries(&[request.as_str()], crate::guc::query_precision())
                .unwrap();
            let key = pg_skills_kernels::compressor::query_key(&alone[0]);
            assert_eq!(
                crate::embedding::query_key_values(&request),
                key,
                "{method}"
            );
            // Cached now: the same search again encodes nothing and serves the same rows.
            assert_eq!(
                search(&format!("'{request}', k => 5, method => '{method}'")),
                rows
            );
            assert_eq!(
                crate::embedding::keys_encoded_alongside() - before,
                1,
                "{method}"
            );
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

    /// Skills for one need, several near misses of another need, and a request naming both.
    fn two_needs_corpus() -> (Vec<i64>, i64) {
        let fixtures = [
            (
                "pytest-fixtures",
                "Write pytest fixtures that share one database setup across tests",
                "Use conftest.py and scope=session.",
            ),
            (
                "pytest-database-fixtures",
                "Pytest fixtures for a test database: create once, roll back after each test",
                "Yield a connection from a session fixture.",
            ),
            (
                "pytest-conftest-layout",
                "Organise pytest conftest.py files and shared fixtures for database tests",
                "One conftest per package.",
            ),
            (
                "pytest-factory-fixtures",
                "Factory fixtures in pytest that build database rows for tests",
                "Return a function from the fixture.",
            ),
        ];
        let ids = fixtures.iter().map(|(n, d, i)| insert(n, d, i)).collect();
        let probes = insert(
            "kubernetes-probes",
            "Configure liveness and readiness probes for a Kubernetes deployment",
            "Add httpGet probes to the container spec.",
        );
        insert(
            "rust-backtrace",
            "Find where a Rust program panicked with RUST_BACKTRACE",
            "Run with RUST_BACKTRACE=1.",
        );
        exec("SELECT skills.embed_pending()");
        (ids, probes)
    }

    /// One sentence that joins two requests with "and" is cut into its clauses: each is a part,
    /// so the second request's skill moves up past near misses of the first.
    #[pg_test]
    fn one_sentence_joining_two_requests_covers_both() {
        if !have_model() {
            return;
        }
        let (fixtures, probes) = two_needs_corpus();
        let request = "'Write pytest fixtures that share one database setup across all tests \
            and add a readiness probe to our Kubernetes deployment', k => 6, method => 'semantic'";
        let rank_of = |rows: &[(i64, f64)]| rows.iter().position(|r| r.0 == probes);
        exec("SET pg_skills.cover_request_parts = off");
        let whole = search(request);
        exec("RESET pg_skills.cover_request_parts");
        let covered = search(request);
        let (before, after) = (rank_of(&whole), rank_of(&covered));
        assert!(
            after.is_some() && (before.is_none() || after < before),
            "the second request's skill: rank {before:?} → {after:?}"
        );
        assert!(fixtures.contains(&covered[0].0), "{covered:?}");
        let coverage: f64 = one(&format!(
            "SELECT coalesce(coverage, 0)::float8 FROM skills.search({request}) WHERE id = {probes}"
        ));
        assert!(coverage > 0.0, "the sentence was ranked as one part");
    }

    const TWO_NEEDS: &str = "'Write pytest fixtures so that every test shares one database \
        setup, created once per session and rolled back after each test. \
        Then add a readiness probe to our Kubernetes deployment.'";

    #[pg_test]
    fn a_request_of_two_parts_serves_a_skill_for_each() {
        if !have_model() {
            return;
        }
        let (fixtures, probes) = two_needs_corpus();
        for method in ["semantic", "keyopt"] {
            // One key for the whole request: the near misses of the first need come first.
            exec("SET pg_skills.cover_request_parts = off");
            let whole = search(&format!("{TWO_NEEDS}, k => 3, method => '{method}'"));
            assert!(
                !ids_of(&whole).contains(&probes),
                "{method}: the test needs the whole request to rank the second need low: {whole:?}"
            );
            exec("RESET pg_skills.cover_request_parts");
            let covered = served(&format!("{TWO_NEEDS}, k => 3, method => '{method}'"));
            let ids: Vec<i64> = covered.iter().map(|r| r.0).collect();
            assert!(ids.contains(&probes), "{method}: {covered:?}");
            assert!(fixtures.contains(&ids[0]), "{method}: {covered:?}");
            assert!(covered.windows(2).all(|w| w[0].1 >= w[1].1));
            // score = the whole request's score + coverage, coverage > 0 for the pool's rows.
            let parts = id_scores(&format!(
                "SELECT id, (score - coalesce(semantic, 0) - coalesce(beta, 0) \
                        - coalesce(dk_term, 0) - coalesce(event_term, 0) \
                        - coalesce(held_back, 0) - coverage)::float8 \
                 FROM skills.search({TWO_NEEDS}, k => 3, method => '{method}')"
            ));
            assert_eq!(parts.len(), 3);
            assert!(parts.iter().all(|p| p.1.abs() < 1e-5), "{parts:?}");
            // A category filter still holds for every part's candidates.
            let category: String = one(&format!(
                "SELECT category::text FROM skills.skill WHERE id = {}",
                fixtures[0]
            ));
            let pooled: Vec<String> = one(&format!(
                "SELECT coalesce(array_agg(DISTINCT category::text), '{{}}') \
                 FROM skills.search({TWO_NEEDS}, categories => ARRAY['{category}'], \
                                    method => '{method}')"
            ));
            assert_eq!(pooled, vec![category.clone()]);
        }
        // A request of one part is ranked as before, with no coverage.
        let single = "'write pytest fixtures for a database', k => 3, method => 'semantic'";
        let with: Vec<(i64, f64)> = search(single);
        exec("SET pg_skills.cover_request_parts = off");
        assert_eq!(with, search(single));
        exec("RESET pg_skills.cover_request_parts");
        let nulls: i64 = one(&format!(
            "SELECT count(*) FROM skills.search({single}) WHERE coverage IS NOT NULL"
        ));
        assert_eq!(nulls, 0);
    }

    /// (id, complement_of, complement) of a bm25 search with complements.
    fn with_complements(args: &str) -> Vec<(i64, Option<i64>, Option<String>)> {
        let sql = format!(
            "SELECT id, complement_of, complement FROM skills.search({args}, method => 'bm25')"
        );
        Spi::connect(|c| {
            c.select(&sql, None, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .map(|r| {
                    (
                        r.get::<i64>(1).unwrap().unwrap(),
                        r.get::<i64>(2).unwrap(),
                        r.get::<String>(3).unwrap(),
                    )
                })
                .collect()
        })
    }

    /// A run of `arms` (skill, passed) recorded straight into the tables (no encoder needed).
    fn run_of(arms: &[(i64, bool)]) {
        let event: i64 = one(&format!(
            "INSERT INTO skills.event (task, task_key) VALUES ('a task', {}) RETURNING id",
            key_literal(&unit(0))
        ));
        for (skill, passed) in arms {
            exec(&format!(
                "INSERT INTO skills.event_arm (event_id, skill_id, skill_version, content_hash, passed) \
                 SELECT {event}, id, version, content_hash, {passed} FROM skills.skill WHERE id = {skill}"
            ));
        }
    }

    #[pg_test]
    fn complements_follow_the_skill_that_needs_them() {
        without_index();
        let anchor = insert(
            "zyx-build-fixer",
            "fix zyxcompile errors",
            "Read the zyxcompile error and fix the code.",
        );
        let toolchain = insert(
            "toolchain-setup",
            "install the toolchain",
            "Install and pin the compiler.",
        );
        let cache = insert(
            "build-cache",
            "set up a build cache",
            "Cache the target folder.",
        );
        let helper = insert(
            "error-explainer",
            "explain errors",
            "Explain what went wrong.",
        );
        let q = "'zyxcompile'";
        let plain = with_complements(&format!("{q}, k => 3"));
        assert_eq!(plain, vec![(anchor, None, None)]);
        assert_eq!(
            with_complements(&format!("{q}, k => 3, complements => 2")),
            plain
        );

        // The toolchain produces what the fixer needs; the cache usually follows it.
        exec(&format!(
            "INSERT INTO skills.edge (from_skill, to_skill, type, weight) VALUES \
             ({toolchain}, {anchor}, 'dependency', 1), ({anchor}, {cache}, 'workflow', 0.5), \
             ({anchor}, {toolchain}, 'semantic', 0.9)"
        ));
        let dep = (toolchain, Some(anchor), Some("dependency".to_string()));
        let work = (cache, Some(anchor), Some("workflow".to_string()));
        assert_eq!(with_complements(&format!("{q}, k => 3")), plain);
        assert_eq!(
            with_complements(&format!("{q}, k => 3, complements => 2")),
            vec![(anchor, None, None), dep.clone(), work.clone()]
        );
        assert_eq!(
            with_complements(&format!("{q}, k => 3, complements => 1")),
            vec![(anchor, None, None), dep.clone()]
        );
        // Complements count against k, carry the anchor's score and stay in its pools.
        assert_eq!(
            with_complements(&format!("{q}, k => 2, complements => 2")),
            vec![(anchor, None, None), dep.clone()]
        );
        let scores = id_scores(&format!(
            "SELECT id, score FROM skills.search({q}, complements => 2, method => 'bm25')"
        ));
        assert_eq!(scores[0].1, scores[1].1);
        let pool: String = one(&format!(
            "SELECT category::text FROM skills.skill WHERE id = {anchor}"
        ));
        let other = if pool == "testing" {
            "debugging"
        } else {
            "testing"
        };
        exec(&format!(
            "SELECT skills.set_category({toolchain}, '{other}')"
        ));
        assert_eq!(
            with_complements(&format!(
                "{q}, categories => ARRAY['{pool}'], complements => 2"
            ))
            .iter()
            .map(|r| r.0)
            .collect::<Vec<_>>(),
            [anchor, cache]
                .into_iter()
                .filter(|&id| one::<String>(&format!(
                    "SELECT category::text FROM skills.skill WHERE id = {id}"
                )) == pool)
                .collect::<Vec<_>>()
        );
        exec(&format!("SELECT skills.set_category({toolchain}, NULL)"));

        // Runs: with the explainer beside it the fixer passed, without it the fixer failed;
        // with the cache it failed too. Co-success comes first; the cache's edge is overruled.
        for _ in 0..3 {
            run_of(&[(anchor, true), (helper, true)]);
        }
        for _ in 0..2 {
            run_of(&[(anchor, false)]);
            run_of(&[(anchor, false), (cache, false)]);
        }
        let co = (helper, Some(anchor), Some("co-success".to_string()));
        assert_eq!(
            with_complements(&format!("{q}, k => 5, complements => 3")),
            vec![(anchor, None, None), co.clone(), dep.clone()]
        );
        // A budget that fits the fixer and the toolchain only skips the explainer.
        let tokens = |id: i64| {
            one::<i32>(&format!(
                "SELECT token_count FROM skills.skill WHERE id = {id}"
            ))
        };
        let helper_tokens = tokens(helper);
        exec(&format!(
            "UPDATE skills.skill SET instructions = instructions || repeat(' explain', 400) WHERE id = {helper}"
        ));
        // A new version of the explainer: its runs were for the old content, so they no longer
        // count, and it is no complement any more.
        assert!(tokens(helper) > helper_tokens);
        assert_eq!(
            with_complements(&format!("{q}, k => 5, complements => 3")),
            vec![(anchor, None, None), dep.clone()]
        );
        exec(&format!(
            "UPDATE skills.event_arm AS a SET content_hash = s.content_hash, skill_version = s.version \
             FROM skills.skill AS s WHERE s.id = a.skill_id AND a.skill_id = {helper}"
        ));
        let budget = tokens(anchor) + tokens(toolchain);
        assert_eq!(
            with_complements(&format!(
                "{q}, k => 5, complements => 3, token_budget => {budget}"
            )),
            vec![(anchor, None, None), dep.clone()]
        );
        // A complement the serving policy withholds is not served.
        exec(&format!(
            "UPDATE skills.skill SET retired_at = now() WHERE id = {helper}"
        ));
        assert_eq!(
            with_complements(&format!("{q}, k => 5, complements => 3")),
            vec![(anchor, None, None), dep.clone()]
        );
        // render_context holds the same skills in the same order.
        let sections: Vec<i64> = id_scores(&format!(
            "SELECT skill_id, 0::float8 FROM skills.context_sections({q}, k => 5, \
             method => 'bm25', complements => 3)"
        ))
        .into_iter()
        .map(|r| r.0)
        .collect();
        assert_eq!(sections, vec![anchor, toolchain]);
        for bad in ["-1", "6"] {
            assert_refused(
                &format!("PERFORM * FROM skills.search({q}, complements => {bad})"),
                "invalid_parameter_value",
                "complements must be between 0 and 5%",
            );
        }
        assert_eq!(
            with_complements(&format!("{q}, complements => NULL")),
            plain
        );
    }
}
