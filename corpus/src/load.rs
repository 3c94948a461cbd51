//! Streams prepared skills into Postgres: `COPY` into a temporary staging table, then one call
//! to `skills.apply_staging()` that upserts everything, all in one transaction. A failure
//! anywhere rolls the whole load back, so a load never half-writes.

use std::io::Write;

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

/// Escapes a value for COPY's text format.
fn copy_escape(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
}

fn copy_line(ord: usize, p: &Prepared) -> String {
    let s = &p.skill;
    let mut line = String::with_capacity(s.byte_len() + 256);
    line.push_str(&ord.to_string());
    for field in [&p.content_hash, &s.name, &s.description, &s.instructions] {
        line.push('\t');
        copy_escape(&mut line, field);
    }
    line.push('\t');
    match s.category {
        Some(c) => line.push_str(c.as_str()),
        None => line.push_str("\\N"),
    }
    line.push('\t');
    copy_escape(
        &mut line,
        &serde_json::Value::Array(s.provenance.clone()).to_string(),
    );
    line.push('\n');
    line
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
    // The new rows' texts are compressed with LZ4 where the server has it: every step of the
    // upsert reads them (the row trigger's functions and the bm25 index each decompress them),
    // and pglz's decompression was 7 % of the loading backend's time. The staged texts are
    // stored out of line uncompressed (below): the COPY, the load's one step on a single core,
    // then does not compress them (a third of its time), and the insert compresses each new
    // row's once, on the core the threads computing ahead share with it.
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
         ) ON COMMIT DROP;
         ALTER TABLE skill_staging ALTER COLUMN instructions SET STORAGE EXTERNAL,
                                   ALTER COLUMN description SET STORAGE EXTERNAL",
    )?;
    {
        let mut writer = tx.copy_in(
            "COPY skill_staging (ord, content_hash, name, description, instructions, category, provenance) FROM STDIN",
        )?;
        for (i, p) in skills.iter().enumerate() {
            writer.write_all(copy_line(i, p).as_bytes())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skill::Skill;

    #[test]
    fn copy_lines_escape_control_characters() {
        let p = Prepared {
            content_hash: "h".into(),
            skill: Skill {
                name: "n\\x".into(),
                description: "a\tb".into(),
                instructions: "l1\nl2\r".into(),
                category: None,
                license_field: None,
                provenance: vec![serde_json::json!({"location": "x\ny"})],
            },
        };
        assert_eq!(
            copy_line(7, &p),
            "7\th\tn\\\\x\ta\\tb\tl1\\nl2\\r\t\\N\t[{\"location\":\"x\\\\ny\"}]\n"
        );
    }
}
