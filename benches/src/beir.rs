//! Queries and relevance judgements of a BEIR-layout dataset
//! (`queries.jsonl` with `_id`/`text`, `qrels/test.tsv` with `query-id  corpus-id  score`).

use std::collections::HashMap;
use std::path::Path;

/// query id -> (document id -> graded relevance > 0)
pub type Qrels = HashMap<String, HashMap<String, u32>>;

pub fn read_queries(dir: &Path) -> std::io::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(dir.join("queries.jsonl"))?;
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| std::io::Error::other(format!("queries.jsonl line {}: {e}", i + 1)))?;
        let id = v["_id"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v["_id"].to_string());
        out.push((id, v["text"].as_str().unwrap_or_default().to_owned()));
    }
    Ok(out)
}

pub fn read_qrels(dir: &Path) -> std::io::Result<Qrels> {
    let text = std::fs::read_to_string(dir.join("qrels/test.tsv"))?;
    let mut qrels = Qrels::new();
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < 3 {
            continue;
        }
        let rel: u32 = cols[2].trim().parse().unwrap_or(0);
        if rel > 0 {
            qrels
                .entry(cols[0].to_owned())
                .or_default()
                .insert(cols[1].to_owned(), rel);
        }
    }
    Ok(qrels)
}
