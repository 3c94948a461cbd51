//! TLS from both clients against real servers: `sslmode=require` and the verify modes against a
//! cluster with `ssl = on` and a self-signed certificate that the openssl CLI makes at test time,
//! and `sslmode=require` against a cluster without SSL, which must fail and say why. skills-mcp
//! is driven over MCP; skills-load through `load::connect`, the function its CLI connects with.
//! Neither needs the extension. Ports 54386-54387.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Mcp;
use pg_skills_corpus::load;
use pg_skills_server_tests::{Client, Cluster};
use serde_json::json;

/// True (after saying so) when there is no openssl CLI to make a certificate with.
fn skip_without_openssl() -> bool {
    match Command::new("openssl").arg("version").output() {
        Ok(out) if out.status.success() => false,
        _ => {
            eprintln!("SKIPPED: no openssl CLI to make a test certificate with (install openssl)");
            true
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn run(what: &str, command: &mut Command) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn server_log(cluster: &Cluster) -> String {
    std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default()
}

/// Turns SSL on in `cluster`: a self-signed certificate for `localhost` (with the key, mode 0600
/// and owned by the server's user) in its data directory, `ssl = on`, and a configuration reload.
/// Returns the certificate, which the verify modes can trust as their root.
fn enable_ssl(cluster: &Cluster, admin: &mut Client) -> PathBuf {
    let data: String = admin.query_one("SHOW data_directory", &[]).unwrap().get(0);
    let (cert, key) = (
        Path::new(&data).join("server.crt"),
        Path::new(&data).join("server.key"),
    );
    run(
        "openssl req",
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args([
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    );
    for file in [&cert, &key] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    if is_root() {
        run(
            "chown",
            Command::new("chown")
                .arg("postgres:postgres")
                .arg(&cert)
                .arg(&key),
        );
    }
    admin.batch_execute("ALTER SYSTEM SET ssl = on").unwrap();
    admin.query_one("SELECT pg_reload_conf()", &[]).unwrap();
    // The postmaster rereads its configuration when it gets to the signal: wait for TLS.
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres sslmode=require",
        cluster.port
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = load::connect(&dsn) {
        assert!(
            Instant::now() < deadline,
            "ssl did not come on: {e}\n{}",
            server_log(cluster)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cert
}

/// Whether this session runs over TLS, as the server sees it.
fn over_tls(client: &mut Client) -> bool {
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn both_clients_use_tls_with_a_self_signed_server() {
    if skip_without_openssl() {
        return;
    }
    let cluster = Cluster::start("tls-on", 54386);
    let mut admin = cluster.client();
    let cert = enable_ssl(&cluster, &mut admin);
    let base = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        cluster.port
    );
    let root = format!("sslrootcert='{}'", cert.display());

    // skills-load. require: encrypted, the certificate taken as it comes.
    assert!(over_tls(
        &mut load::connect(&format!("{base} sslmode=require")).unwrap()
    ));
    // prefer (the default) takes TLS when the server offers it.
    assert!(over_tls(&mut load::connect(&base).unwrap()));
    // verify-ca trusts the certificate as its own root and does not check the name...
    assert!(over_tls(
        &mut load::connect(&format!("{base} sslmode=verify-ca {root}")).unwrap()
    ));
    // ...verify-full does: the certificate names localhost, not 127.0.0.1...
    let err = load::connect(&format!("{base} sslmode=verify-full {root}"))
        .err()
        .unwrap();
    assert!(err.contains("certificate verify failed"), "{err}");
    assert!(err.contains("must also name the host"), "{err}");
    // ...and passes for host=localhost (reached at 127.0.0.1).
    let localhost = format!(
        "host=localhost hostaddr=127.0.0.1 port={} user=postgres sslmode=verify-full {root}",
        cluster.port
    );
    assert!(over_tls(&mut load::connect(&localhost).unwrap()));
    // The system's roots did not sign a self-signed certificate.
    let err = load::connect(&format!(
        "host=localhost hostaddr=127.0.0.1 port={} user=postgres sslrootcert=system",
        cluster.port
    ))
    .err()
    .unwrap();
    assert!(err.contains("certificate verify failed"), "{err}");

    // skills-mcp: a tool call reaches the database (which answers; the extension is not
    // needed for that) over a TLS session of the pool.
    let tls_sessions = |admin: &mut Client| -> Vec<bool> {
        admin
            .query(
                "SELECT s.ssl FROM pg_stat_ssl AS s JOIN pg_stat_activity AS a USING (pid) \
                 WHERE a.application_name = 'skills-mcp'",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    for dsn in [format!("{base} sslmode=require"), localhost] {
        let mut mcp = Mcp::start(&dsn, &["--connect-timeout", "5"]);
        mcp.initialize();
        let answer = mcp.call("get_skill", json!({"id": 1}));
        let text = answer["content"][0]["text"].as_str().unwrap_or_default();
        assert!(!text.starts_with("database unreachable"), "{dsn}: {answer}");
        assert_eq!(tls_sessions(&mut admin), [true], "{dsn}");
        drop(mcp);
        // The pool's session ends with the process.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tls_sessions(&mut admin).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn sslmode_require_fails_clearly_without_ssl_on_the_server() {
    let cluster = Cluster::start("tls-off", 54387);
    // trust authentication: the password is never asked for, only carried (and never shown).
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres password=hunter2 dbname=postgres sslmode=require",
        cluster.port
    );

    let err = load::connect(&dsn).err().unwrap();
    assert!(err.contains("server does not support TLS"), "{err}");
    assert!(err.contains("does not accept SSL connections"), "{err}");
    assert!(err.contains("password=***"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    // prefer, the default, goes on without TLS there.
    let plain = dsn.replace(" sslmode=require", "");
    assert!(!over_tls(&mut load::connect(&plain).unwrap()));

    let mut mcp = Mcp::start(&dsn, &["--connect-timeout", "3"]);
    mcp.initialize();
    let err = mcp.tool_error("search_skills", json!({"query": "pytest fixtures"}));
    assert!(
        err.starts_with(&format!(
            "database unreachable: cannot connect to host=127.0.0.1 port={} dbname=postgres \
             user=postgres sslmode=require: ",
            cluster.port
        )),
        "{err}"
    );
    assert!(err.contains("server does not support TLS"), "{err}");
    assert!(err.contains("turn ssl on there"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}
