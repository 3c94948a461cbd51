//! A search request: its arguments checked (query size, weights, pools, method, limits) and
//! the query key computed once.

use pgrx::PgSqlErrorCode;

use pg_skills_kernels::serving::{Limits, SearchMethod as Method};

use crate::embedding::query_key_values;
use crate::errors::raise;
use crate::spi::select_one;

/// `skills.search_methods()`: the names `skills.search(..., method => ...)` accepts (clients such
/// as the MCP server publish this list instead of keeping their own).
#[pgrx::pg_extern(immutable, parallel_safe)]
fn search_methods() -> Vec<String> {
    Method::names().into_iter().map(str::to_owned).collect()
}

/// The request's method, or an ERROR listing the valid ones.
fn parse_method(name: &str) -> Method {
    Method::parse(name).unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("unknown search method \"{name}\""),
            Some(&format!("Valid methods: {}.", Method::names().join(", "))),
        )
    })
}

/// What to rank: the query, its pools and method, computed once per request.
pub struct Request {
    pub query: String,
    pub categories: Option<Vec<String>>,
    pub method: Method,
    pub bm25_weight: f64,
    pub semantic_weight: f64,
    /// The number of results asked for (k); it sizes KeyOpt's candidate pool, which must not
    /// grow when a budget makes the ranking read deeper.
    pub results_wanted: Option<usize>,
    /// Complements served after each served skill, at most (`complements => n`; 0: none).
    pub complements: usize,
    key: Option<Vec<f32>>,
}

impl Request {
    pub fn new(
        query: Option<&str>,
        categories: Option<Vec<Option<String>>>,
        method: Option<&str>,
        bm25_weight: f64,
        semantic_weight: f64,
    ) -> Request {
        let Some(query) = query else {
            raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                "query must not be NULL",
                Some("Pass the task description as text."),
            )
        };
        crate::guc::check_query_size(query);
        for (name, w) in [
            ("bm25_weight", bm25_weight),
            ("semantic_weight", semantic_weight),
        ] {
            if !(w >= 0.0) || !w.is_finite() {
                raise(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("{name} must be a finite number >= 0, got {w}"),
                    Some("The weights scale each list's reciprocal ranks in hybrid and in the graph seeds (default 1)."),
                );
            }
        }
        Request {
            query: query.to_string(),
            categories: categories.map(validate_categories),
            method: parse_method(method.unwrap_or("keyopt")),
            bm25_weight,
            semantic_weight,
            results_wanted: None,
            complements: 0,
            key: None,
        }
    }

    /// The query key q (the encoder runs once per request).
    ///
    /// For the methods that cover a request's parts (`parts`), the parts are encoded in the same
    /// pass and kept in the backend's query-key cache, where the ranking finds them: one pass
    /// reads the model's weights once, where a second pass for the parts read them again.
    pub fn key(&mut self) -> Vec<f32> {
        if self.key.is_none() {
            let parts = match self.method {
                Method::Semantic | Method::KeyOpt => super::parts::part_texts(&self.query),
                _ => Vec::new(),
            };
            self.key = Some(if parts.is_empty() {
                query_key_values(&self.query)
            } else {
                let texts: Vec<&str> = std::iter::once(self.query.as_str())
                    .chain(parts.iter().map(String::as_str))
                    .collect();
                crate::embedding::query_keys_of(&texts).swap_remove(0)
            });
        }
        self.key.clone().expect("set above")
    }

    /// Starts the key of a request that is not covered by parts (see [`Request::key`]) on the
    /// encoder's threads; [`Request::finish_key`] collects it.
    pub fn start_key(&self) -> crate::embedding::PendingQueryKey {
        match &self.key {
            Some(key) => crate::embedding::PendingQueryKey::Ready(key.clone()),
            None => crate::embedding::start_query_key(&self.query),
        }
    }

    /// The key [`Request::start_key`] started, kept as [`Request::key`] keeps it.
    pub fn finish_key(&mut self, pending: crate::embedding::PendingQueryKey) -> Vec<f32> {
        let key = crate::embedding::finish_query_key(pending);
        self.key = Some(key.clone());
        key
    }

    pub fn category_filter(&self) -> Option<Vec<String>> {
        self.categories.clone()
    }
}

/// The pools (`skills.category`'s labels), in the enum's order.
pub(crate) fn category_names() -> Vec<String> {
    select_one::<Vec<String>>("SELECT enum_range(NULL::skills.category)::text[]", &[])
        .unwrap_or_default()
}

pub(crate) fn validate_categories(categories: Vec<Option<String>>) -> Vec<String> {
    let valid = category_names();
    categories
        .into_iter()
        .map(|c| match c {
            Some(c) if valid.contains(&c) => c,
            other => raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "unknown category \"{}\"",
                    other.as_deref().unwrap_or("NULL")
                ),
                Some(&format!(
                    "Valid categories: {}; pass NULL for all pools.",
                    valid.join(", ")
                )),
            ),
        })
        .collect()
}

/// The `complements` argument, validated: complements per served skill (NULL: none).
pub fn complements(n: Option<i32>) -> usize {
    let max = pg_skills_kernels::complements::MAX_PER_ANCHOR;
    match n {
        None => 0,
        Some(n) if (0..=max as i32).contains(&n) => n as usize,
        Some(n) => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("complements must be between 0 and {max}, got {n}"),
            Some("It is how many skills may be served after each served skill because it needs them (0: none)."),
        ),
    }
}

/// The limits of a request, validated.
pub fn limits(k: Option<i32>, token_budget: Option<i32>, min_score: Option<f64>) -> Limits {
    if let Some(k) = k.filter(|&k| k < 1) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("k must be at least 1, got {k}"),
            Some("Pass NULL for no limit on the number of results."),
        );
    }
    if let Some(b) = token_budget.filter(|&b| b < 0) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("token_budget must be at least 0, got {b}"),
            Some(
                "The budget is in prompt tokens (skills.skill.token_count); NULL means no budget.",
            ),
        );
    }
    if min_score.is_some_and(|m| m.is_nan()) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "min_score must be a number, got NaN",
            Some("Pass NULL for no threshold."),
        );
    }
    Limits {
        k: k.map(|k| k as usize),
        token_budget: token_budget.map(|b| b as u64),
        min_score,
    }
}
