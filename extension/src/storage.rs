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
//!
//! Damage: a page header this module did not write (its special-space offset, bounds or size
//! differ from [`format_page`]'s) or a page that is not in use is an ERROR with SQLSTATE XX001
//! (data_corrupted) before any offset of it is followed; damage the index code finds in page
//! contents comes back as a [`Corrupt`] error and becomes XX002 (index_corrupted) through
//! [`OrRaise`]. Both name the index and hint at REINDEX.

use std::ffi::{CStr, CString};
use std::ops::{Deref, DerefMut};

use pg_skills_kernels::layout::MetaError;
use pg_skills_kernels::page::{BlockNumber, Corrupt, PageRead, PageWrite};
use pgrx::{pg_sys, PgSqlErrorCode};

use crate::errors::raise;

const MARKER_IN_USE: u32 = 0x5053_4b55; // "PSKU"
const MARKER_FREE: u32 = 0x5053_4b46; // "PSKF"
const SPECIAL_SIZE: usize = 8; // the marker, MAXALIGNed
/// Where [`format_page`] puts the special space (`pd_special`).
const SPECIAL_OFFSET: usize = pg_sys::BLCKSZ as usize - SPECIAL_SIZE;

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
    /// Pages this store's write guards hold now (a few at most): a read of one would wait on
    /// its own exclusive lock forever, so it is refused as corruption.
    writing: std::cell::RefCell<Vec<BlockNumber>>,
}

/// Bytes of content per page: the block minus the page header and the special space.
pub fn content_size() -> usize {
    pg_sys::BLCKSZ as usize
        - unsafe { pg_sys::MAXALIGN(std::mem::offset_of!(pg_sys::PageHeaderData, pd_linp)) }
        - SPECIAL_SIZE
}

/// Whether the page header is the one [`format_page`] writes: the block's size, the special
/// space where it belongs, no free hole. Only then are the marker and the content area where
/// this module reads them; a garbage `pd_special` would otherwise send a read past the block.
///
/// SAFETY: `page` points at a whole block owned (locked) by the caller.
unsafe fn header_is_ours(page: pg_sys::Page) -> bool {
    let h = &*(page as *const pg_sys::PageHeaderData);
    let page_size = (h.pd_pagesize_version & 0xff00) as usize;
    page_size == pg_sys::BLCKSZ as usize
        && h.pd_special as usize == SPECIAL_OFFSET
        && h.pd_upper == h.pd_special
        && h.pd_lower == h.pd_upper
}

/// The in-use/free marker, or None when the header is not ours (or the page is new).
///
/// SAFETY: as for [`header_is_ours`].
unsafe fn marker(page: pg_sys::Page) -> Option<u32> {
    if !header_is_ours(page) {
        return None;
    }
    let special = (page as *const u8).add(SPECIAL_OFFSET) as *const u32;
    Some(special.read_unaligned())
}

/// SAFETY: as for [`marker`], the caller holds the buffer exclusively, and the page was
/// formatted by [`format_page`] (its header checked, or just written).
unsafe fn set_marker(page: pg_sys::Page, value: u32) {
    debug_assert!(header_is_ours(page));
    let special = (page as *mut u8).add(SPECIAL_OFFSET) as *mut u32;
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
            writing: Default::default(),
        }
    }

    /// SAFETY: as for [`BufferStore::new`].
    pub unsafe fn init_fork(rel: pg_sys::Relation) -> Self {
        BufferStore {
            rel,
            fork: pg_sys::ForkNumber::INIT_FORKNUM,
            mode: Mode::Build,
            known_blocks: std::cell::Cell::new(0),
            writing: Default::default(),
        }
    }

    pub fn num_blocks(&self) -> BlockNumber {
        unsafe { pg_sys::RelationGetNumberOfBlocksInFork(self.rel, self.fork) }
    }

    /// ERROR XX001 for page `blkno`, which is not a page this module wrote (the index code
    /// checks links before it follows them; this is the last line).
    fn page_corrupted(&self, blkno: BlockNumber, what: &str) -> ! {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!(
                "index \"{}\": block {blkno} {what}",
                crate::am::relation_name(self.rel)
            ),
            Some(&reindex_hint(self.rel)),
        )
    }

    fn read_buffer(&self, blkno: BlockNumber) -> pg_sys::Buffer {
        if !self.has_block(blkno) {
            let what = format!("is past the end of the index ({} pages)", self.num_blocks());
            self.page_corrupted(blkno, &what);
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
                    // A page the free space map names but that is neither new nor marked free
                    // (a stale map, or damage) is skipped, never overwritten.
                    if pg_sys::PageIsNew(page) || marker(page) == Some(MARKER_FREE) {
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
            } else if marker(page) != Some(MARKER_IN_USE) {
                if !state.is_null() {
                    pg_sys::GenericXLogAbort(state);
                }
                let blkno = pg_sys::BufferGetBlockNumber(buf);
                pg_sys::UnlockReleaseBuffer(buf);
                self.page_corrupted(blkno, "is not an index page in use (a write to it)");
            }
            let blkno = pg_sys::BufferGetBlockNumber(buf);
            self.writing.borrow_mut().push(blkno);
            BufferWrite {
                buf,
                state,
                data: content(page),
                store: self,
                blkno,
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
    store: &'s BufferStore,
    blkno: BlockNumber,
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
        let mut writing = self.store.writing.borrow_mut();
        if let Some(at) = writing.iter().position(|&b| b == self.blkno) {
            writing.swap_remove(at);
        }
    }
}

impl PageRead for BufferStore {
    type ReadGuard<'a> = BufferRead;

    fn read(&self, blkno: BlockNumber) -> BufferRead {
        // A damaged link can name a page this store is writing (a merge's output page): its
        // share lock would wait on this backend's own exclusive lock, forever and deaf to
        // cancels. The index code's reads check this first (`check_block_to_read`); this is
        // the last line for any that does not.
        if self.is_being_written(blkno) {
            self.page_corrupted(blkno, "is read while this backend writes it");
        }
        let buf = self.read_buffer(blkno);
        unsafe {
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
            let page = pg_sys::BufferGetPage(buf);
            if pg_sys::PageIsNew(page) || marker(page) != Some(MARKER_IN_USE) {
                pg_sys::UnlockReleaseBuffer(buf);
                self.page_corrupted(blkno, "is not an index page in use");
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

    fn num_blocks(&self) -> BlockNumber {
        BufferStore::num_blocks(self)
    }

    /// Asks the kernel for the size only past the largest one seen: an index never shrinks.
    fn has_block(&self, blkno: BlockNumber) -> bool {
        if blkno < self.known_blocks.get() {
            return true;
        }
        let nblocks = BufferStore::num_blocks(self);
        self.known_blocks.set(nblocks);
        blkno < nblocks
    }

    fn is_being_written(&self, blkno: BlockNumber) -> bool {
        self.writing.borrow().contains(&blkno)
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

    fn free(&self, blocks: &[BlockNumber]) -> Result<(), Corrupt> {
        let mut result = Ok(());
        for &blkno in blocks {
            if let Err(e) = self.free_one(blkno) {
                result = Err(e);
                break;
            }
        }
        if !blocks.is_empty() && self.fork == pg_sys::ForkNumber::MAIN_FORKNUM {
            // Propagate to the map's upper levels, or GetFreeIndexPage would not see the pages
            // until the next VACUUM.
            unsafe { pg_sys::IndexFreeSpaceMapVacuum(self.rel) };
        }
        result
    }
}

impl BufferStore {
    /// Marks one page free and records it in the free space map. A page not in use is
    /// damage (the index code named it as its own): freeing it again could hand it to two
    /// owners, so it is reported instead.
    fn free_one(&self, blkno: BlockNumber) -> Result<(), Corrupt> {
        let buf = self.read_buffer(blkno);
        unsafe {
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
            if marker(pg_sys::BufferGetPage(buf)) != Some(MARKER_IN_USE) {
                pg_sys::UnlockReleaseBuffer(buf);
                return Err(Corrupt::new("freeing a page that is not in use").in_block(blkno));
            }
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
        Ok(())
    }
}

/// "REINDEX INDEX schema.name rebuilds it ...": the hint of every corruption ERROR.
pub fn reindex_hint(rel: pg_sys::Relation) -> String {
    // SAFETY: `rel` is an open relation; both strings are palloc'd in the current context.
    let qualified = unsafe {
        let namespace = pg_sys::get_namespace_name((*(*rel).rd_rel).relnamespace);
        let name = CString::new(crate::am::relation_name(rel)).unwrap_or_default();
        let q = pg_sys::quote_qualified_identifier(namespace, name.as_ptr());
        CStr::from_ptr(q).to_string_lossy().into_owned()
    };
    format!("REINDEX INDEX {qualified} rebuilds it from its table.")
}

/// ERROR XX002 (index_corrupted) for damage the index code found in `rel`'s pages.
pub fn index_corrupted(rel: pg_sys::Relation, e: &Corrupt) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED,
        format!(
            "index \"{}\" is corrupted: {e}",
            crate::am::relation_name(rel)
        ),
        Some(&reindex_hint(rel)),
    )
}

/// The value of a kernel result, or the ERROR it stands for.
pub trait OrRaise<T> {
    fn or_raise(self, rel: pg_sys::Relation) -> T;
}

impl<T> OrRaise<T> for Result<T, Corrupt> {
    fn or_raise(self, rel: pg_sys::Relation) -> T {
        self.unwrap_or_else(|e| index_corrupted(rel, &e))
    }
}

/// A metapage read: damage is XX002; another format or no index of ours is the REINDEX error
/// of [`crate::am::usable_meta`].
impl<T> OrRaise<T> for Result<T, MetaError> {
    fn or_raise(self, rel: pg_sys::Relation) -> T {
        match self {
            Err(MetaError::Corrupt(e)) => index_corrupted(rel, &e),
            other => crate::am::usable_meta(other, rel),
        }
    }
}
