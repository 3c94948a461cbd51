//! The nearest skills to a query key straight from the skeys index on skills.skill_key, for the
//! `semantic` and `keyopt` searches: no statement, no executor, no key conversion per call.
//!
//! The answer is the SQL path's (`search::rank::semantic`: skill_key joined to skill, ordered by
//! `k0 <#> q` with the session's breadth, ties at the cut closed and ordered by id): the same
//! index entries in the same order (`index::scan::Nearest`), each key row read through the table
//! access method under the statement's snapshot, its skill found by id through skills.skill's
//! primary key (the join: a key without a visible skill, or of a category not asked for, is
//! skipped), and entries read until a row below the cut's score proves that no tied row is
//! missing, checked after as many rows as the statement reads. Scores are the index's distances,
//! which are the operator's (`key::operators`).
//!
//! The executor must read the rows where a user's privileges or row-level security decide what
//! they see, and where Citus distributes the tables: [`direct_index`] is None there, and the
//! searches run their statement.

use pgrx::pg_sys;

use pgrx::PgSqlErrorCode;

use pg_skills_kernels::keyindex::Metric;

use crate::errors::raise;
use crate::index_rows::{column, extension_table, value, RowsById, RowsByTid, SkillsById};
use crate::key::datatype::Key;

/// A skill the index found: its id, score q·k0, and its content hash where asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyHit {
    pub id: i64,
    pub score: f64,
    pub content_hash: Option<String>,
}

/// Whether the current user reads every row of `table` with a plain SELECT: the privilege on the
/// whole table, and no row-level security applying.
fn reads_whole_table(table: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup by OID on the backend's thread; no ERROR of its own.
    let privileged = unsafe {
        pg_sys::pg_class_aclcheck(
            table,
            pg_sys::GetUserId(),
            pg_sys::ACL_SELECT as pg_sys::AclMode,
        ) == pg_sys::AclResult::ACLCHECK_OK
    };
    privileged && crate::bm25::top_k::direct_allowed(table)
}

/// The skeys index the searches read directly: the first (by OID) valid, ready inner-product
/// index on skills.skill_key's k0 alone, without a predicate. None where there is none or the
/// executor must read the rows (see the module).
pub fn direct_index() -> Option<pg_sys::Oid> {
    let (keys, skills) = (extension_table(c"skill_key"), extension_table(c"skill"));
    if keys == pg_sys::InvalidOid
        || skills == pg_sys::InvalidOid
        || crate::spi::citus_installed()
        || !reads_whole_table(keys)
        || !reads_whole_table(skills)
    {
        return None;
    }
    crate::am::valid_indexes_of(keys, "skeys")
        .into_iter()
        .find(|&oid| serves_k0_order(keys, oid))
}

/// Whether index `oid` of skills.skill_key orders all its rows by `k0 <#> q`.
fn serves_k0_order(keys: pg_sys::Oid, oid: pg_sys::Oid) -> bool {
    // SAFETY: the index is opened with AccessShareLock and closed before returning; its pg_index
    // row and operator class are the relation cache's; the predicate and expression lists are
    // palloc'd copies in the current memory context.
    unsafe {
        let index = pg_sys::index_open(oid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let form = (*index).rd_index;
        let k0 = pg_sys::get_attnum(keys, c"k0".as_ptr());
        let serves = (*form).indnatts == 1
            && (*form).indkey.values.as_slice(1)[0] == k0
            && pg_sys::RelationGetIndexExpressions(index).is_null()
            && pg_sys::RelationGetIndexPredicate(index).is_null()
            && super::index::metric_of_index(index)
                == pg_skills_kernels::keyindex::Metric::InnerProduct;
        pg_sys::index_close(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        serves
    }
}

/// The `depth` best skills by q·k0 for `key` through `index` (see [`direct_index`]), best first,
/// ties by id; `categories` (labels) restricts them; `content_hash` reads each one's content hash.
pub fn search(
    index: pg_sys::Oid,
    key: &[f32],
    depth: usize,
    categories: Option<&[String]>,
    content_hash: bool,
) -> Vec<KeyHit> {
    if depth == 0 {
        return Vec::new();
    }
    // The conversion `skills.key(real[])` makes, with its checks.
    let key = crate::key::datatype::checked_key(key.iter().map(|&x| f64::from(x)));
    let probes = crate::guc::KEY_PROBES.get().max(1) as usize;
    let max_probes = crate::guc::KEY_MAX_PROBES.get().max(0) as usize;
    let mut hits: Vec<KeyHit> = Vec::new();
    let mut check_at = depth + 1;
    // SAFETY: the index and both tables are opened with AccessShareLock, as a query reading them
    // locks them, and closed at the end of this block after the readers made for them are
    // finished; the scan reads the index while it is open.
    unsafe {
        let rel = pg_sys::index_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let keys_heap = pg_sys::table_open(
            pg_sys::IndexGetRelation(index, false),
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        );
        let skills_heap = pg_sys::table_open(
            extension_table(c"skill"),
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        );
        crate::am::count_index_scan(rel);
        let mut key_rows = RowsByTid::new(keys_heap, c"skill_id", None);
        let mut skills = SkillsById::new(skills_heap, categories, content_hash);
        let mut scan = super::index::scan::Nearest::start(rel, key, probes, max_probes);
        while let Some(entry) = scan.next(rel) {
            crate::am::count_index_tuples(rel, 1);
            let Some(id) = key_rows.visible_id(entry.tid) else {
                continue;
            };
            let Some(skill) = skills.find(id) else {
                continue;
            };
            let hit = KeyHit {
                id,
                score: -entry.distance,
                content_hash: skill.content_hash,
            };
            hits.push(hit);
            // Closed when the lowest row read scores below the depth-th: rows of later entries
            // score no higher within a batch of lists. Checked after as many rows as the SQL
            // path's `closed_top` reads (depth + 1, then 4× more each time), so that where a
            // later batch of lists holds nearer rows (relaxed order) both keep the same ones;
            // sorted only then, so that many tied keys cost n·log n, not an insert per row.
            if hits.len() == check_at {
                hits.sort_by(in_order);
                if hits[check_at - 1].score < hits[depth - 1].score {
                    break;
                }
                check_at = check_at.saturating_mul(4);
            }
        }
        skills.finish();
        key_rows.finish();
        pg_sys::table_close(skills_heap, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::table_close(keys_heap, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::index_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    }
    hits.sort_by(in_order);
    hits.truncate(depth);
    hits
}

/// The order of the hits: score descending, then id.
fn in_order(a: &KeyHit, b: &KeyHit) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then(a.id.cmp(&b.id))
}

/// q·k0 of exactly the skills `ids` that have a key (any order), for each of `keys`: each key
/// row read once, by id through skills.skill_key's primary key, what the statement of
/// `search::rank::semantic_of` answers. None where the executor must read skills.skill_key
/// (see the module).
pub fn scores_of(keys: &[&[f32]], ids: &[i64]) -> Option<Vec<Vec<(i64, f64)>>> {
    let rows = keyed_rows(keys, ids, false)?;
    Some(
        rows.into_iter()
            .map(|hits| hits.into_iter().map(|h| (h.id, h.score)).collect())
            .collect(),
    )
}

/// KeyOpt's candidates among `ids`: the skills the statement sees that have a key, with q·k0 and
/// their content hash, best first, ties by id (skill_key joined to skill, as the statement of
/// `keyopt::rank::ranked` for given skills). None where the executor must read the tables.
pub fn candidates_of(key: &[f32], ids: &[i64]) -> Option<Vec<KeyHit>> {
    let mut hits = keyed_rows(&[key], ids, true)?.swap_remove(0);
    hits.sort_by(in_order);
    Some(hits)
}

/// For each of `keys`, the skills of `ids` (each once) that have a key, with q·k0; with
/// `with_skill`, only those whose skill the statement sees, with its content hash.
fn keyed_rows(keys: &[&[f32]], ids: &[i64], with_skill: bool) -> Option<Vec<Vec<KeyHit>>> {
    let (table, skill_table) = (extension_table(c"skill_key"), extension_table(c"skill"));
    if table == pg_sys::InvalidOid
        || crate::spi::citus_installed()
        || !reads_whole_table(table)
        || (with_skill && (skill_table == pg_sys::InvalidOid || !reads_whole_table(skill_table)))
    {
        return None;
    }
    let queries: Vec<Vec<half::f16>> = keys
        .iter()
        .map(|k| crate::key::datatype::checked_key(k.iter().map(|&x| f64::from(x))))
        .collect();
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = vec![Vec::new(); keys.len()];
    // SAFETY: the tables are opened with AccessShareLock and closed after the lookups made for
    // them are finished; each key datum is read while its slot holds the row.
    unsafe {
        let heap = pg_sys::table_open(table, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let k0 = column(heap, c"k0", pg_sys::InvalidOid);
        let mut rows = RowsById::new(heap);
        let skills_heap = with_skill
            .then(|| pg_sys::table_open(skill_table, pg_sys::AccessShareLock as pg_sys::LOCKMODE));
        let mut skills = skills_heap.map(|h| SkillsById::new(h, None, true));
        let mut scratch = Vec::new();
        for (n, &id) in ids.iter().enumerate() {
            if n % 64 == 63 {
                pgrx::check_for_interrupts!();
            }
            let content_hash = match skills.as_mut() {
                None => None,
                Some(skills) => match skills.find(id) {
                    Some(skill) => skill.content_hash,
                    None => continue,
                },
            };
            rows.find(id, |slot| {
                let Some(datum) = value(slot, k0) else {
                    return;
                };
                let key = Key::from_datum(datum);
                let values = key.values(&mut scratch);
                for (query, hits) in queries.iter().zip(out.iter_mut()) {
                    if values.len() != query.len() {
                        raise(
                            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                            format!("keys of {} and {} dimensions", values.len(), query.len()),
                            None,
                        );
                    }
                    hits.push(KeyHit {
                        id,
                        // The operator's arguments in the statement's order: k0 <#> q.
                        score: -Metric::InnerProduct.distance(values, query),
                        content_hash: content_hash.clone(),
                    });
                }
            });
        }
        rows.finish();
        if let Some(skills) = skills {
            skills.finish();
        }
        if let Some(h) = skills_heap {
            pg_sys::table_close(h, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
        pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
    }
    Some(out)
}

/// The `ctid` of each skill of `ids` the statement sees (as `SELECT id, ctid FROM skills.skill
/// WHERE id = ANY (ids)`), found through the primary key. None where the executor must read
/// skills.skill (see the module).
pub fn skill_tids(ids: &[i64]) -> Option<Vec<(i64, pg_skills_kernels::layout::Tid)>> {
    let table = extension_table(c"skill");
    if table == pg_sys::InvalidOid || crate::spi::citus_installed() || !reads_whole_table(table) {
        return None;
    }
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::with_capacity(ids.len());
    // SAFETY: skills.skill is opened with AccessShareLock and closed after the lookup made for
    // it is finished; the TID is read while the slot holds the row.
    unsafe {
        let heap = pg_sys::table_open(table, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let mut rows = RowsById::new(heap);
        for (n, &id) in ids.iter().enumerate() {
            if n % 64 == 63 {
                pgrx::check_for_interrupts!();
            }
            if let Some(tid) = rows.find(id, |slot| crate::am::tid_of(&(*slot).tts_tid)) {
                out.push((id, tid));
            }
        }
        rows.finish();
        pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
    }
    Some(out)
}
