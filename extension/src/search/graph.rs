//! The skill graph in SQL: `skills.edge` read into a [`SkillGraph`] (cached per backend), the
//! Graph-of-Skills and SkillTrace walks behind `skills.search`, and `skills.rule_edges()`, the
//! document rules `skills.build_graph()` adds as dependency and workflow edges.
//!
//! The cache is keyed by the row of `skills.graph_state` that every statement changing
//! `skills.edge` updates (a statement trigger): its version and xmin identify the edge set this
//! snapshot sees, including an uncommitted change of this transaction and never one that rolled
//! back (a later change has another xmin).

use std::cell::RefCell;
use std::rc::Rc;

use pgrx::prelude::*;

use pg_skills_kernels::graph::rules::{extract, Document};
use pg_skills_kernels::graph::trace::{skilltrace, TraceParams};
use pg_skills_kernels::graph::{Edge, SkillGraph, WalkParams};
use pg_skills_kernels::keyopt::memory::{Neighbour, NEIGHBOURS};

use crate::guc;

type CacheKey = (i64, String, u64);

thread_local! {
    static CACHE: RefCell<Option<(CacheKey, Rc<SkillGraph>)>> = const { RefCell::new(None) };
}

fn cache_key() -> CacheKey {
    let (version, xmin) = crate::spi::read(|client| {
        let row = client
            .select(
                "SELECT version, xmin::text FROM skills.graph_state",
                Some(1),
                &[],
            )?
            .first();
        Ok::<_, pgrx::spi::Error>((
            row.get::<i64>(1)?.unwrap_or(0),
            row.get::<String>(2)?.unwrap_or_default(),
        ))
    });
    (version, xmin, guc::GRAPH_REVERSE_WEIGHT.get().to_bits())
}

/// The graph of `skills.edge` as this snapshot sees it.
pub fn skill_graph() -> Rc<SkillGraph> {
    let key = cache_key();
    if let Some(graph) = CACHE.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, g)| g.clone())
    }) {
        return graph;
    }
    let edges: Vec<Edge> = crate::spi::read(|client| {
        let mut out = Vec::new();
        for row in client.select(
            "SELECT from_skill, to_skill, weight::float8 FROM skills.edge",
            None,
            &[],
        )? {
            out.push(Edge {
                from: row.get::<i64>(1)?.expect("NOT NULL"),
                to: row.get::<i64>(2)?.expect("NOT NULL"),
                weight: row.get::<f64>(3)?.expect("NOT NULL"),
            });
        }
        Ok::<_, pgrx::spi::Error>(out)
    });
    let graph = Rc::new(SkillGraph::new(&edges, guc::GRAPH_REVERSE_WEIGHT.get()));
    CACHE.with(|c| *c.borrow_mut() = Some((key, graph.clone())));
    graph
}

/// Graph-of-Skills: the personalised PageRank of the seeds over `skills.edge`.
pub fn walk(personalisation: &[(i64, f64)]) -> Vec<(i64, f64)> {
    skill_graph()
        .walk(personalisation, WalkParams::default())
        .ranked()
}

/// SkillTrace: the walk over the runs nearest the query key (every recorded run, current arms).
pub fn trace(key: &[f32], seeds: &[(i64, f64)]) -> Vec<(i64, f64)> {
    let rows = crate::keyopt::rank::neighbours(key, i64::MAX);
    let near: Vec<Neighbour> = rows
        .iter()
        .take(NEIGHBOURS)
        .map(|(similarity, arms)| Neighbour {
            similarity: *similarity,
            arms,
        })
        .collect();
    skilltrace(&near, seeds, TraceParams::default())
}

/// The edges the document rules find among all skills (see `kernels/src/graph/rules.rs`).
#[pg_extern(stable)]
fn rule_edges() -> TableIterator<
    'static,
    (
        name!(from_skill, i64),
        name!(to_skill, i64),
        name!(type, String),
        name!(weight, f64),
        name!(rule, String),
    ),
> {
    let docs: Vec<(i64, String, String)> = crate::spi::read(|client| {
        let mut out = Vec::new();
        for row in client.select(
            "SELECT id, name, description || E'\\n\\n' || instructions FROM skills.skill ORDER BY id",
            None,
            &[],
        )? {
            out.push((
                row.get::<i64>(1)?.expect("NOT NULL"),
                row.get::<String>(2)?.unwrap_or_default(),
                row.get::<String>(3)?.unwrap_or_default(),
            ));
        }
        Ok::<_, pgrx::spi::Error>(out)
    });
    let documents: Vec<Document> = docs
        .iter()
        .map(|(id, name, text)| Document {
            id: *id,
            name,
            text,
        })
        .collect();
    let edges = extract(&documents);
    TableIterator::new(edges.into_iter().map(|e| {
        (
            e.from,
            e.to,
            e.kind.as_str().to_string(),
            e.weight,
            e.rule.to_string(),
        )
    }))
}
