//! The derived columns of skills a load is about to insert, computed ahead on several threads.
//!
//! The row trigger on `skills.skill` derives each new version's prompt token count, risk findings
//! and category from its text (`skills.token_count`, `skills.risk_scan`, `skills.classify`):
//! most of a bulk load's time, one row after another on the loading backend's one core.
//! `skills.apply_staging` hands each chunk of rows it is about to insert to
//! `skills.prepare_skill_writes`, which computes those values for the whole chunk on the
//! encoder's threads (within `pg_skills.encoder_threads` and the server's encoder slots) and keeps
//! them in this backend's memory until the transaction ends. The three functions answer from
//! there when asked about exactly the same text, and compute as before otherwise.
//!
//! A remembered value is the function's own result on the same three strings (compared in full,
//! not by hash), so no input can make a row get another text's values; the functions stay
//! immutable.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::prelude::*;
use pgrx::{register_xact_callback, PgXactCallbackEvent};

use pg_skills_corpus::{category, risk, skill};

use crate::embedding;

/// Documents larger than this are left to the trigger (a worker thread cannot be cancelled,
/// and the trigger's own computation checks for cancellation as it goes).
const MAX_PREPARED_DOCUMENT_BYTES: usize = 1 << 20;
/// Text computed per parallel step; the backend checks for cancellation between steps (about
/// 0.1 s of work per thread).
const STEP_BYTES: usize = 4 << 20;
/// Text remembered at once: a call with more leaves the rest to the trigger.
const MAX_PREPARED_BYTES: usize = 64 << 20;

/// One document's fields and what the three functions return for them.
struct Prepared {
    fields: [String; 3],
    token_count: i32,
    risk: serde_json::Value,
    category: &'static str,
}

thread_local! {
    /// By [`fingerprint`]; a fingerprint two documents share keeps the later one (the other
    /// is computed by the trigger: lookups compare the fields).
    static PREPARED: RefCell<HashMap<u64, Prepared>> = RefCell::new(HashMap::new());
    /// Whether this transaction has registered the callbacks that forget [`PREPARED`].
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
    let tokens = skill::token_count(name, description, instructions);
    let report = risk::scan(name, description, instructions);
    let category = category::classify(name, description, instructions).as_str();
    Prepared {
        token_count: i32::try_from(tokens).unwrap_or(i32::MAX),
        risk: risk_json(&report),
        category,
        fields,
    }
}

/// `get` of the remembered values for exactly these fields, if any.
fn lookup<T>(fields: [&str; 3], get: impl FnOnce(&Prepared) -> T) -> Option<T> {
    PREPARED.with(|memo| {
        let memo = memo.borrow();
        if memo.is_empty() {
            return None;
        }
        memo.get(&fingerprint(fields))
            .filter(|p| p.fields.iter().zip(fields).all(|(a, b)| a == b))
            .map(get)
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

fn clear() {
    // Also runs at transaction end, where a panic would take the server down: never borrow twice.
    let _ = PREPARED.try_with(|memo| {
        if let Ok(mut memo) = memo.try_borrow_mut() {
            *memo = HashMap::new();
        }
    });
}

/// At the end of the transaction that remembered values.
fn forget() {
    clear();
    let _ = FORGET_REGISTERED.try_with(|r| r.set(false));
}

/// Computes the token count, risk findings and category of each document (the i-th name,
/// description and instructions) on the encoder's threads and remembers them for this
/// transaction's row triggers, in place of what an earlier call remembered. Returns how many
/// documents it prepared: documents over 1 MB, NULLs and text past 64 MB in all are left to the
/// trigger. Called by `skills.apply_staging` before each chunk it inserts.
#[pg_extern(volatile, parallel_unsafe)]
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
    clear();
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
    if documents.is_empty() {
        return 0;
    }

    let mut prepared: Vec<Prepared> = Vec::with_capacity(documents.len());
    let mut rest = documents.into_iter().peekable();
    embedding::with_encoder_threads(|pool| {
        while rest.peek().is_some() {
            // One step: documents up to STEP_BYTES of text (at least one).
            let mut step = Vec::new();
            let mut bytes = 0;
            while let Some(next) = rest.peek() {
                let size: usize = next.iter().map(String::len).sum();
                if !step.is_empty() && bytes + size > STEP_BYTES {
                    break;
                }
                bytes += size;
                step.extend(rest.next());
            }
            let compute_step = move || {
                use rayon::prelude::*;
                step.into_par_iter().map(compute).collect::<Vec<_>>()
            };
            prepared.extend(match pool {
                Some(pool) => pool.install(compute_step),
                None => compute_step(),
            });
            pg_sys::check_for_interrupts!();
        }
    });

    let count = prepared.len() as i64;
    PREPARED.with(|memo| {
        let mut memo = memo.borrow_mut();
        for p in prepared {
            let [n, d, i] = &p.fields;
            memo.insert(fingerprint([n, d, i]), p);
        }
    });
    if !FORGET_REGISTERED.with(Cell::get) {
        FORGET_REGISTERED.with(|r| r.set(true));
        register_xact_callback(PgXactCallbackEvent::Commit, forget);
        register_xact_callback(PgXactCallbackEvent::Abort, forget);
    }
    count
}
