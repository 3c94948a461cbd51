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

/// Settings changed for one GUC nest level, the way a function's `SET` clause changes them, and
/// restored when this goes out of scope.
struct LocalSettings {
    nest_level: i32,
}

impl LocalSettings {
    fn enter(settings: &[(&std::ffi::CStr, &std::ffi::CStr)]) -> Self {
        // SAFETY: GUC calls on the backend's thread inside a transaction (SPI needs one too).
        // NewGUCNestLevel opens a level that AtEOXact_GUC closes; an ERROR in between is
        // handled by the (sub)transaction abort, which closes every level opened since.
        let nest_level = unsafe { pg_sys::NewGUCNestLevel() };
        for (name, value) in settings {
            set_setting(name, value, pg_sys::GucAction::GUC_ACTION_SAVE);
        }
        LocalSettings { nest_level }
    }
}

impl Drop for LocalSettings {
    fn drop(&mut self) {
        // While unwinding from an ERROR the transaction abort restores the settings; calling
        // into the GUC machinery then is not needed and not safe.
        if !std::thread::panicking() {
            // SAFETY: closes the level `enter` opened, on the same thread, still in the
            // transaction.
            unsafe { pg_sys::AtEOXact_GUC(true, self.nest_level) };
        }
    }
}

/// Sets a user-settable GUC: `GUC_ACTION_SAVE` for the current nest level only,
/// `GUC_ACTION_SET` for the session.
fn set_setting(name: &std::ffi::CStr, value: &std::ffi::CStr, action: pg_sys::GucAction::Type) {
    // SAFETY: a GUC change on the backend's thread inside a transaction.
    unsafe {
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            action,
            true,
            0,
            false,
        );
    }
}

/// Sets search_path to [`FIXED_SEARCH_PATH`]: `GUC_ACTION_SAVE` for the current GUC nest level
/// only, `GUC_ACTION_SET` for the session (what a background worker does once).
pub fn set_fixed_search_path(action: pg_sys::GucAction::Type) {
    set_setting(c"search_path", FIXED_SEARCH_PATH, action);
}

/// Runs `f` (which runs SQL) with the fixed search_path.
pub fn with_fixed_search_path<R>(f: impl FnOnce() -> R) -> R {
    let _path = LocalSettings::enter(&[(c"search_path", FIXED_SEARCH_PATH)]);
    f()
}

/// Statements that only read, with the fixed search_path (a standby runs them; a transaction
/// id is never assigned). An SPI error (a type mismatch reading a column, say) is raised as an
/// ERROR; an ERROR inside a statement propagates as Postgres raised it.
pub fn read<R, F>(f: F) -> R
where
    F: FnOnce(&SpiClient<'_>) -> spi::Result<R>,
{
    with_fixed_search_path(|| Spi::connect(f)).unwrap_or_else(|e| raise_spi_error(e))
}

/// [`read`] for statements that write.
pub fn write<R, F>(f: F) -> R
where
    F: FnOnce(&mut SpiClient<'_>) -> spi::Result<R>,
{
    with_fixed_search_path(|| Spi::connect_mut(f)).unwrap_or_else(|e| raise_spi_error(e))
}

/// [`read`] whose SPI error the caller turns into its own message.
pub fn try_read<R, F>(f: F) -> spi::Result<R>
where
    F: FnOnce(&SpiClient<'_>) -> spi::Result<R>,
{
    with_fixed_search_path(|| Spi::connect(f))
}

/// The first column of the first row of a read-only query (None: no row, or NULL).
///
/// `Spi::get_one` runs read-write and so assigns a transaction id, which a hot standby refuses
/// ("cannot assign TransactionIds during recovery"): everything a search runs reads this way.
pub fn select_one<T: FromDatum + IntoDatum>(sql: &str, args: &[DatumWithOid<'_>]) -> Option<T> {
    read(|client| {
        let rows = client.select(sql, Some(1), args)?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.first().get_one::<T>()
    })
}

/// The first column of the first row a writing statement returns (`INSERT ... RETURNING`).
pub fn write_one<T: FromDatum + IntoDatum>(sql: &str, args: &[DatumWithOid<'_>]) -> Option<T> {
    with_fixed_search_path(|| Spi::get_one_with_args(sql, args))
        .unwrap_or_else(|e| raise_spi_error(e))
}

/// Runs a statement that writes.
pub fn run(sql: &str, args: &[DatumWithOid<'_>]) {
    with_fixed_search_path(|| Spi::run_with_args(sql, args)).unwrap_or_else(|e| raise_spi_error(e))
}

/// `Spi::get_one` for the background workers, which handle a failure themselves (log it and
/// wait) instead of ending their transaction with an ERROR.
pub fn try_get_one<A: FromDatum + IntoDatum>(query: &str) -> spi::Result<Option<A>> {
    with_fixed_search_path(|| Spi::get_one(query))
}

/// [`try_get_one`] with arguments.
pub fn try_get_one_with_args<A: FromDatum + IntoDatum>(
    query: &str,
    args: &[DatumWithOid<'_>],
) -> spi::Result<Option<A>> {
    with_fixed_search_path(|| Spi::get_one_with_args(query, args))
}

/// [`run`] for the background workers (see [`try_get_one`]).
pub fn try_run(query: &str, args: &[DatumWithOid<'_>]) -> spi::Result<()> {
    with_fixed_search_path(|| Spi::run_with_args(query, args))
}

/// Plans this backend keeps for the statements a search runs many times per call, by statement
/// text and argument types. A request of several parts runs a dozen or more statements per call,
/// and planning each of them every time was about a fifth of such a call (perf, 100,000
/// skills). The plans are generic: each statement sent here plans the same whatever its
/// arguments (an index scan in key order under a LIMIT, primary-key lookups of `= ANY ($n)`).
/// Postgres plans a kept statement again when what its plan depends on changes (DDL on its
/// tables, the role under row-level security, the search_path).
///
/// Not where Citus is installed: its distributed plans are built per call, and a search there
/// plans every statement as before.
struct KeptPlans {
    plans: std::collections::HashMap<
        (String, Vec<pg_sys::Oid>),
        std::rc::Rc<spi::OwnedPreparedStatement>,
    >,
}

/// Kept plans at most (the statement texts carry a few settings, such as the key breadth); past
/// it they are all let go and planned again.
const MAX_KEPT_PLANS: usize = 64;

thread_local! {
    static KEPT_PLANS: std::cell::RefCell<KeptPlans> = std::cell::RefCell::new(KeptPlans {
        plans: std::collections::HashMap::new(),
    });
}

/// Whether statements may run on kept plans: not with Citus in the database.
pub fn plans_may_be_kept() -> bool {
    !citus_installed()
}

/// Whether the Citus extension is installed in this database.
pub fn citus_installed() -> bool {
    // SAFETY: a catalog lookup (pg_extension by name) on the backend's thread inside a
    // transaction (SPI needs one).
    unsafe { pg_sys::get_extension_oid(c"citus".as_ptr(), true) != pg_sys::InvalidOid }
}

/// `skills.is_distributed(table)`: false without a statement where Citus is not installed.
pub fn is_distributed(table: &str) -> bool {
    citus_installed()
        && select_one::<bool>(
            "SELECT skills.is_distributed($1::regclass)",
            &[table.into()],
        )
        .unwrap_or(false)
}

/// Runs read-only `sql` with `args` in `client` (inside [`read`]) on a plan this backend keeps
/// (see [`KeptPlans`]): planned once, generic, then executed with each call's arguments.
pub fn select_kept<'conn>(
    client: &SpiClient<'conn>,
    sql: &str,
    args: &[DatumWithOid<'_>],
) -> spi::Result<spi::SpiTupleTable<'conn>> {
    if !plans_may_be_kept() {
        return client.select(sql, None, args);
    }
    let types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let cache_key = (sql.to_string(), types);
    let kept = KEPT_PLANS.with(|k| k.borrow().plans.get(&cache_key).cloned());
    let plan = match kept {
        Some(plan) => plan,
        None => {
            let oids: Vec<pgrx::PgOid> =
                cache_key.1.iter().map(|&o| pgrx::PgOid::from(o)).collect();
            let plan = std::rc::Rc::new(client.prepare(sql, &oids)?.keep());
            KEPT_PLANS.with(|k| {
                let mut k = k.borrow_mut();
                if k.plans.len() >= MAX_KEPT_PLANS {
                    k.plans.clear();
                }
                k.plans.insert(cache_key, plan.clone());
            });
            plan
        }
    };
    // The map is not borrowed while the statement runs: a function it calls may run one too.
    // Generic plans, the session's setting restored afterwards: a kept plan would otherwise be
    // planned again for its first five calls, and then whenever a custom plan looks cheaper,
    // which for these statements it always does by a little.
    let _generic = LocalSettings::enter(&[(c"plan_cache_mode", c"force_generic_plan")]);
    client.select(&*plan, None, args)
}

/// Kept plans of this backend (tests).
#[cfg(any(test, feature = "pg_test"))]
pub fn kept_plans() -> usize {
    KEPT_PLANS.with(|k| k.borrow().plans.len())
}

/// An SPI error is the extension's own mistake (a statement and its reader disagree), not the
/// caller's: XX000.
fn raise_spi_error(e: spi::Error) -> ! {
    crate::errors::raise(
        pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        e.to_string(),
        None,
    )
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
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                // The pg_tests (src/tests/) run SQL as a test client would.
                if path.is_dir() {
                    if name != "tests" {
                        dirs.push(path);
                    }
                    continue;
                }
                // spi.rs wraps Spi.
                if !name.ends_with(".rs") || name == "spi.rs" {
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
