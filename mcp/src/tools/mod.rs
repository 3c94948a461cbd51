//! The four tools, one file each (`search.rs`: search_skills; `context.rs`: render_context;
//! `get_skill.rs`; `report.rs`: report_outcome): their arguments (validated before anything
//! reaches the database), the SQL each runs against the pg_skills SQL surface, and the results
//! they return. This file holds the bounds every argument is checked against.
//!
//! Every statement builds its answer as one `jsonb` value in the database, so a result is read
//! in one snapshot (a search and the versions it names agree) and decoded into typed structs
//! whose JSON schemas `tools/list` publishes.

use serde_json::{Map, Value};

use crate::db::ToolError;

mod context;
mod get_skill;
mod report;
mod search;

pub use context::{render_context, RenderedContext, ServedSkill};
pub use get_skill::{get_skill, skill_md, GetSkillArgs, SkillDocument};
pub use report::{report_outcome, ReportArgs, ReportResult, SkillOutcome};
pub use search::{
    search, ScoreParts, SearchArgs, SearchRequest, SearchResult, SkillHit, CATEGORIES,
    DEFAULT_METHOD,
};

// Every argument is bounded before it reaches the database (or an error message that quotes it).
// The published JSON schemas state the same numbers; a test keeps them in step.
/// `query`, `task` and `source_group`.
pub(crate) const MAX_TEXT_CHARS: usize = 8_000;
pub(crate) const MAX_K: i64 = 50;
pub(crate) const MAX_TOKEN_BUDGET: i64 = 200_000;
/// Complements per served skill (`skills.search`'s own bound).
pub(crate) const MAX_COMPLEMENTS: i64 = 5;
/// Outcomes in one report.
pub(crate) const MAX_ARMS: usize = 100;
/// `executor`.
pub(crate) const MAX_LABEL_CHARS: usize = 200;
/// One `categories` entry: above any pool's name, so longer ones are refused without echoing.
pub(crate) const MAX_CATEGORY_CHARS: usize = 32;
/// `environment` as compact JSON, and how deep its objects and arrays may nest (the top-level
/// object is level 1).
pub(crate) const MAX_ENVIRONMENT_BYTES: usize = 16 * 1024;
pub(crate) const MAX_ENVIRONMENT_DEPTH: usize = 8;
/// A method name: above any method's length, so longer ones are refused without echoing.
pub(crate) const MAX_METHOD_CHARS: usize = 32;

pub(crate) fn check_text(field: &str, text: &str) -> Result<(), ToolError> {
    if text.trim().is_empty() {
        return Err(ToolError::InvalidArgument(format!(
            "`{field}` must not be empty"
        )));
    }
    check_length(field, text, MAX_TEXT_CHARS)
}

pub(crate) fn check_length(field: &str, text: &str, max: usize) -> Result<(), ToolError> {
    let chars = text.chars().count();
    if chars > max {
        return Err(ToolError::InvalidArgument(format!(
            "`{field}` is {chars} characters; at most {max}"
        )));
    }
    Ok(())
}

/// How deep arrays and objects nest in `value` (a scalar is 0). The recursion is bounded: the
/// JSON parser refuses documents nested deeper than 128.
pub(crate) fn json_depth(value: &Value) -> usize {
    match value {
        Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

pub(crate) fn check_environment(environment: &Map<String, Value>) -> Result<(), ToolError> {
    let bytes = serde_json::to_string(environment).map_or(usize::MAX, |s| s.len());
    if bytes > MAX_ENVIRONMENT_BYTES {
        return Err(ToolError::InvalidArgument(format!(
            "`environment` is {bytes} bytes as JSON; at most {MAX_ENVIRONMENT_BYTES}"
        )));
    }
    let depth = 1 + environment.values().map(json_depth).max().unwrap_or(0);
    if depth > MAX_ENVIRONMENT_DEPTH {
        return Err(ToolError::InvalidArgument(format!(
            "`environment` nests {depth} levels deep; at most {MAX_ENVIRONMENT_DEPTH}"
        )));
    }
    Ok(())
}

pub(crate) fn check_range(field: &str, value: i64, min: i64, max: i64) -> Result<i32, ToolError> {
    if value < min || value > max {
        return Err(ToolError::InvalidArgument(format!(
            "`{field}` must be between {min} and {max} (got {value})"
        )));
    }
    Ok(value as i32)
}

pub(crate) fn check_finite(field: &str, value: f64) -> Result<(), ToolError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(ToolError::InvalidArgument(format!(
            "`{field}` must be a finite number"
        )))
    }
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    what: &str,
    value: Value,
) -> Result<T, ToolError> {
    serde_json::from_value(value).map_err(|e| ToolError::Database {
        sqlstate: "XX000".into(),
        message: format!("unexpected shape of the {what} answer: {e}"),
        hint: Some("is the pg_skills extension the version this server was built for?".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_schemas_state_the_enforced_limits() {
        let search = schemars::schema_for!(SearchArgs).to_value();
        let report = schemars::schema_for!(ReportArgs).to_value();
        let outcome = &report["$defs"]["SkillOutcome"]["properties"];
        let p = &search["properties"];
        assert_eq!(p["query"]["maxLength"], MAX_TEXT_CHARS);
        assert_eq!(p["categories"]["maxItems"], CATEGORIES.len());
        assert_eq!(p["k"]["maximum"], MAX_K);
        assert_eq!(p["token_budget"]["maximum"], MAX_TOKEN_BUDGET);
        assert_eq!(p["method"]["maxLength"], MAX_METHOD_CHARS);
        assert_eq!(p["complements"]["maximum"], MAX_COMPLEMENTS);
        let p = &report["properties"];
        assert_eq!(p["task"]["maxLength"], MAX_TEXT_CHARS);
        assert_eq!(p["skills"]["maxItems"], MAX_ARMS);
        assert_eq!(p["executor"]["maxLength"], MAX_LABEL_CHARS);
        assert_eq!(p["source_group"]["maxLength"], MAX_TEXT_CHARS);
        assert_eq!(outcome["content_hash"]["maxLength"], 64, "{report}");
    }
}
