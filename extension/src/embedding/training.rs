//! `skills.train_compressor_weights`: trains the residual compressor on (query, skill) pairs.
//! `skills.train_compressor` (sql/embedding.sql) stores and activates the result.

use std::collections::HashMap;

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::compressor::{self, TrainOptions, TrainingSet};
use pg_skills_kernels::encoder::{document_text, EMBEDDING_DIMS};

use super::{embed_texts, encoder, raise_encoder_error};
use crate::errors::raise;

/// Query texts and skill ids of the pairs query, in order.
fn read_pairs(pairs: &str) -> Vec<(String, i64)> {
    crate::spi::try_read(|client| {
        let rows = client.select(pairs, None, &[])?;
        let mut out = Vec::new();
        for row in rows {
            if row.columns() != 2 {
                raise(
                    PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                    format!("the pairs query returns {} columns, not 2", row.columns()),
                    Some("Return (query text, skill_id bigint), e.g. SELECT task, skill_id FROM my_labels."),
                );
            }
            let query = row.get::<String>(1)?;
            let skill = row.get::<i64>(2)?;
            if let (Some(q), Some(s)) = (query, skill) {
                out.push((q, s));
            }
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
    .unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("the pairs query failed: {e}"),
            Some("Pass a query returning (query text, skill_id bigint)."),
        )
    })
}

/// e(doc) of each skill: the stored embedding when its content has not changed, else computed.
fn skill_embeddings(ids: &[i64]) -> Vec<Vec<f32>> {
    let rows: Vec<(i64, Option<Vec<f32>>, String)> = crate::spi::read(|client| {
        let rows = client.select(
            "SELECT s.id, k.embedding, s.name, s.description, s.instructions \
             FROM skills.skill AS s \
             LEFT JOIN skills.skill_key AS k ON k.skill_id = s.id AND k.content_hash = s.content_hash \
             WHERE s.id = ANY($1)",
            None,
            &[ids.to_vec().into()],
        )?;
        let mut out = Vec::new();
        for row in rows {
            let text = |i| -> Result<String, pgrx::spi::Error> {
                Ok(row.get::<String>(i)?.unwrap_or_default())
            };
            out.push((
                row.get::<i64>(1)?.expect("NOT NULL"),
                row.get::<Vec<f32>>(2)?,
                document_text(&text(3)?, &text(4)?, &text(5)?),
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    });
    let found: HashMap<i64, usize> = rows.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    if let Some(missing) = ids.iter().find(|id| !found.contains_key(id)) {
        raise(
            PgSqlErrorCode::ERRCODE_FOREIGN_KEY_VIOLATION,
            format!("the pairs name skill {missing}, which does not exist"),
            Some("skill_id must be an id of skills.skill."),
        );
    }
    let to_embed: Vec<&str> = rows
        .iter()
        .filter(|r| r.1.is_none())
        .map(|r| r.2.as_str())
        .collect();
    let mut computed = if to_embed.is_empty() {
        Vec::new()
    } else {
        embed_texts(&encoder(), &to_embed).unwrap_or_else(|e| raise_encoder_error(e))
    }
    .into_iter();
    let embeddings: Vec<Vec<f32>> = rows
        .into_iter()
        .map(|r| {
            r.1.unwrap_or_else(|| computed.next().expect("one per missing"))
        })
        .collect();
    ids.iter().map(|id| embeddings[found[id]].clone()).collect()
}

#[pg_extern]
fn train_compressor_weights(
    pairs: &str,
    hidden: i32,
    epochs: i32,
    seed: i64,
) -> TableIterator<
    'static,
    (
        name!(weights, Vec<u8>),
        name!(sha256, String),
        name!(report, pgrx::JsonB),
    ),
> {
    if !(1..=4096).contains(&hidden) || !(1..=1000).contains(&epochs) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("hidden must be in 1..4096 and epochs in 1..1000, got {hidden} and {epochs}"),
            Some("The defaults (hidden 256, 30 epochs) suit a few thousand pairs."),
        );
    }
    let pairs = read_pairs(pairs);
    if pairs.len() < 4 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{} training pairs are too few", pairs.len()),
            Some("Give at least a few pairs per skill; hold out the queries you evaluate on."),
        );
    }
    let mut query_index: HashMap<&str, usize> = HashMap::new();
    let mut skill_index: HashMap<i64, usize> = HashMap::new();
    let mut index_pairs = Vec::with_capacity(pairs.len());
    for (q, s) in &pairs {
        let nq = query_index.len();
        let qi = *query_index.entry(q.as_str()).or_insert(nq);
        let ns = skill_index.len();
        let si = *skill_index.entry(*s).or_insert(ns);
        index_pairs.push((qi, si));
    }
    let mut query_texts = vec![""; query_index.len()];
    for (q, i) in &query_index {
        query_texts[*i] = q;
    }
    let mut skill_ids = vec![0i64; skill_index.len()];
    for (s, i) in &skill_index {
        skill_ids[*i] = *s;
    }
    let documents = skill_embeddings(&skill_ids);
    debug_assert!(documents.iter().all(|d| d.len() == EMBEDDING_DIMS));
    let queries = embed_texts(&encoder(), &query_texts).unwrap_or_else(|e| raise_encoder_error(e));
    let options = TrainOptions {
        hidden: hidden as usize,
        epochs: epochs as usize,
        seed: seed as u64,
        ..Default::default()
    };
    let set = TrainingSet {
        queries: &queries,
        documents: &documents,
        pairs: &index_pairs,
    };
    let mut between_epochs = |_| {
        pg_sys::check_for_interrupts!();
    };
    let (trained, report) = compressor::train(&set, &options, &mut between_epochs)
        .unwrap_or_else(|e| raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, e, None));
    let weights = trained.to_bytes();
    let sha256 = compressor::checksum(&weights);
    let report = serde_json::json!({
        "pairs": pairs.len(),
        "queries": queries.len(),
        "skills": documents.len(),
        "training_pairs": report.training_pairs,
        "validation_pairs": report.validation_pairs,
        "epochs": report.epochs_run,
        "best_epoch": report.best_epoch,
        "validation_mrr_raw": report.validation_mrr_raw,
        "validation_mrr": report.validation_mrr,
        "hidden": hidden,
        "seed": seed,
        "options": format!("{options:?}"),
    });
    TableIterator::once((weights, sha256, pgrx::JsonB(report)))
}
