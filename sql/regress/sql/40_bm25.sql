-- The bm25 index: the extension's own index serves skills.search and ORDER BY ... <&> ... .
INSERT INTO skills.skill (name, description, instructions) VALUES
  ('pytest-fixtures', 'Share setup code between pytest tests with fixtures', 'Put fixtures in conftest.py; use yield for teardown.'),
  ('rust-panic-backtrace', 'Find where a Rust program panicked', 'Run with RUST_BACKTRACE=1 and read the backtrace from the top frame of your crate.'),
  ('k8s-probes', 'Deploy a web service to Kubernetes with liveness and readiness probes', 'Add httpGet probes to the Deployment.'),
  ('ndcg-eval', 'Evaluate search ranking quality with NDCG and recall', 'Compute DCG over the top 10 results.'),
  ('readme', 'Write a README for a project', 'Start with what it is, then how to install and run it.');
SELECT skills.bm25_index();
SELECT format_version, segments_with_tombstones FROM skills.bm25_index_stats('skills.skill_bm25'::regclass);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF)
SELECT name FROM skills.skill
ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('rust backtrace')
LIMIT 2;
-- Index order: best first; rows without a query term follow with 0.
SELECT name, round((ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('rust backtrace'))::numeric, 4) AS distance
FROM skills.skill
ORDER BY ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('rust backtrace');
RESET enable_seqscan;
-- The same scores through a sequential scan, and through skills.search.
SET enable_indexscan = off;
SELECT name, round((ARRAY[name, description, instructions] OPERATOR(skills.<&>) skills.bm25query('rust backtrace'))::numeric, 4) AS distance
FROM skills.skill
ORDER BY 2, name;
RESET enable_indexscan;
SELECT name, round(score::numeric, 4) AS score FROM skills.search('rust backtrace', method => 'bm25');
-- Deletes and VACUUM: statistics exact again, index equals the reference scan.
DELETE FROM skills.skill WHERE name = 'readme';
VACUUM skills.skill;
SELECT segments, segment_documents, append_documents, segments_with_tombstones
FROM skills.bm25_index_stats('skills.skill_bm25'::regclass);
SELECT (SELECT array_agg(id ORDER BY score DESC, id) FROM skills.search('deploy probes ranking', k => NULL, method => 'bm25'))
     = (SELECT array_agg(id ORDER BY score DESC, id) FROM skills.bm25_scan('deploy probes ranking', NULL, NULL)) AS same_ranking;
-- Bad input: errors with SQLSTATEs, or empty results; never a crash.
SELECT count(*) FROM skills.search('the and of', method => 'bm25');
SET pg_skills.max_query_size = '128kB';
SELECT count(*) FROM skills.search(repeat('probes ', 15000), k => NULL, method => 'bm25');
RESET pg_skills.max_query_size;
SELECT try($$CREATE INDEX bad ON skills.skill USING bm25 ((ARRAY[name, description, instructions])) WITH (colour = 1)$$);
SELECT try($$CREATE INDEX bad ON skills.skill USING bm25 ((ARRAY[name, description, instructions])) WITH (k1 = -1)$$);
SELECT try($$CREATE INDEX bad ON skills.skill USING bm25 ((ARRAY[name, description, instructions])) WITH (name_weight = 0, description_weight = 0, instructions_weight = 0)$$);
SELECT try($$SELECT ARRAY['a'] OPERATOR(skills.<&>) skills.bm25query('x', 'skills.skill_pkey')$$);
SELECT try($$SELECT skills.bm25query(E'rust\x00')$$);
TRUNCATE skills.skill CASCADE;
