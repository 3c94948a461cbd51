//! pg_skills: the Postgres glue. Algorithms live in the pgrx-free crates
//! (`pg_skills_kernels`, `pg_skills_corpus`); this crate maps them onto SQL.
//!
//! - [`guc`]: configuration (`pg_skills.*`).
//! - [`spi`]: every SQL statement the extension runs, under a fixed search_path.
//! - [`cancel`]: query cancellation inside the kernels' long loops.
//! - [`schema`]: the SQL files in `sql/` that define tables, views, triggers and `skills.search`.
//! - [`documents`]: per-document functions the trigger and loader share (hash, tokens, category).
//! - [`bm25`]: the `bm25` index access method and its `<&>` operator.
//! - [`key`]: the `skills.key` type, its distance operators and the `skeys` index.
//! - [`storage`]: the kernels' page trait on Postgres buffers, with generic WAL (both indexes).
//! - [`embedding`]: the sentence encoder and compressor in SQL, the embedding queue and its
//!   background worker.
//! - [`keyopt`]: KeyOpt rounds (fit, publish, roll back), the KeyOpt reading, the fitter worker.
//! - [`search`]: `skills.search` (six methods, token budgets, score parts), the skill graph and
//!   its walks, `skills.render_context`, and the reference BM25 scan.

use pgrx::prelude::*;

mod am;
mod bgworker;
mod bm25;
mod cancel;
mod documents;
mod embedding;
mod errors;
mod fmgr;
mod guc;
mod index_rows;
mod key;
mod keyopt;
mod prepared_writes;
mod schema;
mod scratch;
mod search;
mod spi;
mod storage;
mod trust;

::pgrx::pg_module_magic!(name, version);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    cancel::install();
    guc::init();
    bm25::options::register();
    bm25::bulk::install_hooks();
    key::index::options::register();
    embedding::worker::register();
    keyopt::worker::register();
}

#[cfg(any(test, feature = "pg_test"))]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
