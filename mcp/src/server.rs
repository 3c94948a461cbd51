//! The MCP server: tool definitions (`tools/list`) and dispatch (`tools/call`).
//!
//! Arguments are decoded here rather than by rmcp's `Parameters` extractor so that a wrong
//! argument comes back as a tool result with `isError` (which a model reads and corrects, as
//! the MCP specification asks for input validation) instead of a JSON-RPC protocol error. An
//! unknown tool name stays a protocol error.

use std::sync::Arc;

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::db::{Database, ToolError};
use crate::tools::{
    self, GetSkillArgs, RenderedContext, ReportArgs, ReportResult, SearchArgs, SearchResult,
    SkillDocument,
};

pub const SEARCH_SKILLS: &str = "search_skills";
pub const GET_SKILL: &str = "get_skill";
pub const RENDER_CONTEXT: &str = "render_context";
pub const REPORT_OUTCOME: &str = "report_outcome";

const INSTRUCTIONS: &str = "pg_skills serves agent skills (SKILL.md documents) from PostgreSQL. \
Before a coding task, call search_skills (or render_context for a ready prompt block within a \
token budget); read a skill in full with get_skill. After the task, call report_outcome with \
the skills you were served and whether the task passed with each: reported outcomes train the \
KeyOpt ranking, so later searches rank what worked higher.";

fn tool<In: JsonSchema + 'static, Out: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    read_only: bool,
) -> Tool {
    Tool::new(name, description, schema_for_type::<In>())
        .with_title(title)
        .with_output_schema::<Out>()
        .with_annotations(
            ToolAnnotations::with_title(title)
                .read_only(read_only)
                .destructive(false)
                .idempotent(read_only)
                .open_world(false),
        )
}

/// The four tools, as `tools/list` publishes them; `methods` (the database's
/// `skills.search_methods()`, when it could be read) becomes the `method` argument's enum.
pub fn tool_list(methods: Option<&[String]>) -> Vec<Tool> {
    let mut tools = vec![
        tool::<SearchArgs, SearchResult>(
            SEARCH_SKILLS,
            "Search skills",
            "Ranked skills (SKILL.md documents) that help with a coding task, best first, with \
             scores, the parts of each score and where each document comes from. The method \
             argument lists the ranking methods (default keyopt: learns from report_outcome).",
            true,
        ),
        tool::<GetSkillArgs, SkillDocument>(
            GET_SKILL,
            "Get a skill",
            "One skill in full (instructions, provenance, licence) by the id search_skills \
             returned, also as a SKILL.md file; earlier versions by number.",
            true,
        ),
        tool::<SearchArgs, RenderedContext>(
            RENDER_CONTEXT,
            "Render skills as context",
            "The best skills for a task as one prompt block to put into context, within a token \
             budget (o200k tokens), and the list of skills it contains.",
            true,
        ),
        tool::<ReportArgs, ReportResult>(
            REPORT_OUTCOME,
            "Report an outcome",
            "Records how a task went with the skills that were served: one entry per skill with \
             passed true or false. The next KeyOpt fit learns from it.",
            false,
        ),
    ];
    if let Some(methods) = methods {
        for tool in &mut tools {
            let schema = std::sync::Arc::make_mut(&mut tool.input_schema);
            if let Some(method) = schema
                .get_mut("properties")
                .and_then(|p| p.get_mut("method"))
                .and_then(Value::as_object_mut)
            {
                method.insert("enum".into(), Value::from(methods.to_vec()));
            }
        }
    }
    tools
}

#[derive(Clone)]
pub struct SkillsServer {
    db: Arc<Database>,
}

impl SkillsServer {
    pub fn new(db: Database) -> SkillsServer {
        SkillsServer { db: Arc::new(db) }
    }

    async fn run<A, R, F, Fut>(&self, name: &str, arguments: Value, work: F) -> CallToolResult
    where
        A: DeserializeOwned,
        R: Serialize,
        F: FnOnce(Arc<Database>, A) -> Fut,
        Fut: std::future::Future<Output = Result<R, ToolError>>,
    {
        let args: A = match serde_json::from_value(arguments) {
            Ok(a) => a,
            Err(e) => {
                return error_result(&ToolError::InvalidArgument(format!(
                    "{name}: {e} (see the tool's input schema in tools/list)"
                )))
            }
        };
        match work(self.db.clone(), args).await {
            Ok(out) => match serde_json::to_value(&out) {
                Ok(value) => CallToolResult::structured(value),
                Err(e) => error_result(&ToolError::Database {
                    sqlstate: "XX000".into(),
                    message: format!("cannot encode the result: {e}"),
                    hint: None,
                }),
            },
            Err(e) => error_result(&e),
        }
    }
}

fn error_result(e: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.to_string())])
}

/// render_context's block goes first as plain text, so a client that only shows text content
/// gets the prompt block itself rather than JSON around it.
fn context_first(mut result: CallToolResult) -> CallToolResult {
    if result.is_error != Some(true) {
        if let Some(block) = result
            .structured_content
            .as_ref()
            .and_then(|v| v.get("context"))
            .and_then(Value::as_str)
        {
            result.content = vec![ContentBlock::text(block.to_string())];
        }
    }
    result
}

impl ServerHandler for SkillsServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(INSTRUCTIONS);
        config.server_info = Implementation::new("skills-mcp", env!("CARGO_PKG_VERSION"))
            .with_title("pg_skills")
            .with_description("Search agent skills in PostgreSQL and report how they worked");
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Without the database the tools are still listed, with `method` as a plain string.
        let methods = self.db.search_methods().await.ok().flatten();
        Ok(ListToolsResult::with_all_items(tool_list(methods)))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tool_list(self.db.known_search_methods())
            .into_iter()
            .find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let name = request.name.as_ref();
        let result = match name {
            SEARCH_SKILLS => {
                self.run(name, arguments, |db, a: SearchArgs| async move {
                    tools::search(&db, a).await
                })
                .await
            }
            GET_SKILL => {
                self.run(name, arguments, |db, a: GetSkillArgs| async move {
                    tools::get_skill(&db, a).await
                })
                .await
            }
            RENDER_CONTEXT => context_first(
                self.run(name, arguments, |db, a: SearchArgs| async move {
                    tools::render_context(&db, a).await
                })
                .await,
            ),
            REPORT_OUTCOME => {
                self.run(name, arguments, |db, a: ReportArgs| async move {
                    tools::report_outcome(&db, a).await
                })
                .await
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool {other:?}; the tools are {SEARCH_SKILLS}, {GET_SKILL}, \
                         {RENDER_CONTEXT}, {REPORT_OUTCOME}"
                    ),
                    None,
                ))
            }
        };
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_publishes_object_schemas_with_required_fields() {
        let methods: Vec<String> = ["bm25", "semantic", "keyopt"].map(String::from).to_vec();
        let tools = tool_list(Some(&methods));
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [SEARCH_SKILLS, GET_SKILL, RENDER_CONTEXT, REPORT_OUTCOME]
        );
        let required = |t: &Tool| -> Vec<String> {
            t.input_schema
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default()
        };
        assert_eq!(required(&tools[0]), ["query"]);
        assert_eq!(required(&tools[1]), ["id"]);
        assert_eq!(required(&tools[3]), ["task", "skills"]);
        for t in &tools {
            assert_eq!(t.input_schema.get("type"), Some(&Value::from("object")));
            assert!(t.output_schema.is_some(), "{} has no output schema", t.name);
        }
        for t in [&tools[0], &tools[2]] {
            assert_eq!(
                t.input_schema["properties"]["method"]["enum"],
                Value::from(methods.clone()),
                "{}",
                t.name
            );
        }
        // Without the database's list, `method` is a bounded string.
        let plain = tool_list(None);
        let method = &plain[0].input_schema["properties"]["method"];
        assert!(method.get("enum").is_none(), "{method}");
        assert_eq!(method["maxLength"], Value::from(32));
        let report = tools[3].annotations.as_ref().unwrap();
        assert_eq!(report.read_only_hint, Some(false));
    }
}
