//! get_skill: one skill in full, or one of its earlier versions, also as a SKILL.md file.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;
use crate::db::Database;

/// Arguments of `get_skill`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetSkillArgs {
    /// The skill id, as search_skills returned it.
    pub id: i64,
    /// An earlier version of the skill (default: the current one).
    #[serde(default)]
    pub version: Option<i64>,
}

/// A whole skill document.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SkillDocument {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub instructions: String,
    pub category: String,
    /// The version returned; `current_version` is the newest.
    pub version: i64,
    pub current_version: i64,
    pub content_hash: String,
    pub token_count: i64,
    pub provenance: Vec<Value>,
    /// The document as a SKILL.md file (YAML front matter, then the instructions).
    pub skill_md: String,
    /// Risk to the user if an agent follows it (none, low, medium, high, critical) and its findings.
    pub risk: String,
    pub risk_findings: Vec<Value>,
}

const GET_SKILL_SQL: &str = "\
SELECT jsonb_build_object(
           'id', s.id, 'name', v.name, 'description', v.description,
           'instructions', v.instructions, 'category', v.category, 'version', v.version,
           'current_version', s.version, 'content_hash', v.content_hash,
           'token_count', v.token_count, 'provenance', v.provenance, 'skill_md', '',
           'risk', s.risk, 'risk_findings', s.risk_findings,
           'withheld', skills.withheld_reason(s.id))
FROM skills.skill AS s
CROSS JOIN LATERAL (
    SELECT s.name, s.description, s.instructions, s.category, s.version, s.content_hash,
           s.token_count, s.provenance
    WHERE $2::integer IS NULL OR $2 = s.version
    UNION ALL
    SELECT o.name, o.description, o.instructions, o.category, o.version, o.content_hash,
           o.token_count, o.provenance
    FROM skills.skill_version AS o
    WHERE o.skill_id = s.id AND o.version = $2 AND $2 <> s.version) AS v
WHERE s.id = $1";

/// A SKILL.md file for a document: JSON string syntax is valid YAML, so the front matter
/// needs no escaping rules of its own.
pub fn skill_md(name: &str, description: &str, instructions: &str) -> String {
    let quote = |s: &str| serde_json::to_string(s).expect("strings serialise");
    format!(
        "---\nname: {}\ndescription: {}\n---\n\n{}\n",
        quote(name),
        quote(description),
        instructions.trim_end()
    )
}

pub async fn get_skill(db: &Database, args: GetSkillArgs) -> Result<SkillDocument, ToolError> {
    if args.id < 1 {
        return Err(ToolError::InvalidArgument(format!(
            "`id` must be a positive skill id (got {})",
            args.id
        )));
    }
    let version = args
        .version
        .map(|v| check_range("version", v, 1, i32::MAX as i64))
        .transpose()?;
    let id = args.id;
    let (found, current): (Option<Value>, Option<i32>) = db
        .with_client(true, |c| async move {
            let row = c.query_opt(GET_SKILL_SQL, &[&id, &version]).await?;
            if let Some(row) = row {
                return Ok((Some(row.get(0)), None));
            }
            let current = c
                .query_opt("SELECT version FROM skills.skill WHERE id = $1", &[&id])
                .await?
                .map(|r| r.get::<_, i32>(0));
            Ok((None, current))
        })
        .await?;
    match (found, current) {
        (Some(value), _) => {
            // The serving policy applies to documents fetched by id as to searches: an agent
            // must not receive the instructions of a skill the server withholds.
            if let Some(why) = value.get("withheld").and_then(Value::as_str) {
                return Err(ToolError::NotFound(format!(
                    "skill {id} is withheld by the server's serving policy: {why}"
                )));
            }
            let mut doc: SkillDocument = decode("get_skill", value)?;
            doc.skill_md = skill_md(&doc.name, &doc.description, &doc.instructions);
            Ok(doc)
        }
        (None, Some(current)) => Err(ToolError::NotFound(format!(
            "skill {id} has no version {}; its versions are 1 to {current}",
            version.unwrap_or(current)
        ))),
        (None, None) => Err(ToolError::NotFound(format!(
            "no skill with id {id} (use the ids search_skills returns)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_md_front_matter_survives_colons_and_quotes() {
        let md = skill_md("a: b", "says \"hi\": then\nmore", "Body\n\n");
        assert_eq!(
            md,
            "---\nname: \"a: b\"\ndescription: \"says \\\"hi\\\": then\\nmore\"\n---\n\nBody\n"
        );
    }
}
