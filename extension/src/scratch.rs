//! Pages in a temporary file: the kernels' page traits over a Postgres `BufFile`, for data an
//! operation writes and reads back but never keeps (CREATE INDEX's spilled bm25 segments).
//!
//! The file lives in the temporary tablespaces, counts against `temp_file_limit`, and is
//! removed when the store is dropped or, after an ERROR, when the transaction's resource owner
//! is released. Nothing is WAL-logged and no page is shared with another backend: reads copy
//! a page out, and a write guard copies it back when it drops (as the in-memory test store).

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};

use pg_skills_kernels::page::{BlockNumber, Corrupt, PageRead, PageWrite};
use pgrx::{pg_sys, PgSqlErrorCode};

use crate::errors::raise;

pub struct TempFileStore {
    file: *mut pg_sys::BufFile,
    page_size: usize,
    blocks: Cell<BlockNumber>,
    /// Pages whose write guards are alive: a read of one would see its old content.
    writing: RefCell<Vec<BlockNumber>>,
}

fn io_error(what: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_IO_ERROR,
        format!("could not {what} a temporary file of pg_skills"),
        Some("Check the space in the temporary tablespaces and temp_file_limit."),
    )
}

impl TempFileStore {
    /// An empty file; pages of `page_size` bytes, one per block of the file.
    pub fn new(page_size: usize) -> TempFileStore {
        assert!(page_size <= pg_sys::BLCKSZ as usize);
        // SAFETY: creates a file owned by the current resource owner (closed at the latest at
        // the end of the transaction); the pointer stays valid until BufFileClose.
        let file = unsafe { pg_sys::BufFileCreateTemp(false) };
        TempFileStore {
            file,
            page_size,
            blocks: Cell::new(0),
            writing: RefCell::new(Vec::new()),
        }
    }

    /// [`TempFileStore::new`] for data kept across statements until the transaction ends (a
    /// session's bulk inserts): the file belongs to the transaction, not to the statement
    /// running now, and lives in its memory.
    pub fn for_transaction(page_size: usize) -> TempFileStore {
        // SAFETY: both globals are restored before returning; when BufFileCreateTemp raises
        // instead, the abort of the (sub)transaction resets both. The top transaction's memory
        // and resource owner exist inside a transaction, where inserts run.
        unsafe {
            let owner = pg_sys::CurrentResourceOwner;
            let context = pg_sys::MemoryContextSwitchTo(pg_sys::TopTransactionContext);
            pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
            let store = TempFileStore::new(page_size);
            pg_sys::CurrentResourceOwner = owner;
            pg_sys::MemoryContextSwitchTo(context);
            store
        }
    }

    /// Forgets the file without closing it: the transaction's end closes and removes it. For
    /// abort processing, where a write the failed statement left half-done must not be
    /// flushed.
    pub fn abandon(self) {
        std::mem::forget(self);
    }

    fn seek(&self, blkno: BlockNumber) {
        // SAFETY: self.file is open (closed only in Drop); seeking to a block at or before
        // the end of the file is always allowed.
        if blkno > self.blocks.get()
            || unsafe { pg_sys::BufFileSeekBlock(self.file, blkno as std::ffi::c_long) } != 0
        {
            io_error("seek in")
        }
    }

    fn read_page(&self, blkno: BlockNumber) -> Vec<u8> {
        let mut page = vec![0u8; self.page_size];
        self.seek(blkno);
        // SAFETY: page has page_size writable bytes; the file is open.
        if !unsafe { read_exact(self.file, &mut page) } {
            io_error("read")
        }
        page
    }

    fn write_page(&self, blkno: BlockNumber, page: &[u8]) {
        debug_assert_eq!(page.len(), self.page_size);
        self.seek(blkno);
        // A whole block per page, so that every page starts at its block's offset.
        let mut block = vec![0u8; pg_sys::BLCKSZ as usize];
        block[..page.len()].copy_from_slice(page);
        // SAFETY: block has BLCKSZ readable bytes; the file is open. BufFileWrite raises an
        // ERROR when the write fails.
        unsafe { pg_sys::BufFileWrite(self.file, block.as_mut_ptr().cast(), block.len()) };
    }
}

/// Reads `buf.len()` bytes at the file's position; false when the file ends first.
///
/// SAFETY: `file` is an open BufFile.
#[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15"))]
unsafe fn read_exact(file: *mut pg_sys::BufFile, buf: &mut [u8]) -> bool {
    pg_sys::BufFileRead(file, buf.as_mut_ptr().cast(), buf.len()) == buf.len()
}

/// Reads `buf.len()` bytes at the file's position (a short file is an ERROR there).
///
/// SAFETY: `file` is an open BufFile.
#[cfg(not(any(feature = "pg13", feature = "pg14", feature = "pg15")))]
unsafe fn read_exact(file: *mut pg_sys::BufFile, buf: &mut [u8]) -> bool {
    pg_sys::BufFileReadExact(file, buf.as_mut_ptr().cast(), buf.len());
    true
}

impl Drop for TempFileStore {
    fn drop(&mut self) {
        // After an ERROR the transaction's abort closes the file; closing it here while
        // unwinding could act on a BufFile the failed call left half-changed.
        if !std::thread::panicking() {
            // SAFETY: the file is open and nothing uses it after this.
            unsafe { pg_sys::BufFileClose(self.file) };
        }
    }
}

pub struct TempRead(Vec<u8>);

impl Deref for TempRead {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

pub struct TempWrite<'a> {
    store: &'a TempFileStore,
    blkno: BlockNumber,
    page: Vec<u8>,
}

impl Deref for TempWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.page
    }
}

impl DerefMut for TempWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.page
    }
}

impl Drop for TempWrite<'_> {
    fn drop(&mut self) {
        let mut writing = self.store.writing.borrow_mut();
        if let Some(i) = writing.iter().position(|&b| b == self.blkno) {
            writing.swap_remove(i);
        }
        drop(writing);
        if !std::thread::panicking() {
            self.store.write_page(self.blkno, &self.page);
        }
    }
}

impl PageRead for TempFileStore {
    type ReadGuard<'a> = TempRead;

    fn read(&self, blkno: BlockNumber) -> TempRead {
        TempRead(self.read_page(blkno))
    }

    fn page_size(&self) -> usize {
        self.page_size
    }

    fn num_blocks(&self) -> BlockNumber {
        self.blocks.get()
    }

    fn is_being_written(&self, blkno: BlockNumber) -> bool {
        self.writing.borrow().contains(&blkno)
    }
}

impl PageWrite for TempFileStore {
    type WriteGuard<'a> = TempWrite<'a>;

    fn write(&self, blkno: BlockNumber) -> TempWrite<'_> {
        let page = self.read_page(blkno);
        self.writing.borrow_mut().push(blkno);
        TempWrite {
            store: self,
            blkno,
            page,
        }
    }

    fn allocate(&self) -> (BlockNumber, TempWrite<'_>) {
        // The block is written at once, so the file always ends at `blocks` and a later
        // allocation never seeks past its end.
        let blkno = self.blocks.get();
        let page = vec![0u8; self.page_size];
        self.write_page(blkno, &page);
        self.blocks.set(blkno + 1);
        self.writing.borrow_mut().push(blkno);
        (
            blkno,
            TempWrite {
                store: self,
                blkno,
                page,
            },
        )
    }

    /// Scratch pages are never reused: the whole file goes when the operation ends.
    fn free(&self, _blocks: &[BlockNumber]) -> Result<(), Corrupt> {
        Ok(())
    }
}
