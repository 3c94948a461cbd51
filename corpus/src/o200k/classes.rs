//! The Unicode classes o200k_base's pre-tokenizer pattern names, per character, with the same
//! Unicode tables the regex engine uses (regex-syntax resolves `\p{..}` and `\s` for us).

use regex_syntax::hir::{Class, HirKind};

/// `\p{L}`.
pub const LETTER: u8 = 1;
/// `\p{N}`.
pub const NUMBER: u8 = 2;
/// `\s` (Unicode White_Space).
pub const SPACE: u8 = 4;
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: what may open a capitalised word.
pub const UPPER: u8 = 8;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: what may continue a word.
pub const LOWER: u8 = 16;

/// Code points per block of the two-level table.
const BLOCK: usize = 256;
const CODE_POINTS: usize = 0x11_0000;

/// Class masks of every code point, as a two-level table of shared 256-entry blocks (about
/// 100 KB instead of 1.1 MB: most blocks repeat).
pub struct Classes {
    block_of: Vec<u16>,
    blocks: Vec<[u8; BLOCK]>,
}

impl Classes {
    pub fn new() -> Classes {
        let mut masks = vec![0u8; CODE_POINTS];
        let classes: [(&str, u8); 5] = [
            (r"\p{L}", LETTER),
            (r"\p{N}", NUMBER),
            (r"\s", SPACE),
            (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", UPPER),
            (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", LOWER),
        ];
        for (pattern, bit) in classes {
            for (start, end) in unicode_ranges(pattern) {
                for m in &mut masks[start as usize..=end as usize] {
                    *m |= bit;
                }
            }
        }
        let mut block_of = Vec::with_capacity(CODE_POINTS / BLOCK);
        let mut blocks: Vec<[u8; BLOCK]> = Vec::new();
        let mut seen = std::collections::HashMap::new();
        for chunk in masks.chunks_exact(BLOCK) {
            let block: [u8; BLOCK] = chunk.try_into().expect("a chunk is one block");
            let index = *seen.entry(block).or_insert_with(|| {
                blocks.push(block);
                blocks.len() - 1
            });
            block_of.push(u16::try_from(index).expect("fewer distinct blocks than u16 holds"));
        }
        Classes { block_of, blocks }
    }

    #[inline]
    pub fn of(&self, c: char) -> u8 {
        let c = c as usize;
        self.blocks[self.block_of[c / BLOCK] as usize][c % BLOCK]
    }
}

/// The code point ranges a one-class pattern matches, from regex-syntax's Unicode tables.
fn unicode_ranges(pattern: &str) -> Vec<(u32, u32)> {
    let hir = regex_syntax::Parser::new()
        .parse(pattern)
        .expect("the class patterns are valid");
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        _ => panic!("{pattern} is not one Unicode class"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_of_sample_characters() {
        let c = Classes::new();
        assert_eq!(c.of('a'), LETTER | LOWER);
        assert_eq!(c.of('Q'), LETTER | UPPER);
        assert_eq!(c.of('7'), NUMBER);
        assert_eq!(c.of(' '), SPACE);
        assert_eq!(c.of('\u{a0}'), SPACE);
        assert_eq!(c.of('\u{2028}'), SPACE);
        assert_eq!(c.of('-'), 0);
        // A letter of no case (Lo) and a combining mark (M) can do both.
        assert_eq!(c.of('中'), LETTER | UPPER | LOWER);
        assert_eq!(c.of('\u{301}'), UPPER | LOWER);
        assert_eq!(c.of('Ⅻ'), NUMBER);
        assert_eq!(c.of('\u{10FFFF}'), 0);
    }
}
