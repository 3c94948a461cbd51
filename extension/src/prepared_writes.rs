//! The derived columns of skills a load is about to insert, computed ahead on other threads.
//!
//! The row trigger on `skills.skill` derives each new version's content hash, prompt token
//! count, risk findings and category from its text (`skills.skill_derived_columns`, and the
//! same values one at a time from `skills.content_hash`, `skills.token_count`,
//! `skills.risk_scan`, `skills.classify`): most of a bulk load's time, one row after another on
//! the loading backend's one core. `skills.apply_staging` hands each chunk of rows it is about to
//! insert to `skills.prepare_skill_writes` one chunk ahead: the chunk is computed on the
//! encoder's threads while the backend inserts the chunk before it. The functions then answer
//! from there when asked about exactly the same text (waiting for the chunk's computation when
//! it is still running), and compute as before otherwise. What was computed is forgotten when
//! the transaction ends.
//!
//! A remembered value is the function's own result on the same three strings (compared in full,
//! not by hash), so no input can make a row get another text's values; the functions stay
//! immutable.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pgrx::prelude::*;
use pgrx::{register_xact_callback, PgXactCallbackEvent};

use pg_skills_corpus::{category, risk, skill};

use crate::embedding;

/// Documents larger than this are left to the trigger (a worker thread cannot be cancelled,
/// and the trigger's own computation checks for cancellation as it goes).
const MAX_PREPARED_DOCUMENT_BYTES: usize = 1 << 20;
/// Text one call computes: a call with more leaves the rest to the trigger.
const MAX_PREPARED_BYTES: usize = 64 << 20;
/// Calls whose results are kept: the chunk being inserted and the one computed meanwhile.
const KEPT_BATCHES: usize = 2;
/// How often a backend waiting for a batch checks for cancellation.
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// One document's fields and what the functions return for them.
struct Prepared {
    fields: [String; 3],
    content_hash: String,
    token_count: i32,
    risk: serde_json::Value,
    category: &'static str,
}

/// What the row trigger derives from one document ([`derived`]).
pub(crate) struct Derived {
    pub content_hash: String,
    pub token_count: i32,
    /// As `skills.risk_scan` returns it.
    pub risk: serde_json::Value,
    pub category: &'static str,
}

type PreparedMap = HashMap<u64, Prepared>;

/// Where a batch's computation leaves its result: None inside while it runs; then the
/// documents by fingerprint, or None when the computation panicked (the trigger computes them).
#[derive(Default)]
struct Slot {
    result: Mutex<Option<Option<PreparedMap>>>,
    done: Condvar,
}

/// One call's documents.
struct Batch {
    /// Their fingerprints, known at once: a lookup knows which batch to wait for.
    keys: HashSet<u64>,
    slot: Arc<Slot>,
    /// The result, once taken from the slot.
    taken: Option<Option<PreparedMap>>,
}

impl Batch {
    /// The batch's documents, waiting for the computation with cancellation checks.
    fn documents(&mut self) -> Option<&PreparedMap> {
        while self.taken.is_none() {
            {
                let result = self.slot.result.lock().unwrap_or_else(|e| e.into_inner());
                let (mut result, _) = self
                    .slot
                    .done
                    .wait_timeout_while(result, WAIT_SLICE, |r| r.is_none())
                    .unwrap_or_else(|e| e.into_inner());
                self.taken = result.take();
            }
            if self.taken.is_none() {
                pg_sys::check_for_interrupts!();
            }
        }
        self.taken.as_ref().and_then(Option::as_ref)
    }
}

/// Computations of this process not finished yet, including those of transactions that ended
/// (they finish into slots nobody reads). A call waits while [`KEPT_BATCHES`] are running, so
/// that calls in a loop cannot pile up work and memory.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The last [`KEPT_BATCHES`] calls' batches, oldest first.
    static BATCHES: RefCell<VecDeque<Batch>> = const { RefCell::new(VecDeque::new()) };
    /// Whether this transaction has registered the callbacks that forget [`BATCHES`].
    static FORGET_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

fn fingerprint(fields: [&str; 3]) -> u64 {
    pg_skills_kernels::bm25index::document::fingerprint(fields)
}

/// What `skills.risk_scan` returns for a report.
pub(crate) fn risk_json(report: &risk::Report) -> serde_json::Value {
    serde_json::json!({
        "level": report.level.as_str(),
        "findings": report.findings_json(),
        "rules_version": risk::RULES_VERSION,
    })
}

fn compute(fields: [String; 3]) -> Prepared {
    let [name, description, instructions] = &fields;
    let content_hash = skill::content_hash(name, description, instructions);
    let tokens = skill::token_count(name, description, instructions);
    let report = risk::scan(name, description, instructions);
    let category = category::classify(name, description, instructions).as_str();
    Prepared {
        content_hash,
        token_count: i32::try_from(tokens).unwrap_or(i32::MAX),
        risk: risk_json(&report),
        category,
        fields,
    }
}

/// `get` of the remembered values for exactly these fields, if any.
fn lookup<T>(fields: [&str; 3], get: impl FnOnce(&Prepared) -> T) -> Option<T> {
    BATCHES.with(|batches| {
        let mut batches = batches.borrow_mut();
        if batches.is_empty() {
            return None;
        }
        let key = fingerprint(fields);
        let batch = batches.iter_mut().rev().find(|b| b.keys.contains(&key))?;
        batch
            .documents()?
            .get(&key)
            .filter(|p| p.fields.iter().zip(fields).all(|(a, b)| a == b))
            .map(get)
    })
}

/// Everything remembered for these fields, with one lookup.
pub(crate) fn derived(name: &str, description: &str, instructions: &str) -> Option<Derived> {
    lookup([name, description, instructions], |p| Derived {
        content_hash: p.content_hash.clone(),
        token_count: p.token_count,
        risk: p.risk.clone(),
        category: p.category,
    })
}

pub(crate) fn token_count(name: &str, description: &str, instructions: &str) -> Option<i32> {
    lookup([name, description, instructions], |p| p.token_count)
}

pub(crate) fn risk(name: &str, description: &str, instructions: &str) -> Option<serde_json::Value> {
    lookup([name, description, instructions], |p| p.risk.clone())
}

pub(crate) fn category(name: &str, description: &str, instructions: &str) -> Option<&'static str> {
    lookup([name, description, instructions], |p| p.category)
}

/// At the end of the transaction that prepared documents. Also runs where a panic would take
/// the server down: never borrows twice. A computation still running finishes into a slot
/// nobody reads.
fn forget() {
    let _ = BATCHES.try_with(|batches| {
        if let Ok(mut batches) = batches.try_borrow_mut() {
            batches.clear();
        }
    });
    let _ = FORGET_REGISTERED.try_with(|r| r.set(false));
}

/// Starts computing the token count, risk findings and category of each document (the i-th
/// name, description and instructions) on the encoder's threads, for this transaction's row
/// triggers; the results of the two latest calls are kept. Returns how many documents it
/// takes: documents over 1 MB, NULLs and text past 64 MB in all are left to the trigger.
/// `skills.apply_staging` calls it one chunk ahead of its inserts. Takes the loader's lock
/// (one load at a time), so the server computes for one transaction at a time, and waits while
/// two earlier computations of this process are running.
#[pg_extern(volatile, parallel_unsafe, strict)]
fn prepare_skill_writes(
    names: Vec<Option<String>>,
    descriptions: Vec<Option<String>>,
    instructions: Vec<Option<String>>,
) -> i64 {
    if names.len() != descriptions.len() || names.len() != instructions.len() {
        crate::errors::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "names, descriptions and instructions must have the same length".to_string(),
            Some("Pass the i-th skill's three fields at position i of each array."),
        );
    }
    crate::spi::run(
        "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_skills.apply_staging'))",
        &[],
    );
    let mut total = 0usize;
    let mut documents: Vec<[String; 3]> = Vec::new();
    for ((n, d), i) in names.into_iter().zip(descriptions).zip(instructions) {
        let (Some(n), Some(d), Some(i)) = (n, d, i) else {
            continue;
        };
        let bytes = n.len() + d.len() + i.len();
        if bytes > MAX_PREPARED_DOCUMENT_BYTES || total + bytes > MAX_PREPARED_BYTES {
            continue;
        }
        total += bytes;
        documents.push([n, d, i]);
    }
    let count = documents.len() as i64;
    if documents.is_empty() {
        return 0;
    }
    let keyed: Vec<(u64, [String; 3])> = documents
        .into_iter()
        .map(|doc| (fingerprint([&doc[0], &doc[1], &doc[2]]), doc))
        .collect();
    let keys = keyed.iter().map(|(key, _)| *key).collect();
    while RUNNING.load(Ordering::Acquire) >= KEPT_BATCHES {
        std::thread::sleep(WAIT_SLICE);
        pg_sys::check_for_interrupts!();
    }
    RUNNING.fetch_add(1, Ordering::AcqRel);
    let slot = Arc::new(Slot::default());
    let job = {
        let slot = slot.clone();
        move || {
            use rayon::prelude::*;
            // A panic here must not reach rayon, which would abort the server process.
            let result = catch_unwind(AssertUnwindSafe(|| {
                keyed
                    .into_par_iter()
                    .map(|(key, doc)| (key, compute(doc)))
                    .collect::<PreparedMap>()
            }))
            .ok();
            *slot.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            slot.done.notify_all();
            RUNNING.fetch_sub(1, Ordering::AcqRel);
        }
    };
    // The backend inserts the chunk before this one meanwhile, and its inserts are the load's
    // longest serial path: leave it a core of its own.
    let configured = embedding::configured_encoder_threads();
    let cores = embedding::slots::machine_cores();
    let threads = configured.min(cores.saturating_sub(1)).max(1);
    match embedding::encoder_pool(threads, configured) {
        Some(pool) => pool.spawn(job),
        None => rayon::spawn(job),
    }
    BATCHES.with(|batches| {
        let mut batches = batches.borrow_mut();
        while batches.len() >= KEPT_BATCHES {
            batches.pop_front();
        }
        batches.push_back(Batch {
            keys,
            slot,
            taken: None,
        });
    });
    if !FORGET_REGISTERED.with(Cell::get) {
        FORGET_REGISTERED.with(|r| r.set(true));
        register_xact_callback(PgXactCallbackEvent::Commit, forget);
        register_xact_callback(PgXactCallbackEvent::Abort, forget);
    }
    count
}
