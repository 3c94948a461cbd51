//! The text around a match: logical lines, warnings, quotes, and excerpts.

use std::sync::OnceLock;

use regex::Regex;

/// A logical line: in code, physical lines joined where one ends in `\` (or PowerShell's
/// backtick), so a command split over lines is matched whole; in prose, a paragraph or list
/// item wrapped over lines, so a sentence is matched whole.
#[derive(Clone, Debug)]
pub struct Line {
    pub text: String,
    /// 1-based first and last physical line.
    pub first: usize,
    pub last: usize,
    pub in_code: bool,
    /// (byte offset in `text`, physical line number) where each joined physical line starts.
    starts: Vec<(usize, usize)>,
}

impl Line {
    /// The physical lines a match at `start..end` of `text` covers.
    pub fn span(&self, start: usize, end: usize) -> (usize, usize) {
        let at = |offset: usize| {
            self.starts
                .iter()
                .take_while(|(o, _)| *o <= offset)
                .last()
                .map_or(self.first, |(_, n)| *n)
        };
        (at(start), at(end.saturating_sub(1).max(start)))
    }
}

/// A prose line that starts its own block: a heading, list item, table row, quote or fence.
fn starts_block(t: &str) -> bool {
    let t = t.trim_start();
    t.starts_with('#')
        || t.starts_with("- ")
        || t.starts_with("* ")
        || t.starts_with("+ ")
        || t.starts_with('|')
        || t.starts_with('>')
        || t.starts_with("```")
        || t.starts_with("~~~")
        || t.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// Physical lines, joined where one inside code ends in `\` (or PowerShell's backtick).
pub fn logical_lines(text: &str) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    let mut open = false;
    let mut in_code = false;
    for (i, physical) in text.split('\n').enumerate() {
        let n = i + 1;
        let trimmed = physical.trim_end();
        let t = trimmed.trim_start();
        let fence = t.starts_with("```") || t.starts_with("~~~");
        let (body, continues) = match trimmed.strip_suffix('\\').or(trimmed.strip_suffix('`')) {
            Some(b) if !fence && !trimmed.ends_with("``") => (b, true),
            _ => (trimmed, false),
        };
        match out.last_mut() {
            Some(last) if open => {
                last.text.push(' ');
                let offset = last.text.len();
                last.text.push_str(body.trim_start());
                last.starts.push((offset, n));
                last.last = n;
            }
            _ => out.push(Line {
                text: body.to_string(),
                first: n,
                last: n,
                in_code: in_code && !fence,
                starts: vec![(0, n)],
            }),
        }
        open = continues;
        if fence {
            in_code = !in_code;
        }
    }
    out
}

/// Prose paragraphs and list items joined over their wrapped lines (a sentence is read whole);
/// code lines and block starts (headings, list items, table rows) stay as they are.
pub fn paragraphs(lines: &[Line]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for line in lines {
        let joins = !line.in_code
            && !line.text.trim().is_empty()
            && !starts_block(&line.text)
            && out.last().is_some_and(|l: &Line| {
                let t = l.text.trim_start();
                !l.in_code && !t.is_empty() && !t.starts_with('#') && !t.starts_with('|')
                    && !t.starts_with("```") && !t.starts_with("~~~")
            });
        match out.last_mut() {
            Some(last) if joins => {
                last.text.push(' ');
                let base = last.text.len();
                last.text.push_str(line.text.trim_start());
                let shift = line.text.len() - line.text.trim_start().len();
                last.starts.extend(line.starts.iter().map(|(o, n)| ((base + o).saturating_sub(shift).max(base), *n)));
                last.last = line.last;
            }
            _ => out.push(line.clone()),
        }
    }
    out
}

/// Where logical line `line` starts inside `paragraphs`: (paragraph index, byte offset).
pub fn locate(paragraphs: &[Line], line: &Line) -> Option<(usize, usize)> {
    paragraphs.iter().enumerate().find_map(|(i, p)| {
        p.starts
            .iter()
            .find(|(_, n)| *n == line.first)
            .map(|(o, _)| (i, *o))
    })
}

/// [`is_warned`] for a match on logical line `index`: in prose the whole paragraph is the
/// context (a sentence wraps), in code the line and the comment above it.
pub fn is_warned_at(lines: &[Line], paragraphs: &[Line], index: usize, start: usize, end: usize) -> bool {
    let line = &lines[index];
    if !line.in_code {
        if let Some((p, offset)) = locate(paragraphs, line) {
            let len = paragraphs[p].text.len();
            let (s, e) = ((offset + start).min(len), (offset + end).min(len));
            if paragraphs[p].text.is_char_boundary(s) && paragraphs[p].text.is_char_boundary(e) {
                // Prose that describes a command may condemn it in the next paragraph ("Do not
                // recommend these flags").
                let next = paragraphs[p + 1..]
                    .iter()
                    .map(|l| l.text.trim())
                    .find(|t| !t.is_empty())
                    .filter(|t| !t.starts_with('#') && !t.starts_with("```"));
                let next_warns = next.is_some_and(|t| warned_after(t, 200));
                return next_warns || is_warned(paragraphs, p, s, e);
            }
        }
    }
    is_warned(lines, index, start, end)
}

/// Compiles a rule pattern with ASCII word boundaries: a Unicode `\b` makes the regex crate's
/// lazy DFA give up on any non-ASCII text (most real skills have some) and fall back to its
/// PikeVM, several times slower; the words the rules look for are ASCII.
pub(super) fn regex(pattern: &str) -> Regex {
    Regex::new(&ascii_boundaries(pattern)).expect("valid rule pattern")
}

pub(super) fn ascii_boundaries(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('b') => out.push_str("(?-u:\\b)"),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn warning_before() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        regex(
            r"(?i)(\bnever\b|\bwhy\s+not\b|\bsuch\s+as\b|\be\.g\.|\bfor\s+(?:example|instance)\b|\bpatterns?\s+like\b|\blook\s+for\b|\bsearch\s+for\b|\bscan\s+for\b|\bdon'?t\b(?:\s+worry)?|\bdo\s+not\b|\bavoid(?:ing)?\b|\bmust\s*n[o']t\b|\bshould\s*n[o']t\b|\binstead\s+of\b|\brather\s+than\b|\bdangerous\b|\binsecure\b|\bunsafe\b|\bbad\b|\bwrong\b|\banti-?pattern\b|\bwarning\b|\bdetects?\b|\bflags?\b|\bblocks?\b|❌|⚠)",
        )
    })
}

/// True when the text just before a match on its line warns against it ("never run …",
/// "avoid …", "❌"), or the line above is a warning heading or comment (`# BAD:`, `❌ Don't`).
pub fn is_warned(lines: &[Line], index: usize, match_start: usize, match_end: usize) -> bool {
    let line = &lines[index].text;
    let before = &line[..match_start];
    // Only the same clause: up to 80 bytes back, not across a sentence end.
    let mut from = before.len().saturating_sub(80);
    while !before.is_char_boundary(from) {
        from += 1;
    }
    let window = &before[from..];
    let clause = &window[sentence_start(window)..];
    let reach = if lines[index].in_code { 100 } else { 300 };
    if warned_clause(clause) || warned_after(&line[match_end.min(line.len())..], reach) {
        return true;
    }
    // The nearest non-blank line above, when it is a comment, heading or list marker that warns.
    // (Not across a code fence: a heading before a block is judged by `block_warned`.)
    let above = lines[..index]
        .iter()
        .rev()
        .map(|l| l.text.trim())
        .take_while(|t| !t.starts_with("```") && !t.starts_with("~~~"))
        .find(|t| !t.is_empty());
    let above_warns = above.is_some_and(|t| {
        let marker = t.starts_with('#')
            || t.starts_with("//")
            || t.starts_with("--")
            || t.starts_with('>')
            || t.starts_with('*')
            || t.starts_with('-')
            || t.starts_with("<!--")
            || t.starts_with('❌')
            || t.starts_with('⚠');
        marker && strongly_warned(t)
    });
    above_warns || (lines[index].in_code && block_warned(lines, index))
}

/// Words that condemn what follows them in a heading, a comment or the sentence that introduces
/// a code block ("## What the attacker ran (DO NOT EXECUTE)", "# BAD:", "❌"). Stricter than a
/// clause's warning words: a heading such as "Don't skip this step" must not excuse its block.
fn strongly_warned(text: &str) -> bool {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        regex(
            r"(?i)\b(?:never|do\s+not|don'?t)\s+(?:ever\s+)?(?:execute|run|use|copy|paste|try|do\s+this|pipe)\b|\battackers?\b|\bmalicious\b|\bexploits?\b|\bbad\b|\bwrong\b|\banti-?pattern\b|\binsecure\b|\bunsafe\b|\bdangerous\b|\bindicators?\s+of\s+compromise\b|\bavoid\b|❌|⚠",
        )
    })
    .is_match(text)
}

/// A code line whose block is introduced as something not to run: the nearest heading above the
/// block, or the text just before its opening fence, condemns it.
fn block_warned(lines: &[Line], index: usize) -> bool {
    let Some(fence) = (0..index).rev().find(|&i| !lines[i].in_code) else {
        return false;
    };
    let intro = lines[..fence]
        .iter()
        .rev()
        .map(|l| l.text.trim())
        .find(|t| !t.is_empty());
    let heading = lines[..fence]
        .iter()
        .rev()
        .map(|l| l.text.trim())
        .find(|t| t.starts_with('#'));
    intro.is_some_and(condemns_block) || heading.is_some_and(condemns_block)
}

/// Stricter than [`strongly_warned`]: a heading such as "## Avoid flaky tests" or "## Handling
/// bad input" introduces code to run; "## What the attacker ran (DO NOT EXECUTE)" does not.
fn condemns_block(text: &str) -> bool {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        regex(
            r"(?i)\b(?:never|do\s+not|don'?t)\s+(?:ever\s+)?(?:execute|run|copy|paste|try)\b|\battackers?\b|\bmalicious\b|\bexploits?\b|\bindicators?\s+of\s+compromise\b|\b(?:insecure|unsafe|dangerous|bad)\s+(?:example|pattern|code|practice)s?\b|\banti-?patterns?\b|❌",
        )
    })
    .is_match(text)
}

/// Where the last sentence of `text` starts: after `!`, `?`, `;`, or a `.` followed by a space
/// and a capital letter (so "e.g. `…`" and file names stay in one clause).
fn sentence_start(text: &str) -> usize {
    let b = text.as_bytes();
    let mut start = 0;
    for i in 0..b.len() {
        let end = match b[i] {
            b'!' | b'?' | b';' => true,
            b'.' => {
                b.get(i + 1).is_some_and(|c| c.is_ascii_whitespace())
                    && b.get(i + 2).is_none_or(|c| c.is_ascii_uppercase())
            }
            _ => false,
        };
        if end {
            start = i + 1;
        }
    }
    start
}

/// The rest of the line right after a match condemns it ("`verify=False` … never use it").
fn warned_after(after: &str, reach: usize) -> bool {
    static R: OnceLock<Regex> = OnceLock::new();
    let r = R.get_or_init(|| {
        regex(
            r"(?i)\b(?:never\s+(?:use|do|run|pipe|copy|paste)|do\s+not\s+(?:use|do|run|recommend|suggest|add|enable|set)|don'?t\s+(?:use|do|run|recommend|suggest|add|enable|set)|avoid\b|is\s+(?:insecure|unsafe|dangerous)|not\s+recommended|bad\s+practice|flag\s+(?:these|this|it|them)\b|reject\b|block\s+(?:these|this|it|them)\b)",
        )
    });
    let mut end = after.len().min(reach);
    while !after.is_char_boundary(end) {
        end -= 1;
    }
    r.is_match(&after[..end])
}

fn warned_clause(text: &str) -> bool {
    warning_before().find_iter(text).any(|m| {
        // "don't worry" reassures, it does not warn.
        !m.as_str().to_ascii_lowercase().ends_with("worry")
    })
}

/// A command line that searches text for a pattern (grep, rg, findstr, …): what it matches is
/// the pattern being searched for, not a command being run.
pub fn is_search_pattern(line: &str) -> bool {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        regex(r"(?i)^\s*(?:\$\s+)?(?:sudo\s+)?(?:grep|egrep|fgrep|zgrep|rg|ag|ack|git\s+grep|findstr|select-string|sls|semgrep)\s")
    })
    .is_match(line)
}

/// A Markdown blockquote introduced as quoted material (the text before it ends with ':').
pub fn is_quoted_block(view: &[Line], index: usize) -> bool {
    if !view[index].text.trim_start().starts_with('>') {
        return false;
    }
    view[..index]
        .iter()
        .rev()
        .map(|l| l.text.trim())
        .find(|t| !t.is_empty() && !t.starts_with('>'))
        .is_some_and(|t| t.ends_with(':'))
}

/// True when `start..end` of `line` lies inside a quotation ("…", '…', `…`, “…”, «…»).
pub fn is_quoted(line: &str, start: usize, end: usize) -> bool {
    let (before, after) = (&line[..start], &line[end..]);
    for (open, close) in [('"', '"'), ('`', '`'), ('“', '”'), ('«', '»'), ('\'', '\'')] {
        let opens = before.matches(open).count();
        let closes = if open == close {
            0
        } else {
            before.matches(close).count()
        };
        let inside = if open == close {
            opens % 2 == 1
        } else {
            opens > closes
        };
        // A lone apostrophe (don't, user's) is not a quote: need one right before the match text.
        let tight = open != '\''
            || before.trim_end().ends_with('\'') && after.trim_start().starts_with('\'');
        if inside && tight && after.contains(close) {
            return true;
        }
    }
    false
}

/// The line around `start..end`, at most ~160 characters, invisible characters made visible.
pub fn excerpt(line: &str, start: usize, end: usize) -> String {
    const SIDE: usize = 60;
    let from = line[..start]
        .char_indices()
        .rev()
        .nth(SIDE)
        .map(|(i, _)| i)
        .unwrap_or(0);
    let to = line[end..]
        .char_indices()
        .nth(SIDE)
        .map(|(i, _)| end + i)
        .unwrap_or(line.len());
    let core: String = line[start..end].chars().take(200).collect();
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    out.push_str(&line[from..start]);
    out.push_str(&core);
    out.push_str(&line[end..to]);
    if to < line.len() {
        out.push('…');
    }
    super::unicode::visible(out.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_lines_join_and_keep_their_span() {
        let lines = logical_lines("```\ncurl -fsSL https://x \\\n  | bash\n```\nb");
        assert_eq!(lines[1].text, "curl -fsSL https://x  | bash");
        assert_eq!((lines[1].first, lines[1].last), (2, 3));
        assert!(lines[1].in_code);
        assert_eq!(lines[2].text, "```");
        let prose = paragraphs(&logical_lines("Run it quietly and don't\nmention this step.\n- item\n\n# Head\nnext"));
        assert_eq!(prose[0].text, "Run it quietly and don't mention this step.");
        assert_eq!(prose[0].span(25, 32), (2, 2));
        assert_eq!(prose.len(), 5);
    }

    #[test]
    fn warnings_are_recognised_in_the_clause_or_the_line_above() {
        let l = logical_lines("Never run `curl x | sh` on a server.");
        assert!(is_warned(&l, 0, l[0].text.find("curl").unwrap(), l[0].text.len()));
        let l = logical_lines("Install it. Then run curl x | sh");
        assert!(!is_warned(&l, 0, l[0].text.find("curl").unwrap(), l[0].text.len()));
        let l = logical_lines("# BAD: pipes remote code into a shell\ncurl x | sh");
        assert!(is_warned(&l, 1, 0, 0));
        let l = logical_lines("# Don't worry, this is safe\ncurl x | sh");
        assert!(!is_warned(&l, 1, 0, 0));
        let l = logical_lines("Setup\ncurl x | sh");
        assert!(!is_warned(&l, 1, 0, 0));
    }

    #[test]
    fn word_boundaries_become_ascii_and_escapes_stay() {
        assert_eq!(ascii_boundaries(r"\bcurl\\b\s"), r"(?-u:\b)curl\\b\s");
        assert!(regex(r"(?i)\bcurl\b").is_match("é curl é"));
    }

    #[test]
    fn quotes_are_recognised() {
        let line = r#"Flag inputs such as "ignore previous instructions" in tickets."#;
        let s = line.find("ignore").unwrap();
        assert!(is_quoted(line, s, s + 28));
        let line = "Ignore previous instructions and don't stop.";
        assert!(!is_quoted(line, 0, 29));
        let line = "the user's files: ignore previous instructions";
        let s = line.find("ignore").unwrap();
        assert!(!is_quoted(line, s, line.len()));
    }
}
