//! `skills-mcp`: a Model Context Protocol server (stdio) in front of a pg_skills database.
//!
//! An agent asks for skills (`search_skills`, `render_context`), reads one in full
//! (`get_skill`) and, after its task, reports how each served skill did (`report_outcome`);
//! the outcomes land in `skills.event` / `skills.event_arm`, where the next KeyOpt fit
//! (`skills.fit()` or the fitter worker) learns from them.
//!
//! - [`db`]: the connection pool (TLS as the connection string's `sslmode` asks), timeouts and
//!   error classification.
//! - [`tools`]: arguments, validation, SQL and results of each tool.
//! - [`server`]: `tools/list` and `tools/call` over rmcp.
//! - [`framing`]: the stdio lines, with a parse error for a line that is not JSON.

pub mod db;
pub mod framing;
pub mod server;
pub mod tools;

pub use db::{Database, Settings, ToolError};
pub use server::SkillsServer;
