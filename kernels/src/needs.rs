//! Requests that need several skills: the parts of a request, and an order of candidates that
//! covers every part.
//!
//! One key for "Parse the STL file. Then look up the material's density and email a report" sits
//! between the needs it names, so the skill for the second need often ranks below several near
//! misses of the first. The request's parts (sentences and list items, code blocks left out) are
//! scored on their own, and the served order is chosen greedily, as in xQuAD-style search result
//! diversification: each next candidate maximises its score for the whole request plus what it
//! adds for parts that earlier candidates have not covered yet. A request of one part keeps the
//! whole request's order unchanged.

use std::ops::Range;

use unicode_segmentation::UnicodeSegmentation;

/// At most this many parts are scored (longer requests have adjacent parts joined): each part
/// costs one more encoded text and one more key-index scan.
pub const MAX_PARTS: usize = 6;

/// A part with fewer words than this joins its neighbour ("Thanks.", "Data:", "1.").
pub const MIN_PART_WORDS: usize = 4;

/// A clause of a one-sentence request with fewer words than this joins its neighbour: a short
/// clause after "and" mostly qualifies the same need ("a test fails one run in ten on CI and
/// always passes locally"), a second request names its own object and context.
pub const MIN_CLAUSE_WORDS: usize = 6;

/// The weight of coverage against the whole request's score, in units of that score.
pub const COVERAGE_WEIGHT: f32 = 0.3;

/// How fast a candidate's coverage of a part falls as its score trails the part's best
/// candidate (score units; MiniLM cosines of one part's good matches lie within about 0.1).
pub const COVERAGE_WIDTH: f32 = 0.05;

/// A part of a request: its text and where that text lies in the request (byte ranges, one per
/// piece it was joined from: a code block between two pieces is left out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub text: String,
    pub spans: Vec<Range<usize>>,
}

/// The parts of a request, in order: sentences and list items, fenced code blocks dropped,
/// short pieces joined to the previous one, at most [`MAX_PARTS`]. A request of one sentence is
/// cut into its clauses instead ("book a flight to Oslo and find a hotel near the airport"). One
/// part (or none) means the request is not split.
pub fn parts(text: &str) -> Vec<String> {
    part_spans(text).into_iter().map(|p| p.text).collect()
}

/// [`parts`], each with where it lies in `text` (what `Encoder::embed_with_parts` pools a
/// part's key over).
pub fn part_spans(text: &str) -> Vec<Part> {
    let mut pieces: Vec<Piece> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_code = !in_code;
            continue;
        }
        if in_code || trimmed.is_empty() {
            continue;
        }
        for sentence in strip_list_marker(trimmed).unicode_sentences() {
            let sentence = sentence.trim();
            if !sentence.is_empty() {
                pieces.push(Piece::of(text, sentence));
            }
        }
    }
    let mut joined = joined_short(pieces, MIN_PART_WORDS);
    // Only a request of one sentence is cut into clauses: in a request of several, the
    // sentences are the needs, and the clauses of each are mostly steps of one need (measured:
    // cutting every sentence lost NDCG on SkillsBench's multi-sentence tasks).
    if let [(sentence, _)] = joined.as_slice() {
        let cut: Vec<Piece> = clauses(&sentence.text)
            .into_iter()
            .map(|range| sentence.slice(range))
            .collect();
        joined = joined_short(cut, MIN_CLAUSE_WORDS);
    }
    // Too many parts: join the adjacent pair with the fewest words until few enough.
    while joined.len() > MAX_PARTS {
        let at = (0..joined.len() - 1)
            .min_by_key(|&i| joined[i].1 + joined[i + 1].1)
            .expect("more than one part");
        let (next, n) = joined.remove(at + 1);
        joined[at].0.append(next);
        joined[at].1 += n;
    }
    joined
        .into_iter()
        .map(|(piece, _)| Part {
            spans: piece.segments.iter().map(|(_, r)| r.clone()).collect(),
            text: piece.text,
        })
        .collect()
}

/// A piece of a request's text: its text, and for each run of it copied from the request, where
/// the run starts in `text` and the bytes of the request it copies.
#[derive(Clone, Debug)]
struct Piece {
    text: String,
    segments: Vec<(usize, Range<usize>)>,
}

impl Piece {
    /// `sub`, a slice of `request`, as a piece.
    fn of(request: &str, sub: &str) -> Piece {
        // Both are the same allocation's bytes (`sub` was sliced from `request`), so the
        // distance between their starts is sub's offset.
        let start = sub.as_ptr() as usize - request.as_ptr() as usize;
        debug_assert!(start + sub.len() <= request.len());
        Piece {
            text: sub.to_string(),
            segments: vec![(0, start..start + sub.len())],
        }
    }

    /// The piece's bytes `range` (on character boundaries) as a piece of its own.
    fn slice(&self, range: Range<usize>) -> Piece {
        let segments = self
            .segments
            .iter()
            .filter_map(|(at, copied)| {
                let lo = range.start.max(*at);
                let hi = range.end.min(at + copied.len());
                (lo < hi).then(|| {
                    (
                        lo - range.start,
                        copied.start + (lo - at)..copied.start + (hi - at),
                    )
                })
            })
            .collect();
        Piece {
            text: self.text[range].to_string(),
            segments,
        }
    }

    /// `next` joined after this piece with a space between.
    fn append(&mut self, next: Piece) {
        self.text.push(' ');
        let shift = self.text.len();
        self.text.push_str(&next.text);
        self.segments
            .extend(next.segments.into_iter().map(|(at, r)| (at + shift, r)));
    }
}

/// Pieces with their word counts (counted once: a long request has thousands of pieces), a
/// piece shorter than `least` words joined to the previous one (and the next one to it).
fn joined_short(pieces: Vec<Piece>, least: usize) -> Vec<(Piece, usize)> {
    let mut joined: Vec<(Piece, usize)> = Vec::new();
    for piece in pieces {
        let n = words(&piece.text);
        match joined.last_mut() {
            Some((last, m)) if n < least || *m < least => {
                last.append(piece);
                *m += n;
            }
            _ => joined.push((piece, n)),
        }
    }
    joined
}

/// Words that can join two requests inside one sentence ("book a flight to Oslo and find a
/// hotel near the airport"); the sentence is cut before them, so the word stays with the second
/// clause and joining clauses back restores the sentence. A clause too short to be a request of
/// its own ("find flights and hotels", [`MIN_CLAUSE_WORDS`]) joins its neighbour again.
const JOINING_WORDS: [&str; 4] = [" and ", " then ", " also ", " as well as "];

/// The clauses of a sentence (byte ranges of it): cut after each ';' and before each of
/// [`JOINING_WORDS`], trimmed, empty ones left out.
fn clauses(sentence: &str) -> Vec<Range<usize>> {
    // ASCII lower-casing keeps every byte offset, so cuts found in `lower` apply to `sentence`.
    let lower = sentence.to_ascii_lowercase();
    let mut cuts: Vec<usize> = lower.match_indices(';').map(|(at, _)| at + 1).collect();
    for word in JOINING_WORDS {
        cuts.extend(lower.match_indices(word).map(|(at, _)| at + 1));
    }
    cuts.sort_unstable();
    cuts.push(sentence.len());
    let mut start = 0;
    let mut out = Vec::new();
    for cut in cuts {
        let raw = &sentence[start..cut];
        let clause = raw.trim();
        if !clause.is_empty() {
            let from = start + (raw.len() - raw.trim_start().len());
            out.push(from..from + clause.len());
        }
        start = cut;
    }
    out
}

fn words(text: &str) -> usize {
    text.unicode_words().count()
}

/// "1. ", "2) ", "- ", "* ", "+ " at the start of a list item.
fn strip_list_marker(line: &str) -> &str {
    let rest = line.trim_start_matches(|c: char| c.is_ascii_digit());
    let rest = if rest.len() < line.len() {
        rest.strip_prefix(['.', ')']).unwrap_or(line)
    } else {
        line.strip_prefix(['-', '*', '+']).unwrap_or(line)
    };
    rest.trim_start()
}

/// The order in which to serve a pool of candidates: positions into `whole`, each with the
/// greedy score it was chosen by (non-increasing).
///
/// `whole[i]` is candidate i's score for the whole request, `parts[j][i]` its score for part j
/// (same scale). A candidate covers part j with c = exp((s − best_j) / width), where best_j is
/// the best score any candidate has for part j; a part's uncovered share starts at 1 and is
/// multiplied by (1 − c) of each candidate chosen. Next is the candidate maximising
/// whole + weight · mean over parts of c · uncovered share (ties: the lower position). With no
/// parts, or one, the order is `whole`'s own.
pub fn cover(whole: &[f32], parts: &[Vec<f32>], weight: f32, width: f32) -> Vec<(usize, f32)> {
    let n = whole.len();
    assert!(
        parts.iter().all(|p| p.len() == n),
        "every part scores every candidate"
    );
    let mut order: Vec<(usize, f32)> = (0..n).map(|i| (i, whole[i])).collect();
    if parts.len() < 2 || !(width > 0.0) {
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        return order;
    }
    let coverage: Vec<Vec<f32>> = parts
        .iter()
        .map(|scores| {
            let best = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            scores
                .iter()
                .map(|&s| {
                    let c = ((s - best) / width).exp();
                    if c.is_finite() {
                        c.clamp(0.0, 1.0)
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    let share = weight / parts.len() as f32;
    let mut uncovered = vec![1.0f32; parts.len()];
    let mut left: Vec<usize> = (0..n).collect();
    let mut served = Vec::with_capacity(n);
    while !left.is_empty() {
        let gain = |i: usize| -> f32 {
            let covered: f32 = coverage.iter().zip(&uncovered).map(|(c, u)| c[i] * u).sum();
            whole[i] + share * covered
        };
        let (at, score) = left.iter().enumerate().map(|(at, &i)| (at, gain(i))).fold(
            (0, f32::NEG_INFINITY),
            |best, next| {
                if next.1 > best.1 {
                    next
                } else {
                    best
                }
            },
        );
        let chosen = left.remove(at);
        for (u, c) in uncovered.iter_mut().zip(&coverage) {
            *u *= 1.0 - c[chosen];
        }
        served.push((chosen, score));
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sentence_is_one_part() {
        assert_eq!(
            parts("Can I find academic research papers on this topic?"),
            vec!["Can I find academic research papers on this topic?"]
        );
        assert!(parts("  \n ").is_empty());
    }

    #[test]
    fn sentences_and_list_items_are_parts_and_code_is_dropped() {
        let text = "You need to calculate the mass of a printed part. Data:\n\n\
                    1. Parse the binary STL and find the largest component.\n\
                    2) Look up the density, e.g. in the table given.\n\
                    ```json\n{\"mass\": 1.5, \"note\": \"Do not split this. Ever again please.\"}\n```\n\
                    - Save the report as JSON to the output folder.";
        assert_eq!(
            parts(text),
            vec![
                "You need to calculate the mass of a printed part. Data:",
                "Parse the binary STL and find the largest component.",
                "Look up the density, e.g. in the table given.",
                "Save the report as JSON to the output folder.",
            ]
        );
    }

    #[test]
    fn one_sentence_naming_two_needs_is_two_parts() {
        // In a request of several sentences, the sentences are the parts.
        assert_eq!(
            parts("Book a flight to Oslo for Friday and find a hotel. Then email me the plan."),
            vec![
                "Book a flight to Oslo for Friday and find a hotel.",
                "Then email me the plan."
            ]
        );
        assert_eq!(
            parts("Book a flight to Oslo for Friday and find a hotel near the airport"),
            vec![
                "Book a flight to Oslo for Friday",
                "and find a hotel near the airport"
            ]
        );
        assert_eq!(
            parts("Lint the code; then run the tests with coverage and upload the report to the CI server."),
            vec![
                "Lint the code; then run the tests with coverage",
                "and upload the report to the CI server."
            ]
        );
        // Clauses too short to be requests of their own stay one part.
        assert_eq!(
            parts("A test fails about one run in ten on CI and always passes locally"),
            vec!["A test fails about one run in ten on CI and always passes locally"]
        );
        assert_eq!(
            parts("Find flights and hotels in Paris for next week"),
            vec!["Find flights and hotels in Paris for next week"]
        );
        assert_eq!(
            parts("Compare and contrast the two designs"),
            vec!["Compare and contrast the two designs"]
        );
        // Words that only contain a joining word are not cut ("android", "brand").
        assert_eq!(
            parts("Build the Android app bundle for the brand new release"),
            vec!["Build the Android app bundle for the brand new release"]
        );
    }

    #[test]
    fn short_pieces_join_and_long_requests_are_bounded() {
        assert_eq!(
            parts("Thanks. Please find flights to Paris next week."),
            vec!["Thanks. Please find flights to Paris next week."]
        );
        let long: String = (0..20)
            .map(|i| format!("Step {i} does one more thing here. "))
            .collect();
        let p = parts(&long);
        assert_eq!(p.len(), MAX_PARTS);
        // Nothing is lost by joining.
        assert_eq!(p.join(" ").split_whitespace().count(), 7 * 20);
        // The longest query a search accepts (32 kB) of short sentences still ends in 6 parts.
        let longest = "Do one thing now. ".repeat(32 * 1024 / 18);
        let p = parts(&longest);
        assert_eq!(p.len(), MAX_PARTS);
        assert_eq!(
            p.join(" ").split_whitespace().count(),
            longest.split_whitespace().count()
        );
    }

    #[test]
    fn every_part_is_the_request_bytes_its_spans_name() {
        let requests = [
            "You need to calculate the mass of a printed part. Data:\n\n\
             1. Parse the binary STL and find the largest component.\n\
             ```json\n{\"mass\": 1.5}\n```\n\
             - Save the report as JSON. Ok.",
            "  Book a flight to Oslo for Friday and find a hotel near the airport;  then email me.",
            "Résumé: trouver un hôtel à Zürich and réserver un vol pour demain matin s'il vous plaît",
            "One. Two. Three four five six. Seven eight nine ten eleven. Twelve thirteen fourteen \
             fifteen. A b c d e. F g h i j. K l m n o. P q r s t. U v w x y. Last sentence here.",
        ];
        for request in requests {
            let parts = part_spans(request);
            assert!(!parts.is_empty(), "{request}");
            let mut last_end = 0;
            for part in &parts {
                let copied: Vec<&str> = part.spans.iter().map(|r| &request[r.clone()]).collect();
                assert_eq!(copied.join(" "), part.text, "{request}");
                for r in &part.spans {
                    assert!(r.start >= last_end && r.start < r.end, "{request}: {r:?}");
                    last_end = r.end;
                }
            }
            let texts: Vec<String> = parts.into_iter().map(|p| p.text).collect();
            assert_eq!(texts, super::parts(request));
        }
        // The code block between two pieces is not in the part they join into.
        let text = "Short one.\n```\ncode here\n```\nSecond piece is longer than four words.";
        let parts = part_spans(text);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].spans.len(), 2);
        assert!(!parts[0]
            .spans
            .iter()
            .any(|r| text[r.clone()].contains("code")));
    }

    #[test]
    fn one_part_keeps_the_whole_order() {
        let whole = [0.2, 0.9, 0.5, 0.9];
        let order: Vec<usize> = cover(&whole, &[vec![0.0, 0.1, 0.9, 0.3]], 1.0, 0.05)
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        assert_eq!(order, vec![1, 3, 2, 0]);
    }

    #[test]
    fn the_second_need_comes_before_near_misses_of_the_first() {
        // Candidates 0–2 answer part A (0 best), 3 answers part B; the whole request's key
        // prefers A's near misses over B's answer.
        let whole = [0.60, 0.58, 0.57, 0.50];
        let a = vec![0.70, 0.66, 0.65, 0.20];
        let b = vec![0.20, 0.21, 0.22, 0.72];
        let plain: Vec<usize> = cover(&whole, &[], 0.3, 0.05).iter().map(|x| x.0).collect();
        assert_eq!(plain, vec![0, 1, 2, 3]);
        let covered = cover(&whole, &[a, b], 0.3, 0.05);
        let order: Vec<usize> = covered.iter().map(|x| x.0).collect();
        assert_eq!(order[..2], [0, 3]);
        assert!(covered.windows(2).all(|w| w[0].1 >= w[1].1));
    }

    #[test]
    fn nan_scores_neither_panic_nor_win() {
        let whole = [f32::NAN, 0.5, 0.4];
        let a = vec![0.1, f32::NAN, 0.9];
        let b = vec![0.8, 0.1, 0.1];
        let order = cover(&whole, &[a, b], 0.3, 0.05);
        assert_eq!(order.len(), 3);
        assert_ne!(order[0].0, 0);
    }
}
