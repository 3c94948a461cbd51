//! Query cancellation inside the kernels' long loops (a fit, a graph walk, the analysis of a long
//! text): the check `pg_skills_kernels::interrupt` calls.

use std::sync::OnceLock;
use std::thread::ThreadId;

use pgrx::pg_sys;

/// The thread Postgres runs on (the only one that may call into it).
static BACKEND_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// Installs the check; called from `_PG_init`, on the backend's (or postmaster's) own thread,
/// which a forked backend keeps.
pub fn install() {
    let _ = BACKEND_THREAD.set(std::thread::current().id());
    pg_skills_kernels::interrupt::install(check);
}

/// CHECK_FOR_INTERRUPTS on the backend's thread (a cancel or terminate raises its ERROR and
/// unwinds through the kernel loop); nothing on the encoder's and rayon's threads, whose work
/// the backend's thread checks between its parallel steps.
fn check() {
    if BACKEND_THREAD.get() == Some(&std::thread::current().id()) {
        pg_sys::check_for_interrupts!();
    }
}
