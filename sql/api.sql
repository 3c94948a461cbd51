-- pg_skills SQL API written in SQL/PL/pgSQL (finalize: runs after the Rust functions exist).

CREATE FUNCTION skills.classify(name text, description text, instructions text)
RETURNS skills.category
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN skills.classify_label(name, description, instructions)::skills.category;
COMMENT ON FUNCTION skills.classify(text, text, text) IS
    'The deterministic category classifier (same rules as the loader; docs/ingestion.md, Categories).';

-- ---------------------------------------------------------------------------------------------
-- Derived columns, validation and history: one BEFORE trigger.
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION skills.skill_before_write()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    limit_bytes bigint;
    doc_bytes   bigint;
    new_hash    text;
    scan        jsonb;
    derived     skills.skill_derived_columns;
    unchanged_hash text := '';
    classify    boolean;
    previous_end timestamptz;
BEGIN
    IF NEW.name IS NULL OR btrim(NEW.name) = '' THEN
        RAISE EXCEPTION 'a skill needs a non-empty name'
            USING ERRCODE = 'check_violation',
                  HINT = 'Use the skill''s identifier, e.g. the name: field of its SKILL.md front matter.';
    END IF;
    NEW.description := coalesce(NEW.description, '');
    NEW.instructions := coalesce(NEW.instructions, '');
    -- The hash, and unless the content is unchanged or over the limit (refused below) also the
    -- token count, the risk scan and (where the category is to be derived) the category, in
    -- one call that reads the texts once.
    limit_bytes := skills.max_document_bytes();
    classify := NEW.category IS NULL;
    IF TG_OP = 'UPDATE' THEN
        unchanged_hash := OLD.content_hash;
        -- A hand-set category survives new versions (see below).
        IF OLD.category_locked AND coalesce(NEW.category_locked, false) THEN
            classify := false;
        END IF;
    END IF;
    derived := skills.skill_derived_columns(NEW.name, NEW.description, NEW.instructions,
                                            unchanged_hash, classify, limit_bytes);
    new_hash := derived.content_hash;

    IF TG_OP = 'UPDATE' AND new_hash = OLD.content_hash THEN
        -- Same normalised content: derived columns stay; category and provenance may be edited.
        NEW.content_hash := OLD.content_hash;
        NEW.token_count := OLD.token_count;
        NEW.version := OLD.version;
        NEW.created_at := OLD.created_at;
        NEW.category := coalesce(NEW.category, OLD.category);
        -- A category changed by hand is an override that later versions keep.
        IF NEW.category IS DISTINCT FROM OLD.category AND NEW.category_locked IS NOT DISTINCT FROM OLD.category_locked THEN
            NEW.category_locked := true;
        END IF;
        NEW.category_locked := coalesce(NEW.category_locked, OLD.category_locked);
        -- Findings are derived: kept while the rules are the same, computed again otherwise.
        IF OLD.risk_rules_version = skills.risk_rules_version() AND NEW.risk_rules_version = OLD.risk_rules_version THEN
            NEW.risk := OLD.risk;
            NEW.risk_findings := OLD.risk_findings;
        ELSE
            scan := skills.risk_scan(NEW.name, NEW.description, NEW.instructions);
            NEW.risk := (scan ->> 'level')::skills.risk_level;
            NEW.risk_findings := scan -> 'findings';
            NEW.risk_rules_version := (scan ->> 'rules_version')::integer;
        END IF;
        IF (NEW.name, NEW.description, NEW.instructions, NEW.category, NEW.provenance, NEW.risk, NEW.category_locked, NEW.retired_at)
           IS DISTINCT FROM (OLD.name, OLD.description, OLD.instructions, OLD.category, OLD.provenance, OLD.risk, OLD.category_locked, OLD.retired_at) THEN
            NEW.updated_at := now();
        ELSE
            NEW.updated_at := OLD.updated_at;
        END IF;
        RETURN NEW;
    END IF;

    doc_bytes := octet_length(NEW.name) + octet_length(NEW.description) + octet_length(NEW.instructions);
    IF doc_bytes > limit_bytes THEN
        RAISE EXCEPTION 'skill "%" is % bytes, over the limit of % bytes', left(NEW.name, 64), doc_bytes, limit_bytes
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = format('Shorten the document or raise pg_skills.max_document_size (now %s).',
                                current_setting('pg_skills.max_document_size'));
    END IF;

    NEW.content_hash := new_hash;
    NEW.token_count := derived.token_count;
    scan := derived.risk;
    NEW.risk := (scan ->> 'level')::skills.risk_level;
    NEW.risk_findings := scan -> 'findings';
    NEW.risk_rules_version := (scan ->> 'rules_version')::integer;
    NEW.category_locked := coalesce(NEW.category_locked, false);
    IF TG_OP = 'UPDATE' AND OLD.category_locked AND NEW.category_locked THEN
        -- A hand-set category survives new versions (skills.set_category(id, NULL) releases it).
        NEW.category := OLD.category;
    END IF;
    IF NEW.category IS NULL THEN
        NEW.category := derived.category::skills.category;
    END IF;

    IF TG_OP = 'UPDATE' THEN
        -- A version starts where the previous one ended (or at creation). Read first, then a
        -- plain INSERT ... VALUES: Citus refuses subqueries inside INSERT on a distributed table.
        SELECT max(v.valid_to) INTO previous_end FROM skills.skill_version AS v WHERE v.skill_id = OLD.id;
        INSERT INTO skills.skill_version
            (skill_id, version, name, description, instructions, category, provenance,
             content_hash, token_count, valid_from)
        VALUES
            (OLD.id, OLD.version, OLD.name, OLD.description, OLD.instructions, OLD.category, OLD.provenance,
             OLD.content_hash, OLD.token_count, coalesce(previous_end, OLD.created_at));
        NEW.version := OLD.version + 1;
        NEW.created_at := OLD.created_at;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER skill_before_write
    BEFORE INSERT OR UPDATE ON skills.skill
    FOR EACH ROW EXECUTE FUNCTION skills.skill_before_write();

-- ---------------------------------------------------------------------------------------------
-- Provenance helpers and the loader's set-based upsert.
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION skills.provenance_locations(provenance jsonb)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN (SELECT coalesce(array_agg(e ->> 'location' ORDER BY ord) FILTER (WHERE e ? 'location'), '{}')
        FROM jsonb_array_elements(provenance) WITH ORDINALITY AS t(e, ord));

-- Entries of `incoming` replace entries of `existing` with the same location; others append.
CREATE FUNCTION skills.merge_provenance(existing jsonb, incoming jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN (
    SELECT coalesce(jsonb_agg(x.e ORDER BY x.ord), '[]'::jsonb)
    FROM (
        SELECT coalesce((SELECT n FROM jsonb_array_elements(incoming) AS n
                         WHERE n ->> 'location' = o ->> 'location' LIMIT 1), o) AS e,
               ord
        FROM jsonb_array_elements(existing) WITH ORDINALITY AS t(o, ord)
        UNION ALL
        SELECT n, 1000000000 + ord
        FROM jsonb_array_elements(incoming) WITH ORDINALITY AS u(n, ord)
        WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(existing) AS o
                          WHERE o ->> 'location' = n ->> 'location')
    ) AS x);

CREATE FUNCTION skills.drop_locations(provenance jsonb, locations text[])
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN (SELECT coalesce(jsonb_agg(e ORDER BY ord), '[]'::jsonb)
        FROM jsonb_array_elements(provenance) WITH ORDINALITY AS t(e, ord)
        WHERE NOT coalesce(e ->> 'location' = ANY (locations), false));

-- Upserts the rows of pg_temp.skill_staging (filled by skills-load with COPY):
--   content already stored, same places       -> unchanged (provenance details such as the
--                                                commit are refreshed if they changed)
--   content already stored, a new place       -> merged (provenance gains the place)
--   new content at the places of one skill    -> updated (that skill's next version)
--   new content otherwise                     -> new skill
-- A place that now holds other content is removed from the skill that had it.
CREATE FUNCTION skills.apply_staging(OUT new_skills bigint, OUT updated bigint, OUT merged bigint, OUT unchanged bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- Rows inserted per statement (their derived columns computed together first).
    chunk_rows constant bigint := 256;
    chunk_start bigint;
    last_ord bigint;
    chunk_written bigint;
    ahead boolean;
    bulk_before text;
BEGIN
    IF to_regclass('pg_temp.skill_staging') IS NULL THEN
        RAISE EXCEPTION 'no staging table pg_temp.skill_staging in this session'
            USING ERRCODE = 'undefined_table',
                  HINT = 'Load skills with the skills-load command, which creates and fills it.';
    END IF;

    -- One load at a time: the content-hash identity is looked up and then inserted, and on
    -- Citus no unique constraint backs it (sql/citus.sql).
    PERFORM pg_advisory_xact_lock(hashtext('pg_skills.apply_staging'));

    -- The stored skills' identities and places, read once into a work table: every later step
    -- joins the session's work tables only, and every write reads them through a subquery
    -- (Citus, when the skills are distributed (docs/citus.md), refuses direct joins of local
    -- and distributed tables in writes and correlated subqueries across them).
    IF to_regclass('pg_temp.skill_staging_current') IS NOT NULL THEN DROP TABLE pg_temp.skill_staging_current; END IF;
    CREATE TEMP TABLE skill_staging_current ON COMMIT DROP AS
        SELECT s.id, s.content_hash, s.provenance, s.retired_at FROM skills.skill AS s;

    -- The loader and this extension must normalise and hash alike (same build): a staged row
    -- said to hold stored content must hash to it. The rows written below are checked after
    -- their writes, whose trigger computes their hashes anyway (on Citus, here, as before).
    ahead := NOT skills.is_distributed('skills.skill');
    IF EXISTS (SELECT 1 FROM pg_temp.skill_staging AS st
               WHERE (NOT ahead OR st.content_hash IN (SELECT c.content_hash FROM pg_temp.skill_staging_current AS c))
                 AND st.content_hash <> skills.content_hash(st.name, st.description, st.instructions)) THEN
        RAISE EXCEPTION 'staged content hashes differ from the extension''s content_hash()'
            USING ERRCODE = 'data_exception',
                  HINT = 'Use a skills-load built from the same pg_skills version as the installed extension.';
    END IF;

    -- Known content: unchanged when all its staged places are known, else the new places merge in.
    SELECT count(*) FILTER (WHERE known), count(*) FILTER (WHERE NOT known)
    INTO unchanged, merged
    FROM (SELECT skills.provenance_locations(st.provenance) <@ skills.provenance_locations(s.provenance) AS known
          FROM pg_temp.skill_staging AS st JOIN pg_temp.skill_staging_current AS s USING (content_hash)) AS k;

    -- Write only where provenance differs (new places, or details such as the commit refreshed).
    UPDATE skills.skill AS s
    SET provenance = skills.merge_provenance(s.provenance, st.provenance)
    FROM (SELECT c.id, st.provenance
          FROM pg_temp.skill_staging AS st JOIN pg_temp.skill_staging_current AS c USING (content_hash)
          WHERE NOT c.provenance @> st.provenance) AS st
    WHERE s.id = st.id;

    -- A second load in the same transaction replaces the work tables (no NOTICE when absent).
    IF to_regclass('pg_temp.skill_staging_fresh') IS NOT NULL THEN DROP TABLE pg_temp.skill_staging_fresh; END IF;
    IF to_regclass('pg_temp.skill_staging_pairs') IS NOT NULL THEN DROP TABLE pg_temp.skill_staging_pairs; END IF;
    -- The staged rows' texts stay in skill_staging (read by content_hash, its key).
    CREATE TEMP TABLE skill_staging_fresh ON COMMIT DROP AS
        SELECT st.ord, st.content_hash, skills.provenance_locations(st.provenance) AS locs
        FROM pg_temp.skill_staging AS st
        WHERE NOT EXISTS (SELECT 1 FROM pg_temp.skill_staging_current AS s WHERE s.content_hash = st.content_hash);

    -- A stored skill is updated in place when all its places now hold one new content.
    CREATE TEMP TABLE skill_staging_pairs ON COMMIT DROP AS
        WITH sl AS (SELECT s.id, l FROM pg_temp.skill_staging_current AS s, unnest(skills.provenance_locations(s.provenance)) AS l),
             nloc AS (SELECT id, count(*) AS n FROM sl GROUP BY id),
             fl AS (SELECT f.content_hash, l FROM pg_temp.skill_staging_fresh AS f, unnest(f.locs) AS l),
             m AS (SELECT sl.id, fl.content_hash, count(*) AS n FROM sl JOIN fl USING (l) GROUP BY sl.id, fl.content_hash)
        SELECT DISTINCT ON (m.id) m.id, m.content_hash
        FROM m JOIN nloc USING (id)
        WHERE m.n = nloc.n
        ORDER BY m.id, m.content_hash;
    DELETE FROM pg_temp.skill_staging_pairs AS p
    WHERE EXISTS (SELECT 1 FROM pg_temp.skill_staging_pairs AS q WHERE q.content_hash = p.content_hash AND q.id < p.id);

    -- The row trigger derives token counts, risk findings and categories from the text; the
    -- writes below have them computed ahead on other threads (skills.prepare_skill_writes), and
    -- the trigger reads them from there. Not on Citus, where the triggers run on the workers.
    -- And the bm25 index gathers the new documents and writes them as one segment when the
    -- load ends (each document written once, not into the append area and again at merges).
    IF ahead THEN
        bulk_before := current_setting('pg_skills.bm25_bulk_insert');
        PERFORM set_config('pg_skills.bm25_bulk_insert', 'on', true);
    END IF;
    PERFORM skills.prepare_skill_writes(array_agg(fr.name), array_agg(fr.description), array_agg(fr.instructions))
    FROM pg_temp.skill_staging_pairs AS p JOIN pg_temp.skill_staging AS fr USING (content_hash)
    WHERE ahead;
    UPDATE skills.skill AS s
    SET name = f.name, description = f.description, instructions = f.instructions,
        category = f.category, provenance = skills.merge_provenance(s.provenance, f.provenance)
    FROM (SELECT p.id, fr.name, fr.description, fr.instructions, fr.category, fr.provenance
          FROM pg_temp.skill_staging_pairs AS p JOIN pg_temp.skill_staging AS fr USING (content_hash)) AS f
    WHERE s.id = f.id;
    GET DIAGNOSTICS updated = ROW_COUNT;

    -- New skills: the fresh rows no stored skill took as its next version, in the staging
    -- order, a chunk of it at a time. Each chunk's derived columns are computed while the chunk
    -- before it is inserted: the loop starts one chunk early, inserting nothing the first time.
    DELETE FROM pg_temp.skill_staging_fresh AS f
    WHERE EXISTS (SELECT 1 FROM pg_temp.skill_staging_pairs AS p WHERE p.content_hash = f.content_hash);
    CREATE INDEX ON pg_temp.skill_staging_fresh (ord);
    new_skills := 0;
    SELECT min(f.ord) - chunk_rows, max(f.ord) INTO chunk_start, last_ord FROM pg_temp.skill_staging_fresh AS f;
    WHILE chunk_start <= last_ord LOOP
        PERFORM skills.prepare_skill_writes(array_agg(st.name), array_agg(st.description), array_agg(st.instructions))
        FROM pg_temp.skill_staging_fresh AS f JOIN pg_temp.skill_staging AS st USING (content_hash)
        WHERE ahead AND f.ord >= chunk_start + chunk_rows AND f.ord < chunk_start + 2 * chunk_rows;
        INSERT INTO skills.skill (name, description, instructions, category, provenance)
        SELECT st.name, st.description, st.instructions, st.category, st.provenance
        FROM pg_temp.skill_staging_fresh AS f JOIN pg_temp.skill_staging AS st USING (content_hash)
        WHERE f.ord >= chunk_start AND f.ord < chunk_start + chunk_rows
        ORDER BY f.ord;
        GET DIAGNOSTICS chunk_written = ROW_COUNT;
        new_skills := new_skills + chunk_written;
        chunk_start := chunk_start + chunk_rows;
    END LOOP;
    IF ahead THEN
        PERFORM skills.bm25_merge_append(i.indexrelid)
        FROM pg_catalog.pg_index AS i
        JOIN pg_catalog.pg_class AS c ON c.oid = i.indexrelid
        JOIN pg_catalog.pg_am AS a ON a.oid = c.relam
        WHERE i.indrelid = 'skills.skill'::regclass AND a.amname = 'bm25';
        PERFORM set_config('pg_skills.bm25_bulk_insert', bulk_before, true);
        -- Every staged hash now names a stored skill: the written rows' trigger hashed their
        -- texts as the staged hashes said (checked above on Citus).
        IF EXISTS (SELECT 1 FROM pg_temp.skill_staging AS st
                   WHERE NOT EXISTS (SELECT 1 FROM skills.skill AS s WHERE s.content_hash = st.content_hash)) THEN
            RAISE EXCEPTION 'staged content hashes differ from the extension''s content_hash()'
                USING ERRCODE = 'data_exception',
                      HINT = 'Use a skills-load built from the same pg_skills version as the installed extension.';
        END IF;
    END IF;

    -- Places that now hold other content leave the skill that had them (skills written above
    -- keep their places: the content they now hold is what was staged there).
    UPDATE skills.skill AS s
    SET provenance = skills.drop_locations(s.provenance, moved.locs)
    FROM (
        WITH sl AS (SELECT s2.id, s2.content_hash, l
                    FROM pg_temp.skill_staging_current AS s2, unnest(skills.provenance_locations(s2.provenance)) AS l
                    WHERE NOT EXISTS (SELECT 1 FROM pg_temp.skill_staging_pairs AS p WHERE p.id = s2.id)),
             stl AS (SELECT st.content_hash, l
                     FROM pg_temp.skill_staging AS st, unnest(skills.provenance_locations(st.provenance)) AS l)
        SELECT sl.id, array_agg(DISTINCT sl.l) AS locs
        FROM sl JOIN stl ON sl.l = stl.l AND sl.content_hash <> stl.content_hash
        GROUP BY sl.id
    ) AS moved
    WHERE s.id = moved.id;
END
$$;
COMMENT ON FUNCTION skills.apply_staging() IS 'Upsert step of skills-load: applies pg_temp.skill_staging in one statement batch.';

-- Copies of one content merged into one skill. On one node skill_content_hash_unique refuses a
-- copy; on Citus no unique constraint can back the content hash (it does not contain the
-- distribution column), so a plain INSERT or UPDATE may store content another skill has. The
-- embedder calls this on each batch's hashes before keying it, so a copy lives until the next
-- round at most (docs/citus.md). Per content the skill kept is one that is not waiting for a
-- key (the established one), else the oldest; it gains the copies' places, is served again if
-- a copy is, and takes over the copies' outcomes of this content (a run that served both keeps
-- one arm). The copies go, with their keys, history and edges, as a DELETE would take them.
-- It runs with the caller's rights (the workers' role may delete skills and move arms for it):
-- Citus refuses a transaction in which two users touch the same shards, which a SECURITY
-- DEFINER function called from the embedder's batch would be.
CREATE FUNCTION skills.merge_duplicate_skills(hashes text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dup_hashes text[];
    h text;
    r record;
    keep bigint;
    keep_version integer;
    keep_retired boolean;
    copies bigint[];
    places jsonb;
    any_live boolean;
    merged bigint := 0;
BEGIN
    IF hashes IS NOT NULL AND cardinality(hashes) = 0 THEN
        RETURN 0;
    END IF;
    -- Looked up without the lock first: copies are rare, and a load holds the lock for long.
    -- Two statements, so that the one for given hashes always probes the content_hash index.
    IF hashes IS NULL THEN
        SELECT array_agg(d.content_hash) INTO dup_hashes
        FROM (SELECT s.content_hash FROM skills.skill AS s
              GROUP BY s.content_hash HAVING count(*) > 1) AS d;
    ELSE
        SELECT array_agg(d.content_hash) INTO dup_hashes
        FROM (SELECT s.content_hash FROM skills.skill AS s
              WHERE s.content_hash = ANY (hashes)
              GROUP BY s.content_hash HAVING count(*) > 1) AS d;
    END IF;
    IF dup_hashes IS NULL THEN
        RETURN 0;
    END IF;
    -- The loader's lock: a load looks hashes up and inserts under it.
    PERFORM pg_advisory_xact_lock(hashtext('pg_skills.apply_staging'));
    FOREACH h IN ARRAY dup_hashes LOOP
        keep := NULL;
        copies := '{}';
        any_live := false;
        FOR r IN
            SELECT s.id, s.version, s.provenance, s.retired_at IS NULL AS live,
                   q.skill_id IS NOT NULL AS queued
            FROM skills.skill AS s LEFT JOIN skills.embed_queue AS q ON q.skill_id = s.id
            WHERE s.content_hash = h
            ORDER BY queued, s.id
        LOOP
            IF keep IS NULL THEN
                keep := r.id;
                keep_version := r.version;
                keep_retired := NOT r.live;
                places := r.provenance;
            ELSE
                copies := copies || r.id;
                places := skills.merge_provenance(places, r.provenance);
            END IF;
            any_live := any_live OR r.live;
        END LOOP;
        CONTINUE WHEN cardinality(copies) = 0;

        UPDATE skills.skill AS s
        SET provenance = places, retired_at = CASE WHEN any_live THEN NULL ELSE s.retired_at END
        WHERE s.id = keep AND (s.provenance IS DISTINCT FROM places OR (any_live AND keep_retired));
        DELETE FROM skills.event_arm AS a USING skills.event_arm AS b
        WHERE a.skill_id = ANY (copies) AND b.event_id = a.event_id AND b.skill_id = keep;
        UPDATE skills.event_arm AS a
        SET skill_id = keep, skill_version = keep_version
        WHERE a.skill_id = ANY (copies) AND a.content_hash = h;
        -- Arms of a copy's earlier content go with it (on one node the foreign key does that).
        DELETE FROM skills.event_arm AS a WHERE a.skill_id = ANY (copies);
        DELETE FROM skills.edge AS e WHERE e.from_skill = ANY (copies) OR e.to_skill = ANY (copies);
        DELETE FROM skills.skill AS s WHERE s.id = ANY (copies);
        merged := merged + cardinality(copies);
    END LOOP;
    RETURN merged;
END
$$;
COMMENT ON FUNCTION skills.merge_duplicate_skills(text[]) IS
    'Merges skills with the same content (only possible on Citus) into one: places, outcomes; NULL: every content. Returns the copies removed.';

-- ---------------------------------------------------------------------------------------------
-- Search: the FastAdapt request. The ranking, limits and score parts are computed by
-- skills.search_ranked (extension/src/search/); this adds each skill's name and category.
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION skills.search(
    query text,
    categories text[] DEFAULT NULL,
    k integer DEFAULT NULL,
    token_budget integer DEFAULT NULL,
    min_score double precision DEFAULT NULL,
    method text DEFAULT 'keyopt',
    bm25_weight double precision DEFAULT 1,
    semantic_weight double precision DEFAULT 1,
    complements integer DEFAULT 0)
RETURNS TABLE (id bigint, name text, category skills.category, score double precision,
               tokens integer, bm25 double precision, semantic double precision,
               graph double precision, beta double precision, dk_term double precision,
               event_term double precision, held_back double precision,
               coverage double precision, complement_of bigint, complement text,
               risk skills.risk_level, risk_rules text[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- PL/pgSQL, not SQL: Citus (docs/citus.md) plans a SQL function's parameters only in
    -- PL/pgSQL. The ranking is read first, then the few skills it names.
    RETURN QUERY
    WITH ranked AS MATERIALIZED (
        SELECT r.*, r.ordinality AS pos
        FROM skills.search_ranked(search.query, search.categories, search.k, search.token_budget,
                                  search.min_score, search.method, search.bm25_weight,
                                  search.semantic_weight, search.complements)
             WITH ORDINALITY AS r)
    SELECT r.id, s.name, s.category, r.score, r.tokens, r.bm25, r.semantic, r.graph, r.beta,
           r.dk_term, r.event_term, r.held_back, r.coverage, r.complement_of, r.complement, s.risk,
           ARRAY(SELECT DISTINCT f ->> 'rule' FROM jsonb_array_elements(s.risk_findings) AS f
                 WHERE (f ->> 'severity')::skills.risk_level > 'low' ORDER BY 1)
    FROM ranked AS r
    JOIN skills.skill AS s ON s.id = r.id
    ORDER BY r.pos;
END
$$;
COMMENT ON FUNCTION skills.search(text, text[], integer, integer, double precision, text, double precision, double precision, integer) IS
    'Ranked skills for a task, best first (ties by id); skills above pg_skills.max_risk, retired, or outside pg_skills.allowed_licenses are withheld (a NOTICE counts them). risk_rules: the rules found at medium or above. NULL = no constraint: categories (all pools), k (no count limit), token_budget (sum of tokens, greedy in rank order), min_score. Methods: bm25, semantic, hybrid, graph, skilltrace, keyopt (default). The part columns show where each score comes from; coverage: for a request of several sentences or list items (semantic, keyopt; pg_skills.cover_request_parts), what answering a part no skill above answers added. complements => n: up to n skills served right after each served skill because it needs them (complement_of names it; complement says why: co-success in recorded runs, dependency, workflow); they count against k and token_budget.';

-- ---------------------------------------------------------------------------------------------
-- Trust and lifecycle: findings brought up to date, hand-set categories, sources kept in sync.
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION skills.rescan_risk()
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    -- The trigger computes the findings again for a row whose rules version is not current.
    UPDATE skills.skill SET risk_rules_version = 0
    WHERE risk_rules_version <> skills.risk_rules_version();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION skills.rescan_risk() IS
    'Computes risk findings again for skills scanned by other rules than this build''s (skills.risk_rules_version()); returns how many.';

CREATE FUNCTION skills.set_category(skill_id bigint, category skills.category)
RETURNS skills.category
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    result skills.category;
BEGIN
    -- NULL releases the override: the classifier decides again.
    UPDATE skills.skill AS s
    SET category = coalesce(set_category.category,
                            skills.classify(s.name, s.description, s.instructions)),
        category_locked = set_category.category IS NOT NULL
    WHERE s.id = set_category.skill_id
    RETURNING s.category INTO result;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no skill with id %', skill_id
            USING ERRCODE = 'no_data_found', HINT = 'Find ids with skills.search or in skills.skill.';
    END IF;
    RETURN result;
END
$$;
COMMENT ON FUNCTION skills.set_category(bigint, skills.category) IS
    'Sets a skill''s category by hand and keeps it across new versions; NULL hands it back to the classifier.';

-- After skills.apply_staging() of a complete source tree (skills-load --tree): skills whose every
-- place under one of `prefixes` is gone from the staging table are retired (kept with their
-- history and outcomes, not served); places that are gone leave skills that are still found
-- elsewhere; retired skills whose content or place is staged again return.
CREATE FUNCTION skills.sync_source(prefixes text[], OUT retired bigint, OUT returned bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    back_ids bigint[];
BEGIN
    IF to_regclass('pg_temp.skill_staging') IS NULL THEN
        RAISE EXCEPTION 'no staging table pg_temp.skill_staging in this session'
            USING ERRCODE = 'undefined_table',
                  HINT = 'skills-load calls this after skills.apply_staging(), in the same transaction.';
    END IF;
    CREATE TEMP TABLE IF NOT EXISTS skill_sync_staged (l text PRIMARY KEY) ON COMMIT DROP;
    TRUNCATE pg_temp.skill_sync_staged;
    INSERT INTO pg_temp.skill_sync_staged
        SELECT DISTINCT l FROM pg_temp.skill_staging AS st, unnest(skills.provenance_locations(st.provenance)) AS l;

    -- The stored skills, read once (as in apply_staging: the writes below read work tables
    -- through subqueries, which Citus accepts when the skills are distributed).
    IF to_regclass('pg_temp.skill_sync_current') IS NOT NULL THEN DROP TABLE pg_temp.skill_sync_current; END IF;
    CREATE TEMP TABLE skill_sync_current ON COMMIT DROP AS
        SELECT s.id, s.content_hash, s.provenance, s.retired_at FROM skills.skill AS s;

    -- Retired skills whose content or a place is staged again return.
    WITH back AS (
        UPDATE pg_temp.skill_sync_current AS c SET retired_at = NULL
        WHERE c.retired_at IS NOT NULL
          AND (EXISTS (SELECT 1 FROM pg_temp.skill_staging AS st WHERE st.content_hash = c.content_hash)
               OR EXISTS (SELECT 1 FROM unnest(skills.provenance_locations(c.provenance)) AS l
                          JOIN pg_temp.skill_sync_staged AS g USING (l)))
        RETURNING c.id)
    SELECT coalesce(array_agg(id), '{}') INTO back_ids FROM back;
    UPDATE skills.skill AS s SET retired_at = NULL WHERE s.id = ANY (back_ids);
    GET DIAGNOSTICS returned = ROW_COUNT;

    -- Places under the prefixes that the load did not see, per active skill.
    CREATE TEMP TABLE IF NOT EXISTS skill_sync_gone (id bigint, locs text[], rest integer) ON COMMIT DROP;
    TRUNCATE pg_temp.skill_sync_gone;
    INSERT INTO pg_temp.skill_sync_gone
        SELECT c.id,
               array_agg(l) FILTER (WHERE under AND NOT staged),
               count(*) FILTER (WHERE NOT under OR staged)::integer
        FROM pg_temp.skill_sync_current AS c,
             LATERAL (SELECT l,
                             EXISTS (SELECT 1 FROM unnest(prefixes) AS p WHERE starts_with(l, p)) AS under,
                             EXISTS (SELECT 1 FROM pg_temp.skill_sync_staged AS g WHERE g.l = t.l) AS staged
                      FROM unnest(skills.provenance_locations(c.provenance)) AS t(l)) AS x
        WHERE c.retired_at IS NULL
        GROUP BY c.id
        HAVING count(*) FILTER (WHERE under AND NOT staged) > 0;

    -- Gone everywhere: retired, provenance kept (it says where the skill was).
    UPDATE skills.skill AS s SET retired_at = now()
    FROM (SELECT id FROM pg_temp.skill_sync_gone WHERE rest = 0) AS g WHERE s.id = g.id;
    GET DIAGNOSTICS retired = ROW_COUNT;
    -- Still found elsewhere: only the vanished places leave its provenance.
    UPDATE skills.skill AS s SET provenance = skills.drop_locations(s.provenance, g.locs)
    FROM (SELECT id, locs FROM pg_temp.skill_sync_gone WHERE rest > 0) AS g WHERE s.id = g.id;
END
$$;
COMMENT ON FUNCTION skills.sync_source(text[]) IS
    'Lifecycle step of skills-load --tree: retires skills whose files left the loaded trees, brings back returning ones.';

CREATE VIEW skills.retired_skill AS
    SELECT id, name, category, version, retired_at, provenance,
           (SELECT count(*) FROM skills.event_arm AS a WHERE a.skill_id = s.id) AS outcomes
    FROM skills.skill AS s WHERE retired_at IS NOT NULL;
COMMENT ON VIEW skills.retired_skill IS 'Skills retired because their files left every source (kept, not served).';

-- Per source: the repository (or local root) part of each provenance location.
CREATE VIEW skills.source_stats AS
    WITH places AS (
        SELECT DISTINCT s.id, split_part(l, ':', 1) || CASE WHEN l ~ '^[a-z+]+://' THEN ':' || split_part(l, ':', 2) ELSE '' END AS source
        FROM skills.skill AS s, unnest(skills.provenance_locations(s.provenance)) AS l
    )
    SELECT p.source,
           count(*) AS skills,
           count(*) FILTER (WHERE s.retired_at IS NULL) AS active,
           count(*) FILTER (WHERE s.retired_at IS NOT NULL) AS retired,
           sum(s.version) AS versions,
           count(*) FILTER (WHERE s.risk >= 'medium') AS flagged,
           count(*) FILTER (WHERE s.risk >= 'high') AS flagged_high,
           count(*) FILTER (WHERE NOT EXISTS (
               SELECT 1 FROM jsonb_array_elements(s.provenance) AS e
               WHERE skills.license_family(e ->> 'license') <> 'unknown')) AS unknown_license,
           count(*) FILTER (WHERE s.category_locked) AS category_overrides
    FROM places AS p JOIN skills.skill AS s ON s.id = p.id
    GROUP BY p.source;
COMMENT ON VIEW skills.source_stats IS
    'Per source (repository or local tree): skills, active, retired, versions, flagged at medium+/high, unknown licences, category overrides.';

CREATE VIEW skills.flagged_skill AS
    SELECT s.id, s.name, s.risk, f ->> 'rule' AS rule, f ->> 'severity' AS severity,
           (f -> 'lines' ->> 0)::integer AS first_line, f ->> 'excerpt' AS excerpt, f ->> 'mitigation' AS mitigation
    FROM skills.skill AS s, jsonb_array_elements(s.risk_findings) AS f;
COMMENT ON VIEW skills.flagged_skill IS 'One row per risk finding of every skill.';
