//! The encoder, skill keys from the embedding queue, semantic search, the compressor. These need
//! the model (`./x model`); without it they pass after saying SKIP.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::helpers::*;
    use pgrx::prelude::*;

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

    /// Where copies of one content can be stored (Citus: no unique constraint), the embedder
    /// merges them before keying: one skill, one key.
    /// A key that cannot be written (here a trigger someone put on skills.skill_key refuses
    /// it) leaves that skill failed with the error and the others keyed. Before, the ERROR
    /// ended `embed_pending` (and, in the worker, the worker, which took the same batch again
    /// after its restart, so the queue stalled on that skill).
    #[pg_test]
    fn a_key_that_cannot_be_written_fails_that_skill_alone() {
        if !have_model() {
            return;
        }
        let ok = insert("plain", "format a date in Python", "use strftime");
        let refused = insert("refused", "a skill whose key a trigger refuses", "none");
        let other = insert("other", "parse JSON in Rust", "use serde_json");
        exec(&format!(
            "CREATE FUNCTION public.refuse_key() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF NEW.skill_id = {refused} THEN \
                 RAISE EXCEPTION 'keys of skill % are refused here', NEW.skill_id; END IF; \
             RETURN NEW; END $$; \
             CREATE TRIGGER refuse_key BEFORE INSERT ON skills.skill_key \
                 FOR EACH ROW EXECUTE FUNCTION public.refuse_key()"
        ));
        assert_eq!(one::<i64>("SELECT skills.embed_pending()"), 2);
        let keyed: Vec<i64> =
            one("SELECT array_agg(skill_id ORDER BY skill_id) FROM skills.skill_key");
        assert_eq!(keyed, vec![ok, other]);
        let reason: String = one(&format!(
            "SELECT failed_reason FROM skills.embed_queue WHERE skill_id = {refused}"
        ));
        assert!(
            reason.contains(&format!("keys of skill {refused} are refused here")),
            "{reason}"
        );
        assert_eq!(one::<i64>("SELECT failed FROM skills.embedder_status"), 1);
        // The failed skill is not taken again; a content change queues it again.
        assert_eq!(one::<i64>("SELECT skills.embed_pending()"), 0);
        exec("DROP TRIGGER refuse_key ON skills.skill_key");
        exec(&format!(
            "UPDATE skills.skill SET instructions = 'now allowed' WHERE id = {refused}"
        ));
        assert_eq!(one::<i64>("SELECT skills.embed_pending()"), 1);
    }

    #[pg_test]
    fn embed_pending_merges_copies_before_keying() {
        if !have_model() {
            return;
        }
        without_content_hash_constraint();
        let first = insert("copy", "the same content", "twice");
        insert("copy", "the same content", "twice");
        insert("unique", "other content", "once");
        assert_eq!(one::<i64>("SELECT skills.embed_pending()"), 2);
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.skill WHERE name = 'copy'"),
            1
        );
        assert_eq!(
            one::<i64>(&format!(
                "SELECT count(*) FROM skills.skill_key WHERE skill_id = {first}"
            )),
            1,
            "the oldest copy is kept and keyed"
        );
        assert_eq!(one::<i64>("SELECT count(*) FROM skills.embed_queue"), 0);
    }

    #[pg_test]
    fn semantic_search_ranks_by_key_and_the_index_agrees_with_the_scan() {
        if !have_model() {
            return;
        }
        own_skill_keys();
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

    /// Without a pairs query the compressor learns from the recorded runs: each task with the
    /// skills that passed in it; failed arms, arms known only through the run's set outcome and
    /// arms of content that has changed since are not pairs. A round fitted afterwards records
    /// the compressor its keys came from.
    #[pg_test]
    fn a_compressor_trains_on_the_skills_that_passed_in_recorded_runs() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        let arm = |id: i64, passed: &str| format!("{{\"skill_id\": {id}, \"passed\": {passed}}}");
        for (i, id) in ids.iter().enumerate().take(4) {
            let rival = ids[(i + 1) % ids.len()];
            for variant in ["how do I", "help me", "I need to"] {
                exec(&format!(
                    "SELECT skills.record_run('{variant} handle case {i} of my project', '[{}, {}]')",
                    arm(*id, "true"),
                    arm(rival, "false")
                ));
            }
        }
        // A run known only as a set that passed: not a pair.
        exec(&format!(
            "SELECT skills.record_run('a set of two did it', '[{{\"skill_id\": {}}}, {{\"skill_id\": {}}}]', run_passed => true)",
            ids[0], ids[1]
        ));
        // A pass for content that has changed since: not a pair either.
        exec(&format!(
            "SELECT skills.record_run('an old version of the last skill helped', '[{}]')",
            arm(ids[4], "true")
        ));
        exec(&format!(
            "UPDATE skills.skill SET instructions = instructions || ' (revised)' WHERE id = {}",
            ids[4]
        ));
        exec("SELECT skills.embed_pending()");
        let version: i32 = one("SELECT skills.train_compressor(hidden => 16, epochs => 3)");
        let report: pgrx::JsonB = one(&format!(
            "SELECT training FROM skills.compressor WHERE version = {version}"
        ));
        assert_eq!(report.0["pairs"], 12, "{}", report.0);
        assert_eq!(report.0["queries"], 12, "{}", report.0);
        assert_eq!(report.0["skills"], 4, "{}", report.0);
        assert!(one::<bool>(&format!(
            "SELECT active FROM skills.compressor WHERE version = {version}"
        )));
        one::<i32>("SELECT skills.fit()");
        assert_eq!(
            one::<i32>(
                "SELECT (report ->> 'compressor_version')::integer FROM skills.keyopt_round WHERE active"
            ),
            version
        );
    }

    /// The query keys of a backend are kept least recently used first out: a request of
    /// several parts holds a key per part, and a few hundred such requests must not empty the
    /// whole cache (it was cleared at 512 keys: every key, the ones just used too).
    #[pg_test]
    fn the_query_key_cache_keeps_recently_used_keys_past_512() {
        if !have_model() {
            return;
        }
        let first = "query 0 of a long session";
        exec(&format!("SELECT skills.query_key_values('{first}')"));
        for i in 1..700 {
            exec(&format!(
                "SELECT skills.query_key_values('query {i} of a long session')"
            ));
            if i % 100 == 0 {
                // The first query is asked again now and then: it stays recently used.
                exec(&format!("SELECT skills.query_key_values('{first}')"));
            }
        }
        assert!(crate::embedding::query_key_cached(first));
        assert!(crate::embedding::query_key_cached(
            "query 1 of a long session"
        ));
        assert!(crate::embedding::query_key_cached(
            "query 699 of a long session"
        ));
    }

    /// The largest difference between two embeddings, value by value.
    fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    #[pg_test]
    fn documents_are_encoded_in_the_precision_the_server_sets() {
        if !have_model() {
            return;
        }
        let text = "Bisect a regression between two release tags";
        let embed = || -> Vec<f32> { one(&format!("SELECT skills.embed('{text}')")) };
        let exact = embed();
        exec("SET pg_skills.document_precision = bf16");
        let tiles = embed();
        exec("SET pg_skills.query_precision = bf16");
        let key: Vec<f32> = one(&format!("SELECT skills.query_key_values('{text}')"));
        exec("RESET pg_skills.query_precision");
        exec("RESET pg_skills.document_precision");
        assert_eq!(embed(), exact, "f32 again after RESET");
        let cosine = pg_skills_kernels::vector::scalar::dot(&exact, &tiles);
        assert!(cosine > 0.9999, "cosine {cosine}");
        if pg_skills_kernels::encoder::Precision::bf16_available() {
            assert!(largest_difference(&exact, &tiles) > 1e-5, "bf16 was f32");
            // A request in bf16 is encoded as a stored key in bf16 is: its key is the
            // document's embedding, padded.
            assert!(largest_difference(&key[..384], &tiles) < 1e-6);
        } else {
            assert_eq!(tiles, exact, "no AMX-BF16: documents stay f32");
        }
    }

    #[pg_test]
    fn a_request_is_encoded_in_the_precision_the_session_sets() {
        if !have_model() {
            return;
        }
        let request = "roll back a failed kubernetes deployment";
        let key = |precision: &str| -> Vec<f32> {
            exec(&format!("SET pg_skills.query_precision = {precision}"));
            one(&format!("SELECT skills.query_key_values('{request}')"))
        };
        let exact = key("f32");
        let reduced = key("int16");
        let bytes = key("int8");
        let tiles = key("bf16");
        let again = key("f32");
        let document: Vec<f32> = one(&format!("SELECT skills.embed('{request}')"));
        // f32: the key is e(text) padded, as a stored key of the same text would be.
        assert!(largest_difference(&exact[..384], &document) < 1e-6);
        // The cache keeps each precision's key apart: f32 again is the f32 key.
        assert_eq!(again, exact);
        let cosine = |other: &[f32]| pg_skills_kernels::vector::scalar::dot(&exact, other);
        assert!(
            cosine(&reduced) > 0.99995,
            "int16: cosine {}",
            cosine(&reduced)
        );
        assert!(cosine(&tiles) > 0.9999, "bf16: cosine {}", cosine(&tiles));
        // 8-bit products: 0.9962 at the lowest on 4,016 MetaTool requests, 0.9931 on their
        // first five words.
        assert!(cosine(&bytes) > 0.99, "int8: cosine {}", cosine(&bytes));
        use pg_skills_kernels::encoder::Precision;
        if Precision::int8_available() {
            assert!(
                largest_difference(&bytes, &reduced) > 1e-4,
                "int8 encoded with int16 products"
            );
        } else {
            assert_eq!(bytes, reduced, "no AVX-512 VNNI: int8 falls back to int16");
        }
        if Precision::int16_available() {
            assert!(
                largest_difference(&exact, &reduced) > 1e-5,
                "int16 encoded with f32 products"
            );
        } else {
            assert_eq!(
                reduced, exact,
                "neither AVX-512 VNNI nor AVX2: int16 falls back to f32"
            );
        }
        if Precision::bf16_available() {
            // Not the 16-bit integer products either.
            assert!(
                largest_difference(&tiles, &reduced) > 1e-5,
                "bf16 encoded with int16 products"
            );
        } else {
            assert_eq!(tiles, reduced, "no AMX-BF16: bf16 falls back to int16");
        }
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
}
