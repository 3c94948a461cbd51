//! The connection to the pg_skills database: a small pool with timeouts everywhere, and the
//! translation of what can go wrong into errors an agent can act on.
//!
//! Nothing waits forever: connecting gives up after the connect timeout, every statement runs
//! under `statement_timeout` (set as a connection option, so the server cancels it), and each
//! tool call as a whole is bounded on our side too, for a server that stops answering.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use pg_skills_corpus::conninfo::{self, ConnInfo, Tls};
use tokio_postgres::error::SqlState;
use tokio_postgres::Config;

/// How to reach the database and how long to wait for it.
#[derive(Clone)]
pub struct Settings {
    /// libpq key=value string or `postgresql://` URL, with `sslmode` (default `prefer`) and
    /// `sslrootcert` as libpq reads them.
    pub dsn: String,
    pub connect_timeout: Duration,
    pub statement_timeout: Duration,
    pub pool_size: usize,
}

/// Shows the connection string redacted: a Settings may end up in a log.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("dsn", &conninfo::redact(&self.dsn))
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// Why a tool call failed, in the words the agent sees (tool results with `isError`).
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// The arguments do not make a valid request; the agent can fix them and call again.
    InvalidArgument(String),
    /// The request was valid but names something that does not exist.
    NotFound(String),
    /// The database cannot be reached (down, wrong address, connection lost).
    Unreachable(String),
    /// The database did not answer in time.
    Timeout(String),
    /// The database refused the request; SQLSTATE and hint as Postgres gave them.
    Database {
        sqlstate: String,
        message: String,
        hint: Option<String>,
    },
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            ToolError::NotFound(m) => write!(f, "not found: {m}"),
            ToolError::Unreachable(m) => write!(f, "database unreachable: {m}"),
            ToolError::Timeout(m) => write!(f, "timeout: {m}"),
            ToolError::Database {
                sqlstate,
                message,
                hint,
            } => {
                write!(f, "database error {sqlstate}: {message}")?;
                if let Some(h) = hint {
                    write!(f, " (hint: {h})")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ToolError {}

pub struct Database {
    pool: Pool,
    /// host, port, database, user and sslmode (never the password), for messages.
    target: String,
    tls: Tls,
    /// The most one call may take on our side before we give up on the server.
    call_limit: Duration,
    statement_timeout: Duration,
    /// `skills.search_methods()`, read once from the database (it is fixed per extension
    /// version): the methods `tools/list` publishes and arguments are checked against.
    search_methods: std::sync::OnceLock<Vec<String>>,
}

impl Database {
    /// Prepares the pool; does not connect (the first call does, so the server starts even
    /// when the database is down and says so per call).
    pub fn new(settings: &Settings) -> Result<Database, String> {
        let ConnInfo { mut config, tls } =
            ConnInfo::parse(&settings.dsn, |k| std::env::var(k).ok())?;
        let connector = tls.connector()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(settings.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("skills-mcp");
        }
        let options = format!(
            "-c statement_timeout={} {}",
            settings.statement_timeout.as_millis(),
            conninfo::FIXED_SEARCH_PATH_OPTION
        );
        conninfo::add_server_options(&mut config, &options);
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        let target = describe_target(&config, &tls);
        let manager = Manager::from_config(
            config,
            connector,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let connect = settings.connect_timeout;
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size)
            .runtime(Runtime::Tokio1)
            // Waiting for a free connection: at most a full call's time.
            .wait_timeout(Some(settings.statement_timeout + connect))
            .create_timeout(Some(connect))
            .recycle_timeout(Some(connect))
            .build()
            .map_err(|e| format!("cannot set up the connection pool: {e}"))?;
        Ok(Database {
            pool,
            target,
            tls,
            call_limit: settings.statement_timeout * 2 + connect + Duration::from_secs(5),
            statement_timeout: settings.statement_timeout,
            search_methods: std::sync::OnceLock::new(),
        })
    }

    /// The search methods the database offers, read once. An unreachable database is an error
    /// (the call that asked would fail on it anyway); a database that cannot answer (no
    /// extension there) gives None, and then the database itself refuses an unknown method.
    pub async fn search_methods(&self) -> Result<Option<&[String]>, ToolError> {
        if self.search_methods.get().is_none() {
            let asked = self
                .with_client(true, |c| async move {
                    let row = c.query_one("SELECT skills.search_methods()", &[]).await?;
                    row.try_get::<_, Vec<String>>(0)
                })
                .await;
            match asked {
                Ok(methods) => {
                    let _ = self.search_methods.set(methods);
                }
                Err(e @ (ToolError::Unreachable(_) | ToolError::Timeout(_))) => return Err(e),
                Err(_) => return Ok(None),
            }
        }
        Ok(self.search_methods.get().map(Vec::as_slice))
    }

    /// The search methods if they were read already (never waits on the database).
    pub fn known_search_methods(&self) -> Option<&[String]> {
        self.search_methods.get().map(Vec::as_slice)
    }

    /// Where the pool connects, for logs and messages.
    pub fn target(&self) -> &str {
        &self.target
    }

    async fn client(&self) -> Result<Object, ToolError> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Timeout(_) => ToolError::Unreachable(format!(
                "no connection to {} within the connect timeout; is PostgreSQL running there? \
                 (set the address with --dsn or PG_SKILLS_DSN)",
                self.target
            )),
            PoolError::Backend(e) => {
                let text = conninfo::error_chain(&e);
                let hint = conninfo::tls_hint(&text, &self.tls).unwrap_or_else(|| {
                    "is PostgreSQL running there? (set the address with --dsn or PG_SKILLS_DSN)"
                        .into()
                });
                ToolError::Unreachable(format!("cannot connect to {}: {text}; {hint}", self.target))
            }
            other => ToolError::Unreachable(format!("{}: {other}", self.target)),
        })
    }

    /// Runs `work` on a pooled connection within the call limit. Reads (`retry_read`) are tried
    /// once more on a fresh connection when the pooled one turns out to be dead (a server
    /// restart between calls); writes are never repeated.
    pub async fn with_client<T, F, Fut>(&self, retry_read: bool, work: F) -> Result<T, ToolError>
    where
        F: Fn(Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let attempt = async {
            let mut tries = 0;
            loop {
                tries += 1;
                let client = self.client().await?;
                match work(client).await {
                    Ok(v) => return Ok(v),
                    Err(e) if retry_read && tries == 1 && e.is_closed() => continue,
                    Err(e) => return Err(self.classify(&e)),
                }
            }
        };
        match tokio::time::timeout(self.call_limit, attempt).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout(format!(
                "{} did not answer within {} s",
                self.target,
                self.call_limit.as_secs()
            ))),
        }
    }

    /// A database error as the agent should see it.
    pub fn classify(&self, e: &tokio_postgres::Error) -> ToolError {
        if let Some(db) = e.as_db_error() {
            let code = db.code();
            if *code == SqlState::QUERY_CANCELED {
                return ToolError::Timeout(format!(
                    "the statement ran longer than {} s and was cancelled ({}); \
                     raise --statement-timeout if that is expected",
                    self.statement_timeout.as_secs(),
                    db.message()
                ));
            }
            if code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
            {
                return ToolError::Unreachable(format!("{}: {}", self.target, db.message()));
            }
            let mut hint = db.hint().map(str::to_string);
            if *code == SqlState::INVALID_SCHEMA_NAME
                || (*code == SqlState::UNDEFINED_FUNCTION && db.message().contains("skills."))
            {
                hint = Some(format!(
                    "is pg_skills installed in this database? Run CREATE EXTENSION pg_skills in {}",
                    self.target
                ));
            }
            return ToolError::Database {
                sqlstate: code.code().to_string(),
                message: db.message().to_string(),
                hint,
            };
        }
        if e.is_closed() {
            return ToolError::Unreachable(format!(
                "lost the connection to {}: {}",
                self.target,
                conninfo::error_chain(e)
            ));
        }
        ToolError::Unreachable(format!("{}: {}", self.target, conninfo::error_chain(e)))
    }
}

fn describe_target(config: &Config, tls: &Tls) -> String {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "host={} port={} dbname={} user={} sslmode={}",
        if hosts.is_empty() {
            "localhost".to_string()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".to_string()
        } else {
            ports.join(",")
        },
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("postgres"),
        config.get_user().unwrap_or("(default)"),
        tls.mode
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dsn: &str) -> Settings {
        Settings {
            dsn: dsn.into(),
            connect_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(10),
            pool_size: 2,
        }
    }

    #[tokio::test]
    async fn target_names_the_server_but_not_the_password() {
        let db = Database::new(&settings(
            "postgresql://agent:secret@db.example:6543/skills?connect_timeout=3",
        ))
        .unwrap();
        assert_eq!(
            db.target(),
            "host=db.example port=6543 dbname=skills user=agent sslmode=prefer"
        );
        assert!(!db.target().contains("secret"));
    }

    #[test]
    fn settings_debug_hides_the_password() {
        let shown = format!(
            "{:?}",
            settings("host=h user=agent password='s3cret value' sslmode=require")
        );
        assert!(shown.contains("password=***"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[tokio::test]
    async fn sslmode_reaches_the_target_and_bad_ones_are_refused() {
        let db = Database::new(&settings(
            "postgresql://agent:secret@db.example/skills?sslmode=require",
        ))
        .unwrap();
        assert!(db.target().ends_with("sslmode=require"), "{}", db.target());
        let err = Database::new(&settings(
            "host=h password=secret sslmode=verify-everything",
        ))
        .err()
        .unwrap();
        assert!(err.contains("sslmode must be one of"), "{err}");
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn a_malformed_connection_string_is_reported() {
        let err = Database::new(&settings("host=127.0.0.1 port=notaport"))
            .err()
            .unwrap();
        assert!(err.starts_with("invalid connection string"), "{err}");
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable_not_a_hang() {
        // Port 1 on loopback: nothing listens there, the connect is refused at once.
        let db = Database::new(&settings("host=127.0.0.1 port=1 user=postgres")).unwrap();
        let started = std::time::Instant::now();
        let err = db
            .with_client(true, |c| async move {
                c.query_one("SELECT 1", &[]).await.map(|_| ())
            })
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Unreachable(_)), "{err}");
        let text = err.to_string();
        assert!(text.contains("host=127.0.0.1 port=1"), "{text}");
        assert!(text.contains("PG_SKILLS_DSN"), "{text}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
