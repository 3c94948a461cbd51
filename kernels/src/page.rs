//! The page trait the index algorithms are written against.
//!
//! An index is a sequence of fixed-size pages addressed by block number. The extension maps this
//! trait onto Postgres buffers (every write guard is one generic WAL record); [`MemoryStore`] maps
//! it onto plain memory for unit tests. The algorithms never see Postgres.
//!
//! Rules the algorithms follow, because the Postgres mapping needs them:
//! - a page is read through a guard and written through a guard; a write becomes durable (and
//!   visible to the WAL) when its guard drops, so a change that must survive a crash as a unit
//!   fits in one page;
//! - a page is never read while the same caller holds a write guard on it (in Postgres that would
//!   wait on its own buffer lock forever). [`MemoryStore`] panics when this rule is broken; a
//!   link read from damaged pages can still name such a page, which [`check_block_to_read`]
//!   refuses as corruption;
//! - pages are freed only when nothing can reach them any more;
//! - page contents are never trusted: a block number is checked against the relation before it
//!   is read ([`check_block`], [`Chain`]), and what a page says is checked before it is used.
//!   What fails a check is a [`Corrupt`] error, never a panic, a loop or a huge allocation.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::ops::{Deref, DerefMut};

pub type BlockNumber = u32;

/// "No page": the end of a chain, an absent root.
pub const NO_BLOCK: BlockNumber = u32::MAX;

/// Index pages that cannot be what the index wrote: what is wrong, and on which page when known.
/// The extension reports it as an ERROR (SQLSTATE XX002) that asks for a REINDEX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corrupt {
    pub block: Option<BlockNumber>,
    pub what: String,
}

impl Corrupt {
    pub fn new(what: impl fmt::Display) -> Corrupt {
        Corrupt {
            block: None,
            what: what.to_string(),
        }
    }

    /// Names the page, unless a deeper check already did (that one is the more precise).
    pub fn in_block(mut self, block: BlockNumber) -> Corrupt {
        self.block.get_or_insert(block);
        self
    }
}

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.block {
            Some(b) => write!(f, "data corruption in block {b}: {}", self.what),
            None => write!(f, "data corruption: {}", self.what),
        }
    }
}

impl std::error::Error for Corrupt {}

/// `Err(Corrupt)` with this description.
pub fn corrupt<T>(what: impl fmt::Display) -> Result<T, Corrupt> {
    Err(Corrupt::new(what))
}

/// [`Corrupt::in_block`] for results.
pub trait InBlock {
    fn in_block(self, block: BlockNumber) -> Self;
}

impl<T> InBlock for Result<T, Corrupt> {
    fn in_block(self, block: BlockNumber) -> Self {
        self.map_err(|e| e.in_block(block))
    }
}

pub trait PageRead {
    type ReadGuard<'a>: Deref<Target = [u8]>
    where
        Self: 'a;

    /// The content area of page `blkno`, share-locked while the guard lives. Callers pass only
    /// block numbers [`check_block`] or a [`Chain`] accepted.
    fn read(&self, blkno: BlockNumber) -> Self::ReadGuard<'_>;

    /// Bytes in every page's content area.
    fn page_size(&self) -> usize;

    /// Pages in the relation now (it only grows while the index is open).
    fn num_blocks(&self) -> BlockNumber;

    /// Whether `blkno` is a page of the relation. Stores for which the size is costly to ask
    /// override this with a cached size, refreshed when a block lies past it.
    fn has_block(&self, blkno: BlockNumber) -> bool {
        blkno < self.num_blocks()
    }

    /// Whether this caller holds a write guard on `blkno` now. Stores without writers say
    /// false.
    fn is_being_written(&self, _blkno: BlockNumber) -> bool {
        false
    }
}

/// `blkno`, when it can be a page of this structure: at or past `floor` (the pages before it —
/// the metapage, fixed areas — are never linked to) and inside the relation. `what` names the
/// link in the error.
pub fn check_block<S: PageRead>(
    store: &S,
    blkno: BlockNumber,
    floor: BlockNumber,
    what: &str,
) -> Result<BlockNumber, Corrupt> {
    if blkno == NO_BLOCK {
        return corrupt(format_args!("{what} is missing"));
    }
    if blkno < floor || !store.has_block(blkno) {
        return corrupt(format_args!(
            "{what} points to block {blkno}, outside the index's pages {floor}..{}",
            store.num_blocks()
        ));
    }
    Ok(blkno)
}

/// [`check_block`] for a page about to be read: also refused when the caller holds it for
/// writing. A link in damaged pages can name the page a merge is writing, and reading it
/// would wait on the caller's own lock (in Postgres, uninterruptibly). `check_block` alone
/// also vets pages about to be written, some of them already held.
pub fn check_block_to_read<S: PageRead>(
    store: &S,
    blkno: BlockNumber,
    floor: BlockNumber,
    what: &str,
) -> Result<BlockNumber, Corrupt> {
    check_block(store, blkno, floor, what)?;
    if store.is_being_written(blkno) {
        return corrupt(format_args!(
            "{what} points to block {blkno}, a page being written"
        ));
    }
    Ok(blkno)
}

/// One walk over linked pages: every block is checked like [`check_block`] and may be visited
/// only once. Pages of one chain (or of one structure made of chains) are distinct, so a repeat
/// is a cycle — and since the blocks are distinct and inside the relation, no walk can be longer
/// than the relation, whatever the pages say.
pub struct Chain {
    what: &'static str,
    floor: BlockNumber,
    seen: HashSet<BlockNumber>,
}

impl Chain {
    pub fn new(what: &'static str, floor: BlockNumber) -> Chain {
        Chain {
            what,
            floor,
            seen: HashSet::new(),
        }
    }

    /// Accepts `blkno` as the walk's next page, or says why it cannot be. Also a cancellation
    /// point: a walk may be as long as the relation. Callers visit before they lock the page,
    /// so a cancel never unwinds with a half-made change.
    pub fn visit<S: PageRead>(
        &mut self,
        store: &S,
        blkno: BlockNumber,
    ) -> Result<BlockNumber, Corrupt> {
        crate::interrupt::check();
        check_block(store, blkno, self.floor, self.what)?;
        if !self.seen.insert(blkno) {
            return corrupt(format_args!(
                "{} reaches block {blkno} twice (a cycle)",
                self.what
            ));
        }
        Ok(blkno)
    }

    /// Pages visited so far.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

pub trait PageWrite: PageRead {
    type WriteGuard<'a>: DerefMut<Target = [u8]>
    where
        Self: 'a;

    /// Page `blkno` locked for change; the change is logged when the guard drops.
    fn write(&self, blkno: BlockNumber) -> Self::WriteGuard<'_>;

    /// A new zero-filled page (a freed one or a new one at the end), locked for change.
    fn allocate(&self) -> (BlockNumber, Self::WriteGuard<'_>);

    /// Makes pages available to [`PageWrite::allocate`]. Callers guarantee nothing reaches them.
    /// A page that is not in use (already free, or not a page) is corruption: freeing it again
    /// would hand it to two new owners.
    fn free(&self, blocks: &[BlockNumber]) -> Result<(), Corrupt>;
}

/// Pages in memory, for tests. Reads copy the page; writes copy it back when the guard drops,
/// the way a WAL record publishes a change at once. A clone is a snapshot (tests damage copies
/// of one built index).
#[derive(Clone)]
pub struct MemoryStore {
    page_size: usize,
    pages: RefCell<Vec<Vec<u8>>>,
    free_list: RefCell<Vec<BlockNumber>>,
    write_locked: RefCell<HashSet<BlockNumber>>,
}

impl MemoryStore {
    /// Overwrites page `blkno` (tests that damage an index on purpose).
    pub fn overwrite(&self, blkno: BlockNumber, f: impl FnOnce(&mut [u8])) {
        f(&mut self.pages.borrow_mut()[blkno as usize]);
    }

    pub fn new(page_size: usize) -> Self {
        MemoryStore {
            page_size,
            pages: RefCell::new(Vec::new()),
            free_list: RefCell::new(Vec::new()),
            write_locked: RefCell::new(HashSet::new()),
        }
    }

    /// Pages in the store, free ones included (the relation size).
    pub fn num_pages(&self) -> usize {
        self.pages.borrow().len()
    }

    pub fn num_free(&self) -> usize {
        self.free_list.borrow().len()
    }

    fn lock_for_write(&self, blkno: BlockNumber) {
        assert!(
            self.write_locked.borrow_mut().insert(blkno),
            "page {blkno} write-locked twice by one caller"
        );
    }
}

pub struct MemoryRead(Vec<u8>);

impl Deref for MemoryRead {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

pub struct MemoryWrite<'a> {
    store: &'a MemoryStore,
    blkno: BlockNumber,
    data: Vec<u8>,
}

impl Deref for MemoryWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl DerefMut for MemoryWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl Drop for MemoryWrite<'_> {
    fn drop(&mut self) {
        let mut pages = self.store.pages.borrow_mut();
        pages[self.blkno as usize].copy_from_slice(&self.data);
        self.store.write_locked.borrow_mut().remove(&self.blkno);
    }
}

impl PageRead for MemoryStore {
    type ReadGuard<'a> = MemoryRead;

    fn read(&self, blkno: BlockNumber) -> MemoryRead {
        assert!(
            !self.write_locked.borrow().contains(&blkno),
            "page {blkno} read while its writer holds it"
        );
        let pages = self.pages.borrow();
        let page = pages
            .get(blkno as usize)
            .unwrap_or_else(|| panic!("page {blkno} does not exist"));
        MemoryRead(page.clone())
    }

    fn page_size(&self) -> usize {
        self.page_size
    }

    fn num_blocks(&self) -> BlockNumber {
        self.pages.borrow().len() as BlockNumber
    }

    fn is_being_written(&self, blkno: BlockNumber) -> bool {
        self.write_locked.borrow().contains(&blkno)
    }
}

/// Pages read in place and never written: a built index as a search in the server reads it, a
/// buffer's page rather than a copy of it ([`MemoryStore`] copies each page it reads, as a test
/// store may). For benchmarks of searches over a built index ([`MemoryStore::freeze`]).
pub struct FrozenStore {
    page_size: usize,
    pages: Vec<Vec<u8>>,
}

impl MemoryStore {
    /// The store's pages, read in place from now on.
    pub fn freeze(self) -> FrozenStore {
        assert!(
            self.write_locked.borrow().is_empty(),
            "a page is being written"
        );
        FrozenStore {
            page_size: self.page_size,
            pages: self.pages.into_inner(),
        }
    }
}

impl PageRead for FrozenStore {
    type ReadGuard<'a> = &'a [u8];

    fn read(&self, blkno: BlockNumber) -> &[u8] {
        self.pages
            .get(blkno as usize)
            .unwrap_or_else(|| panic!("page {blkno} does not exist"))
    }

    fn page_size(&self) -> usize {
        self.page_size
    }

    fn num_blocks(&self) -> BlockNumber {
        self.pages.len() as BlockNumber
    }
}

impl PageWrite for MemoryStore {
    type WriteGuard<'a> = MemoryWrite<'a>;

    fn write(&self, blkno: BlockNumber) -> MemoryWrite<'_> {
        self.lock_for_write(blkno);
        let data = self.pages.borrow()[blkno as usize].clone();
        MemoryWrite {
            store: self,
            blkno,
            data,
        }
    }

    fn allocate(&self) -> (BlockNumber, MemoryWrite<'_>) {
        let reused = self.free_list.borrow_mut().pop();
        let blkno = match reused {
            Some(b) => b,
            None => {
                let mut pages = self.pages.borrow_mut();
                pages.push(vec![0; self.page_size]);
                (pages.len() - 1) as BlockNumber
            }
        };
        self.lock_for_write(blkno);
        (
            blkno,
            MemoryWrite {
                store: self,
                blkno,
                data: vec![0; self.page_size],
            },
        )
    }

    fn free(&self, blocks: &[BlockNumber]) -> Result<(), Corrupt> {
        let mut free = self.free_list.borrow_mut();
        for &b in blocks {
            if free.contains(&b) || b >= self.num_blocks() {
                return Err(Corrupt::new("freeing a page that is not in use").in_block(b));
            }
            free.push(b);
        }
        Ok(())
    }
}

/// Helpers for tests that damage pages on purpose (both indexes' corruption tests).
#[cfg(test)]
pub(crate) mod fuzz {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::rng::SplitMix64;

    /// Longest a batch of operations on damaged copies may take; a loop on damaged links
    /// would run past it.
    pub const DEADLINE: Duration = Duration::from_secs(120);

    /// Damages one byte of `page`: most often in the first 64 bytes, where headers, counts
    /// and links are; sometimes a whole 4-byte field set to all ones or zeros (NO_BLOCK,
    /// absurd counts, block 0).
    pub fn damage(page: &mut [u8], rng: &mut SplitMix64) {
        let hot = 64.min(page.len());
        let at = if rng.below(3) > 0 {
            rng.below(hot as u64) as usize
        } else {
            rng.below(page.len() as u64) as usize
        };
        match rng.below(4) {
            0 => page[at] ^= 1 << rng.below(8),
            1 => page[at] = rng.below(256) as u8,
            _ => {
                let at = (at & !3).min(page.len() - 4);
                let v = if rng.below(2) == 0 { 0xff } else { 0 };
                page[at..at + 4].fill(v);
            }
        }
    }

    /// Runs `f` in a thread and returns its result; fails the test when `f` panics (the one
    /// use of `catch_unwind`: to say which case panicked) or outlives [`DEADLINE`].
    pub fn bounded<T: Send + 'static>(what: String, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        });
        match rx.recv_timeout(DEADLINE) {
            Ok(Ok(v)) => v,
            Ok(Err(panic)) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{what}: panicked: {msg}")
            }
            Err(_) => panic!("{what}: still running after {DEADLINE:?} (a loop?)"),
        }
    }

    /// Seeds of a fuzz test; `PGS_FUZZ_SEED=<seed>` replays one.
    pub fn seeds(n: u64) -> Vec<u64> {
        match std::env::var("PGS_FUZZ_SEED") {
            Ok(s) => vec![s.parse().expect("PGS_FUZZ_SEED is a number")],
            Err(_) => (1..=n).collect(),
        }
    }

    /// Outcomes of operations on a (possibly damaged) index: answered, or reported corrupt.
    #[derive(Default, Debug)]
    pub struct Tally {
        pub ok: usize,
        pub corrupt: usize,
    }

    impl Tally {
        /// Counts `r`; an answer must pass `plausible`, an error must say it is corruption.
        pub fn note<T, E: std::fmt::Display>(
            &mut self,
            r: Result<T, E>,
            plausible: impl FnOnce(&T),
        ) {
            match r {
                Ok(v) => {
                    plausible(&v);
                    self.ok += 1;
                }
                Err(e) => {
                    let text = e.to_string();
                    assert!(
                        text.contains("data corruption") || text.contains("REINDEX"),
                        "{text}"
                    );
                    self.corrupt += 1;
                }
            }
        }

        pub fn add(&mut self, other: Tally) {
            self.ok += other.ok;
            self.corrupt += other.corrupt;
        }
    }

    /// Runs `exercise` on copies of `base` damaged at random, for each of `seeds` seeds: one
    /// page at a time (six copies per page, 1-3 damaged bytes each: reaches the deep checks),
    /// then every page at once (four copies), each batch under [`bounded`]'s deadline.
    pub fn damage_every_page(
        base: &super::MemoryStore,
        seeds: u64,
        exercise: fn(&super::MemoryStore) -> Tally,
    ) -> Tally {
        let pages = base.num_pages() as super::BlockNumber;
        let mut total = Tally::default();
        for seed in self::seeds(seeds) {
            for blkno in 0..pages {
                let base = base.clone();
                total.add(bounded(format!("seed {seed} page {blkno}"), move || {
                    let mut t = Tally::default();
                    let mut rng = SplitMix64(seed * 1_000_003 + blkno as u64);
                    for _ in 0..6 {
                        let store = base.clone();
                        let flips = 1 + rng.below(3);
                        store.overwrite(blkno, |page| {
                            (0..flips).for_each(|_| damage(page, &mut rng))
                        });
                        t.add(exercise(&store));
                    }
                    t
                }));
            }
            let base = base.clone();
            total.add(bounded(format!("seed {seed} every page"), move || {
                let mut t = Tally::default();
                let mut rng = SplitMix64(seed);
                for _ in 0..4 {
                    let store = base.clone();
                    for blkno in 0..pages {
                        store.overwrite(blkno, |page| damage(page, &mut rng));
                    }
                    t.add(exercise(&store));
                }
                t
            }));
        }
        println!(
            "{} operations answered, {} reported corruption",
            total.ok, total.corrupt
        );
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_publish_on_drop_and_freed_pages_are_reused() {
        let store = MemoryStore::new(64);
        let (a, mut w) = store.allocate();
        w[0] = 7;
        assert_eq!(store.num_pages(), 1);
        drop(w);
        assert_eq!(store.read(a)[0], 7);
        store.free(&[a]).unwrap();
        assert!(store.free(&[a]).is_err(), "a page freed twice");
        let (b, w) = store.allocate();
        assert_eq!(b, a);
        assert_eq!(w[0], 0, "a reused page starts zeroed");
    }

    #[test]
    fn chains_refuse_cycles_the_floor_and_blocks_past_the_end() {
        let store = MemoryStore::new(64);
        for _ in 0..3 {
            drop(store.allocate());
        }
        let mut chain = Chain::new("test chain", 1);
        assert_eq!(chain.visit(&store, 1), Ok(1));
        assert_eq!(chain.visit(&store, 2), Ok(2));
        assert!(chain.visit(&store, 1).unwrap_err().what.contains("twice"));
        assert!(chain.visit(&store, 0).unwrap_err().what.contains("outside"));
        assert!(chain.visit(&store, 3).unwrap_err().what.contains("outside"));
        assert!(chain
            .visit(&store, NO_BLOCK)
            .unwrap_err()
            .what
            .contains("missing"));
        let e = Corrupt::new("x").in_block(7).in_block(9);
        assert_eq!(e.to_string(), "data corruption in block 7: x");
    }

    #[test]
    #[should_panic(expected = "read while its writer holds it")]
    fn reading_a_page_one_is_writing_is_caught() {
        let store = MemoryStore::new(64);
        let (a, _w) = store.allocate();
        let _ = store.read(a);
    }

    /// A damaged link that names a page its reader holds for writing is an error, not a read
    /// that would wait on its own lock (the random-damage fuzz met one in a merge, seed 13).
    #[test]
    fn a_link_to_a_page_being_written_is_not_read() {
        let store = MemoryStore::new(64);
        let (a, w) = store.allocate();
        let (b, _) = store.allocate();
        let err = check_block_to_read(&store, a, 0, "a posting list").unwrap_err();
        assert!(err.what.contains("a page being written"), "{err}");
        assert_eq!(check_block_to_read(&store, b, 0, "a posting list"), Ok(b));
        assert_eq!(check_block(&store, a, 0, "a page to write"), Ok(a));
        drop(w);
        assert_eq!(check_block_to_read(&store, a, 0, "a posting list"), Ok(a));
    }

    /// A frozen store reads the pages the store held, in place.
    #[test]
    fn a_frozen_store_reads_the_same_pages() {
        let store = MemoryStore::new(64);
        for fill in [7u8, 9, 11] {
            let (_, mut w) = store.allocate();
            w.fill(fill);
        }
        let copies: Vec<Vec<u8>> = (0..3).map(|b| store.read(b).to_vec()).collect();
        let frozen = store.freeze();
        assert_eq!(frozen.num_blocks(), 3);
        assert_eq!(frozen.page_size(), 64);
        for (b, copy) in copies.iter().enumerate() {
            assert_eq!(&*frozen.read(b as BlockNumber), copy.as_slice());
        }
        assert!(std::ptr::eq(frozen.read(1), frozen.read(1)), "not a copy");
    }
}
