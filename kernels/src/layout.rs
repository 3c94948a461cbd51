//! Byte layout shared by every pg_skills index: a bounds-checked little-endian reader and
//! writer, the 12-byte header every page starts with, page kinds, and heap TIDs.
//!
//! Every read checks bounds and kinds and returns a [`Corrupt`] error instead of returning
//! garbage or reading past the page (the extension turns it into an ERROR).

pub use crate::page::{corrupt, Corrupt, InBlock};
use crate::page::{BlockNumber, NO_BLOCK};

/// Bounds-checked little-endian reader over a page.
pub struct ByteReader<'a> {
    buf: &'a [u8],
    pub pos: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        ByteReader { buf, pos }
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return corrupt(format_args!(
                "read of {n} bytes at offset {} past the end ({} bytes)",
                self.pos,
                self.buf.len()
            ));
        };
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// Bytes left before the end; counts read from a page are checked against it before
    /// anything is sized by them.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The next N bytes, checked once (a record of fixed fields is then read from the array).
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Corrupt> {
        Ok(self.bytes(N)?.try_into().expect("length checked"))
    }

    pub fn u8(&mut self) -> Result<u8, Corrupt> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, Corrupt> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, Corrupt> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn f32(&mut self) -> Result<f32, Corrupt> {
        Ok(f32::from_le_bytes(self.array()?))
    }
    pub fn f64(&mut self) -> Result<f64, Corrupt> {
        Ok(f64::from_le_bytes(self.array()?))
    }
}

/// A stored length or bound: finite and not negative (what every writer produces; NaN or
/// infinity would turn scores into NaN and break the top-k order).
pub fn check_non_negative(v: f32, what: &str) -> Result<f32, Corrupt> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        corrupt(format_args!("{what} is {v}"))
    }
}

/// The little-endian u16 at `at` of a record whose length the caller checked (as a
/// [`ByteReader`] reads it, without a check per field).
pub fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The little-endian u32 at `at` of a record whose length the caller checked.
pub fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Little-endian writer over a page. Callers check space first; overflow is a bug.
pub struct ByteWriter<'a> {
    buf: &'a mut [u8],
    pub pos: usize,
}

impl<'a> ByteWriter<'a> {
    pub fn new(buf: &'a mut [u8], pos: usize) -> Self {
        ByteWriter { buf, pos }
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn f32(&mut self, v: f32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.bytes(&v.to_le_bytes());
    }
}

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    Meta = 1,
    Postings = 2,
    Dictionary = 3,
    Documents = 4,
    DocumentDirectory = 5,
    Append = 6,
    /// Key index: centroids of the lists.
    Centroids = 7,
    /// Key index: head, tail and free-space hint of every list.
    ListDirectory = 8,
    /// Key index: (TID, key) entries of one list.
    KeyList = 9,
    /// Key index: (TID, key page, code) entries of one list.
    KeyCodes = 10,
}

impl PageKind {
    pub fn from_u8(v: u8) -> Option<PageKind> {
        Some(match v {
            1 => PageKind::Meta,
            2 => PageKind::Postings,
            3 => PageKind::Dictionary,
            4 => PageKind::Documents,
            5 => PageKind::DocumentDirectory,
            6 => PageKind::Append,
            7 => PageKind::Centroids,
            8 => PageKind::ListDirectory,
            9 => PageKind::KeyList,
            10 => PageKind::KeyCodes,
            _ => return None,
        })
    }
}

/// BM25 append pages set this when the append area they belong to is being merged: inserters then
/// move to the new append area.
pub const FLAG_FROZEN: u16 = 1;

/// The first 12 bytes of every page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    pub kind: PageKind,
    /// Dictionary level (0 = leaves).
    pub level: u8,
    /// Items on the page.
    pub count: u16,
    /// Bytes in use, header included.
    pub used: u16,
    pub flags: u16,
    /// Next page of the same chain, or [`NO_BLOCK`].
    pub next: BlockNumber,
}

pub const HEADER_SIZE: usize = 12;

impl PageHeader {
    pub fn new(kind: PageKind) -> Self {
        PageHeader {
            kind,
            level: 0,
            count: 0,
            used: HEADER_SIZE as u16,
            flags: 0,
            next: NO_BLOCK,
        }
    }

    /// The header of a page that must be of kind `expected`, with `used` inside the page.
    pub fn read(page: &[u8], expected: PageKind) -> Result<PageHeader, Corrupt> {
        let mut r = ByteReader::new(page, 0);
        let kind_byte = r.u8()?;
        let Some(kind) = PageKind::from_u8(kind_byte) else {
            return corrupt(format_args!(
                "page kind {kind_byte} is unknown (expected {expected:?})"
            ));
        };
        if kind != expected {
            return corrupt(format_args!(
                "found a {kind:?} page where a {expected:?} page belongs"
            ));
        }
        let h = PageHeader {
            kind,
            level: r.u8()?,
            count: r.u16()?,
            used: r.u16()?,
            flags: r.u16()?,
            next: r.u32()?,
        };
        if (h.used as usize) < HEADER_SIZE || h.used as usize > page.len() {
            return corrupt(format_args!("{kind:?} page claims {} bytes in use", h.used));
        }
        Ok(h)
    }

    /// `count` items of at least `min_size` bytes each fit in the bytes in use: checked before
    /// a loop or an allocation is sized by `count`.
    pub fn check_count(&self, min_size: usize) -> Result<(), Corrupt> {
        let room = self.used as usize - HEADER_SIZE;
        if (self.count as usize).saturating_mul(min_size) > room {
            return corrupt(format_args!(
                "{:?} page claims {} items in {room} bytes",
                self.kind, self.count
            ));
        }
        Ok(())
    }

    pub fn write(&self, page: &mut [u8]) {
        let mut w = ByteWriter::new(page, 0);
        w.u8(self.kind as u8);
        w.u8(self.level);
        w.u16(self.count);
        w.u16(self.used);
        w.u16(self.flags);
        w.u32(self.next);
    }

    pub fn free_space(&self, page_size: usize) -> usize {
        page_size - self.used as usize
    }
}

/// A heap tuple identifier (block, line pointer), ordered like Postgres orders them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid {
    pub block: u32,
    pub offset: u16,
}

impl Tid {
    pub const SIZE: usize = 6;

    /// The TID in the first [`Tid::SIZE`] bytes of `b` (as [`Tid::write`] wrote them), for
    /// callers that checked the entry's bounds once for all its fields.
    pub fn from_bytes(b: &[u8; Tid::SIZE]) -> Tid {
        Tid {
            block: le_u32(b, 0),
            offset: le_u16(b, 4),
        }
    }

    pub fn read(r: &mut ByteReader) -> Result<Tid, Corrupt> {
        Ok(Tid {
            block: r.u32()?,
            offset: r.u16()?,
        })
    }
    pub fn write(&self, w: &mut ByteWriter) {
        w.u32(self.block);
        w.u16(self.offset);
    }
}

/// Checks a metapage's kind, magic number and format version, leaving `r` after them.
pub fn check_meta(
    r: &mut ByteReader,
    magic: u32,
    version: u32,
    index: &'static str,
) -> Result<(), MetaError> {
    r.pos = 0;
    if PageKind::from_u8(r.u8()?) != Some(PageKind::Meta) {
        return Err(MetaError::NotAnIndex { index });
    }
    r.pos = HEADER_SIZE;
    if r.u32()? != magic {
        return Err(MetaError::NotAnIndex { index });
    }
    let found = r.u32()?;
    if found != version {
        return Err(MetaError::FormatVersion {
            index,
            found,
            expected: version,
        });
    }
    Ok(())
}

/// Why a metapage cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaError {
    /// Built by another on-disk format: REINDEX rebuilds it in the current one.
    FormatVersion {
        index: &'static str,
        found: u32,
        expected: u32,
    },
    NotAnIndex {
        index: &'static str,
    },
    /// The right index and format, but the metapage's contents cannot be what a build wrote.
    Corrupt(Corrupt),
}

impl From<Corrupt> for MetaError {
    fn from(e: Corrupt) -> MetaError {
        MetaError::Corrupt(e)
    }
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaError::FormatVersion {
                index,
                found,
                expected,
            } => write!(
                f,
                "{index} index has on-disk format version {found}, this build reads version {expected}: REINDEX required"
            ),
            MetaError::NotAnIndex { index } => {
                write!(f, "{index} index metapage has a wrong magic number")
            }
            MetaError::Corrupt(e) => write!(f, "metapage: {e}"),
        }
    }
}
