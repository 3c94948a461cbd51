//! KeyOpt's base relevance r: the key inner product qᵀk0 by default, or a cross-encoder (any
//! relevance model) installed as a SQL function and named by `pg_skills.relevance_function`.
//!
//! The function takes `(query text, skill_ids bigint[])` and returns one row
//! `(skill_id bigint, score double precision)` per id it is given (plpython3u around a local
//! model, another extension, a SQL heuristic). A fit uses the function set when it runs and
//! records it in its round (`skills.keyopt_round.relevance_function`); readings of that round
//! call the same function, because ρ, β and Δk were fitted against that r. Without a round the
//! setting applies directly: KeyOpt then reranks the semantic candidate pool with the function.

use std::collections::HashMap;

use pgrx::PgSqlErrorCode;

use crate::errors::raise;
use crate::spi::select_one;

const SIGNATURE_HINT: &str = "Create a function (query text, skill_ids bigint[]) RETURNS TABLE \
     (skill_id bigint, score double precision) returning one row per id and name it with its \
     schema (myschema.rerank), or RESET pg_skills.relevance_function to use the key inner product.";

/// The setting, as a function signature (`name` alone means `name(text, bigint[])`). It is
/// resolved under the fixed search_path (`crate::spi`): a function outside pg_catalog is named
/// with its schema.
pub fn configured() -> Option<String> {
    let name = crate::guc::relevance_function()?;
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    Some(if name.contains('(') {
        name.to_string()
    } else {
        format!("{name}(text, bigint[])")
    })
}

/// The function's canonical signature (schema-qualified where needed), for storing in a round;
/// an error naming the setting when it resolves to no function.
pub fn resolve(signature: &str, what: &str) -> String {
    let found: Option<String> = select_one("SELECT to_regprocedure($1)::text", &[signature.into()]);
    found.unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
            format!("{what} names no function {signature}"),
            Some(SIGNATURE_HINT),
        )
    })
}

/// The relevance function a reading of a round calls: the round's, but only when the
/// superuser-level setting names that same function now.
///
/// The round table records which function gave r, and a role that can write that table (an
/// administrator, not a superuser) could plant any function there; every search of the round
/// would then run it with the searcher's rights. So the table only says which function the
/// round needs; the setting says which one may run.
pub fn for_round(recorded: Option<&str>, round: i32) -> Option<String> {
    let recorded = recorded?;
    let allowed = configured().map(|sig| resolve(&sig, "pg_skills.relevance_function"));
    if allowed.as_deref() == Some(recorded) {
        return allowed;
    }
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "KeyOpt round {round} was fitted with the relevance function {recorded}, which \
             pg_skills.relevance_function does not name (it names {})",
            allowed.as_deref().unwrap_or("none")
        ),
        Some(
            "A superuser sets pg_skills.relevance_function to that function; or fit a new round \
              (skills.fit()) or activate another one (skills.use_round(n)).",
        ),
    )
}

/// r for each of `ids` from `function` (a resolved signature); every id must get a finite score.
pub fn scores(function: &str, query: &str, ids: &[i64]) -> HashMap<i64, f32> {
    if ids.is_empty() {
        return HashMap::new();
    }
    // The name to call it by (schema-qualified unless on the search path).
    let name: Option<String> = select_one(
        "SELECT to_regprocedure($1)::regproc::text",
        &[function.into()],
    );
    let Some(name) = name else {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
            format!("the relevance function {function} of the active KeyOpt round no longer exists"),
            Some("Recreate it, or fit a new round (skills.fit()) with another pg_skills.relevance_function."),
        )
    };
    let sql = format!(
        "SELECT s.skill_id::bigint, s.score::float8 FROM {name}($1::text, $2::bigint[]) AS s(skill_id, score)"
    );
    let rows: Vec<(Option<i64>, Option<f64>)> = crate::spi::read(|client| {
        let mut out = Vec::new();
        for row in client.select(&sql, None, &[query.into(), ids.to_vec().into()])? {
            out.push((row.get::<i64>(1)?, row.get::<f64>(2)?));
        }
        Ok::<_, pgrx::spi::Error>(out)
    });
    let mut out = HashMap::with_capacity(ids.len());
    for (id, score) in rows {
        if let (Some(id), Some(score)) = (id, score) {
            if !score.is_finite() {
                raise(
                    PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                    format!("relevance function {function} gave skill {id} the score {score}"),
                    Some("Scores must be finite numbers."),
                );
            }
            out.insert(id, score as f32);
        }
    }
    if let Some(missing) = ids.iter().find(|id| !out.contains_key(id)) {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("relevance function {function} returned no score for skill {missing}"),
            Some(SIGNATURE_HINT),
        );
    }
    out
}
