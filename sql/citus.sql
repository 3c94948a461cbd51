-- Scale-out on Citus (docs/citus.md): skills.distribute() turns an installed pg_skills into a
-- distributed layout. Every node runs CREATE EXTENSION pg_skills; this runs on the coordinator.

CREATE FUNCTION skills.distribute(shard_count integer DEFAULT 32)
RETURNS TABLE (relation regclass, layout text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RAISE EXCEPTION 'Citus is not installed in this database'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'On every node: shared_preload_libraries = ''citus,pg_skills'', CREATE EXTENSION citus, CREATE EXTENSION pg_skills; add the workers on the coordinator (citus_add_node), then SELECT skills.distribute().';
    END IF;
    IF shard_count IS NULL OR shard_count < 1 OR shard_count > 4096 THEN
        RAISE EXCEPTION 'shard_count must be between 1 and 4096, got %', shard_count
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A few shards per worker core is usual (Citus''s default is 32).';
    END IF;
    IF NOT skills.is_distributed('skills.skill') THEN
        -- Citus enforces uniqueness only on keys that contain the distribution column (id).
        -- The content-hash identity is kept by the loader instead: skills.apply_staging holds a
        -- cluster-wide lock while it looks hashes up and inserts, so loads never duplicate.
        ALTER TABLE skills.skill DROP CONSTRAINT IF EXISTS skill_content_hash_unique;
        CREATE INDEX IF NOT EXISTS skill_content_hash ON skills.skill (content_hash);
        -- Arms are co-located with their run (event_id), not with the skill: a foreign key
        -- across the two distributions is not possible; record_run checks the skills exist.
        ALTER TABLE skills.event_arm DROP CONSTRAINT IF EXISTS event_arm_skill_id_fkey;
        -- The graph stays on the coordinator, where searches walk it; a local table cannot
        -- reference a distributed one, so edges of deleted skills remain until the next
        -- skills.build_graph() (searches only serve skills that exist).
        ALTER TABLE skills.edge DROP CONSTRAINT IF EXISTS edge_from_skill_fkey;
        ALTER TABLE skills.edge DROP CONSTRAINT IF EXISTS edge_to_skill_fkey;
        -- The skill triggers run on the shard's node: they derive columns of the row itself and
        -- write the history and embedding-queue rows of the same skill, which are co-located.
        PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
        EXECUTE 'SELECT create_distributed_table(''skills.skill'', ''id'', shard_count => $1)' USING shard_count;
        EXECUTE 'SELECT create_distributed_table(''skills.skill_version'', ''skill_id'', colocate_with => ''skills.skill'')';
        EXECUTE 'SELECT create_distributed_table(''skills.skill_key'', ''skill_id'', colocate_with => ''skills.skill'')';
        EXECUTE 'SELECT create_distributed_table(''skills.embed_queue'', ''skill_id'', colocate_with => ''skills.skill'')';
        EXECUTE 'SELECT create_distributed_table(''skills.event'', ''id'', shard_count => $1, colocate_with => ''none'')' USING shard_count;
        EXECUTE 'SELECT create_distributed_table(''skills.event_arm'', ''event_id'', colocate_with => ''skills.event'')';
    END IF;
    RETURN QUERY
        SELECT t.rel, CASE WHEN skills.is_distributed(t.rel) THEN 'distributed' ELSE 'coordinator' END
        FROM unnest(ARRAY['skills.skill', 'skills.skill_version', 'skills.skill_key', 'skills.embed_queue',
                          'skills.event', 'skills.event_arm', 'skills.edge', 'skills.graph_state',
                          'skills.compressor', 'skills.embedder_progress', 'skills.keyopt_round',
                          'skills.keyopt_skill']::regclass[]) AS t(rel);
END
$$;
COMMENT ON FUNCTION skills.distribute(integer) IS
    'Citus: distributes skills (with versions, keys and the embedding queue, co-located by skill id) and runs (events with arms, by event id) over shard_count shards; the rest stays on the coordinator (docs/citus.md).';
