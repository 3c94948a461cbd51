//! Skill keys: the skills.key type, its operators, and the skeys index (recall, agreement with a
//! sequential scan, iterative scans, bad input).

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::helpers::*;
    use pgrx::prelude::*;

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

    /// The threads a build starts (k-means runs on rayon's global pool, which lives as long as
    /// the backend) block the signals Postgres sends the backend: a cancel or a termination
    /// must reach the backend's own thread.
    #[pg_test]
    fn threads_a_build_starts_block_the_backends_signals() {
        key_table(600, 3);
        exec("CREATE INDEX key_test_threads ON key_test USING skeys (key) WITH (lists = 8)");
        let own = std::process::id();
        let mut others = 0;
        for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
            let task = task.expect("a task");
            let tid: u32 = task
                .file_name()
                .to_string_lossy()
                .parse()
                .expect("a thread id");
            if tid == own {
                continue;
            }
            others += 1;
            let status = std::fs::read_to_string(task.path().join("status")).expect("status");
            let blocked = status
                .lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))
                .map(|m| u64::from_str_radix(m.trim(), 16).expect("a hex mask"))
                .expect("SigBlk");
            // SIGINT (cancel), SIGQUIT, SIGUSR1 (latches, procsignals), SIGTERM (termination).
            for signal in [2u32, 3, 10, 15] {
                assert!(
                    blocked & (1 << (signal - 1)) != 0,
                    "thread {tid} of this backend takes signal {signal} (mask {blocked:x})"
                );
            }
        }
        assert!(others > 0, "the build ran on no thread but the backend's");
    }

    #[pg_test]
    fn key_index_recall_and_exactness_at_full_breadth() {
        let queries = key_table(3000, 5);
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key)");
        let lists: i32 = one("SELECT lists FROM skills.key_index_stats('key_test_ip')");
        // 4·√3000 = 219 would leave 14 keys a list: the default trains 32 keys a list at least.
        assert_eq!(lists, 93, "3000 keys, 32 a list");
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

        exec("SET LOCAL pg_skills.key_probes = 93");
        // Every list read: a sequential scan may cost less; these compare the index's answer.
        exec("SET LOCAL enable_seqscan = off");
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
            // Every list read: a sequential scan may cost less; these compare the index's answer.
            exec("SET LOCAL enable_seqscan = off");
            for q in &queries[..4] {
                let exact = seqscan(|| nearest(op, q, "", 10));
                assert_eq!(nearest(op, q, "", 10), exact, "{class}");
                let query = format!("skills.key_query({}, 8)", key_literal(q));
                let sql = format!(
                    "SELECT id, key OPERATOR(skills.{op}) {query} FROM key_test \
                     ORDER BY key OPERATOR(skills.{op}) {query} LIMIT 10"
                );
                assert!(
                    plan(&sql).contains("Index Scan using key_test_m"),
                    "{class}"
                );
                assert_eq!(key_ids(&sql), exact, "{class} with a skills.keyquery");
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
        exec("SET LOCAL pg_skills.key_probes = 40");
        // Every list read: a sequential scan may cost less; these compare the index's answer.
        exec("SET LOCAL enable_seqscan = off");
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

    /// A `skills.keyquery` carries its breadth into the scan, over the session's settings (how a
    /// Citus coordinator's breadth reaches its shards); NULL fields fall back to the settings;
    /// the planner serves it from the index; a sequential scan orders by the same distances.
    #[pg_test]
    fn key_query_carries_its_breadth() {
        let queries = key_table(2000, 23);
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key) WITH (lists = 40)");
        exec("ANALYZE key_test");
        let with = |q: &[f32], probes: &str, max: &str, filter: &str| {
            let query = format!("skills.key_query({}, {probes}, {max})", key_literal(q));
            key_ids(&format!(
                "SELECT id, key OPERATOR(skills.<#>) {query} FROM key_test {filter} \
                 ORDER BY key OPERATOR(skills.<#>) {query} LIMIT 10"
            ))
        };
        let shown = plan(&format!(
            "SELECT id FROM key_test ORDER BY key OPERATOR(skills.<#>) skills.key_query({}, 3) LIMIT 10",
            key_literal(&queries[0])
        ));
        assert!(shown.contains("Index Scan using key_test_ip"), "{shown}");

        exec("SET LOCAL pg_skills.key_probes = 1");
        // Queries between two clusters: their neighbours lie in more than one list.
        let between: Vec<Vec<f32>> = queries
            .windows(2)
            .take(8)
            .map(|w| w[0].iter().zip(&w[1]).map(|(a, b)| a + b).collect())
            .collect();
        let mut narrower = 0;
        for q in &between {
            let exact = seqscan(|| nearest("<#>", q, "", 10));
            let one_list = nearest("<#>", q, "", 10);
            narrower += usize::from(one_list != exact);
            assert_eq!(
                with(q, "40", "NULL", ""),
                exact,
                "every list, whatever the session reads"
            );
            assert_eq!(with(q, "1", "NULL", ""), one_list);
            assert_eq!(
                with(q, "NULL", "NULL", ""),
                one_list,
                "NULL: the session's breadth"
            );
            assert_eq!(
                seqscan(|| with(q, "1", "NULL", "")),
                exact,
                "a sequential scan is exact"
            );
        }
        // Otherwise the comparisons above could not tell a breadth from another.
        assert!(
            narrower > 0,
            "one list of forty found every neighbour of every query"
        );

        exec("SET LOCAL pg_skills.key_probes = 40");
        let one_list = with(&queries[0], "1", "NULL", "");
        exec("SET LOCAL pg_skills.key_probes = 1");
        assert_eq!(
            nearest("<#>", &queries[0], "", 10),
            one_list,
            "the query's 1 over the session's 40"
        );

        // max_probes from the query bounds the iterative scan of a filtered query.
        let filter = "WHERE category = 3";
        assert_eq!(
            with(&queries[1], "1", "0", filter).len(),
            10,
            "0: every list if need be"
        );
        let per_list: i64 = one("SELECT largest_list FROM skills.key_index_stats('key_test_ip')");
        let capped = with(&queries[1], "1", "1", filter);
        assert!(
            capped.len() < 10 && capped.len() as i64 <= per_list,
            "{}",
            capped.len()
        );
    }

    /// The planner costs a scan at the breadth a constant skills.keyquery carries (what Citus
    /// sends to shards, whose sessions lack the coordinator's setting): one list of eight is
    /// an index scan even where the session's breadth reads every list.
    #[pg_test]
    fn key_index_cost_follows_the_breadth_in_the_query() {
        let queries = key_table(600, 9);
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key) WITH (lists = 8)");
        exec("ANALYZE key_test");
        exec("SET LOCAL pg_skills.key_probes = 65535");
        let q = key_literal(&queries[0]);
        let carried = format!(
            "SELECT id FROM key_test ORDER BY key OPERATOR(skills.<#>) skills.key_query({q}, 1, 0) LIMIT 3"
        );
        assert!(
            plan(&carried).contains("Index Scan using key_test_ip"),
            "{}",
            plan(&carried)
        );
        exec("SET LOCAL pg_skills.key_probes = 1");
        let plain =
            format!("SELECT id FROM key_test ORDER BY key OPERATOR(skills.<#>) {q} LIMIT 3");
        assert!(
            plan(&plain).contains("Index Scan using key_test_ip"),
            "{}",
            plan(&plain)
        );
    }

    /// The default lists: 4·√rows when the sample trains 32 keys a list; fewer when
    /// maintenance_work_mem holds a smaller sample (a notice says so); `lists` as given.
    #[pg_test]
    fn key_index_default_lists_follow_rows_and_sample() {
        key_table(3000, 6);
        let lists = || -> i32 { one("SELECT lists FROM skills.key_index_stats('key_test_ip')") };
        // 1 MB holds a sample of 1,000 keys (the least): 31 lists, not 93.
        exec("SET LOCAL maintenance_work_mem = '1MB'");
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key)");
        assert_eq!(lists(), 31);
        exec("SET LOCAL maintenance_work_mem = '64MB'");
        exec("REINDEX INDEX key_test_ip");
        assert_eq!(lists(), 93);
        // 12,000 rows: 4·√12000 = 438 lists would train 27 keys a list.
        exec(
            "INSERT INTO key_test SELECT id + 3000 * g, category, key FROM key_test, generate_series(1, 3) AS g",
        );
        exec("SET LOCAL maintenance_work_mem = '256MB'");
        exec("REINDEX INDEX key_test_ip");
        assert_eq!(lists(), 375, "12,000 keys, 32 a list");
        // The sample keeps the keys' f16 in half of maintenance_work_mem: 8 MB holds 4,096 keys
        // (was 1,024 in f32 in a quarter), 128 lists.
        exec("SET LOCAL maintenance_work_mem = '8MB'");
        exec("REINDEX INDEX key_test_ip");
        assert_eq!(lists(), 128, "8 MB: a sample of 4,096 keys");
        exec("DROP INDEX key_test_ip");
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key) WITH (lists = 20)");
        assert_eq!(lists(), 20);
    }

    #[pg_test(error = "a skills.keyquery's probes is 0, outside 1 to 65535")]
    fn key_query_breadth_out_of_range() {
        let queries = key_table(200, 3);
        exec("CREATE INDEX key_test_ip ON key_test USING skeys (key) WITH (lists = 4)");
        exec("SET LOCAL enable_seqscan = off");
        exec(&format!(
            "SELECT id FROM key_test ORDER BY key OPERATOR(skills.<#>) skills.key_query({}, 0) LIMIT 3",
            key_literal(&queries[0])
        ));
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

    /// Semantic search reads the skeys index (ordered by the distance alone, no tie-break the
    /// index cannot serve), and still resolves ties at the cut by id as the exact order does.
    #[pg_test]
    fn semantic_search_uses_the_key_index_and_orders_ties_by_id() {
        own_skill_keys();
        let mut rng = Rng(77);
        random_skills(&mut rng, 1500);
        // Three consecutive skills share each key: ties everywhere.
        exec(
            "INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0) \
             SELECT s.id, s.content_hash, array_fill(0::real, ARRAY[384]), \
                    skills.key(ARRAY(SELECT ((abs(hashtext((s.id / 3) || ':' || i)) % 2001) - 1000) / 1000.0 / 12.9 \
                                     FROM generate_series(1, 512) AS i)::real[]) \
             FROM skills.skill AS s \
             ON CONFLICT (skill_id) DO UPDATE SET k0 = EXCLUDED.k0",
        );
        exec("CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0)");
        exec("ANALYZE skills.skill_key");
        exec("ANALYZE skills.skill");
        exec("SET LOCAL pg_skills.key_probes = 65535");
        // Reading every list costs about a sequential scan over 1,500 rows, so the planner's
        // choice between them is close (run alone this test got a sequential scan, after the
        // other tests the index). With sequential scans off the statement must still be one
        // the index can serve (an ORDER BY with a tie-break it cannot).
        exec("SET LOCAL enable_seqscan = off");
        let scans =
            || -> i64 { one("SELECT pg_stat_get_xact_numscans('skills.skill_key_k0'::regclass)") };
        let ids: Vec<i64> = Spi::connect(|c| {
            c.select("SELECT id FROM skills.skill ORDER BY id", None, &[])
                .unwrap()
                .map(|r| r.get::<i64>(1).unwrap().unwrap())
                .collect()
        });
        for &probe in ids.iter().step_by(97).take(8) {
            let key: Vec<f32> = one::<Vec<f32>>(&format!(
                "SELECT k0::real[] FROM skills.skill_key WHERE skill_id = {probe}"
            ));
            for depth in [1, 2, 4, 7] {
                let before = scans();
                let got = as_a_statement(|| crate::search::rank::semantic(&key, None, Some(depth)));
                assert!(scans() > before, "the skeys index was not scanned");
                let exact = seqscan(|| {
                    id_scores(&format!(
                        "SELECT skill_id, (-(k0 OPERATOR(skills.<#>) {lit}))::float8 FROM skills.skill_key \
                         ORDER BY k0 OPERATOR(skills.<#>) {lit}, skill_id LIMIT {depth}",
                        lit = key_literal(&key)
                    ))
                });
                assert_eq!(ids_of(&got), ids_of(&exact), "probe {probe} depth {depth}");
                for (a, b) in got.iter().zip(&exact) {
                    assert!((a.1 - b.1).abs() < 1e-6);
                }
            }
        }
    }

    /// The searches' key statements run on plans the backend keeps (`spi::select_kept`): they
    /// give the index's answer, follow the index when it is dropped and built again (Postgres
    /// plans them anew), and leave the session's own plan_cache_mode as it was.
    #[pg_test]
    fn kept_key_plans_follow_the_index_and_leave_the_session_settings() {
        own_skill_keys();
        keyed_skills("kp", 2000);
        let build = || {
            exec(
                "CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0) WITH (lists = 10)",
            );
            // Both tables: the statements join them, and stale counts of skills.skill (left by
            // other tests) make any plan, kept or not, sort every key.
            exec("ANALYZE skills.skill, skills.skill_key");
        };
        build();
        exec("SET LOCAL pg_skills.key_probes = 40");
        exec("SET LOCAL plan_cache_mode = force_custom_plan");
        let scans =
            || -> i64 { one("SELECT pg_stat_get_xact_numscans('skills.skill_key_k0'::regclass)") };
        let query: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 400.0)
            .collect();
        // Every list read: the exact nearest keys, by a statement planned as usual.
        let exact = seqscan(|| {
            key_ids(&format!(
                "SELECT skill_id, -(k0 OPERATOR(skills.<#>) {q})::float8 FROM skills.skill_key \
                 ORDER BY k0 OPERATOR(skills.<#>) {q}, skill_id LIMIT 10",
                q = key_literal(&query)
            ))
        });
        assert_eq!(exact.len(), 10);
        // The same ids, in the same order, and the same scores (the literal and the real[]
        // may round a value to f16 differently in its last bit).
        let same = |got: Vec<(i64, f64)>, what: &str| {
            assert_eq!(ids_of(&got), ids_of(&exact), "{what}");
            for (g, e) in got.iter().zip(&exact) {
                assert!((g.1 - e.1).abs() < 1e-3, "{what}: {g:?} against {e:?}");
            }
        };
        // The statement's path (the searches read the index directly where they may).
        let search = || crate::search::rank::semantic_by_statement(&query, None, Some(10));
        let before = scans();
        same(search(), "first call");
        assert!(scans() > before, "the kept plan scans the index");
        assert!(crate::spi::kept_plans() >= 1);
        same(search(), "again, on the kept plan");
        // Dropped: the kept plan is planned again without it; rebuilt (a new relation), with it.
        exec("DROP INDEX skills.skill_key_k0");
        same(search(), "without the index");
        build();
        let before = scans();
        same(search(), "with the rebuilt index");
        assert!(scans() > before, "the rebuilt index is scanned");
        let mode: String = one("SELECT current_setting('plan_cache_mode')");
        assert_eq!(mode, "force_custom_plan");
    }

    /// Skills with keys in three categories, their keys shared by pairs (ties), then deleted
    /// skills (their keys with them), rewritten keys (the index's old entries dead), changed
    /// texts (the skill's content hash moves past its key's), and keys left without a skill
    /// (foreign keys not enforced, as under replication): what the direct key search reads past.
    fn direct_search_library() {
        own_skill_keys();
        let mut rng = Rng(20261206);
        random_skills(&mut rng, 700);
        exec(
            "UPDATE skills.skill SET category = (ARRAY['testing', 'debugging', 'data_ml'])[id % 3 + 1]::skills.category",
        );
        exec(
            "INSERT INTO skills.skill_key (skill_id, content_hash, embedding, k0) \
             SELECT s.id, s.content_hash, array_fill(0::real, ARRAY[384]), \
                    skills.key(ARRAY(SELECT ((abs(hashtext((s.id / 2) || ':' || i)) % 2001) - 1000) / 12900.0 \
                                     FROM generate_series(1, 512) AS i)::real[]) \
             FROM skills.skill AS s",
        );
        exec("CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0) WITH (lists = 24)");
        exec("DELETE FROM skills.skill WHERE id % 11 = 0");
        exec(
            "UPDATE skills.skill_key SET k0 = skills.key(ARRAY(SELECT ((abs(hashtext(skill_id || '!' || i)) % 2001) - 1000) / 12900.0 \
                                                        FROM generate_series(1, 512) AS i)::real[]) \
             WHERE skill_id % 13 = 0",
        );
        exec("UPDATE skills.skill SET description = description || ' (revised)' WHERE id % 7 = 0");
        exec("SET LOCAL session_replication_role = replica");
        exec("DELETE FROM skills.skill WHERE id % 17 = 0");
        exec("SET LOCAL session_replication_role = origin");
        let orphans: i64 = one("SELECT count(*) FROM skills.skill_key AS k \
             WHERE NOT EXISTS (SELECT 1 FROM skills.skill AS s WHERE s.id = k.skill_id)");
        assert!(orphans > 10, "{orphans}");
        exec("ANALYZE skills.skill_key");
        exec("ANALYZE skills.skill");
        // The statements must read the key index too: with a category filter, reading that
        // category's skills through skills.skill's category index and sorting their keys would
        // cost less here, and find the exact nearest.
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_sort = off");
    }

    /// The searches read the key index directly (`key::top_k`) and answer as their statement
    /// does: the same skills and scores, ties at the cut by id, at several depths, breadths and
    /// category filters; never a deleted skill or a key without one; KeyOpt's candidates carry
    /// the skill's current content hash.
    #[pg_test]
    fn the_direct_key_search_answers_as_the_statement_does() {
        direct_search_library();
        let index = crate::key::top_k::direct_index().expect("the direct path is open here");
        let index_name: String = one(&format!("SELECT {}::regclass::text", index.to_u32()));
        assert_eq!(index_name, "skills.skill_key_k0");
        let scans =
            || -> i64 { one("SELECT pg_stat_get_xact_numscans('skills.skill_key_k0'::regclass)") };
        let mut rng = Rng(7);
        let stored: Vec<Vec<f32>> = Spi::connect(|c| {
            c.select(
                "SELECT k0::real[] FROM skills.skill_key ORDER BY skill_id",
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<Vec<f32>>(1).unwrap().unwrap())
            .collect()
        });
        let mut queries: Vec<Vec<f32>> = stored.iter().step_by(61).cloned().collect();
        for _ in 0..4 {
            queries.push((0..KEY_DIM).map(|_| rng.unit() as f32 - 0.5).collect());
        }
        let mut compared = 0;
        for probes in ["2", "8", "24"] {
            exec(&format!("SET LOCAL pg_skills.key_probes = {probes}"));
            for (q, key) in queries.iter().enumerate() {
                for depth in [1, 2, 10, 45] {
                    for categories in [None, Some(vec!["debugging".to_string()])] {
                        let before = scans();
                        let direct = as_a_statement(|| {
                            crate::search::rank::semantic(key, categories.clone(), Some(depth))
                        });
                        assert_eq!(scans(), before + 1, "the direct search counts one scan");
                        let by_statement = crate::search::rank::semantic_by_statement(
                            key,
                            categories.clone(),
                            Some(depth),
                        );
                        let what =
                            format!("probes {probes}, query {q}, depth {depth}, {categories:?}");
                        assert_eq!(direct, by_statement, "{what}");
                        assert_eq!(direct.len(), depth, "{what}");
                        assert!(
                            direct.iter().all(|r| r.0 % 11 != 0 && r.0 % 17 != 0),
                            "a deleted skill served: {what}"
                        );
                        if categories.is_some() {
                            assert!(direct.iter().all(|r| r.0 % 3 == 1), "{what}");
                        }
                        let hits = as_a_statement(|| {
                            crate::key::top_k::search(
                                index,
                                key,
                                depth,
                                categories.as_deref(),
                                true,
                            )
                        });
                        for hit in &hits {
                            let hash: String = one(&format!(
                                "SELECT content_hash FROM skills.skill WHERE id = {}",
                                hit.id
                            ));
                            assert_eq!(hit.content_hash.as_deref(), Some(hash.as_str()), "{what}");
                        }
                        compared += 1;
                    }
                }
            }
        }
        assert!(compared > 100);
        // Scores of given skills (a request's parts score the pool): the statement's rows,
        // for ids with a key, without one (deleted), with a key but no skill, unknown, and
        // repeated.
        let lo: i64 = one("SELECT min(skill_id) FROM skills.skill_key");
        let hi: i64 = one("SELECT max(skill_id) FROM skills.skill_key");
        let ids: Vec<i64> = (lo - 3..=hi + 3).chain([lo, lo + 1, lo + 2, -5]).collect();
        let keys: Vec<&[f32]> = queries.iter().take(5).map(|q| q.as_slice()).collect();
        let sorted = |mut rows: Vec<Vec<(i64, f64)>>| {
            rows.iter_mut().for_each(|r| r.sort_by_key(|x| x.0));
            rows
        };
        let direct = as_a_statement(|| crate::key::top_k::scores_of(&keys, &ids))
            .expect("the direct path is open here");
        let by_statement = crate::search::rank::semantic_of_by_statement(&keys, &ids);
        assert!(by_statement[0].len() > 500, "{}", by_statement[0].len());
        assert_eq!(sorted(direct), sorted(by_statement));
        // KeyOpt's candidates among given skills: keyed skills the statement sees, with their
        // current content hash, best first, ties by id.
        for key in &keys {
            let direct = as_a_statement(|| crate::key::top_k::candidates_of(key, &ids))
                .expect("the direct path is open here");
            let direct: Vec<(i64, String, f32)> = direct
                .into_iter()
                .map(|h| (h.id, h.content_hash.expect("asked for"), h.score as f32))
                .collect();
            let by_statement = crate::keyopt::rank::candidates_of_by_statement(key, &ids);
            assert!(by_statement.len() > 400, "{}", by_statement.len());
            assert_eq!(direct, by_statement);
        }
        // The rows' TIDs (BM25's contributions are read by TID): the statement's.
        let mut direct = as_a_statement(|| crate::key::top_k::skill_tids(&ids))
            .expect("the direct path is open here");
        let mut by_statement = crate::search::rank::skill_tids_by_statement(&ids);
        direct.sort_by_key(|r| r.0);
        by_statement.sort_by_key(|r| r.0);
        assert!(by_statement.len() > 500, "{}", by_statement.len());
        assert_eq!(direct, by_statement);
        // Ties: a pair's key asked for at depth 1 serves the lower id of the pair first.
        let pair: i64 = one(
            "SELECT min(s.id) FROM skills.skill AS s JOIN skills.skill_key AS k ON k.skill_id = s.id \
             WHERE s.id % 2 = 0 AND s.id % 13 <> 0 AND (s.id + 1) % 13 <> 0 \
               AND EXISTS (SELECT 1 FROM skills.skill_key AS k2 JOIN skills.skill AS s2 ON s2.id = k2.skill_id \
                           WHERE k2.skill_id = s.id + 1)",
        );
        let key: Vec<f32> = one(&format!(
            "SELECT k0::real[] FROM skills.skill_key WHERE skill_id = {pair}"
        ));
        let top = as_a_statement(|| crate::search::rank::semantic(&key, None, Some(2)));
        assert_eq!(ids_of(&top), vec![pair, pair + 1]);
        assert_eq!(top[0].1, top[1].1);
    }

    /// Where the executor must decide what a user sees (row-level security on skills.skill,
    /// or no SELECT on a table), the searches leave the direct path and run their statement:
    /// the policy applies to semantic search, and a user without the privilege is left to the
    /// statement's permission check.
    #[pg_test]
    fn the_key_search_leaves_row_security_and_privileges_to_the_executor() {
        direct_search_library();
        assert!(crate::key::top_k::direct_index().is_some());
        let key: Vec<f32> =
            one("SELECT k0::real[] FROM skills.skill_key ORDER BY skill_id LIMIT 1");
        exec("CREATE ROLE skills_key_rls_test");
        exec("GRANT skills_reader TO skills_key_rls_test");
        exec("CREATE ROLE skills_key_nobody_test");
        exec("GRANT USAGE ON SCHEMA skills TO skills_key_nobody_test");
        exec("ALTER TABLE skills.skill ENABLE ROW LEVEL SECURITY");
        exec("CREATE POLICY only_data_ml ON skills.skill FOR SELECT USING (category = 'data_ml')");
        let expected = crate::search::rank::semantic_by_statement(
            &key,
            Some(vec!["data_ml".to_string()]),
            Some(10),
        );
        assert_eq!(expected.len(), 10);
        exec("SET LOCAL ROLE skills_key_rls_test");
        assert!(crate::key::top_k::direct_index().is_none());
        let served = as_a_statement(|| crate::search::rank::semantic(&key, None, Some(10)));
        assert_eq!(served, expected, "the policy applies");
        exec("RESET ROLE");
        exec("SET LOCAL ROLE skills_key_nobody_test");
        assert!(crate::key::top_k::direct_index().is_none());
        exec("RESET ROLE");
    }

    /// Hundreds of skills with one key (texts that embed alike): the direct search reads the
    /// tied rows until its cut closes and serves the lowest ids, as the statement does.
    #[pg_test]
    fn the_direct_key_search_orders_many_tied_keys_by_id() {
        own_skill_keys();
        keyed_skills("tie", 900);
        exec(
            "UPDATE skills.skill_key SET k0 = (SELECT k0 FROM skills.skill_key ORDER BY skill_id LIMIT 1) \
             WHERE skill_id IN (SELECT skill_id FROM skills.skill_key ORDER BY skill_id LIMIT 500)",
        );
        exec("CREATE INDEX skill_key_k0 ON skills.skill_key USING skeys (k0) WITH (lists = 8)");
        exec("ANALYZE skills.skill, skills.skill_key");
        exec("SET LOCAL enable_seqscan = off");
        exec("SET LOCAL enable_sort = off");
        let key: Vec<f32> =
            one("SELECT k0::real[] FROM skills.skill_key ORDER BY skill_id LIMIT 1");
        let lowest: Vec<i64> = Spi::connect(|c| {
            c.select(
                "SELECT skill_id FROM skills.skill_key ORDER BY skill_id LIMIT 10",
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<i64>(1).unwrap().unwrap())
            .collect()
        });
        for probes in ["1", "8"] {
            exec(&format!("SET LOCAL pg_skills.key_probes = {probes}"));
            let direct = as_a_statement(|| crate::search::rank::semantic(&key, None, Some(10)));
            assert_eq!(ids_of(&direct), lowest, "probes {probes}");
            assert!(direct.iter().all(|r| r.1 == direct[0].1));
            let by_statement = crate::search::rank::semantic_by_statement(&key, None, Some(10));
            assert_eq!(direct, by_statement, "probes {probes}");
        }
    }
}
