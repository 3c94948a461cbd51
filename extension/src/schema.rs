//! The SQL half of the extension, kept as plain SQL files in the repository's `sql/` folder.

// Types, tables, views: before any function.
pgrx::extension_sql_file!("../../sql/schema.sql", name = "schema", bootstrap);
// The bm25 access method, operator, operator class and query helpers: after the operator function.
pgrx::extension_sql_file!(
    "../../sql/bm25.sql",
    name = "bm25",
    requires = ["schema", bm25::operator::bm25_distance]
);
// The key type, operators, skeys access method: their C functions are Rust (`v1_function!` and
// `#[pg_extern(sql = false)]`; CONTRIBUTING.md, "Declaring SQL").
pgrx::extension_sql_file!("../../sql/keys.sql", name = "keys", requires = ["schema"]);
// Compressors, skill keys, the embedding queue and its status: after the key type and the Rust
// functions the SQL wrappers call.
pgrx::extension_sql_file!(
    "../../sql/embedding.sql",
    name = "embedding",
    requires = [
        "keys",
        embedding::query_key_values,
        embedding::compress,
        embedding::training::train_compressor_weights
    ]
);
// Experience tables, rounds, record_run, fit, use_round, keyopt_score: after the key type, the
// embedding SQL (skills.query_key) and the Rust functions they call.
pgrx::extension_sql_file!(
    "../../sql/keyopt.sql",
    name = "keyopt",
    requires = ["embedding", keyopt::fit, keyopt::rank::keyopt_rank]
);
// The skill graph: edges, their change counter and skills.build_graph (after the key type, the
// rule extractor and, for a stable object order, the KeyOpt tables).
pgrx::extension_sql_file!(
    "../../sql/graph.sql",
    name = "graph",
    requires = ["embedding", "keyopt", search::graph::rule_edges]
);
// Trigger, provenance helpers, apply_staging, search: after the Rust functions they call.
pgrx::extension_sql_file!(
    "../../sql/api.sql",
    name = "api",
    requires = [
        "schema",
        "keyopt",
        documents::content_hash,
        documents::token_count,
        documents::classify_label,
        documents::max_document_bytes,
        prepared_writes::prepare_skill_writes,
        bm25::insert::bm25_merge_append,
        trust::risk_scan,
        trust::risk_rules_version,
        trust::license_family,
        search::search_ranked
    ]
);
// Scale-out on Citus: skills.distribute (after every table and the bm25 helpers it uses).
pgrx::extension_sql_file!(
    "../../sql/citus.sql",
    name = "citus",
    requires = ["api", "graph", "bm25"]
);
// Roles, grants and what PUBLIC may not run: last, when every object exists.
pgrx::extension_sql_file!("../../sql/privileges.sql", name = "privileges", finalize);
