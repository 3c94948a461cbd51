-- Constraints and derived columns of skills.skill.
SELECT try($$INSERT INTO skills.skill (name) VALUES ('')$$);
SELECT try($$INSERT INTO skills.skill (name) VALUES (NULL)$$);
SELECT try($$INSERT INTO skills.skill (name, category) VALUES ('x', 'cooking')$$);
SET pg_skills.max_document_size = '1kB';
SELECT try($$INSERT INTO skills.skill (name, instructions) VALUES ('big', repeat('x', 2000))$$);
RESET pg_skills.max_document_size;
SELECT try($$SET pg_skills.max_document_size = '0'$$);
SELECT try($$SET pg_skills.bm25_b = 2$$);
SELECT try($$INSERT INTO skills.skill (name, provenance) VALUES ('x', '{"a": 1}')$$);

INSERT INTO skills.skill (name, description, instructions)
VALUES ('pytest-fixtures', 'Share setup between pytest tests with fixtures.', E'# Fixtures\n\nUse conftest.py.');
SELECT name, category, version, length(content_hash) AS hash_len, token_count FROM skills.skill;
-- Whitespace-only differences normalise to the same content: rejected as a duplicate.
SELECT try($$INSERT INTO skills.skill (name, description, instructions)
             VALUES ('pytest-fixtures ', 'Share setup between  pytest tests with fixtures.', E'# Fixtures\r\n\r\nUse conftest.py.  ')$$);
-- Same name, other content: a second skill.
INSERT INTO skills.skill (name, description) VALUES ('pytest-fixtures', 'Another take on fixtures.');
SELECT count(*) FROM skills.skill WHERE name = 'pytest-fixtures';

-- Category edits keep the version; content edits make a new one and keep the old in history.
UPDATE skills.skill SET category = 'docs_tooling' WHERE description = 'Another take on fixtures.';
UPDATE skills.skill SET description = 'Fixtures, revised.' WHERE description = 'Another take on fixtures.';
-- Whitespace-only edits normalise to the same content: no new version, no history row.
UPDATE skills.skill SET instructions = instructions || E'  \n\n' WHERE category = 'testing';
SELECT name, description, category, version FROM skills.skill ORDER BY id;
SELECT skill_id > 0 AS has_skill, version, description FROM skills.skill_version;

-- The pools are views over the one table.
SELECT 'testing' AS pool, count(*) FROM skills.pool_testing
UNION ALL SELECT 'docs_tooling', count(*) FROM skills.pool_docs_tooling;
SELECT skills.classify('k8s-rollout', 'Deploy containers to Kubernetes', '');
TRUNCATE skills.skill CASCADE;
