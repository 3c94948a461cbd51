//! search_skills: `skills.search` with the request's limits, every hit with its version,
//! content hash and provenance.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::*;
use crate::db::Database;

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

/// The method a search uses when the agent names none (`skills.search`'s own default). The
/// methods themselves are the database's: `skills.search_methods()` (see `server.rs`).
pub const DEFAULT_METHOD: &str = "keyopt";

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
    /// Ranking method, one of those this schema's enum lists (the database's own list); default
    /// keyopt (semantic similarity corrected by reported outcomes).
    #[serde(default)]
    #[schemars(length(min = 1, max = 32))]
    pub method: Option<String>,
    /// Also serve, right after each served skill, up to this many skills it needs (0-5): ones
    /// that past runs with it needed, its prerequisites and usual next steps. They count
    /// against k and token_budget. Default 0.
    #[serde(default)]
    #[schemars(range(min = 0, max = 5))]
    pub complements: Option<i64>,
}

/// A search request with its limits checked and defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    pub query: String,
    pub categories: Option<Vec<String>>,
    pub k: i32,
    pub token_budget: Option<i32>,
    pub min_score: Option<f64>,
    pub method: String,
    pub complements: i32,
}

impl SearchArgs {
    /// Checks the arguments; `methods` is the database's list when it is known.
    pub fn validate(
        self,
        default_k: i32,
        methods: Option<&[String]>,
    ) -> Result<SearchRequest, ToolError> {
        check_text("query", &self.query)?;
        if let Some(method) = &self.method {
            check_text("method", method)?;
            check_length("method", method, MAX_METHOD_CHARS)?;
            if let Some(methods) = methods.filter(|m| !m.contains(method)) {
                return Err(ToolError::InvalidArgument(format!(
                    "unknown method {method:?}; the methods are {}",
                    methods.join(", ")
                )));
            }
        }
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
        let complements = match self.complements {
            Some(n) => check_range("complements", n, 0, MAX_COMPLEMENTS)?,
            None => 0,
        };
        Ok(SearchRequest {
            query: self.query,
            categories: self.categories,
            k,
            token_budget,
            min_score: self.min_score,
            method: self.method.unwrap_or_else(|| DEFAULT_METHOD.to_owned()),
            complements,
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
    /// ≤ 0: correction given back because it would have lifted the skill over a rival further
    /// ahead in relevance than the skill was ever seen to overcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_back: Option<f64>,
    /// For a request of several parts (sentences, list items): what answering a part that no
    /// skill ranked above answers added to the score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f64>,
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
    /// Risk to the user if an agent follows it: none, low, medium, high, critical (skills above
    /// the server's pg_skills.max_risk are never returned).
    pub risk: String,
    /// The risk findings: rule, severity, field, lines, excerpt, mitigation.
    pub risk_findings: Vec<Value>,
    /// Served because the skill with this id needs it (`complements`), and why: co-success
    /// (runs with both passed more often), dependency (it produces what that skill needs) or
    /// workflow (it usually follows that skill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complement_of: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complement: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SearchResult {
    pub query: String,
    pub method: String,
    pub results: Vec<SkillHit>,
    /// What the serving policy withheld from this answer (risk, retired, licence), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

const SEARCH_SQL: &str = "\
SELECT coalesce(jsonb_agg(jsonb_build_object(
           'rank', r.rank, 'id', r.id, 'name', r.name, 'category', r.category,
           'description', s.description, 'score', r.score, 'tokens', r.tokens,
           'version', s.version, 'content_hash', s.content_hash,
           'parts', jsonb_strip_nulls(jsonb_build_object(
               'bm25', r.bm25, 'semantic', r.semantic, 'graph', r.graph,
               'beta', r.beta, 'dk_term', r.dk_term, 'event_term', r.event_term,
               'held_back', r.held_back, 'coverage', r.coverage)),
           'provenance', s.provenance, 'risk', r.risk,
           'risk_findings', s.risk_findings, 'complement_of', r.complement_of,
           'complement', r.complement) ORDER BY r.rank), '[]'::jsonb)
FROM skills.search($1, categories => $2, k => $3, token_budget => $4, min_score => $5,
                   method => $6, complements => $7)
     WITH ORDINALITY AS r(id, name, category, score, tokens, bm25, semantic, graph, beta,
                          dk_term, event_term, held_back, coverage, complement_of, complement,
                          risk, risk_rules, rank)
JOIN skills.skill AS s ON s.id = r.id";

/// Runs `sql` (a statement over skills.search / skills.render_context taking the request's seven
/// parameters in order) and returns its one jsonb value, with what the serving policy withheld.
pub(super) async fn request_value(
    db: &Database,
    sql: &'static str,
    req: &SearchRequest,
) -> Result<(Value, Option<String>), ToolError> {
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
                        &req.complements,
                    ],
                )
                .await?;
            let value: Value = row.get(0);
            // The policy's NOTICE does not reach a pooled client: ask for it on the same session.
            let withheld: Option<String> = c
                .query_one("SELECT skills.last_withheld()", &[])
                .await?
                .get(0);
            Ok((value, withheld))
        }
    })
    .await
}

/// The database's methods when the request names one (a request that does not is not checked,
/// and needs no extra round trip).
pub(super) async fn methods_for<'a>(
    db: &'a Database,
    args: &SearchArgs,
) -> Result<Option<&'a [String]>, ToolError> {
    match args.method {
        Some(_) => db.search_methods().await,
        None => Ok(None),
    }
}

pub async fn search(db: &Database, args: SearchArgs) -> Result<SearchResult, ToolError> {
    let methods = methods_for(db, &args).await?;
    let req = args.validate(5, methods)?;
    let (rows, withheld) = request_value(db, SEARCH_SQL, &req).await?;
    Ok(SearchResult {
        query: req.query,
        method: req.method,
        results: decode("search", rows)?,
        withheld,
    })
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
            .validate(5, None)
            .unwrap();
        assert_eq!(r.k, 5);
        assert_eq!(r.method, DEFAULT_METHOD);
        assert_eq!(r.token_budget, None);
        let e = args(serde_json::json!({"query": "x", "k": 0}))
            .validate(5, None)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: `k` must be between 1 and 50 (got 0)"
        );
        let e = args(serde_json::json!({"query": "   "}))
            .validate(5, None)
            .unwrap_err();
        assert!(e.to_string().contains("`query` must not be empty"));
        let e = args(serde_json::json!({"query": "x", "categories": ["testing", "cooking"]}))
            .validate(5, None)
            .unwrap_err();
        assert!(
            e.to_string().contains("unknown category \"cooking\""),
            "{e}"
        );
        assert!(e.to_string().contains("devops_infra"), "{e}");
        let e = args(serde_json::json!({"query": "x", "token_budget": 10_000_000}))
            .validate(5, None)
            .unwrap_err();
        assert!(e.to_string().contains("token_budget"), "{e}");
    }

    #[test]
    fn unknown_fields_do_not_parse_and_unknown_methods_are_refused() {
        let e = serde_json::from_value::<SearchArgs>(serde_json::json!({"query": "x", "top_k": 3}))
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `top_k`"), "{e}");
        let methods = ["bm25".to_string(), "keyopt".to_string()];
        let e = args(serde_json::json!({"query": "x", "method": "fast"}))
            .validate(5, Some(&methods))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: unknown method \"fast\"; the methods are bm25, keyopt"
        );
        let r = args(serde_json::json!({"query": "x", "method": "bm25"}))
            .validate(5, Some(&methods))
            .unwrap();
        assert_eq!(r.method, "bm25");
        // Without the database's list the database decides; only the length is checked here.
        assert!(args(serde_json::json!({"query": "x", "method": "fast"}))
            .validate(5, None)
            .is_ok());
        let e = args(serde_json::json!({"query": "x", "method": "m".repeat(40)}))
            .validate(5, None)
            .unwrap_err();
        assert!(e.to_string().contains("at most 32"), "{e}");
    }

    #[test]
    fn every_search_argument_is_bounded() {
        let long = "x".repeat(MAX_TEXT_CHARS + 1);
        let e = args(serde_json::json!({"query": long}))
            .validate(5, None)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: `query` is 8001 characters; at most 8000"
        );
        args(serde_json::json!({"query": "é".repeat(MAX_TEXT_CHARS)}))
            .validate(5, None)
            .unwrap();
        let eight = vec!["testing"; CATEGORIES.len() + 1];
        let e = args(serde_json::json!({"query": "x", "categories": eight}))
            .validate(5, None)
            .unwrap_err();
        assert!(e.to_string().contains("`categories` has 8 entries"), "{e}");
        // A long entry is refused by its length, not echoed back as an unknown pool.
        let e =
            args(serde_json::json!({"query": "x", "categories": ["testing", "y".repeat(5000)]}))
                .validate(5, None)
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: `categories[1]` is 5000 characters; at most 32"
        );
        assert!(CATEGORIES.iter().all(|c| c.len() <= MAX_CATEGORY_CHARS));
        for (k, bad) in [("k", 51), ("token_budget", 200_001)] {
            let e = args(serde_json::json!({"query": "x", k: bad}))
                .validate(5, None)
                .unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("`{k}` must be between 1 and")),
                "{e}"
            );
        }
    }
}
