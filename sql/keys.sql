-- Skill keys: the skills.key type, casts, distance operators, and the skeys index with its
-- operator classes. The C functions come from Rust (extension/src/key/); they are declared here
-- because the type must exist, as a shell, before its input and output functions.

CREATE TYPE skills.key;

CREATE FUNCTION skills.key_in(cstring, oid, integer) RETURNS skills.key
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_in';
CREATE FUNCTION skills.key_out(skills.key) RETURNS cstring
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_out';
CREATE FUNCTION skills.key_recv(internal, oid, integer) RETURNS skills.key
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_recv';
CREATE FUNCTION skills.key_send(skills.key) RETURNS bytea
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_send';

-- EXTERNAL: random floats do not compress; wide rows may still move the key out of line.
CREATE TYPE skills.key (
    INPUT = skills.key_in,
    OUTPUT = skills.key_out,
    RECEIVE = skills.key_recv,
    SEND = skills.key_send,
    INTERNALLENGTH = VARIABLE,
    STORAGE = external,
    ALIGNMENT = int
);
COMMENT ON TYPE skills.key IS
    '512-d skill key stored as f16; text form [v1, ..., v512]; NaN, infinity, zero and wrong dimension counts rejected';

CREATE FUNCTION skills.key(real[]) RETURNS skills.key
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_from_real_array';
CREATE FUNCTION skills.key(double precision[]) RETURNS skills.key
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql
    RETURN skills.key($1::real[]);
CREATE FUNCTION skills.key_to_real_array(skills.key) RETURNS real[]
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_to_real_array';
CREATE CAST (real[] AS skills.key) WITH FUNCTION skills.key(real[]) AS ASSIGNMENT;
CREATE CAST (double precision[] AS skills.key) WITH FUNCTION skills.key(double precision[]) AS ASSIGNMENT;
CREATE CAST (skills.key AS real[]) WITH FUNCTION skills.key_to_real_array(skills.key) AS ASSIGNMENT;

CREATE FUNCTION skills.key_dims(skills.key) RETURNS integer
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_dims';
CREATE FUNCTION skills.key_norm(skills.key) RETURNS double precision
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_norm';

CREATE FUNCTION skills.key_negative_inner_product(skills.key, skills.key) RETURNS double precision
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_negative_inner_product';
CREATE FUNCTION skills.key_cosine_distance(skills.key, skills.key) RETURNS double precision
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_cosine_distance';
CREATE FUNCTION skills.key_l2_distance(skills.key, skills.key) RETURNS double precision
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_l2_distance';

CREATE OPERATOR skills.<#> (
    LEFTARG = skills.key, RIGHTARG = skills.key,
    FUNCTION = skills.key_negative_inner_product, COMMUTATOR = OPERATOR(skills.<#>)
);
COMMENT ON OPERATOR skills.<#> (skills.key, skills.key) IS 'negative inner product (ascending = most similar first)';
CREATE OPERATOR skills.<=> (
    LEFTARG = skills.key, RIGHTARG = skills.key,
    FUNCTION = skills.key_cosine_distance, COMMUTATOR = OPERATOR(skills.<=>)
);
COMMENT ON OPERATOR skills.<=> (skills.key, skills.key) IS 'cosine distance, 1 - cosine similarity';
CREATE OPERATOR skills.<-> (
    LEFTARG = skills.key, RIGHTARG = skills.key,
    FUNCTION = skills.key_l2_distance, COMMUTATOR = OPERATOR(skills.<->)
);
COMMENT ON OPERATOR skills.<-> (skills.key, skills.key) IS 'Euclidean distance';

-- A query key that carries its search breadth: a skeys index scan reads `probes` lists first
-- and at most `max_probes` in all (NULL: the scanning server's pg_skills.key_probes and
-- pg_skills.key_max_probes). The breadth travels inside the query, so it reaches every node that
-- scans (Citus shards), where a SET in the coordinator's session does not.
CREATE TYPE skills.keyquery AS (key skills.key, probes integer, max_probes integer);
COMMENT ON TYPE skills.keyquery IS
    'a query key with its skeys search breadth (NULL fields: the scanning server''s settings)';
CREATE FUNCTION skills.key_query(key skills.key, probes integer DEFAULT NULL,
                                 max_probes integer DEFAULT NULL)
    RETURNS skills.keyquery IMMUTABLE PARALLEL SAFE LANGUAGE sql
    RETURN ROW(key, probes, max_probes)::skills.keyquery;
COMMENT ON FUNCTION skills.key_query(skills.key, integer, integer) IS
    'a query key that carries its skeys breadth: ORDER BY key <#> skills.key_query(q, probes => 16)';

-- The same distances as key <op> key: a sequential scan reads every key, the breadth is moot.
-- C functions, not SQL ones: the planner would inline a SQL body, and the index, which it
-- matches by the operator, would no longer serve the ORDER BY.
CREATE FUNCTION skills.key_query_negative_inner_product(skills.key, skills.keyquery)
    RETURNS double precision IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
    AS 'MODULE_PATHNAME', 'pgs_key_query_negative_inner_product';
CREATE FUNCTION skills.key_query_cosine_distance(skills.key, skills.keyquery)
    RETURNS double precision IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
    AS 'MODULE_PATHNAME', 'pgs_key_query_cosine_distance';
CREATE FUNCTION skills.key_query_l2_distance(skills.key, skills.keyquery)
    RETURNS double precision IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
    AS 'MODULE_PATHNAME', 'pgs_key_query_l2_distance';
CREATE OPERATOR skills.<#> (
    LEFTARG = skills.key, RIGHTARG = skills.keyquery,
    FUNCTION = skills.key_query_negative_inner_product
);
COMMENT ON OPERATOR skills.<#> (skills.key, skills.keyquery) IS 'negative inner product with the query''s breadth';
CREATE OPERATOR skills.<=> (
    LEFTARG = skills.key, RIGHTARG = skills.keyquery,
    FUNCTION = skills.key_query_cosine_distance
);
COMMENT ON OPERATOR skills.<=> (skills.key, skills.keyquery) IS 'cosine distance with the query''s breadth';
CREATE OPERATOR skills.<-> (
    LEFTARG = skills.key, RIGHTARG = skills.keyquery,
    FUNCTION = skills.key_query_l2_distance
);
COMMENT ON OPERATOR skills.<-> (skills.key, skills.keyquery) IS 'Euclidean distance with the query''s breadth';

CREATE FUNCTION skills.skeys_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c AS 'MODULE_PATHNAME', 'skeys_handler_wrapper';
CREATE ACCESS METHOD skeys TYPE INDEX HANDLER skills.skeys_handler;
COMMENT ON ACCESS METHOD skeys IS 'pg_skills key index: k-means lists of f16 keys (IVF), exact distances';

CREATE OPERATOR CLASS skills.key_ip_ops
    DEFAULT FOR TYPE skills.key USING skeys AS
    OPERATOR 1 skills.<#> (skills.key, skills.key) FOR ORDER BY pg_catalog.float_ops,
    OPERATOR 1 skills.<#> (skills.key, skills.keyquery) FOR ORDER BY pg_catalog.float_ops;
CREATE OPERATOR CLASS skills.key_cosine_ops
    FOR TYPE skills.key USING skeys AS
    OPERATOR 2 skills.<=> (skills.key, skills.key) FOR ORDER BY pg_catalog.float_ops,
    OPERATOR 2 skills.<=> (skills.key, skills.keyquery) FOR ORDER BY pg_catalog.float_ops;
CREATE OPERATOR CLASS skills.key_l2_ops
    FOR TYPE skills.key USING skeys AS
    OPERATOR 3 skills.<-> (skills.key, skills.key) FOR ORDER BY pg_catalog.float_ops,
    OPERATOR 3 skills.<-> (skills.key, skills.keyquery) FOR ORDER BY pg_catalog.float_ops;

CREATE FUNCTION skills.key_index_stats(index regclass)
    RETURNS TABLE (format_version integer, metric text, dimensions integer, lists integer,
                   trained_on bigint, entries bigint, list_pages bigint, total_pages bigint,
                   empty_lists integer, smallest_list bigint, largest_list bigint)
    STRICT LANGUAGE c AS 'MODULE_PATHNAME', 'key_index_stats_wrapper';
COMMENT ON FUNCTION skills.key_index_stats(regclass) IS
    'format, metric, lists and their sizes of a skeys index';

CREATE FUNCTION skills.key_recall(index regclass, query skills.key, k integer DEFAULT 10)
    RETURNS double precision
    STRICT LANGUAGE c AS 'MODULE_PATHNAME', 'pgs_key_recall';
COMMENT ON FUNCTION skills.key_recall(regclass, skills.key, integer) IS
    'recall@k of the index at the current pg_skills.key_probes against exact search over its entries';
