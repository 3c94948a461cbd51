//! Skill trust in SQL: risk findings (the loader's Rust code, `pg_skills_corpus::risk`), licence
//! families, and the serving policy every search applies (`pg_skills.max_risk`,
//! `pg_skills.allowed_licenses`, retired skills).

use std::collections::HashMap;

use pgrx::prelude::*;

use pg_skills_corpus::license::{family, Family};
use pg_skills_corpus::risk::{self, Level, RULES, RULES_VERSION};

use crate::guc::{MaxRisk, ALLOWED_LICENSES, MAX_RISK};

/// Findings of a skill document: `{"level", "findings": [...], "rules_version"}` (the trigger
/// on `skills.skill` stores them; docs/trust.md lists the rules).
#[pg_extern(immutable, parallel_safe, strict)]
fn risk_scan(name: &str, description: &str, instructions: &str) -> pgrx::JsonB {
    crate::documents::check_text_size(name.len() + description.len() + instructions.len());
    pgrx::JsonB(
        crate::prepared_writes::risk(name, description, instructions)
            .unwrap_or_else(|| scanned_risk(name, description, instructions)),
    )
}

/// The risk scan of a document run here (cancellable), as `skills.risk_scan` returns it.
pub(crate) fn scanned_risk(name: &str, description: &str, instructions: &str) -> serde_json::Value {
    let report = risk::scan_with(name, description, instructions, &mut || {
        pgrx::pg_sys::check_for_interrupts!();
    });
    crate::prepared_writes::risk_json(&report)
}

/// The version of the rules this build applies; stored findings of another version are stale.
#[pg_extern(immutable, parallel_safe)]
fn risk_rules_version() -> i32 {
    RULES_VERSION
}

/// The risk rules: id, the highest severity each reports, and what it finds.
#[pg_extern(immutable, parallel_safe)]
fn risk_rules() -> TableIterator<
    'static,
    (
        name!(rule, &'static str),
        name!(severity, &'static str),
        name!(summary, &'static str),
    ),
> {
    TableIterator::new(RULES.iter().map(|r| (r.id, r.severity.as_str(), r.summary)))
}

/// The family of a licence string (permissive, weak-copyleft, copyleft, restricted, unknown).
#[pg_extern(immutable, parallel_safe)]
fn license_family(license: Option<&str>) -> &'static str {
    family(license).as_str()
}

/// Why a skill is not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Withheld {
    Risk,
    Retired,
    License,
}

/// The serving policy of this session.
pub struct Policy {
    max_risk: Level,
    licenses: Option<Vec<Family>>,
}

impl Policy {
    pub fn current() -> Policy {
        let max_risk = match MAX_RISK.get() {
            MaxRisk::None => Level::None,
            MaxRisk::Low => Level::Low,
            MaxRisk::Medium => Level::Medium,
            MaxRisk::High => Level::High,
            MaxRisk::Critical => Level::Critical,
        };
        let licenses = ALLOWED_LICENSES
            .get()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.split(',')
                    .filter(|f| !f.trim().is_empty())
                    .map(|f| {
                        Family::parse(f).unwrap_or_else(|| {
                            crate::errors::raise(
                                pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                                format!("pg_skills.allowed_licenses names an unknown family \"{}\"", f.trim()),
                                Some("Families: permissive, weak-copyleft, copyleft, restricted, unknown; empty allows all."),
                            )
                        })
                    })
                    .collect()
            });
        Policy { max_risk, licenses }
    }

    /// Why a skill with this stored risk level, retirement and provenance licences is withheld.
    pub fn withheld(&self, risk: &str, retired: bool, licenses: &[Option<String>]) -> Option<Withheld> {
        if retired {
            return Some(Withheld::Retired);
        }
        // An unknown stored level (a newer rules version's) is withheld: fail closed.
        if Level::parse(risk).is_none_or(|l| l > self.max_risk) {
            return Some(Withheld::Risk);
        }
        if let Some(allowed) = &self.licenses {
            let families: Vec<Family> = if licenses.is_empty() {
                vec![Family::Unknown]
            } else {
                licenses.iter().map(|l| family(l.as_deref())).collect()
            };
            if !families.iter().any(|f| allowed.contains(f)) {
                return Some(Withheld::License);
            }
        }
        None
    }
}

thread_local! {
    /// The last search's NOTICE text in this backend (clients that do not see notices, such as
    /// the MCP server's pool, read it with `skills.last_withheld()`).
    static LAST_WITHHELD: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// What the last search or context of this session withheld (NULL: nothing).
#[pg_extern(volatile, parallel_unsafe)]
fn last_withheld() -> Option<String> {
    LAST_WITHHELD.with(|w| w.borrow().clone())
}

/// Each skill of `ids` with its token count and the policy's verdict on it (one round trip): the
/// one reader of what the policy judges, for searches and for `skills.withheld_reason`.
pub fn serving_facts(ids: &[i64], policy: &Policy) -> HashMap<i64, (i32, Option<Withheld>)> {
    crate::spi::read(|client| {
        let mut out = HashMap::new();
        // Every search runs it: on a kept plan (a primary-key lookup whatever the ids).
        for row in crate::spi::select_kept(
            client,
            "SELECT id, token_count, risk::text, retired_at IS NOT NULL, \
                    ARRAY(SELECT p ->> 'license' FROM jsonb_array_elements(provenance) AS p) \
             FROM skills.skill WHERE id = ANY ($1)",
            &[ids.to_vec().into()],
        )? {
            let id = row.get::<i64>(1)?.expect("NOT NULL");
            let tokens = row.get::<i32>(2)?.unwrap_or(0);
            let risk: String = row.get(3)?.unwrap_or_default();
            let retired = row.get::<bool>(4)?.unwrap_or(false);
            let licenses: Vec<Option<String>> = row.get(5)?.unwrap_or_default();
            out.insert(id, (tokens, policy.withheld(&risk, retired, &licenses)));
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
}

/// Why the serving policy withholds skill `skill_id` now ("risk high above pg_skills.max_risk =
/// medium (pipe-to-shell)", "retired", "licence ..."); NULL when it is served (or absent).
#[pg_extern(stable, parallel_safe)]
fn withheld_reason(skill_id: i64) -> Option<String> {
    let policy = Policy::current();
    let withheld = serving_facts(&[skill_id], &policy).remove(&skill_id)?.1?;
    Some(match withheld {
        Withheld::Risk => {
            // Only a withheld skill's message needs its level and rules.
            let (risk, rules) = crate::spi::read(|client| {
                let row = client
                    .select(
                        "SELECT risk::text, ARRAY(SELECT DISTINCT f ->> 'rule' \
                                FROM jsonb_array_elements(risk_findings) AS f \
                                WHERE f ->> 'severity' NOT IN ('none', 'low') ORDER BY 1) \
                         FROM skills.skill WHERE id = $1",
                        None,
                        &[skill_id.into()],
                    )?
                    .first();
                Ok::<_, pgrx::spi::Error>((
                    row.get::<String>(1)?.unwrap_or_default(),
                    row.get::<Vec<String>>(2)?.unwrap_or_default(),
                ))
            });
            format!(
                "risk {risk} is above pg_skills.max_risk = {} ({})",
                policy.max_risk.as_str(),
                rules.join(", ")
            )
        }
        Withheld::Retired => "retired: its files left every source it was loaded from".into(),
        Withheld::License => "its licence is outside pg_skills.allowed_licenses".into(),
    })
}

/// A NOTICE naming what a search withheld, so nothing is silently missing.
pub fn notice_withheld(withheld: &[(i64, Withheld)], policy: &Policy) {
    LAST_WITHHELD.with(|w| *w.borrow_mut() = None);
    if withheld.is_empty() {
        return;
    }
    let part = |what: Withheld, label: String| {
        let ids: Vec<String> = withheld
            .iter()
            .filter(|(_, w)| *w == what)
            .map(|(id, _)| id.to_string())
            .collect();
        (!ids.is_empty()).then(|| format!("{} {label} (ids {})", ids.len(), ids.join(", ")))
    };
    let parts: Vec<String> = [
        part(Withheld::Risk, format!("above pg_skills.max_risk = {}", policy.max_risk.as_str())),
        part(Withheld::Retired, "retired".into()),
        part(Withheld::License, "outside pg_skills.allowed_licenses".into()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let text = format!(
        "pg_skills: {} matching skill(s) withheld: {}",
        withheld.len(),
        parts.join("; ")
    );
    pgrx::notice!("{text}");
    LAST_WITHHELD.with(|w| *w.borrow_mut() = Some(text));
}
