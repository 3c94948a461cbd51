//! The page trait of `pg_skills_kernels::page` mapped onto Postgres buffers.
//!
//! Every page carries a 4-byte marker in its special space: in use or free. A freed page is
//! marked free (WAL-logged) before it goes into the free space map, and [`BufferStore::allocate`]
//! only reuses pages that are marked free, because the free space map itself is not crash-safe.
//! `pd_lower` is set to the end of the content area so generic WAL and full-page images never
//! treat any content byte as the unused hole.
//!
//! Two modes: `Logged` (every write guard is one generic WAL record; aborted on panic) and
//! `Build` (CREATE INDEX writes pages without WAL and logs the whole relation once at the end, as
//! pgvector does).

use std::ops::{Deref, DerefMut};

use pg_skills_kernels::page::{BlockNumber, PageRead, PageWrite};
use pgrx::pg_sys;

const MARKER_IN_USE: u32 = 0x5053_4b55; // "PSKU"
const MARKER_FREE: u32 = 0x5053_4b46; // "PSKF"
const SPECIAL_SIZE: usize = 8; // the marker, MAXALIGNed

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Logged,
    Build,
}

pub struct BufferStore {
    rel: pg_sys::Relation,
    fork: pg_sys::ForkNumber::Type,
    mode: Mode,
    /// A page count seen earlier: an index never shrinks, so a page below it exists. Asking
    /// the kernel for the size on every read (an lseek) cost ~8 % of a query.
    known_blocks: std::cell::Cell<BlockNumber>,
}

/// Bytes of content per page: the block minus the page header and the special space.
pub fn content_size() -> usize {
    pg_sys::BLCKSZ as usize
        - unsafe { pg_sys::MAXALIGN(std::mem::offset_of!(pg_sys::PageHeaderData, pd_linp)) }
        - SPECIAL_SIZE
}

/// SAFETY: `page` points at a whole block owned (locked) by the caller.
unsafe fn marker(page: pg_sys::Page) -> u32 {
    let special = pg_sys::PageGetSpecialPointer(page) as *const u32;
    special.read_unaligned()
}

/// SAFETY: as for [`marker`], and the caller holds the buffer exclusively.
unsafe fn set_marker(page: pg_sys::Page, value: u32) {
    let special = pg_sys::PageGetSpecialPointer(page) as *mut u32;
    special.write_unaligned(value);
}

/// SAFETY: as for [`set_marker`]. Formats a zeroed page whose whole content area counts as used.
unsafe fn format_page(page: pg_sys::Page) {
    pg_sys::PageInit(page, pg_sys::BLCKSZ as usize, SPECIAL_SIZE);
    let header = page as *mut pg_sys::PageHeaderData;
    (*header).pd_lower = (*header).pd_upper;
    set_marker(page, MARKER_IN_USE);
}

/// SAFETY: as for [`marker`]; the slice lives as long as the caller holds the buffer.
unsafe fn content<'a>(page: pg_sys::Page) -> &'a mut [u8] {
    std::slice::from_raw_parts_mut(pg_sys::PageGetContents(page) as *mut u8, content_size())
}

impl BufferStore {
    /// SAFETY: `rel` is an open index relation that outlives the store.
    pub unsafe fn new(rel: pg_sys::Relation, mode: Mode) -> Self {
        BufferStore {
            rel,
            fork: pg_sys::ForkNumber::MAIN_FORKNUM,
            mode,
            known_blocks: std::cell::Cell::new(0),
        }
    }

    /// SAFETY: as for [`BufferStore::new`].
    pub unsafe fn init_fork(rel: pg_sys::Relation) -> Self {
        BufferStore {
            rel,
            fork: pg_sys::ForkNumber::INIT_FORKNUM,
            mode: Mode::Build,
            known_blocks: std::cell::Cell::new(0),
        }
    }

    pub fn num_blocks(&self) -> BlockNumber {
        unsafe { pg_sys::RelationGetNumberOfBlocksInFork(self.rel, self.fork) }
    }

    fn read_buffer(&self, blkno: BlockNumber) -> pg_sys::Buffer {
        if blkno >= self.known_blocks.get() {
            let nblocks = self.num_blocks();
            if blkno >= nblocks {
                pg_skills_kernels::bm25index::format::corrupt(format_args!(
                    "page {blkno} is past the end of the index ({nblocks} pages)"
                ));
            }
            self.known_blocks.set(nblocks);
        }
        unsafe {
            pg_sys::ReadBufferExtended(
                self.rel,
                self.fork,
                blkno,
                pg_sys::ReadBufferMode::RBM_NORMAL,
                std::ptr::null_mut(),
            )
        }
    }

    /// Writes the whole relation to WAL once (the end of a build without per-page WAL).
    pub fn log_all(&self) {
        let nblocks = self.num_blocks();
        if nblocks > 0 && (self.fork == pg_sys::ForkNumber::INIT_FORKNUM || needs_wal(self.rel)) {
            unsafe { pg_sys::log_newpage_range(self.rel, self.fork, 0, nblocks, true) };
        }
    }

    /// A new page at the end of the relation, exclusively locked.
    fn extend(&self) -> pg_sys::Buffer {
        unsafe {
            pg_sys::LockRelationForExtension(self.rel, pg_sys::ExclusiveLock as pg_sys::LOCKMODE);
            let buf = pg_sys::ReadBufferExtended(
                self.rel,
                self.fork,
                pg_sys::InvalidBlockNumber,
                pg_sys::ReadBufferMode::RBM_NORMAL,
                std::ptr::null_mut(),
            );
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
            pg_sys::UnlockRelationForExtension(self.rel, pg_sys::ExclusiveLock as pg_sys::LOCKMODE);
            buf
        }
    }

    /// A page from the free space map that really is free, exclusively locked.
    fn reuse(&self) -> Option<pg_sys::Buffer> {
        if self.fork != pg_sys::ForkNumber::MAIN_FORKNUM {
            return None;
        }
        loop {
            let blkno = unsafe { pg_sys::GetFreeIndexPage(self.rel) };
            if blkno == pg_sys::InvalidBlockNumber {
                return None;
            }
            unsafe {
                let buf = pg_sys::ReadBufferExtended(
                    self.rel,
                    self.fork,
                    blkno,
                    pg_sys::ReadBufferMode::RBM_NORMAL,
                    std::ptr::null_mut(),
                );
                if pg_sys::ConditionalLockBuffer(buf) {
                    let page = pg_sys::BufferGetPage(buf);
                    if pg_sys::PageIsNew(page) || marker(page) == MARKER_FREE {
                        return Some(buf);
                    }
                    pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_UNLOCK as i32);
                }
                pg_sys::ReleaseBuffer(buf);
            }
        }
    }

    fn begin_write(&self, buf: pg_sys::Buffer, fresh: bool) -> BufferWrite<'_> {
        unsafe {
            let (state, page) = match self.mode {
                Mode::Logged => {
                    let state = pg_sys::GenericXLogStart(self.rel);
                    let flags = if fresh {
                        pg_sys::GENERIC_XLOG_FULL_IMAGE as i32
                    } else {
                        0
                    };
                    (state, pg_sys::GenericXLogRegisterBuffer(state, buf, flags))
                }
                Mode::Build => (std::ptr::null_mut(), pg_sys::BufferGetPage(buf)),
            };
            if fresh {
                format_page(page);
            } else if marker(page) != MARKER_IN_USE {
                if !state.is_null() {
                    pg_sys::GenericXLogAbort(state);
                }
                pg_sys::UnlockReleaseBuffer(buf);
                pg_skills_kernels::bm25index::format::corrupt("write to a page that is not in use");
            }
            BufferWrite {
                buf,
                state,
                data: content(page),
            }
        }
    }
}

/// Whether changes to `rel` must be WAL-logged (Postgres' RelationNeedsWAL).
pub fn needs_wal(rel: pg_sys::Relation) -> bool {
    unsafe {
        let permanent = (*(*rel).rd_rel).relpersistence as u8 == pg_sys::RELPERSISTENCE_PERMANENT;
        let created_here = (*rel).rd_createSubid != 0 || (*rel).rd_firstRelfilenodeSubid != 0;
        permanent
            && (pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32 || !created_here)
    }
}

pub struct BufferRead {
    buf: pg_sys::Buffer,
    data: &'static [u8],
}

impl Deref for BufferRead {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.data
    }
}

impl Drop for BufferRead {
    fn drop(&mut self) {
        // SAFETY: the buffer was pinned and share-locked in `read`.
        unsafe { pg_sys::UnlockReleaseBuffer(self.buf) };
    }
}

/// `'s`: the store's borrow; the page content is valid while the buffer stays locked.
pub struct BufferWrite<'s> {
    buf: pg_sys::Buffer,
    state: *mut pg_sys::GenericXLogState,
    data: &'s mut [u8],
}

impl Deref for BufferWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.data
    }
}

impl DerefMut for BufferWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.data
    }
}

impl Drop for BufferWrite<'_> {
    fn drop(&mut self) {
        // SAFETY: the buffer is pinned and exclusively locked since `begin_write`; a record is
        // finished only when the change is complete (not while unwinding from a panic).
        unsafe {
            if self.state.is_null() {
                pg_sys::MarkBufferDirty(self.buf);
            } else if std::thread::panicking() {
                pg_sys::GenericXLogAbort(self.state);
            } else {
                pg_sys::GenericXLogFinish(self.state);
            }
            pg_sys::UnlockReleaseBuffer(self.buf);
        }
    }
}

impl PageRead for BufferStore {
    type ReadGuard<'a> = BufferRead;

    fn read(&self, blkno: BlockNumber) -> BufferRead {
        let buf = self.read_buffer(blkno);
        unsafe {
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
            let page = pg_sys::BufferGetPage(buf);
            if pg_sys::PageIsNew(page) || marker(page) != MARKER_IN_USE {
                pg_sys::UnlockReleaseBuffer(buf);
                pg_skills_kernels::bm25index::format::corrupt(format_args!(
                    "page {blkno} is not in use"
                ));
            }
            // SAFETY: valid while the buffer stays pinned and locked, i.e. for the guard's life.
            BufferRead {
                buf,
                data: content(page),
            }
        }
    }

    fn page_size(&self) -> usize {
        content_size()
    }
}

impl PageWrite for BufferStore {
    type WriteGuard<'a> = BufferWrite<'a>;

    fn write(&self, blkno: BlockNumber) -> BufferWrite<'_> {
        let buf = self.read_buffer(blkno);
        unsafe { pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32) };
        self.begin_write(buf, false)
    }

    fn allocate(&self) -> (BlockNumber, BufferWrite<'_>) {
        let buf = self.reuse().unwrap_or_else(|| self.extend());
        let blkno = unsafe { pg_sys::BufferGetBlockNumber(buf) };
        (blkno, self.begin_write(buf, true))
    }

    fn free(&self, blocks: &[BlockNumber]) {
        for &blkno in blocks {
            let buf = self.read_buffer(blkno);
            unsafe {
                pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
                match self.mode {
                    Mode::Logged => {
                        let state = pg_sys::GenericXLogStart(self.rel);
                        let page = pg_sys::GenericXLogRegisterBuffer(state, buf, 0);
                        set_marker(page, MARKER_FREE);
                        pg_sys::GenericXLogFinish(state);
                    }
                    Mode::Build => {
                        set_marker(pg_sys::BufferGetPage(buf), MARKER_FREE);
                        pg_sys::MarkBufferDirty(buf);
                    }
                }
                pg_sys::UnlockReleaseBuffer(buf);
                if self.fork == pg_sys::ForkNumber::MAIN_FORKNUM {
                    pg_sys::RecordFreeIndexPage(self.rel, blkno);
                }
            }
        }
        if !blocks.is_empty() && self.fork == pg_sys::ForkNumber::MAIN_FORKNUM {
            // Propagate to the map's upper levels, or GetFreeIndexPage would not see the pages
            // until the next VACUUM.
            unsafe { pg_sys::IndexFreeSpaceMapVacuum(self.rel) };
        }
    }
}
