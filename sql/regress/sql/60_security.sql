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
