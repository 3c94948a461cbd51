//! Text analysis shared by indexing and querying.
//!
//! Unicode words (tantivy's `SimpleTokenizer` splits on anything that is not alphanumeric),
//! tokens over 40 bytes dropped (base64 blobs, hashes), lowercased, English stop words removed,
//! then optionally the English Snowball stemmer. The same analyzer must be used for documents and
//! queries, so it is built from one [`AnalyzerConfig`].

use std::collections::HashMap;

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    TextAnalyzerBuilder, Tokenizer,
};

/// Longest token kept, in bytes.
pub const MAX_TOKEN_BYTES: usize = 40;

/// Most distinct words whose stems an analyzer remembers; past this the memory starts over.
/// A skill library's vocabulary is a few tens of thousands of words, and each entry is two short
/// strings, so a full memory is a few megabytes.
const STEM_MEMORY_WORDS: usize = 200_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnalyzerConfig {
    pub stemming: bool,
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        AnalyzerConfig { stemming: true }
    }
}

/// A reusable analyzer. Not `Sync` (tantivy analyzers keep per-stream buffers): make one per thread.
///
/// Stemming is the costliest step of the analysis, and a document's words repeat (a skill of
/// 10 kB has about 1,500 words, a third of them distinct), so each word's stem is computed once
/// per analyzer and remembered. The stems are those of tantivy's English `Stemmer` filter (the
/// same Snowball implementation it calls).
pub struct Analyzer {
    /// Words, lowercased, with long ones and stop words dropped: what the stemmer receives.
    words: TextAnalyzer,
    stemmer: Option<frostem::Stemmer>,
    stems: HashMap<String, String, rustc_hash::FxBuildHasher>,
}

impl Analyzer {
    pub fn new(config: AnalyzerConfig) -> Self {
        Analyzer {
            words: Self::words().build(),
            stemmer: config
                .stemming
                .then(|| frostem::Stemmer::new(frostem::Algorithm::English)),
            stems: HashMap::default(),
        }
    }

    /// Unicode words, long ones dropped, lowercased, stop words dropped.
    fn words() -> TextAnalyzerBuilder<impl Tokenizer> {
        TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
            .filter(LowerCaser)
            .filter(
                StopWordFilter::new(Language::English)
                    .expect("tantivy ships an English stop word list"),
            )
    }

    /// The same analysis as a tantivy analyzer (to register it in a tantivy index).
    pub fn text_analyzer(&self) -> TextAnalyzer {
        match self.stemmer {
            None => self.words.clone(),
            Some(_) => Self::words()
                .filter(Stemmer::new(Language::English))
                .build(),
        }
    }

    /// Calls `sink` with every token of `text`, in order, duplicates included.
    pub fn for_each_token(&mut self, text: &str, mut sink: impl FnMut(&str)) {
        let mut stream = self.words.token_stream(text);
        let mut cancellation = crate::interrupt::Every::new(4096);
        while stream.advance() {
            cancellation.tick();
            let word = &stream.token().text;
            let Some(stemmer) = &self.stemmer else {
                sink(word);
                continue;
            };
            if let Some(stem) = self.stems.get(word.as_str()) {
                sink(stem);
                continue;
            }
            if self.stems.len() >= STEM_MEMORY_WORDS {
                self.stems.clear();
            }
            let stem = stemmer.stem(word).into_owned();
            sink(&stem);
            self.stems.insert(word.clone(), stem);
        }
    }

    /// Every token of `text`, in order, duplicates included.
    pub fn tokens(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_token(text, |t| out.push(t.to_owned()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_analysis_reaches_cancellation_points() {
        let text = "cancel this analysis ".repeat(20_000);
        let checks = crate::interrupt::tests::checks_made(|| {
            let mut a = Analyzer::new(AnalyzerConfig { stemming: true });
            assert_eq!(a.tokens(&text).len(), 40_000); // "this" is a stop word
        });
        assert!(checks >= 9, "{checks} checks over 60,000 tokens");
    }

    #[test]
    fn lowercases_splits_and_drops_stop_words() {
        let mut a = Analyzer::new(AnalyzerConfig { stemming: false });
        assert_eq!(
            a.tokens("The Quick-brown fox, and THE lazy_dog!"),
            vec!["quick", "brown", "fox", "lazy", "dog"]
        );
    }

    #[test]
    fn stemming_conflates_inflections() {
        let mut a = Analyzer::new(AnalyzerConfig { stemming: true });
        assert_eq!(
            a.tokens("testing tests tested"),
            vec!["test", "test", "test"]
        );
        let mut plain = Analyzer::new(AnalyzerConfig { stemming: false });
        assert_eq!(plain.tokens("testing tests"), vec!["testing", "tests"]);
    }

    #[test]
    fn remembered_stems_are_tantivys_stems() {
        // Words that stem, words that do not, stop words, long tokens, non-ASCII and mixed case,
        // analysed twice (the second pass reads remembered stems) and against tantivy's own
        // pipeline with its Stemmer filter.
        let text =
            "Running runners ran; the RUNNING of tests, tested TESTING testers. Généralisation \
                    naïvely caching cached caches — connection connections connected, agreed \
                    agreement, happily happiness, fly flies flying, x86_64 v2.3.1 日本語 "
                .repeat(3)
                + &"z".repeat(MAX_TOKEN_BYTES + 1);
        let mut a = Analyzer::new(AnalyzerConfig { stemming: true });
        let first = a.tokens(&text);
        let again = a.tokens(&text);
        let mut reference = a.text_analyzer();
        let mut stream = reference.token_stream(&text);
        let mut expected = Vec::new();
        while stream.advance() {
            expected.push(stream.token().text.clone());
        }
        assert_eq!(first, expected);
        assert_eq!(again, expected);
        assert!(first.contains(&"run".to_string()) && first.contains(&"connect".to_string()));
    }

    #[test]
    fn unicode_words_and_long_tokens() {
        let mut a = Analyzer::new(AnalyzerConfig { stemming: false });
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(
            a.tokens(&format!("naïve café {long} 日本語")),
            vec!["naïve", "café", "日本語"]
        );
    }

    #[test]
    fn empty_and_punctuation_only_input() {
        let mut a = Analyzer::new(AnalyzerConfig::default());
        assert!(a.tokens("").is_empty());
        assert!(a.tokens("  ,.;!? \u{0} ").is_empty());
        assert!(a.tokens("the and of").is_empty());
    }
}
