//! The SQL half of the extension, kept as plain SQL files in the repository's `sql/` folder.

// Types, tables, views: before any function.
pgrx::extension_sql_file!("../../sql/schema.sql", name = "schema", bootstrap);
// Trigger, provenance helpers, apply_staging, search: after the Rust functions they call.
pgrx::extension_sql_file!("../../sql/api.sql", name = "api", finalize);
