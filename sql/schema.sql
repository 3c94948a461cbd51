-- pg_skills schema: tables, types and views. Runs first (bootstrap); the functions that use these
-- objects are in api.sql (finalize). Everything lives in schema `skills` (see pg_skills.control).

-- A BM25 query for the bm25 index: the index whose statistics score it, the query text, and
-- optionally the corpus statistics it is scored with (NULL: the index's own; a distributed
-- collection's, summed over its shards, from skills.bm25_global_query).
-- Build it with skills.bm25query(query, index) or skills.bm25_global_query(query, index).
CREATE TYPE skills.bm25query AS (index oid, query text, corpus jsonb);

-- What the row trigger on skills.skill derives from a document (skills.skill_derived_columns):
-- NULL columns were not computed. risk is what skills.risk_scan returns.
CREATE TYPE skills.skill_derived_columns AS (content_hash text, token_count integer, risk jsonb, category text);

CREATE TYPE skills.category AS ENUM (
    'code_generation',
    'testing',
    'debugging',
    'refactoring_review',
    'data_ml',
    'devops_infra',
    'docs_tooling'
);
COMMENT ON TYPE skills.category IS
    'Capability pool of a skill, by its main artifact or activity (assigned by skills.classify unless given).';

-- Risk of a skill to the user whose agent follows it: the highest severity of its findings
-- (skills.risk_rules() lists the rules; docs/trust.md explains them).
CREATE TYPE skills.risk_level AS ENUM ('none', 'low', 'medium', 'high', 'critical');

CREATE TABLE skills.skill (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL CONSTRAINT skill_name_not_empty CHECK (btrim(name) <> ''),
    description   text NOT NULL DEFAULT '',
    instructions  text NOT NULL DEFAULT '',
    category      skills.category NOT NULL,
    provenance    jsonb NOT NULL DEFAULT '[]'
                  CONSTRAINT skill_provenance_is_array CHECK (jsonb_typeof(provenance) = 'array'),
    content_hash  text NOT NULL
                  CONSTRAINT skill_content_hash_unique UNIQUE
                  CONSTRAINT skill_content_hash_is_sha256 CHECK (content_hash ~ '^[0-9a-f]{64}$'),
    version       integer NOT NULL DEFAULT 1 CONSTRAINT skill_version_positive CHECK (version >= 1),
    token_count   integer NOT NULL DEFAULT 0 CONSTRAINT skill_token_count_nonnegative CHECK (token_count >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    risk          skills.risk_level NOT NULL DEFAULT 'none',
    risk_findings jsonb NOT NULL DEFAULT '[]',
    risk_rules_version integer NOT NULL DEFAULT 0,
    category_locked boolean NOT NULL DEFAULT false,
    retired_at    timestamptz
);
COMMENT ON TABLE skills.skill IS 'One row per distinct skill document (identity: content_hash of the normalised content).';
COMMENT ON COLUMN skills.skill.provenance IS
    'JSON array: one object per place the content was found (location, source, repository, commit, path, url, license).';
COMMENT ON COLUMN skills.skill.content_hash IS 'sha256 (hex) of the normalised name, description and instructions; set by a trigger.';
COMMENT ON COLUMN skills.skill.token_count IS 'LLM prompt tokens (o200k_base) of name, description and instructions; set by a trigger.';
COMMENT ON COLUMN skills.skill.risk IS 'Highest severity of risk_findings; set by the trigger (served up to pg_skills.max_risk).';
COMMENT ON COLUMN skills.skill.risk_findings IS
    'JSON array of findings: rule, severity, field, lines [first, last], excerpt, mitigation; set by the trigger.';
COMMENT ON COLUMN skills.skill.risk_rules_version IS 'Version of the rules the findings come from (skills.rescan_risk() brings older ones up to date).';
COMMENT ON COLUMN skills.skill.category_locked IS 'A category set by hand: new versions of the skill keep it (skills.set_category).';
COMMENT ON COLUMN skills.skill.retired_at IS 'When the skill''s files left every source it was loaded from; retired skills keep their history and outcomes but are not served.';
COMMENT ON COLUMN skills.skill.version IS 'Starts at 1; +1 each time the content of the skill changes (old versions in skills.skill_version).';

CREATE INDEX skill_category_idx ON skills.skill (category);
CREATE INDEX skill_name_idx ON skills.skill (name);

-- Earlier versions of a skill, written by the trigger when its content changes.
CREATE TABLE skills.skill_version (
    skill_id      bigint NOT NULL REFERENCES skills.skill (id) ON DELETE CASCADE,
    version       integer NOT NULL,
    name          text NOT NULL,
    description   text NOT NULL,
    instructions  text NOT NULL,
    category      skills.category NOT NULL,
    provenance    jsonb NOT NULL,
    content_hash  text NOT NULL,
    token_count   integer NOT NULL,
    valid_from    timestamptz NOT NULL,
    valid_to      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (skill_id, version)
);
COMMENT ON TABLE skills.skill_version IS 'Superseded versions of skills (history); the current version is in skills.skill.';

-- The capability pools: one view per category over the one table.
CREATE VIEW skills.pool_code_generation    AS SELECT * FROM skills.skill WHERE category = 'code_generation';
CREATE VIEW skills.pool_testing            AS SELECT * FROM skills.skill WHERE category = 'testing';
CREATE VIEW skills.pool_debugging          AS SELECT * FROM skills.skill WHERE category = 'debugging';
CREATE VIEW skills.pool_refactoring_review AS SELECT * FROM skills.skill WHERE category = 'refactoring_review';
CREATE VIEW skills.pool_data_ml            AS SELECT * FROM skills.skill WHERE category = 'data_ml';
CREATE VIEW skills.pool_devops_infra       AS SELECT * FROM skills.skill WHERE category = 'devops_infra';
CREATE VIEW skills.pool_docs_tooling       AS SELECT * FROM skills.skill WHERE category = 'docs_tooling';

-- User data in extension tables is dumped by pg_dump only when marked as configuration.
SELECT pg_catalog.pg_extension_config_dump('skills.skill', '');
SELECT pg_catalog.pg_extension_config_dump('skills.skill_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('skills.skill_version', '');
