-- Skill keys from the sentence encoder: the compressor table, the keys, the embedding queue the
-- skill trigger fills, the embedder's progress, and the SQL wrappers over the Rust functions
-- (extension/src/embedding/).

-- Trained compressors (a residual MLP over the encoder's embeddings; docs/architecture.md). One is active; none active = raw keys.
CREATE TABLE skills.compressor (
    version      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    weights      bytea NOT NULL,
    sha256       text NOT NULL CONSTRAINT compressor_sha256_is_hex CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    hidden       integer NOT NULL CONSTRAINT compressor_hidden_positive CHECK (hidden > 0),
    training     jsonb NOT NULL DEFAULT '{}',
    active       boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX compressor_one_active ON skills.compressor (active) WHERE active;
COMMENT ON TABLE skills.compressor IS
    'Residual compressors (384 -> hidden -> 512, safetensors weights, sha256 checked on load); the active one makes skill keys.';

-- The key of each skill: its embedding e(doc) (384-d, kept so a new compressor needs no
-- encoder run) and k0 = normalize(pad512(e) + MLP(e)).
CREATE TABLE skills.skill_key (
    skill_id            bigint PRIMARY KEY REFERENCES skills.skill (id) ON DELETE CASCADE,
    content_hash        text NOT NULL,
    embedding           real[] NOT NULL
                        CONSTRAINT skill_key_embedding_384 CHECK (cardinality(embedding) = 384),
    k0                  skills.key NOT NULL,
    compressor_version  integer,
    embedded_at         timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE skills.skill_key IS
    'Skill keys: e(doc) of the content with this hash, and k0 (compressor_version NULL = raw padded key). Written by the embedder.';

-- Skills whose content has no key yet. A row is removed in the transaction that writes the key
-- (so a crash loses nothing and repeats nothing); a text that cannot be embedded keeps its row
-- with the reason and is not retried until its content changes.
CREATE TABLE skills.embed_queue (
    skill_id       bigint PRIMARY KEY REFERENCES skills.skill (id) ON DELETE CASCADE,
    content_hash   text NOT NULL,
    enqueued_at    timestamptz NOT NULL DEFAULT now(),
    failed_reason  text,
    failed_at      timestamptz
);
CREATE INDEX embed_queue_pending ON skills.embed_queue (enqueued_at, skill_id) WHERE failed_reason IS NULL;

-- One row: what the embedder (worker or skills.embed_pending) has done.
CREATE TABLE skills.embedder_progress (
    singleton        boolean PRIMARY KEY DEFAULT true CONSTRAINT embedder_progress_one_row CHECK (singleton),
    embedded_total   bigint NOT NULL DEFAULT 0,
    failed_total     bigint NOT NULL DEFAULT 0,
    rate             double precision,
    last_batch_at    timestamptz,
    last_batch_size  integer,
    last_error       text,
    last_error_at    timestamptz
);
INSERT INTO skills.embedder_progress DEFAULT VALUES;

CREATE FUNCTION skills.enqueue_embedding()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.content_hash IS DISTINCT FROM OLD.content_hash THEN
        INSERT INTO skills.embed_queue AS q (skill_id, content_hash)
        VALUES (NEW.id, NEW.content_hash)
        ON CONFLICT (skill_id) DO UPDATE
            -- EXCLUDED's enqueued_at is its default now(): Citus refuses non-immutable
            -- functions in DO UPDATE SET (the trigger runs on the shard's node there).
            SET content_hash = EXCLUDED.content_hash, enqueued_at = EXCLUDED.enqueued_at,
                failed_reason = NULL, failed_at = NULL;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER skill_enqueue_embedding
    AFTER INSERT OR UPDATE ON skills.skill
    FOR EACH ROW EXECUTE FUNCTION skills.enqueue_embedding();

CREATE VIEW skills.embedder_status AS
SELECT
    (SELECT count(*) FROM skills.embed_queue WHERE failed_reason IS NULL) AS queued,
    (SELECT count(*) FROM skills.embed_queue WHERE failed_reason IS NOT NULL) AS failed,
    (SELECT count(*) FROM skills.skill_key AS k JOIN skills.skill AS s
         ON s.id = k.skill_id AND s.content_hash = k.content_hash
     WHERE k.compressor_version IS NOT DISTINCT FROM
           (SELECT c.version FROM skills.compressor AS c WHERE c.active)) AS done,
    p.embedded_total,
    p.failed_total,
    p.rate AS rate_per_second,
    p.last_batch_at,
    p.last_batch_size,
    p.last_error,
    p.last_error_at,
    (SELECT a.pid FROM pg_catalog.pg_stat_activity AS a
     WHERE a.backend_type = 'pg_skills embedder' LIMIT 1) AS worker_pid
FROM skills.embedder_progress AS p;
COMMENT ON VIEW skills.embedder_status IS
    'Embedder progress: skills queued, failed (with a reason in skills.embed_queue), keyed with the active compressor; rate in documents per second.';

CREATE FUNCTION skills.query_key(query text) RETURNS skills.key
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN skills.key(skills.query_key_values(query));
COMMENT ON FUNCTION skills.query_key(text) IS
    'q = normalize(pad512(e(query))): the key a search compares skill keys with (queries never go through the compressor).';

-- Keys from stored embeddings with the active compressor: after a new compressor is activated,
-- no encoder run is needed.
CREATE FUNCTION skills.recompress_keys() RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    active integer := (SELECT c.version FROM skills.compressor AS c WHERE c.active);
    n bigint;
BEGIN
    UPDATE skills.skill_key AS k
    SET k0 = skills.key(skills.compress(k.embedding)), compressor_version = active
    WHERE k.compressor_version IS DISTINCT FROM active;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION skills.recompress_keys() IS
    'Rewrites every skill key made with another compressor than the active one; returns how many.';

-- Pairs for training: a query returning (query text, skill_id bigint).
CREATE FUNCTION skills.train_compressor(
    pairs text DEFAULT NULL,
    hidden integer DEFAULT 256,
    epochs integer DEFAULT 30,
    seed bigint DEFAULT 42,
    activate boolean DEFAULT true)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    trained record;
    new_version integer;
    -- The runs this training can see (taken before it reads them: a run recorded meanwhile
    -- counts towards the next retraining too).
    through_event bigint := (SELECT max(e.id) FROM skills.event AS e);
BEGIN
    IF hidden IS NULL OR epochs IS NULL OR seed IS NULL OR activate IS NULL THEN
        RAISE EXCEPTION 'skills.train_compressor: hidden, epochs, seed and activate must not be NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Leave an argument out for its default; pairs may be NULL (the recorded runs).';
    END IF;
    -- Without a pairs query: the recorded runs, each task with the skills that passed in it
    -- (arms of the skill's current content only; a run known only as a set says nothing about
    -- which of its skills answered the task).
    SELECT * INTO trained FROM skills.train_compressor_weights(
        coalesce(pairs, 'SELECT e.task, a.skill_id FROM skills.event AS e '
                        'JOIN skills.event_arm AS a ON a.event_id = e.id '
                        'JOIN skills.skill AS s ON s.id = a.skill_id AND s.content_hash = a.content_hash '
                        'WHERE a.passed AND NOT a.stale'),
        hidden, epochs, seed);
    IF activate THEN
        UPDATE skills.compressor SET active = false WHERE active;
    END IF;
    INSERT INTO skills.compressor (weights, sha256, hidden, training, active)
    VALUES (trained.weights, trained.sha256, hidden,
            trained.report || CASE WHEN pairs IS NULL
                THEN jsonb_build_object('source', 'runs', 'through_event', through_event)
                ELSE jsonb_build_object('source', 'pairs query') END,
            activate)
    RETURNING version INTO new_version;
    IF activate THEN
        PERFORM skills.recompress_keys();
    END IF;
    RETURN new_version;
END
$$;
COMMENT ON FUNCTION skills.train_compressor(text, integer, integer, bigint, boolean) IS
    'Trains a compressor on (query text, skill_id) pairs from the given query (NULL: the recorded runs, each task with the skills that passed in it; training records source "runs" and the last event it could see as through_event), stores it and (by default) activates it and rewrites every key. Returns its version.';

SELECT pg_catalog.pg_extension_config_dump('skills.compressor', '');
SELECT pg_catalog.pg_extension_config_dump('skills.skill_key', '');
SELECT pg_catalog.pg_extension_config_dump('skills.compressor_version_seq', '');
-- Not dumped: skills.embed_queue (restoring skills.skill fires the trigger, which queues every
-- skill again; the restored keys serve searches until the worker has re-keyed them) and
-- skills.embedder_progress (counters of this server's embedder, not data).
