//! Skill keys: the `skills.key` type, its distance operators, and the `skeys` index.
//!
//! - [`datatype`]: input, output, casts, checks (512-d, f16 storage).
//! - [`operators`]: `<#>` (negative inner product), `<=>` (cosine distance), `<->` (L2).
//! - [`index`]: the `skeys` access method over `pg_skills_kernels::keyindex`.
//! - [`query`]: `skills.keyquery`, a query key that carries its search breadth.
//! - [`top_k`]: the nearest skills straight from the index, for the searches.

pub mod datatype;
pub mod index;
pub mod operators;
pub mod query;
pub mod top_k;
