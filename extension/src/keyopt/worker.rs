//! The fitter background worker (registered when pg_skills is in shared_preload_libraries).
//!
//! It serves `pg_skills.embedder_database` (the database both workers serve). Every
//! `pg_skills.fit_interval` (0: never; `skills.fit()` fits on request in any session) it fits a
//! new round when runs were recorded after the active round's last fitted run, and publishes it
//! in the same transaction. With `pg_skills.compressor_retrain_runs` set it first trains a new
//! compressor on the recorded runs once that many runs with a passing skill were recorded since
//! the last one trained on the runs (`skills.train_compressor()`, which rewrites the keys; the
//! fit then follows on the new keys). Later runs are then served from better keys and find the
//! skill they need more often, which is what the next training learns from. A fit or training
//! that fails (an ERROR: a relevance function that raises, a full disk) is rolled back and
//! logged as a WARNING, and the worker stays up: it tries again after `fit_interval`, doubling
//! the wait after each failure in a row up to an hour, so a failure that repeats neither
//! restarts the worker every 10 s nor refits in a loop.

use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;

use crate::guc;

pub const WORKER_TYPE: &str = "pg_skills fitter";
/// How often the worker looks at the clock and the setting.
const POLL: Duration = Duration::from_secs(5);

pub fn register() {
    crate::bgworker::register(WORKER_TYPE, "pg_skills_fitter_main");
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_skills_fitter_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = guc::embedder_database();
    crate::bgworker::connect(&database);
    log!("{WORKER_TYPE}: started in database \"{database}\"");
    let mut retry = Retry::default();
    while BackgroundWorker::wait_latch(Some(POLL)) {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let interval = guc::FIT_INTERVAL_S.get();
        if interval <= 0 || !retry.may_try(Instant::now()) {
            continue;
        }
        let outcome = BackgroundWorker::transaction(|| {
            crate::errors::in_subtransaction(|| {
                crate::bgworker::as_worker_role(WORKER_TYPE, || look(interval));
            })
        });
        match outcome {
            Ok(()) => retry.succeeded(),
            Err(message) => {
                let wait = retry.failed(Instant::now(), interval);
                warning!(
                    "{WORKER_TYPE}: {message}; the worker tries again in {} s",
                    wait.as_secs()
                );
            }
        }
    }
    log!("{WORKER_TYPE}: exiting");
}

/// One look: trains a compressor on the runs and fits a round where they are due.
fn look(interval: i32) {
    let retrain_runs = guc::COMPRESSOR_RETRAIN_RUNS.get();
    if retrain_runs > 0 && retraining_due(retrain_runs, interval) {
        let version = crate::spi::write_one::<i32>("SELECT skills.train_compressor()", &[]);
        log!(
            "{WORKER_TYPE}: trained compressor {} on the recorded runs",
            version.unwrap_or_default()
        );
    }
    if due(interval) {
        super::fit("schedule", true);
    }
}

/// Failures in a row and when the worker may try again: `fit_interval` after the first, then
/// twice the wait before, at most [`MAX_RETRY_WAIT`].
#[derive(Default)]
struct Retry {
    failures: u32,
    not_before: Option<Instant>,
}

const MAX_RETRY_WAIT: Duration = Duration::from_secs(3600);

impl Retry {
    fn may_try(&self, now: Instant) -> bool {
        self.not_before.is_none_or(|t| now >= t)
    }

    fn succeeded(&mut self) {
        *self = Retry::default();
    }

    /// Records a failure at `now`; returns how long the worker waits before the next try.
    fn failed(&mut self, now: Instant, interval_s: i32) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let first = Duration::from_secs(interval_s.max(1) as u64).min(MAX_RETRY_WAIT);
        let wait = first
            .saturating_mul(1u32 << (self.failures - 1).min(20))
            .min(MAX_RETRY_WAIT);
        self.not_before = Some(now + wait);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_after_each_failure_up_to_an_hour_and_resets_on_success() {
        let start = Instant::now();
        let mut retry = Retry::default();
        assert!(retry.may_try(start));
        let waits: Vec<u64> = (0..14).map(|_| retry.failed(start, 1).as_secs()).collect();
        assert_eq!(&waits[..6], &[1, 2, 4, 8, 16, 32]);
        assert_eq!(*waits.last().unwrap(), 3600);
        assert!(!retry.may_try(start + Duration::from_secs(3599)));
        assert!(retry.may_try(start + Duration::from_secs(3600)));
        retry.succeeded();
        assert!(retry.may_try(start));
        assert_eq!(retry.failed(start, 600).as_secs(), 600);
        assert_eq!(retry.failed(start, 600).as_secs(), 1200);
        // An interval above the cap waits the cap.
        let mut long = Retry::default();
        assert_eq!(long.failed(start, 86_400).as_secs(), 3600);
    }
}

/// True when the extension is installed, runs were recorded after the active round's last
/// fitted run or the active round was fitted on the keys of another compressor than the active
/// one (`skills.train_compressor` rewrote them), and the newest round is at least `interval`
/// seconds old.
fn due(interval: i32) -> bool {
    let installed = crate::bgworker::extension_installed();
    installed
        && crate::spi::try_get_one_with_args::<bool>(
            "SELECT (EXISTS (SELECT 1 FROM skills.event AS e WHERE e.id > coalesce( \
                         (SELECT r.max_event_id FROM skills.keyopt_round AS r WHERE r.active), 0)) \
                     OR EXISTS (SELECT 1 FROM skills.keyopt_round AS r WHERE r.active \
                         AND (r.report ->> 'compressor_version')::integer IS DISTINCT FROM \
                             (SELECT c.version FROM skills.compressor AS c WHERE c.active))) \
                 AND coalesce((SELECT max(r.created_at) FROM skills.keyopt_round AS r), '-infinity') \
                     <= now() - make_interval(secs => $1)",
            &[(interval as f64).into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// True when the extension is installed, the active compressor (if any) was trained on the
/// recorded runs (never replace one trained from a pairs query), at least `runs` runs with a
/// passing arm were recorded after the newest compressor trained on the runs could see, there
/// are the 4 pairs a training needs (else it would fail on every look), and the newest
/// compressor is at least `interval` seconds old.
fn retraining_due(runs: i32, interval: i32) -> bool {
    crate::bgworker::extension_installed()
        && crate::spi::try_get_one_with_args::<bool>(
            "SELECT NOT EXISTS (SELECT 1 FROM skills.compressor AS c WHERE c.active \
                                AND c.training ->> 'source' IS DISTINCT FROM 'runs') \
                 AND (SELECT count(*) FROM (SELECT 1 FROM skills.event AS e \
                      WHERE e.id > coalesce((SELECT max((c.training ->> 'through_event')::bigint) \
                                             FROM skills.compressor AS c \
                                             WHERE c.training ->> 'source' = 'runs'), 0) \
                        AND EXISTS (SELECT 1 FROM skills.event_arm AS a \
                                    WHERE a.event_id = e.id AND a.passed AND NOT a.stale) \
                      LIMIT $1) AS new_runs) >= $1 \
                 AND (SELECT count(*) FROM (SELECT 1 FROM skills.event_arm AS a \
                      JOIN skills.skill AS s ON s.id = a.skill_id AND s.content_hash = a.content_hash \
                      WHERE a.passed AND NOT a.stale LIMIT 4) AS p) = 4 \
                 AND coalesce((SELECT max(c.created_at) FROM skills.compressor AS c), '-infinity') \
                     <= now() - make_interval(secs => $2)",
            &[(runs as i64).into(), (interval as f64).into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false)
}
