-- The loader's upsert step, driven by hand: stage rows, apply, inspect.
CREATE FUNCTION stage(rows jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('pg_temp.skill_staging') IS NOT NULL THEN DROP TABLE pg_temp.skill_staging; END IF;
    CREATE TEMP TABLE skill_staging (ord bigint, content_hash text PRIMARY KEY, name text, description text,
                                     instructions text, category skills.category, provenance jsonb);
    INSERT INTO pg_temp.skill_staging
    SELECT ord, skills.content_hash(r ->> 'name', '', r ->> 'body'), r ->> 'name', '', r ->> 'body', NULL,
           jsonb_build_array(jsonb_build_object('location', r ->> 'at'))
    FROM jsonb_array_elements(rows) WITH ORDINALITY AS t(r, ord);
END $$;
SELECT try($$SELECT * FROM skills.apply_staging()$$);
SELECT stage('[{"name": "a", "body": "pytest one", "at": "r1:a"}, {"name": "b", "body": "deploy two", "at": "r1:b"}]');
SELECT * FROM skills.apply_staging();
SELECT stage('[{"name": "a", "body": "pytest one", "at": "r1:a"}, {"name": "b", "body": "deploy two", "at": "r1:b"}]');
SELECT * FROM skills.apply_staging();
SELECT stage('[{"name": "a", "body": "pytest one", "at": "r2:a"}]');
SELECT * FROM skills.apply_staging();
SELECT stage('[{"name": "b", "body": "deploy two, edited", "at": "r1:b"}]');
SELECT * FROM skills.apply_staging();
SELECT name, instructions, version, skills.provenance_locations(provenance) FROM skills.skill ORDER BY id;
SELECT skills.merge_provenance('[{"location": "x", "v": 1}, {"location": "y"}]', '[{"location": "x", "v": 2}, {"location": "z"}]');
SELECT skills.drop_locations('[{"location": "x"}, {"location": "y"}, {"no": "location"}]', '{x}');
