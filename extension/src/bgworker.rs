//! What the background workers share: registration (only while shared_preload_libraries loads
//! the library), the check that the extension exists in the worker's database, and the role the
//! workers run their rounds as.

use std::time::Duration;

use pgrx::bgworkers::BackgroundWorkerBuilder;
use pgrx::prelude::*;

/// Registers a worker of type `worker_type` running `function` (an exported `extern "C-unwind"`
/// symbol of this library), restarted 10 s after it exits with an error.
pub fn register(worker_type: &str, function: &str) {
    // SAFETY: a plain read of a postmaster global that is only written during startup.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    BackgroundWorkerBuilder::new(worker_type)
        .set_type(worker_type)
        .set_library("pg_skills")
        .set_function(function)
        .enable_spi_access()
        .set_restart_time(Some(Duration::from_secs(10)))
        .load();
}

/// Connects a worker to `database` and fixes its session's search_path (every statement also
/// runs under the fixed path: see `crate::spi`), whatever `ALTER DATABASE ... SET search_path`
/// or `ALTER ROLE` gave it.
pub fn connect(database: &str) {
    pgrx::bgworkers::BackgroundWorker::connect_worker_to_spi(Some(database), None);
    // GUC_ACTION_SET at session level outlives the transaction, as `SET` does.
    pgrx::bgworkers::BackgroundWorker::transaction(|| {
        crate::spi::set_fixed_search_path(pg_sys::GucAction::GUC_ACTION_SET)
    });
}

/// Whether `CREATE EXTENSION pg_skills` ran in the worker's database.
pub fn extension_installed() -> bool {
    crate::spi::try_get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_skills')",
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// Runs one round of a worker's work as the role `pg_skills.worker_role` names, inside the
/// caller's transaction; None (and a warning once per role name) when that role is missing.
///
/// Workers connect as the bootstrap superuser, but nothing they run needs it: the work runs as
/// the named role in a security-restricted operation (as VACUUM runs index functions as the
/// table's owner), so code that role can reach cannot `SET ROLE` back, and what the role may do
/// is what a DBA granted it (the extension grants `skills_worker` exactly what the workers use).
pub fn as_worker_role<R>(worker_type: &str, f: impl FnOnce() -> R) -> Option<R> {
    let name = crate::guc::worker_role();
    let cname = std::ffi::CString::new(name.clone()).ok()?;
    // SAFETY: a catalog lookup on the backend's thread inside a transaction; missing_ok.
    let role = unsafe { pg_sys::get_role_oid(cname.as_ptr(), true) };
    if role == pg_sys::InvalidOid {
        if !extension_installed() {
            return None; // nothing to do here yet, and nothing to warn about
        }
        warn_once(
            &name,
            &format!(
                "{worker_type}: pg_skills.worker_role names no role \"{name}\"; the worker waits \
                 (CREATE EXTENSION pg_skills creates skills_worker)"
            ),
        );
        return None;
    }
    let _role = WorkerRole::enter(role);
    Some(f())
}

/// The user and security context a worker round switched from, restored on drop.
struct WorkerRole {
    user: pg_sys::Oid,
    context: i32,
}

impl WorkerRole {
    fn enter(role: pg_sys::Oid) -> Self {
        let mut user = pg_sys::InvalidOid;
        let mut context = 0;
        // SAFETY: reads and sets the backend's current user; the (sub)transaction abort of an
        // ERROR restores the values saved at its start, so an error inside needs no cleanup.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
            pg_sys::SetUserIdAndSecContext(
                role,
                context
                    | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                    | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
            );
        }
        WorkerRole { user, context }
    }
}

impl Drop for WorkerRole {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // SAFETY: restores what `enter` read, on the same thread and transaction.
            unsafe { pg_sys::SetUserIdAndSecContext(self.user, self.context) };
        }
    }
}

/// Logs `message` once while `key` stays the same (a missing role is reported once, not
/// every round).
fn warn_once(key: &str, message: &str) {
    static WARNED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.as_deref() != Some(key) {
        warning!("{message}");
        *warned = Some(key.to_string());
    }
}
