-- The privilege model and name resolution (the attacks themselves: tests/tests/security.rs).

-- The roles a DBA hands out, and what they are members of.
SELECT r.rolname, r.rolcanlogin, r.rolsuper,
       array(SELECT g.rolname FROM pg_auth_members AS m JOIN pg_roles AS g ON g.oid = m.roleid
             WHERE m.member = r.oid ORDER BY 1) AS member_of
FROM pg_roles AS r WHERE r.rolname LIKE 'skills\_%' ORDER BY 1;

-- Every SQL or PL/pgSQL function of the extension runs with a fixed search_path, or has a
-- body bound when it was created (RETURN ...): none is listed here.
SELECT p.oid::regprocedure AS resolves_names_at_run_time
FROM pg_proc AS p
JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension AS e ON e.oid = d.refobjid AND e.extname = 'pg_skills'
JOIN pg_language AS l ON l.oid = p.prolang
WHERE l.lanname IN ('sql', 'plpgsql') AND p.prosqlbody IS NULL
  AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)
ORDER BY 1;

-- Functions PUBLIC may not run, and who may.
SELECT p.oid::regprocedure AS function,
       array(SELECT a.grantee::regrole::text FROM aclexplode(p.proacl) AS a
             WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner ORDER BY 1) AS granted_to
FROM pg_proc AS p
JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension AS e ON e.oid = d.refobjid AND e.extname = 'pg_skills'
WHERE p.proacl IS NOT NULL
  AND NOT EXISTS (SELECT FROM aclexplode(p.proacl) AS a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
ORDER BY p.oid::regprocedure::text;

-- Settings that bound resources or name code: superuser (or reload) only.
SELECT skills.max_document_bytes() > 0 AS library_loaded;
SELECT name, context FROM pg_settings
WHERE name LIKE 'pg_skills.%' AND context NOT IN ('user') ORDER BY 1;

-- Under a search_path that puts a hostile schema before pg_catalog, the functions with a
-- RETURN body (bound when created) and those with SET search_path call none of its
-- operators or functions: each would raise.
CREATE SCHEMA evil;
CREATE FUNCTION evil.trap_text(text, text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'evil = (text, text) ran'; END $$;
CREATE FUNCTION evil.trap_int8(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'evil = (bigint, bigint) ran'; END $$;
CREATE FUNCTION evil.trap_concat(text, text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'evil || ran'; END $$;
CREATE FUNCTION evil.trap_field(jsonb, text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'evil ->> ran'; END $$;
CREATE FUNCTION evil.array_length(regclass[], integer) RETURNS integer LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'evil array_length ran'; END $$;
CREATE FUNCTION evil.jsonb_array_elements(jsonb) RETURNS SETOF jsonb LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'evil jsonb_array_elements ran'; END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.trap_text);
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.trap_int8);
CREATE OPERATOR evil.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.trap_concat);
CREATE OPERATOR evil.->> (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = evil.trap_field);
SET search_path = evil, pg_catalog, public;
-- The trigger, then the searches, over a skill of this test's own.
INSERT INTO skills.skill (name, description, instructions)
VALUES ('shadow-proof-deploy', 'deploy a service behind a shadowed search_path', 'kubectl apply');
SELECT skills.classify('pytest-fixtures', 'share setup between pytest tests', '');
SELECT skills.provenance_locations('[{"location": "a"}, {"location": "b"}]');
SELECT skills.merge_provenance('[{"location": "a", "commit": "1"}]', '[{"location": "a", "commit": "2"}, {"location": "c"}]');
SELECT skills.drop_locations('[{"location": "a"}, {"location": "b"}]', '{a}');
SELECT skills.key_dims(skills.key(array_fill(0.5::float8, ARRAY[512])));
SELECT (skills.bm25query('deploy')).query;
SELECT skills.bm25_index() IS NOT NULL AS has_index;
SELECT count(*) > 0 AS found FROM skills.search('deploy service', method => 'bm25');
SELECT skills.render_context('deploy service', k => 1, method => 'bm25') <> '' AS rendered;
SELECT skills.merge_duplicate_skills(ARRAY(SELECT content_hash FROM skills.skill WHERE name OPERATOR(pg_catalog.=) 'shadow-proof-deploy')) AS copies_merged;
SHOW search_path;
RESET search_path;
DROP SCHEMA evil CASCADE;
DELETE FROM skills.skill WHERE name = 'shadow-proof-deploy';
