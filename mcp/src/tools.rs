//! The four tools: their arguments (validated before anything reaches the database), the SQL
//! each runs against the pg_skills SQL surface, and the results they return.
//!
//! Every statement builds its answer as one `jsonb` value in the database, so a result is read
//! in one snapshot (a search and the versions it names agree) and decoded into typed structs
//! whose JSON schemas `tools/list` publishes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::db::{Database, ToolError};

/// The skill pools of `skills.category`; a search can be restricted to some of them.
pub const CATEGORIES: &[&str] = &[
    "code_generation",
    "testing",
    "debugging",
    "refactoring_review",
    "data_ml",
    "devops_infra",
    "docs_tooling",
];

// Every argument is bounded before it reaches the database (or an error message that quotes it).
// The published JSON schemas state the same numbers; a test keeps them in step.
/// `query`, `task` and `source_group`.
const MAX_TEXT_CHARS: usize = 8_000;
const MAX_K: i64 = 50;
const MAX_TOKEN_BUDGET: i64 = 200_000;
/// Outcomes in one report.
const MAX_ARMS: usize = 100;
/// `executor`.
const MAX_LABEL_CHARS: usize = 200;
/// One `categories` entry: above any pool's name, so longer ones are refused without echoing.
const MAX_CATEGORY_CHARS: usize = 32;
/// `environment` as compact JSON, and how deep its objects and arrays may nest (the top-level
/// object is level 1).
const MAX_ENVIRONMENT_BYTES: usize = 16 * 1024;
const MAX_ENVIRONMENT_DEPTH: usize = 8;

/// How `skills.search` ranks (DESIGN.md): lexical, key similarity, their fusion, a walk over
/// the skill graph or over recorded runs, or KeyOpt (similarity corrected by reported outcomes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Method {
    Bm25,
    Semantic,
    Hybrid,
    Graph,
    Skilltrace,
    Keyopt,
}

impl Method {
    pub const ALL: [Method; 6] = [
        Method::Bm25,
        Method::Semantic,
        Method::Hybrid,
        Method::Graph,
        Method::Skilltrace,
        Method::Keyopt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Bm25 => "bm25",
            Method::Semantic => "semantic",
            Method::Hybrid => "hybrid",
            Method::Graph => "graph",
            Method::Skilltrace => "skilltrace",
            Method::Keyopt => "keyopt",
        }
    }
}

/// Arguments of `search_skills` and `render_context`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// The coding task, in plain words (what the agent is about to do).
    #[schemars(length(min = 1, max = 8000))]
    pub query: String,
    /// Only skills of these pools: code_generation, testing, debugging, refactoring_review,
    /// data_ml, devops_infra, docs_tooling. Omit for all.
    #[serde(default)]
    #[schemars(length(min = 1, max = 7))]
    pub categories: Option<Vec<String>>,
    /// At most this many skills (1-50). Default 5 for search_skills, 3 for render_context.
    #[serde(default)]
    #[schemars(range(min = 1, max = 50))]
    pub k: Option<i64>,
    /// Serve skills in rank order while their prompt tokens (o200k) fit in this many.
    #[serde(default)]
    #[schemars(range(min = 1, max = 200000))]
    pub token_budget: Option<i64>,
    /// Leave out skills scoring below this (the scale depends on the method).
    #[serde(default)]
    pub min_score: Option<f64>,
    /// Ranking method; default keyopt (semantic similarity corrected by reported outcomes).
    #[serde(default)]
    pub method: Option<Method>,
}

/// A search request with its limits checked and defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    pub query: String,
    pub categories: Option<Vec<String>>,
    pub k: i32,
    pub token_budget: Option<i32>,
    pub min_score: Option<f64>,
    pub method: Method,
}

fn check_text(field: &str, text: &str) -> Result<(), ToolError> {
    if text.trim().is_empty() {
        return Err(ToolError::InvalidArgument(format!(
            "`{field}` must not be empty"
        )));
    }
    check_length(field, text, MAX_TEXT_CHARS)
}

fn check_length(field: &str, text: &str, max: usize) -> Result<(), ToolError> {
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
fn json_depth(value: &Value) -> usize {
    match value {
        Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn check_environment(environment: &Map<String, Value>) -> Result<(), ToolError> {
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

fn check_range(field: &str, value: i64, min: i64, max: i64) -> Result<i32, ToolError> {
    if value < min || value > max {
        return Err(ToolError::InvalidArgument(format!(
            "`{field}` must be between {min} and {max} (got {value})"
        )));
    }
    Ok(value as i32)
}

fn check_finite(field: &str, value: f64) -> Result<(), ToolError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(ToolError::InvalidArgument(format!(
            "`{field}` must be a finite number"
        )))
    }
}

impl SearchArgs {
    pub fn validate(self, default_k: i32) -> Result<SearchRequest, ToolError> {
        check_text("query", &self.query)?;
        if let Some(categories) = &self.categories {
            if categories.is_empty() {
                return Err(ToolError::InvalidArgument(
                    "`categories` is empty; omit it to search every pool".into(),
                ));
            }
            if categories.len() > CATEGORIES.len() {
                return Err(ToolError::InvalidArgument(format!(
                    "`categories` has {} entries; there are {} pools",
                    categories.len(),
                    CATEGORIES.len()
                )));
            }
            for (i, c) in categories.iter().enumerate() {
                check_length(&format!("categories[{i}]"), c, MAX_CATEGORY_CHARS)?;
            }
            if let Some(bad) = categories
                .iter()
                .find(|c| !CATEGORIES.contains(&c.as_str()))
            {
                return Err(ToolError::InvalidArgument(format!(
                    "unknown category {bad:?}; the pools are {}",
                    CATEGORIES.join(", ")
                )));
            }
        }
        let k = match self.k {
            Some(k) => check_range("k", k, 1, MAX_K)?,
            None => default_k,
        };
        let token_budget = self
            .token_budget
            .map(|b| check_range("token_budget", b, 1, MAX_TOKEN_BUDGET))
            .transpose()?;
        if let Some(m) = self.min_score {
            check_finite("min_score", m)?;
        }
        Ok(SearchRequest {
            query: self.query,
            categories: self.categories,
            k,
            token_budget,
            min_score: self.min_score,
            method: self.method.unwrap_or(Method::Keyopt),
        })
    }
}

/// Where a score comes from (only the parts the method uses are present).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ScoreParts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bm25: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dk_term: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_term: Option<f64>,
}

/// One ranked skill. Pass `id`, `version` and `content_hash` back in report_outcome.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SkillHit {
    pub rank: i64,
    pub id: i64,
    pub name: String,
    pub category: String,
    pub description: String,
    pub score: f64,
    /// Prompt tokens (o200k) of the whole skill document.
    pub tokens: i64,
    pub version: i64,
    pub content_hash: String,
    pub parts: ScoreParts,
    /// Where the document was found: repository, commit, path, url, licence.
    pub provenance: Vec<Value>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SearchResult {
    pub query: String,
    pub method: Method,
    pub results: Vec<SkillHit>,
}

const SEARCH_SQL: &str = "\
SELECT coalesce(jsonb_agg(jsonb_build_object(
           'rank', r.rank, 'id', r.id, 'name', r.name, 'category', r.category,
           'description', s.description, 'score', r.score, 'tokens', r.tokens,
           'version', s.version, 'content_hash', s.content_hash,
           'parts', jsonb_strip_nulls(jsonb_build_object(
               'bm25', r.bm25, 'semantic', r.semantic, 'graph', r.graph,
               'beta', r.beta, 'dk_term', r.dk_term, 'event_term', r.event_term)),
           'provenance', s.provenance) ORDER BY r.rank), '[]'::jsonb)
FROM skills.search($1, categories => $2, k => $3, token_budget => $4, min_score => $5,
                   method => $6)
     WITH ORDINALITY AS r(id, name, category, score, tokens, bm25, semantic, graph, beta,
                          dk_term, event_term, rank)
JOIN skills.skill AS s ON s.id = r.id";

fn decode<T: serde::de::DeserializeOwned>(what: &str, value: Value) -> Result<T, ToolError> {
    serde_json::from_value(value).map_err(|e| ToolError::Database {
        sqlstate: "XX000".into(),
        message: format!("unexpected shape of the {what} answer: {e}"),
        hint: Some("is the pg_skills extension the version this server was built for?".into()),
    })
}

/// Runs `sql` (a statement over skills.search / skills.render_context taking the request's six
/// parameters in order) and returns its one jsonb value.
async fn request_value(
    db: &Database,
    sql: &'static str,
    req: &SearchRequest,
) -> Result<Value, ToolError> {
    db.with_client(true, |c| {
        let req = req.clone();
        async move {
            let row = c
                .query_one(
                    sql,
                    &[
                        &req.query,
                        &req.categories,
                        &req.k,
                        &req.token_budget,
                        &req.min_score,
                        &req.method.as_str(),
                    ],
                )
                .await?;
            Ok(row.get(0))
        }
    })
    .await
}

pub async fn search(db: &Database, args: SearchArgs) -> Result<SearchResult, ToolError> {
    let req = args.validate(5)?;
    let rows = request_value(db, SEARCH_SQL, &req).await?;
    Ok(SearchResult {
        query: req.query,
        method: req.method,
        results: decode("search", rows)?,
    })
}

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
}

const GET_SKILL_SQL: &str = "\
SELECT jsonb_build_object(
           'id', s.id, 'name', v.name, 'description', v.description,
           'instructions', v.instructions, 'category', v.category, 'version', v.version,
           'current_version', s.version, 'content_hash', v.content_hash,
           'token_count', v.token_count, 'provenance', v.provenance, 'skill_md', '')
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
}

// The served skills come from skills.context_sections, one row per section in block order, not
// from markers read back out of the text (a skill's instructions could contain a marker line).
const RENDER_SQL: &str = "\
WITH c AS MATERIALIZED (
    SELECT * FROM skills.context_sections($1, categories => $2, k => $3, token_budget => $4,
                                          min_score => $5, method => $6) WITH ORDINALITY
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
    let req = args.validate(3)?;
    decode("render_context", request_value(db, RENDER_SQL, &req).await?)
}

/// How one served skill did in the run.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillOutcome {
    /// The skill id, as search_skills or render_context returned it.
    pub id: i64,
    /// Whether the task succeeded with this skill's help.
    pub passed: bool,
    /// What using it cost (tokens, seconds or money; the caller's unit).
    #[serde(default)]
    pub cost: Option<f64>,
    /// The version that was served (rejects the report if the skill changed since).
    #[serde(default)]
    pub version: Option<i64>,
    /// The content_hash that was served (same check as version).
    #[serde(default)]
    #[schemars(length(min = 64, max = 64))]
    pub content_hash: Option<String>,
}

/// Arguments of `report_outcome`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportArgs {
    /// The task the agent worked on (the query it searched with, or the task statement).
    #[schemars(length(min = 1, max = 8000))]
    pub task: String,
    /// The skills served for this run and how each did.
    #[schemars(length(min = 1, max = 100))]
    pub skills: Vec<SkillOutcome>,
    /// Who ran the task (agent and model), e.g. "claude-code/sonnet".
    #[serde(default)]
    #[schemars(length(max = 200))]
    pub executor: Option<String>,
    /// Where it ran: any JSON object (OS, language, repository, tool versions), at most 16 KiB
    /// as JSON and nested at most 8 levels deep.
    #[serde(default)]
    pub environment: Option<Map<String, Value>>,
    /// The budget the run had (tokens, steps; the caller's unit).
    #[serde(default)]
    pub budget: Option<f64>,
    /// Groups runs of the same underlying question (cross-validation keeps a group together).
    #[serde(default)]
    #[schemars(length(min = 1, max = 8000))]
    pub source_group: Option<String>,
    /// Record outcomes for skills that changed since they were served, flagged stale.
    #[serde(default)]
    pub allow_stale: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ReportResult {
    /// The new row of skills.event.
    pub event_id: i64,
    /// Rows written to skills.event_arm.
    pub arms: i64,
    pub passed: i64,
    pub failed: i64,
    /// Arms recorded for a changed skill (allow_stale); fits skip them.
    pub stale: i64,
    /// The KeyOpt round that was active (null before the first fit).
    pub round: Option<i64>,
}

fn validate_report(args: &ReportArgs) -> Result<Value, ToolError> {
    check_text("task", &args.task)?;
    if args.skills.is_empty() {
        return Err(ToolError::InvalidArgument(
            "`skills` is empty; report at least one served skill with passed true or false".into(),
        ));
    }
    if args.skills.len() > MAX_ARMS {
        return Err(ToolError::InvalidArgument(format!(
            "`skills` has {} entries; at most {MAX_ARMS}",
            args.skills.len()
        )));
    }
    if let Some(e) = &args.executor {
        check_length("executor", e, MAX_LABEL_CHARS)?;
    }
    if let Some(g) = &args.source_group {
        check_text("source_group", g)?;
    }
    if let Some(environment) = &args.environment {
        check_environment(environment)?;
    }
    if let Some(b) = args.budget {
        check_finite("budget", b)?;
        if b < 0.0 {
            return Err(ToolError::InvalidArgument(format!(
                "`budget` must not be negative (got {b})"
            )));
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut arms = Vec::with_capacity(args.skills.len());
    for (i, s) in args.skills.iter().enumerate() {
        let at = format!("skills[{i}]");
        if s.id < 1 {
            return Err(ToolError::InvalidArgument(format!(
                "`{at}.id` must be a positive skill id (got {})",
                s.id
            )));
        }
        if !seen.insert(s.id) {
            return Err(ToolError::InvalidArgument(format!(
                "skill {} is reported twice; report each served skill once",
                s.id
            )));
        }
        let mut arm = serde_json::json!({"skill_id": s.id, "passed": s.passed});
        if let Some(c) = s.cost {
            check_finite(&format!("{at}.cost"), c)?;
            if c < 0.0 {
                return Err(ToolError::InvalidArgument(format!(
                    "`{at}.cost` must not be negative (got {c})"
                )));
            }
            arm["cost"] = c.into();
        }
        if let Some(v) = s.version {
            arm["version"] = check_range(&format!("{at}.version"), v, 1, i32::MAX as i64)?.into();
        }
        if let Some(h) = &s.content_hash {
            if h.len() != 64
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            {
                return Err(ToolError::InvalidArgument(format!(
                    "`{at}.content_hash` must be the 64 lowercase hex digits search_skills returned"
                )));
            }
            arm["content_hash"] = h.clone().into();
        }
        arms.push(arm);
    }
    Ok(Value::Array(arms))
}

pub async fn report_outcome(db: &Database, args: ReportArgs) -> Result<ReportResult, ToolError> {
    let arms = validate_report(&args)?;
    let environment = Value::Object(args.environment.clone().unwrap_or_default());
    let executor = args.executor.clone().unwrap_or_default();
    let allow_stale = args.allow_stale.unwrap_or(false);
    let value: Value = db
        .with_client(false, |mut c| {
            let (arms, environment, executor) =
                (arms.clone(), environment.clone(), executor.clone());
            let args = args.clone();
            async move {
                // record_run and the read-back in one transaction: the summary describes
                // exactly the event this call wrote.
                let tx = c.transaction().await?;
                let budget = args.budget;
                let event: i64 = tx
                    .query_one(
                        "SELECT skills.record_run($1, $2, executor => $3, environment => $4, \
                         budget => $5::float8::numeric, source_group => $6, allow_stale => $7)",
                        &[
                            &args.task,
                            &arms,
                            &executor,
                            &environment,
                            &budget,
                            &args.source_group,
                            &allow_stale,
                        ],
                    )
                    .await?
                    .get(0);
                let row = tx
                    .query_one(
                        "SELECT jsonb_build_object('event_id', e.id, 'round', e.round, \
                                'arms', count(a.*), 'passed', count(*) FILTER (WHERE a.passed), \
                                'failed', count(*) FILTER (WHERE NOT a.passed), \
                                'stale', count(*) FILTER (WHERE a.stale)) \
                         FROM skills.event AS e JOIN skills.event_arm AS a ON a.event_id = e.id \
                         WHERE e.id = $1 GROUP BY e.id, e.round",
                        &[&event],
                    )
                    .await?;
                tx.commit().await?;
                Ok(row.get(0))
            }
        })
        .await?;
    decode("report_outcome", value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> SearchArgs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn search_defaults_and_limits() {
        let r = args(serde_json::json!({"query": "pytest fixtures"}))
            .validate(5)
            .unwrap();
        assert_eq!(r.k, 5);
        assert_eq!(r.method, Method::Keyopt);
        assert_eq!(r.token_budget, None);
        let e = args(serde_json::json!({"query": "x", "k": 0}))
            .validate(5)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: `k` must be between 1 and 50 (got 0)"
        );
        let e = args(serde_json::json!({"query": "   "}))
            .validate(5)
            .unwrap_err();
        assert!(e.to_string().contains("`query` must not be empty"));
        let e = args(serde_json::json!({"query": "x", "categories": ["testing", "cooking"]}))
            .validate(5)
            .unwrap_err();
        assert!(
            e.to_string().contains("unknown category \"cooking\""),
            "{e}"
        );
        assert!(e.to_string().contains("devops_infra"), "{e}");
        let e = args(serde_json::json!({"query": "x", "token_budget": 10_000_000}))
            .validate(5)
            .unwrap_err();
        assert!(e.to_string().contains("token_budget"), "{e}");
    }

    #[test]
    fn unknown_fields_and_methods_do_not_parse() {
        let e = serde_json::from_value::<SearchArgs>(serde_json::json!({"query": "x", "top_k": 3}))
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `top_k`"), "{e}");
        let e = serde_json::from_value::<SearchArgs>(
            serde_json::json!({"query": "x", "method": "fast"}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown variant `fast`"), "{e}");
    }

    fn report(skills: Value) -> ReportArgs {
        serde_json::from_value(serde_json::json!({"task": "t", "skills": skills})).unwrap()
    }

    #[test]
    fn report_arms_are_checked_and_shaped_for_record_run() {
        let arms = validate_report(&report(serde_json::json!([
            {"id": 3, "passed": true, "cost": 1.5, "version": 2},
            {"id": 4, "passed": false}
        ])))
        .unwrap();
        assert_eq!(
            arms,
            serde_json::json!([
                {"skill_id": 3, "passed": true, "cost": 1.5, "version": 2},
                {"skill_id": 4, "passed": false}
            ])
        );
        let twice = validate_report(&report(serde_json::json!([
            {"id": 3, "passed": true}, {"id": 3, "passed": false}
        ])))
        .unwrap_err();
        assert!(twice.to_string().contains("reported twice"), "{twice}");
        let empty = validate_report(&report(serde_json::json!([]))).unwrap_err();
        assert!(empty.to_string().contains("`skills` is empty"), "{empty}");
        let hash = validate_report(&report(serde_json::json!([
            {"id": 3, "passed": true, "content_hash": "ABC"}
        ])))
        .unwrap_err();
        assert!(hash.to_string().contains("content_hash"), "{hash}");
    }

    fn report_with(extra: Value) -> Result<Value, ToolError> {
        let mut v = serde_json::json!({"task": "t", "skills": [{"id": 1, "passed": true}]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        validate_report(&serde_json::from_value(v).unwrap())
    }

    /// `levels` objects, each inside the one before.
    fn nested(levels: usize) -> Value {
        (1..levels).fold(
            serde_json::json!({"leaf": 1}),
            |inner, _| serde_json::json!({ "in": inner }),
        )
    }

    #[test]
    fn every_search_argument_is_bounded() {
        let long = "x".repeat(MAX_TEXT_CHARS + 1);
        let e = args(serde_json::json!({"query": long}))
            .validate(5)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: `query` is 8001 characters; at most 8000"
        );
        args(serde_json::json!({"query": "é".repeat(MAX_TEXT_CHARS)}))
            .validate(5)
            .unwrap();
        let eight = vec!["testing"; CATEGORIES.len() + 1];
        let e = args(serde_json::json!({"query": "x", "categories": eight}))
            .validate(5)
            .unwrap_err();
        assert!(e.to_string().contains("`categories` has 8 entries"), "{e}");
        // A long entry is refused by its length, not echoed back as an unknown pool.
        let e =
            args(serde_json::json!({"query": "x", "categories": ["testing", "y".repeat(5000)]}))
                .validate(5)
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: `categories[1]` is 5000 characters; at most 32"
        );
        assert!(CATEGORIES.iter().all(|c| c.len() <= MAX_CATEGORY_CHARS));
        for (k, bad) in [("k", 51), ("token_budget", 200_001)] {
            let e = args(serde_json::json!({"query": "x", k: bad}))
                .validate(5)
                .unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("`{k}` must be between 1 and")),
                "{e}"
            );
        }
    }

    #[test]
    fn every_report_argument_is_bounded() {
        let e =
            report_with(serde_json::json!({"task": "t".repeat(MAX_TEXT_CHARS + 1)})).unwrap_err();
        assert!(e.to_string().contains("`task` is 8001 characters"), "{e}");
        let e = report_with(serde_json::json!({"executor": "e".repeat(MAX_LABEL_CHARS + 1)}))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("`executor` is 201 characters; at most 200"),
            "{e}"
        );
        report_with(serde_json::json!({"executor": "e".repeat(MAX_LABEL_CHARS)})).unwrap();
        let e = report_with(serde_json::json!({"source_group": "g".repeat(MAX_TEXT_CHARS + 1)}))
            .unwrap_err();
        assert!(e.to_string().contains("`source_group` is 8001"), "{e}");
        let arms: Vec<Value> = (1..=MAX_ARMS as i64 + 1)
            .map(|id| serde_json::json!({"id": id, "passed": true}))
            .collect();
        let e = report_with(serde_json::json!({"skills": arms})).unwrap_err();
        assert!(
            e.to_string()
                .contains("`skills` has 101 entries; at most 100"),
            "{e}"
        );

        let big = serde_json::json!({"environment": {"log": "z".repeat(MAX_ENVIRONMENT_BYTES)}});
        let e = report_with(big).unwrap_err();
        assert!(
            e.to_string().contains("bytes as JSON; at most 16384"),
            "{e}"
        );
        report_with(serde_json::json!({"environment": nested(MAX_ENVIRONMENT_DEPTH)})).unwrap();
        let e = report_with(serde_json::json!({"environment": nested(MAX_ENVIRONMENT_DEPTH + 1)}))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: `environment` nests 9 levels deep; at most 8"
        );
        let e =
            report_with(serde_json::json!({"environment": {"a": [[[[[[[[1]]]]]]]]}})).unwrap_err();
        assert!(e.to_string().contains("nests 9 levels"), "{e}");
    }

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
        let p = &report["properties"];
        assert_eq!(p["task"]["maxLength"], MAX_TEXT_CHARS);
        assert_eq!(p["skills"]["maxItems"], MAX_ARMS);
        assert_eq!(p["executor"]["maxLength"], MAX_LABEL_CHARS);
        assert_eq!(p["source_group"]["maxLength"], MAX_TEXT_CHARS);
        assert_eq!(outcome["content_hash"]["maxLength"], 64, "{report}");
    }

    #[test]
    fn skill_md_front_matter_survives_colons_and_quotes() {
        let md = skill_md("a: b", "says \"hi\": then\nmore", "Body\n\n");
        assert_eq!(
            md,
            "---\nname: \"a: b\"\ndescription: \"says \\\"hi\\\": then\\nmore\"\n---\n\nBody\n"
        );
    }
}
