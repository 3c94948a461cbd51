-- skills.search with the reference BM25 scorer.
INSERT INTO skills.skill (name, description, instructions) VALUES
  ('pytest-fixtures', 'Share setup code between pytest tests with fixtures', 'Put fixtures in conftest.py; use yield for teardown.'),
  ('rust-panic-backtrace', 'Find where a Rust program panicked', 'Run with RUST_BACKTRACE=1 and read the backtrace from the top frame of your crate.'),
  ('k8s-probes', 'Deploy a web service to Kubernetes with liveness and readiness probes', 'Add httpGet probes to the Deployment.'),
  ('ndcg-eval', 'Evaluate search ranking quality with NDCG and recall', 'Compute DCG over the top 10 results.'),
  ('readme', 'Write a README for a project', 'Start with what it is, then how to install and run it.');
SELECT name, category, round(score::numeric, 4) AS score FROM skills.search('pytest fixtures for setup', method => 'bm25');
SELECT name, round(score::numeric, 4) AS score FROM skills.search('rust panicked backtrace', k => 1, method => 'bm25');
SELECT name, round(score::numeric, 4) AS score FROM skills.search('deploy service', categories => '{devops_infra}', method => 'bm25');
SELECT count(*) FROM skills.search('deploy service', categories => '{testing,debugging}', method => 'bm25');
SELECT count(*) FROM skills.search('the and of', method => 'bm25');
SELECT count(*) FROM skills.search('', method => 'bm25');
-- Query texts are bounded by pg_skills.max_query_size (superuser); within it, long ones work.
SELECT try($$SELECT count(*) FROM skills.search(repeat('ranking ', 12000), k => NULL, method => 'bm25')$$);
SET pg_skills.max_query_size = '128kB';
SELECT count(*) FROM skills.search(repeat('ranking ', 12000), k => NULL, method => 'bm25');
RESET pg_skills.max_query_size;
SELECT skills.tokenize('Deploying the Services!');
SELECT try($$SELECT * FROM skills.search('x', k => 0, method => 'bm25')$$);
SELECT try($$SELECT * FROM skills.search('x', method => 'magic')$$);
SELECT try($$SELECT * FROM skills.search(NULL)$$);
SELECT try($$SELECT * FROM skills.search('x', categories => '{cooking}', method => 'bm25')$$);
-- The FastAdapt limits: a token budget (greedy in rank order), a threshold, and the score parts.
SELECT name, tokens, round(score::numeric, 4) AS score, round(bm25::numeric, 4) AS bm25, semantic, graph, beta
FROM skills.search('deploy service ranking tests rust', method => 'bm25');
SELECT name, tokens FROM skills.search('deploy service ranking tests rust', token_budget => 60, method => 'bm25');
SELECT name FROM skills.search('deploy service ranking tests rust', min_score => 1.0, method => 'bm25');
SELECT count(*) FROM skills.search('deploy service ranking tests rust', token_budget => 0, method => 'bm25');
SELECT skills.render_context('rust panicked backtrace', k => 1, method => 'bm25');
SELECT skills.prompt_tokens(skills.render_context('deploy service ranking tests rust', token_budget => 80, method => 'bm25')) <= 80 AS within_budget;
SELECT try($$SELECT * FROM skills.search('x', token_budget => -5, method => 'bm25')$$);
SELECT try($$SELECT * FROM skills.search('x', min_score => 'NaN', method => 'bm25')$$);
SELECT try($$SELECT * FROM skills.search('x', method => 'hybrid', bm25_weight => -1)$$);
-- The skill graph: rules, hand-made edges, rebuilds.
INSERT INTO skills.skill (name, description, instructions) VALUES
  ('release-notes', 'Write release notes', E'## Prerequisites\n- a `readme` that says what the project is\n\n## Next steps\n- [k8s-probes](../k8s-probes/)');
INSERT INTO skills.edge (from_skill, to_skill, type, weight)
SELECT a.id, b.id, 'workflow', 1 FROM skills.skill a, skills.skill b WHERE a.name = 'pytest-fixtures' AND b.name = 'ndcg-eval';
SELECT * FROM skills.build_graph();
SELECT a.name AS from_skill, b.name AS to_skill, e.type, e.weight, e.provenance
FROM skills.edge e JOIN skills.skill a ON a.id = e.from_skill JOIN skills.skill b ON b.id = e.to_skill ORDER BY 1, 2;
SELECT try($$INSERT INTO skills.edge (from_skill, to_skill, type, weight) SELECT id, id, 'semantic', 1 FROM skills.skill LIMIT 1$$);
SELECT try($$INSERT INTO skills.edge (from_skill, to_skill, type, weight) SELECT a.id, b.id, 'friend', 1 FROM skills.skill a, skills.skill b LIMIT 1$$);
SELECT try($$SELECT * FROM skills.build_graph(semantic_threshold => 2)$$);
-- Ties break by id.
INSERT INTO skills.skill (name, description) VALUES ('alpha-one', 'zebra'), ('alpha-two', 'zebra');
SELECT name, round(score::numeric, 4) AS score FROM skills.search('zebra', method => 'bm25');
TRUNCATE skills.skill CASCADE;
