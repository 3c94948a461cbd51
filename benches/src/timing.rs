//! Timing helpers the server benchmarks share: latency percentiles and pgbench runs.

use std::path::Path;
use std::process::Command;

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// (p50, p95, p99) of `v`.
pub fn latencies_ms(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        percentile(&v, 0.5),
        percentile(&v, 0.95),
        percentile(&v, 0.99),
    )
}

/// Transactions per second of `script` under pgbench (`-M prepared`, one thread per client).
/// `conninfo` may carry `options='-c name=value'` for settings.
pub fn pgbench(pg_config: &str, dsn_db: &str, script: &str, clients: u32, seconds: u32) -> f64 {
    let bindir = Command::new(pg_config)
        .arg("--bindir")
        .output()
        .expect("pg_config");
    let bindir = String::from_utf8_lossy(&bindir.stdout).trim().to_string();
    let file = std::env::temp_dir().join(format!("pgs_bench_{}_{clients}.sql", std::process::id()));
    std::fs::write(&file, script).unwrap();
    let out = Command::new(Path::new(&bindir).join("pgbench"))
        .args([
            "-n",
            "-M",
            "prepared",
            "-T",
            &seconds.to_string(),
            "-c",
            &clients.to_string(),
            "-j",
            &clients.to_string(),
            "-f",
        ])
        .arg(&file)
        .arg(dsn_db)
        .output()
        .expect("pgbench runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let _ = std::fs::remove_file(&file);
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("pgbench: {text}\n{}", String::from_utf8_lossy(&out.stderr)))
}
