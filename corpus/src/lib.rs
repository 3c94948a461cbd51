//! pgrx-free ingestion for pg_skills.
//!
//! Readers turn sources into [`skill::Skill`]s or drop reasons; the [`dedup::Pipeline`] filters,
//! counts and deduplicates them; the loader (feature `loader`) streams the result into Postgres.

pub mod category;
pub mod dedup;
pub mod drop_reason;
pub mod filter;
pub mod license;
pub mod normalize;
pub mod o200k;
pub mod readers;
pub mod risk;
pub mod skill;
pub mod source;

#[cfg(feature = "loader")]
pub mod conninfo;
#[cfg(feature = "loader")]
pub mod load;
