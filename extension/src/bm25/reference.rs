//! The reference BM25 scorer over `skills.skill`, by sequential scan.
//!
//! It reads every skill, analyses it and scores it with `pg_skills_kernels::bm25`; corpus
//! statistics are always those of the whole table, and a category filter applies after scoring,
//! so a filter never changes a score. This stays as the oracle the BM25 index must agree with.

use std::collections::HashSet;

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::bm25::{Bm25Params, ReferenceScorer};
use pg_skills_kernels::text::AnalyzerConfig;

use crate::errors::raise;
use crate::guc;

fn current_params() -> Bm25Params {
    Bm25Params {
        k1: guc::BM25_K1.get(),
        b: guc::BM25_B.get(),
        ..Bm25Params::default()
    }
}

/// Every skill matching `query`, best first (score descending, then id), at most `k` (NULL: all),
/// only from `categories` when given (a NULL element matches nothing). A NULL query matches
/// nothing.
#[pg_extern(stable)]
fn bm25_scan(
    query: Option<&str>,
    k: Option<i32>,
    categories: Option<Vec<Option<String>>>,
) -> TableIterator<'static, (name!(id, i64), name!(score, f64))> {
    let limit = match k {
        Some(k) if k < 1 => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("k must be at least 1, got {k}"),
            Some("Pass NULL for no limit on the number of results."),
        ),
        Some(k) => Some(k as usize),
        None => None,
    };
    let Some(query) = query else {
        return TableIterator::new(Vec::new());
    };
    let wanted: Option<HashSet<String>> = categories.map(|c| c.into_iter().flatten().collect());
    let mut scorer = ReferenceScorer::new(
        current_params(),
        AnalyzerConfig {
            stemming: guc::BM25_STEMMING.get(),
        },
    )
    .unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            e,
            Some("Check pg_skills.bm25_k1 and pg_skills.bm25_b."),
        )
    });
    let mut allowed = HashSet::new();
    crate::spi::try_read(|client| -> Result<(), pgrx::spi::Error> {
        let rows = client.select(
            "SELECT id, name, description, instructions, category::text FROM skills.skill",
            None,
            &[],
        )?;
        for row in rows {
            let id: i64 = row.get(1)?.expect("skills.skill.id is NOT NULL");
            let text = |i: usize| -> Result<String, pgrx::spi::Error> {
                Ok(row.get::<String>(i)?.unwrap_or_default())
            };
            scorer.add(id, &text(2)?, &text(3)?, &text(4)?);
            if let Some(w) = &wanted {
                if w.contains(&text(5)?) {
                    allowed.insert(id);
                }
            }
        }
        Ok(())
    })
    .unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("reading skills: {e}"),
            None,
        )
    });
    let hits = scorer.search(query, limit, |id| wanted.is_none() || allowed.contains(&id));
    TableIterator::new(hits.into_iter().map(|h| (h.id, h.score)))
}
