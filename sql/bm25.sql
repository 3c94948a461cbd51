-- The bm25 index: the access method, its operator, operator class, and query helpers.

CREATE FUNCTION skills.bm25_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c AS 'MODULE_PATHNAME', 'bm25_handler_wrapper';
CREATE ACCESS METHOD bm25 TYPE INDEX HANDLER skills.bm25_handler;
COMMENT ON ACCESS METHOD bm25 IS 'pg_skills BM25 index over ARRAY[name, description, instructions]';

-- Seq scans evaluate the operator per row (analysis of the whole document): make the planner
-- see that, so it prefers the index whenever one exists.
ALTER FUNCTION skills.bm25_distance(text[], skills.bm25query) COST 10000;

CREATE OPERATOR skills.<&> (
    LEFTARG = text[],
    RIGHTARG = skills.bm25query,
    FUNCTION = skills.bm25_distance
);
COMMENT ON OPERATOR skills.<&> (text[], skills.bm25query) IS
    'negative BM25 score of ARRAY[name, description, instructions] for a bm25query (ascending = best first)';

CREATE OPERATOR CLASS skills.bm25_ops
    DEFAULT FOR TYPE text[] USING bm25 AS
    OPERATOR 1 skills.<&> (text[], skills.bm25query) FOR ORDER BY pg_catalog.float_ops;

-- The bm25 index on a table (skills.skill by default), or NULL when there is none.
CREATE FUNCTION skills.bm25_index(tbl regclass DEFAULT 'skills.skill') RETURNS regclass
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found regclass[];
BEGIN
    SELECT array_agg(i.indexrelid::regclass ORDER BY i.indexrelid) INTO found
    FROM pg_catalog.pg_index AS i
    JOIN pg_catalog.pg_class AS c ON c.oid = i.indexrelid
    JOIN pg_catalog.pg_am AS a ON a.oid = c.relam
    WHERE i.indrelid = tbl AND a.amname = 'bm25' AND i.indisvalid AND i.indisready;
    IF coalesce(array_length(found, 1), 0) > 1 THEN
        RAISE EXCEPTION '% has % bm25 indexes: %', tbl, array_length(found, 1), found
            USING ERRCODE = 'ambiguous_parameter',
                  HINT = 'Name the index: skills.bm25query(query, ''index_name''), or drop all but one.';
    END IF;
    RETURN found[1];
END
$$;

CREATE FUNCTION skills.bm25query(query text, index regclass DEFAULT NULL) RETURNS skills.bm25query
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chosen regclass := coalesce(index, skills.bm25_index());
BEGIN
    IF chosen IS NULL THEN
        RAISE EXCEPTION 'skills.skill has no bm25 index'
            USING ERRCODE = 'undefined_object',
                  HINT = 'CREATE INDEX ON skills.skill USING bm25 ((ARRAY[name, description, instructions]));';
    END IF;
    RETURN ROW(chosen::oid, query, NULL::jsonb)::skills.bm25query;
END
$$;
COMMENT ON FUNCTION skills.bm25query(text, regclass) IS
    'A BM25 query for ORDER BY ARRAY[name, description, instructions] <&> skills.bm25query(...): the index defaults to the bm25 index on skills.skill. On Citus each shard scores it with its own statistics; skills.bm25_global_query scores with the whole table''s.';

-- Whether a table is distributed by Citus (false where Citus is not installed).
CREATE FUNCTION skills.is_distributed(tbl regclass) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found boolean;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1 AND partmethod <> ''n'')'
        INTO found USING tbl;
    RETURN found;
END
$$;

-- A BM25 query that carries the corpus statistics of the whole indexed table: on a table that
-- Citus distributes, the document count, total length and the query terms' document
-- frequencies of every shard, summed (one round trip to the shards), so each shard's index
-- scores as one index over all rows would and the merged top k equal a single node's. On a
-- local table: its index's own statistics.
CREATE FUNCTION skills.bm25_global_query(query text, index regclass DEFAULT NULL) RETURNS skills.bm25query
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chosen regclass := (skills.bm25query(query, index)).index;
    tbl regclass;
    command text;
    parts jsonb[];
    part jsonb;
    shards bigint;
    failed text;
BEGIN
    SELECT i.indrelid INTO tbl FROM pg_catalog.pg_index AS i WHERE i.indexrelid = chosen;
    IF NOT skills.is_distributed(tbl) THEN
        RETURN ROW(chosen::oid, query, skills.bm25_corpus(chosen, query))::skills.bm25query;
    END IF;
    -- Each shard's statistics: one query over skills.shard_anchor (one row per shard) reaches
    -- every shard in parallel over Citus's pooled connections. Where the anchors do not cover
    -- every shard (split since skills.distribute ran), run_command_on_shards does, over new
    -- connections (slower).
    parts := '{}';
    FOR part IN SELECT skills.bm25_shard_corpus(a.tableoid::regclass, query) FROM skills.shard_anchor AS a LOOP
        parts := parts || part;
    END LOOP;
    EXECUTE 'SELECT count(*) FROM pg_catalog.pg_dist_shard WHERE logicalrelid = $1' INTO shards USING tbl;
    IF cardinality(parts) = shards THEN
        RETURN ROW(chosen::oid, query, skills.bm25_corpus_sum(parts))::skills.bm25query;
    END IF;
    -- run_command_on_shards puts each shard's name where %s is (through format(), so a % of
    -- the query is doubled).
    command := 'SELECT skills.bm25_corpus(skills.bm25_index(''%s''), '
               || replace(quote_literal(query), '%', '%%') || ')';
    EXECUTE $q$
        SELECT array_agg(r.result::jsonb ORDER BY r.shardid) FILTER (WHERE r.success),
               string_agg(format('shard %s on %s:%s: %s', r.shardid, p.nodename, p.nodeport, r.result), '; ')
                   FILTER (WHERE NOT r.success)
        FROM pg_catalog.run_command_on_shards($1, $2) AS r
        LEFT JOIN pg_catalog.pg_dist_shard_placement AS p ON p.shardid = r.shardid
    $q$ INTO parts, failed USING tbl, command;
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'could not read the bm25 statistics of every shard of %: %', tbl, failed
            USING ERRCODE = 'connection_failure',
                  HINT = 'A worker node is down or unreachable (citus_check_cluster_node_health() lists them); searches answer again once it is back.';
    END IF;
    RETURN ROW(chosen::oid, query, skills.bm25_corpus_sum(parts))::skills.bm25query;
END
$$;
COMMENT ON FUNCTION skills.bm25_global_query(text, regclass) IS
    'A BM25 query carrying the whole table''s statistics (summed over Citus shards when distributed): scores equal a single node''s.';

-- Top k skills by the bm25 index: exactly the reference scan's answer (score descending, ties by
-- id). On one node skills.bm25_top_k reads the index and the rows it names directly. Where the
-- executor must read the rows (Citus shards; row-level security active for the user), the
-- operator orders them: the best `depth` rows (LIMIT depth) are exact above their lowest score,
-- and the depth grows until that lowest score is below the k-th best, so every row tied at the
-- k-th place is in hand.
CREATE FUNCTION skills.bm25_index_search(
    query text,
    k integer,
    categories skills.category[],
    index regclass)
RETURNS TABLE (id bigint, score double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q skills.bm25query;
    r record;
    ids bigint[] := '{}';
    scores double precision[] := '{}';
    kth double precision;
    depth integer;
    got integer;
    lowest double precision;
BEGIN
    IF skills.is_distributed('skills.skill') THEN
        -- Citus: each shard's index returns its best `depth` rows scored with the whole table's
        -- statistics, and Citus merges them (ORDER BY the operator alone: a tie-break column
        -- would make every shard sort all its rows instead of scanning its index).
        q := skills.bm25_global_query(query, index);
    ELSIF row_security_active('skills.skill') THEN
        q := skills.bm25query(query, index);
    ELSE
        RETURN QUERY SELECT t.id, t.score FROM skills.bm25_top_k(query, k, categories::text[], index) AS t;
        RETURN;
    END IF;
    depth := coalesce(2 * k + 1, 100);  -- usually one fetch: the k-th score and a lower one
    LOOP
        ids := '{}';
        scores := '{}';
        got := 0;
        FOR r IN
            SELECT s.id, -(ARRAY[s.name, s.description, s.instructions] OPERATOR(skills.<&>) q) AS score
            FROM skills.skill AS s
            WHERE categories IS NULL OR s.category = ANY (categories)
            ORDER BY ARRAY[s.name, s.description, s.instructions] OPERATOR(skills.<&>) q
            LIMIT depth
        LOOP
            got := got + 1;
            lowest := r.score;
            IF k IS NOT NULL AND got = k THEN
                kth := r.score;
            END IF;
            CONTINUE WHEN r.score <= 0;  -- no query term
            ids := ids || r.id;
            scores := scores || r.score;
        END LOOP;
        EXIT WHEN got < depth OR lowest <= 0 OR (kth IS NOT NULL AND lowest < kth);
        depth := depth * 4;
        kth := NULL;
    END LOOP;
    RETURN QUERY
        SELECT u.id, u.score FROM unnest(ids, scores) AS u(id, score)
        ORDER BY u.score DESC, u.id
        LIMIT k;
END
$$;

-- The extension's own BM25 index over skills.skill, so search is fast from the first row and the
-- index survives pg_dump/pg_restore (pg_dump does not dump indexes users add to an extension's
-- tables; it recreates the extension's own objects). Tune it with
-- ALTER INDEX skills.skill_bm25 SET (k1 = ..., ...) followed by REINDEX INDEX skills.skill_bm25.
CREATE INDEX skill_bm25 ON skills.skill USING bm25 ((ARRAY[name, description, instructions]));
