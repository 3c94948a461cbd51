//! Complementary skills for a search (`complements => n`): up to n skills served right after
//! each served skill because it needs them (`pg_skills_kernels::complements` has the rules):
//! co-success in the recorded runs that served it, then dependency edges into it and workflow
//! edges out of it (`skills.edge`). Runs count by how near their task is to the request
//! (`complements::weights`), when the encoder is there to give the request a key.

use std::collections::HashMap;

use pg_skills_kernels::complements::{complements_of, weights, Complement, Link, LinkEdge, Run};
use pg_skills_kernels::keyopt::Arm;

/// Recorded runs read per search, the newest first: enough for the pairs of a busy library,
/// bounded so that a search with complements stays one short read.
pub const MAX_RUNS: i64 = 20_000;

/// Runs that served any of `anchors` (the newest [`MAX_RUNS`]), each with its arms whose
/// outcome is known (the arm's own, else the run's set outcome); arms recorded for a version
/// that is not current are left out, as the fit and the reading leave them out. Weighted by
/// their task's similarity to `key` (all 1 without one).
fn runs_of(anchors: &[i64], key: Option<Vec<f32>>) -> Vec<Run> {
    crate::spi::read(|client| {
        let rows = client.select(
            // One step per table, as the event memory reads them (docs/citus.md): runs and
            // skills are distributed on different keys.
            "WITH mine AS MATERIALIZED ( \
                 SELECT DISTINCT event_id FROM skills.event_arm \
                 WHERE skill_id = ANY ($1) AND NOT stale \
                 ORDER BY event_id DESC LIMIT $2), \
             runs AS MATERIALIZED ( \
                 SELECT e.id, e.set_passed, \
                        coalesce(-(e.task_key OPERATOR(skills.<#>) skills.key($3::real[])), 0)::float8 \
                            AS sim \
                 FROM skills.event AS e \
                 WHERE e.id IN (SELECT event_id FROM mine)), \
             arms AS MATERIALIZED ( \
                 SELECT a.event_id, a.skill_id, a.passed, a.content_hash \
                 FROM skills.event_arm AS a \
                 WHERE a.event_id IN (SELECT event_id FROM mine) AND NOT a.stale), \
             current AS MATERIALIZED ( \
                 SELECT s.id, s.content_hash FROM skills.skill AS s \
                 WHERE s.id IN (SELECT skill_id FROM arms)) \
             SELECT a.event_id, a.skill_id, coalesce(a.passed, r.set_passed), r.sim \
             FROM arms AS a \
             JOIN runs AS r ON r.id = a.event_id \
             JOIN current AS c ON c.id = a.skill_id AND c.content_hash = a.content_hash \
             WHERE coalesce(a.passed, r.set_passed) IS NOT NULL \
             ORDER BY a.event_id, a.skill_id",
            None,
            &[anchors.to_vec().into(), MAX_RUNS.into(), key.into()],
        )?;
        let mut out: Vec<(i64, f32, Vec<Arm>)> = Vec::new();
        for row in rows {
            let event = row.get::<i64>(1)?.expect("NOT NULL");
            let skill = row.get::<i64>(2)?.expect("NOT NULL");
            let passed = row.get::<bool>(3)?.expect("filtered");
            let sim = row.get::<f64>(4)?.expect("NOT NULL") as f32;
            if out.last().is_none_or(|(last, _, _)| *last != event) {
                out.push((event, sim, Vec::new()));
            }
            out.last_mut()
                .expect("pushed")
                .2
                .push(Arm { skill, passed });
        }
        let w = weights(&out.iter().map(|r| r.1).collect::<Vec<_>>());
        Ok::<_, pgrx::spi::Error>(
            out.into_iter()
                .zip(w)
                .map(|((_, _, arms), weight)| Run { weight, arms })
                .collect(),
        )
    })
}

/// Dependency edges into `anchors` and workflow edges out of them.
fn edges_of(anchors: &[i64]) -> Vec<LinkEdge> {
    crate::spi::read(|client| {
        let mut out = Vec::new();
        for row in client.select(
            "SELECT from_skill, to_skill, type = 'dependency', weight::float8 FROM skills.edge \
             WHERE (type = 'dependency' AND to_skill = ANY ($1)) \
                OR (type = 'workflow' AND from_skill = ANY ($1)) \
             ORDER BY 1, 2, 3",
            None,
            &[anchors.to_vec().into()],
        )? {
            out.push(LinkEdge {
                from: row.get::<i64>(1)?.expect("NOT NULL"),
                to: row.get::<i64>(2)?.expect("NOT NULL"),
                link: if row.get::<bool>(3)?.expect("NOT NULL") {
                    Link::Dependency
                } else {
                    Link::Workflow
                },
                weight: row.get::<f64>(4)?.expect("NOT NULL"),
            });
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// Up to `per_anchor` complements of each of `anchors`, from skills in the request's pools;
/// `key`: the request's key, which weighs the runs.
pub fn complements(
    anchors: &[i64],
    per_anchor: usize,
    categories: Option<Vec<String>>,
    key: Option<Vec<f32>>,
) -> HashMap<i64, Vec<Complement>> {
    if anchors.is_empty() || per_anchor == 0 {
        return HashMap::new();
    }
    let runs = runs_of(anchors, key);
    let edges = edges_of(anchors);
    let mut found: HashMap<i64, Vec<Complement>> = anchors
        .iter()
        .map(|&a| {
            pg_skills_kernels::interrupt::check();
            (a, complements_of(a, &runs, &edges, per_anchor))
        })
        .collect();
    let candidates: Vec<i64> = found.values().flatten().map(|c| c.skill).collect();
    if let Some(pools) = categories {
        let allowed = crate::search::rank::in_categories(&candidates, &pools);
        for list in found.values_mut() {
            list.retain(|c| allowed.contains(&c.skill));
        }
    }
    found
}
