//! What a search serves from a ranking: the FastAdapt constraints of `skills.search`.
//!
//! Rows are taken in rank order. A row scoring below `min_score` is never served; a row whose
//! tokens do not fit in what is left of the budget is skipped and the next one is tried (a
//! shorter skill further down may still fit); serving stops after `k` rows. Absent limits
//! constrain nothing.

/// The rankings `skills.search(..., method => ...)` offers. The one list of them: the extension
/// parses and validates with it, `skills.search_methods()` publishes it (the MCP server reads it
/// from there), and the search evaluation runs each of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SearchMethod {
    Bm25,
    Semantic,
    Hybrid,
    Graph,
    SkillTrace,
    KeyOpt,
}

impl SearchMethod {
    /// Every method, in the order the documentation and the evaluation list them.
    pub const ALL: [SearchMethod; 6] = [
        SearchMethod::Bm25,
        SearchMethod::Semantic,
        SearchMethod::Hybrid,
        SearchMethod::Graph,
        SearchMethod::SkillTrace,
        SearchMethod::KeyOpt,
    ];

    /// The method's name in SQL and MCP.
    pub const fn name(self) -> &'static str {
        match self {
            SearchMethod::Bm25 => "bm25",
            SearchMethod::Semantic => "semantic",
            SearchMethod::Hybrid => "hybrid",
            SearchMethod::Graph => "graph",
            SearchMethod::SkillTrace => "skilltrace",
            SearchMethod::KeyOpt => "keyopt",
        }
    }

    /// The method named `name` (case and surrounding spaces ignored).
    pub fn parse(name: &str) -> Option<SearchMethod> {
        let name = name.trim().to_lowercase();
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Every method's name, in [`SearchMethod::ALL`]'s order.
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|m| m.name()).collect()
    }
}

/// The request's limits; `None` means no constraint.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub k: Option<usize>,
    pub token_budget: Option<u64>,
    pub min_score: Option<f64>,
}

/// Positions in `ranked` (score, tokens; best first) that are served, in rank order.
pub fn serve(ranked: &[(f64, u64)], limits: Limits) -> Vec<usize> {
    let mut served = Vec::new();
    let mut left = limits.token_budget;
    for (position, &(score, tokens)) in ranked.iter().enumerate() {
        if limits.k.is_some_and(|k| served.len() >= k) {
            break;
        }
        // NaN never passes a threshold.
        if limits.min_score.is_some_and(|m| !(score >= m)) {
            continue;
        }
        if let Some(budget) = left {
            if tokens > budget {
                continue;
            }
            left = Some(budget - tokens);
        }
        served.push(position);
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANKED: [(f64, u64); 5] = [(9.0, 400), (8.0, 900), (7.0, 300), (6.0, 200), (5.0, 50)];

    #[test]
    fn no_limits_serve_everything_in_order() {
        assert_eq!(serve(&RANKED, Limits::default()), vec![0, 1, 2, 3, 4]);
        assert!(serve(&[], Limits::default()).is_empty());
    }

    #[test]
    fn budget_skips_what_does_not_fit_and_tries_the_next() {
        let limits = Limits {
            token_budget: Some(1000),
            ..Limits::default()
        };
        // 400, then 900 does not fit (600 left), 300 fits, 200 fits (100 left), 50 fits.
        assert_eq!(serve(&RANKED, limits), vec![0, 2, 3, 4]);
        let total: u64 = serve(&RANKED, limits).iter().map(|&i| RANKED[i].1).sum();
        assert!(total <= 1000);
        // A budget nothing fits in serves nothing; a zero-token skill always fits.
        let tiny = Limits {
            token_budget: Some(10),
            ..Limits::default()
        };
        assert!(serve(&RANKED, tiny).is_empty());
        assert_eq!(
            serve(
                &[(1.0, 0)],
                Limits {
                    token_budget: Some(0),
                    ..tiny
                }
            ),
            vec![0]
        );
    }

    #[test]
    fn k_and_min_score_combine_with_the_budget() {
        let limits = Limits {
            k: Some(2),
            token_budget: Some(1000),
            min_score: None,
        };
        assert_eq!(serve(&RANKED, limits), vec![0, 2]);
        let limits = Limits {
            k: Some(10),
            token_budget: None,
            min_score: Some(7.0),
        };
        assert_eq!(serve(&RANKED, limits), vec![0, 1, 2]);
        let nan = [(f64::NAN, 1), (1.0, 1)];
        assert_eq!(
            serve(
                &nan,
                Limits {
                    min_score: Some(0.0),
                    ..Limits::default()
                }
            ),
            vec![1]
        );
    }

    #[test]
    fn every_method_parses_from_its_name_and_nothing_else_does() {
        for m in SearchMethod::ALL {
            assert_eq!(SearchMethod::parse(m.name()), Some(m));
            assert_eq!(
                SearchMethod::parse(&format!(" {} ", m.name().to_uppercase())),
                Some(m)
            );
        }
        assert_eq!(SearchMethod::names().len(), SearchMethod::ALL.len());
        for other in ["", "fast", "bm", "keyopt2", "skill trace"] {
            assert_eq!(SearchMethod::parse(other), None, "{other:?}");
        }
    }
}
