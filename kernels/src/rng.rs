//! SplitMix64: a small deterministic random stream for seeded tests, fuzzers and benchmark data
//! (reproducible from a printed seed; not for anything that needs unpredictability).

#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Shuffles `items` in place (Fisher-Yates), every order equally likely.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A small coding vocabulary for random skill text in tests.
const SKILL_WORDS: &[&str] = &[
    "rust",
    "test",
    "runner",
    "python",
    "debug",
    "trace",
    "panic",
    "refactor",
    "review",
    "docker",
    "deploy",
    "kubernetes",
    "helm",
    "schema",
    "migration",
    "query",
    "index",
    "vector",
    "model",
    "train",
    "dataset",
    "pandas",
    "plot",
    "markdown",
    "docs",
    "lint",
    "cargo",
    "build",
    "error",
    "stack",
    "memory",
    "leak",
    "profile",
    "cache",
    "http",
    "server",
    "api",
    "json",
    "config",
    "token",
    "auth",
    "browser",
    "react",
    "async",
    "thread",
    "lock",
    "queue",
    "retry",
    "timeout",
];

impl SplitMix64 {
    /// `min..=max` words of random skill text: the vocabulary above, plus numbered variants of
    /// it as a long tail of rarer terms.
    pub fn words(&mut self, min: u64, max: u64) -> String {
        let n = min + self.below(max - min + 1);
        (0..n)
            .map(|_| {
                let i = self.below(SKILL_WORDS.len() as u64 * 3) as usize;
                if i < SKILL_WORDS.len() {
                    SKILL_WORDS[i].to_string()
                } else {
                    format!("{}{}", SKILL_WORDS[i % SKILL_WORDS.len()], i % 11)
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_bounds_hold() {
        let (mut a, mut b) = (SplitMix64(7), SplitMix64(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.below(10) < 10);
            let u = a.unit();
            assert!((0.0..1.0).contains(&u));
            b.below(10);
            b.unit();
        }
        assert_ne!(SplitMix64(1).next_u64(), SplitMix64(2).next_u64());
    }
}
