//! `skills.keyopt_rank_batch(queries, k, categories)`: the KeyOpt reading of many queries in one
//! call, for data teams and evaluations.
//!
//! Each query's rows are the ranking `skills.search(query, k => k, categories => categories,
//! method => 'keyopt')` serves: the same code reads each query
//! ([`crate::search::rank::keyopt_served`], which covers the parts of a request of several),
//! and each query key is computed as a search computes it (one text at a time, through the
//! backend's query-key cache), so the CPU path's rankings are identical to the searches'.
//!
//! The first stage is where a batch spends its time: the semantic candidates of each query, the
//! top max(10, k) keyed skills by r = q·k0. On the CPU (`pg_skills.device = 'cpu'`, the default)
//! that is each query's own SQL (through the skeys index when there is one). With
//! `pg_skills.device = 'cuda'` and a GPU, one device scan per batch of queries over every keyed
//! skill (`pg_skills_kernels::keyopt::cuda`), the keys uploaded once and kept while they do not
//! change; candidates whose r differs from the CPU's only in its last bits can then trade places.
//! A request of several parts is read on the CPU (its rows say `cpu`).
//! Without a usable GPU the function says why in a NOTICE and scores on the CPU. The `device`
//! column names where the first stage ran.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use super::rank::first_stage_depth;
use crate::embedding::query_key_values;
use crate::errors::raise;
use crate::guc::{Device, DEVICE};
use crate::search::rank::keyopt_served;

/// Queries one call may rank.
const MAX_QUERIES: usize = 100_000;
/// The largest k (a search serves at most this many rows from one reading).
const MAX_K: i32 = 1000;

/// First-stage candidates per query: (skill id, current content hash, r), best first.
type FirstStage = Vec<Vec<(i64, String, f32)>>;

#[allow(clippy::type_complexity)]
#[pg_extern(stable)]
fn keyopt_rank_batch(
    queries: Option<Vec<Option<String>>>,
    k: default!(Option<i32>, 10),
    categories: default!(Option<Vec<Option<String>>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(query_no, i32),
        name!(query, String),
        name!(rank, i32),
        name!(skill_id, i64),
        name!(score, f64),
        name!(relevance, f64),
        name!(beta, f64),
        name!(dk_term, f64),
        name!(event_term, f64),
        name!(held_back, f64),
        name!(coverage, Option<f64>),
        name!(recalled, bool),
        name!(device, String),
    ),
> {
    let Some(queries) = queries else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "queries is NULL",
            Some("Pass the task texts as a text[] (an empty array ranks nothing)."),
        )
    };
    let Some(k) = k else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "k is NULL",
            Some(&format!(
                "Pass how many skills to rank per query, 1 to {MAX_K}."
            )),
        )
    };
    if queries.len() > MAX_QUERIES {
        raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!(
                "{} queries, over the limit of {MAX_QUERIES} per call",
                queries.len()
            ),
            Some("Split the queries into several calls."),
        );
    }
    if !(1..=MAX_K).contains(&k) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("k must be between 1 and {MAX_K}, got {k}"),
            None,
        );
    }
    let queries: Vec<String> = queries
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            q.unwrap_or_else(|| {
                raise(
                    PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                    format!("query {} is NULL", i + 1),
                    Some("Every element of queries is a task text."),
                )
            })
        })
        .collect();
    let categories = categories.map(crate::search::request::validate_categories);
    let k = k as usize;
    let keys: Vec<Vec<f32>> = queries
        .iter()
        .map(|q| {
            pg_sys::check_for_interrupts!();
            query_key_values(q)
        })
        .collect();
    let depth = first_stage_depth(Some(k), Some(k)).expect("a depth");
    let (mut first_stage, device) = match DEVICE.get() {
        Device::Cpu => (None, "cpu".to_string()),
        Device::Cuda => match device_first_stage(&keys, categories.as_deref(), depth) {
            Ok((lists, device)) => (Some(lists.into_iter()), device),
            Err(e) => {
                notice!("pg_skills.device = 'cuda': {e}; scoring on the CPU");
                (None, "cpu".to_string())
            }
        },
    };
    let mut rows = Vec::new();
    for (i, (query, key)) in queries.iter().zip(keys).enumerate() {
        pg_sys::check_for_interrupts!();
        let computed = first_stage
            .as_mut()
            .map(|lists| lists.next().expect("one list per query"));
        let (ranking, on_device) =
            keyopt_served(query, key, categories.clone(), Some(k), Some(k), computed);
        let ran_on = if on_device { device.as_str() } else { "cpu" };
        for (rank, row) in ranking.into_iter().take(k).enumerate() {
            rows.push((
                i as i32 + 1,
                query.clone(),
                rank as i32 + 1,
                row.id,
                row.score,
                row.semantic.unwrap_or_default(),
                row.beta.unwrap_or_default(),
                row.dk_term.unwrap_or_default(),
                row.event_term.unwrap_or_default(),
                row.held_back.unwrap_or_default(),
                row.coverage,
                row.recalled,
                ran_on.to_string(),
            ));
        }
    }
    TableIterator::new(rows)
}

#[cfg(not(feature = "cuda"))]
fn device_first_stage(
    _keys: &[Vec<f32>],
    _categories: Option<&[String]>,
    _depth: usize,
) -> Result<(FirstStage, String), String> {
    Err("this build of pg_skills has no CUDA support (build it with the cuda feature)".into())
}

#[cfg(feature = "cuda")]
use gpu::device_first_stage;

/// The first stage on a GPU: every keyed skill's current key on the device, one scan per batch.
#[cfg(feature = "cuda")]
mod gpu {
    use std::cell::RefCell;

    use half::f16;

    use pg_skills_kernels::keyopt::batch::{Order, Query, Reading, Records, ALL_CATEGORIES};
    use pg_skills_kernels::keyopt::cuda::{device_available, CudaScorer};
    use pg_skills_kernels::keyopt::Settings;
    use pg_skills_kernels::vector::KEY_DIM;

    use super::FirstStage;

    /// The keyed skills on the device, with what identifies the keys they were built from.
    struct Uploaded {
        version: String,
        scorer: CudaScorer,
        ids: Vec<i64>,
        hashes: Vec<String>,
        categories: Vec<String>,
    }

    thread_local! {
        static UPLOADED: RefCell<Option<Uploaded>> = const { RefCell::new(None) };
    }

    /// Changes whenever a key is written or removed or a skill's content changes.
    fn keys_version() -> String {
        crate::spi::select_one::<String>(
            "SELECT format('%s/%s/%s', count(*), max(k.embedded_at), max(s.updated_at)) \
             FROM skills.skill_key AS k JOIN skills.skill AS s ON s.id = k.skill_id",
            &[],
        )
        .unwrap_or_default()
    }

    fn upload(version: String) -> Result<Uploaded, String> {
        let categories = crate::search::request::category_names();
        let mut records = Records::new(KEY_DIM);
        let mut ids = Vec::new();
        let mut hashes = Vec::new();
        crate::spi::read(|client| {
            let rows = client.select(
                "SELECT k.skill_id, s.content_hash, s.category::text, \
                        skills.key_to_real_array(k.k0) \
                 FROM skills.skill_key AS k JOIN skills.skill AS s ON s.id = k.skill_id \
                 ORDER BY k.skill_id",
                None,
                &[],
            )?;
            for row in rows {
                let key: Vec<f32> = row.get::<Vec<f32>>(4)?.expect("NOT NULL");
                let category = row.get::<String>(3)?.expect("NOT NULL");
                let c = categories.iter().position(|x| *x == category).unwrap_or(0);
                // The stored key is f16: widening and narrowing again gives its exact values.
                let k0: Vec<f16> = key.iter().map(|&x| f16::from_f32(x)).collect();
                records.push(&k0, None, c as u8);
                ids.push(row.get::<i64>(1)?.expect("NOT NULL"));
                hashes.push(row.get::<String>(2)?.expect("NOT NULL"));
            }
            Ok::<_, pgrx::spi::Error>(())
        });
        if records.is_empty() {
            return Err("no skill has a key yet".into());
        }
        let scorer = CudaScorer::new(records).map_err(|e| e.to_string())?;
        Ok(Uploaded {
            version,
            scorer,
            ids,
            hashes,
            categories,
        })
    }

    pub(super) fn device_first_stage(
        keys: &[Vec<f32>],
        categories: Option<&[String]>,
        depth: usize,
    ) -> Result<(FirstStage, String), String> {
        // Checked before any key is read: without a driver this returns at once.
        device_available().map_err(|e| e.to_string())?;
        if depth > pg_skills_kernels::keyopt::cuda::MAX_K {
            return Err(format!(
                "{depth} candidates per query is over the GPU path's {}",
                pg_skills_kernels::keyopt::cuda::MAX_K
            ));
        }
        let version = keys_version();
        UPLOADED.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.as_ref().is_none_or(|u| u.version != version) {
                *slot = None; // frees the device memory of the old keys first
                *slot = Some(upload(version)?);
            }
            let uploaded = slot.as_ref().expect("set above");
            let mask = match categories {
                None => ALL_CATEGORIES,
                Some(wanted) => uploaded
                    .categories
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| wanted.contains(c))
                    .fold(0u8, |m, (i, _)| m | (1 << i)),
            };
            let zeros = vec![0.0f32; KEY_DIM];
            let queries: Vec<Query> = keys.iter().map(|k| Query::new(k, &zeros, mask)).collect();
            // r alone: ρ = 1 and no corrections (the reading adds them to the candidates).
            let reading = Reading {
                rho: 1.0,
                settings: Settings::NONE,
            };
            let hits = uploaded
                .scorer
                .top_k(&queries, &reading, Order::Relevance, depth)
                .map_err(|e| e.to_string())?;
            let lists = hits
                .into_iter()
                .map(|list| {
                    list.into_iter()
                        .map(|h| {
                            let i = h.index as usize;
                            (uploaded.ids[i], uploaded.hashes[i].clone(), h.relevance)
                        })
                        .collect()
                })
                .collect();
            Ok((lists, format!("cuda: {}", uploaded.scorer.device())))
        })
    }
}
