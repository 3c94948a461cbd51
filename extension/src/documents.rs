//! Functions over one document, shared by the trigger on `skills.skill` and by the loader
//! (which runs the same Rust code client-side, so both compute identical hashes and categories).

use pgrx::heap_tuple::PgHeapTuple;
use pgrx::prelude::*;
use pgrx::IntoDatum;

use pg_skills_corpus::{category, skill};
use pg_skills_kernels::text::{Analyzer, AnalyzerConfig};

use crate::guc;

/// ERROR 54000 for texts larger than any document can be (`pg_skills.max_document_size` at
/// its most): these functions are callable with any text, and hashing, classifying or analysing
/// a gigabyte would hold the backend (and its memory) for many seconds.
pub(crate) fn check_text_size(bytes: usize) {
    let limit = guc::MAX_DOCUMENT_SIZE_LIMIT_KB as usize * 1024;
    if bytes > limit {
        crate::errors::raise(
            pgrx::PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("the text is {bytes} bytes, over the {limit} bytes a skill document can have"),
            Some("These functions take skill documents (pg_skills.max_document_size is at most 100MB)."),
        );
    }
}

/// sha256 (hex) of the normalised content; the identity of a skill.
#[pg_extern(immutable, parallel_safe, strict)]
fn content_hash(name: &str, description: &str, instructions: &str) -> String {
    check_text_size(name.len() + description.len() + instructions.len());
    skill::content_hash(name, description, instructions)
}

/// What the row trigger on `skills.skill` derives from a document, in one call: the texts are
/// read (decompressed, copied) once, and a load's values computed ahead are looked up once.
/// Always the content hash. Unless it equals `unchanged_hash` (an update that keeps the content)
/// or the document is over `limit_bytes` (which the trigger then refuses), also the prompt token
/// count and the risk scan, and the category when `classify`; the columns not computed are NULL.
/// Each value is what `skills.content_hash`, `skills.token_count`, `skills.risk_scan` and
/// `skills.classify` return for the same text.
#[pg_extern(immutable, parallel_safe, strict)]
fn skill_derived_columns(
    name: &str,
    description: &str,
    instructions: &str,
    unchanged_hash: &str,
    classify: bool,
    limit_bytes: i64,
) -> pgrx::composite_type!('static, "skill_derived_columns") {
    let bytes = name.len() + description.len() + instructions.len();
    check_text_size(bytes);
    let prepared = crate::prepared_writes::derived(name, description, instructions);
    let content_hash = match &prepared {
        Some(p) => p.content_hash.clone(),
        None => skill::content_hash(name, description, instructions),
    };
    let mut row = PgHeapTuple::new_composite_type("skills.skill_derived_columns")
        .expect("skills.skill_derived_columns is the extension's own type");
    let computes = content_hash != unchanged_hash && bytes as i64 <= limit_bytes;
    set_column(&mut row, "content_hash", content_hash);
    if computes {
        let (token_count, risk, category) = match prepared {
            Some(p) => (p.token_count, p.risk, p.category),
            None => {
                let category = if classify {
                    category::classify(name, description, instructions).as_str()
                } else {
                    ""
                };
                (
                    counted_tokens(name, description, instructions),
                    crate::trust::scanned_risk(name, description, instructions),
                    category,
                )
            }
        };
        set_column(&mut row, "token_count", token_count);
        set_column(&mut row, "risk", pgrx::JsonB(risk));
        if classify {
            set_column(&mut row, "category", category);
        }
    }
    row
}

/// Sets a column of a row of the extension's own composite type (its names and types are
/// fixed by the extension's script, so a failure is a bug).
fn set_column<T: IntoDatum>(
    row: &mut PgHeapTuple<'static, pgrx::AllocatedByRust>,
    column: &str,
    value: T,
) {
    row.set_by_name(column, value)
        .unwrap_or_else(|e| panic!("skills.skill_derived_columns.{column}: {e}"));
}

/// LLM prompt tokens (o200k_base) of the document as a prompt receives it.
#[pg_extern(immutable, parallel_safe, strict)]
fn token_count(name: &str, description: &str, instructions: &str) -> i32 {
    check_text_size(name.len() + description.len() + instructions.len());
    crate::prepared_writes::token_count(name, description, instructions)
        .unwrap_or_else(|| counted_tokens(name, description, instructions))
}

/// The prompt token count of a document computed here (cancellable), as `skills.token_count`
/// returns it.
fn counted_tokens(name: &str, description: &str, instructions: &str) -> i32 {
    let n = skill::token_count_with(name, description, instructions, &mut || {
        pgrx::pg_sys::check_for_interrupts!();
    });
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// LLM prompt tokens (o200k_base) of any text, e.g. a block from `skills.render_context`.
#[pg_extern(immutable, parallel_safe, strict)]
fn prompt_tokens(text: &str) -> i32 {
    check_text_size(text.len());
    let n = skill::prompt_tokens_with(text, &mut || {
        pgrx::pg_sys::check_for_interrupts!();
    });
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The classifier's label; `skills.classify` casts it to `skills.category`.
#[pg_extern(immutable, parallel_safe, strict)]
fn classify_label(name: &str, description: &str, instructions: &str) -> &'static str {
    check_text_size(name.len() + description.len() + instructions.len());
    crate::prepared_writes::category(name, description, instructions)
        .unwrap_or_else(|| category::classify(name, description, instructions).as_str())
}

/// `pg_skills.max_document_size` in bytes.
#[pg_extern(stable, parallel_safe)]
fn max_document_bytes() -> i64 {
    guc::max_document_bytes()
}

/// The BM25 analyzer's tokens for a text (lowercased, stop words removed, stemmed when
/// `pg_skills.bm25_stemming` is on): what a query is matched with.
#[pg_extern(stable, parallel_safe, strict)]
fn tokenize(input: &str) -> Vec<String> {
    check_text_size(input.len());
    Analyzer::new(AnalyzerConfig {
        stemming: guc::BM25_STEMMING.get(),
    })
    .tokens(input)
}
