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
-- built_at: when skills.build_graph() last ran; keys embedded after it make the embedder worker
-- rebuild once its queue is drained (skill_key_embedded_at answers that without a scan).
CREATE INDEX skill_key_embedded_at ON skills.skill_key (embedded_at);
CREATE TABLE skills.graph_state (
    version  bigint NOT NULL,
    built_at timestamptz
);
INSERT INTO skills.graph_state VALUES (0, NULL);

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
    IF semantic_threshold IS NULL OR alternative_threshold IS NULL OR neighbours IS NULL
       OR NOT (semantic_threshold BETWEEN -1 AND 1) OR NOT (alternative_threshold BETWEEN -1 AND 1)
       OR neighbours < 0 THEN
        RAISE EXCEPTION 'build_graph needs thresholds in [-1, 1] and neighbours >= 0'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Keys are unit vectors: q·k is a cosine. Defaults: 0.7, 0.95, 8.';
    END IF;
    -- One build at a time (the embedder worker rebuilds after draining its queue). The lock is
    -- graph_state's row, which every statement changing skills.edge or deleting skills updates
    -- before it starts (the triggers above): a build and a concurrent edge change take the same
    -- lock first, and cannot deadlock (an advisory lock taken before the edge deletion's own row
    -- lock could).
    PERFORM FROM skills.graph_state FOR UPDATE;
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
    WHERE n.sim >= semantic_threshold AND n.sim > 0
    ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO skills.edge (from_skill, to_skill, type, weight, provenance)
    SELECT r.from_skill, r.to_skill, r.type::skills.edge_type, r.weight, 'auto:' || r.rule
    FROM skills.rule_edges() AS r
    ON CONFLICT DO NOTHING;
    UPDATE skills.graph_state SET built_at = now();
    RETURN QUERY SELECT e.type, count(*) FROM skills.edge AS e GROUP BY e.type ORDER BY e.type;
END
$$;
COMMENT ON FUNCTION skills.build_graph(real, real, integer) IS
    'Replaces the automatic edges of skills.edge (key similarity, near-duplicates, document rules); returns the edge count per type.';

SELECT pg_catalog.pg_extension_config_dump('skills.edge', '');
