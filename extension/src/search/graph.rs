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

use pg_skills_kernels::graph::rules::RuleExtractor;
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

/// Texts read per fetch by [`rule_edges`]: the rules read one document at a time, so a
/// library's texts (about 1 GB at 100,000 skills) are never in memory at once.
const TEXTS_PER_FETCH: i64 = 256;

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
    let edges = crate::spi::read(|client| {
        let names: Vec<(i64, String)> = client
            .select("SELECT id, name FROM skills.skill", None, &[])?
            .map(|row| {
                Ok((
                    row.get::<i64>(1)?.expect("NOT NULL"),
                    row.get::<String>(2)?.unwrap_or_default(),
                ))
            })
            .collect::<pgrx::spi::Result<_>>()?;
        let mut rules = RuleExtractor::new(names.iter().map(|(id, name)| (*id, name.as_str())));
        drop(names);
        let mut texts = client.try_open_cursor(
            "SELECT id, description || E'\\n\\n' || instructions FROM skills.skill",
            &[],
        )?;
        // Each batch's texts, where reading them makes a copy (detoasting), go in a context
        // reset after the batch. (pgrx's typed getters copy into the parent of the current
        // context, the SPI connection's, which lives until the end: all texts, 760 MB at
        // 100,000 skills; the datums are read here and converted in this context instead.)
        let mut batch_memory = pgrx::PgMemoryContexts::new("pg_skills rule_edges batch");
        loop {
            let mut batch = texts.fetch(TEXTS_PER_FETCH)?;
            if batch.is_empty() {
                break;
            }
            // SAFETY: the closure allocates only in batch_memory (the texts it reads), and
            // nothing of it is kept after the reset: the extractor copies what it keeps. The
            // query's columns are bigint and text, neither null (NOT NULL columns and ||).
            unsafe {
                batch_memory.switch_to(|_| {
                    while batch.next().is_some() {
                        let id = batch.get_datum_by_ordinal(1)?.expect("NOT NULL");
                        let text = batch.get_datum_by_ordinal(2)?.expect("NOT NULL");
                        let id = i64::from_polymorphic_datum(id, false, pg_sys::INT8OID);
                        let text = <&str>::from_polymorphic_datum(text, false, pg_sys::TEXTOID);
                        rules.add_document(id.expect("not null"), text.unwrap_or_default());
                    }
                    Ok::<_, pgrx::spi::Error>(())
                })?;
                batch_memory.reset();
                // SPI keeps every fetched batch until the connection ends unless it is freed;
                // this one was read whole above and nothing refers to it.
                pg_sys::SPI_freetuptable(pg_sys::SPI_tuptable);
            }
        }
        Ok::<_, pgrx::spi::Error>(rules.finish())
    });
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
