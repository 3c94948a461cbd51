//! report_outcome: how a task went with the skills that were served, recorded through
//! `skills.record_run` for the next KeyOpt fit.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::*;
use crate::db::Database;

/// How one served skill did in the run.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillOutcome {
    /// The skill id, as search_skills or render_context returned it.
    pub id: i64,
    /// Whether the task succeeded with this skill's help. May be left out when `run_passed`
    /// gives the outcome of the run as a whole.
    #[serde(default)]
    pub passed: Option<bool>,
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
    /// For a task that used the skills together: whether the run as a whole passed. Each
    /// skill's own `passed` is then optional (give it where you know it).
    #[serde(default)]
    pub run_passed: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ReportResult {
    /// The new row of skills.event.
    pub event_id: i64,
    /// Rows written to skills.event_arm.
    pub arms: i64,
    /// Arms with their own outcome (arms of a set run without one count in neither).
    pub passed: i64,
    pub failed: i64,
    /// The outcome of the run as a whole, when it was reported.
    pub run_passed: Option<bool>,
    /// Arms recorded for a changed skill (allow_stale); fits skip them.
    pub stale: i64,
    /// The KeyOpt round that was active (null before the first fit).
    pub round: Option<i64>,
}

fn validate_report(args: &ReportArgs) -> Result<Value, ToolError> {
    check_text("task", &args.task)?;
    if args.skills.is_empty() {
        return Err(ToolError::InvalidArgument(
            "`skills` is empty; report at least one served skill (with passed true or false, or with run_passed for the whole run)".into(),
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
        let mut arm = serde_json::json!({"skill_id": s.id});
        match (s.passed, args.run_passed) {
            (Some(p), _) => arm["passed"] = p.into(),
            (None, Some(_)) => {}
            (None, None) => {
                return Err(ToolError::InvalidArgument(format!(
                    "`{at}.passed` is missing: give each skill's outcome, or run_passed for the whole run"
                )))
            }
        }
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
                         budget => $5::float8::numeric, source_group => $6, allow_stale => $7, \
                         run_passed => $8)",
                        &[
                            &args.task,
                            &arms,
                            &executor,
                            &environment,
                            &budget,
                            &args.source_group,
                            &allow_stale,
                            &args.run_passed,
                        ],
                    )
                    .await?
                    .get(0);
                let row = tx
                    .query_one(
                        "SELECT jsonb_build_object('event_id', e.id, 'round', e.round, \
                                'arms', count(a.*), 'passed', count(*) FILTER (WHERE a.passed), \
                                'failed', count(*) FILTER (WHERE NOT a.passed), \
                                'stale', count(*) FILTER (WHERE a.stale), 'run_passed', e.set_passed) \
                         FROM skills.event AS e JOIN skills.event_arm AS a ON a.event_id = e.id \
                         WHERE e.id = $1 GROUP BY e.id, e.round, e.set_passed",
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

    /// A run that used its skills together: run_passed gives its outcome, and each skill's own
    /// outcome is then optional; without run_passed every skill needs one.
    #[test]
    fn a_set_run_needs_run_passed_or_every_outcome() {
        let set: ReportArgs = serde_json::from_value(serde_json::json!({
            "task": "t", "run_passed": false,
            "skills": [{"id": 3}, {"id": 4, "passed": true}]
        }))
        .unwrap();
        assert_eq!(
            validate_report(&set).unwrap(),
            serde_json::json!([{"skill_id": 3}, {"skill_id": 4, "passed": true}])
        );
        let missing = validate_report(&report(serde_json::json!([
            {"id": 3}, {"id": 4, "passed": true}
        ])))
        .unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("`skills[0].passed` is missing"),
            "{missing}"
        );
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
}
