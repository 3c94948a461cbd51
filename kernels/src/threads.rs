//! Threads a server process may start. PostgreSQL's signal handlers (a cancel, a termination,
//! a latch) expect to run on the backend's own thread: some of them process interrupts there
//! and raise an ERROR, which on another thread would unwind through foreign frames. A process
//! delivers a signal to any thread that does not block it, so every thread started here blocks
//! them all from its first instruction (it inherits the mask it is started under).

/// `f` with every signal blocked on the calling thread, the previous mask restored after: a
/// thread `f` starts inherits the blocked mask. Signals that arrive meanwhile stay pending for
/// the calling thread.
pub fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(unix)]
    // SAFETY: both sets are initialised (sigfillset, pthread_sigmask) before they are read, and
    // the previous mask is restored on the same thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
        let out = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        out
    }
    #[cfg(not(unix))]
    f()
}

/// A rayon spawn handler (`ThreadPoolBuilder::spawn_handler`) that starts each pool thread
/// with every signal blocked, keeping the builder's name and stack size.
pub fn spawn_without_signals(thread: rayon::ThreadBuilder) -> std::io::Result<()> {
    let mut builder = std::thread::Builder::new();
    if let Some(name) = thread.name() {
        builder = builder.name(name.to_owned());
    }
    if let Some(size) = thread.stack_size() {
        builder = builder.stack_size(size);
    }
    with_signals_blocked(|| builder.spawn(|| thread.run()))?;
    Ok(())
}

/// Starts rayon's global pool once, its threads started by [`spawn_without_signals`]. Code that
/// may run parallel iterators, `rayon::scope` or gemm's rayon parallelism outside a pool of its
/// caller calls this first: otherwise rayon starts the global pool on first use with its own
/// spawner, and those threads (they live as long as the process) take signals meant for the
/// backend. Never call it in a process that forks afterwards (the postmaster): a child would
/// inherit the pool without its threads. When the global pool was started before (by the host
/// program), that pool stays as it is.
pub fn global_pool() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        // Err only when the global pool exists already: nothing to start then.
        let _ = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("pg_skills worker {i}"))
            .spawn_handler(spawn_without_signals)
            .build_global();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn blocked(signal: libc::c_int) -> bool {
        // SAFETY: the set is filled by pthread_sigmask before it is read.
        unsafe {
            let mut current: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut current);
            libc::sigismember(&current, signal) == 1
        }
    }

    #[cfg(unix)]
    #[test]
    fn pool_threads_block_signals_and_the_caller_keeps_its_mask() {
        assert!(
            !blocked(libc::SIGINT),
            "the test thread starts with SIGINT open"
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .thread_name(|i| format!("test pool {i}"))
            .spawn_handler(spawn_without_signals)
            .build()
            .unwrap();
        let seen: Vec<(bool, bool, bool, Option<String>)> = pool.broadcast(|_| {
            (
                blocked(libc::SIGINT),
                blocked(libc::SIGTERM),
                blocked(libc::SIGUSR1),
                std::thread::current().name().map(str::to_owned),
            )
        });
        assert_eq!(seen.len(), 2);
        for (int, term, usr1, name) in seen {
            assert!(int && term && usr1);
            assert!(name.unwrap().starts_with("test pool "));
        }
        assert!(!blocked(libc::SIGINT), "the caller's mask is restored");
        // A pool without the handler leaves them open: what the handler changes.
        let plain = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert!(!plain.install(|| blocked(libc::SIGINT)));
    }
}
