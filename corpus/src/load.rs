//! Streams prepared skills into Postgres: `COPY` into a temporary staging table, then one call
//! to `skills.apply_staging()` that upserts everything, all in one transaction. A failure
//! anywhere rolls the whole load back, so a load never half-writes.

use bytes::{BufMut, BytesMut};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{to_sql_checked, IsNull, Kind, ToSql, Type};
use postgres::Client;

use crate::conninfo;
use crate::dedup::Prepared;
use crate::risk::Level;

/// What the database did with the staged skills.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ApplyCounts {
    /// Content not seen before: a new skill.
    pub new: i64,
    /// A known location whose content changed: the skill got a new version.
    pub updated: i64,
    /// Known content from a new place: provenance added to the existing skill.
    pub merged: i64,
    /// Known content from known places: nothing changed.
    pub unchanged: i64,
    /// Skills whose files left the loaded trees (`--tree`): retired, not served.
    pub retired: i64,
    /// Retired skills found again: served again.
    pub returned: i64,
    /// The loaded skills (distinct content) the server stores at each of [`Level::FLAGGED`].
    pub flagged: [i64; 3],
}

/// Connects as `dsn` says, with TLS as its `sslmode` asks (libpq's default `prefer` when it
/// says nothing). The error is a whole sentence for the user; it names the server by the
/// redacted connection string, never with its password.
pub fn connect(dsn: &str) -> Result<Client, String> {
    let shown = conninfo::redact(dsn);
    let mut info = conninfo::ConnInfo::parse(dsn, |k| std::env::var(k).ok())
        .map_err(|e| format!("{e} (in {shown:?})"))?;
    let connector = info.tls.connector()?;
    conninfo::add_server_options(&mut info.config, conninfo::FIXED_SEARCH_PATH_OPTION);
    postgres::Config::from(info.config)
        .connect(connector)
        .map_err(|e| {
            let text = describe(&e);
            let hint = conninfo::tls_hint(&text, &info.tls)
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            format!("cannot connect to {shown:?}: {text}{hint}")
        })
}

/// The size bound the server enforces (`pg_skills.max_document_size`), in bytes.
pub fn server_max_document_bytes(client: &mut Client) -> Result<u64, postgres::Error> {
    let row = client.query_one("SELECT skills.max_document_bytes()", &[])?;
    Ok(row.get::<_, i64>(0) as u64)
}

/// A staged value binary COPY takes as its bytes: an enum's label (or NULL), or JSONB text
/// (after JSONB's version byte). The text columns and the order go through the driver's own
/// encodings.
#[derive(Debug)]
enum Staged<'a> {
    Label(Option<&'a str>),
    Jsonb(&'a str),
}

impl ToSql for Staged<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Staged::Label(None) => return Ok(IsNull::Yes),
            Staged::Label(Some(label)) => out.put_slice(label.as_bytes()),
            Staged::Jsonb(text) => {
                out.put_u8(1);
                out.put_slice(text.as_bytes());
            }
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Enum(_)) || *ty == Type::JSONB
    }

    to_sql_checked!();
}

/// Writes one staged row.
fn stage_row(
    writer: &mut BinaryCopyInWriter<'_>,
    ord: usize,
    p: &Prepared,
) -> Result<(), postgres::Error> {
    let s = &p.skill;
    // The same JSON array as `Value::Array(..).to_string()`, without copying the values first.
    let provenance = serde_json::to_string(&s.provenance).expect("JSON values serialize");
    writer.write(&[
        &(ord as i64),
        &p.content_hash,
        &s.name,
        &s.description,
        &s.instructions,
        &Staged::Label(s.category.map(|c| c.as_str())),
        &Staged::Jsonb(&provenance),
    ])
}

/// Loads the skills in one transaction. `progress` is called after each staged skill.
pub type LoadError = Box<dyn std::error::Error + Send + Sync>;

/// A readable account of a load error: the server's message, SQLSTATE, detail and hint; or the
/// error and its causes (a TLS failure says what failed only in its cause).
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    match e
        .downcast_ref::<postgres::Error>()
        .and_then(postgres::Error::as_db_error)
    {
        Some(db) => {
            let mut s = format!(
                "{}: {} (SQLSTATE {})",
                db.severity(),
                db.message(),
                db.code().code()
            );
            if let Some(d) = db.detail() {
                s.push_str(&format!("; detail: {d}"));
            }
            if let Some(h) = db.hint() {
                s.push_str(&format!("; hint: {h}"));
            }
            s
        }
        None => conninfo::error_chain(e),
    }
}

/// Loads `skills`; `complete_sources` are the location prefixes of trees read whole (their
/// skills that were not read again are retired, see `skills.sync_source`).
pub fn load(
    client: &mut Client,
    skills: &[Prepared],
    complete_sources: &[String],
    mut progress: impl FnMut(usize),
) -> Result<ApplyCounts, LoadError> {
    let mut tx = client.transaction()?;
    // LZ4 where the server has it: the staged texts are compressed once by the COPY and read
    // back by every step of the upsert (the row trigger's functions and the bm25 index each
    // decompress them), and the new rows keep them as they are. pglz's decompression was 7 %
    // of the loading backend's time. (Staging them uncompressed spares the COPY the compression
    // but the insert then does it: no faster with the binary COPY, and 2.5 times the temporary
    // bytes; benches/RESULTS.md.)
    tx.batch_execute(
        "SELECT pg_catalog.set_config('default_toast_compression', 'lz4', true) \
         FROM pg_catalog.pg_settings \
         WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)",
    )?;
    tx.batch_execute(
        "CREATE TEMP TABLE skill_staging (
             ord bigint NOT NULL,
             content_hash text PRIMARY KEY,
             name text NOT NULL,
             description text NOT NULL,
             instructions text NOT NULL,
             category skills.category,
             provenance jsonb NOT NULL
         ) ON COMMIT DROP",
    )?;
    {
        // Binary COPY: the server reads each value as it is, where the text format has it
        // search every text for escapes (the COPY is the load's one step on a single core).
        let category: u32 = tx
            .query_one(
                "SELECT 'skills.category'::pg_catalog.regtype::pg_catalog.oid",
                &[],
            )?
            .get(0);
        let types = [
            Type::INT8,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
            Type::new(
                "category".into(),
                category,
                Kind::Enum(Vec::new()),
                "skills".into(),
            ),
            Type::JSONB,
        ];
        let sink = tx.copy_in(
            "COPY skill_staging (ord, content_hash, name, description, instructions, category, provenance) \
             FROM STDIN (FORMAT binary)",
        )?;
        let mut writer = BinaryCopyInWriter::new(sink, &types);
        for (i, p) in skills.iter().enumerate() {
            stage_row(&mut writer, i, p)?;
            progress(i + 1);
        }
        writer.finish()?;
    }
    let row = tx.query_one(
        "SELECT new_skills, updated, merged, unchanged FROM skills.apply_staging()",
        &[],
    )?;
    let mut counts = ApplyCounts {
        new: row.get(0),
        updated: row.get(1),
        merged: row.get(2),
        unchanged: row.get(3),
        ..ApplyCounts::default()
    };
    if !complete_sources.is_empty() {
        let row = tx.query_one(
            "SELECT retired, returned FROM skills.sync_source($1::text[])",
            &[&complete_sources],
        )?;
        counts.retired = row.get(0);
        counts.returned = row.get(1);
    }
    // The risk levels as the server's trigger stored them (the rows the load wrote, and those it
    // found unchanged).
    let hashes: Vec<&str> = skills.iter().map(|p| p.content_hash.as_str()).collect();
    for row in tx.query(
        "SELECT s.risk::text, count(DISTINCT s.content_hash) FROM skills.skill AS s
         WHERE s.content_hash = ANY($1::text[]) AND s.risk >= 'medium' GROUP BY 1",
        &[&hashes],
    )? {
        let level: String = row.get(0);
        if let Some(i) = Level::FLAGGED.iter().position(|l| l.as_str() == level) {
            counts.flagged[i] = row.get(1);
        }
    }
    tx.commit()?;
    Ok(counts)
}
