-- Fresh database: the extension installs into schema skills with all its objects.
CREATE EXTENSION pg_skills;
SELECT extname, extversion IS NOT NULL AS has_version, n.nspname
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname = 'pg_skills';
SELECT enum_range(NULL::skills.category);
SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'skills' AND c.relkind IN ('r', 'v') ORDER BY 1;
SELECT name, setting, unit, min_val, max_val FROM pg_settings WHERE name LIKE 'pg_skills.%' ORDER BY 1;
-- Errors in these suites are shown as SQLSTATE: message (hint), which is stable across versions.
CREATE FUNCTION public.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; hint text;
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
    RETURN st || ': ' || msg || coalesce(' (hint: ' || nullif(hint, '') || ')', '');
END $$;
