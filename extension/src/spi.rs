//! Every SQL statement the extension runs through SPI, under a search_path nobody can subvert.
//!
//! The statements name the extension's objects `skills.x` and leave the built-in operators and
//! functions unqualified (`=`, `||`, `->>`, `now()`, `array_agg`). Under the caller's
//! search_path those could resolve to a function or operator that another role created in a
//! schema on that path (`public`, or a schema put first with `ALTER DATABASE ... SET
//! search_path`): one with exact argument types beats pg_catalog's polymorphic one, and it runs
//! with the rights of whoever runs the statement, a searching user or a background worker. So
//! each statement here runs with `search_path = pg_catalog, pg_temp`, set for the call only and
//! restored afterwards, the way a function's `SET search_path` clause works.
//!
//! The rest of the extension calls these instead of `pgrx::Spi` (a unit test checks that no
//! other file calls `Spi::` directly).

use pgrx::datum::{DatumWithOid, FromDatum, IntoDatum};
use pgrx::pg_sys;
use pgrx::spi::{self, Spi, SpiClient};

/// The search_path of every statement the extension runs: built-ins only, temporary relations
/// last (so a temporary table cannot stand in for `skills.skill` either: those are qualified).
pub const FIXED_SEARCH_PATH: &std::ffi::CStr = c"pg_catalog, pg_temp";

/// Undoes the search_path change when it goes out of scope.
struct FixedSearchPath {
    nest_level: i32,
}

impl FixedSearchPath {
    fn enter() -> Self {
        // SAFETY: GUC calls on the backend's thread inside a transaction (SPI needs one too).
        // NewGUCNestLevel opens a level that AtEOXact_GUC closes; an ERROR in between is
        // handled by the (sub)transaction abort, which closes every level opened since.
        let nest_level = unsafe { pg_sys::NewGUCNestLevel() };
        set_fixed_search_path(pg_sys::GucAction::GUC_ACTION_SAVE);
        FixedSearchPath { nest_level }
    }
}

/// Sets search_path to [`FIXED_SEARCH_PATH`]: `GUC_ACTION_SAVE` for the current GUC nest level
/// only, `GUC_ACTION_SET` for the session (what a background worker does once).
pub fn set_fixed_search_path(action: pg_sys::GucAction::Type) {
    // SAFETY: a GUC change on the backend's thread inside a transaction.
    unsafe {
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            FIXED_SEARCH_PATH.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            action,
            true,
            0,
            false,
        );
    }
}

impl Drop for FixedSearchPath {
    fn drop(&mut self) {
        // While unwinding from an ERROR the transaction abort restores the setting; calling
        // into the GUC machinery then is not needed and not safe.
        if !std::thread::panicking() {
            // SAFETY: closes the level `enter` opened, on the same thread, still in the
            // transaction.
            unsafe { pg_sys::AtEOXact_GUC(true, self.nest_level) };
        }
    }
}

/// Runs `f` (which runs SQL) with the fixed search_path.
pub fn with_fixed_search_path<R>(f: impl FnOnce() -> R) -> R {
    let _path = FixedSearchPath::enter();
    f()
}

/// `Spi::connect` with the fixed search_path: read-only statements (a standby runs them).
pub fn connect<R, F>(f: F) -> R
where
    F: FnOnce(&SpiClient<'_>) -> R,
{
    with_fixed_search_path(|| Spi::connect(f))
}

/// `Spi::connect_mut` with the fixed search_path: statements that write.
pub fn connect_mut<R, F>(f: F) -> R
where
    F: FnOnce(&mut SpiClient<'_>) -> R,
{
    with_fixed_search_path(|| Spi::connect_mut(f))
}

/// `Spi::get_one` with the fixed search_path (read-write: it assigns a transaction id).
pub fn get_one<A: FromDatum + IntoDatum>(query: &str) -> spi::Result<Option<A>> {
    with_fixed_search_path(|| Spi::get_one(query))
}

/// `Spi::get_one_with_args` with the fixed search_path.
pub fn get_one_with_args<A: FromDatum + IntoDatum>(
    query: &str,
    args: &[DatumWithOid<'_>],
) -> spi::Result<Option<A>> {
    with_fixed_search_path(|| Spi::get_one_with_args(query, args))
}

/// `Spi::run_with_args` with the fixed search_path.
pub fn run_with_args(query: &str, args: &[DatumWithOid<'_>]) -> Result<(), spi::Error> {
    with_fixed_search_path(|| Spi::run_with_args(query, args))
}

#[cfg(test)]
mod tests {
    /// Every SPI call of the extension goes through this module.
    #[test]
    fn no_direct_spi_calls() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offenders = Vec::new();
        let mut dirs = vec![src];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                // spi.rs wraps Spi; tests.rs runs SQL as a test client would.
                if !name.ends_with(".rs") || name == "spi.rs" || name == "tests.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    if line.contains("Spi::") && !line.trim_start().starts_with("//") {
                        offenders.push(format!("{}:{}", path.display(), n + 1));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "SPI calls outside spi.rs: {offenders:?}"
        );
    }
}
