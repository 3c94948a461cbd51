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
//!   wait on its own buffer lock forever). [`MemoryStore`] panics when this rule is broken;
//! - pages are freed only when nothing can reach them any more.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::{Deref, DerefMut};

pub type BlockNumber = u32;

/// "No page": the end of a chain, an absent root.
pub const NO_BLOCK: BlockNumber = u32::MAX;

pub trait PageRead {
    type ReadGuard<'a>: Deref<Target = [u8]>
    where
        Self: 'a;

    /// The content area of page `blkno`, share-locked while the guard lives.
    fn read(&self, blkno: BlockNumber) -> Self::ReadGuard<'_>;

    /// Bytes in every page's content area.
    fn page_size(&self) -> usize;
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
    fn free(&self, blocks: &[BlockNumber]);
}

/// Pages in memory, for tests. Reads copy the page; writes copy it back when the guard drops,
/// the way a WAL record publishes a change at once.
pub struct MemoryStore {
    page_size: usize,
    pages: RefCell<Vec<Vec<u8>>>,
    free_list: RefCell<Vec<BlockNumber>>,
    write_locked: RefCell<HashSet<BlockNumber>>,
}

impl MemoryStore {
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

    fn free(&self, blocks: &[BlockNumber]) {
        let mut free = self.free_list.borrow_mut();
        for &b in blocks {
            assert!(!free.contains(&b), "page {b} freed twice");
            free.push(b);
        }
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
        store.free(&[a]);
        let (b, w) = store.allocate();
        assert_eq!(b, a);
        assert_eq!(w[0], 0, "a reused page starts zeroed");
    }

    #[test]
    #[should_panic(expected = "read while its writer holds it")]
    fn reading_a_page_one_is_writing_is_caught() {
        let store = MemoryStore::new(64);
        let (a, _w) = store.allocate();
        let _ = store.read(a);
    }
}
