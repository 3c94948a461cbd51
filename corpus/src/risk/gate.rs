//! The lines of a view that a set of patterns can match in, found by one search over all of
//! them instead of one search per line.
//!
//! A skill has hundreds of logical lines and almost none of them matches a rule. Searching each
//! line on its own pays a search's fixed cost (a cache from the pool, a start state, a prefilter
//! that cannot skip past the line's end) hundreds of times per document. Here the lines are
//! joined with `\n` and the patterns compiled in multi-line mode, so `^` and `$` match at every
//! line's start and end, as they do at a lone line's; `\n` is not a word character, so `\b` at a
//! line's edge is the same too. A match within one line is therefore a match in the joined text,
//! and the search reports, for every line that has one, a match ending in that line or in an
//! earlier one that it has not yet passed (see [`Gate::lines`]). The joined text can match more
//! (`\s` crosses a `\n`): the gate only picks candidates, and each candidate line is then searched
//! on its own exactly as before, so findings are unchanged.

use regex_automata::meta::Regex;
use regex_automata::util::syntax;
use regex_automata::Input;

use super::context::Line;

/// Lines per search: the caller's cancellation point runs between windows.
const WINDOW: usize = 256;

pub struct Gate {
    any: Regex,
}

impl Gate {
    /// A gate for `patterns` (sources as the line regexes compile them).
    pub fn new<P: AsRef<str>>(patterns: &[P]) -> Gate {
        let any = Regex::builder()
            .syntax(syntax::Config::new().multi_line(true))
            // As the rule sets' own: a larger lazy-DFA cache keeps the automaton from being
            // rebuilt over and over on long documents.
            .configure(Regex::config().hybrid_cache_capacity(64 << 20))
            .build_many(patterns)
            .expect("valid rule patterns");
        Gate { any }
    }

    /// Indexes of the lines of `view` where one of the patterns may match: every line where one
    /// matches on its own, and perhaps a few more. `between` runs after each search (one per
    /// candidate, or per window of lines without one).
    pub fn lines(&self, view: &[Line], between: &mut dyn FnMut()) -> Vec<usize> {
        let mut joined = String::with_capacity(view.iter().map(|l| l.text.len() + 1).sum());
        let mut starts = Vec::with_capacity(view.len() + 1);
        for line in view {
            starts.push(joined.len());
            joined.push_str(&line.text);
            joined.push('\n');
        }
        starts.push(joined.len());
        let mut found = Vec::new();
        let mut line = 0;
        while line < view.len() {
            // Search from this line's start to the end of its window. A match within one line
            // ends before that line's `\n`, so no such match is cut by a window's end, and the
            // assertions at the ends of the span see the text around it.
            let window_end = (line + WINDOW).min(view.len());
            // The earliest end of any match from here (no search back for where it starts).
            let input = Input::new(&joined)
                .span(starts[line]..starts[window_end])
                .earliest(true);
            match self.any.search_half(&input) {
                Some(m) => {
                    // The line the match ends in (its last byte, or where an empty match is);
                    // the next search starts at the line after it. A line with a match of its
                    // own is never skipped: from any earlier line's start, some match ends at
                    // or before that line's own match ends.
                    let last = m.offset().saturating_sub(1).max(starts[line]);
                    let at = starts.partition_point(|&s| s <= last) - 1;
                    found.push(at);
                    line = at + 1;
                }
                None => line = window_end,
            }
            between();
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::super::context::logical_lines;
    use super::*;

    fn each_line_matching(patterns: &[&str], view: &[Line]) -> Vec<usize> {
        let one: Vec<regex::Regex> = patterns
            .iter()
            .map(|p| regex::Regex::new(p).unwrap())
            .collect();
        (0..view.len())
            .filter(|&i| one.iter().any(|r| r.is_match(&view[i].text)))
            .collect()
    }

    #[test]
    fn every_line_that_matches_alone_is_a_candidate() {
        let patterns = [
            r"(?i)^\s*rm\s+-rf\b",
            r"(?i)\bcurl\b[^\n]*\|\s*sh(?:$|\s)",
            r"secret$",
            r"(?i)\bdrop\s+database\b",
            r"[A-Za-z0-9+/]{20,}",
        ];
        let text = "rm -rf /\nnot rm -rf here\ncurl x | sh\ncurl x |\nsh\nthe secret\nsecret here\n\
                    DROP\ndatabase\ndrop   DATABASE x\nQUJDREVGR0hJSktMTU5PUFFSU1RVVldY\nshort AAAA\n\
                    curl https://a.b/c | sh -\n  rm -rf ~ && curl q | sh";
        let view = logical_lines(text);
        let gate = Gate::new(&patterns);
        let mut calls = 0;
        let found = gate.lines(&view, &mut || calls += 1);
        let expected = each_line_matching(&patterns, &view);
        assert!(!expected.is_empty());
        for i in &expected {
            assert!(
                found.contains(i),
                "line {i} ({:?}) matches alone but is no candidate",
                view[*i].text
            );
        }
        // Candidates rise and are few: none of the lines that match nothing, except where a
        // match runs over a line's end into them ("curl x |" then "sh", "DROP" then
        // "database").
        assert!(found.windows(2).all(|w| w[0] < w[1]));
        let extra: Vec<&str> = found
            .iter()
            .filter(|i| !expected.contains(i))
            .map(|&i| view[i].text.as_str())
            .collect();
        assert_eq!(extra, ["sh", "database"]);
        assert!(calls >= 1);
    }

    #[test]
    fn long_views_are_searched_in_windows_and_miss_nothing() {
        // Matches on both sides of every window's edge, and a view with none.
        let text: String = (0..2000)
            .map(|i| {
                if i % 255 == 0 || i % 256 == 255 {
                    format!("line {i} curl x | sh\n")
                } else {
                    format!("line {i}\n")
                }
            })
            .collect();
        let view = logical_lines(&text);
        let patterns = [r"(?i)\bcurl\b[^\n]*\|\s*sh(?:$|\s)"];
        let mut calls = 0;
        let found = Gate::new(&patterns).lines(&view, &mut || calls += 1);
        assert_eq!(found, each_line_matching(&patterns, &view));
        assert!(calls >= 2000 / WINDOW, "{calls} cancellation points");
        let quiet = logical_lines(&"nothing here\n".repeat(1000));
        assert!(Gate::new(&patterns).lines(&quiet, &mut || {}).is_empty());
    }
}
