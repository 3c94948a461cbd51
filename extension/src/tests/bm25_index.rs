//! The bm25 index: agreement with the reference scorer and a sequential scan, options,
//! EXPLAIN, filters, bad definitions, REINDEX.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::helpers::*;
    use pgrx::prelude::*;

    /// A read of a page the same store holds for writing is an ERROR, not a share lock that
    /// waits on the backend's own exclusive lock (uninterruptibly: the backend would hang).
    /// Damaged links can lead there: the kernel's random-damage fuzz met a merge that followed
    /// an input list into the page it was writing. Before, this test never returned.
    #[pg_test(error = "index \"skill_bm25\": block 0 is read while this backend writes it")]
    fn reading_a_page_being_written_is_an_error_not_a_hang() {
        use pg_skills_kernels::page::{PageRead, PageWrite};
        let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'skills.skill_bm25'::regclass::oid")
            .unwrap()
            .unwrap();
        // SAFETY: an index of this database, opened and closed (at the transaction's end, the
        // ERROR's) under a lock that writers take.
        unsafe {
            let rel = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
            let store = crate::storage::BufferStore::new(rel, crate::storage::Mode::Logged);
            let _meta = store.write(0);
            let _ = store.read(0);
        }
    }

    /// The bm25 index a search reads is found in the relation cache, and it is the one
    /// `skills.bm25_index()` names: with the extension's index, with none, with another one
    /// and with another one built in its place.
    #[pg_test]
    fn searches_find_the_bm25_index_the_sql_function_names() {
        let sql = || -> Option<pg_sys::Oid> {
            Spi::get_one::<pg_sys::Oid>("SELECT skills.bm25_index()::oid").unwrap()
        };
        let rust = || crate::search::rank::bm25_index();
        assert!(sql().is_some());
        assert_eq!(rust(), (sql(), false));
        without_index();
        assert_eq!(sql(), None);
        assert_eq!(rust(), (None, false));
        exec(
            "CREATE INDEX other_bm25 ON skills.skill USING bm25 \
             ((ARRAY[name, description, instructions]))",
        );
        assert!(sql().is_some());
        assert_eq!(rust(), (sql(), false));
    }

    #[pg_test(error = "skills.skill has 2 bm25 indexes: {skills.skill_bm25,skills.other_bm25}")]
    fn a_search_with_two_bm25_indexes_names_both() {
        exec(
            "CREATE INDEX other_bm25 ON skills.skill USING bm25 \
             ((ARRAY[name, description, instructions]))",
        );
        crate::search::rank::bm25_index();
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

    /// A build past maintenance_work_mem spills its segments to a temporary file and merges
    /// them into the index: one segment, and the same pages as a build that never spilled
    /// (before, the spills were written into the index and their freed pages stayed in it:
    /// about twice the size). Searches agree with the reference and a sequential scan.
    #[pg_test]
    fn a_build_past_maintenance_work_mem_is_as_small_as_one_in_memory() {
        without_index();
        let mut rng = Rng(20261207);
        // About 0.8 kB of builder memory each: a 1 MB build spills two or three times.
        random_skills(&mut rng, 3000);
        let stats = || -> (i32, i64, i64) {
            let (segments, documents, pages) = Spi::get_three::<i32, i64, i64>(
                "SELECT segments, segment_documents, total_pages \
                 FROM skills.bm25_index_stats('skills.skill_bm25'::regclass)",
            )
            .unwrap();
            (segments.unwrap(), documents.unwrap(), pages.unwrap())
        };
        exec("SET LOCAL maintenance_work_mem = '256MB'");
        create_index("");
        let in_memory = stats();
        exec("SET LOCAL maintenance_work_mem = '1MB'");
        exec("REINDEX INDEX skills.skill_bm25");
        let spilled = stats();
        assert_eq!(in_memory.0, 1);
        assert_eq!(in_memory.1, 3000);
        assert_eq!(spilled, in_memory, "(segments, documents, pages)");
        check_index_against_references(&mut rng, 20, true);
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
        // Every tenth row by position, not by id: ids depend on what earlier tests took from
        // the sequence (a rollback does not return them).
        exec(
            "UPDATE skills.skill AS s SET category = CASE WHEN n.r % 10 = 0 THEN 'data_ml'::skills.category ELSE 'testing' END \
             FROM (SELECT id, row_number() OVER (ORDER BY id) AS r FROM skills.skill) AS n WHERE n.id = s.id",
        );
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
        // The rest comes in batches (3, 12, 48 here): each row once, none missing.
        exec("SET LOCAL pg_skills.bm25_scan_batch = 3");
        let batched = ordered("the and of", "");
        let distinct: std::collections::HashSet<i64> = batched.iter().map(|r| r.0).collect();
        assert_eq!((batched.len(), distinct.len()), (40, 40));
        // A query with one match: it first, then the 40 others.
        insert("solo-skill", "zzunique", "");
        let one = ordered("zzunique", "");
        assert_eq!(one.len(), 41);
        assert!(one[0].1 < 0.0 && one[1..].iter().all(|r| r.1 == 0.0));
        let distinct: std::collections::HashSet<i64> = one.iter().map(|r| r.0).collect();
        assert_eq!(distinct.len(), 41);
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

    /// k1 = 0 with a field of weight 0, both valid options: scores stay finite, and a skill
    /// that has the query's word only in that field scores 0, through the index and through a
    /// sequential scan alike. (The kernel's formula gave 0/0 = NaN for a posting with a weighted
    /// frequency of 0; an index built with these options writes no such posting, so only
    /// damaged pages reached it: the kernel's unit test and fuzz cover that.)
    #[pg_test]
    fn k1_zero_and_a_zero_weight_field_score_zero_not_nan() {
        without_index();
        let only_there = insert("alpha", "a zebra only here", "nothing else to see");
        let matched = insert("zebra", "plain words", "zebra zebra crossing");
        create_index("WITH (k1 = 0, description_weight = 0)");
        let by_index = ordered("zebra", "LIMIT 10");
        exec("SET LOCAL enable_indexscan = off");
        exec("SET LOCAL enable_bitmapscan = off");
        let by_scan = ordered("zebra", "LIMIT 10");
        for rows in [&by_index, &by_scan] {
            assert!(rows.iter().all(|(_, s)| !s.is_nan()), "{rows:?}");
            assert_eq!(rows.first().map(|r| r.0), Some(matched), "{rows:?}");
            let score = rows.iter().find(|r| r.0 == only_there).map(|r| r.1);
            assert_eq!(score, Some(0.0), "{rows:?}");
        }
    }

    #[pg_test(error = "invalid bm25 index options: at least one field weight must be positive")]
    fn bm25_index_all_weights_zero() {
        without_index();
        create_index("WITH (name_weight = 0, description_weight = 0, instructions_weight = 0)");
    }

    /// A query carrying statistics scores with them: on one node, the index's own statistics
    /// carried give exactly the plain query's scores (index scan and sequential scan alike);
    /// doubled counts (as if another shard held the same rows again) change every score, and
    /// the index scan and the operator agree on those too.
    #[pg_test]
    fn carried_statistics_score_like_the_index_and_change_scores() {
        without_index();
        let mut rng = Rng(11);
        random_skills(&mut rng, 200);
        create_index("");
        for _ in 0..8 {
            let query = rng.words(1, 4);
            let q = quote(&query);
            let plain = ordered(&query, "LIMIT 10");
            let with = |qexpr: &str, seq: bool| {
                exec(&format!(
                    "SET LOCAL enable_seqscan = {}",
                    if seq { "on" } else { "off" }
                ));
                exec(&format!(
                    "SET LOCAL enable_indexscan = {}",
                    if seq { "off" } else { "on" }
                ));
                let rows = id_scores(&format!(
                    "SELECT id, {DOC} OPERATOR(skills.<&>) {qexpr} FROM skills.skill \
                     ORDER BY {DOC} OPERATOR(skills.<&>) {qexpr}, id LIMIT 10"
                ));
                exec("RESET enable_seqscan");
                exec("RESET enable_indexscan");
                rows
            };
            let global = format!("skills.bm25_global_query({q})");
            for seq in [false, true] {
                let carried = with(&global, seq);
                assert_eq!(carried.len(), plain.len(), "{query:?}");
                for (a, b) in carried.iter().zip(&plain) {
                    assert!(
                        (a.1 - b.1).abs() <= 1e-12,
                        "{query:?} seq {seq}: {carried:?} vs {plain:?}"
                    );
                }
            }
            // Twice the collection: every document and term count doubled.
            let doubled = format!(
                "ROW(skills.bm25_index()::oid, {q}, skills.bm25_corpus_sum(ARRAY[skills.bm25_corpus(skills.bm25_index(), {q}), skills.bm25_corpus(skills.bm25_index(), {q})]))::skills.bm25query"
            );
            let by_index = with(&doubled, false);
            let by_seqscan = with(&doubled, true);
            assert_eq!(by_index.len(), by_seqscan.len());
            for (a, b) in by_index.iter().zip(&by_seqscan) {
                assert!(
                    (a.1 - b.1).abs() <= 1e-12,
                    "{query:?}: {by_index:?} vs {by_seqscan:?}"
                );
            }
            if let (Some(a), Some(b)) = (by_index.first(), plain.first()) {
                if b.1 < 0.0 {
                    assert!(
                        (a.1 - b.1).abs() > 1e-9,
                        "{query:?}: doubled statistics left {a:?}"
                    );
                }
            }
        }
    }

    #[pg_test]
    fn statistics_from_other_options_or_malformed_are_refused() {
        without_index();
        insert("rust", "panic backtrace", "run it");
        create_index("");
        let corpus =
            one::<pgrx::JsonB>("SELECT skills.bm25_corpus(skills.bm25_index(), 'rust panic')");
        let text = corpus.0.to_string();
        assert!(text.contains("\"documents\":1"), "{text}");
        let scan = |json: &str| {
            format!(
                "PERFORM id FROM skills.skill ORDER BY {DOC} OPERATOR(skills.<&>) \
                 ROW(skills.bm25_index()::oid, 'rust', {}::jsonb)::skills.bm25query LIMIT 1",
                quote(json)
            )
        };
        // The index scan checks the options (a sequential scan scores with the carried ones).
        exec("SET LOCAL enable_seqscan = off");
        let other_k1 = text.replace("\"k1\":1.5", "\"k1\":1.2");
        assert_refused(
            &scan(&other_k1),
            "invalid_parameter_value",
            "%other index options%",
        );
        let too_many = text.replace("\"documents\":1", "\"documents\":0");
        assert_refused(
            &scan(&too_many),
            "invalid_parameter_value",
            "%document frequency exceeds%",
        );
        assert_refused(
            &scan("{}"),
            "invalid_parameter_value",
            "%statistics are not valid%",
        );
        assert_refused(
            &format!(
                "PERFORM skills.bm25_corpus_sum(ARRAY[{}::jsonb, {}::jsonb])",
                quote(&text),
                quote(&other_k1)
            ),
            "invalid_parameter_value",
            "%different options%",
        );
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

    /// What the operator path answers: rows with a query term in `ORDER BY doc <&> q, id`
    /// order (the tie-break makes it a sort over a sequential scan), optionally in categories.
    fn operator_top(query: &str, k: Option<usize>, categories: &str) -> Vec<(i64, f64)> {
        let q = format!("skills.bm25query({})", quote(query));
        let filter = if categories == "NULL" {
            String::new()
        } else {
            format!("AND category::text = ANY ({categories}::text[])")
        };
        let limit = k.map_or(String::new(), |k| format!("LIMIT {k}"));
        id_scores(&format!(
            "SELECT id, score FROM (SELECT id, category, -({DOC} OPERATOR(skills.<&>) {q}) AS score \
             FROM skills.skill) AS s WHERE score > 0 {filter} ORDER BY score DESC, id {limit}"
        ))
    }

    /// The BM25 part of a KeyOpt base relevance (`search::rank::bm25_relevance`, which scores
    /// only the skills it is asked about) of every id up to the largest, deleted ones included,
    /// against the operator's score of every row the user sees over
    /// `skills.bm25_score_supremum`; returns the expected (id, value) rows.
    fn assert_relevance_part_is_the_operator_s(query: &str, what: &str) -> Vec<(i64, f64)> {
        let q = format!("skills.bm25query({})", quote(query));
        let expected = id_scores(&format!(
            "SELECT id, score / skills.bm25_score_supremum({q}) FROM \
             (SELECT id, -({DOC} OPERATOR(skills.<&>) {q}) AS score FROM skills.skill) AS s \
             WHERE score > 0 ORDER BY id"
        ));
        let last: i64 = one("SELECT max(id) FROM skills.skill");
        let ids: Vec<i64> = (1..=last).collect();
        let present = ids_of(&id_scores("SELECT id, 0::float8 FROM skills.skill"));
        let unseen: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !present.contains(id))
            .collect();
        let got = as_a_statement(|| {
            let index = crate::search::rank::bm25_index();
            let mut memo = crate::search::rank::Bm25Memo::default();
            let got = crate::search::rank::bm25_relevance(index, query, &ids, &mut memo);
            // A search's later texts reuse what its earlier ones read: a wider text over some
            // of the skills, then this one over all of them, scores as this one alone does.
            let mut shared = crate::search::rank::Bm25Memo::default();
            let wider = format!("debug the {query} error again");
            let some: Vec<i64> = ids.iter().copied().filter(|id| id % 3 != 1).collect();
            crate::search::rank::bm25_relevance(index, &wider, &some, &mut shared);
            let again = crate::search::rank::bm25_relevance(index, query, &ids, &mut shared);
            assert_eq!(
                again, got,
                "{what} {query:?}: through a memo a wider text filled"
            );
            // A memo whose first reading met only skills the snapshot does not see.
            let mut first_unseen = crate::search::rank::Bm25Memo::default();
            crate::search::rank::bm25_relevance(index, query, &unseen, &mut first_unseen);
            let after = crate::search::rank::bm25_relevance(index, query, &ids, &mut first_unseen);
            assert_eq!(
                after, got,
                "{what} {query:?}: after a reading of unseen skills alone"
            );
            got
        });
        let mut got: Vec<(i64, f64)> = got.into_iter().map(|(id, r)| (id, r as f64)).collect();
        got.sort_by_key(|r| r.0);
        assert_eq!(ids_of(&got), ids_of(&expected), "{what} {query:?}");
        for (g, e) in got.iter().zip(&expected) {
            assert!(
                (g.1 - e.1).abs() <= 1e-6 * e.1 && e.1 < 1.0,
                "{what} {query:?}: {g:?} vs {e:?}"
            );
        }
        expected
    }

    fn assert_same(a: &[(i64, f64)], b: &[(i64, f64)], what: &str) {
        assert_eq!(ids_of(a), ids_of(b), "{what}: {a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x.1 - y.1).abs() <= 1e-9 * y.1.abs(),
                "{what}: {x:?} vs {y:?}"
            );
        }
    }

    /// The direct top-k (index hits, rows fetched through the table AM) against the operator
    /// path, with what a heap holds between VACUUMs: dead rows the index still names, HOT
    /// chains whose root the index names, new versions, and rows outside the categories asked.
    #[pg_test]
    fn direct_top_k_equals_the_operator_path_over_dead_hot_and_filtered_rows() {
        without_index();
        // Room on every page, so updates of unindexed columns stay on the page (HOT).
        exec("ALTER TABLE skills.skill SET (fillfactor = 40)");
        let mut rng = Rng(20261203);
        random_skills(&mut rng, 240);
        exec("UPDATE skills.skill SET category = CASE WHEN id % 3 = 0 THEN 'testing'::skills.category ELSE 'debugging' END");
        create_index("");
        let hot_before: i64 =
            one("SELECT pg_stat_get_xact_tuples_hot_updated('skills.skill'::regclass)");
        exec("UPDATE skills.skill SET category_locked = true WHERE id % 4 = 0");
        let hot_after: i64 =
            one("SELECT pg_stat_get_xact_tuples_hot_updated('skills.skill'::regclass)");
        assert!(
            hot_after > hot_before + 20,
            "HOT updates: {hot_before} -> {hot_after}"
        );
        exec("DELETE FROM skills.skill WHERE id % 5 = 0");
        exec("UPDATE skills.skill SET instructions = instructions || ' rust rust panic' WHERE id % 7 = 0");
        let index: i64 = one("SELECT skills.bm25_index()::oid::bigint");
        for _ in 0..12 {
            let query = rng.words(1, 5);
            for k in [Some(1), Some(3), Some(10), None] {
                for categories in ["NULL", "'{testing}'"] {
                    let sql_k = k.map_or("NULL".to_string(), |k| k.to_string());
                    let direct = id_scores(&format!(
                        "SELECT id, score FROM skills.bm25_top_k({}, {sql_k}, {categories}, {index})",
                        quote(&query)
                    ));
                    let reference = operator_top(&query, k, categories);
                    assert_same(
                        &direct,
                        &reference,
                        &format!("{query:?} k {sql_k} {categories}"),
                    );
                    if k.is_some() && categories == "NULL" {
                        assert_same(
                            &search(&format!("{}, k => {sql_k}", quote(&query))),
                            &reference,
                            "skills.search",
                        );
                    }
                }
            }
        }
        // KeyOpt's BM25 part reads the index for just the skills asked about, HOT-updated ones
        // (whose own TID the index does not hold) among them.
        let mut hot_scored = 0;
        for _ in 0..6 {
            let query = rng.words(2, 6);
            let rows = assert_relevance_part_is_the_operator_s(&query, "direct");
            hot_scored += rows
                .iter()
                .filter(|r| r.0 % 4 == 0 && r.0 % 5 != 0 && r.0 % 7 != 0)
                .count();
        }
        assert!(hot_scored > 0, "no HOT-updated skill was scored");
        // Each search counts as a scan of the index (pg_stat_user_indexes.idx_scan).
        let scans =
            || -> i64 { one("SELECT pg_stat_get_xact_numscans('skills.skill_bm25'::regclass)") };
        let before = scans();
        search("'rust panic', k => 3");
        assert!(scans() > before, "idx_scan did not count the search");
        // A deleted row the index still names is not served; a HOT-updated one is.
        let deleted = id_scores("SELECT id, 0::float8 FROM skills.bm25_top_k('rust panic', NULL, NULL, skills.bm25_index())");
        assert!(deleted.iter().all(|r| r.0 % 5 != 0), "{deleted:?}");
        assert!(deleted.iter().any(|r| r.0 % 4 == 0), "{deleted:?}");
    }

    /// Row-level security: the direct path does not apply policies, so a user they apply to is
    /// served by the operator path (policies applied, still k rows), and the direct function
    /// refuses.
    #[pg_test]
    fn row_level_security_is_applied_to_bm25_searches() {
        without_index();
        let mut rng = Rng(41);
        random_skills(&mut rng, 120);
        exec("UPDATE skills.skill SET category = CASE WHEN id % 2 = 0 THEN 'testing'::skills.category ELSE 'debugging' END");
        create_index("");
        exec("CREATE ROLE skills_rls_reader_test");
        exec("GRANT skills_reader TO skills_rls_reader_test");
        exec("ALTER TABLE skills.skill ENABLE ROW LEVEL SECURITY");
        exec("CREATE POLICY only_debugging ON skills.skill FOR SELECT USING (category = 'debugging')");
        let query = "rust panic docker test python";
        let expected = operator_top(query, Some(10), "'{debugging}'");
        assert_eq!(expected.len(), 10);
        exec("SET LOCAL ROLE skills_rls_reader_test");
        let served = search(&format!("{}, k => 10", quote(query)));
        assert_same(&served, &expected, "under the policy");
        // KeyOpt's BM25 part is read through the operator here, policies applied.
        let rows = assert_relevance_part_is_the_operator_s(query, "under the policy");
        assert!(
            !rows.is_empty() && rows.iter().all(|r| r.0 % 2 == 1),
            "{rows:?}"
        );
        assert_refused(
            "PERFORM * FROM skills.bm25_top_k('rust', 5, NULL, skills.bm25_index())",
            "feature_not_supported",
            "%row-level security%",
        );
        exec("RESET ROLE");
    }

    fn append_area() -> (i32, i64, i32) {
        Spi::connect(|c| {
            let r = c
                .select(
                    "SELECT append_pages, append_documents, segments
                     FROM skills.bm25_index_stats('skills.skill_bm25'::regclass)",
                    None,
                    &[],
                )
                .unwrap()
                .first();
            (
                r.get::<i32>(1).unwrap().unwrap(),
                r.get::<i64>(2).unwrap().unwrap(),
                r.get::<i32>(3).unwrap().unwrap(),
            )
        })
    }

    /// skills.bm25_merge_append merges an append area on demand, before it reaches the index's
    /// limit; searches agree with the references before and after.
    #[pg_test]
    fn a_merge_on_demand_empties_the_append_area() {
        without_index();
        create_index("WITH (append_pages = 40)");
        let mut rng = Rng(20261205);
        random_skills(&mut rng, 120);
        let (pages, documents, _) = append_area();
        assert!(pages > 2 && pages <= 40, "{pages} pages");
        assert!(documents > 30, "{documents} documents");
        check_index_against_references(&mut rng, 8, true);
        assert!(one::<bool>(
            "SELECT skills.bm25_merge_append('skills.skill_bm25'::regclass)"
        ));
        let (pages, documents, segments) = append_area();
        assert_eq!(documents, 0);
        assert!(
            pages <= 1,
            "{pages} pages (an empty chain has its head page)"
        );
        assert!(segments >= 1);
        assert!(!one::<bool>(
            "SELECT skills.bm25_merge_append('skills.skill_bm25'::regclass)"
        ));
        check_index_against_references(&mut rng, 8, true);
    }

    /// 500 rows whose documents hold a hundred distinct terms each.
    const SPILLING_ROWS: &str = "SELECT 'spill-' || g, 'spilled rows', \
        (SELECT string_agg(md5(g || '-' || i), ' ') FROM generate_series(1, 100) AS i) \
        FROM generate_series(1, 500) AS g";

    /// Files in the temporary directory now (this session's spills; nothing else runs).
    fn temporary_files() -> i64 {
        one("SELECT count(*) FROM pg_ls_tmpdir()")
    }

    /// The live rows' documents the index holds (segments and append area).
    fn indexed_documents() -> i64 {
        one("SELECT segment_documents + append_documents FROM skills.bm25_index_stats('skills.skill_bm25'::regclass)")
    }

    /// Bulk inserts are gathered and written as a segment when the session next reads the
    /// index: its searches see them, agreeing with the references, and none went through the
    /// append area. Past maintenance_work_mem they go through a temporary file first.
    #[pg_test]
    fn bulk_inserts_are_read_back_by_the_same_transaction() {
        without_index();
        create_index("");
        let before = indexed_documents();
        exec("SET LOCAL pg_skills.bm25_bulk_insert = on");
        let mut rng = Rng(20261207);
        random_skills(&mut rng, 150);
        check_index_against_references(&mut rng, 8, true);
        let (_, append_documents, _) = append_area();
        assert_eq!(append_documents, 0);
        assert_eq!(indexed_documents(), before + 150);
        // Spilled: 1 MB holds the postings of about a hundred of these documents (a hundred
        // new terms each), and the temporary file lives until the session reads the index.
        exec("SET LOCAL maintenance_work_mem = '1MB'");
        exec(&format!(
            "INSERT INTO skills.skill (name, description, instructions) {SPILLING_ROWS}"
        ));
        assert!(temporary_files() > 0, "the documents spilled");
        check_index_against_references(&mut rng, 8, true);
        assert_eq!(temporary_files(), 0, "written into the index");
        assert_eq!(indexed_documents(), before + 650);
        assert_eq!(append_area().1, 0);
        let seventh: i64 = one("SELECT id FROM skills.skill WHERE name = 'spill-7'");
        let hits = search("md5('7-3') || ' ' || md5('7-4')");
        assert_eq!(hits.first().map(|h| h.0), Some(seventh), "{hits:?}");
    }

    /// The rows of a subtransaction that rolled back are left out of what bulk inserts write
    /// (by then VACUUM may have given their TIDs to other rows), whether the documents were
    /// still in memory or spilled, and the rows around it are written.
    #[pg_test]
    fn a_rolled_back_subtransaction_leaves_its_bulk_documents_out() {
        without_index();
        create_index("");
        exec("SET LOCAL pg_skills.bm25_bulk_insert = on");
        let mut rng = Rng(11);
        for memory in ["64MB", "1MB"] {
            exec(&format!("SET LOCAL maintenance_work_mem = '{memory}'"));
            random_skills(&mut rng, 40);
            exec(&format!(
                "DO $$ BEGIN
                   INSERT INTO skills.skill (name, description, instructions)
                   SELECT 'gone-' || name, description, 'zqxgoneword ' || instructions
                   FROM ({SPILLING_ROWS}) AS rows (name, description, instructions);
                   RAISE EXCEPTION 'roll back';
                 EXCEPTION WHEN raise_exception THEN NULL;
                 END $$"
            ));
            assert_eq!(
                temporary_files() > 0,
                memory == "1MB",
                "spilled at {memory}"
            );
            random_skills(&mut rng, 40);
            let live: i64 = one("SELECT count(*) FROM skills.skill");
            assert_eq!(indexed_documents(), live, "maintenance_work_mem {memory}");
            assert!(search("'zqxgoneword'").is_empty());
            check_index_against_references(&mut rng, 6, true);
        }
    }

    /// A utility command writes the gathered documents first: a REINDEX in a subtransaction
    /// that rolls back leaves the index's old file in place, which must hold the rows the
    /// transaction inserted before it (the rebuild would have dropped them as its own).
    #[pg_test]
    fn a_reindex_rolled_back_keeps_the_gathered_documents() {
        // The index as a build leaves it (the shared one holds rolled-back tests' entries).
        without_index();
        create_index("");
        let before = indexed_documents();
        exec("SET LOCAL pg_skills.bm25_bulk_insert = on");
        exec(
            "DO $$ BEGIN
               INSERT INTO skills.skill (name, description, instructions)
               SELECT 'kept-' || g, 'rows before the reindex', 'zqxkeptword ' || g
               FROM generate_series(1, 30) AS g;
               BEGIN
                 REINDEX INDEX skills.skill_bm25;
                 RAISE EXCEPTION 'roll back the reindex';
               EXCEPTION WHEN raise_exception THEN NULL;
               END;
             END $$",
        );
        assert_eq!(search("'zqxkeptword', k => 100").len(), 30);
        assert_eq!(indexed_documents(), before + 30);
        assert_eq!(
            indexed_documents(),
            one::<i64>("SELECT count(*) FROM skills.skill")
        );
    }

    /// An ERROR while gathered documents were being written loses them: a subtransaction that
    /// caught it cannot let the transaction go on inserting (or commit) without them.
    #[pg_test(
        error = "documents this transaction inserted into a bm25 index were lost by an earlier error"
    )]
    fn a_lost_spill_stops_the_transaction() {
        exec("SET LOCAL pg_skills.bm25_bulk_insert = on");
        exec("SET LOCAL maintenance_work_mem = '1MB'");
        exec("SET LOCAL temp_file_limit = 0");
        exec(&format!(
            "DO $$ BEGIN
               INSERT INTO skills.skill (name, description, instructions) {SPILLING_ROWS};
             EXCEPTION WHEN configuration_limit_exceeded THEN NULL;
             END $$"
        ));
        insert("after", "the lost spill", "one more row");
    }

    /// A load gathers its documents and leaves them written, the append area untouched, with
    /// the session's setting as it was.
    #[pg_test]
    fn a_load_writes_its_documents_without_the_append_area() {
        let mut rng = Rng(7);
        let rows: Vec<(String, String, String)> = (0..300)
            .map(|i| (format!("load-{i}"), rng.words(40, 200), format!("r:{i}")))
            .collect();
        let (_, appended_before, segments_before) = append_area();
        // The shared index may hold entries of rows earlier tests rolled back: count what the
        // load adds.
        let documents_before = indexed_documents();
        stage(&rows);
        assert_eq!(apply(), (300, 0, 0, 0));
        let (_, appended, segments) = append_area();
        assert!(
            appended <= appended_before,
            "{appended} appended, {appended_before} before"
        );
        // The load's segment, and the append area's when earlier rows were in it.
        assert!(
            segments <= segments_before + 2,
            "{segments} segments, {segments_before} before"
        );
        assert_eq!(indexed_documents(), documents_before + 300);
        assert_eq!(
            one::<String>("SELECT current_setting('pg_skills.bm25_bulk_insert')"),
            "off"
        );
        check_index_against_references(&mut rng, 8, true);
    }

    /// A load into an index without stemming agrees with the reference, and finds words as
    /// written.
    #[pg_test]
    fn a_load_into_an_index_without_stemming() {
        without_index();
        create_index("WITH (stemming = false)");
        exec("SET LOCAL pg_skills.bm25_stemming = off");
        let mut rng = Rng(8);
        let inflected = ["running tests", "deployed connections", "caching builds"];
        let rows: Vec<(String, String, String)> = (0..200)
            .map(|i| {
                let body = format!("{} {}", rng.words(20, 120), inflected[i % 3]);
                (format!("plain-{i}"), body, format!("r:{i}"))
            })
            .collect();
        stage(&rows);
        assert_eq!(apply(), (200, 0, 0, 0));
        check_index_against_references(&mut rng, 12, true);
        // Unstemmed words are found as written.
        for query in ["running", "connections", "caching builds"] {
            exec("SET LOCAL enable_seqscan = off");
            // The index returns every row, the matching ones first (a negated score).
            let mut by_index = ordered(query, "LIMIT 100");
            by_index.retain(|&(_, value)| value < 0.0);
            exec("SET LOCAL enable_seqscan = on");
            let reference = id_scores(&format!(
                "SELECT id, score FROM skills.bm25_scan({}, 100, NULL)",
                quote(query)
            ));
            assert!(by_index.len() >= 60, "{query}: {} rows", by_index.len());
            assert_eq!(by_index.len(), reference.len(), "{query}");
        }
    }

    #[pg_test(error = "cannot execute skills.bm25_merge_append() in a read-only transaction")]
    fn merging_the_append_area_is_a_write() {
        exec("SET LOCAL transaction_read_only = on");
        exec("SELECT skills.bm25_merge_append('skills.skill_bm25'::regclass)");
    }

    #[pg_test(error = "\"skill_name_idx\" is not a bm25 index")]
    fn merging_the_append_area_of_another_index() {
        exec("SELECT skills.bm25_merge_append('skills.skill_name_idx'::regclass)");
    }

    #[pg_test(error = "permission denied for table merge_target")]
    fn merging_the_append_area_needs_insert_on_the_table() {
        exec("CREATE TABLE public.merge_target (name text, description text, instructions text)");
        exec("CREATE INDEX merge_target_bm25 ON public.merge_target USING bm25 ((ARRAY[name, description, instructions]))");
        exec("CREATE ROLE merge_tester");
        exec("GRANT SELECT ON public.merge_target TO merge_tester");
        exec("GRANT USAGE ON SCHEMA skills TO merge_tester");
        exec("GRANT EXECUTE ON FUNCTION skills.bm25_merge_append(oid) TO merge_tester");
        exec("SET LOCAL ROLE merge_tester");
        exec("SELECT skills.bm25_merge_append('public.merge_target_bm25'::regclass)");
    }
}
