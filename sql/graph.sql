-- The skill graph: edges between skills for the graph method (Graph-of-Skills), built
-- by skills.build_graph() from key similarity and the document rules, or added by hand.

CREATE TYPE skills.edge_type AS ENUM ('dependency', 'workflow', 'semantic', 'alternative');
COMMENT ON TYPE skills.edge_type IS
    'dependency: from produces what to needs; workflow: to usually follows from; semantic: similar keys; alternative: near-duplicates.';

CREATE TABLE skills.edge (
    from_skill  bigint NOT NULL REFERENCES skills.skill (id) ON DELETE CASCADE,
    to_skill    bigint NOT NULL REFERENCES skills.skill (id) ON DELETE CASCADE,
    type        skills.edge_type NOT NULL,
    weight      real NOT NULL CONSTRAINT edge_weight_positive CHECK (weight > 0 AND weight < 'Infinity'),
    provenance  text NOT NULL DEFAULT 'manual',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (from_skill, to_skill, type),
    CONSTRAINT edge_not_a_loop CHECK (from_skill <> to_skill)
);
CREATE INDEX edge_to_skill ON skills.edge (to_skill);
COMMENT ON TABLE skills.edge IS
    'Skill graph. provenance ''auto:<rule>'' = written by skills.build_graph() (replaced on every build); anything else (default ''manual'') is kept.';

-- One row whose version and xmin change with every statement that changes skills.edge: backends
-- cache the graph and rebuild it when this row differs from the one they built it under.
-- The row is also the graph's lock: a build (skills.build_graph) takes it before it touches an
-- edge, and so does every statement that changes edges, before it locks an edge or a skill row
-- (the triggers below fire BEFORE the statement). Taken after them, as an AFTER trigger did,
-- a skill DELETE held the skill's and its edges' rows while it waited for a running build, and
-- the build then waited for those rows: a deadlock (tests/tests/graph.rs).
-- built_at: when skills.build_graph() or skills.update_graph() last ran; keys embedded after it
-- make the embedder worker update the graph once its queue is drained (skill_key_embedded_at
-- answers that without a scan).
CREATE INDEX skill_key_embedded_at ON skills.skill_key (embedded_at);
-- The settings are those of the automatic edges in skills.edge (the last build's or update's):
-- an update with other settings builds again.
CREATE TABLE skills.graph_state (
    version               bigint NOT NULL,
    built_at              timestamptz,
    semantic_threshold    real,
    alternative_threshold real,
    neighbours            integer
);
INSERT INTO skills.graph_state (version) VALUES (0);

-- Keys written or removed since the graph's last build or update, for skills.update_graph to
-- recompute the nearest-key edges around them instead of every key's: a written key's skill
-- (old_key NULL), a removed key's skill and its value (to find the skills it was nearest to),
-- or a NULL skill_id after a TRUNCATE (everything changed). Filled by statement triggers on
-- skills.skill_key, emptied by the build or update that reads it.
CREATE TABLE skills.graph_pending (
    skill_id bigint,
    old_key  skills.key
);
COMMENT ON TABLE skills.graph_pending IS
    'Keys written (old_key NULL) or removed (old_key = the removed value) since the last skills.build_graph() or skills.update_graph(); skill_id NULL: everything.';

CREATE FUNCTION skills.key_changed() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO skills.graph_pending (skill_id, old_key) SELECT o.skill_id, o.k0 FROM gone AS o;
    ELSIF TG_OP = 'TRUNCATE' THEN
        INSERT INTO skills.graph_pending (skill_id) VALUES (NULL);
    ELSE
        INSERT INTO skills.graph_pending (skill_id) SELECT n.skill_id FROM written AS n;
    END IF;
    RETURN NULL;
END
$$;
-- One trigger per event: a trigger with transition tables handles one. (skills.distribute()
-- drops them: on Citus every update builds the graph again.)
CREATE TRIGGER key_inserted AFTER INSERT ON skills.skill_key
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION skills.key_changed();
CREATE TRIGGER key_updated AFTER UPDATE ON skills.skill_key
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION skills.key_changed();
CREATE TRIGGER key_deleted AFTER DELETE ON skills.skill_key
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION skills.key_changed();
CREATE TRIGGER key_truncated AFTER TRUNCATE ON skills.skill_key
    FOR EACH STATEMENT EXECUTE FUNCTION skills.key_changed();

CREATE FUNCTION skills.edge_changed() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE skills.graph_state SET version = version + 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER edge_changed
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON skills.edge
    FOR EACH STATEMENT EXECUTE FUNCTION skills.edge_changed();
-- Deleting skills deletes their edges through the foreign keys' cascade, which runs after the
-- skill rows are locked: the lock is taken before the DELETE starts. (skills.distribute() drops
-- this trigger: on Citus the edges have no foreign keys.)
CREATE TRIGGER skill_delete_changes_edges
    BEFORE DELETE ON skills.skill
    FOR EACH STATEMENT EXECUTE FUNCTION skills.edge_changed();

CREATE FUNCTION skills.check_graph_settings(caller text, semantic_threshold real,
                                            alternative_threshold real, neighbours integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF semantic_threshold IS NULL OR alternative_threshold IS NULL OR neighbours IS NULL
       OR NOT (semantic_threshold BETWEEN -1 AND 1) OR NOT (alternative_threshold BETWEEN -1 AND 1)
       OR neighbours < 0 THEN
        RAISE EXCEPTION '% needs thresholds in [-1, 1] and neighbours >= 0', caller
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Keys are unit vectors: q·k is a cosine. Defaults: 0.7, 0.95, 8.';
    END IF;
END
$$;

-- The nearest-key edges of the keyed skills in `sources` (NULL: every keyed skill), on one
-- node: each to its `neighbours` nearest keys with q·k >= semantic_threshold (and > 0), as
-- skills.build_graph describes. The caller has deleted the sources' earlier ones.
CREATE FUNCTION skills.write_key_edges(sources bigint[], semantic_threshold real,
                                       alternative_threshold real, neighbours integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO skills.edge (from_skill, to_skill, type, weight, provenance)
    SELECT a.skill_id, n.skill_id,
           CASE WHEN n.sim >= alternative_threshold THEN 'alternative' ELSE 'semantic' END::skills.edge_type,
           n.sim,
           CASE WHEN n.sim >= alternative_threshold THEN 'auto:near-duplicate' ELSE 'auto:key-similarity' END
    FROM skills.skill_key AS a
    CROSS JOIN LATERAL (
        SELECT b.skill_id, (-(b.k0 OPERATOR(skills.<#>) a.k0))::real AS sim
        FROM skills.skill_key AS b
        WHERE b.skill_id <> a.skill_id
        ORDER BY b.k0 OPERATOR(skills.<#>) a.k0
        LIMIT neighbours) AS n
    WHERE (sources IS NULL OR a.skill_id = ANY (sources))
      AND n.sim >= semantic_threshold AND n.sim > 0
    ON CONFLICT DO NOTHING;
END
$$;

-- The last steps of a build and of an update, once the nearest-key edges are written (and the
-- earlier rule edges deleted): the document rules' edges, the time and settings of the graph,
-- and the edge count per type.
CREATE FUNCTION skills.finish_graph(semantic_threshold real, alternative_threshold real,
                                    neighbours integer)
RETURNS TABLE (type skills.edge_type, edges bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO skills.edge (from_skill, to_skill, type, weight, provenance)
    SELECT r.from_skill, r.to_skill, r.type::skills.edge_type, r.weight, 'auto:' || r.rule
    FROM skills.rule_edges() AS r
    ON CONFLICT DO NOTHING;
    UPDATE skills.graph_state AS g
    SET built_at = now(), semantic_threshold = finish_graph.semantic_threshold,
        alternative_threshold = finish_graph.alternative_threshold, neighbours = finish_graph.neighbours;
    RETURN QUERY SELECT e.type, count(*) FROM skills.edge AS e GROUP BY e.type ORDER BY e.type;
END
$$;

-- Rebuilds the automatic edges; hand-made edges stay (and win over an automatic one of the same
-- type between the same skills).
--   semantic:    each keyed skill to its `neighbours` nearest keys with q·k ≥ semantic_threshold
--                (the skeys index serves the nearest-key search when there is one), weight = q·k;
--                ordered by the distance alone: an index scan cannot give a tie-break by skill id,
--                and with it the search sorted every key for every key (quadratic: 389 s at
--                20,000 keys, 0.2 ms a key through the index); exact ties are left to the scan;
--   alternative: the same pairs with q·k ≥ alternative_threshold (near-duplicates), instead;
--   dependency / workflow: skills.rule_edges() (documented in kernels/src/graph/rules.rs).
CREATE FUNCTION skills.build_graph(
    semantic_threshold real DEFAULT 0.7,
    alternative_threshold real DEFAULT 0.95,
    neighbours integer DEFAULT 8)
RETURNS TABLE (type skills.edge_type, edges bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    live bigint[];
    anchored boolean;
    after bigint;
    upto bigint;
BEGIN
    PERFORM skills.check_graph_settings('build_graph', semantic_threshold, alternative_threshold, neighbours);
    -- One build at a time (the embedder worker rebuilds after draining its queue). The lock is
    -- graph_state's row, which every statement changing skills.edge or deleting skills updates
    -- before it starts (the triggers above): a build and a concurrent edge change take the same
    -- lock first, and cannot deadlock (an advisory lock taken before the edge deletion's own row
    -- lock could).
    PERFORM FROM skills.graph_state FOR UPDATE;
    -- Every key is read below: the changes recorded so far are in this build.
    DELETE FROM skills.graph_pending;
    DELETE FROM skills.edge AS e WHERE e.provenance LIKE 'auto:%';
    IF neighbours = 0 THEN
        NULL;  -- document rules only
    ELSIF skills.is_distributed('skills.skill_key') THEN
        -- Citus (docs/citus.md): the keys are spread over shards and a lateral join of keys
        -- with keys is not co-located. The source keys go in batches to every shard at once
        -- (one query over skills.shard_anchor, one row per shard), each shard answers every
        -- source's nearest keys from its own index, and the best `neighbours` of the shards'
        -- candidates are kept: the single node's top-k, merged. The edges of skills that are
        -- gone leave with the rebuild. The live ids as a value (Citus cannot join the local
        -- edge table with the distributed skills, and the embedder worker's rebuild runs where
        -- temporary tables are refused).
        live := ARRAY(SELECT s.id FROM skills.skill AS s);
        DELETE FROM skills.edge AS e
        WHERE NOT EXISTS (SELECT 1 FROM unnest(live) AS s(id) WHERE s.id = e.from_skill)
           OR NOT EXISTS (SELECT 1 FROM unnest(live) AS s(id) WHERE s.id = e.to_skill);
        EXECUTE 'SELECT count(*) = (SELECT count(*) FROM pg_catalog.pg_dist_shard WHERE logicalrelid = ''skills.skill_key''::regclass)
                 FROM (SELECT DISTINCT pg_catalog.get_shard_id_for_distribution_column(''skills.skill'', a.id)
                       FROM skills.shard_anchor AS a) AS s'
            INTO anchored;
        IF NOT anchored THEN
            RAISE EXCEPTION 'skills.shard_anchor does not cover every shard of skills.skill_key'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Run SELECT skills.distribute() again on the coordinator after changing the shards.';
        END IF;
        -- Batches of 1000 source keys by skill id. The batch reaches the shards as an
        -- intermediate result of its CTE (Citus ships it once per node); passed as parameters,
        -- the keys travelled as text in every shard's query, five times slower.
        after := NULL;
        LOOP
            SELECT max(b.skill_id) INTO upto
            FROM (SELECT sk.skill_id FROM skills.skill_key AS sk
                  WHERE after IS NULL OR sk.skill_id > after
                  ORDER BY sk.skill_id LIMIT 1000) AS b;
            EXIT WHEN upto IS NULL;
            WITH batch AS MATERIALIZED (
                SELECT array_agg(sk.skill_id ORDER BY sk.skill_id) AS sources,
                       array_agg(sk.k0 ORDER BY sk.skill_id) AS keys
                FROM skills.skill_key AS sk
                WHERE (after IS NULL OR sk.skill_id > after) AND sk.skill_id <= upto)
            INSERT INTO skills.edge (from_skill, to_skill, type, weight, provenance)
            SELECT c.from_skill, c.to_skill,
                   CASE WHEN c.sim >= alternative_threshold THEN 'alternative' ELSE 'semantic' END::skills.edge_type,
                   c.sim,
                   CASE WHEN c.sim >= alternative_threshold THEN 'auto:near-duplicate' ELSE 'auto:key-similarity' END
            FROM (SELECT (x.n).from_skill, (x.n).to_skill, (-(x.n).distance)::real AS sim,
                         row_number() OVER (PARTITION BY (x.n).from_skill ORDER BY (x.n).distance, (x.n).to_skill) AS place
                  -- The function's rows as one composite each (its .* would call it per column).
                  FROM (SELECT skills.key_shard_neighbours(a.tableoid::regclass, b.sources, b.keys, neighbours) AS n
                        FROM skills.shard_anchor AS a, batch AS b) AS x) AS c
            WHERE c.place <= neighbours AND c.sim >= semantic_threshold AND c.sim > 0
            ON CONFLICT DO NOTHING;
            after := upto;
        END LOOP;
    ELSE
        PERFORM skills.write_key_edges(NULL, semantic_threshold, alternative_threshold, neighbours);
    END IF;
    RETURN QUERY SELECT * FROM skills.finish_graph(semantic_threshold, alternative_threshold, neighbours);
END
$$;
COMMENT ON FUNCTION skills.build_graph(real, real, integer) IS
    'Replaces the automatic edges of skills.edge (key similarity, near-duplicates, document rules); returns the edge count per type.';

-- Brings the automatic edges up to date with the keys written or removed since the last build
-- or update (skills.graph_pending), with the edges a build would write: only the skills whose
-- nearest keys a change can have touched are searched again,
--   * each changed skill (one whose key was removed loses its edges),
--   * each skill with a nearest-key edge to a changed skill (the edge's weight or place changed),
--   * each skill that a new key, or a removed one, is at least as near to as the farthest of its
--     nearest-key edges (or that has fewer than `neighbours` of them and the key passes the
--     threshold): found by comparing every key with the changed ones, one pass over the keys;
-- the document rules are read again in full (a changed text changes its key). With other
-- settings than the edges were built with, before any build, after a TRUNCATE of the keys, on
-- Citus, or with more than `most_changes` changed keys, it builds. (At 100,470 keys a build took
-- 58-63 s; an update 4.1 s for 3 changed keys, 8.0 s for 384, 20 s for 1,529, 65 s for 3,055:
-- benches/graph/run.sh.)
-- The embedder worker runs it after each drained batch of keys.
CREATE FUNCTION skills.update_graph(
    semantic_threshold real DEFAULT 0.7,
    alternative_threshold real DEFAULT 0.95,
    neighbours integer DEFAULT 8,
    most_changes integer DEFAULT 1000)
RETURNS TABLE (type skills.edge_type, edges bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state skills.graph_state;
    changed bigint[];
    removed skills.key[];
    everything boolean;
    sources bigint[];
BEGIN
    PERFORM skills.check_graph_settings('update_graph', semantic_threshold, alternative_threshold, neighbours);
    IF most_changes IS NULL OR most_changes < 0 THEN
        RAISE EXCEPTION 'update_graph needs most_changes >= 0'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The number of changed keys above which the whole graph is built; default 1000.';
    END IF;
    -- The build's lock (see skills.build_graph).
    SELECT * INTO state FROM skills.graph_state FOR UPDATE;
    WITH taken AS (DELETE FROM skills.graph_pending RETURNING skill_id, old_key)
    SELECT coalesce(array_agg(DISTINCT t.skill_id) FILTER (WHERE t.skill_id IS NOT NULL), '{}'),
           coalesce(array_agg(t.old_key) FILTER (WHERE t.old_key IS NOT NULL), '{}'),
           coalesce(bool_or(t.skill_id IS NULL), false)
    INTO changed, removed, everything
    FROM taken AS t;
    IF state.built_at IS NULL OR everything
       OR state.semantic_threshold IS DISTINCT FROM update_graph.semantic_threshold
       OR state.alternative_threshold IS DISTINCT FROM update_graph.alternative_threshold
       OR state.neighbours IS DISTINCT FROM update_graph.neighbours
       OR cardinality(changed) > most_changes
       OR skills.is_distributed('skills.skill_key') THEN
        RETURN QUERY SELECT * FROM skills.build_graph(semantic_threshold, alternative_threshold, neighbours);
        RETURN;
    END IF;
    IF neighbours > 0 AND cardinality(changed) > 0 THEN
        SELECT coalesce(array_agg(DISTINCT x.id), '{}') INTO sources
        FROM (
            -- with or without a key now (a skill whose key was removed loses its edges)
            SELECT c.id FROM unnest(changed) AS c(id)
            UNION ALL
            SELECT e.from_skill FROM skills.edge AS e
            WHERE e.to_skill = ANY (changed)
              AND e.provenance IN ('auto:key-similarity', 'auto:near-duplicate')
            UNION ALL
            SELECT near.skill_id
            FROM (SELECT b.skill_id, max((-(b.k0 OPERATOR(skills.<#>) q.key))::real) AS sim
                  FROM skills.skill_key AS b,
                       (SELECT k.skill_id, k.k0 FROM skills.skill_key AS k WHERE k.skill_id = ANY (changed)
                        UNION ALL
                        SELECT NULL, r.key FROM unnest(removed) AS r(key)) AS q(skill_id, key)
                  WHERE b.skill_id IS DISTINCT FROM q.skill_id
                  GROUP BY b.skill_id) AS near
            CROSS JOIN LATERAL (
                SELECT count(*) AS edges, min(e.weight) AS farthest FROM skills.edge AS e
                WHERE e.from_skill = near.skill_id
                  AND e.provenance IN ('auto:key-similarity', 'auto:near-duplicate')) AS list
            WHERE near.sim >= update_graph.semantic_threshold AND near.sim > 0
              AND (list.edges < update_graph.neighbours OR near.sim >= list.farthest)
        ) AS x(id);
    END IF;
    IF cardinality(sources) > 0 THEN
        DELETE FROM skills.edge AS e
        WHERE e.from_skill = ANY (sources)
          AND e.provenance IN ('auto:key-similarity', 'auto:near-duplicate');
        PERFORM skills.write_key_edges(sources, semantic_threshold, alternative_threshold, neighbours);
    END IF;
    DELETE FROM skills.edge AS e
    WHERE e.provenance LIKE 'auto:%' AND e.provenance NOT IN ('auto:key-similarity', 'auto:near-duplicate');
    RETURN QUERY SELECT * FROM skills.finish_graph(semantic_threshold, alternative_threshold, neighbours);
END
$$;
COMMENT ON FUNCTION skills.update_graph(real, real, integer, integer) IS
    'Brings the automatic edges of skills.edge up to date with the keys changed since the last build or update (skills.graph_pending), as skills.build_graph would write them; builds when that is cheaper; returns the edge count per type.';

SELECT pg_catalog.pg_extension_config_dump('skills.edge', '');
