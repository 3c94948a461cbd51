//! pgrx-free compute for pg_skills.
//!
//! Everything here is plain Rust, tested with `cargo test` and no Postgres. The extension crate
//! only moves data between Postgres and these functions.
//!
//! - [`text`]: the analyzer every BM25 path uses (tantivy's tokenizer and filters).
//! - [`bm25`]: the reference BM25 scorer. It scores by brute force and stays forever as the
//!   oracle that any BM25 index must agree with.
//! - [`layout`]: the byte layout every index page shares (header, kinds, TIDs, bounds checks).
//! - [`page`]: the page trait index algorithms are written against, and an in-memory store.
//! - [`bm25index`]: the BM25 index (segments, append area, block-max MaxScore, merges) over pages.
//! - [`keyopt`]: KeyOpt corrections from execution outcomes: fit (β, Δk, cross-validation),
//!   packed reading, the event memory and a planted-truth simulator.
//! - [`fusion`]: reciprocal-rank fusion (the `hybrid` method).
//! - [`graph`]: the skill graph, personalised PageRank, edge rules and SkillTrace.
//! - [`needs`]: the parts of a request that needs several skills, and an order covering them.
//! - [`complements`]: skills served beside a ranked skill (co-success in runs, dependency and
//!   workflow edges).
//! - [`serving`]: k, token budget and min_score over a ranking (what `skills.search` serves).
//! - [`kmeans`]: k-means over keys (the key index's lists).
//! - [`keyindex`]: the key index (IVF lists of f16 keys) over pages.
//! - [`encoder`]: the sentence encoder e(text) (all-MiniLM-L6-v2 in candle).
//! - [`compressor`]: query and skill keys from embeddings, and the residual compressor (trained
//!   with candle, applied in plain Rust).
//! - [`interrupt`]: cancellation points in long loops (the extension installs the check).
//! - [`vector`]: inner product, cosine and L2 kernels (f32, f16) via simsimd with a scalar twin,
//!   and batched scoring of one query against many contiguous keys.

pub mod bm25;
pub mod bm25index;
pub mod complements;
pub mod compressor;
pub mod encoder;
pub mod fusion;
pub mod graph;
pub mod int8_rows;
pub mod interrupt;
pub mod keyindex;
pub mod keyopt;
pub mod kmeans;
pub mod layout;
pub mod needs;
pub mod page;
pub mod rng;
pub mod serving;
pub mod synthetic;
pub mod text;
pub mod threads;
pub mod vector;
