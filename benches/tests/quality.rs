//! Retrieval quality gates: the harness runs against the test cluster (PG_SKILLS_TEST_DSN, set by
//! `./x test`) on the shared labelled sets, and the reference BM25 must stay at its measured level
//! (benches/RESULTS.md). Skipped with a message where the cluster or ../shared is absent.

use std::path::PathBuf;
use std::process::Command;

fn run(dataset: &str) -> Option<serde_json::Value> {
    let Ok(dsn) = std::env::var("PG_SKILLS_TEST_DSN") else {
        eprintln!("SKIPPED: PG_SKILLS_TEST_DSN is not set (run through ./x test)");
        return None;
    };
    // Read at run time (a binary cached from another checkout must not look there).
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo test"))
        .join("../../shared/bench-data")
        .join(dataset);
    if !dir.join("corpus.jsonl").is_file() {
        eprintln!("SKIPPED: {} is absent", dir.display());
        return None;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_retrieval"))
        .args(["--json", "--dataset", dir.to_str().unwrap(), "--dsn", &dsn])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{v}");
    Some(v)
}

#[test]
fn skillsbench_bm25_quality() {
    let Some(m) = run("skillsbench-tasks") else {
        return;
    };
    assert_eq!(m["queries"], 52);
    assert!(m["ndcg_at_10"].as_f64().unwrap() >= 0.80, "{m}");
    assert!(m["hit_at_1"].as_f64().unwrap() >= 0.80, "{m}");
}

#[test]
fn metatool_bm25_quality() {
    let Some(m) = run("metatool") else { return };
    assert_eq!(m["queries"], 20550);
    assert!(m["ndcg_at_10"].as_f64().unwrap() >= 0.47, "{m}");
    assert!(m["hit_at_1"].as_f64().unwrap() >= 0.33, "{m}");
}
