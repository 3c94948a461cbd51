//! `skills.keyopt_rank_batch` on the shared MetaTool set (199 tools, their test queries): after
//! outcomes are recorded and fitted, every query's batch rows are the rows of its own
//! `skills.search(..., method => 'keyopt')`, with and without a pool filter; with
//! `pg_skills.device = 'cuda'` and no GPU, a NOTICE and the same rows. Skipped with a message
//! where ../shared, the extension or the encoder model is absent.

use std::collections::HashMap;
use std::path::PathBuf;

use pg_skills_server_tests::{pairs, setup_extension, skip_without_model, Client, Cluster};

fn metatool() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench-data/metatool");
    if dir.join("corpus.jsonl").is_file() {
        Some(dir)
    } else {
        eprintln!("SKIPPED: {} is absent", dir.display());
        None
    }
}

fn jsonl(path: PathBuf) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Rows of each query (by position) as (skill_id, score).
fn batch(
    client: &mut Client,
    queries: &[String],
    k: i32,
    categories: Option<&[&str]>,
) -> Vec<Vec<(i64, f64)>> {
    let categories: Option<Vec<String>> =
        categories.map(|c| c.iter().map(|s| s.to_string()).collect());
    let mut out = vec![Vec::new(); queries.len()];
    for row in client
        .query(
            "SELECT query_no, skill_id, score, device \
             FROM skills.keyopt_rank_batch($1, $2, $3) ORDER BY query_no, rank",
            &[&queries, &k, &categories],
        )
        .unwrap()
    {
        let no: i32 = row.get(0);
        let device: String = row.get(3);
        assert!(device == "cpu" || device.starts_with("cuda: "), "{device}");
        out[no as usize - 1].push((row.get(1), row.get(2)));
    }
    out
}

fn search(
    client: &mut Client,
    query: &str,
    k: i32,
    categories: Option<&[&str]>,
) -> Vec<(i64, f64)> {
    let categories: Option<Vec<String>> =
        categories.map(|c| c.iter().map(|s| s.to_string()).collect());
    pairs(
        client,
        "SELECT id, score FROM skills.search($1, k => $2, categories => $3, method => 'keyopt')",
        &[&query, &k, &categories],
    )
}

#[test]
fn batch_rankings_equal_each_search_on_metatool() {
    if skip_without_model() {
        return;
    }
    let Some(dir) = metatool() else { return };
    let cluster = Cluster::start("batch", 54373);
    let mut c = cluster.client();
    setup_extension(&mut c);
    let mut ids: HashMap<String, i64> = HashMap::new();
    for tool in jsonl(dir.join("corpus.jsonl")) {
        let name = tool["_id"].as_str().unwrap();
        let text = tool["text"].as_str().unwrap();
        let id: i64 = c
            .query_one(
                "INSERT INTO skills.skill (name, description, instructions) VALUES ($1, $2, $2) \
                 ON CONFLICT DO NOTHING RETURNING id",
                &[&name, &text],
            )
            .map(|r| r.get(0))
            .unwrap_or(-1);
        ids.insert(name.to_string(), id);
    }
    c.batch_execute("SELECT skills.embed_pending()").unwrap();
    let texts: HashMap<String, String> = jsonl(dir.join("queries.jsonl"))
        .into_iter()
        .map(|q| {
            (
                q["_id"].as_str().unwrap().to_string(),
                q["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let qrels = std::fs::read_to_string(dir.join("qrels/test.tsv")).unwrap();
    let labelled: Vec<(String, i64)> = qrels
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (q, tool) = (f.next()?, f.next()?);
            Some((texts.get(q)?.clone(), *ids.get(tool).filter(|&&id| id > 0)?))
        })
        .step_by(37)
        .collect();
    // Outcomes: the labelled tool passed, three semantic neighbours failed (one run each).
    let (support, test) = labelled.split_at(labelled.len() / 2);
    for (task, tool) in support.iter().take(300) {
        c.execute(
            "SELECT skills.record_run($1, (SELECT jsonb_agg(jsonb_build_object('skill_id', u.id, \
                 'passed', u.id = $2::bigint)) FROM (SELECT id FROM skills.search($1, k => 3, method => 'semantic') \
                 UNION SELECT $2::bigint) AS u), executor => 'batch-test', source_group => $1)",
            &[task, tool],
        )
        .unwrap();
    }
    let round: i32 = c.query_one("SELECT skills.fit()", &[]).unwrap().get(0);
    assert!(round > 0);
    let queries: Vec<String> = test.iter().take(120).map(|(q, _)| q.clone()).collect();
    assert!(queries.len() >= 50, "{} test queries", queries.len());
    let pools = ["code_generation", "data_ml", "docs_tooling"];
    // The batch ranks each query as skills.search does: by its whole key for a query of one
    // part (or with the parts' covering off), covering the parts of a query of several. The
    // sample holds both kinds.
    let one_part = |q: &str| pg_skills_kernels::needs::parts(q).len() < 2;
    assert!(queries.iter().any(|q| !one_part(q)) && queries.iter().any(|q| one_part(q)));
    for covering in ["on", "off"] {
        c.batch_execute(&format!("SET pg_skills.cover_request_parts = {covering}"))
            .unwrap();
        for (k, categories) in [(5, None), (12, None), (3, Some(&pools[..]))] {
            let got = batch(&mut c, &queries, k, categories);
            for (q, rows) in queries.iter().zip(&got) {
                let want = search(&mut c, q, k, categories);
                assert_eq!(
                    rows, &want,
                    "{q:?}, k {k}, categories {categories:?}, covering {covering}"
                );
            }
        }
    }
    // Asking for the GPU where there is none: the same rows, after a NOTICE.
    c.batch_execute("SET pg_skills.device = 'cuda'").unwrap();
    let gpu = batch(&mut c, &queries, 5, None);
    let cpu: Vec<Vec<i64>> = queries
        .iter()
        .map(|q| search(&mut c, q, 5, None).iter().map(|r| r.0).collect())
        .collect();
    let gpu_ids: Vec<Vec<i64>> = gpu
        .iter()
        .map(|r| r.iter().map(|x| x.0).collect())
        .collect();
    assert_eq!(gpu_ids, cpu);
}
