//! Differential tests against tiktoken-rs: its pattern's pieces and its token counts.

use super::O200k;

fn reference_pieces(text: &str) -> Vec<String> {
    use std::sync::OnceLock;
    static PATTERN: OnceLock<fancy_regex::Regex> = OnceLock::new();
    PATTERN
        .get_or_init(|| fancy_regex::Regex::new(tiktoken_rs::O200K_BASE_PAT_STR).unwrap())
        .find_iter(text)
        .map(|m| m.unwrap().as_str().to_owned())
        .collect()
}

fn reference_count(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len()
}

fn check(text: &str) {
    let ours: Vec<&str> = O200k::get().pieces(text).collect();
    assert_eq!(ours, reference_pieces(text), "pieces of {text:?}");
    assert_eq!(
        O200k::get().count(text),
        reference_count(text),
        "count of {text:?}"
    );
}

/// A deterministic generator (splitmix64), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Characters at the edges of the pattern's classes: every general category it names, white
/// space that is not ASCII, contraction letters (and `ſ`, which case-folds to `s`), newlines,
/// slashes, a zero-width space (a format character, not white space).
const TRICKY: &[&str] = &[
    "a",
    "z",
    "A",
    "Z",
    "s",
    "S",
    "t",
    "T",
    "r",
    "R",
    "e",
    "E",
    "v",
    "V",
    "m",
    "M",
    "l",
    "L",
    "d",
    "D",
    "ſ",
    "'",
    "'",
    "'s",
    "'T",
    "'re",
    "'LL",
    "'ve",
    "'m",
    "'d",
    " ",
    " ",
    " ",
    "  ",
    "\t",
    "\n",
    "\n",
    "\r\n",
    "\r",
    "\u{b}",
    "\u{c}",
    "\u{85}",
    "\u{a0}",
    "\u{2028}",
    "\u{3000}",
    "\u{200b}",
    "0",
    "7",
    "123",
    "٣",
    "Ⅻ",
    "½",
    ".",
    ",",
    "(",
    ")",
    "/",
    "//",
    "-",
    "_",
    "`",
    "#",
    "*",
    "=",
    "é",
    "É",
    "ß",
    "İ",
    "\u{212a}",
    "ǅ",
    "ʰ",
    "中",
    "\u{301}",
    "\u{94d}",
    "😀",
    "👍🏽",
    "word",
    "Word",
    "WORD",
    "HTTPServer",
    "x86",
    "don't",
    "l'été",
];

/// Half of the time one of [`TRICKY`], else any code point (ASCII, two-byte, BMP or any
/// plane alike).
fn random_part(rng: &mut Rng) -> String {
    if rng.below(2) == 0 {
        return TRICKY[rng.below(TRICKY.len())].to_owned();
    }
    let limit = [0x80, 0x800, 0x1_0000, 0x11_0000][rng.below(4)];
    char::from_u32(rng.below(limit) as u32)
        .unwrap_or('\u{fffd}')
        .to_string()
}

#[test]
fn pieces_and_counts_of_generated_texts() {
    let mut rng = Rng(20261205);
    for _ in 0..20_000 {
        let len = rng.below(32);
        let text: String = (0..len).map(|_| random_part(&mut rng)).collect();
        check(&text);
    }
}

#[test]
fn known_pieces() {
    let o = O200k::get();
    let pieces = |t| o.pieces(t).collect::<Vec<_>>();
    assert_eq!(pieces("Hello world"), ["Hello", " world"]);
    assert_eq!(pieces("HTTPServer's"), ["HTTPServer's"]);
    assert_eq!(pieces("a  \n\n  b"), ["a", "  \n\n", " ", " b"]);
    assert_eq!(pieces("12345"), ["123", "45"]);
    assert_eq!(pieces(" ..\n/x"), [" ..\n/", "x"]);
    assert_eq!(pieces("x   "), ["x", "   "]);
    assert!(pieces("").is_empty());
}

#[test]
fn long_pieces_merge_as_tiktoken_does() {
    // Pieces far longer than the short-merge limit: punctuation runs, one long word, base64.
    let mut rng = Rng(7);
    let punct = ".-=_*#~+:;!?<>|";
    let run: String = (0..3000)
        .map(|_| punct.as_bytes()[rng.below(punct.len())] as char)
        .collect();
    check(&run);
    check(&"=".repeat(10_000));
    let word: String = (0..2000)
        .map(|_| (b'a' + rng.below(26) as u8) as char)
        .collect();
    check(&word);
    check(&format!(" {}", "Ab".repeat(700)));
    let base64: String = (0..4000)
        .map(|_| {
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[rng.below(64)]
                as char
        })
        .collect();
    check(&base64);
}

#[test]
fn the_repositorys_skill_documents_count_as_tiktoken_counts_them() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for entry in walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "SKILL.md" || e.path().extension().is_some_and(|x| x == "rs"))
    {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        check(&text);
        checked += 1;
    }
    assert!(checked > 100, "{checked} files");
}

#[test]
fn the_vocabulary_is_o200k_base() {
    let ranks = super::bpe::Ranks::o200k_base();
    assert!(
        (199_000..=200_019).contains(&ranks.len()),
        "{} tokens",
        ranks.len()
    );
    // A special token's text is ordinary text: several tokens, not one.
    assert!(O200k::get().count("<|endoftext|>") > 1);
    assert_eq!(
        O200k::get().count("<|endoftext|>"),
        reference_count("<|endoftext|>")
    );
}

#[test]
fn counting_in_runs_calls_back_and_adds_up() {
    let text = "Run `cargo test` first.\n## Step 2\n1. Ünïcode wörds\n".repeat(5000);
    let mut calls = 0;
    let n = O200k::get().count_with(&text, &mut || calls += 1);
    assert!(calls >= 3, "{calls} calls");
    assert_eq!(n, reference_count(&text));
}

/// The per-thread cache of short pieces' counts: a text of more distinct short pieces than it
/// has slots, counted twice (the second time partly from the cache, with slots taken over by
/// other pieces), gives the reference count both times.
#[test]
fn counts_through_a_full_piece_cache_equal_the_reference() {
    let mut rng = Rng(11);
    let letters = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
    let text: String = (0..40_000)
        .map(|_| {
            let len = 1 + rng.below(14);
            let word: String = (0..len)
                .map(|_| letters[rng.below(letters.len())] as char)
                .collect();
            format!(" {word}")
        })
        .collect();
    let expected = reference_count(&text);
    assert_eq!(O200k::get().count(&text), expected);
    assert_eq!(O200k::get().count(&text), expected);
}
