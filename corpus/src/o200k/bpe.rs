//! Byte-pair merges of one pre-tokenizer piece under o200k_base's ranks, counted: the pair of
//! adjacent parts whose concatenation has the lowest rank merges first (the leftmost of equal
//! ranks), until no adjacent pair is a token. The same rule as tiktoken's, so the same parts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

/// Pieces up to this many bytes merge in fixed arrays on the stack (quadratic, but cache-local
/// and allocation-free); longer ones through a heap.
const SHORT: usize = 128;

const NO_RANK: u32 = u32::MAX;

/// Merged pieces whose counts a thread remembers: at most about 5 MB of pieces of up to 128
/// bytes.
const REMEMBERED: usize = 1 << 15;

thread_local! {
    static MERGED: std::cell::RefCell<FxHashMap<Box<[u8]>, u32>> = Default::default();
}

/// Token bytes up to this long are looked up as one integer (no byte comparison call).
const PACKED: usize = 15;

/// Slots of a [`PieceCache`] (a power of two): 256 kB of keys, which stay in a core's L2
/// cache where the rank table (about 8 MB) does not.
const CACHED_PIECES: usize = 1 << 14;

/// The token counts of recently counted short pieces, by [`pack`]ed bytes, in a table with one
/// slot per hash (a newer piece takes its slot). Text repeats a few thousand pieces most of the
/// time (" the", " to", "\n", identifiers), and finding them here is a few nanoseconds against
/// a rank lookup that misses the core's caches.
pub struct PieceCache {
    /// 0 marks an empty slot: no piece packs to 0 (pieces are not empty).
    keys: Box<[u128]>,
    counts: Box<[u8]>,
}

impl Default for PieceCache {
    fn default() -> Self {
        PieceCache {
            keys: vec![0; CACHED_PIECES].into_boxed_slice(),
            counts: vec![0; CACHED_PIECES].into_boxed_slice(),
        }
    }
}

impl PieceCache {
    /// Tokens of `piece`, from the cache or counted by `ranks` (and then remembered).
    #[inline]
    pub fn piece_tokens(&mut self, ranks: &Ranks, piece: &[u8]) -> usize {
        if piece.len() > PACKED {
            return ranks.piece_tokens(piece);
        }
        let key = pack(piece);
        // Fibonacci hashing of the key's two halves: the top bits pick the slot.
        let mixed =
            (key as u64 ^ ((key >> 64) as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (mixed >> (64 - CACHED_PIECES.trailing_zeros())) as usize;
        if self.keys[slot] == key {
            return self.counts[slot] as usize;
        }
        // A piece of at most 15 bytes has at most 15 tokens.
        let n = ranks.piece_tokens(piece);
        self.keys[slot] = key;
        self.counts[slot] = n as u8;
        n
    }
}

pub struct Ranks {
    /// Tokens of up to [`PACKED`] bytes, keyed by [`pack`].
    short: FxHashMap<u128, u32>,
    long: FxHashMap<Box<[u8]>, u32>,
}

/// `bytes` (at most [`PACKED`]) and their length in one integer.
#[inline]
fn pack(bytes: &[u8]) -> u128 {
    let mut key = [0u8; 16];
    key[..bytes.len()].copy_from_slice(bytes);
    key[15] = bytes.len() as u8;
    u128::from_le_bytes(key)
}

impl Ranks {
    /// o200k_base's ordinary tokens, read from tiktoken-rs (which ships the table): every rank
    /// it decodes except the special tokens, which ordinary text never encodes to.
    pub fn o200k_base() -> Ranks {
        let bpe = tiktoken_rs::o200k_base().expect("tiktoken-rs's o200k_base table loads");
        let specials: Vec<&[u8]> = bpe
            .special_tokens()
            .into_iter()
            .map(str::as_bytes)
            .collect();
        let mut ranks = Ranks {
            short: FxHashMap::default(),
            long: FxHashMap::default(),
        };
        // Ranks are below 2^18 (o200k_base has about 200,000 tokens).
        for rank in 0..(1u32 << 18) {
            if let Ok(bytes) = bpe.decode_bytes(&[rank]) {
                if specials.contains(&bytes.as_slice()) {
                    continue;
                }
                if bytes.len() <= PACKED {
                    ranks.short.insert(pack(&bytes), rank);
                } else {
                    ranks.long.insert(bytes.into_boxed_slice(), rank);
                }
            }
        }
        ranks
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    #[inline]
    fn rank(&self, bytes: &[u8]) -> u32 {
        let found = if bytes.len() <= PACKED {
            self.short.get(&pack(bytes))
        } else {
            self.long.get(bytes)
        };
        found.copied().unwrap_or(NO_RANK)
    }

    /// Tokens of one piece.
    pub fn piece_tokens(&self, piece: &[u8]) -> usize {
        if piece.len() <= 1 || self.rank(piece) != NO_RANK {
            return piece.len().min(1);
        }
        if piece.len() > SHORT {
            return self.merge_long(piece);
        }
        // Words that are no token recur (identifiers, paths, names): their counts are
        // remembered per thread, up to a bound.
        MERGED.with_borrow_mut(|merged| {
            if let Some(&n) = merged.get(piece) {
                return n as usize;
            }
            let n = self.merge_short(piece);
            if merged.len() >= REMEMBERED {
                merged.clear();
            }
            merged.insert(piece.into(), n as u32);
            n
        })
    }

    fn merge_short(&self, piece: &[u8]) -> usize {
        let n = piece.len();
        // Part i is piece[starts[i]..starts[i + 1]]; ranks[i] is the rank of parts i and i + 1
        // joined.
        let mut starts = [0u16; SHORT + 1];
        let mut ranks = [NO_RANK; SHORT];
        for (i, s) in starts.iter_mut().enumerate().take(n + 1) {
            *s = i as u16;
        }
        for i in 0..n - 1 {
            ranks[i] = self.rank(&piece[i..i + 2]);
        }
        let mut parts = n;
        let joined = |starts: &[u16], parts: usize, i: usize| {
            if i + 2 <= parts {
                self.rank(&piece[starts[i] as usize..starts[i + 2] as usize])
            } else {
                NO_RANK
            }
        };
        loop {
            let mut best = (NO_RANK, 0);
            for (i, &r) in ranks[..parts - 1].iter().enumerate() {
                if r < best.0 {
                    best = (r, i);
                }
            }
            if best.0 == NO_RANK {
                return parts;
            }
            let at = best.1;
            // Parts `at` and `at + 1` become one: drop the boundary between them and the rank
            // of the pair that started at `at + 1`, then rank the two pairs the new part is in.
            starts.copy_within(at + 2..=parts, at + 1);
            if at + 2 < parts - 1 {
                ranks.copy_within(at + 2..parts - 1, at + 1);
            }
            parts -= 1;
            ranks[at] = joined(&starts, parts, at);
            if at > 0 {
                ranks[at - 1] = joined(&starts, parts, at - 1);
            }
        }
    }

    /// The same merges for a long piece: candidate pairs in a min-heap by (rank, start), parts
    /// as a linked list of their starts; a pair popped is skipped when it no longer matches the
    /// parts.
    fn merge_long(&self, piece: &[u8]) -> usize {
        let n = piece.len();
        // For a part starting at byte i: where it ends, where the part before it starts, and
        // the rank of it joined with the next part.
        let mut end: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut pair: Vec<u32> = vec![NO_RANK; n];
        let mut heap = BinaryHeap::with_capacity(n);
        for i in 0..n - 1 {
            pair[i] = self.rank(&piece[i..i + 2]);
            if pair[i] != NO_RANK {
                heap.push(Reverse((pair[i], i)));
            }
        }
        let mut parts = n;
        let rank_pair = |end: &[usize], i: usize| {
            let next = end[i];
            if next < n {
                self.rank(&piece[i..end[next]])
            } else {
                NO_RANK
            }
        };
        while let Some(Reverse((rank, left))) = heap.pop() {
            if pair[left] != rank {
                continue;
            }
            let right = end[left];
            end[left] = end[right];
            pair[right] = NO_RANK;
            parts -= 1;
            if end[left] < n {
                prev[end[left]] = left;
            }
            pair[left] = rank_pair(&end, left);
            if pair[left] != NO_RANK {
                heap.push(Reverse((pair[left], left)));
            }
            if left > 0 {
                let p = prev[left];
                pair[p] = rank_pair(&end, p);
                if pair[p] != NO_RANK {
                    heap.push(Reverse((pair[p], p)));
                }
            }
        }
        parts
    }
}
