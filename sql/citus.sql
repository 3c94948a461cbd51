-- Scale-out on Citus (docs/citus.md): skills.distribute() turns an installed pg_skills into a
-- distributed layout. Every node runs CREATE EXTENSION pg_skills; this runs on the coordinator.

-- One row on every shard of skills.skill's co-location group (filled by skills.distribute): a
-- query over it reaches every shard once, over Citus's pooled connections, in parallel. The
-- distributed bm25 search reads each shard's statistics this way (skills.bm25_global_query).
CREATE TABLE skills.shard_anchor (id bigint PRIMARY KEY);
COMMENT ON TABLE skills.shard_anchor IS
    'Citus: one row per shard of the skills'' co-location group, so one query reaches every shard (skills.distribute fills it).';

-- The shard of the distributed table `rel` co-located with the shard_anchor shard `anchor` (a
-- shard's relation on the node that holds it): its relation there. Runs on the workers.
CREATE FUNCTION skills.colocated_shard(anchor regclass, rel regclass) RETURNS regclass
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    anchor_shard bigint := substring((SELECT c.relname FROM pg_catalog.pg_class AS c WHERE c.oid = anchor) FROM '_([0-9]+)$')::bigint;
    shard bigint;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_shard') IS NULL THEN
        RAISE EXCEPTION 'skills.colocated_shard needs Citus, which is not installed in this database'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'It serves searches and graph builds on a table skills.distribute() distributed; on one node they read the tables themselves.';
    END IF;
    EXECUTE 'SELECT s.shardid FROM pg_catalog.pg_dist_shard AS a
             JOIN pg_catalog.pg_dist_shard AS s ON s.shardminvalue = a.shardminvalue
                  AND s.logicalrelid = $2
             WHERE a.shardid = $1 AND a.logicalrelid = ''skills.shard_anchor''::regclass'
        INTO shard USING anchor_shard, rel;
    IF shard IS NULL THEN
        RAISE EXCEPTION 'no shard of % is co-located with %', rel, anchor
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Run SELECT skills.distribute() again on the coordinator after changing the shards.';
    END IF;
    -- A shard is named after its table with _<shard id>, in the table's schema.
    RETURN format('%s_%s', rel, shard)::regclass;
END
$$;

-- The bm25 statistics of the skills shard co-located with `anchor`, for `query`. Runs on the workers.
CREATE FUNCTION skills.bm25_shard_corpus(anchor regclass, query text) RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN skills.bm25_corpus(skills.bm25_index(skills.colocated_shard(anchor, 'skills.skill')), query);

-- For each source key, its `neighbours` nearest keys (q·k, largest first) in the keys shard
-- co-located with `anchor`, the source itself left out: one batch of skills.build_graph's
-- neighbour search on Citus, served by the shard's skeys index when it has one (ordered by the
-- distance alone, as skills.build_graph explains). Runs on the workers.
CREATE FUNCTION skills.key_shard_neighbours(anchor regclass, sources bigint[], keys skills.key[], neighbours integer)
RETURNS TABLE (from_skill bigint, to_skill bigint, distance double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF cardinality(sources) IS DISTINCT FROM cardinality(keys) THEN
        RAISE EXCEPTION 'key_shard_neighbours needs one key per source (% sources, % keys)',
                cardinality(sources), cardinality(keys)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY EXECUTE format($q$
        SELECT q.id, n.skill_id, n.distance
        FROM unnest($1, $2) AS q(id, k)
        CROSS JOIN LATERAL (
            SELECT b.skill_id, b.k0 OPERATOR(skills.<#>) q.k AS distance
            FROM %s AS b
            WHERE b.skill_id <> q.id
            ORDER BY b.k0 OPERATOR(skills.<#>) q.k
            LIMIT $3) AS n$q$, skills.colocated_shard(anchor, 'skills.skill_key'))
    USING sources, keys, neighbours;
END
$$;

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
        -- Without the cascade a skill DELETE changes no edge; the trigger would run on the shards.
        DROP TRIGGER IF EXISTS skill_delete_changes_edges ON skills.skill;
        -- skills.update_graph builds the whole graph on Citus: no change log of the keys.
        DROP TRIGGER IF EXISTS key_inserted ON skills.skill_key;
        DROP TRIGGER IF EXISTS key_updated ON skills.skill_key;
        DROP TRIGGER IF EXISTS key_deleted ON skills.skill_key;
        DROP TRIGGER IF EXISTS key_truncated ON skills.skill_key;
        DELETE FROM skills.graph_pending;
        -- The skill triggers run on the shard's node: they derive columns of the row itself and
        -- write the history and embedding-queue rows of the same skill, which are co-located.
        PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
        EXECUTE 'SELECT pg_catalog.create_distributed_table(''skills.skill'', ''id'', shard_count => $1)' USING shard_count;
        EXECUTE 'SELECT pg_catalog.create_distributed_table(''skills.skill_version'', ''skill_id'', colocate_with => ''skills.skill'')';
        EXECUTE 'SELECT pg_catalog.create_distributed_table(''skills.skill_key'', ''skill_id'', colocate_with => ''skills.skill'')';
        EXECUTE 'SELECT pg_catalog.create_distributed_table(''skills.embed_queue'', ''skill_id'', colocate_with => ''skills.skill'')';
        EXECUTE 'SELECT pg_catalog.create_distributed_table(''skills.event'', ''id'', shard_count => $1, colocate_with => ''none'')' USING shard_count;
        EXECUTE 'SELECT pg_catalog.create_distributed_table(''skills.event_arm'', ''event_id'', colocate_with => ''skills.event'')';
        EXECUTE 'SELECT pg_catalog.create_distributed_table(''skills.shard_anchor'', ''id'', colocate_with => ''skills.skill'')';
    END IF;
    -- One anchor per shard (again on every call: shards may have been split since).
    DELETE FROM skills.shard_anchor;
    EXECUTE 'INSERT INTO skills.shard_anchor
             SELECT min(g) FROM generate_series(1, 1000000) AS g
             GROUP BY pg_catalog.get_shard_id_for_distribution_column(''skills.skill'', g)';
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
