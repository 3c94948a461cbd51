//! The embedder background worker (registered when pg_skills is in shared_preload_libraries).
//!
//! It connects to `pg_skills.embedder_database` and drains `skills.embed_queue` one batch per
//! transaction (see `queue`), straight on while there is work; when idle it waits, doubling the
//! wait from 100 ms up to `pg_skills.embedder_naptime`. A model that cannot be loaded, or a pass
//! that fails with an ERROR (rolled back), is reported in `skills.embedder_status.last_error`
//! and retried after a full naptime. The queue is
//! a table, so a restart (or a crash) resumes where the last committed batch ended.

use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;

use crate::guc;

pub const WORKER_TYPE: &str = "pg_skills embedder";
const FIRST_IDLE_WAIT: Duration = Duration::from_millis(100);

pub fn register() {
    crate::bgworker::register(WORKER_TYPE, "pg_skills_embedder_main");
}

/// What one pass of the worker's loop found.
enum Pass {
    Worked,
    Idle,
    Failed,
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_skills_embedder_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    super::IS_EMBEDDER_WORKER.store(true, std::sync::atomic::Ordering::Relaxed);
    let database = guc::embedder_database();
    crate::bgworker::connect(&database);
    log!("{WORKER_TYPE}: started in database \"{database}\"");
    let mut wait = Duration::ZERO;
    while BackgroundWorker::wait_latch(Some(wait)) {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        // Resized here too, so a reload takes effect while the queue is empty.
        super::encoder_pool(super::configured_encoder_threads(), 0);
        let naptime = Duration::from_millis(guc::EMBEDDER_NAPTIME_MS.get() as u64);
        wait = match BackgroundWorker::transaction(|| {
            // An ERROR in a pass (the server out of disk while writing keys, say) is rolled back
            // and recorded, and the worker waits a naptime, keeping its model loaded: ending
            // the worker would load it again after a restart 10 s later.
            let mut pass = Pass::Failed;
            if let Err(e) = crate::errors::in_subtransaction(|| {
                pass =
                    crate::bgworker::as_worker_role(WORKER_TYPE, one_pass).unwrap_or(Pass::Failed);
            }) {
                record_error(&e.to_string());
            }
            pass
        }) {
            Pass::Worked => Duration::ZERO,
            Pass::Idle => (wait * 2).clamp(FIRST_IDLE_WAIT, naptime.max(FIRST_IDLE_WAIT)),
            Pass::Failed => naptime,
        };
    }
    log!("{WORKER_TYPE}: exiting");
}

fn one_pass() -> Pass {
    let installed = crate::bgworker::extension_installed();
    if !installed {
        return Pass::Idle;
    }
    let pending = crate::spi::try_get_one::<bool>(
        "SELECT EXISTS (SELECT 1 FROM skills.embed_queue WHERE failed_reason IS NULL)",
    )
    .ok()
    .flatten()
    .unwrap_or(false);
    if !pending {
        return rebuild_stale_graph();
    }
    let encoder = match super::try_encoder() {
        Ok(e) => e,
        Err(e) => {
            record_error(&e.to_string());
            return Pass::Failed;
        }
    };
    match super::queue::embed_batch(&encoder, guc::EMBEDDER_BATCH_SIZE.get() as i64) {
        Ok(outcome) if outcome.embedded + outcome.failed > 0 => Pass::Worked,
        Ok(_) => Pass::Idle,
        Err(e) => {
            record_error(&e.to_string());
            Pass::Failed
        }
    }
}

/// Once the queue is drained, the skill graph's automatic edges are brought up to date if keys
/// changed since the last build or update (`skills.update_graph()`, the default thresholds:
/// the edges around the changed keys, or a whole build when that costs less): the graph
/// follows the skills without anyone calling it.
fn rebuild_stale_graph() -> Pass {
    let stale = crate::spi::try_get_one::<bool>(
        // max() reads the end of skill_key_embedded_at: this runs every idle pass, and a
        // join with an OR scanned every key whenever the graph was up to date. (Citus cannot
        // plan a subquery of no columns next to a distributed table: SELECT 1.)
        "SELECT EXISTS (SELECT 1 FROM skills.graph_pending) \
             OR (SELECT max(embedded_at) FROM skills.skill_key) \
                > coalesce((SELECT built_at FROM skills.graph_state), '-infinity')",
    )
    .ok()
    .flatten()
    .unwrap_or(false);
    if !stale {
        return Pass::Idle;
    }
    // On a Citus worker node the keys are the cluster's (metadata is synced there) but the
    // graph is the coordinator's: its embedder rebuilds it.
    let distributed = crate::spi::is_distributed("skills.skill_key");
    if distributed && !super::queue::on_citus_coordinator() {
        return Pass::Idle;
    }
    match crate::spi::try_get_one::<i64>("SELECT sum(edges)::bigint FROM skills.update_graph()") {
        Ok(edges) => {
            log!(
                "{WORKER_TYPE}: updated the skill graph ({} edges)",
                edges.unwrap_or(0)
            );
            Pass::Worked
        }
        Err(e) => {
            record_error(&format!("rebuilding the skill graph: {e}"));
            Pass::Failed
        }
    }
}

/// Logs `message` and writes it to `skills.embedder_progress`. The write runs in a
/// subtransaction of its own: an ERROR there (a trigger, a full disk) is logged and rolled back
/// instead of ending the worker, which would then load its model again after a restart.
fn record_error(message: &str) {
    warning!("{WORKER_TYPE}: {message}");
    // An SPI failure comes back either raised (caught by the subtransaction) or returned.
    let mut returned = None;
    let raised = crate::errors::in_subtransaction(|| {
        returned = crate::spi::try_run(
            "UPDATE skills.embedder_progress SET last_error = $1, last_error_at = now()",
            &[message.into()],
        )
        .err()
        .map(|e| e.to_string());
    });
    if let Some(e) = raised.err().map(|e| e.to_string()).or(returned) {
        warning!("{WORKER_TYPE}: could not record that error in skills.embedder_progress: {e}");
    }
}
