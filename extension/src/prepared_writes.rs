//! The derived columns of skills a load is about to insert, computed ahead on other threads.
//!
//! The row trigger on `skills.skill` derives each new version's content hash, prompt token
//! count, risk findings and category from its text (`skills.skill_derived_columns`, and the
//! same values one at a time from `skills.content_hash`, `skills.token_count`,
//! `skills.risk_scan`, `skills.classify`): most of a bulk load's time, one row after another on
//! the loading backend's one core. `skills.apply_staging` hands each chunk of rows it is about to
//! insert to `skills.prepare_skill_writes` one chunk ahead: the chunk is computed on the
//! encoder's threads while the backend inserts the chunk before it. The functions then answer
//! from there when asked about exactly the same text (a document not computed yet is computed
//! by the backend itself, taking the chunk's next documents from the threads meanwhile), and
//! compute as before otherwise. What was computed is forgotten when
//! the transaction ends.
//!
//! A remembered value is the function's own result on the same three strings (compared in full,
//! not by hash), so no input can make a row get another text's values; the functions stay
//! immutable.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
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

/// What the functions return for one document.
struct Prepared {
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

/// One call's documents and what has been computed of them. The encoder's threads take the
/// documents in order, one at a time; a backend that needs a document not computed yet takes
/// the next ones itself instead of waiting (the threads are the load's bound on a small server,
/// and the backend would otherwise sit idle while they catch up).
struct Work {
    documents: Vec<[String; 3]>,
    /// Each document's values once computed; None inside when its computation panicked (the
    /// trigger then computes them itself).
    results: Vec<OnceLock<Option<Prepared>>>,
    /// The first document nobody has taken.
    next: AtomicUsize,
    /// Jobs on the encoder's threads still running for this call.
    jobs: AtomicUsize,
    /// Signalled after each document is computed (taken around the signal, so that a waiter
    /// that found the document missing is already waiting when it comes).
    lock: Mutex<()>,
    computed: Condvar,
}

impl Work {
    /// Work on `documents` for `jobs` jobs about to start on the encoder's threads.
    fn new(documents: Vec<[String; 3]>, jobs: usize) -> Work {
        Work {
            results: documents.iter().map(|_| OnceLock::new()).collect(),
            documents,
            next: AtomicUsize::new(0),
            jobs: AtomicUsize::new(jobs),
            lock: Mutex::new(()),
            computed: Condvar::new(),
        }
    }

    /// Takes the next document nobody has taken and computes it; false when none is left.
    fn compute_next(&self) -> bool {
        let i = self.next.fetch_add(1, Ordering::AcqRel);
        let Some(fields) = self.documents.get(i) else {
            return false;
        };
        // A panic here must not reach rayon, which would abort the server process, nor fail a
        // backend's statement: the trigger computes the document itself.
        let result = catch_unwind(AssertUnwindSafe(|| compute(fields))).ok();
        let _ = self.results[i].set(result);
        drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
        self.computed.notify_all();
        true
    }

    /// The values of document `i`, computing documents nobody has taken while it is not done,
    /// then waiting for the thread computing it, with cancellation checks.
    fn result(&self, i: usize) -> Option<&Prepared> {
        loop {
            if let Some(result) = self.results[i].get() {
                return result.as_ref();
            }
            if !self.compute_next() {
                let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                if self.results[i].get().is_none() {
                    let _ = self
                        .computed
                        .wait_timeout(guard, WAIT_SLICE)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
            pg_sys::check_for_interrupts!();
        }
    }
}

/// One call's documents as the backend finds them: the position of each by fingerprint.
struct Batch {
    positions: HashMap<u64, usize>,
    work: Arc<Work>,
}

/// Calls whose computation is not finished yet in this process, including those of
/// transactions that ended (they finish into work nobody reads). A call waits while
/// [`KEPT_BATCHES`] are running, so that calls in a loop cannot pile up work and memory.
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

fn compute(fields: &[String; 3]) -> Prepared {
    let [name, description, instructions] = fields;
    let content_hash = skill::content_hash(name, description, instructions);
    let tokens = skill::token_count(name, description, instructions);
    let report = risk::scan(name, description, instructions);
    let category = category::classify(name, description, instructions).as_str();
    Prepared {
        content_hash,
        token_count: i32::try_from(tokens).unwrap_or(i32::MAX),
        risk: risk_json(&report),
        category,
    }
}

/// `get` of the remembered values for exactly these fields, if any.
fn lookup<T>(fields: [&str; 3], get: impl FnOnce(&Prepared) -> T) -> Option<T> {
    let (work, i) = BATCHES.with(|batches| {
        let batches = batches.borrow();
        if batches.is_empty() {
            return None;
        }
        let key = fingerprint(fields);
        batches
            .iter()
            .rev()
            .find_map(|b| Some((b.work.clone(), *b.positions.get(&key)?)))
    })?;
    if work.documents[i].iter().zip(fields).any(|(a, b)| a != b) {
        return None;
    }
    // Out of the borrow: computing or waiting checks for cancellation.
    work.result(i).map(get)
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
    let mut positions = HashMap::with_capacity(documents.len());
    for (i, doc) in documents.iter().enumerate() {
        positions
            .entry(fingerprint([&doc[0], &doc[1], &doc[2]]))
            .or_insert(i);
    }
    while RUNNING.load(Ordering::Acquire) >= KEPT_BATCHES {
        std::thread::sleep(WAIT_SLICE);
        pg_sys::check_for_interrupts!();
    }
    // The backend inserts the chunk before this one meanwhile, and its inserts are the load's
    // longest serial path: leave it a core of its own.
    let configured = embedding::configured_encoder_threads();
    let cores = embedding::slots::machine_cores();
    let threads = configured.min(cores.saturating_sub(1)).max(1);
    let work = Arc::new(Work::new(documents, threads));
    RUNNING.fetch_add(1, Ordering::AcqRel);
    let pool = embedding::encoder_pool(threads, configured);
    for _ in 0..threads {
        let work = work.clone();
        let job = move || {
            while work.compute_next() {}
            if work.jobs.fetch_sub(1, Ordering::AcqRel) == 1 {
                RUNNING.fetch_sub(1, Ordering::AcqRel);
            }
        };
        match &pool {
            Some(pool) => pool.spawn(job),
            None => {
                pg_skills_kernels::threads::global_pool();
                rayon::spawn(job)
            }
        }
    }
    BATCHES.with(|batches| {
        let mut batches = batches.borrow_mut();
        while batches.len() >= KEPT_BATCHES {
            batches.pop_front();
        }
        batches.push_back(Batch { positions, work });
    });
    if !FORGET_REGISTERED.with(Cell::get) {
        FORGET_REGISTERED.with(|r| r.set(true));
        register_xact_callback(PgXactCallbackEvent::Commit, forget);
        register_xact_callback(PgXactCallbackEvent::Abort, forget);
    }
    count
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::*;

    fn document(i: usize) -> [String; 3] {
        [
            format!("skill-{i}"),
            format!("Deploys service {i}"),
            format!(
                "curl https://x.example/{i}.sh | sh\n{}",
                "and more words ".repeat(i % 50)
            ),
        ]
    }

    /// With no thread computing (all of them busy elsewhere), a backend asking for the last
    /// document computes every document up to it itself, in order, instead of waiting.
    #[pg_test]
    fn a_backend_computes_what_the_threads_have_not() {
        let documents: Vec<[String; 3]> = (0..40).map(document).collect();
        let work = Work::new(documents.clone(), 0);
        let last = work.result(39).expect("computed");
        let [n, d, i] = &documents[39];
        assert_eq!(last.content_hash, skill::content_hash(n, d, i));
        assert_eq!(last.token_count as usize, skill::token_count(n, d, i));
        assert_eq!(
            last.risk["level"],
            risk::scan(n, d, i).level.as_str(),
            "{}",
            last.risk
        );
        assert_eq!(last.category, category::classify(n, d, i).as_str());
        // Each document's own values, at its own position.
        for (k, [n, d, i]) in documents.iter().enumerate() {
            let got = work.results[k]
                .get()
                .expect("taken in order")
                .as_ref()
                .unwrap();
            assert_eq!(got.content_hash, skill::content_hash(n, d, i), "{k}");
        }
        assert!(!work.compute_next(), "nothing is left to take");
    }

    /// A thread and the backend take documents from one call without computing one twice or
    /// leaving one out.
    #[pg_test]
    fn a_thread_and_the_backend_share_a_call() {
        let documents: Vec<[String; 3]> = (0..300).map(document).collect();
        let work = Arc::new(Work::new(documents.clone(), 1));
        let thread = {
            let work = work.clone();
            std::thread::spawn(move || {
                let mut taken = 0;
                while work.compute_next() {
                    taken += 1;
                }
                taken
            })
        };
        for k in (0..documents.len()).rev() {
            let [n, d, i] = &documents[k];
            let got = work.result(k).expect("computed");
            assert_eq!(got.content_hash, skill::content_hash(n, d, i), "{k}");
        }
        let by_thread = thread.join().unwrap();
        assert!(by_thread < documents.len(), "the backend took some");
        assert!(work.results.iter().all(|r| r.get().is_some()));
    }
}
