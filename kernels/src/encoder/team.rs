//! A pass of few rows (a query's) run by a team of the pool's threads that stay awake between
//! its parallel loops.
//!
//! Why: a query's pass is about 30 parallel loops (four products and the attention per layer)
//! of 6–24 tasks of 10–100 µs each. On rayon's own loops, the pool's other threads fall asleep
//! in the serial steps between them (layer norms, GELU, the inputs' quantisation), and each
//! loop then begins by waking them: a context switch per loop, which took as long as the tasks
//! it shared (two threads ran a query 1.28 times as fast as one). Here the leader runs the pass
//! and the other threads spin (then yield) for the next loop's tasks until the pass ends.
//!
//! [`run`] runs a pass as a team; inside it, [`for_each`] on the leader's thread hands the tasks
//! of a loop to the team, and everywhere else it is rayon's parallel loop.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A loop's task body, as the leader hands it to the team.
type Task<'a> = &'a (dyn Fn(usize) + Sync);

/// Spins before a waiting thread yields its core between checks.
const SPINS_BEFORE_YIELDING: u32 = 2_000;

/// What the threads of one pass share.
struct Team {
    /// The current loop's task count (high 32 bits) and next unclaimed task (low 32 bits);
    /// a task is claimed by incrementing it while it is below the count.
    tasks: AtomicU64,
    /// The current loop's body: a `*const Task`, on the leader's stack for the loop.
    body: AtomicPtr<()>,
    /// Tasks of the current loop finished.
    done: AtomicUsize,
    /// A task panicked (its loop then panics on the leader).
    panicked: AtomicBool,
    /// The pass is over: the helpers return.
    finished: AtomicBool,
}

thread_local! {
    /// The team whose leader this thread is, while it runs a pass.
    static LEADING: Cell<*const Team> = const { Cell::new(std::ptr::null()) };
    /// Whether this thread leads or helps a team now: a helper's job that it picks up while
    /// waiting inside rayon (a task's own parallel loop) must not start helping on top of the
    /// task it has not finished, which the leader would then wait for forever.
    static IN_TEAM: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as in a team until dropped (restoring what it was).
struct InTeam(bool);

impl InTeam {
    fn enter() -> InTeam {
        InTeam(IN_TEAM.with(|t| t.replace(true)))
    }
}

impl Drop for InTeam {
    fn drop(&mut self) {
        IN_TEAM.with(|t| t.set(self.0));
    }
}

fn pack(count: usize, next: usize) -> u64 {
    ((count as u64) << 32) | next as u64
}

fn unpack(tasks: u64) -> (usize, usize) {
    ((tasks >> 32) as usize, (tasks & 0xffff_ffff) as usize)
}

/// Waits by spinning, then by yielding the core between checks, until `ready`.
fn wait_until(mut ready: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        if spins < SPINS_BEFORE_YIELDING {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl Team {
    fn new() -> Team {
        Team {
            tasks: AtomicU64::new(0),
            body: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            finished: AtomicBool::new(false),
        }
    }

    /// Claims the current loop's next task and runs it; false where none is left.
    fn run_one(&self) -> bool {
        let mut seen = self.tasks.load(Ordering::Acquire);
        loop {
            let (count, next) = unpack(seen);
            if next >= count {
                return false;
            }
            match self.tasks.compare_exchange_weak(
                seen,
                pack(count, next + 1),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    // SAFETY: the claim succeeded, so the loop it belongs to is the current
                    // one and cannot end before this task is counted done: its body, published
                    // before its task count (release/acquire through `tasks`), is still alive
                    // on the leader's stack. (A count equal to an earlier loop's names the
                    // current loop all the same: the claim is of the current value.)
                    let body = unsafe { *(self.body.load(Ordering::Acquire) as *const Task) };
                    if catch_unwind(AssertUnwindSafe(|| body(next))).is_err() {
                        self.panicked.store(true, Ordering::Relaxed);
                    }
                    self.done.fetch_add(1, Ordering::Release);
                    return true;
                }
                Err(now) => seen = now,
            }
        }
    }

    /// A helper's part: runs tasks as loops come until the pass is over.
    fn help(&self) {
        if IN_TEAM.with(|t| t.get()) {
            return;
        }
        let _in_team = InTeam::enter();
        while !self.finished.load(Ordering::Acquire) {
            if !self.run_one() {
                wait_until(|| {
                    let (count, next) = unpack(self.tasks.load(Ordering::Acquire));
                    next < count || self.finished.load(Ordering::Acquire)
                });
            }
        }
    }

    /// The leader's loop: body(i) for i in 0..count on the team, returned when all are done.
    fn for_each(&self, count: usize, body: Task) {
        assert!(count < u32::MAX as usize, "a loop of {count} tasks");
        // A loop inside a task is rayon's: this team runs one loop at a time.
        let leading = LEADING.with(|l| l.replace(std::ptr::null()));
        self.body
            .store(&body as *const Task as *mut (), Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        self.tasks.store(pack(count, 0), Ordering::Release);
        while self.run_one() {}
        wait_until(|| self.done.load(Ordering::Acquire) >= count);
        // Every task of this loop is done, so no helper reads `body` again.
        LEADING.with(|l| l.set(leading));
        if self.panicked.swap(false, Ordering::Relaxed) {
            panic!("a task of the encoder's parallel loop panicked");
        }
    }
}

/// Ends the pass when the leader's work returns or unwinds (helpers must not wait forever), and
/// gives the thread back the team it led before, if any.
struct Leading<'a> {
    team: &'a Team,
    before: *const Team,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        LEADING.with(|l| l.set(self.before));
        self.team.finished.store(true, Ordering::Release);
    }
}

/// `leader()` on a thread of `threads` (None: rayon's global pool), the pool's other threads
/// helping with its [`for_each`] loops until it returns.
pub fn run<R: Send>(threads: Option<&rayon::ThreadPool>, leader: impl FnOnce() -> R + Send) -> R {
    let team = Team::new();
    let leader = Mutex::new(Some(leader));
    let result = Mutex::new(None);
    match threads {
        Some(pool) => pool.scope(|scope| lead(scope, &team, &leader, &result)),
        None => rayon::scope(|scope| lead(scope, &team, &leader, &result)),
    }
    result
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .expect("the leader returned")
}

/// The pass inside the pool's scope: helpers spawned, then the leader's work on this thread.
fn lead<'s, R: Send, F: FnOnce() -> R + Send>(
    scope: &rayon::Scope<'s>,
    team: &'s Team,
    leader: &Mutex<Option<F>>,
    result: &Mutex<Option<R>>,
) {
    // Helpers that start after the pass ended (their thread was busy) return at once; the
    // scope's owner runs unstarted ones itself while it waits for them.
    for _ in 1..rayon::current_num_threads() {
        scope.spawn(move |_| team.help());
    }
    let _in_team = InTeam::enter();
    let leading = Leading {
        team,
        before: LEADING.with(|l| l.replace(team)),
    };
    let leader = leader
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .expect("the leader runs once");
    *result.lock().unwrap_or_else(|e| e.into_inner()) = Some(leader());
    drop(leading);
}

/// body(i) for every i in 0..count, in parallel: on the team where this thread leads a pass
/// ([`run`]), else on rayon's threads.
pub fn for_each(count: usize, body: impl Fn(usize) + Sync + Send) {
    let team = LEADING.with(|l| l.get());
    if team.is_null() {
        use rayon::prelude::*;
        (0..count).into_par_iter().for_each(body);
    } else {
        // SAFETY: LEADING points to the team of the pass this thread is running (set by `run`
        // for the leader's call and cleared before the team is dropped).
        unsafe { &*team }.for_each(count, &body);
    }
}

/// body(chunk) for every `len`-long chunk of `values` (the last one may be shorter), in
/// parallel as [`for_each`]: the element-wise steps between a pass's products (GELU, layer
/// norms) by rows.
pub fn for_each_chunk(values: &mut [f32], len: usize, body: impl Fn(&mut [f32]) + Sync + Send) {
    let len = len.max(1);
    let total = values.len();
    let start = super::bert::SharedRows(values.as_mut_ptr());
    for_each(total.div_ceil(len), |i| {
        let first = i * len;
        // SAFETY: chunk i is first..min(first + len, total) of `values`, which outlives the
        // loop; each task is given its own chunk, so no two tasks touch the same element.
        let chunk =
            unsafe { std::slice::from_raw_parts_mut(start.at(first), len.min(total - first)) };
        body(chunk);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool_of(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn every_task_of_every_loop_runs_once() {
        let pool = pool_of(3);
        let total = run(Some(&pool), || {
            let mut total = 0usize;
            for count in [0usize, 1, 5, 64, 7, 7, 1000] {
                let runs: Vec<AtomicUsize> = (0..count).map(|_| AtomicUsize::new(0)).collect();
                for_each(count, |i| {
                    runs[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
                total += count;
            }
            total
        });
        assert_eq!(total, 1084);
        // Outside a pass the loop is rayon's.
        let hits = AtomicUsize::new(0);
        for_each(10, |_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn each_chunk_is_given_once() {
        let pool = pool_of(2);
        for threads in [Some(&pool), None] {
            let mut values = vec![1f32; 103];
            run(threads, || {
                for_each_chunk(&mut values, 10, |c| {
                    let len = c.len() as f32;
                    c.iter_mut().for_each(|v| *v += len)
                })
            });
            assert!(values[..100].iter().all(|&v| v == 11.0));
            assert!(values[100..].iter().all(|&v| v == 4.0));
        }
        let mut outside = vec![0f32; 7];
        for_each_chunk(&mut outside, 3, |c| c.fill(c.len() as f32));
        assert_eq!(outside, [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 1.0]);
    }

    #[test]
    fn the_helpers_share_the_tasks() {
        let pool = pool_of(2);
        let threads = run(Some(&pool), || {
            let seen = Mutex::new(std::collections::HashSet::new());
            for _ in 0..50 {
                for_each(8, |_| {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    seen.lock().unwrap().insert(std::thread::current().id());
                });
            }
            seen.into_inner().unwrap().len()
        });
        assert_eq!(threads, 2);
    }

    #[test]
    fn tasks_may_run_rayon_loops_of_their_own() {
        // A task's own rayon loop can make its thread wait inside rayon, where it may pick up
        // an unstarted helper job of the same pass: that job must not start helping on top of
        // the unfinished task (the leader would wait for it forever).
        let pool = pool_of(3);
        let total: u64 = run(Some(&pool), || {
            let sums: Vec<AtomicUsize> = (0..8).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..200 {
                for_each(8, |i| {
                    use rayon::prelude::*;
                    let s: usize = (0..1000usize).into_par_iter().with_max_len(16).sum();
                    sums[i].fetch_add(s, Ordering::Relaxed);
                });
            }
            sums.iter().map(|s| s.load(Ordering::Relaxed) as u64).sum()
        });
        assert_eq!(total, 8 * 200 * 499_500);
    }

    #[test]
    fn a_panicking_task_panics_the_loop_and_ends_the_pass() {
        let pool = pool_of(2);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run(Some(&pool), || {
                for_each(16, |i| {
                    if i == 11 {
                        panic!("task 11");
                    }
                })
            })
        }));
        assert!(outcome.is_err());
        // The pool is free for the next pass.
        assert_eq!(run(Some(&pool), || 7), 7);
    }
}
