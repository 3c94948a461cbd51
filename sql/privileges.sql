-- Who may do what: five roles a DBA hands out (GRANT skills_reader TO app_user), and the
-- functions taken from PUBLIC. Runs last (finalize), when every object exists.
--
--   skills_reader    search, render_context, read skills, keys, the graph and KeyOpt rounds
--   skills_reporter  skills_reader + record outcomes (skills.record_run)
--   skills_loader    skills_reader + load and edit skills (skills-load, skills.apply_staging)
--   skills_admin     both + fit, use_round, train_compressor, recompress_keys, build_graph, update_graph,
--                    embed_pending, and every table of the schema (no TRIGGER or REFERENCES)
--   skills_worker    what the embedder and fitter workers run as (pg_skills.worker_role)
--
-- Roles belong to the cluster, not to a database: the first CREATE EXTENSION creates them and
-- later ones (in other databases) reuse them; DROP EXTENSION leaves them. None can log in.
-- Settings that bound resources or name code stay superuser-only (pg_skills.* SUSET/SIGHUP).

DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['skills_reader', 'skills_reporter', 'skills_loader', 'skills_admin', 'skills_worker'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;
COMMENT ON ROLE skills_reader IS 'pg_skills: search and read skills';
COMMENT ON ROLE skills_reporter IS 'pg_skills: skills_reader + record outcomes';
COMMENT ON ROLE skills_loader IS 'pg_skills: skills_reader + load and edit skills';
COMMENT ON ROLE skills_admin IS 'pg_skills: reporter and loader + fit, rounds, compressors, graph';
COMMENT ON ROLE skills_worker IS 'pg_skills: the role the embedder and fitter workers run as';

GRANT skills_reader TO skills_reporter, skills_loader;
GRANT skills_reporter, skills_loader TO skills_admin;

-- Administrative and writing functions: not for PUBLIC.
REVOKE EXECUTE ON FUNCTION
    skills.fit(text, boolean),
    skills.use_round(integer),
    skills.train_compressor(text, integer, integer, bigint, boolean),
    skills.train_compressor_weights(text, integer, integer, bigint),
    skills.recompress_keys(),
    skills.build_graph(real, real, integer),
    skills.update_graph(real, real, integer, integer),
    skills.write_key_edges(bigint[], real, real, integer),
    skills.finish_graph(real, real, integer),
    skills.rule_edges(),
    skills.embed_pending(bigint),
    skills.record_run(text, jsonb, text, jsonb, numeric, text, boolean, boolean),
    skills.apply_staging(),
    skills.prepare_skill_writes(text[], text[], text[]),
    skills.bm25_merge_append(oid),
    skills.sync_source(text[]),
    skills.set_category(bigint, skills.category),
    skills.rescan_risk(),
    skills.merge_duplicate_skills(text[]),
    skills.distribute(integer)
FROM PUBLIC;

-- Reading. Events: only what a reading uses (their key and set outcome), not what was asked or by whom.
GRANT USAGE ON SCHEMA skills TO skills_reader, skills_worker;
GRANT SELECT ON
    skills.skill, skills.skill_version, skills.skill_key, skills.compressor,
    skills.keyopt_round, skills.keyopt_skill, skills.keyopt_rounds, skills.shard_anchor,
    skills.edge, skills.graph_state, skills.event_arm, skills.embedder_status,
    skills.pool_code_generation, skills.pool_testing, skills.pool_debugging,
    skills.pool_refactoring_review, skills.pool_data_ml, skills.pool_devops_infra,
    skills.pool_docs_tooling, skills.retired_skill, skills.source_stats, skills.flagged_skill
TO skills_reader;
GRANT SELECT (id, task_key, round, set_passed, recorded_at) ON skills.event TO skills_reader;

-- Reporting outcomes.
GRANT INSERT ON skills.event, skills.event_arm TO skills_reporter;
GRANT EXECUTE ON FUNCTION skills.record_run(text, jsonb, text, jsonb, numeric, text, boolean, boolean) TO skills_reporter;

-- Loading skills: the skill table, and what its triggers write (history, the embedding queue).
GRANT INSERT, UPDATE, DELETE ON skills.skill TO skills_loader;
GRANT INSERT ON skills.skill_version TO skills_loader;
GRANT SELECT, INSERT, UPDATE ON skills.embed_queue TO skills_loader;
-- Deleting a skill deletes its edges, whose trigger counts the change in graph_state, and its
-- key, whose trigger records the change for the graph's next update.
GRANT UPDATE ON skills.graph_state TO skills_loader;
GRANT INSERT ON skills.graph_pending TO skills_loader;
GRANT EXECUTE ON FUNCTION skills.apply_staging(), skills.prepare_skill_writes(text[], text[], text[]),
    skills.bm25_merge_append(oid), skills.sync_source(text[]),
    skills.set_category(bigint, skills.category), skills.rescan_risk() TO skills_loader;

-- Administration.
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA skills TO skills_admin;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA skills TO skills_admin;
GRANT EXECUTE ON FUNCTION
    skills.fit(text, boolean),
    skills.use_round(integer),
    skills.train_compressor(text, integer, integer, bigint, boolean),
    skills.train_compressor_weights(text, integer, integer, bigint),
    skills.recompress_keys(),
    skills.build_graph(real, real, integer),
    skills.update_graph(real, real, integer, integer),
    skills.write_key_edges(bigint[], real, real, integer),
    skills.finish_graph(real, real, integer),
    skills.rule_edges(),
    skills.embed_pending(bigint),
    skills.merge_duplicate_skills(text[])
TO skills_admin;

-- The workers: the embedder keys skills and rebuilds the graph; the fitter fits and publishes
-- rounds. A relevance function (pg_skills.relevance_function) needs EXECUTE granted to it too.
GRANT SELECT ON
    skills.skill, skills.skill_key, skills.compressor, skills.embed_queue,
    skills.embedder_progress, skills.edge, skills.graph_state, skills.event, skills.event_arm,
    skills.keyopt_round, skills.keyopt_skill, skills.shard_anchor
TO skills_worker;
GRANT INSERT, UPDATE ON skills.skill_key TO skills_worker;
GRANT UPDATE, DELETE ON skills.embed_queue TO skills_worker;
GRANT UPDATE ON skills.embedder_progress, skills.graph_state TO skills_worker;
GRANT SELECT, INSERT, DELETE ON skills.graph_pending TO skills_worker;
GRANT INSERT, DELETE ON skills.edge TO skills_worker;
GRANT INSERT, UPDATE ON skills.keyopt_round TO skills_worker;
-- Merging copies of one content before keying them (skills.merge_duplicate_skills; only Citus
-- can store copies): the kept skill's places, the copies' arms, the copies themselves.
GRANT UPDATE (provenance, retired_at), DELETE ON skills.skill TO skills_worker;
GRANT UPDATE (skill_id, skill_version), DELETE ON skills.event_arm TO skills_worker;
GRANT INSERT ON skills.keyopt_skill TO skills_worker;
-- The fitter trains a compressor on the recorded runs (pg_skills.compressor_retrain_runs).
GRANT INSERT, UPDATE ON skills.compressor TO skills_worker;
GRANT EXECUTE ON FUNCTION
    skills.build_graph(real, real, integer),
    skills.update_graph(real, real, integer, integer),
    skills.write_key_edges(bigint[], real, real, integer),
    skills.finish_graph(real, real, integer),
    skills.rule_edges(),
    skills.use_round(integer),
    skills.merge_duplicate_skills(text[]),
    skills.train_compressor(text, integer, integer, bigint, boolean),
    skills.train_compressor_weights(text, integer, integer, bigint),
    skills.recompress_keys()
TO skills_worker;
