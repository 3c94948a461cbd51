//! On-page byte layouts of the BM25 index, little-endian.
//!
//! Every page starts with a 12-byte [`PageHeader`]; block 0 is the metapage. Every read checks
//! bounds and kinds and returns a [`Corrupt`] error instead of returning garbage (the extension
//! turns it into an ERROR).

use crate::bm25::FieldWeights;
pub use crate::layout::{
    check_non_negative, corrupt, ByteReader, ByteWriter, Corrupt, InBlock, MetaError, PageHeader,
    PageKind, Tid, FLAG_FROZEN, HEADER_SIZE,
};
use crate::page::{BlockNumber, NO_BLOCK};

/// "PSKB": pg_skills BM25.
pub const MAGIC: u32 = 0x5053_4b42;
/// Bumped whenever a page layout changes (this file's, or the posting blocks' in `codec`);
/// older indexes then need REINDEX. 2: blocks carry their best saturated term frequency. 3:
/// long lists have skip entries after their blocks (`skips`), dictionary pages a slot array.
pub const FORMAT_VERSION: u32 = 3;
pub const META_BLOCK: BlockNumber = 0;
/// How errors name this kind of index.
const INDEX_KIND: &str = "bm25";
/// Segments the metapage can describe; merging keeps the count near log2(documents).
pub const MAX_SEGMENTS: usize = 48;
/// The first block any page link may name: block 0 is the metapage, which nothing links to
/// (a link to it would also make a writer that holds the metapage lock it again).
pub const FIRST_DATA_BLOCK: BlockNumber = 1;

/// Index options, fixed when the index is built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexOptions {
    pub k1: f64,
    pub b: f64,
    pub weights: FieldWeights,
    pub stemming: bool,
    /// Append pages that trigger a merge of the append area into a segment.
    pub append_pages: u32,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            k1: 1.5,
            b: 0.75,
            weights: FieldWeights::default(),
            stemming: true,
            append_pages: 32,
        }
    }
}

/// What a posting block's score bound is computed with when the block is written: the field
/// weights and BM25's k1 and b (the index's own, fixed at CREATE INDEX).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TermScoring {
    pub weights: [f64; 3],
    pub k1: f64,
    pub b: f64,
}

impl IndexOptions {
    pub fn term_scoring(&self) -> TermScoring {
        TermScoring {
            weights: self.weights_array(),
            k1: self.k1,
            b: self.b,
        }
    }

    pub fn weights_array(&self) -> [f64; 3] {
        [
            self.weights.name,
            self.weights.description,
            self.weights.instructions,
        ]
    }
}

/// One immutable segment, as the metapage describes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SegmentDesc {
    pub dict_root: BlockNumber,
    pub dict_height: u32,
    pub postings_head: BlockNumber,
    pub directory_head: BlockNumber,
    pub num_docs: u32,
    pub num_terms: u32,
    pub total_length: f64,
    /// Set (before the first tombstone is written) when VACUUM marked documents dead; the next
    /// cleanup rewrites the segment so its statistics are exact again.
    pub has_tombstones: bool,
    pub num_pages: u32,
}

const SEGMENT_DESC_SIZE: usize = 4 * 6 + 8 + 4 + 4;

impl SegmentDesc {
    fn read(r: &mut ByteReader) -> Result<SegmentDesc, Corrupt> {
        let dict_root = r.u32()?;
        let dict_height = r.u32()?;
        let postings_head = r.u32()?;
        let directory_head = r.u32()?;
        let num_docs = r.u32()?;
        let num_terms = r.u32()?;
        let total_length = r.f64()?;
        let has_tombstones = r.u32()? != 0;
        let num_pages = r.u32()?;
        if !(total_length.is_finite() && total_length >= 0.0) {
            return corrupt(format_args!("a segment's total length is {total_length}"));
        }
        Ok(SegmentDesc {
            dict_root,
            dict_height,
            postings_head,
            directory_head,
            num_docs,
            num_terms,
            total_length,
            has_tombstones,
            num_pages,
        })
    }

    fn write(&self, w: &mut ByteWriter) {
        w.u32(self.dict_root);
        w.u32(self.dict_height);
        w.u32(self.postings_head);
        w.u32(self.directory_head);
        w.u32(self.num_docs);
        w.u32(self.num_terms);
        w.f64(self.total_length);
        w.u32(self.has_tombstones as u32);
        w.u32(self.num_pages);
    }
}

/// The metapage: format, options, the segment list and the append area.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    pub version: u32,
    pub options: IndexOptions,
    /// The append area inserts go to.
    pub append_head: BlockNumber,
    /// Where inserters start looking for the last append page (a hint: they follow `next`).
    pub append_tail: BlockNumber,
    pub append_pages: u32,
    /// An append area being merged into a segment (still searched until the segment is published).
    pub frozen_head: BlockNumber,
    /// Bumped by every structural change (merge, flush, tombstones).
    pub generation: u64,
    pub segments: Vec<SegmentDesc>,
}

impl Meta {
    pub fn new(options: IndexOptions) -> Meta {
        Meta {
            version: FORMAT_VERSION,
            options,
            append_head: NO_BLOCK,
            append_tail: NO_BLOCK,
            append_pages: 0,
            frozen_head: NO_BLOCK,
            generation: 0,
            segments: Vec::new(),
        }
    }

    pub fn read(page: &[u8]) -> Result<Meta, MetaError> {
        let mut r = ByteReader::new(page, 0);
        crate::layout::check_meta(&mut r, MAGIC, FORMAT_VERSION, INDEX_KIND)?;
        Self::read_body(&mut r).map_err(|e| MetaError::Corrupt(e.in_block(META_BLOCK)))
    }

    fn read_body(r: &mut ByteReader) -> Result<Meta, Corrupt> {
        let version = FORMAT_VERSION;
        let k1 = r.f64()?;
        let b = r.f64()?;
        let weights = FieldWeights {
            name: r.f64()?,
            description: r.f64()?,
            instructions: r.f64()?,
        };
        let stemming = r.u8()? != 0;
        let _pad = r.bytes(3)?;
        let append_pages_limit = r.u32()?;
        let options = IndexOptions {
            k1,
            b,
            weights,
            stemming,
            append_pages: append_pages_limit,
        };
        check_options(&options)?;
        let append_head = r.u32()?;
        let append_tail = r.u32()?;
        let append_pages = r.u32()?;
        let frozen_head = r.u32()?;
        let generation = r.u64()?;
        if frozen_head != NO_BLOCK && frozen_head == append_head {
            return corrupt("the frozen append area is also the current one");
        }
        let nseg = r.u32()? as usize;
        if nseg > MAX_SEGMENTS {
            return corrupt(format_args!("metapage lists {nseg} segments"));
        }
        let segments = (0..nseg)
            .map(|_| SegmentDesc::read(r))
            .collect::<Result<_, _>>()?;
        Ok(Meta {
            version,
            options,
            append_head,
            append_tail,
            append_pages,
            frozen_head,
            generation,
            segments,
        })
    }

    pub fn write(&self, page: &mut [u8]) {
        assert!(
            self.segments.len() <= MAX_SEGMENTS,
            "too many segments for the metapage"
        );
        let mut header = PageHeader::new(PageKind::Meta);
        let mut w = ByteWriter::new(page, HEADER_SIZE);
        w.u32(MAGIC);
        w.u32(self.version);
        let o = &self.options;
        w.f64(o.k1);
        w.f64(o.b);
        w.f64(o.weights.name);
        w.f64(o.weights.description);
        w.f64(o.weights.instructions);
        w.u8(o.stemming as u8);
        w.bytes(&[0; 3]);
        w.u32(o.append_pages);
        w.u32(self.append_head);
        w.u32(self.append_tail);
        w.u32(self.append_pages);
        w.u32(self.frozen_head);
        w.u64(self.generation);
        w.u32(self.segments.len() as u32);
        for s in &self.segments {
            s.write(&mut w);
        }
        header.used = w.pos as u16;
        header.write(page);
    }

    /// Bumps the generation; wrapping, because the value comes from a page and an overflow
    /// must not panic (equality is all readers compare).
    pub fn bump_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    pub fn max_size() -> usize {
        HEADER_SIZE + 4 + 4 + 5 * 8 + 4 + 4 + 4 * 4 + 8 + 4 + MAX_SEGMENTS * SEGMENT_DESC_SIZE
    }
}

/// Options inside the ranges CREATE INDEX accepts (extension `bm25/options.rs`): anything else
/// on a metapage is damage, and a NaN or infinite k1, b or weight would turn every score NaN.
fn check_options(o: &IndexOptions) -> Result<(), Corrupt> {
    let within = |v: f64, max: f64| v.is_finite() && (0.0..=max).contains(&v);
    let ok = within(o.k1, 10.0)
        && within(o.b, 1.0)
        && o.weights_array().iter().all(|&w| within(w, 100.0))
        && o.append_pages >= 1;
    if !ok {
        return corrupt(format_args!("metapage options are out of range: {o:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_fits_a_postgres_page() {
        assert!(Meta::max_size() <= 8168, "{}", Meta::max_size());
        let mut meta = Meta::new(IndexOptions {
            k1: 1.2,
            ..Default::default()
        });
        meta.append_head = 1;
        meta.segments.push(SegmentDesc {
            dict_root: 5,
            dict_height: 2,
            postings_head: 3,
            directory_head: 4,
            num_docs: 10,
            num_terms: 7,
            total_length: 123.5,
            has_tombstones: true,
            num_pages: 9,
        });
        let mut page = vec![0u8; 8168];
        meta.write(&mut page);
        assert_eq!(Meta::read(&page).unwrap(), meta);
    }

    #[test]
    fn other_format_versions_ask_for_reindex() {
        let mut page = vec![0u8; 8168];
        Meta::new(IndexOptions::default()).write(&mut page);
        page[HEADER_SIZE + 4..HEADER_SIZE + 8].copy_from_slice(&0u32.to_le_bytes());
        let err = Meta::read(&page).unwrap_err();
        assert_eq!(
            err,
            MetaError::FormatVersion {
                index: INDEX_KIND,
                found: 0,
                expected: FORMAT_VERSION
            }
        );
        assert!(err.to_string().contains("REINDEX required"));
    }

    #[test]
    fn a_page_of_the_wrong_kind_is_corruption() {
        let mut page = vec![0u8; 64];
        PageHeader::new(PageKind::Postings).write(&mut page);
        let err = PageHeader::read(&page, PageKind::Dictionary).unwrap_err();
        assert!(err.to_string().contains("data corruption"), "{err}");
    }

    #[test]
    fn absurd_metapage_fields_are_corruption() {
        let mut page = vec![0u8; 8168];
        Meta::new(IndexOptions::default()).write(&mut page);
        // k1 (first option) as NaN.
        let at = HEADER_SIZE + 8;
        page[at..at + 8].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(matches!(Meta::read(&page), Err(MetaError::Corrupt(_))));
        // A segment count past the limit.
        let mut page = vec![0u8; 8168];
        Meta::new(IndexOptions::default()).write(&mut page);
        let at = HEADER_SIZE + 8 + 5 * 8 + 4 + 4 + 4 * 4 + 8;
        page[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = Meta::read(&page).unwrap_err();
        assert!(err.to_string().contains("segments"), "{err}");
        // A metapage cut short.
        let mut page = vec![0u8; 8168];
        Meta::new(IndexOptions::default()).write(&mut page);
        assert!(matches!(
            Meta::read(&page[..40]),
            Err(MetaError::Corrupt(_))
        ));
    }
}
