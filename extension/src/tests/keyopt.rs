//! KeyOpt: recorded runs, rounds, the reading, the relevance-function hook. Need the model (task
//! keys).

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::helpers::*;
    use pgrx::prelude::*;

    #[pg_test]
    fn keyopt_without_rounds_or_pairs_and_without_bm25_ranks_like_semantic() {
        if !have_model() {
            return;
        }
        demo_skills();
        exec("SELECT skills.embed_pending()");
        // r is then the key score alone (the default share of BM25 is tested by
        // with_no_round_the_base_relevance_mixes_in_the_setting_s_share_of_bm25).
        exec("SET LOCAL pg_skills.keyopt_bm25_share = 0");
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

    /// Runs that used three skills together and only say whether the whole run passed: an
    /// agent ran each task three times, keeping two skills and trying a third; only the run
    /// with git-bisect passed. The fit pairs the skills two sets of one task do not share and
    /// finds git-bisect; arms keep no outcome of their own, and an arm without one is refused
    /// when the run has no set outcome either.
    #[pg_test]
    fn runs_that_passed_or_failed_as_a_whole_teach_which_skill_decides() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'my tests fail since I merged a branch'";
        let before = search(&format!("{q}, k => 5, method => 'keyopt'"));
        assert_ne!(before[0].0, ids[4], "{before:?}");
        for task in 0..12usize {
            // Two kept skills and the two others tried in turn with git-bisect (ids[4]).
            let others: Vec<usize> = (0..4).map(|j| (task + j) % 4).collect();
            for third in [4, others[2], others[3]] {
                let arms: Vec<String> = [others[0], others[1], third]
                    .iter()
                    .map(|&i| format!("{{\"skill_id\": {}}}", ids[i]))
                    .collect();
                exec(&format!(
                    "SELECT skills.record_run('my tests started failing after merging branch {task}', \
                     '[{}]', executor => 'agent-b', source_group => 'merge-{}', run_passed => {})",
                    arms.join(", "),
                    task % 4,
                    third == 4
                ));
            }
        }
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.event_arm WHERE passed IS NULL"),
            108
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM skills.event WHERE set_passed IS NOT NULL"),
            36
        );
        let round: i32 = one("SELECT skills.fit()");
        let report: pgrx::JsonB = one(&format!(
            "SELECT report FROM skills.keyopt_round WHERE round = {round}"
        ));
        assert_eq!(
            report.0["corrections"],
            serde_json::json!(true),
            "{}",
            report.0
        );
        let after = search(&format!("{q}, k => 5, method => 'keyopt'"));
        assert_eq!(after[0].0, ids[4], "{after:?}");
        assert_refused(
            &format!(
                "PERFORM skills.record_run('t', '[{{\"skill_id\": {}}}]')",
                ids[0]
            ),
            "invalid_parameter_value",
            "arm 1 is malformed%",
        );
    }

    /// A fit tries the base relevances r = qᵀk0 + w·BM25/sup BM25 and records what each
    /// scored and which it chose; a reading of a round with w > 0 serves exactly that r.
    #[pg_test]
    fn the_round_records_its_base_relevance_and_the_reading_uses_it() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        record_bisect_runs(&ids);
        let round: i32 = one("SELECT skills.fit()");
        let report: pgrx::JsonB = one(&format!(
            "SELECT report FROM skills.keyopt_round WHERE round = {round}"
        ));
        let tried = report.0["bm25_shares_tried"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            tried.len(),
            pg_skills_kernels::keyopt::fit::BM25_SHARES.len(),
            "{}",
            report.0
        );

        let share: f64 = one(&format!(
            "SELECT (settings ->> 'bm25_share')::float8 FROM skills.keyopt_round WHERE round = {round}"
        ));
        assert!(
            tried
                .iter()
                .any(|t| (t["bm25_share"].as_f64().unwrap() - share).abs() < 1e-6),
            "{share} not among {tried:?}"
        );
        // Read with w = 0.25 whatever was chosen: r of each served skill is q·k0 plus a quarter
        // of its BM25 score over the most any skill could score for the query.
        exec(&format!(
            "UPDATE skills.keyopt_round SET settings = jsonb_set(settings, '{{bm25_share}}', '0.25') \
             WHERE round = {round}"
        ));
        let q = "'my tests fail since I merged a branch'";
        let rho: f64 = one(&format!(
            "SELECT rho::float8 FROM skills.keyopt_round WHERE round = {round}"
        ));
        let checked: i64 = one(&format!(
            "WITH k AS (SELECT id, semantic FROM skills.search({q}, k => 5, method => 'keyopt')), \
                  s AS (SELECT id, score FROM skills.search({q}, k => 100, method => 'semantic')), \
                  b AS (SELECT id, score / skills.bm25_score_supremum(skills.bm25query({q})) AS score \
                        FROM skills.search({q}, k => 100, method => 'bm25')) \
             SELECT count(*) FROM k JOIN s USING (id) LEFT JOIN b USING (id) \
             WHERE abs(k.semantic - {rho} * (s.score + 0.25 * coalesce(b.score, 0))) < 1e-3"
        ));
        assert_eq!(checked, 5, "every served row's r mixes in BM25 at w = 0.25");
    }

    /// With no round, r is q·k0 plus `pg_skills.keyopt_bm25_share` of the skill's BM25 over the
    /// most any skill could score for the query (0: the key score alone, the semantic order); a
    /// fit with nothing to learn from keeps the setting's share.
    #[pg_test]
    fn with_no_round_the_base_relevance_mixes_in_the_setting_s_share_of_bm25() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        let q = "'my tests fail since I merged a branch'";
        let rows_with_r_at = |w: f64| -> i64 {
            one(&format!(
                "WITH k AS (SELECT id, semantic FROM skills.search({q}, k => 5, method => 'keyopt')), \
                      s AS (SELECT id, score FROM skills.search({q}, k => 100, method => 'semantic')), \
                      b AS (SELECT id, score / skills.bm25_score_supremum(skills.bm25query({q})) AS score \
                            FROM skills.search({q}, k => 100, method => 'bm25')) \
                 SELECT count(*) FROM k JOIN s USING (id) LEFT JOIN b USING (id) \
                 WHERE abs(k.semantic - (s.score + {w} * coalesce(b.score, 0))) < 1e-4"
            ))
        };
        let default: f64 = one("SELECT current_setting('pg_skills.keyopt_bm25_share')::float8");
        let built_in = pg_skills_kernels::keyopt::fit::DEFAULT_BM25_SHARE;
        assert!((default - built_in).abs() < 1e-9, "{default}");
        assert_eq!(rows_with_r_at(default), 5);
        assert!(
            rows_with_r_at(0.0) < 5,
            "some served skill shares words with the request, so the mix changes its r"
        );
        exec("SET LOCAL pg_skills.keyopt_bm25_share = 0");
        assert_eq!(rows_with_r_at(0.0), 5);
        let keyopt: Vec<i64> = search(&format!("{q}, k => 5, method => 'keyopt'"))
            .into_iter()
            .map(|r| r.0)
            .collect();
        let semantic: Vec<i64> = search(&format!("{q}, k => 5, method => 'semantic'"))
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(keyopt, semantic);
        // One passing arm: no discordant pair, a neutral round at the setting's share.
        exec("SET LOCAL pg_skills.keyopt_bm25_share = 0.25");
        exec(&format!(
            "SELECT skills.record_run('t', '[{{\"skill_id\": {}, \"passed\": true}}]')",
            ids[0]
        ));
        let round: i32 = one("SELECT skills.fit()");
        let share: f64 = one(&format!(
            "SELECT (settings ->> 'bm25_share')::float8 FROM skills.keyopt_round WHERE round = {round}"
        ));
        assert_eq!(share, 0.25);
        exec("RESET pg_skills.keyopt_bm25_share");
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
        let unpublished: i32 = one("SELECT skills.fit('test', false)");
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

    /// The demo's feedback loop (kernels' `keyopt::scenarios`, examples/demo.sql): after 8 runs
    /// where git-bisect-regression solved "which change broke the build" tasks, questions of that
    /// kind rank it first, and the flaky-test questions (one of them close to a run where
    /// flaky-test-triage failed) still rank flaky-test-triage first. Before calibrated
    /// corrections, β ≈ 1.76 put git-bisect-regression first for every flaky-test question;
    /// with β bounded but lifts unbounded, β plus the event term still did. The lift bound
    /// (the largest relevance deficit git-bisect-regression overcame in the 8 runs) is what
    /// keeps it below flaky-test-triage there, and the search shows it as `held_back`.
    #[pg_test]
    fn a_few_runs_on_one_kind_of_task_do_not_overrule_relevance_elsewhere() {
        use pg_skills_kernels::keyopt::scenarios::{DEMO_QUESTIONS, DEMO_SUPPORT, DEMO_WINNER};
        if !have_model() {
            return;
        }
        let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus/demo");
        for file in pg_skills_corpus::readers::skill_files(&demo).expect("corpus/demo") {
            let text = std::fs::read_to_string(&file).expect("SKILL.md");
            let skill = pg_skills_corpus::skill::parse_skill_md(&text, None).expect("demo skill");
            insert(&skill.name, &skill.description, &skill.instructions);
        }
        exec("SELECT skills.embed_pending()");
        for task in DEMO_SUPPORT {
            exec(&format!(
                "SELECT skills.record_run({t}, (\
                   SELECT jsonb_agg(jsonb_build_object('skill_id', u.id, 'passed', s.name = {w})) \
                   FROM (SELECT r.id FROM skills.search({t}, k => 4, method => 'semantic') AS r \
                         UNION SELECT id FROM skills.skill WHERE name = {w}) AS u \
                   JOIN skills.skill AS s ON s.id = u.id), \
                 executor => 'demo-agent', source_group => {t})",
                t = quote(task),
                w = quote(DEMO_WINNER)
            ));
        }
        exec("SELECT skills.fit()");
        let corrections: bool =
            one("SELECT (report ->> 'corrections')::boolean FROM skills.keyopt_round WHERE active");
        assert!(
            corrections,
            "the 8 consistent runs should give a round with corrections"
        );
        let first = |q: &str| -> String {
            one(&format!(
                "SELECT name FROM skills.search({}, k => 3, method => 'keyopt') LIMIT 1",
                quote(q)
            ))
        };
        let wrong: Vec<String> = DEMO_QUESTIONS
            .iter()
            .filter_map(|(q, expected)| {
                let got = first(q);
                (got != *expected).then(|| format!("{q:?}: {got}, expected {expected}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        let (lift_bound, held_back): (f32, f64) = (
            one(&format!(
                "SELECT k.lift_bound FROM skills.keyopt_skill AS k \
                 JOIN skills.keyopt_round AS r ON r.round = k.round AND r.active \
                 JOIN skills.skill AS s ON s.id = k.skill_id WHERE s.name = {}",
                quote(DEMO_WINNER)
            )),
            one(&format!(
                "SELECT held_back FROM skills.search({}, k => 5, method => 'keyopt') \
                 WHERE name = {}",
                quote(DEMO_QUESTIONS[3].0),
                quote(DEMO_WINNER)
            )),
        );
        assert!(
            lift_bound > 0.0 && lift_bound < 0.5,
            "lift bound {lift_bound}"
        );
        assert!(
            held_back < 0.0,
            "{DEMO_WINNER} should have been held back on {:?}: {held_back}",
            DEMO_QUESTIONS[3].0
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
            one::<f64>(&format!("SELECT (skills.keyopt_score({q}, {bisect})).beta")) > 0.0,
            "git-bisect has a positive β after its runs (bounded by the deficits it overcame)"
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
        own_skill_keys();
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

    /// (query_no, skill_id, score, device) rows of a skills.keyopt_rank_batch call.
    fn batch(args: &str) -> Vec<(i32, i64, f64, String)> {
        let sql = format!(
            "SELECT query_no, skill_id, score, device FROM skills.keyopt_rank_batch({args}) \
             ORDER BY query_no, rank"
        );
        Spi::connect(|c| {
            c.select(&sql, None, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .map(|r| {
                    (
                        r.get::<i32>(1).unwrap().unwrap(),
                        r.get::<i64>(2).unwrap().unwrap(),
                        r.get::<f64>(3).unwrap().unwrap(),
                        r.get::<String>(4).unwrap().unwrap(),
                    )
                })
                .collect()
        })
    }

    #[pg_test]
    fn batch_ranking_is_each_searchs_ranking() {
        if !have_model() {
            return;
        }
        let ids = demo_skills();
        exec("SELECT skills.embed_pending()");
        record_bisect_runs(&ids);
        exec("SELECT skills.fit()");
        let queries = [
            "my tests fail since I merged a branch",
            "slow postgres query",
            "kubernetes pod restarts",
            "which commit broke the build",
        ];
        let array = format!(
            "ARRAY[{}]",
            queries
                .iter()
                .map(|q| quote(q))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut cpu_rows = Vec::new();
        for (k, categories) in [(3, "NULL"), (10, "NULL"), (2, "'{testing,devops_infra}'")] {
            let rows = batch(&format!("{array}, {k}, {categories}"));
            assert!(rows.iter().all(|r| r.3 == "cpu"), "{rows:?}");
            for (i, q) in queries.iter().enumerate() {
                let want = search(&format!(
                    "{}, k => {k}, categories => {categories}, method => 'keyopt'",
                    quote(q)
                ));
                let got: Vec<(i64, f64)> = rows
                    .iter()
                    .filter(|r| r.0 == i as i32 + 1)
                    .map(|r| (r.1, r.2))
                    .collect();
                assert!(!want.is_empty(), "{q}");
                assert_eq!(got, want, "{q}, k {k}, categories {categories}");
            }
            cpu_rows.push(rows);
        }
        // The GPU setting where no GPU can be used: a NOTICE, and the CPU's rankings.
        exec("SET LOCAL pg_skills.device = 'cuda'");
        let rows = batch(&format!("{array}, 3, NULL"));
        let ids = |rows: &[(i32, i64, f64, String)]| -> Vec<(i32, i64)> {
            rows.iter().map(|r| (r.0, r.1)).collect()
        };
        assert_eq!(ids(&rows), ids(&cpu_rows[0]));
        assert!(
            rows.iter()
                .all(|r| r.3 == "cpu" || r.3.starts_with("cuda: ")),
            "{rows:?}"
        );
    }

    #[pg_test(error = "k must be between 1 and 1000, got 0")]
    fn batch_k_is_bounded() {
        exec("SELECT * FROM skills.keyopt_rank_batch(ARRAY['x'], 0)");
    }

    #[pg_test(error = "query 2 is NULL")]
    fn batch_queries_are_not_null() {
        exec("SELECT * FROM skills.keyopt_rank_batch(ARRAY['x', NULL], 3)");
    }
}
