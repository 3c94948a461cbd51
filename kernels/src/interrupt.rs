//! Cancellation points in long loops.
//!
//! The kernels know nothing of Postgres, but a fit, a graph walk or the analysis of a long text
//! must stop within about a second when its query is cancelled. The extension installs a check
//! (Postgres' `CHECK_FOR_INTERRUPTS` on the backend's own thread, which raises the cancel ERROR
//! and unwinds through the loop; a no-op on other threads); long loops call [`check`] every so
//! often. Without an installed check (unit tests, benchmarks, the loader) it does nothing.

use std::sync::OnceLock;

static CHECK: OnceLock<fn()> = OnceLock::new();

/// Installs the check (the first call wins; a process has one host).
pub fn install(check: fn()) {
    let _ = CHECK.set(check);
}

/// A cancellation point: may not return (the installed check unwinds on cancellation).
#[inline]
pub fn check() {
    if let Some(f) = CHECK.get() {
        f();
    }
}

/// Calls [`check`] on every `every`-th call of `tick` (loops whose steps are too short to
/// check each one).
pub struct Every {
    every: u32,
    count: u32,
}

impl Every {
    pub fn new(every: u32) -> Self {
        Every {
            every: every.max(1),
            count: 0,
        }
    }

    #[inline]
    pub fn tick(&mut self) {
        self.count += 1;
        if self.count >= self.every {
            self.count = 0;
            check();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;

    thread_local! {
        /// Checks this test thread made (the installed check counts per thread, so tests
        /// running in parallel do not see each other's).
        pub static CHECKS: Cell<u64> = const { Cell::new(0) };
    }

    fn counting_check() {
        CHECKS.with(|c| c.set(c.get() + 1));
    }

    /// Installs the counting check and returns how many checks `f` made on this thread.
    pub(crate) fn checks_made(f: impl FnOnce()) -> u64 {
        super::install(counting_check);
        let before = CHECKS.with(Cell::get);
        f();
        CHECKS.with(Cell::get) - before
    }

    #[test]
    fn every_checks_once_per_period() {
        let n = checks_made(|| {
            let mut every = super::Every::new(10);
            for _ in 0..95 {
                every.tick();
            }
        });
        assert_eq!(n, 9);
    }
}
