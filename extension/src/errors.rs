//! Raising Postgres errors with an SQLSTATE, a message and a hint.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::PgTryBuilder;
use pgrx::{pg_sys, PgLogLevel, PgSqlErrorCode};

/// Raises an ERROR; Postgres unwinds the transaction, the backend survives.
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>, hint: Option<&str>) -> ! {
    let mut report = ErrorReport::new(code, message.into(), "pg_skills");
    if let Some(h) = hint {
        report = report.set_hint(h);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

/// An ERROR [`in_subtransaction`] caught: its SQLSTATE and message.
#[derive(Debug)]
pub struct Caught {
    pub code: PgSqlErrorCode,
    pub message: String,
}

impl std::fmt::Display for Caught {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Caught {
    /// Whether the error says something about the work itself (bad data, a constraint, a
    /// trigger's RAISE, a missing object), rather than about the server's state at the moment
    /// (deadlock or serialization failure, out of disk or memory, a lock not available, an I/O
    /// or internal error), which the same work may get past later.
    pub fn is_about_the_work(&self) -> bool {
        let state = sqlstate(self.code);
        !matches!(&state[..2], "40" | "53" | "55" | "57" | "58" | "XX")
    }

    /// Raises the error again in the caller.
    pub fn raise(self) -> ! {
        raise(self.code, self.message, None)
    }
}

/// The five characters of an error code (Postgres packs them six bits each, first lowest).
fn sqlstate(code: PgSqlErrorCode) -> String {
    let packed = code as u32;
    (0..5)
        .map(|i| char::from(((packed >> (6 * i)) & 0x3F) as u8 + b'0'))
        .collect()
}

/// Runs `f` inside the caller's transaction in a subtransaction: an ERROR in it is rolled back
/// and comes back as its code and message, and the caller goes on (a worker whose round fails, a batch
/// of keys with one key that cannot be written). A cancel (`pg_cancel_backend`, a statement
/// timeout) is not caught: it ends the statement as before.
pub fn in_subtransaction(f: impl FnOnce()) -> Result<(), Caught> {
    // SAFETY: the standard PL pattern (plpgsql's EXCEPTION blocks): the caller's memory context
    // and resource owner are saved, a subtransaction is begun and then either released or rolled
    // back, and the two are restored afterwards. The rollback releases what the work held (SPI
    // connections, locks, buffers, the user it switched to), and pgrx has already copied and
    // flushed the error state when the catch handler runs.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        // The work's state is dropped by the rollback; none of it is read after an ERROR.
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = PgTryBuilder::new(move || {
            f();
            Ok(())
        })
        .catch_others(|e| {
            if error_code(&e) == PgSqlErrorCode::ERRCODE_QUERY_CANCELED {
                e.rethrow()
            }
            Err(Caught {
                code: error_code(&e),
                message: caught_message(&e),
            })
        })
        .execute();
        match outcome {
            Ok(()) => pg_sys::ReleaseCurrentSubTransaction(),
            Err(_) => pg_sys::RollbackAndReleaseCurrentSubTransaction(),
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
        outcome
    }
}

fn report(e: &pg_sys::panic::CaughtError) -> &pg_sys::panic::ErrorReportWithLevel {
    match e {
        pg_sys::panic::CaughtError::PostgresError(r)
        | pg_sys::panic::CaughtError::ErrorReport(r)
        | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => r,
    }
}

/// The message of a caught ERROR or panic.
fn caught_message(e: &pg_sys::panic::CaughtError) -> String {
    report(e).message().to_string()
}

fn error_code(e: &pg_sys::panic::CaughtError) -> PgSqlErrorCode {
    report(e).sql_error_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_unpack_to_their_sqlstate_and_class() {
        assert_eq!(sqlstate(PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION), "23505");
        assert_eq!(sqlstate(PgSqlErrorCode::ERRCODE_DISK_FULL), "53100");
        assert_eq!(sqlstate(PgSqlErrorCode::ERRCODE_RAISE_EXCEPTION), "P0001");
        let caught = |code| Caught {
            code,
            message: String::new(),
        };
        assert!(caught(PgSqlErrorCode::ERRCODE_RAISE_EXCEPTION).is_about_the_work());
        assert!(caught(PgSqlErrorCode::ERRCODE_FOREIGN_KEY_VIOLATION).is_about_the_work());
        assert!(!caught(PgSqlErrorCode::ERRCODE_DISK_FULL).is_about_the_work());
        assert!(!caught(PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED).is_about_the_work());
        assert!(!caught(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR).is_about_the_work());
    }
}
