//! The retrieval-quality harness: BEIR-layout datasets, ranking metrics, and the runner that
//! drives `skills.search` in a real database (see `src/retrieval.rs`).

pub mod beir;
pub mod eval;
pub mod metrics;
pub mod real_keys;
pub mod timing;
