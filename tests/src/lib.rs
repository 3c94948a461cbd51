//! Throwaway Postgres clusters for out-of-process tests.
//!
//! Each [`Cluster`] lives in its own directory under /var/tmp, listens on 127.0.0.1 at a port
//! of its own, and is stopped and removed when dropped — also when a test fails. Servers run as
//! the `postgres` user when the tests run as root (Postgres refuses root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use postgres::types::{FromSqlOwned, ToSql};
pub use postgres::{Client, GenericClient, NoTls};

/// Where the server binaries are: `PG_CONFIG --bindir`.
pub fn bindir() -> PathBuf {
    let pg_config = std::env::var("PG_CONFIG")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = Command::new(&pg_config)
        .arg("--bindir")
        .output()
        .expect("pg_config runs");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

/// Runs a server binary as the postgres user when we are root.
fn server_command(program: &str) -> Command {
    let path = bindir().join(program);
    if is_root() {
        let mut c = Command::new("sudo");
        c.args(["-u", "postgres", "env", "-u", "RUST_BACKTRACE"])
            .arg(path);
        c
    } else {
        Command::new(path)
    }
}

fn check(what: &str, out: std::io::Result<Output>) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// True when the pg_skills extension is installed for the server binaries in use.
pub fn extension_installed() -> bool {
    let sharedir = Command::new(bindir().join("pg_config"))
        .arg("--sharedir")
        .output();
    let Ok(out) = sharedir else { return false };
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    dir.join("extension/pg_skills.control").exists()
}

/// `port`, or when something holds it the first free one 100, 200, ... above it: the test ports
/// lie in Linux's ephemeral range, which it also hands to other processes' connections. The
/// probe binds as the server will (std sets SO_REUSEADDR, as PostgreSQL does), so a port in
/// TIME_WAIT counts as free and one held by a live socket does not.
fn free_port(port: u16) -> u16 {
    (0..10u16)
        .map(|i| port.saturating_add(100 * i))
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .unwrap_or(port)
}

pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
}

impl Cluster {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn new_dir(name: &str) -> PathBuf {
        let dir = PathBuf::from(format!(
            "/var/tmp/pg_skills-it-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            check(
                "chown",
                Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(&dir)
                    .output(),
            );
        }
        dir
    }

    /// initdb + start, with WAL for streaming replicas.
    pub fn start(name: &str, port: u16) -> Cluster {
        Self::start_with(name, port, "")
    }

    /// As [`Cluster::start`], with more postgresql.conf lines.
    pub fn start_with(name: &str, port: u16, extra_conf: &str) -> Cluster {
        let cluster = Cluster {
            dir: Self::new_dir(name),
            port: free_port(port),
        };
        check(
            "initdb",
            server_command("initdb")
                .args(["-A", "trust", "-U", "postgres", "--locale=C.UTF-8", "-D"])
                .arg(cluster.data())
                .output(),
        );
        let conf = "\nwal_level = replica\nmax_wal_senders = 4\nhot_standby = on\nfsync = on\n\
                    listen_addresses = '127.0.0.1'\nmax_connections = 40\n";
        append(&cluster.data().join("postgresql.conf"), conf);
        append(&cluster.data().join("postgresql.conf"), extra_conf);
        cluster.pg_ctl_start();
        cluster
    }

    /// A streaming standby of `primary`, made with pg_basebackup.
    pub fn standby_of(primary: &Cluster, name: &str, port: u16) -> Cluster {
        let cluster = Cluster {
            dir: Self::new_dir(name),
            port: free_port(port),
        };
        check(
            "pg_basebackup",
            server_command("pg_basebackup")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-R",
                    "-X",
                    "stream",
                    "-p",
                ])
                .arg(primary.port.to_string())
                .arg("-D")
                .arg(cluster.data())
                .output(),
        );
        cluster.pg_ctl_start();
        cluster
    }

    fn pg_ctl_start(&self) {
        let log = self.dir.join("server.log");
        check(
            "pg_ctl start",
            server_command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(&log)
                // pg_ctl once gave up at 120 s on recovery after a crash while another test loaded
                // both cores.
                .args(["-w", "-t", "300", "-o"])
                .arg(format!("-p {} -k {}", self.port, self.dir.display()))
                .arg("start")
                .output(),
        );
    }

    pub fn client(&self) -> Client {
        self.client_db("postgres")
    }

    pub fn client_db(&self, db: &str) -> Client {
        let dsn = format!(
            "host=127.0.0.1 port={} user=postgres dbname={db}",
            self.port
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match Client::connect(&dsn, NoTls) {
                Ok(c) => return c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("connect {dsn}: {e}"),
            }
        }
    }

    pub fn dsn(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={db}",
            self.port
        )
    }

    /// kill -9 the postmaster and its children (a crash: no shutdown checkpoint), then start
    /// again (recovery).
    pub fn crash_and_restart(&self) {
        let pid_file =
            std::fs::read_to_string(self.data().join("postmaster.pid")).expect("postmaster.pid");
        let pid = pid_file.lines().next().unwrap().trim().to_string();
        // A crash takes the whole server down at once: a child busy in a long computation
        // (the embedder) would otherwise keep the old shared memory attached for a while.
        let children = Command::new("pgrep")
            .args(["-P", &pid])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        check("kill -9", Command::new("kill").args(["-9", &pid]).output());
        for child in &children {
            let _ = Command::new("kill").args(["-9", child]).output();
        }
        // The children notice the postmaster is gone and exit; wait for the shared memory to go.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(1));
        let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
        self.pg_ctl_start();
    }

    /// Stops the server (fast shutdown: sessions are ended); [`Cluster::start_again`] brings it back.
    pub fn stop(&self) {
        check(
            "pg_ctl stop",
            server_command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "fast", "-w", "stop"])
                .output(),
        );
    }

    pub fn start_again(&self) {
        self.pg_ctl_start();
    }

    pub fn bin(&self, program: &str) -> PathBuf {
        bindir().join(program)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = server_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        if std::env::var_os("PGS_KEEP_CLUSTERS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

pub use pg_skills_kernels::rng::SplitMix64 as Rng;

/// The seed of a randomized test: `PGS_FUZZ_SEED` or the clock; printed so a failure replays.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("PGS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                % 1_000_000_007
        });
    println!("{test}: seed {seed} (replay with PGS_FUZZ_SEED={seed})");
    seed
}

/// The encoder's folder (what `./x model` fetched), when its files are there.
pub fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("PG_SKILLS_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(pg_skills_kernels::encoder::DEFAULT_MODEL_DIR));
    dir.join("model.safetensors").exists().then_some(dir)
}

/// True (after saying so) when the extension is not installed: the test then passes as skipped.
/// True (after saying why) when the server tests are skipped or the encoder model is missing.
pub fn skip_without_model() -> bool {
    if skip() {
        return true;
    }
    if model_dir().is_none() {
        eprintln!("SKIPPED: no encoder model (run ./x model)");
        return true;
    }
    false
}

pub fn skip() -> bool {
    if !extension_installed() {
        eprintln!(
            "SKIPPED: pg_skills is not installed for {} (run ./x test)",
            bindir().display()
        );
        return true;
    }
    false
}

/// Waits until `standby` has replayed everything `primary` has written so far.
pub fn wait_for_replay(primary: &mut Client, standby: &mut Client) {
    let lsn: String = primary
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let caught_up: bool = standby
            .query_one(
                "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                &[&lsn],
            )
            .unwrap()
            .get(0);
        if caught_up {
            return;
        }
        assert!(Instant::now() < deadline, "standby did not replay to {lsn}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// pg_dump -Fc of `db`, restored into a new database `into` of the same cluster.
pub fn dump_and_restore(cluster: &Cluster, db: &str, into: &str) {
    let dump = cluster.dir.join(format!("{db}.dump"));
    let port = cluster.port.to_string();
    check(
        "pg_dump",
        Command::new(cluster.bin("pg_dump"))
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-Fc",
                "-p",
                &port,
                "-f",
            ])
            .arg(&dump)
            .arg(db)
            .output(),
    );
    cluster
        .client()
        .batch_execute(&format!("CREATE DATABASE {into}"))
        .unwrap();
    check(
        "pg_restore",
        Command::new(cluster.bin("pg_restore"))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-p", &port, "-d", into])
            .arg(&dump)
            .output(),
    );
}

/// Crash recovery under load: `writers` client threads each call `insert(client, writer, n)` for
/// n = 0, 1, ... (it returns the committed row's id and what finds it again, or the error that
/// ends the thread once the server is gone); after 4 seconds the postmaster is killed with -9 and
/// restarted. Returns every committed (id, token); asserts that more than 20 were.
pub fn committed_across_a_crash<F>(
    cluster: &Cluster,
    writers: u64,
    seed: u64,
    insert: F,
) -> Vec<(i64, String)>
where
    F: Fn(&mut Client, u64, u64) -> Result<(i64, String), postgres::Error> + Send + Sync + 'static,
{
    let insert = std::sync::Arc::new(insert);
    let committed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (dsn, committed, insert) =
                (cluster.dsn("postgres"), committed.clone(), insert.clone());
            std::thread::spawn(move || {
                let mut client = Client::connect(&dsn, NoTls).unwrap();
                for n in 0.. {
                    match insert(&mut client, w, n) {
                        Ok(row) => committed.lock().unwrap().push(row),
                        Err(_) => return, // the server went away
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    cluster.crash_and_restart();
    for t in threads {
        t.join().unwrap();
    }
    let committed = committed.lock().unwrap().clone();
    assert!(
        committed.len() > 20,
        "seed {seed}: only {} inserts before the crash",
        committed.len()
    );
    committed
}

/// Installs the extension in `db` of a fresh cluster.
pub fn setup_extension(client: &mut Client) {
    client
        .batch_execute("CREATE EXTENSION pg_skills")
        .expect("CREATE EXTENSION pg_skills");
}

pub fn insert_random(client: &mut Client, rng: &mut Rng, n: usize, tag: &str) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{}-{tag}-{i}", rng.words(1, 2).replace(' ', "-"));
        let row = client
            .query_one(
                "INSERT INTO skills.skill (name, description, instructions) VALUES ($1, $2, $3) RETURNING id",
                &[&name, &rng.words(3, 15), &rng.words(0, 150)],
            )
            .expect("insert");
        ids.push(row.get(0));
    }
    ids
}

/// The first two columns of every row `sql` returns; an error panics naming the statement.
pub fn pairs<A: FromSqlOwned, B: FromSqlOwned>(
    client: &mut impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Vec<(A, B)> {
    client
        .query(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// (id, score) of skills.search with BM25 (the index path when an index exists).
pub fn search(client: &mut Client, query: &str, k: Option<i32>) -> Vec<(i64, f64)> {
    pairs(
        client,
        "SELECT id, score FROM skills.search($1, k => $2, method => 'bm25')",
        &[&query, &k],
    )
}

/// (id, score) of the reference sequential scorer.
pub fn reference(client: &mut Client, query: &str, k: Option<i32>) -> Vec<(i64, f64)> {
    pairs(
        client,
        "SELECT id, score FROM skills.bm25_scan($1, $2, NULL)",
        &[&query, &k],
    )
}

/// Asserts the index path and the reference agree: same ids in the same order, scores to 1e-9.
pub fn assert_same_ranking(context: &str, got: &[(i64, f64)], want: &[(i64, f64)]) {
    assert_eq!(got.len(), want.len(), "{context}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "{context}: {got:?} vs {want:?}");
        assert!(
            (g.1 - w.1).abs() <= 1e-9 * w.1.abs().max(1.0),
            "{context}: {g:?} vs {w:?}"
        );
    }
}
