//! Characters a reader cannot see or tell apart: invisible and bidirectional-control Unicode,
//! tag characters, and words that mix Latin with look-alike Cyrillic or Greek letters.

use super::context::Line;
use super::{Field, Finding, Level};

/// Bidirectional overrides/isolates and tag characters: never needed in a skill, and the classic
/// way to show a reader one text while a model or shell reads another.
fn is_hiding_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{E0000}'..='\u{E007F}')
}

/// Zero-width and other invisible format characters (a BOM inside text included).
fn is_zero_width(c: char) -> bool {
    matches!(c, '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{180E}')
}

/// Pictographs and emoji modifiers: a zero-width joiner between them builds one emoji (👩‍💻).
fn is_emoji_part(c: char) -> bool {
    matches!(c, '\u{2600}'..='\u{27BF}' | '\u{1F000}'..='\u{1FAFF}' | '\u{FE0F}')
}

/// Text with invisible characters written as `\u{…}` (for excerpts).
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hiding_control(c) || is_zero_width(c) {
            out.push_str(&format!("\\u{{{:04X}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

pub fn scan_line(field: Field, line: &Line, findings: &mut Vec<Finding>) {
    if line.text.is_ascii() {
        return;
    }
    invisible(field, line, findings);
    homoglyphs(field, line, findings);
}

fn invisible(field: Field, line: &Line, findings: &mut Vec<Finding>) {
    let chars: Vec<(usize, char)> = line.text.char_indices().collect();
    let mut hiding = 0;
    let mut first = None;
    for (i, &(offset, c)) in chars.iter().enumerate() {
        if is_hiding_control(c) {
            hiding += 1;
            first.get_or_insert(offset);
        } else if is_zero_width(c) {
            let joins_emoji = c == '\u{200D}'
                && i > 0
                && chars.get(i + 1).is_some_and(|&(_, n)| is_emoji_part(n))
                && is_emoji_part(chars[i - 1].1);
            if !joins_emoji {
                first.get_or_insert(offset);
            }
        }
    }
    let Some(at) = first else { return };
    findings.push(Finding {
        rule: "invisible-unicode",
        // Controls and tags hide or reorder text; a zero-width character is usually a copy-paste
        // artefact, but it can split a word so that filters and reviewers miss it.
        severity: if hiding > 0 {
            Level::High
        } else {
            Level::Medium
        },
        field,
        lines: line.span(at, at + 1),
        excerpt: super::context::excerpt(&line.text, at, at),
        mitigation: None,
    });
}

#[derive(Clone, Copy, PartialEq)]
enum Script {
    Latin,
    Cyrillic,
    GreekLookAlike,
    GreekOther,
    Other,
}

fn script(c: char) -> Script {
    match c {
        'a'..='z' | 'A'..='Z' => Script::Latin,
        '\u{0400}'..='\u{04FF}' => Script::Cyrillic,
        // Greek letters a reader takes for Latin ones (ο α ρ ν τ υ ι κ, and capitals).
        'ο' | 'α' | 'ρ' | 'ν' | 'τ' | 'υ' | 'ι' | 'κ' | 'Α' | 'Β' | 'Ε' | 'Ζ' | 'Η' | 'Ι' | 'Κ'
        | 'Μ' | 'Ν' | 'Ο' | 'Ρ' | 'Τ' | 'Υ' | 'Χ' => Script::GreekLookAlike,
        '\u{0370}'..='\u{03FF}' => Script::GreekOther,
        _ => Script::Other,
    }
}

/// Words (letter runs) with at least two Latin letters and a Cyrillic or look-alike Greek one:
/// `сurl`, `pip instаll`. Pure Cyrillic or Greek words, and symbols such as `Δk` or `μs`, pass.
fn homoglyphs(field: Field, line: &Line, findings: &mut Vec<Finding>) {
    let text = &line.text;
    let mut start = None;
    let mut flagged = Vec::new();
    let close = |s: usize, e: usize, flagged: &mut Vec<(usize, usize)>| {
        let word = &text[s..e];
        let scripts: Vec<Script> = word.chars().map(script).collect();
        let latin = scripts.iter().filter(|&&s| s == Script::Latin).count();
        let cyrillic = scripts.contains(&Script::Cyrillic);
        let greek_alike = scripts.contains(&Script::GreekLookAlike);
        let greek_other = scripts.contains(&Script::GreekOther);
        if latin >= 2 && (cyrillic || (greek_alike && !greek_other)) {
            flagged.push((s, e));
        }
    };
    for (i, c) in text.char_indices() {
        if c.is_alphabetic() {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            close(s, i, &mut flagged);
        }
    }
    if let Some(s) = start {
        close(s, text.len(), &mut flagged);
    }
    if let Some(&(s, e)) = flagged.first() {
        findings.push(Finding {
            rule: "homoglyph-command",
            severity: Level::Medium,
            field,
            lines: line.span(s, e),
            excerpt: super::context::excerpt(text, s, e),
            mitigation: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::context::logical_lines;
    use super::*;

    fn found(text: &str) -> Vec<(&'static str, Level)> {
        let mut f = Vec::new();
        for l in logical_lines(text) {
            scan_line(Field::Instructions, &l, &mut f);
        }
        f.into_iter().map(|f| (f.rule, f.severity)).collect()
    }

    #[test]
    fn hiding_controls_and_zero_width_characters_are_found() {
        assert_eq!(found("run \u{202E}gnp.exe"), [("invisible-unicode", Level::High)]);
        assert_eq!(found("tag\u{E0041}\u{E0042}"), [("invisible-unicode", Level::High)]);
        assert_eq!(found("rm\u{200B} -rf"), [("invisible-unicode", Level::Medium)]);
    }

    #[test]
    fn emoji_joiners_and_ordinary_unicode_pass() {
        assert!(found("Pair programming 👩\u{200D}💻 with café and naïve résumé").is_empty());
        assert!(found("Запустите тесты командой pytest").is_empty());
        assert!(found("Δk and μs and θ_new").is_empty());
    }

    #[test]
    fn mixed_script_words_are_homoglyphs() {
        assert_eq!(found("run сurl now"), [("homoglyph-command", Level::Medium)]);
        assert_eq!(found("pip instаll requests"), [("homoglyph-command", Level::Medium)]);
        assert_eq!(found("gο build"), []); // one Latin letter is not a word to imitate
        assert_eq!(found("gοlang build"), [("homoglyph-command", Level::Medium)]);
    }

    #[test]
    fn excerpts_show_invisible_characters() {
        assert_eq!(visible("a\u{200B}b"), "a\\u{200B}b");
    }
}
