//! KeyOpt in SQL (`pg_skills_kernels::keyopt` does the arithmetic):
//!
//! - [`fit`] (`skills.fit`): reads the recorded runs and current skill keys, fits (the
//!   arithmetic is `pg_skills_kernels::keyopt::fit`), and writes a round (`skills.keyopt_round`, `skills.keyopt_skill`), publishing it in the
//!   caller's transaction so readers see the old round or the new one, never a mix;
//! - [`rank`]: `skills.keyopt_rank`, the KeyOpt reading behind `skills.search(..., method =>
//!   'keyopt')` and `skills.keyopt_score`;
//! - [`worker`]: the fitter background worker (fits on a schedule).

use std::collections::HashMap;

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use pg_skills_kernels::keyopt::fit::{self as fitting, FitOptions, SetOutcome, SupportEvent};
use pg_skills_kernels::keyopt::{pack, packed_len, Arm};
use pg_skills_kernels::vector::{dot, KEY_DIM};

use crate::errors::raise;

pub mod batch;
pub mod rank;
pub mod relevance;
pub mod worker;

/// Serialises fits (a fit reads everything and publishes; two at once would race to activate).
const FIT_LOCK: i64 = 0x7067_736b_6669_74; // "pgskfit"

fn stable_hash(parts: &[&str]) -> u64 {
    // FNV-1a with a separator: pairing keys and folds only need to be stable within one fit.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h = (h ^ b as u64).wrapping_mul(0x1000_0000_01b3);
        }
    }
    h
}

/// Skills with a current key: (id, content_hash, k0).
fn current_keys() -> Vec<(i64, String, Vec<f32>)> {
    crate::spi::read(|client| {
        let rows = client.select(
            "SELECT k.skill_id, s.content_hash, k.k0::real[] \
             FROM skills.skill_key AS k JOIN skills.skill AS s \
               ON s.id = k.skill_id AND s.content_hash = k.content_hash \
             ORDER BY k.skill_id",
            None,
            &[],
        )?;
        let mut out = Vec::new();
        for row in rows {
            out.push((
                row.get::<i64>(1)?.expect("NOT NULL"),
                row.get::<String>(2)?.expect("NOT NULL"),
                row.get::<Vec<f32>>(3)?.expect("NOT NULL"),
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

struct RecordedRun {
    id: i64,
    task: String,
    key: Vec<f32>,
    pairing: u64,
    group: u64,
    /// (skill, its own outcome when known).
    arms: Vec<(i64, Option<bool>)>,
    /// The outcome of the run as a whole, for a run that used its skills together.
    set_passed: Option<bool>,
}

/// Every run up to now with its usable arms (not stale, content still current).
fn recorded_runs() -> Vec<RecordedRun> {
    crate::spi::read(|client| {
        let rows = client.select(
            // The skills' current content as its own step: on Citus (docs/citus.md) runs and
            // skills are distributed on different keys, and Citus joins them only this way.
            "WITH current AS MATERIALIZED (SELECT s.id, s.content_hash FROM skills.skill AS s) \
             SELECT e.id, e.task_key::real[], e.task, coalesce(e.source_group, e.task), \
                    e.executor, coalesce(e.budget::text, ''), \
                    array_agg(a.skill_id ORDER BY a.skill_id), array_agg(a.passed ORDER BY a.skill_id), \
                    e.set_passed \
             FROM skills.event AS e \
             JOIN skills.event_arm AS a ON a.event_id = e.id AND NOT a.stale \
             JOIN current AS s ON s.id = a.skill_id AND s.content_hash = a.content_hash \
             GROUP BY e.id ORDER BY e.id",
            None,
            &[],
        )?;
        let mut out = Vec::new();
        for row in rows {
            let text = |i| -> Result<String, pgrx::spi::Error> {
                Ok(row.get::<String>(i)?.unwrap_or_default())
            };
            let (task, group, executor, budget) = (text(3)?, text(4)?, text(5)?, text(6)?);
            let skills = row.get::<Vec<i64>>(7)?.expect("NOT NULL");
            let passed = row.get::<Vec<Option<bool>>>(8)?.expect("NOT NULL");
            out.push(RecordedRun {
                id: row.get::<i64>(1)?.expect("NOT NULL"),
                task: task.clone(),
                key: row.get::<Vec<f32>>(2)?.expect("NOT NULL"),
                pairing: stable_hash(&[&task, &executor, &budget]),
                group: stable_hash(&[&group]),
                arms: skills.into_iter().zip(passed).collect(),
                set_passed: row.get::<bool>(9)?,
            });
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// Fits with the base relevance r = qᵀk0 + w·BM25(q, s)/sup BM25(q) for each w of
/// `BM25_SHARES` and keeps the fit whose served ranking cross-validation scores best, where a
/// share must clearly beat the key score alone; a round that corrects nothing at the key score
/// alone is read at `pg_skills.keyopt_bm25_share`, as a library with no round is
/// (`choose_share`). Without a discordant pair only w = 0 is fitted (the round is neutral
/// anyway). Returns the fit, the share it is read with, and what each w scored (for the round's
/// report).
fn fit_choosing_bm25_share(
    skill_keys: &[Vec<f32>],
    keys: &[(i64, String, Vec<f32>)],
    events: &[SupportEvent],
    tasks: &[&str],
) -> (fitting::Fitted, f32, Vec<serde_json::Value>) {
    let options = FitOptions::default();
    let default_share = crate::guc::KEYOPT_BM25_SHARE.get() as f32;
    let first = fitting::fit(skill_keys, events, &options);
    let tried = |w: f32, f: &fitting::Fitted| serde_json::json!({"bm25_share": w, "served_accuracy": f.report.served_accuracy()});
    if first.report.discordant_groups == 0 {
        let report = vec![tried(0.0, &first)];
        let (_, fitted, share) =
            fitting::choose_share(vec![first], default_share, options.min_gain_se);
        return (fitted, share, report);
    }
    // The BM25 part of r for each distinct task, of the skills its runs served.
    let mut served: HashMap<&str, Vec<i64>> = HashMap::new();
    for (e, &task) in events.iter().zip(tasks) {
        let ids = served.entry(task).or_default();
        let arms = e.arms.iter().map(|a| a.skill);
        let set = e.set.iter().flat_map(|s| s.skills.iter().copied());
        ids.extend(arms.chain(set).map(|skill| keys[skill as usize].0));
    }
    let index = crate::search::rank::bm25_index();
    let mut bm25: HashMap<&str, HashMap<i64, f32>> = HashMap::new();
    for (task, mut ids) in served {
        pg_sys::check_for_interrupts!();
        ids.sort_unstable();
        ids.dedup();
        // A memo per task: the fit's statements may see statistics move between tasks.
        let mut memo = crate::search::rank::Bm25Memo::default();
        bm25.insert(
            task,
            crate::search::rank::bm25_relevance(index, task, &ids, &mut memo),
        );
    }
    let mut fits = vec![first];
    for &w in &fitting::BM25_SHARES[1..] {
        let mixed: Vec<SupportEvent> = events
            .iter()
            .zip(tasks)
            .map(|(e, task)| {
                let r = |skill: i64| -> f32 {
                    let (id, _, k0) = &keys[skill as usize];
                    dot(&e.key, k0) + w * bm25[task].get(id).copied().unwrap_or(0.0)
                };
                SupportEvent {
                    relevance: Some(e.arms.iter().map(|a| r(a.skill)).collect()),
                    set: e.set.as_ref().map(|s| SetOutcome {
                        relevance: Some(s.skills.iter().map(|&m| r(m)).collect()),
                        ..s.clone()
                    }),
                    ..e.clone()
                }
            })
            .collect();
        pg_sys::check_for_interrupts!();
        fits.push(fitting::fit(skill_keys, &mixed, &options));
    }
    let report: Vec<serde_json::Value> = fitting::BM25_SHARES
        .iter()
        .zip(&fits)
        .map(|(&w, f)| tried(w, f))
        .collect();
    let (_, fitted, share) = fitting::choose_share(fits, default_share, options.min_gain_se);
    (fitted, share, report)
}

/// `skills.fit(trigger, activate)`: fits a round from every usable run and stores it, labelled
/// `trigger` (the fitter worker's say "schedule"); `activate` publishes it. Returns the round.
#[pg_extern(volatile)]
pub fn fit(trigger: default!(&str, "'skills.fit()'"), activate: default!(bool, true)) -> i32 {
    if trigger.trim().is_empty() {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "a round needs a trigger label",
            Some("Call skills.fit(), or name what fitted it: skills.fit('nightly')."),
        );
    }
    crate::spi::run("SELECT pg_advisory_xact_lock($1)", &[FIT_LOCK.into()]);
    let keys = current_keys();
    let runs = recorded_runs();
    let index: HashMap<i64, usize> = keys.iter().enumerate().map(|(i, k)| (k.0, i)).collect();
    // With a relevance function (a cross-encoder), r(task, skill) comes from it: one call per
    // distinct task over every skill any of its runs served.
    let function =
        relevance::configured().map(|sig| relevance::resolve(&sig, "pg_skills.relevance_function"));
    let task_scores: HashMap<&str, HashMap<i64, f32>> = match &function {
        None => HashMap::new(),
        Some(f) => {
            let mut served: HashMap<&str, Vec<i64>> = HashMap::new();
            for r in &runs {
                let ids = served.entry(r.task.as_str()).or_default();
                for &(skill, _) in &r.arms {
                    if index.contains_key(&skill) && !ids.contains(&skill) {
                        ids.push(skill);
                    }
                }
            }
            served
                .into_iter()
                .map(|(task, ids)| {
                    pg_sys::check_for_interrupts!();
                    (task, relevance::scores(f, task, &ids))
                })
                .collect()
        }
    };
    // Arms of skills without a current key cannot be read at query time: they are left out.
    let (events, tasks): (Vec<SupportEvent>, Vec<&str>) = runs
        .iter()
        .map(|r| {
            let usable: Vec<(i64, usize, Option<bool>)> = r
                .arms
                .iter()
                .filter_map(|&(skill, passed)| index.get(&skill).map(|&i| (skill, i, passed)))
                .collect();
            let known: Vec<(i64, usize, bool)> = usable
                .iter()
                .filter_map(|&(skill, i, passed)| passed.map(|p| (skill, i, p)))
                .collect();
            let relevance_of = |ids: &mut dyn Iterator<Item = i64>| -> Option<Vec<f32>> {
                function.as_ref().map(|_| {
                    let scores = &task_scores[r.task.as_str()];
                    ids.map(|skill| scores[&skill]).collect()
                })
            };
            let event = SupportEvent {
                key: r.key.clone(),
                pairing: r.pairing,
                group: r.group,
                arms: known
                    .iter()
                    .map(|&(_, i, passed)| Arm {
                        skill: i as i64,
                        passed,
                    })
                    .collect(),
                relevance: relevance_of(&mut known.iter().map(|k| k.0)),
                set: r.set_passed.map(|passed| SetOutcome {
                    skills: usable.iter().map(|u| u.1 as i64).collect(),
                    passed,
                    relevance: relevance_of(&mut usable.iter().map(|u| u.0)),
                }),
            };
            (event, r.task.as_str())
        })
        .filter(|(e, _)| !e.arms.is_empty() || e.set.is_some())
        .unzip();
    let skill_keys: Vec<Vec<f32>> = keys.iter().map(|k| k.2.clone()).collect();
    pg_sys::check_for_interrupts!();
    let (fitted, bm25_share, shares_tried) = match &function {
        // A relevance function's r is the user's choice.
        Some(_) => (
            fitting::fit(&skill_keys, &events, &FitOptions::default()),
            0.0,
            Vec::new(),
        ),
        None => fit_choosing_bm25_share(&skill_keys, &keys, &events, &tasks),
    };
    pg_sys::check_for_interrupts!();
    let max_event = runs.iter().map(|r| r.id).max();
    let mut report = fitted.report.to_json();
    report["skills"] = keys.len().into();
    report["bm25_shares_tried"] = shares_tried.into();
    // The compressor whose keys the round was fitted on (null: raw keys): the fitter refits
    // when another becomes active.
    report["compressor_version"] =
        crate::spi::select_one::<i32>("SELECT version FROM skills.compressor WHERE active", &[])
            .into();
    let mut settings = fitted.settings.to_json();
    // As the decimal it was set as (0.1, not the f32's 0.10000000149011612).
    settings["bm25_share"] = ((bm25_share as f64 * 1e6).round() / 1e6).into();
    let round: i32 = crate::spi::write_one(
        "INSERT INTO skills.keyopt_round (max_event_id, rho, mu, settings, report, trigger, \
                                          relevance_function) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING round",
        &[
            max_event.into(),
            fitted.rho.into(),
            fitted.mu.clone().into(),
            pgrx::JsonB(settings).into(),
            pgrx::JsonB(report.clone()).into(),
            trigger.into(),
            function.clone().into(),
        ],
    )
    .expect("RETURNING");
    // Rows in batches of arrays: one INSERT per 1,000 skills.
    for chunk in (0..keys.len()).collect::<Vec<_>>().chunks(1000) {
        let ids: Vec<i64> = chunk.iter().map(|&i| keys[i].0).collect();
        let hashes: Vec<String> = chunk.iter().map(|&i| keys[i].1.clone()).collect();
        let betas: Vec<f32> = chunk.iter().map(|&i| fitted.beta[i]).collect();
        let lift_bounds: Vec<f32> = chunk.iter().map(|&i| fitted.lift_bound[i]).collect();
        let packed: Vec<Vec<u8>> = chunk
            .iter()
            .map(|&i| {
                let row = pack(&skill_keys[i], &fitted.dk[i], fitted.beta[i]);
                debug_assert_eq!(row.len(), packed_len(KEY_DIM));
                row.iter().flat_map(|v| v.to_le_bytes()).collect()
            })
            .collect();
        crate::spi::run(
            "INSERT INTO skills.keyopt_skill (round, skill_id, content_hash, beta, lift_bound, \
                                              packed) \
             SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::real[], $5::real[], \
                                      $6::bytea[])",
            &[
                round.into(),
                ids.into(),
                hashes.into(),
                betas.into(),
                lift_bounds.into(),
                packed.into(),
            ],
        );
    }
    if activate {
        crate::spi::run("SELECT skills.use_round($1)", &[round.into()]);
    }
    pgrx::log!(
        "pg_skills: KeyOpt round {round} ({trigger}): {} runs, {} discordant and {} tied tasks; cross-validation chose {}; ρ {:.3}; r from {}",
        fitted.report.events,
        fitted.report.discordant_groups,
        fitted.report.tied_groups,
        fitted.settings.to_json(),
        fitted.rho,
        function.as_deref().unwrap_or("the key inner product")
    );
    round
}
