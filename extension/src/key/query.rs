//! `skills.keyquery` (sql/keys.sql): a query key with the breadth of the skeys scan that serves
//! it. The breadth travels inside the query, so every node that scans for it reads as many lists,
//! Citus shards included (a SET in the coordinator's session does not reach the workers').

use pgrx::pg_sys;

/// The parts of a query: the key as a `skills.key` datum, and the breadth it carries (None: the
/// scanning server's setting).
pub struct KeyQuery {
    pub key: pg_sys::Datum,
    pub probes: Option<i32>,
    pub max_probes: Option<i32>,
}

impl KeyQuery {
    /// A plain `skills.key` query: the server's breadth.
    pub fn plain(key: pg_sys::Datum) -> KeyQuery {
        KeyQuery {
            key,
            probes: None,
            max_probes: None,
        }
    }

    /// None when the row's key is NULL (every distance is then NULL).
    ///
    /// SAFETY: `datum` is a non-null `skills.keyquery` datum valid for the call: a row of
    /// (skills.key, integer, integer), the layout sql/keys.sql declares.
    pub unsafe fn from_datum(datum: pg_sys::Datum) -> Option<KeyQuery> {
        let row = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as pg_sys::HeapTupleHeader;
        let field = |n: i16| {
            let mut null = false;
            let value = pg_sys::GetAttributeByNum(row, n, &mut null);
            (!null).then_some(value)
        };
        // An int4 datum holds the value in its low 32 bits.
        let int = |n: i16| field(n).map(|d| d.value() as i32);
        Some(KeyQuery {
            key: field(1)?,
            probes: int(2),
            max_probes: int(3),
        })
    }
}

/// SQL for the query key of the `real[]` parameter `param` (e.g. "$1") carrying this session's
/// search breadth, for the searches' own key scans.
///
/// Where the searches keep their plans (`spi::select_kept`), a scalar subquery: the key is then
/// built once per statement (an InitPlan) in a generic plan too, where the bare expression is
/// evaluated again for every row it returns (26 µs a row, measured). Under Citus, which plans
/// every call and would not push a subquery in ORDER BY down to the shards, the bare expression.
pub fn with_session_breadth(param: &str) -> String {
    // Integers within the settings' bounds: nothing a user types reaches the SQL text.
    let expression = format!(
        "skills.key_query(skills.key({param}), {}, {})",
        crate::guc::KEY_PROBES.get(),
        crate::guc::KEY_MAX_PROBES.get()
    );
    if crate::spi::plans_may_be_kept() {
        format!("(SELECT {expression})")
    } else {
        expression
    }
}
