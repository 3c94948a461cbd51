//! Text analysis shared by indexing and querying.
//!
//! Unicode words (tantivy's `SimpleTokenizer` splits on anything that is not alphanumeric),
//! tokens over 40 bytes dropped (base64 blobs, hashes), lowercased, English stop words removed,
//! then optionally the English Snowball stemmer. The same analyzer must be used for documents and
//! queries, so it is built from one [`AnalyzerConfig`].

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};

/// Longest token kept, in bytes.
pub const MAX_TOKEN_BYTES: usize = 40;

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
pub struct Analyzer {
    inner: TextAnalyzer,
}

impl Analyzer {
    pub fn new(config: AnalyzerConfig) -> Self {
        let base = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
            .filter(LowerCaser)
            .filter(
                StopWordFilter::new(Language::English)
                    .expect("tantivy ships an English stop word list"),
            );
        let inner = if config.stemming {
            base.filter(Stemmer::new(Language::English)).build()
        } else {
            base.build()
        };
        Analyzer { inner }
    }

    /// The underlying tantivy analyzer (to register the same analysis in a tantivy index).
    pub fn text_analyzer(&self) -> TextAnalyzer {
        self.inner.clone()
    }

    /// Calls `sink` with every token of `text`, in order, duplicates included.
    pub fn for_each_token(&mut self, text: &str, mut sink: impl FnMut(&str)) {
        let mut stream = self.inner.token_stream(text);
        let mut cancellation = crate::interrupt::Every::new(4096);
        while stream.advance() {
            cancellation.tick();
            sink(&stream.token().text);
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
