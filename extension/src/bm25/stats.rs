//! `skills.bm25_index_stats(index)`: what an index holds, for DBAs and tests.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_skills_kernels::bm25index::append::{chain_pages, count_live};
use pg_skills_kernels::bm25index::format::{Meta, META_BLOCK};
use pg_skills_kernels::page::{Corrupt, PageRead, NO_BLOCK};

use crate::storage::{BufferStore, Mode, OrRaise};

/// Segments, documents and pages of a bm25 index.
#[pg_extern(stable)]
fn bm25_index_stats(
    index: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(format_version, i32),
        name!(segments, i32),
        name!(segment_documents, i64),
        name!(segment_terms, i64),
        name!(append_documents, i64),
        name!(append_pages, i32),
        name!(total_pages, i64),
        name!(segments_with_tombstones, i32),
    ),
> {
    unsafe {
        let rel = super::open_bm25_index(index);
        let store = BufferStore::new(rel, Mode::Logged);
        let (meta, append_docs, append_pages) = super::reading(rel, &store, || {
            let meta = Meta::read(&store.read(META_BLOCK)).or_raise(rel);
            let mut append_docs = 0;
            let mut append_pages = 0;
            for head in [meta.frozen_head, meta.append_head] {
                if head != NO_BLOCK {
                    append_docs += count_live(&store, head)? as i64;
                    append_pages += chain_pages(&store, head)?.len() as i32;
                }
            }
            Ok::<_, Corrupt>((meta, append_docs, append_pages))
        })
        .or_raise(rel);
        let row = (
            meta.version as i32,
            meta.segments.len() as i32,
            meta.segments.iter().map(|s| s.num_docs as i64).sum(),
            meta.segments.iter().map(|s| s.num_terms as i64).sum(),
            append_docs,
            append_pages,
            store.num_blocks() as i64,
            meta.segments.iter().filter(|s| s.has_tombstones).count() as i32,
        );
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        TableIterator::once(row)
    }
}
