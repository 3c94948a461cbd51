//! Functions over one document, shared by the trigger on `skills.skill` and by the loader
//! (which runs the same Rust code client-side, so both compute identical hashes and categories).

use pgrx::prelude::*;

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

/// LLM prompt tokens (o200k_base) of the document as a prompt receives it.
#[pg_extern(immutable, parallel_safe, strict)]
fn token_count(name: &str, description: &str, instructions: &str) -> i32 {
    check_text_size(name.len() + description.len() + instructions.len());
    if let Some(n) = crate::prepared_writes::token_count(name, description, instructions) {
        return n;
    }
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
