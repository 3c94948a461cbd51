//! `skills-mcp`: serves pg_skills to MCP clients over stdio (stdout carries the protocol,
//! stderr the log).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rmcp::ServiceExt;
use skills_mcp::{Database, Settings, SkillsServer};

/// The demo cluster of `./x demo`.
const DEMO_DSN: &str = "host=127.0.0.1 port=54329 user=postgres dbname=postgres";

// No Debug: the connection string may hold a password.
#[derive(Parser)]
#[command(
    name = "skills-mcp",
    version,
    about = "MCP server (stdio) for pg_skills: search_skills, get_skill, render_context, report_outcome"
)]
struct Args {
    /// Connection string (libpq key=value or postgresql:// URL) of a database with the pg_skills
    /// extension. Default: $PG_SKILLS_DSN, then $DATABASE_URL, then the ./x demo cluster. TLS as
    /// libpq: sslmode=disable, prefer (the default; also from PGSSLMODE), require, verify-ca or
    /// verify-full, with sslrootcert=FILE or system for the verify modes.
    #[arg(long)]
    dsn: Option<String>,
    /// Seconds to wait for a connection before a call fails.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    connect_timeout: u64,
    /// Seconds a statement may run (the server cancels it after that). The first search of a
    /// connection also loads the encoder model.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    statement_timeout: u64,
    /// Connections kept open for concurrent calls.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pool_size: u64,
}

fn dsn(args: &Args) -> String {
    args.dsn
        .clone()
        .or_else(|| {
            std::env::var("PG_SKILLS_DSN")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .or_else(|| std::env::var("DATABASE_URL").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEMO_DSN.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let settings = Settings {
        dsn: dsn(&args),
        connect_timeout: Duration::from_secs(args.connect_timeout),
        statement_timeout: Duration::from_secs(args.statement_timeout),
        pool_size: args.pool_size as usize,
    };
    let db = match Database::new(&settings) {
        Ok(db) => db,
        Err(e) => {
            eprintln!("skills-mcp: {e}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "skills-mcp {}: serving {} over stdio",
        env!("CARGO_PKG_VERSION"),
        db.target()
    );
    let stdio = skills_mcp::framing::guard(tokio::io::stdin(), tokio::io::stdout());
    let transport = (stdio.service_input, stdio.service_output);
    let service = match SkillsServer::new(db).serve(transport).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("skills-mcp: the client did not complete the MCP handshake: {e}");
            return ExitCode::from(1);
        }
    };
    let ended = service.waiting().await;
    // The last lines out (the service has closed its side, so this ends).
    let _ = tokio::time::timeout(Duration::from_secs(5), stdio.writer).await;
    match ended {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("skills-mcp: {e}");
            ExitCode::from(1)
        }
    }
}
