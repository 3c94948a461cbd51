//! KeyOpt (the CompSkill method; docs/architecture.md, "KeyOpt"): per-skill corrections
//! learned from reported execution outcomes, read at query time with two inner products and a
//! clip per candidate.
//!
//! `S(q, s) = ρ·r(q, s) + β_s + clip((q − μ)ᵀΔk_s, −c, c) + α·E(q, s)`
//!
//! - r is the first-stage score, the inner product qᵀk0 of the query key and the skill key. ρ
//!   puts it in the units of the corrections (logits of "this arm beats that one"); it is fitted
//!   with β and is 1 when nothing was fitted.
//! - β_s, a per-skill offset; Δk_s, a per-skill residual key read against the query key centred
//!   on μ, the mean support query key; c, the clip.
//! - E(q, s), the similarity-weighted outcome reading of the past events nearest the query
//!   ([`memory`]); α its weight, κ its sharpness.
//!
//! The fit ([`fit`]) works from discordant pairs only, so with no discordant pair every
//! correction is exactly 0 and S ranks as r alone. Per skill the round stores `[k0; Δk; β]`
//! (2·512 + 1 = 1,025 floats) contiguously ([`pack`], [`read_row`]).

pub mod batch;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod fit;
pub mod lbfgs;
pub mod lift;
pub mod memory;
pub mod scenarios;
pub mod simulate;

use crate::vector::dot;

/// Floats per skill in a round: `[k0; Δk; β]` for `dim`-dimensional keys.
pub const fn packed_len(dim: usize) -> usize {
    2 * dim + 1
}

/// One arm of a recorded run: a skill that was served and whether the run passed with it.
/// In [`fit::fit`] `skill` is an index into the skill keys; elsewhere any stable identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arm {
    pub skill: i64,
    pub passed: bool,
}

/// The reading settings cross-validation chooses: whether the Δk term is used and its clip c,
/// the event weight α and the event sharpness κ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub use_dk: bool,
    pub clip: f32,
    pub alpha: f32,
    pub kappa: f32,
}

impl Settings {
    /// No correction beyond β (what a round with no discordant pairs uses; β is then 0 too).
    pub const NONE: Settings = Settings {
        use_dk: false,
        clip: 0.0,
        alpha: 0.0,
        kappa: 0.0,
    };

    /// Orders settings from the weakest correction to the strongest: without Δk before with,
    /// then smaller c, then smaller α, then larger κ (a narrower event reading).
    pub fn strength_order(&self, other: &Settings) -> std::cmp::Ordering {
        (self.use_dk as u8)
            .cmp(&(other.use_dk as u8))
            .then(self.effective_clip().total_cmp(&other.effective_clip()))
            .then(self.alpha.total_cmp(&other.alpha))
            .then(other.kappa.total_cmp(&self.kappa))
    }

    fn effective_clip(&self) -> f32 {
        if self.use_dk {
            self.clip
        } else {
            0.0
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "use_dk": self.use_dk,
            "clip": self.clip,
            "alpha": self.alpha,
            "kappa": self.kappa,
        })
    }
}

/// The parts of a KeyOpt score, so a caller can see why a skill ranked where it did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Parts {
    /// ρ·r: the first-stage score in correction units.
    pub relevance: f32,
    pub beta: f32,
    /// clip((q − μ)ᵀΔk, −c, c), 0 when the round does not use Δk.
    pub dk_term: f32,
    /// α·E(q, s).
    pub event_term: f32,
    /// ≤ 0: the part of the corrections given back because they would have placed the skill
    /// above a rival further ahead in relevance than the support showed it could overcome
    /// ([`lift`]).
    pub held_back: f32,
}

impl Parts {
    pub fn total(&self) -> f32 {
        self.relevance + self.beta + self.dk_term + self.event_term + self.held_back
    }
}

/// A query key and the same key centred on the round's μ (computed once per query).
#[derive(Clone, Debug)]
pub struct QueryKey {
    pub key: Vec<f32>,
    pub centered: Vec<f32>,
}

impl QueryKey {
    pub fn new(key: &[f32], mu: &[f32]) -> QueryKey {
        assert_eq!(key.len(), mu.len(), "query key and μ differ in length");
        QueryKey {
            key: key.to_vec(),
            centered: key.iter().zip(mu).map(|(q, m)| q - m).collect(),
        }
    }
}

/// `[k0; Δk; β]` of one skill.
pub fn pack(k0: &[f32], dk: &[f32], beta: f32) -> Vec<f32> {
    assert_eq!(k0.len(), dk.len(), "k0 and Δk differ in length");
    let mut row = Vec::with_capacity(packed_len(k0.len()));
    row.extend_from_slice(k0);
    row.extend_from_slice(dk);
    row.push(beta);
    row
}

/// Reads one packed row against a query: ρ·qᵀk0, β and the clipped Δk term (no event term).
#[inline]
pub fn read_row(row: &[f32], query: &QueryKey, rho: f32, settings: &Settings) -> Parts {
    let dim = query.key.len();
    debug_assert_eq!(row.len(), packed_len(dim));
    let relevance = rho * dot(&query.key, &row[..dim]);
    let dk_term = if settings.use_dk {
        dot(&query.centered, &row[dim..2 * dim]).clamp(-settings.clip, settings.clip)
    } else {
        0.0
    };
    Parts {
        relevance,
        beta: row[2 * dim],
        dk_term,
        event_term: 0.0,
        held_back: 0.0,
    }
}

/// Scores every row of `rows` (row-major packed rows) for one query, without the event term:
/// the full-scan path (`k => NULL`) and the CPU twin of the batched CUDA kernel.
pub fn scan(rows: &[f32], query: &QueryKey, rho: f32, settings: &Settings, out: &mut [f32]) {
    let len = packed_len(query.key.len());
    assert_eq!(rows.len(), len * out.len(), "scan: rows and outputs differ");
    for (row, score) in rows.chunks_exact(len).zip(out.iter_mut()) {
        *score = read_row(row, query, rho, settings).total();
    }
}

/// A fitted round: ρ, μ, the settings, and one packed row per skill (index order).
#[derive(Clone, Debug)]
pub struct Round {
    pub dim: usize,
    pub rho: f32,
    pub mu: Vec<f32>,
    pub settings: Settings,
    /// False for a neutral round (no discordant pair, or no setting beat r alone in
    /// cross-validation): it ranks by r alone and recalls nothing.
    pub corrections: bool,
    pub rows: Vec<f32>,
    /// Per skill, the largest ρ·r deficit it was seen to overcome ([`lift`]).
    pub lift_bound: Vec<f32>,
}

impl Round {
    /// Rows from skill keys and a fit's corrections (index i of each belongs to skill i).
    pub fn new(skill_keys: &[Vec<f32>], fitted: &fit::Fitted) -> Round {
        let dim = fitted.mu.len();
        let mut rows = Vec::with_capacity(skill_keys.len() * packed_len(dim));
        for (i, k0) in skill_keys.iter().enumerate() {
            rows.extend_from_slice(&pack(k0, &fitted.dk[i], fitted.beta[i]));
        }
        Round {
            dim,
            rho: fitted.rho,
            mu: fitted.mu.clone(),
            settings: fitted.settings,
            corrections: fitted.report.corrections,
            rows,
            lift_bound: fitted.lift_bound.clone(),
        }
    }

    pub fn row(&self, skill: usize) -> &[f32] {
        let len = packed_len(self.dim);
        &self.rows[skill * len..(skill + 1) * len]
    }

    pub fn query(&self, key: &[f32]) -> QueryKey {
        QueryKey::new(key, &self.mu)
    }

    pub fn read(&self, skill: usize, query: &QueryKey) -> Parts {
        read_row(self.row(skill), query, self.rho, &self.settings)
    }

    /// Reads `skills` for one query, adds `event_term(skill)` (α·E, or 0), and ranks them best
    /// first under the round's lift bounds (ties: the lower skill index).
    pub fn rank(
        &self,
        skills: &[usize],
        query: &QueryKey,
        event_term: impl Fn(usize) -> f32,
    ) -> Vec<(usize, Parts)> {
        self.rank_with(skills, query, None, event_term)
    }

    /// As [`Round::rank`], with the base relevance r(skill) of a round fitted on another r
    /// than qᵀk0 (`SupportEvent::relevance`); None: qᵀk0.
    pub fn rank_with(
        &self,
        skills: &[usize],
        query: &QueryKey,
        relevance: Option<&dyn Fn(usize) -> f32>,
        event_term: impl Fn(usize) -> f32,
    ) -> Vec<(usize, Parts)> {
        let mut skills = skills.to_vec();
        skills.sort_unstable();
        let mut parts: Vec<Parts> = skills
            .iter()
            .map(|&s| {
                let read = self.read(s, query);
                Parts {
                    relevance: relevance.map_or(read.relevance, |r| self.rho * r(s)),
                    event_term: event_term(s),
                    ..read
                }
            })
            .collect();
        let bounds: Vec<f32> = skills.iter().map(|&s| self.lift_bound[s]).collect();
        lift::bounded_order(&mut parts, &bounds)
            .into_iter()
            .map(|i| (skills[i], parts[i]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_clips_the_residual_term_and_adds_beta() {
        let dim = 4;
        let k0 = [0.5, 0.5, 0.5, 0.5];
        let dk = [4.0, 0.0, 0.0, 0.0];
        let row = pack(&k0, &dk, -0.25);
        assert_eq!(row.len(), packed_len(dim));
        let q = QueryKey::new(&[1.0, 0.0, 0.0, 0.0], &[0.5, 0.0, 0.0, 0.0]);
        let settings = Settings {
            use_dk: true,
            clip: 0.3,
            alpha: 0.0,
            kappa: 0.0,
        };
        let parts = read_row(&row, &q, 2.0, &settings);
        assert!((parts.relevance - 1.0).abs() < 1e-6);
        assert_eq!(parts.beta, -0.25);
        // (q − μ)ᵀΔk = 0.5 * 4 = 2, clipped to 0.3.
        assert!((parts.dk_term - 0.3).abs() < 1e-6);
        assert!((parts.total() - 1.05).abs() < 1e-6);
        let off = read_row(&row, &q, 2.0, &Settings::NONE);
        assert_eq!(off.dk_term, 0.0);
        let negative = QueryKey::new(&[0.0, 1.0, 0.0, 0.0], &[0.5, 0.0, 0.0, 0.0]);
        assert!((read_row(&row, &negative, 1.0, &settings).dk_term + 0.3).abs() < 1e-6);
    }

    #[test]
    fn scan_agrees_with_reading_each_row() {
        let mut rng = crate::rng::SplitMix64(7);
        let dim = 16;
        let n = 37;
        let rows: Vec<f32> = (0..n * packed_len(dim))
            .map(|_| rng.unit() as f32 - 0.5)
            .collect();
        let key: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 - 0.5).collect();
        let mu: Vec<f32> = (0..dim).map(|_| rng.unit() as f32 * 0.1).collect();
        let q = QueryKey::new(&key, &mu);
        let settings = Settings {
            use_dk: true,
            clip: 0.2,
            alpha: 0.0,
            kappa: 0.0,
        };
        let mut out = vec![0.0; n];
        scan(&rows, &q, 1.5, &settings, &mut out);
        for (i, s) in out.iter().enumerate() {
            let row = &rows[i * packed_len(dim)..(i + 1) * packed_len(dim)];
            assert_eq!(*s, read_row(row, &q, 1.5, &settings).total());
        }
    }

    #[test]
    fn weaker_settings_sort_first() {
        let s = |use_dk, clip, alpha, kappa| Settings {
            use_dk,
            clip,
            alpha,
            kappa,
        };
        let mut grid = [
            s(true, 0.5, 0.0, 0.0),
            s(false, 0.0, 1.0, 10.0),
            s(true, 0.25, 1.0, 10.0),
            s(false, 0.0, 1.0, 20.0),
            s(false, 0.0, 0.0, 0.0),
        ];
        grid.sort_by(|a, b| a.strength_order(b));
        assert_eq!(grid[0], s(false, 0.0, 0.0, 0.0));
        assert_eq!(grid[1], s(false, 0.0, 1.0, 20.0));
        assert_eq!(grid[2], s(false, 0.0, 1.0, 10.0));
        assert_eq!(grid[3], s(true, 0.25, 1.0, 10.0));
        assert_eq!(grid[4], s(true, 0.5, 0.0, 0.0));
    }
}
