//! Posting blocks: up to 128 postings (segment-local document id and per-field counts),
//! bit-packed with SIMD (the `bitpacking` crate, as tantivy does), with a header that carries the
//! block's last document and the bounds block-max pruning needs.
//!
//! Layout: `n u8 | doc bits u8 | count bits u8 ×3 | pad u8 | payload bytes u16 | last_doc u32 |
//! max_tf f32 | min_length f32 | max_saturated f32 | payload`. A full block's payload is the
//! bit-packed doc deltas and the three count arrays; a partial block (the tail of a list, and
//! most of a vocabulary's rare terms) would waste most of a padded 128-value pack, so its payload
//! is LEB128 varints instead (doc bits = [`VARINT`]).

use bitpacking::{BitPacker, BitPacker4x};

use super::document::{f32_at_least, weighted_tf, FieldCounts};
use super::format::{check_non_negative, corrupt, ByteReader, ByteWriter, Corrupt, TermScoring};
use crate::bm25::term_score;
use crate::layout::{le_u16, le_u32};

pub const BLOCK_LEN: usize = BitPacker4x::BLOCK_LEN;
pub const BLOCK_HEADER_SIZE: usize = 24;
/// The largest encoded block (every array at 32 bits).
pub const MAX_BLOCK_SIZE: usize = BLOCK_HEADER_SIZE + 4 * 16 * 32;
/// Doc bits of a varint-coded block.
pub const VARINT: u8 = u8::MAX;

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(r: &mut ByteReader) -> Result<u32, Corrupt> {
    let mut v = 0u32;
    for shift in (0..35).step_by(7) {
        let b = r.u8()?;
        v |= ((b & 0x7f) as u32) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    corrupt("varint longer than 5 bytes")
}

/// What a reader needs to skip or bound a block without decoding it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockHeader {
    pub len: usize,
    pub doc_bits: u8,
    pub count_bits: [u8; 3],
    pub payload_len: usize,
    pub last_doc: u32,
    /// Largest weighted tf in the block, rounded up.
    pub max_tf: f32,
    /// Smallest stored document length in the block.
    pub min_length: f32,
    /// The block's largest term score at idf 1, rounded up, with the index's k1 and b and the
    /// segment's average document length when it was written (see `Scorer::block_bound`).
    /// Tighter than the bound of `max_tf` and `min_length`, which may come from two documents.
    pub max_saturated: f32,
}

impl BlockHeader {
    pub fn encoded_size(&self) -> usize {
        BLOCK_HEADER_SIZE + self.payload_len
    }

    fn packed_size(doc_bits: u8, count_bits: [u8; 3]) -> usize {
        BitPacker4x::compressed_block_size(doc_bits)
            + count_bits
                .iter()
                .map(|&b| BitPacker4x::compressed_block_size(b))
                .sum::<usize>()
    }

    /// Reads and checks a header: the payload size must be what its coding gives for its
    /// length (so decoding never reads past the block), and its bounds must be real numbers.
    pub fn read(r: &mut ByteReader) -> Result<BlockHeader, Corrupt> {
        // The header's fixed fields from one checked read (a walk reads a header per block it
        // passes): len, doc bits, 3 count bits, a pad byte, payload length, last document,
        // max tf, min length, best score.
        let b: [u8; BLOCK_HEADER_SIZE] = r.array()?;
        let f32_at = |i: usize| f32::from_bits(le_u32(&b, i));
        let len = b[0] as usize;
        let doc_bits = b[1];
        let count_bits = [b[2], b[3], b[4]];
        let payload_len = le_u16(&b, 6) as usize;
        let h = BlockHeader {
            len: if len == 0 { BLOCK_LEN } else { len },
            doc_bits,
            count_bits,
            payload_len,
            last_doc: le_u32(&b, 8),
            max_tf: check_non_negative(f32_at(12), "a posting block's max tf")?,
            min_length: check_non_negative(f32_at(16), "a posting block's min length")?,
            max_saturated: check_non_negative(f32_at(20), "a posting block's best score")?,
        };
        // Only full blocks are bit-packed; a varint block spends 1 to 5 bytes on each of the
        // four values of a posting.
        let packed_ok = h.len == BLOCK_LEN
            && doc_bits <= 32
            && count_bits.iter().all(|&b| b <= 32)
            && payload_len == Self::packed_size(doc_bits, count_bits);
        let varint_ok = doc_bits == VARINT && (4 * h.len..=20 * h.len).contains(&payload_len);
        if !(packed_ok || varint_ok) || payload_len > MAX_BLOCK_SIZE {
            return corrupt(format_args!(
                "posting block of {} postings with {doc_bits}/{count_bits:?} bits and {payload_len} bytes",
                h.len
            ));
        }
        Ok(h)
    }
}

/// Decoded postings of one block.
pub struct DecodedBlock {
    pub docs: [u32; BLOCK_LEN],
    pub counts: [[u32; BLOCK_LEN]; 3],
}

impl Default for DecodedBlock {
    fn default() -> Self {
        DecodedBlock {
            docs: [0; BLOCK_LEN],
            counts: [[0; BLOCK_LEN]; 3],
        }
    }
}

impl DecodedBlock {
    pub fn counts_at(&self, i: usize) -> FieldCounts {
        [self.counts[0][i], self.counts[1][i], self.counts[2][i]]
    }
}

/// Encodes `docs` (strictly increasing, all > `previous_last` unless this is the list's first
/// block) into `out`, returning the bytes written. `lengths[doc]` is each document's stored
/// length, `avg_length` the segment's average (what `max_saturated` is computed with).
pub fn encode_block(
    previous_last: u32,
    docs: &[u32],
    counts: &[FieldCounts],
    scoring: &TermScoring,
    lengths: &[f32],
    avg_length: f64,
    out: &mut [u8],
) -> usize {
    assert!(!docs.is_empty() && docs.len() <= BLOCK_LEN && docs.len() == counts.len());
    let packer = BitPacker4x::new();
    let n = docs.len();
    // Partial blocks are padded by repeating the last document (deltas 0) and zero counts.
    let mut doc_block = [docs[n - 1]; BLOCK_LEN];
    doc_block[..n].copy_from_slice(docs);
    let mut count_blocks = [[0u32; BLOCK_LEN]; 3];
    let mut max_tf = 0f64;
    let mut min_length = f32::INFINITY;
    let mut max_saturated = 0f64;
    for (i, c) in counts.iter().enumerate() {
        for f in 0..3 {
            count_blocks[f][i] = c[f];
        }
        let tf = weighted_tf(&scoring.weights, c);
        let length = lengths[docs[i] as usize];
        max_tf = max_tf.max(tf);
        min_length = min_length.min(length);
        max_saturated = max_saturated.max(term_score(
            1.0,
            tf,
            length as f64,
            avg_length,
            scoring.k1,
            scoring.b,
        ));
    }
    let mut varints = Vec::new();
    let (doc_bits, count_bits) = if n < BLOCK_LEN {
        let mut previous = previous_last;
        for (i, &d) in docs.iter().enumerate() {
            put_varint(&mut varints, d - previous);
            previous = d;
            for f in 0..3 {
                put_varint(&mut varints, counts[i][f]);
            }
        }
        (VARINT, [0; 3])
    } else {
        (
            packer.num_bits_sorted(previous_last, &doc_block),
            [0, 1, 2].map(|f| packer.num_bits(&count_blocks[f])),
        )
    };
    let payload_len = if doc_bits == VARINT {
        varints.len()
    } else {
        BlockHeader::packed_size(doc_bits, count_bits)
    };
    let header = BlockHeader {
        len: n,
        doc_bits,
        count_bits,
        payload_len,
        last_doc: docs[n - 1],
        max_tf: f32_at_least(max_tf),
        min_length,
        max_saturated: f32_at_least(max_saturated),
    };
    let size = header.encoded_size();
    let mut w = ByteWriter::new(&mut out[..size], 0);
    w.u8(if n == BLOCK_LEN { 0 } else { n as u8 });
    w.u8(doc_bits);
    for b in count_bits {
        w.u8(b);
    }
    w.u8(0);
    w.u16(payload_len as u16);
    w.u32(header.last_doc);
    w.f32(header.max_tf);
    w.f32(header.min_length);
    w.f32(header.max_saturated);
    let mut pos = w.pos;
    if doc_bits == VARINT {
        w.bytes(&varints);
        return size;
    }
    pos += packer.compress_sorted(previous_last, &doc_block, &mut out[pos..], doc_bits);
    for f in 0..3 {
        pos += packer.compress(&count_blocks[f], &mut out[pos..], count_bits[f]);
    }
    debug_assert_eq!(pos, size);
    size
}

/// Decodes the block whose header was just read; `r` points at the packed arrays and ends
/// with the block's payload. Checks that the payload is used exactly, that the documents
/// strictly increase and that the last one is the header's: what the cursor and the scorer
/// then index by is what the header promised.
pub fn decode_block(
    previous_last: u32,
    header: &BlockHeader,
    r: &mut ByteReader,
    out: &mut DecodedBlock,
) -> Result<(), Corrupt> {
    if header.doc_bits == VARINT {
        decode_varints(previous_last, header.len, r, out)?;
    } else {
        let packer = BitPacker4x::new();
        let docs = r.bytes(BitPacker4x::compressed_block_size(header.doc_bits))?;
        packer.decompress_sorted(previous_last, docs, &mut out.docs, header.doc_bits);
        for f in 0..3 {
            let bytes = r.bytes(BitPacker4x::compressed_block_size(header.count_bits[f]))?;
            packer.decompress(bytes, &mut out.counts[f], header.count_bits[f]);
        }
    }
    if r.remaining() != 0 {
        return corrupt("posting block payload is longer than its postings");
    }
    let docs = &out.docs[..header.len];
    if docs.windows(2).any(|w| w[0] >= w[1]) {
        return corrupt("posting block documents do not strictly increase");
    }
    if docs[header.len - 1] != header.last_doc {
        return corrupt("posting block does not decode to its recorded last document");
    }
    Ok(())
}

fn decode_varints(
    previous_last: u32,
    len: usize,
    r: &mut ByteReader,
    out: &mut DecodedBlock,
) -> Result<(), Corrupt> {
    let mut previous = previous_last;
    for i in 0..len {
        // Wrapping: a huge delta from a damaged page must not panic; the order check catches it.
        previous = previous.wrapping_add(get_varint(r)?);
        out.docs[i] = previous;
        for f in 0..3 {
            out.counts[f][i] = get_varint(r)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_with_bounds() {
        let weights = [2.0, 1.0, 0.5];
        let scoring = TermScoring {
            weights,
            k1: 1.2,
            b: 0.75,
        };
        let lengths: Vec<f32> = (0..1000).map(|i| 10.0 + (i % 37) as f32).collect();
        for n in [1usize, 2, 5, 127, 128] {
            let docs: Vec<u32> = (0..n as u32).map(|i| 100 + i * 7).collect();
            let counts: Vec<FieldCounts> = (0..n as u32).map(|i| [i % 3, i % 5, 40 + i]).collect();
            let mut buf = vec![0u8; MAX_BLOCK_SIZE];
            let size = encode_block(99, &docs, &counts, &scoring, &lengths, 25.0, &mut buf);
            let mut r = ByteReader::new(&buf[..size], 0);
            let h = BlockHeader::read(&mut r).unwrap();
            assert_eq!(h.encoded_size(), size);
            assert_eq!(h.len, n);
            assert_eq!(h.last_doc, *docs.last().unwrap());
            let mut out = DecodedBlock::default();
            decode_block(99, &h, &mut r, &mut out).unwrap();
            assert_eq!(r.pos, size);
            assert_eq!(&out.docs[..n], &docs[..]);
            for i in 0..n {
                assert_eq!(out.counts_at(i), counts[i]);
                assert!(h.max_tf as f64 >= weighted_tf(&weights, &counts[i]));
                assert!(h.min_length <= lengths[docs[i] as usize]);
                let tf = weighted_tf(&weights, &counts[i]);
                let length = lengths[docs[i] as usize] as f64;
                assert!(h.max_saturated as f64 >= term_score(1.0, tf, length, 25.0, 1.2, 0.75));
            }
        }
    }

    /// Encodes `docs` (counts 1) into a buffer of exactly the block's size.
    fn encoded(docs: &[u32]) -> Vec<u8> {
        let counts: Vec<FieldCounts> = docs.iter().map(|_| [1, 0, 0]).collect();
        let lengths = vec![5.0f32; 1 << 16];
        let mut buf = vec![0u8; MAX_BLOCK_SIZE];
        let scoring = TermScoring {
            weights: [1.0; 3],
            k1: 1.2,
            b: 0.75,
        };
        let size = encode_block(0, docs, &counts, &scoring, &lengths, 5.0, &mut buf);
        buf.truncate(size);
        buf
    }

    fn decode(buf: &[u8]) -> Result<(), Corrupt> {
        let mut r = ByteReader::new(buf, 0);
        let h = BlockHeader::read(&mut r)?;
        decode_block(0, &h, &mut r, &mut DecodedBlock::default())
    }

    #[test]
    fn decreasing_documents_in_a_block_are_corruption() {
        // A varint block whose second delta becomes 2^32 - 5: documents 10, 20, 30 decode
        // (wrapping) as 10, 5, 15.
        let mut buf = encoded(&[10, 20, 30]);
        assert!(decode(&buf).is_ok());
        let second = BLOCK_HEADER_SIZE + 4;
        assert_eq!(buf[second], 10, "the second delta");
        buf.splice(second..second + 1, [0xfb, 0xff, 0xff, 0xff, 0x0f]);
        let payload = (buf.len() - BLOCK_HEADER_SIZE) as u16;
        buf[6..8].copy_from_slice(&payload.to_le_bytes());
        let err = decode(&buf).unwrap_err();
        assert!(err.what.contains("strictly increase"), "{err}");
        // A bit-packed block whose first document is changed by flipping doc bits.
        let docs: Vec<u32> = (0..BLOCK_LEN as u32).map(|i| i * 3).collect();
        let mut buf = encoded(&docs);
        assert!(decode(&buf).is_ok());
        buf[BLOCK_HEADER_SIZE + 2] ^= 0xff;
        assert!(decode(&buf).is_err());
    }

    #[test]
    fn absurd_block_headers_are_corruption() {
        let buf = encoded(&[1, 2, 3]);
        // The payload length past what three postings can take.
        let mut b = buf.clone();
        b[6..8].copy_from_slice(&4000u16.to_le_bytes());
        assert!(decode(&b).unwrap_err().what.contains("posting block of 3"));
        // A length of 100 postings in a payload of 12 bytes.
        let mut b = buf.clone();
        b[0] = 100;
        assert!(decode(&b).is_err());
        // 40 doc bits.
        let mut b = buf.clone();
        b[1] = 40;
        assert!(decode(&b).is_err());
        // A NaN bound.
        let mut b = buf.clone();
        b[12..16].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(decode(&b).unwrap_err().what.contains("max tf"));
        // Cut short: the payload is not all there.
        assert!(decode(&buf[..buf.len() - 1]).is_err());
    }
}
