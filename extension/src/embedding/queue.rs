//! Draining `skills.embed_queue`: queued skills are locked (SKIP LOCKED, so several embedders
//! share the work), embedded, their keys upserted and their queue rows deleted in the caller's
//! transaction, so a crash or an error repeats the batch and never loses or doubles one.

use std::time::Instant;

use pgrx::prelude::*;

use pg_skills_kernels::compressor;
use pg_skills_kernels::encoder::{document_text, Encoder, EncoderError};

use super::{active_compressor, embed_texts};

#[derive(Clone, Copy, Debug, Default)]
pub struct BatchOutcome {
    pub embedded: i64,
    pub failed: i64,
    pub seconds: f64,
}

struct Queued {
    skill_id: i64,
    content_hash: String,
    text: String,
}

/// Whether this node is the Citus coordinator, where the queue and the graph are worked on
/// (docs/citus.md). Only where Citus is installed (a table is distributed).
pub fn on_citus_coordinator() -> bool {
    crate::spi::select_one::<bool>("SELECT pg_catalog.citus_is_coordinator()", &[]).unwrap_or(false)
}

fn take_batch(limit: i64) -> Vec<Queued> {
    // A read-write SPI call: pgrx runs statements read-only until the transaction has an xid,
    // and Postgres refuses FOR UPDATE in a read-only call (skills.embed_pending() as the first
    // statement of a transaction failed that way).
    // On Citus (docs/citus.md) the queue is distributed and row locks cannot be taken across
    // shards: embedders on the coordinator take turns on an advisory lock instead, and a
    // worker node leaves the queue to the coordinator (its shard rows are the coordinator's).
    let distributed = crate::spi::is_distributed("skills.embed_queue");
    if distributed && !on_citus_coordinator() {
        return Vec::new();
    }
    crate::spi::write(|client| {
        if distributed {
            client.update(
                "SELECT pg_advisory_xact_lock(hashtext('pg_skills.embed_queue'))",
                None,
                &[],
            )?;
        }
        // Copies of content another skill already has (only Citus can store them: no unique
        // constraint backs the content hash there) merge into that skill before being keyed.
        // (Two statements: Citus plans a query over the queue, then a call with its result.)
        let hashes = client
            .update(
                "SELECT q.content_hash FROM skills.embed_queue AS q WHERE q.failed_reason IS NULL \
                 ORDER BY q.enqueued_at, q.skill_id LIMIT $1",
                None,
                &[limit.into()],
            )?
            .map(|row| Ok(row.get::<String>(1)?.unwrap_or_default()))
            .collect::<Result<Vec<String>, pgrx::spi::Error>>()?;
        if !hashes.is_empty() {
            client.update(
                "SELECT skills.merge_duplicate_skills($1)",
                None,
                &[hashes.into()],
            )?;
        }
        let rows = if distributed {
            client.update(
                "SELECT q.skill_id, s.content_hash, s.name, s.description, s.instructions \
                 FROM skills.embed_queue AS q JOIN skills.skill AS s ON s.id = q.skill_id \
                 WHERE q.failed_reason IS NULL \
                 ORDER BY q.enqueued_at, q.skill_id \
                 LIMIT $1",
                None,
                &[limit.into()],
            )?
        } else {
            client.update(
                "SELECT q.skill_id, s.content_hash, s.name, s.description, s.instructions \
                 FROM skills.embed_queue AS q JOIN skills.skill AS s ON s.id = q.skill_id \
                 WHERE q.failed_reason IS NULL \
                 ORDER BY q.enqueued_at, q.skill_id \
                 LIMIT $1 FOR UPDATE OF q SKIP LOCKED",
                None,
                &[limit.into()],
            )?
        };
        let mut out = Vec::new();
        for row in rows {
            let text = |i| -> Result<String, pgrx::spi::Error> {
                Ok(row.get::<String>(i)?.unwrap_or_default())
            };
            out.push(Queued {
                skill_id: row.get::<i64>(1)?.expect("NOT NULL"),
                content_hash: text(2)?,
                text: document_text(&text(3)?, &text(4)?, &text(5)?),
            });
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// Embeds `texts`; a text the encoder rejects gets its reason and the others still go through.
fn embed_isolating(
    encoder: &Encoder,
    texts: &[&str],
) -> Result<Vec<Result<Vec<f32>, String>>, EncoderError> {
    match embed_texts(encoder, texts) {
        Ok(vectors) => Ok(vectors.into_iter().map(Ok).collect()),
        Err(EncoderError::Input { .. }) | Err(EncoderError::Run(_)) if texts.len() > 1 => texts
            .iter()
            .map(|t| match embed_texts(encoder, &[t]) {
                Ok(mut v) => Ok(Ok(v.remove(0))),
                Err(e @ (EncoderError::Input { .. } | EncoderError::Run(_))) => {
                    Ok(Err(e.to_string()))
                }
                Err(e) => Err(e),
            })
            .collect(),
        Err(e @ (EncoderError::Input { .. } | EncoderError::Run(_))) => {
            Ok(vec![Err(e.to_string())])
        }
        Err(e) => Err(e),
    }
}

/// One batch of at most `limit` skills, in the current transaction. `Err` only when the encoder
/// itself cannot run (model missing or corrupt): then nothing was written.
pub fn embed_batch(encoder: &Encoder, limit: i64) -> Result<BatchOutcome, EncoderError> {
    let started = Instant::now();
    let batch = take_batch(limit);
    if batch.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let texts: Vec<&str> = batch.iter().map(|q| q.text.as_str()).collect();
    let results = embed_isolating(encoder, &texts)?;
    let (version, active) = active_compressor();
    let mut outcome = BatchOutcome::default();
    // Each skill's key, or its encoder failure, in one subtransaction for the batch. An ERROR
    // there that is the work's own (a trigger or a constraint someone put on skills.skill_key,
    // a key the type refuses) would otherwise end the worker, which would take the same batch
    // again after its restart and stall the queue: the batch is then written again one skill
    // per subtransaction, and the skill whose write fails so is marked failed with the error.
    // An ERROR about the server's state (a full disk, a deadlock) is raised as before: the
    // skills stay queued for a later try.
    let write = |queued: &Queued, result: &Result<Vec<f32>, String>| {
        write_result(queued, result, version, active.as_deref())
    };
    let keyed: Vec<bool> = match crate::errors::in_subtransaction(|| {
        batch.iter().zip(&results).for_each(|(q, r)| write(q, r))
    }) {
        Ok(()) => results.iter().map(Result::is_ok).collect(),
        Err(e) if !e.is_about_the_work() => e.raise(),
        Err(_) => batch
            .iter()
            .zip(&results)
            .map(|(queued, result)| {
                match crate::errors::in_subtransaction(|| write(queued, result)) {
                    Ok(()) => result.is_ok(),
                    Err(e) if e.is_about_the_work() => {
                        mark_failed(queued.skill_id, &format!("writing its key: {e}"));
                        false
                    }
                    Err(e) => e.raise(),
                }
            })
            .collect(),
    };
    let done: Vec<i64> = batch
        .iter()
        .zip(&keyed)
        .filter(|(_, &k)| k)
        .map(|(q, _)| q.skill_id)
        .collect();
    outcome.embedded = done.len() as i64;
    outcome.failed = (batch.len() - done.len()) as i64;
    crate::spi::write(|client| {
        // Only rows still asking for the content embedded here (without row locks, on Citus,
        // a new version may have been queued meanwhile; it stays queued).
        let done_hashes: Vec<String> = batch
            .iter()
            .filter(|q| done.contains(&q.skill_id))
            .map(|q| q.content_hash.clone())
            .collect();
        client.update(
            "DELETE FROM skills.embed_queue WHERE skill_id = ANY($1) AND content_hash = ANY($2)",
            None,
            &[done.into(), done_hashes.into()],
        )?;
        outcome.seconds = started.elapsed().as_secs_f64();
        client.update(
            "UPDATE skills.embedder_progress SET \
                 embedded_total = embedded_total + $1, failed_total = failed_total + $2, \
                 rate = CASE WHEN rate IS NULL THEN $3 ELSE 0.7 * rate + 0.3 * $3 END, \
                 last_batch_at = now(), last_batch_size = $4",
            None,
            &[
                outcome.embedded.into(),
                outcome.failed.into(),
                (batch.len() as f64 / outcome.seconds.max(1e-6)).into(),
                (batch.len() as i32).into(),
            ],
        )?;
        Ok::<_, pgrx::spi::Error>(())
    });
    Ok(outcome)
}

/// Writes one queued skill's key, or marks it failed with the encoder's reason.
fn write_result(
    queued: &Queued,
    result: &Result<Vec<f32>, String>,
    version: Option<i32>,
    active: Option<&pg_skills_kernels::compressor::Compressor>,
) {
    match result {
        Ok(embedding) => {
            let key = compressor::skill_key(active, embedding);
            crate::spi::write(|client| {
                client
                    .update(
                        "INSERT INTO skills.skill_key AS k \
                             (skill_id, content_hash, embedding, k0, compressor_version) \
                         VALUES ($1, $2, $3, skills.key($4), $5) \
                         ON CONFLICT (skill_id) DO UPDATE SET \
                             content_hash = EXCLUDED.content_hash, \
                             embedding = EXCLUDED.embedding, k0 = EXCLUDED.k0, \
                             compressor_version = EXCLUDED.compressor_version, \
                             embedded_at = EXCLUDED.embedded_at",
                        None,
                        &[
                            queued.skill_id.into(),
                            queued.content_hash.as_str().into(),
                            embedding.clone().into(),
                            key.into(),
                            version.into(),
                        ],
                    )
                    .map(|_| ())
            });
        }
        Err(reason) => mark_failed(queued.skill_id, reason),
    }
}

/// Leaves `skill_id` in the queue with the reason it failed (not taken again until its content
/// changes).
fn mark_failed(skill_id: i64, reason: &str) {
    crate::spi::write(|client| {
        client
            .update(
                "UPDATE skills.embed_queue SET failed_reason = $2, failed_at = now() \
                 WHERE skill_id = $1",
                None,
                &[skill_id.into(), reason.into()],
            )
            .map(|_| ())
    });
}

/// Embeds queued skills now, in this transaction (databases without the worker, tests, bulk
/// loads). Returns how many keys were written.
#[pg_extern]
fn embed_pending(max_skills: default!(Option<i64>, "NULL")) -> i64 {
    let encoder = super::encoder();
    let mut total = 0;
    loop {
        let room = max_skills.map_or(i64::MAX, |m| m - total);
        if room <= 0 {
            return total;
        }
        let limit = room.min(crate::guc::EMBEDDER_BATCH_SIZE.get() as i64);
        let outcome =
            embed_batch(&encoder, limit).unwrap_or_else(|e| super::raise_encoder_error(e));
        if outcome.embedded + outcome.failed == 0 {
            return total;
        }
        total += outcome.embedded;
    }
}
