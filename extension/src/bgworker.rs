//! What the background workers share: registration (only while shared_preload_libraries loads
//! the library) and the check that the extension exists in the worker's database.

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

/// Whether `CREATE EXTENSION pg_skills` ran in the worker's database.
pub fn extension_installed() -> bool {
    Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_skills')",
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}
