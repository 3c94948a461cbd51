-- Skill keys: the type, its operators, and the skeys index through VACUUM.
-- Keys are built in SQL: key i points mostly along dimension (i % 16), with a little of i itself.
CREATE TABLE key_demo (id int PRIMARY KEY, category int NOT NULL, key skills.key);
INSERT INTO key_demo
SELECT i, i % 4,
       (SELECT array_agg(CASE WHEN d = i % 16 THEN 1.0 WHEN d = 16 + i % 300 THEN 0.25 ELSE 0 END ORDER BY d)
        FROM generate_series(0, 511) AS d)::real[]::skills.key
FROM generate_series(1, 600) AS i;
-- Text form: shortest decimals; the first dimensions of key 1.
SELECT left(key::text, 24) FROM key_demo WHERE id = 1;
SELECT skills.key_dims(key), round(skills.key_norm(key)::numeric, 4) FROM key_demo WHERE id = 1;
-- Bad input: clear errors, never a crash.
SELECT '[1,2]'::skills.key;
SELECT '1,2,3'::skills.key;
SELECT array_fill(0::real, ARRAY[512])::skills.key;
SELECT (ARRAY['NaN'::real] || array_fill(1::real, ARRAY[511]))::skills.key;
SELECT (ARRAY[1e6::real] || array_fill(1::real, ARRAY[511]))::skills.key;
CREATE INDEX key_demo_bad ON key_demo USING skeys (key) WITH (lists = 100000);
CREATE INDEX key_demo_bad ON key_demo USING skeys (key) WITH (probes = 3);
-- The index: 8 lists, EXPLAIN shows it for ORDER BY ... LIMIT.
CREATE INDEX key_demo_ip ON key_demo USING skeys (key) WITH (lists = 8);
SELECT format_version, metric, dimensions, lists, entries, empty_lists FROM skills.key_index_stats('key_demo_ip');
-- At a breadth that reads some of the lists (when every list is read, as the default 16
-- probes of 8 lists do, a sequential scan and a sort of 600 rows can cost less).
SET pg_skills.key_probes = 2;
EXPLAIN (COSTS OFF)
SELECT id FROM key_demo ORDER BY key OPERATOR(skills.<#>) (SELECT key FROM key_demo WHERE id = 5) LIMIT 3;
-- Every list read: the index returns what a sequential scan returns.
SET pg_skills.key_probes = 8;
SELECT id, round((key OPERATOR(skills.<#>) q)::numeric, 4) AS distance
FROM key_demo, (SELECT key AS q FROM key_demo WHERE id = 5) AS query
ORDER BY key OPERATOR(skills.<#>) q, id LIMIT 5;
SELECT skills.key_recall('key_demo_ip', (SELECT key FROM key_demo WHERE id = 5), 10);
-- Deletes and VACUUM: the entries go, the index still answers.
DELETE FROM key_demo WHERE id % 3 = 0;
VACUUM key_demo;
SELECT entries, total_pages AS pages_after_vacuum FROM skills.key_index_stats('key_demo_ip') \gset
SELECT :entries AS entries;
SELECT id, round((key OPERATOR(skills.<#>) q)::numeric, 4) AS distance
FROM key_demo, (SELECT key AS q FROM key_demo WHERE id = 5) AS query
ORDER BY key OPERATOR(skills.<#>) q, id LIMIT 5;
-- Inserts after VACUUM fill the space it freed.
INSERT INTO key_demo SELECT id + 1000, category, key FROM key_demo WHERE id <= 200;
SELECT entries, total_pages <= :pages_after_vacuum AS no_new_pages FROM skills.key_index_stats('key_demo_ip');
-- A filtered query still gets its rows (iterative scan), reading one list at a time.
SET pg_skills.key_probes = 1;
SELECT count(*) FROM (
  SELECT id FROM key_demo WHERE category = 1
  ORDER BY key OPERATOR(skills.<#>) (SELECT key FROM key_demo WHERE id = 5) LIMIT 20) AS filtered;
-- A query can carry its breadth (skills.keyquery): it holds over the session's setting; the
-- index serves it; a breadth out of range is refused when the scan starts.
EXPLAIN (COSTS OFF)
SELECT id FROM key_demo
ORDER BY key OPERATOR(skills.<#>) skills.key_query((SELECT key FROM key_demo WHERE id = 5), probes => 8) LIMIT 3;
SELECT id, round((key OPERATOR(skills.<#>) q)::numeric, 4) AS distance
FROM key_demo, (SELECT skills.key_query(key, 8, 0) AS q FROM key_demo WHERE id = 5) AS query
ORDER BY key OPERATOR(skills.<#>) q, id LIMIT 5;
SET enable_seqscan = off;
SELECT id FROM key_demo
ORDER BY key OPERATOR(skills.<#>) skills.key_query((SELECT key FROM key_demo WHERE id = 5), 70000) LIMIT 1;
RESET enable_seqscan;
RESET pg_skills.key_probes;
REINDEX INDEX key_demo_ip;
SELECT entries FROM skills.key_index_stats('key_demo_ip');
DROP TABLE key_demo;
