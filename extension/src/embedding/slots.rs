//! A server-wide bound on the encoder threads of searching backends: `pg_skills.encoder_threads_total`
//! slots, each an advisory lock (database 0, class [`SLOT_CLASS`], the slot's number) that a
//! backend holds while its encoder runs a thread on it.
//!
//! `pg_skills.encoder_threads` bounds one connection; without a server-wide bound, N connections
//! that encode at once run N times that many threads on the same cores. Locks rather than a
//! counter in shared memory: they need no `shared_preload_libraries`, belong to the transaction
//! (an error, a cancellation or a crash releases them with it), take part in deadlock detection,
//! honour `lock_timeout`, and show in `pg_locks`.
//!
//! A backend takes up to `pg_skills.encoder_threads` free slots without waiting, encodes on that
//! many threads and releases them at once (an idle transaction holds none); when none is free it
//! waits for one. The embedder worker is bounded by `pg_skills.embedder_threads` instead and
//! takes no slot.

use pgrx::pg_sys;

use crate::guc;

/// The advisory lock class of the slots ("pgsk"): `pg_locks.classid` of their locks.
pub const SLOT_CLASS: u32 = 0x7067_736b;

/// The cores this process may run on.
pub fn machine_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Slots of the server: the setting, or with 0 the machine's cores.
pub fn total_slots() -> usize {
    match guc::ENCODER_THREADS_TOTAL.get() {
        n if n > 0 => n as usize,
        _ => machine_cores(),
    }
}

/// The slots one encoding holds; released when dropped (on an ERROR, by the transaction's end).
pub struct Claim {
    slots: Vec<u32>,
}

impl Claim {
    /// Threads to encode on: the slots held, and 1 where slots do not apply.
    pub fn threads(&self) -> usize {
        self.slots.len().max(1)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Unwinding from an ERROR: the transaction's abort releases the locks.
        if std::thread::panicking() {
            return;
        }
        for &slot in &self.slots {
            // SAFETY: a lock this transaction took in `claim` under the same resource owner
            // (the encoding runs between the two without a subtransaction boundary).
            unsafe {
                pg_sys::LockRelease(&tag(slot), pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false);
            }
        }
    }
}

/// Takes up to `want` (≥ 1) free slots, or waits for one when none is free. Outside a
/// transaction and in parallel queries (whose workers' locks would end with the workers) it
/// takes none (threads: 1).
pub fn claim(want: usize) -> Claim {
    let mut claim = Claim { slots: Vec::new() };
    // SAFETY: reads of backend-local state on the backend's thread.
    let plain_backend = unsafe {
        pg_sys::IsTransactionState()
            && !pg_sys::IsInParallelMode()
            && pg_sys::ParallelWorkerNumber < 0
    };
    if !plain_backend {
        return claim;
    }
    let total = total_slots();
    // Backends start at different slots, so that they rarely try the same ones first.
    // SAFETY: MyProcPid is set for the backend's life.
    let start = (unsafe { pg_sys::MyProcPid } as usize % total) as u32;
    for i in 0..total as u32 {
        if claim.slots.len() == want.max(1) {
            break;
        }
        let slot = (start + i) % total as u32;
        if lock_slot(slot, false) {
            claim.slots.push(slot);
        }
    }
    if claim.slots.is_empty() {
        lock_slot(start, true);
        claim.slots.push(start);
    }
    claim
}

fn tag(slot: u32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // Database 0: one set of slots for the whole server.
        locktag_field1: 0,
        locktag_field2: SLOT_CLASS,
        locktag_field3: slot,
        // As SET_LOCKTAG_INT32 marks a lock on a pair of int4 keys (pg_locks.objsubid 2).
        locktag_field4: 2,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Locks slot `slot` for this transaction; with `wait`, until it is free (interruptible;
/// `lock_timeout` and deadlock detection apply), else only if it is free now.
fn lock_slot(slot: u32, wait: bool) -> bool {
    // SAFETY: a well-formed advisory lock tag in the user lock method, taken for the current
    // transaction (sessionLock false) of a backend in a transaction (checked by the caller);
    // the lock manager copies the tag.
    let result = unsafe {
        pg_sys::LockAcquire(
            &tag(slot),
            pg_sys::ExclusiveLock as pg_sys::LOCKMODE,
            false,
            !wait,
        )
    };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}
