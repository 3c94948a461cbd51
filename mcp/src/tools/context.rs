//! render_context: the best skills for a task as one prompt block within a token budget, with
//! the list of skills the block holds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::search::{methods_for, request_value};
use super::*;
use crate::db::Database;

/// A skill that render_context put into the block.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ServedSkill {
    pub id: i64,
    pub name: String,
    pub version: i64,
    pub content_hash: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RenderedContext {
    /// The prompt block: one section per skill, best first.
    pub context: String,
    /// Prompt tokens (o200k) of the block.
    pub tokens: i64,
    /// The skills in the block, in order; report outcomes for these.
    pub skills: Vec<ServedSkill>,
    /// What the serving policy kept out of the block (risk, retired, licence), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

// The served skills come from skills.context_sections, one row per section in block order, not
// from markers read back out of the text (a skill's instructions could contain a marker line).
const RENDER_SQL: &str = "\
WITH c AS MATERIALIZED (
    SELECT * FROM skills.context_sections($1, categories => $2, k => $3, token_budget => $4,
                                          min_score => $5, method => $6,
                                          complements => $7) WITH ORDINALITY
        AS c(skill_id, version, content_hash, section, ord)),
b AS (SELECT rtrim(coalesce(string_agg(c.section, '' ORDER BY c.ord), ''), E' \\t\\r\\n') AS block FROM c)
SELECT jsonb_build_object(
    'context', b.block,
    'tokens', skills.prompt_tokens(b.block),
    'skills', coalesce((
        SELECT jsonb_agg(jsonb_build_object('id', c.skill_id, 'name', s.name,
                                            'version', c.version,
                                            'content_hash', c.content_hash) ORDER BY c.ord)
        FROM c JOIN skills.skill AS s ON s.id = c.skill_id), '[]'::jsonb))
FROM b";

pub async fn render_context(db: &Database, args: SearchArgs) -> Result<RenderedContext, ToolError> {
    let methods = methods_for(db, &args).await?;
    let req = args.validate(3, methods)?;
    let (value, withheld) = request_value(db, RENDER_SQL, &req).await?;
    let mut rendered: RenderedContext = decode("render_context", value)?;
    rendered.withheld = withheld;
    Ok(rendered)
}
