//! `skills.render_context`: the served skills as one prompt block for an agent.
//!
//! Each skill becomes a section: its name as a heading, the description, the instructions and
//! a provenance line. The budget counts the rendered sections in o200k_base tokens (the
//! tokenizer of `skills.skill.token_count`), so the block as a whole stays within it; sections
//! are chosen like `skills.search` chooses rows (rank order, skipping what does not fit).

use std::collections::HashMap;

use pgrx::prelude::*;

use pg_skills_corpus::skill::prompt_tokens;

use super::{complements_arg, limits, served, Request};

struct Document {
    name: String,
    description: String,
    instructions: String,
    version: i32,
    content_hash: String,
    source: String,
}

fn documents(ids: &[i64]) -> HashMap<i64, Document> {
    crate::spi::read(|client| {
        let mut out = HashMap::new();
        for row in client.select(
            "SELECT id, name, description, instructions, version, content_hash, \
                    coalesce((SELECT concat_ws(', ', coalesce(p ->> 'url', p ->> 'location'), \
                                               'licence ' || (p ->> 'license')) \
                              FROM jsonb_array_elements(provenance) AS p LIMIT 1), 'local') \
             FROM skills.skill WHERE id = ANY ($1)",
            None,
            &[ids.to_vec().into()],
        )? {
            out.insert(
                row.get::<i64>(1)?.expect("NOT NULL"),
                Document {
                    name: row.get(2)?.unwrap_or_default(),
                    description: row.get(3)?.unwrap_or_default(),
                    instructions: row.get(4)?.unwrap_or_default(),
                    version: row.get(5)?.unwrap_or(1),
                    content_hash: row.get(6)?.unwrap_or_default(),
                    source: row.get(7)?.unwrap_or_default(),
                },
            );
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

fn section(id: i64, d: &Document) -> String {
    let mut s = format!("## Skill: {}\n", d.name.trim());
    if !d.description.trim().is_empty() {
        s += &format!("{}\n", d.description.trim());
    }
    if !d.instructions.trim().is_empty() {
        s += &format!("\n{}\n", d.instructions.trim());
    }
    s += &format!(
        "\n(source: {}; pg_skills skill {id} v{})\n\n",
        d.source, d.version
    );
    s
}

/// One served section: the skill, the version and content it was rendered from, the text.
struct Section {
    id: i64,
    version: i32,
    content_hash: String,
    text: String,
}

/// The sections of the served skills, in rank order, within the token budget.
fn served_sections(
    query: Option<&str>,
    categories: Option<Vec<Option<String>>>,
    k: Option<i32>,
    token_budget: Option<i32>,
    min_score: Option<f64>,
    method: Option<&str>,
    complements: Option<i32>,
) -> Vec<Section> {
    let limits = limits(k, token_budget, min_score);
    let mut req = Request::new(query, categories, method, 1.0, 1.0);
    req.complements = complements_arg(complements);
    let mut sections: HashMap<i64, Section> = HashMap::new();
    let rows = served(&mut req, limits, |ranked, _| {
        let missing: Vec<i64> = ranked
            .iter()
            .map(|r| r.id)
            .filter(|id| !sections.contains_key(id))
            .collect();
        for (id, d) in documents(&missing) {
            let text = section(id, &d);
            sections.insert(
                id,
                Section {
                    id,
                    version: d.version,
                    content_hash: d.content_hash,
                    text,
                },
            );
        }
        ranked
            .iter()
            .map(|r| {
                sections
                    .get(&r.id)
                    .map_or(0, |s| prompt_tokens(&s.text) as u64)
            })
            .collect()
    });
    let mut kept = rows.len();
    // Sections are counted one by one; BPE of the joined text can differ by a token at a seam,
    // so check the whole and drop from the end in the rare case it went over.
    if let Some(budget) = limits.token_budget {
        let joined = |n: usize| -> String {
            rows[..n]
                .iter()
                .map(|(r, _)| sections[&r.id].text.as_str())
                .collect::<String>()
        };
        while kept > 0 && prompt_tokens(joined(kept).trim_end()) as u64 > budget {
            kept -= 1;
        }
    }
    rows[..kept]
        .iter()
        .map(|(r, _)| {
            sections
                .remove(&r.id)
                .expect("every served row was rendered")
        })
        .collect()
}

/// The served skills of a search as one prompt block (empty when nothing is served).
#[allow(clippy::too_many_arguments)]
#[pg_extern(stable)]
fn render_context(
    query: Option<&str>,
    categories: default!(Option<Vec<Option<String>>>, "NULL"),
    k: default!(Option<i32>, "NULL"),
    token_budget: default!(Option<i32>, "NULL"),
    min_score: default!(Option<f64>, "NULL"),
    method: default!(Option<&str>, "'keyopt'"),
    complements: default!(Option<i32>, "0"),
) -> String {
    let sections = served_sections(
        query,
        categories,
        k,
        token_budget,
        min_score,
        method,
        complements,
    );
    let block: String = sections.iter().map(|s| s.text.as_str()).collect();
    block.trim_end().to_string()
}

/// The sections `skills.render_context` joins, one row per served skill in block order, with
/// the version and content_hash it was rendered from: the list of served skills comes from
/// here, not from reading markers back out of the text (a skill's own instructions could
/// contain a marker line).
#[allow(clippy::too_many_arguments)]
#[pg_extern(stable)]
fn context_sections(
    query: Option<&str>,
    categories: default!(Option<Vec<Option<String>>>, "NULL"),
    k: default!(Option<i32>, "NULL"),
    token_budget: default!(Option<i32>, "NULL"),
    min_score: default!(Option<f64>, "NULL"),
    method: default!(Option<&str>, "'keyopt'"),
    complements: default!(Option<i32>, "0"),
) -> TableIterator<
    'static,
    (
        name!(skill_id, i64),
        name!(version, i32),
        name!(content_hash, String),
        name!(section, String),
    ),
> {
    let sections = served_sections(
        query,
        categories,
        k,
        token_budget,
        min_score,
        method,
        complements,
    );
    TableIterator::new(
        sections
            .into_iter()
            .map(|s| (s.id, s.version, s.content_hash, s.text)),
    )
}
