-- KeyOpt: the experience tables, recording a run, fitted rounds and their per-skill
-- rows, and the SQL over the Rust fit and reading (extension/src/keyopt/).

-- A task run: what was asked, by whom, under which budget. The task key is q of the task text,
-- so similar past runs can be found (event recall and the event term).
CREATE TABLE skills.event (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task          text NOT NULL CONSTRAINT event_task_not_empty CHECK (btrim(task) <> ''),
    task_key      skills.key NOT NULL,
    source_group  text,
    executor      text NOT NULL DEFAULT '',
    environment   jsonb NOT NULL DEFAULT '{}',
    budget        numeric,
    round         integer,
    set_passed    boolean,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE skills.event IS
    'Recorded task runs (support runs for KeyOpt). source_group: the source question (cross-validation folds never split one; NULL = the task text). round: the KeyOpt round active when it was recorded. set_passed: the outcome of a run that used its skills together and passed or failed as a whole (NULL: only per-arm outcomes).';

-- The skills a run used and how it went with each.
CREATE TABLE skills.event_arm (
    event_id       bigint NOT NULL REFERENCES skills.event (id) ON DELETE CASCADE,
    skill_id       bigint NOT NULL REFERENCES skills.skill (id) ON DELETE CASCADE,
    skill_version  integer NOT NULL,
    content_hash   text NOT NULL,
    passed         boolean,
    cost           double precision,
    stale          boolean NOT NULL DEFAULT false,
    PRIMARY KEY (event_id, skill_id)
);
CREATE INDEX event_arm_skill ON skills.event_arm (skill_id);
COMMENT ON TABLE skills.event_arm IS
    'Arms of a run: the skill (at the version it was served), pass or fail (NULL: not known apart from the run''s set_passed), cost. stale = recorded for a version that was no longer current; fits and readings skip stale arms and arms of content that has since changed.';

-- Fitted rounds. One is active; readers see the active round of their snapshot, never a mix.
CREATE TABLE skills.keyopt_round (
    round         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at    timestamptz NOT NULL DEFAULT now(),
    active        boolean NOT NULL DEFAULT false,
    max_event_id  bigint,
    rho           real NOT NULL,
    mu            real[] NOT NULL CONSTRAINT keyopt_round_mu_512 CHECK (cardinality(mu) = 512),
    settings      jsonb NOT NULL,
    report        jsonb NOT NULL,
    trigger       text NOT NULL,
    -- The function that gave the base relevance r (pg_skills.relevance_function at fit time,
    -- as to_regprocedure text); NULL: the key inner product. Readings of the round use it too.
    relevance_function text
);
CREATE UNIQUE INDEX keyopt_round_one_active ON skills.keyopt_round (active) WHERE active;
COMMENT ON TABLE skills.keyopt_round IS
    'KeyOpt rounds: ρ, μ, the settings cross-validation chose (use_dk, clip, alpha, kappa) and its report; events up to max_event_id were fitted and are the memory the round reads.';

-- Per skill and round: β and the packed row [k0; Δk; β] (1,025 little-endian f32) that a
-- reading takes in one piece. Kept in line (STORAGE MAIN): 4,100 bytes fit a page.
-- lift_bound: the largest ρ·r deficit the skill overcame in the round's support runs; a
-- reading never lifts it over a rival further ahead than that (0: never won from behind).
-- Infinity when the fit ran with bounds off.
CREATE TABLE skills.keyopt_skill (
    round         integer NOT NULL REFERENCES skills.keyopt_round (round) ON DELETE CASCADE,
    skill_id      bigint NOT NULL,
    content_hash  text NOT NULL,
    beta          real NOT NULL,
    lift_bound    real NOT NULL CONSTRAINT keyopt_skill_lift_bound CHECK (lift_bound >= 0),
    packed        bytea NOT NULL CONSTRAINT keyopt_skill_packed_len CHECK (octet_length(packed) = 4100),
    PRIMARY KEY (round, skill_id)
);
ALTER TABLE skills.keyopt_skill ALTER COLUMN packed SET STORAGE MAIN;
COMMENT ON TABLE skills.keyopt_skill IS
    'Per-skill corrections of a round (snapshot: a skill whose content_hash no longer matches gets no correction).';

-- Records one run with its arms in one call. arms: a JSON array of objects
--   {"skill_id": 12, "passed": true, "cost": 0.4, "version": 3, "content_hash": "..."}
-- (cost, version and content_hash optional; version/content_hash name what was served).
-- run_passed: the outcome of a run that used the skills together (a set that passed or failed
-- as a whole); each arm's "passed" is then optional (known per-arm outcomes still count).
CREATE FUNCTION skills.record_run(
    task text,
    arms jsonb,
    executor text DEFAULT '',
    environment jsonb DEFAULT '{}',
    budget numeric DEFAULT NULL,
    source_group text DEFAULT NULL,
    allow_stale boolean DEFAULT false,
    run_passed boolean DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_event bigint;
    arm jsonb;
    n integer;
    sid bigint;
    current_skill record;
    is_stale boolean;
    active_round integer;
    arm_form constant text :=
        'Each arm is an object like {"skill_id": 12, "passed": true}, optionally with "cost", "version" and "content_hash" of the skill as served; "passed" may be left out when run_passed gives the outcome of the whole run.';
BEGIN
    IF task IS NULL OR btrim(task) = '' THEN
        RAISE EXCEPTION 'a run needs the task text'
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Pass the task the agent worked on.';
    END IF;
    IF arms IS NULL OR jsonb_typeof(arms) <> 'array' OR jsonb_array_length(arms) = 0 THEN
        RAISE EXCEPTION 'arms must be a non-empty JSON array'
            USING ERRCODE = 'invalid_parameter_value', HINT = arm_form;
    END IF;
    -- The round first, then a plain VALUES: Citus refuses subqueries inside an INSERT.
    SELECT r.round INTO active_round FROM skills.keyopt_round AS r WHERE r.active;
    INSERT INTO skills.event (task, task_key, source_group, executor, environment, budget, round,
                              set_passed)
    VALUES (task, skills.query_key(task), source_group, coalesce(executor, ''),
            coalesce(environment, '{}'), budget, active_round, run_passed)
    RETURNING id INTO new_event;

    n := 0;
    FOR arm IN SELECT value FROM jsonb_array_elements(arms) LOOP
        n := n + 1;
        IF jsonb_typeof(arm) <> 'object'
           OR jsonb_typeof(arm -> 'skill_id') IS DISTINCT FROM 'number'
           OR (jsonb_typeof(arm -> 'passed') IS DISTINCT FROM 'boolean'
               AND NOT (run_passed IS NOT NULL AND jsonb_typeof(arm -> 'passed') IS NULL))
           OR (arm ? 'cost' AND jsonb_typeof(arm -> 'cost') NOT IN ('number', 'null'))
           OR (arm ? 'version' AND jsonb_typeof(arm -> 'version') <> 'number')
           OR (arm ? 'content_hash' AND jsonb_typeof(arm -> 'content_hash') <> 'string') THEN
            RAISE EXCEPTION 'arm % is malformed: %', n, arm
                USING ERRCODE = 'invalid_parameter_value', HINT = arm_form;
        END IF;
        sid := (arm ->> 'skill_id')::bigint;
        SELECT s.version, s.content_hash INTO current_skill FROM skills.skill AS s WHERE s.id = sid;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'arm %: skill % does not exist', n, sid
                USING ERRCODE = 'foreign_key_violation',
                      HINT = 'Report the ids skills.search returned; a deleted skill takes no outcomes.';
        END IF;
        is_stale := (arm ? 'version' AND (arm ->> 'version')::integer <> current_skill.version)
                    OR (arm ? 'content_hash' AND arm ->> 'content_hash' <> current_skill.content_hash);
        IF is_stale AND NOT allow_stale THEN
            RAISE EXCEPTION 'arm %: skill % changed since it was served (served %, now version %)',
                    n, sid, coalesce('version ' || (arm ->> 'version'), 'content ' || left(arm ->> 'content_hash', 12)),
                    current_skill.version
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Pass allow_stale => true to record it flagged stale (fits skip stale arms).';
        END IF;
        IF EXISTS (SELECT 1 FROM skills.event_arm AS a WHERE a.event_id = new_event AND a.skill_id = sid) THEN
            RAISE EXCEPTION 'arm %: skill % appears twice in one run', n, sid
                USING ERRCODE = 'unique_violation', HINT = 'Report each served skill once per run.';
        END IF;
        INSERT INTO skills.event_arm (event_id, skill_id, skill_version, content_hash, passed, cost, stale)
        VALUES (new_event, sid,
                coalesce((arm ->> 'version')::integer, current_skill.version),
                coalesce(arm ->> 'content_hash', current_skill.content_hash),
                (arm ->> 'passed')::boolean, (arm ->> 'cost')::double precision, is_stale);
    END LOOP;
    RETURN new_event;
END
$$;
COMMENT ON FUNCTION skills.record_run(text, jsonb, text, jsonb, numeric, text, boolean, boolean) IS
    'Records a task run and its arms (skills served, pass/fail, cost); returns the event id. run_passed records a run that used its skills together and passed or failed as a whole (arms'' own outcomes then optional). Unknown skills and changed versions are rejected (allow_stale => true records them flagged stale).';

-- skills.fit(trigger, activate) is Rust (extension/src/keyopt/mod.rs).
COMMENT ON FUNCTION skills.fit(text, boolean) IS
    'Fits a KeyOpt round from the recorded runs (cross-validated settings in the round''s report) and makes it the active round. Returns the round.';

-- Makes a stored round the active one (rollback, or roll forward again).
CREATE FUNCTION skills.use_round(n integer) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM skills.keyopt_round AS r WHERE r.round = n) THEN
        RAISE EXCEPTION 'no KeyOpt round %', n
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = format('Stored rounds: %s.', coalesce((SELECT string_agg(r.round::text, ', ' ORDER BY r.round) FROM skills.keyopt_round AS r), 'none (run skills.fit())'));
    END IF;
    -- Both in this transaction: other sessions see the old active round or the new one.
    UPDATE skills.keyopt_round AS r SET active = false WHERE r.active AND r.round <> n;
    UPDATE skills.keyopt_round AS r SET active = true WHERE r.round = n;
    RETURN n;
END
$$;
COMMENT ON FUNCTION skills.use_round(integer) IS 'Activates a stored KeyOpt round (earlier rounds are kept for rollback).';

-- The KeyOpt score of one skill for a query, in parts.
CREATE FUNCTION skills.keyopt_score(query text, skill_id bigint,
    OUT score double precision, OUT relevance double precision, OUT beta double precision,
    OUT dk_term double precision, OUT event_term double precision,
    OUT held_back double precision)
    LANGUAGE sql STABLE
    RETURN (SELECT (r.score, r.relevance, r.beta, r.dk_term, r.event_term, r.held_back)
            FROM skills.keyopt_rank(query, NULL::text[], NULL::integer, ARRAY[skill_id]) AS r);
COMMENT ON FUNCTION skills.keyopt_score(text, bigint) IS
    'S(q, s) = ρ·r + β + clip((q − μ)ᵀΔk, −c, c) + α·E with the active round (held_back is 0 for one skill alone: lift bounds act between skills); NULL when the skill has no key.';

CREATE VIEW skills.keyopt_rounds AS
SELECT r.round, r.active, r.created_at, r.trigger, r.max_event_id,
       r.report ->> 'events' AS events, r.report ->> 'discordant_groups' AS discordant_tasks,
       r.settings, r.rho,
       (r.report ->> 'relevance_only_accuracy')::double precision AS cv_accuracy_relevance_only,
       (r.report ->> 'best_accuracy')::double precision AS cv_accuracy_chosen,
       (SELECT count(*) FROM skills.keyopt_skill AS k WHERE k.round = r.round AND k.beta <> 0) AS corrected_skills,
       r.relevance_function
FROM skills.keyopt_round AS r;
COMMENT ON VIEW skills.keyopt_rounds IS 'KeyOpt rounds with what cross-validation chose.';

SELECT pg_catalog.pg_extension_config_dump('skills.event', '');
SELECT pg_catalog.pg_extension_config_dump('skills.event_arm', '');
SELECT pg_catalog.pg_extension_config_dump('skills.keyopt_round', '');
SELECT pg_catalog.pg_extension_config_dump('skills.keyopt_skill', '');
SELECT pg_catalog.pg_extension_config_dump('skills.event_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('skills.keyopt_round_round_seq', '');
