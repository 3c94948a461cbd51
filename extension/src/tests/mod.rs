//! SQL behaviour of the extension, run inside Postgres by `cargo pgrx test`, one file per
//! feature (each its own `#[pg_schema] mod tests`: pgrx runs every `#[pg_test]` as a function of
//! schema `tests`). Each test runs in its own transaction, which is rolled back, so the tables
//! start empty.

mod helpers;

mod bm25_index;
mod embedding;
mod keyopt;
mod keys;
mod request;
mod skills;
mod trust;
