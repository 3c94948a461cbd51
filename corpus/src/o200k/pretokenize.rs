//! o200k_base's pre-tokenizer, written out. BPE runs within the pieces it cuts a text into, so
//! a token count needs exactly its pieces. The pattern (tiktoken's `O200K_BASE_PAT_STR`), whose
//! alternatives are tried in order at each position, the first that matches winning:
//!
//! ```text
//! 1  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! 2  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! 3  \p{N}{1,3}
//! 4   ?[^\s\p{L}\p{N}]+[\r\n/]*
//! 5  \s*[\r\n]+
//! 6  \s+(?!\S)
//! 7  \s+
//! ```
//!
//! Each alternative is matched as a backtracking engine would (greedy quantifiers give back
//! characters until the rest matches); the comments say what that comes to. The regex engine
//! itself spent most of a count in its search and its per-thread caches. `tests` compares the
//! pieces with tiktoken's own pattern on generated and real texts.

use super::classes::{Classes, LETTER, LOWER, NUMBER, SPACE, UPPER};

/// The pieces of a text, in order; together they are the whole text.
pub struct Pieces<'a> {
    scanner: Scanner<'a>,
    pos: usize,
}

impl<'a> Pieces<'a> {
    pub fn new(text: &'a str, classes: &'a Classes) -> Pieces<'a> {
        Pieces {
            scanner: Scanner { text, classes },
            pos: 0,
        }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let text = self.scanner.text;
        if self.pos >= text.len() {
            return None;
        }
        let start = self.pos;
        self.pos = self.scanner.piece_end(start);
        Some(&text[start..self.pos])
    }
}

struct Scanner<'a> {
    text: &'a str,
    classes: &'a Classes,
}

impl Scanner<'_> {
    /// The character at byte `i`, its class mask and the byte after it.
    #[inline]
    fn at(&self, i: usize) -> Option<(char, u8, usize)> {
        let b = *self.text.as_bytes().get(i)?;
        if b < 0x80 {
            let c = b as char;
            return Some((c, self.classes.of(c), i + 1));
        }
        let c = self.text[i..].chars().next()?;
        Some((c, self.classes.of(c), i + c.len_utf8()))
    }

    /// Where the run of characters whose mask meets `class` that starts at `i` ends.
    #[inline]
    fn run(&self, i: usize, class: u8) -> usize {
        self.run_while(i, |m| m & class != 0)
    }

    /// Where the run of characters whose mask passes `member` that starts at `i` ends.
    #[inline]
    fn run_while(&self, mut i: usize, member: impl Fn(u8) -> bool) -> usize {
        while let Some((_, m, next)) = self.at(i) {
            if !member(m) {
                break;
            }
            i = next;
        }
        i
    }

    fn piece_end(&self, start: usize) -> usize {
        let (c0, m0, after0) = self.at(start).expect("a piece starts at a character");
        let may_prefix = c0 != '\r' && c0 != '\n' && m0 & (LETTER | NUMBER) == 0;
        // 1: an optional prefix, then a word with a lowercase part (prefix tried first).
        if may_prefix {
            if let Some(end) = self.lower_word(after0) {
                return self.contraction(end);
            }
        }
        if let Some(end) = self.lower_word(start) {
            return self.contraction(end);
        }
        // 2: an optional prefix, then a capitalised word.
        if may_prefix {
            if let Some(end) = self.upper_word(after0) {
                return self.contraction(end);
            }
        }
        if let Some(end) = self.upper_word(start) {
            return self.contraction(end);
        }
        // 3: one to three digits.
        if m0 & NUMBER != 0 {
            let mut end = after0;
            for _ in 0..2 {
                match self.at(end) {
                    Some((_, m, next)) if m & NUMBER != 0 => end = next,
                    _ => break,
                }
            }
            return end;
        }
        // 4: punctuation and symbols, after an optional space, then newlines and slashes.
        let is_other = |m: u8| m & (SPACE | LETTER | NUMBER) == 0;
        let body = if c0 == ' ' && self.at(after0).is_some_and(|(_, m, _)| is_other(m)) {
            Some(after0)
        } else if is_other(m0) {
            Some(start)
        } else {
            None
        };
        if let Some(body) = body {
            let mut end = self.run_while(body, is_other);
            while let Some(('\r' | '\n' | '/', _, next)) = self.at(end) {
                end = next;
            }
            return end;
        }
        // Every letter matched 1 or 2, every digit 3 and every other non-space 4: c0 is white
        // space. Its run, the end of the last newline in it, and where its last character starts.
        let mut end = start;
        let mut last_newline_end = None;
        let mut last_start = start;
        let mut chars = 0usize;
        while let Some((c, m, next)) = self.at(end) {
            if m & SPACE == 0 {
                break;
            }
            if c == '\r' || c == '\n' {
                last_newline_end = Some(next);
            }
            last_start = end;
            end = next;
            chars += 1;
        }
        // 5: `\s*` gives back white space until `[\r\n]+` matches: up to the run's last newline.
        if let Some(newline_end) = last_newline_end {
            return newline_end;
        }
        // 6: `\s+(?!\S)`: the whole run at the end of the text, else all but its last character.
        if end == self.text.len() {
            return end;
        }
        if chars >= 2 {
            return last_start;
        }
        // 7: one white space character before a non-space.
        end
    }

    /// `[UPPER]*[LOWER]+` from `i`: the longest run of UPPER that a LOWER character follows,
    /// giving back characters of the run (the last that is LOWER too) when none does.
    fn lower_word(&self, i: usize) -> Option<usize> {
        let mut end = i;
        let mut last_lower_end = None;
        while let Some((_, m, next)) = self.at(end) {
            if m & UPPER == 0 {
                break;
            }
            if m & LOWER != 0 {
                last_lower_end = Some(next);
            }
            end = next;
        }
        match self.at(end) {
            Some((_, m, _)) if m & LOWER != 0 => Some(self.run(end, LOWER)),
            // Characters after the one given back are UPPER only: `[LOWER]+` stops there.
            _ => last_lower_end,
        }
    }

    /// `[UPPER]+[LOWER]*` from `i`.
    fn upper_word(&self, i: usize) -> Option<usize> {
        let end = self.run(i, UPPER);
        (end > i).then(|| self.run(end, LOWER))
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` at `i` (case-insensitive: `ſ` is an `s`).
    fn contraction(&self, i: usize) -> usize {
        let Some(('\'', _, after)) = self.at(i) else {
            return i;
        };
        let folded = |at: usize| {
            self.at(at).map(|(c, _, next)| {
                let c = if c == 'ſ' {
                    's'
                } else {
                    c.to_ascii_lowercase()
                };
                (c, next)
            })
        };
        match folded(after) {
            Some(('s' | 't' | 'm' | 'd', next)) => next,
            Some((first @ ('r' | 'v' | 'l'), next)) => {
                let second = if first == 'l' { 'l' } else { 'e' };
                match folded(next) {
                    Some((c, end)) if c == second => end,
                    _ => i,
                }
            }
            _ => i,
        }
    }
}
