-- skills.search with the reference BM25 scorer.
INSERT INTO skills.skill (name, description, instructions) VALUES
  ('pytest-fixtures', 'Share setup code between pytest tests with fixtures', 'Put fixtures in conftest.py; use yield for teardown.'),
  ('rust-panic-backtrace', 'Find where a Rust program panicked', 'Run with RUST_BACKTRACE=1 and read the backtrace from the top frame of your crate.'),
  ('k8s-probes', 'Deploy a web service to Kubernetes with liveness and readiness probes', 'Add httpGet probes to the Deployment.'),
  ('ndcg-eval', 'Evaluate search ranking quality with NDCG and recall', 'Compute DCG over the top 10 results.'),
  ('readme', 'Write a README for a project', 'Start with what it is, then how to install and run it.');
SELECT name, category, round(score::numeric, 4) AS score FROM skills.search('pytest fixtures for setup');
SELECT name, round(score::numeric, 4) AS score FROM skills.search('rust panicked backtrace', k => 1);
SELECT name, round(score::numeric, 4) AS score FROM skills.search('deploy service', categories => '{devops_infra}');
SELECT count(*) FROM skills.search('deploy service', categories => '{testing,debugging}');
SELECT count(*) FROM skills.search('the and of');
SELECT count(*) FROM skills.search('');
SELECT count(*) FROM skills.search(repeat('ranking ', 12000), k => NULL);
SELECT skills.tokenize('Deploying the Services!');
SELECT try($$SELECT * FROM skills.search('x', k => 0)$$);
SELECT try($$SELECT * FROM skills.search('x', method => 'magic')$$);
SELECT try($$SELECT * FROM skills.search('x', method => 'hybrid')$$);
SELECT try($$SELECT * FROM skills.search(NULL)$$);
SELECT try($$SELECT * FROM skills.search('x', categories => '{cooking}')$$);
-- Ties break by id.
INSERT INTO skills.skill (name, description) VALUES ('alpha-one', 'zebra'), ('alpha-two', 'zebra');
SELECT name, round(score::numeric, 4) AS score FROM skills.search('zebra');
TRUNCATE skills.skill CASCADE;
