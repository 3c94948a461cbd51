//! On-page byte layouts of the key index, little-endian (page header: [`crate::layout`]).

use half::f16;

use crate::kmeans::Geometry;
use crate::layout::{
    check_meta, corrupt, ByteReader, ByteWriter, Corrupt, MetaError, PageKind, HEADER_SIZE,
};
use crate::page::{check_block, BlockNumber, PageRead, NO_BLOCK};
use crate::vector;

/// "PSKK": pg_skills keys.
pub const MAGIC: u32 = 0x5053_4b4b;
/// Bumped whenever a layout here changes; older indexes then need REINDEX.
pub const FORMAT_VERSION: u32 = 2;
pub const META_BLOCK: BlockNumber = 0;
const INDEX_KIND: &str = "skeys";

/// The distance an index orders by; each is one operator class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Metric {
    /// `<#>`: negative inner product.
    InnerProduct = 1,
    /// `<=>`: 1 − cosine similarity.
    Cosine = 2,
    /// `<->`: Euclidean distance.
    L2 = 3,
}

impl Metric {
    pub fn from_u8(v: u8) -> Option<Metric> {
        Some(match v {
            1 => Metric::InnerProduct,
            2 => Metric::Cosine,
            3 => Metric::L2,
            _ => return None,
        })
    }

    pub fn geometry(self) -> Geometry {
        match self {
            Metric::L2 => Geometry::Euclidean,
            Metric::InnerProduct | Metric::Cosine => Geometry::Spherical,
        }
    }

    /// The distance as the SQL operator returns it (smaller is nearer). The index and the
    /// operators both call this, so their values agree exactly.
    #[inline]
    pub fn distance(self, a: &[f16], b: &[f16]) -> f64 {
        match self {
            Metric::InnerProduct => -(vector::dot_f16(a, b) as f64),
            Metric::Cosine => vector::cos_distance_f16(a, b) as f64,
            Metric::L2 => (vector::l2sq_f16(a, b) as f64).sqrt(),
        }
    }

    /// [`Metric::distance`] of a query widened once for many keys: the same value, bit for bit.
    #[inline]
    pub fn distance_to(self, query: &vector::WideQuery, key: &[f16]) -> f64 {
        match self {
            Metric::InnerProduct => -(query.dot(key) as f64),
            _ => self.distance(query.values(), key),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::InnerProduct => "inner product",
            Metric::Cosine => "cosine",
            Metric::L2 => "l2",
        }
    }
}

/// Block 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub dim: u16,
    pub metric: Metric,
    /// Lists (= centroids); at least 1.
    pub lists: u32,
    pub centroid_start: BlockNumber,
    pub centroid_pages: u32,
    pub directory_start: BlockNumber,
    pub directory_pages: u32,
    /// Random per build: caches of centroids are keyed by it.
    pub build_id: u64,
    /// Keys k-means was trained on (0: built empty; the single list takes everything).
    pub trained_on: u64,
}

impl Meta {
    /// The metapage's fields, each checked on its own (see [`Meta::load`] for the layout).
    pub fn read(page: &[u8]) -> Result<Meta, MetaError> {
        let mut r = ByteReader::new(page, 0);
        check_meta(&mut r, MAGIC, FORMAT_VERSION, INDEX_KIND)?;
        Self::read_body(&mut r).map_err(|e| MetaError::Corrupt(e.in_block(META_BLOCK)))
    }

    fn read_body(r: &mut ByteReader) -> Result<Meta, Corrupt> {
        let dim = r.u16()?;
        let metric_byte = r.u8()?;
        let Some(metric) = Metric::from_u8(metric_byte) else {
            return corrupt(format_args!("metapage names metric {metric_byte}"));
        };
        let _pad = r.u8()?;
        let meta = Meta {
            dim,
            metric,
            lists: r.u32()?,
            centroid_start: r.u32()?,
            centroid_pages: r.u32()?,
            directory_start: r.u32()?,
            directory_pages: r.u32()?,
            build_id: r.u64()?,
            trained_on: r.u64()?,
        };
        if meta.dim == 0 || meta.lists == 0 {
            return corrupt(format_args!(
                "metapage has {} dimensions and {} lists",
                meta.dim, meta.lists
            ));
        }
        Ok(meta)
    }

    /// The metapage, read and checked against the relation: everything later reads is sized
    /// by these fields (how many centroids to load, where lists may start).
    pub fn load<S: PageRead>(store: &S) -> Result<Meta, MetaError> {
        let meta = Meta::read(&store.read(META_BLOCK))?;
        meta.check_layout(store.page_size(), store.num_blocks())
            .map_err(|e| MetaError::Corrupt(e.in_block(META_BLOCK)))?;
        Ok(meta)
    }

    /// The fixed areas are where a build puts them — centroid pages right after the metapage,
    /// directory pages right after those, as many of each as the lists need — and inside the
    /// relation. So `lists` and `dim` can size nothing larger than pages that exist.
    pub fn check_layout(&self, page_size: usize, num_blocks: BlockNumber) -> Result<(), Corrupt> {
        let dim = self.dim as usize;
        let centroids = centroids_per_page(page_size, dim) as u64;
        if centroids == 0 || entries_per_page(page_size, dim) == 0 {
            return corrupt(format_args!("a {dim}-d key does not fit a page"));
        }
        let lists = self.lists as u64;
        let directory = list_refs_per_page(page_size) as u64;
        let expected = [
            (self.centroid_start as u64, META_BLOCK as u64 + 1),
            (self.centroid_pages as u64, lists.div_ceil(centroids)),
            (
                self.directory_start as u64,
                self.centroid_start as u64 + self.centroid_pages as u64,
            ),
            (self.directory_pages as u64, lists.div_ceil(directory)),
        ];
        let end = self.directory_start as u64 + self.directory_pages as u64;
        if expected.iter().any(|(got, want)| got != want) || end > num_blocks as u64 {
            return corrupt(format_args!(
                "metapage layout of {} lists does not match the index ({num_blocks} pages): {self:?}",
                self.lists
            ));
        }
        Ok(())
    }

    /// The first block a list page can be (checked by [`Meta::check_layout`] to fit a u32).
    pub fn first_list_block(&self) -> BlockNumber {
        self.directory_start + self.directory_pages
    }

    /// `block` when it can be a list page: a list link never names the metapage, a centroid or
    /// a directory page (an insert holds its directory page while it follows the list).
    pub fn list_block<S: PageRead>(
        &self,
        store: &S,
        block: BlockNumber,
        what: &str,
    ) -> Result<BlockNumber, Corrupt> {
        check_block(store, block, self.first_list_block(), what)
    }

    pub fn write(&self, page: &mut [u8]) {
        crate::layout::PageHeader::new(PageKind::Meta).write(page);
        let mut w = ByteWriter::new(page, HEADER_SIZE);
        w.u32(MAGIC);
        w.u32(FORMAT_VERSION);
        w.u16(self.dim);
        w.u8(self.metric as u8);
        w.u8(0);
        w.u32(self.lists);
        w.u32(self.centroid_start);
        w.u32(self.centroid_pages);
        w.u32(self.directory_start);
        w.u32(self.directory_pages);
        w.u64(self.build_id);
        w.u64(self.trained_on);
    }

    pub fn entry_size(&self) -> usize {
        entry_size(self.dim as usize)
    }

    /// Bytes of an entry's code ([`super::codes`]; 0 below [`super::codes::MIN_CODED_DIM`]:
    /// such an index has no code pages).
    pub fn code_size(&self) -> usize {
        super::codes::code_size(self.dim as usize)
    }

    /// The build's rotation for codes (None: no codes).
    pub fn rotation(&self) -> Option<super::codes::Rotation> {
        super::codes::Rotation::new(self.dim as usize, self.build_id)
    }

    /// Key pages: (TID, f16 key) entries.
    pub fn keys(&self) -> Layout {
        Layout {
            kind: PageKind::KeyList,
            size: entry_size(self.dim as usize),
        }
    }

    /// Code pages: (TID, the key page the entry is on, its code) entries.
    pub fn codes(&self) -> Layout {
        Layout {
            kind: PageKind::KeyCodes,
            size: 12 + self.code_size(),
        }
    }
}

/// What one kind of list page holds: entries of `size` bytes, each starting with its TID (6)
/// and 2 reserved bytes, packed from the page header on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub kind: PageKind,
    pub size: usize,
}

impl Layout {
    pub fn per_page(&self, page_size: usize) -> usize {
        (page_size - HEADER_SIZE) / self.size
    }
}

/// Bytes of one key entry: TID (6), 2 reserved, the key as f16.
pub fn entry_size(dim: usize) -> usize {
    8 + 2 * dim
}

pub fn entries_per_page(page_size: usize, dim: usize) -> usize {
    (page_size - HEADER_SIZE) / entry_size(dim)
}

pub fn centroids_per_page(page_size: usize, dim: usize) -> usize {
    (page_size - HEADER_SIZE) / (4 * dim)
}

/// One chain of a list: its first and last page, and a page with room for an entry (VACUUM
/// found it) or NO_BLOCK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainRef {
    pub head: BlockNumber,
    pub tail: BlockNumber,
    pub free: BlockNumber,
}

impl ChainRef {
    pub const EMPTY: ChainRef = ChainRef {
        head: NO_BLOCK,
        tail: NO_BLOCK,
        free: NO_BLOCK,
    };

    fn read(r: &mut ByteReader) -> Result<ChainRef, Corrupt> {
        Ok(ChainRef {
            head: r.u32()?,
            tail: r.u32()?,
            free: r.u32()?,
        })
    }

    /// Head, tail and free page are list pages or absent; an empty chain has neither tail nor
    /// free page.
    fn check<S: PageRead>(&self, store: &S, meta: &Meta, what: &str) -> Result<(), Corrupt> {
        for (block, part) in [
            (self.head, "head"),
            (self.tail, "tail"),
            (self.free, "free page"),
        ] {
            if block != NO_BLOCK {
                meta.list_block(store, block, &format!("a list's {what} {part}"))?;
            }
        }
        if self.head == NO_BLOCK && (self.tail != NO_BLOCK || self.free != NO_BLOCK) {
            return corrupt(format_args!(
                "an empty {what} chain has a tail or a free page"
            ));
        }
        if self.head != NO_BLOCK && self.tail == NO_BLOCK {
            return corrupt(format_args!("a {what} chain has a head and no tail"));
        }
        Ok(())
    }

    fn write(&self, w: &mut ByteWriter) {
        w.u32(self.head);
        w.u32(self.tail);
        w.u32(self.free);
    }
}

/// One list's directory entry: its key pages and its code pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListRef {
    pub keys: ChainRef,
    pub codes: ChainRef,
}

pub const LIST_REF_SIZE: usize = 24;

pub fn list_refs_per_page(page_size: usize) -> usize {
    (page_size - HEADER_SIZE) / LIST_REF_SIZE
}

impl ListRef {
    pub const EMPTY: ListRef = ListRef {
        keys: ChainRef::EMPTY,
        codes: ChainRef::EMPTY,
    };

    pub fn read(r: &mut ByteReader) -> Result<ListRef, Corrupt> {
        Ok(ListRef {
            keys: ChainRef::read(r)?,
            codes: ChainRef::read(r)?,
        })
    }

    /// Both chains hold list pages or nothing; an index without codes has no code pages.
    pub fn check<S: PageRead>(&self, store: &S, meta: &Meta) -> Result<(), Corrupt> {
        self.keys.check(store, meta, "key")?;
        self.codes.check(store, meta, "code")?;
        if meta.code_size() == 0 && self.codes != ChainRef::EMPTY {
            return corrupt("an index without codes has code pages");
        }
        Ok(())
    }

    pub fn write(&self, w: &mut ByteWriter) {
        self.keys.write(w);
        self.codes.write(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metapage_round_trip_and_version_check() {
        let meta = Meta {
            dim: 512,
            metric: Metric::Cosine,
            lists: 7,
            centroid_start: 1,
            centroid_pages: 3,
            directory_start: 4,
            directory_pages: 1,
            build_id: 0xfeed,
            trained_on: 99,
        };
        let mut page = vec![0u8; 8160];
        meta.write(&mut page);
        assert_eq!(Meta::read(&page), Ok(meta));
        // 7 lists of 512-d: 3 centroid pages, 1 directory page, from block 1.
        assert_eq!(meta.check_layout(8160, 5), Ok(()));
        assert!(meta.check_layout(8160, 4).is_err(), "past the relation");
        let far = Meta {
            lists: u32::MAX,
            ..meta
        };
        assert!(far.check_layout(8160, 1 << 20).is_err(), "absurd lists");
        let huge = Meta { dim: 8000, ..meta };
        assert!(
            huge.check_layout(8160, 1 << 20).is_err(),
            "a key larger than a page"
        );
        page[HEADER_SIZE + 4] = 9; // the version
        let err = Meta::read(&page).unwrap_err();
        assert!(err.to_string().contains("REINDEX required"), "{err}");
        page[HEADER_SIZE] = 0; // the magic
        assert_eq!(
            Meta::read(&page),
            Err(MetaError::NotAnIndex { index: "skeys" })
        );
    }

    #[test]
    fn a_512_key_fits_seven_to_a_page() {
        assert_eq!(entries_per_page(8160, 512), 7);
        assert_eq!(centroids_per_page(8160, 512), 3);
    }
}
