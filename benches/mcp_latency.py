#!/usr/bin/env python3
"""Latency of skills-mcp tool calls against the same SQL sent directly with psycopg, in one run.

    PG_SKILLS_DSN="host=127.0.0.1 port=54329 user=postgres dbname=postgres" \\
        python3 benches/mcp_latency.py [path/to/skills-mcp] [--calls N]

Both sides use warm connections and the same queries (the demo corpus's task phrasings), run one
after the other. The MCP side is a full JSON-RPC round trip: the client writes the request to the
server's stdin, the server validates the arguments, runs the statement on a pooled connection,
builds the JSON answer, and the client reads and parses it. The SQL side runs the statement that
skills-mcp sends, through psycopg. Prints p50 and p95 per tool and the ratio MCP / SQL.
"""

import json
import os
import statistics
import sys
import time

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from mcp_session import Session  # noqa: E402

DSN = os.environ.get("PG_SKILLS_DSN", "host=127.0.0.1 port=54329 user=postgres dbname=postgres")
QUERIES = [
    "my pytest tests repeat the same database setup in every test",
    "roll out a web service to kubernetes with health checks",
    "keep my container images small",
    "find where my rust program panicked",
    "set up continuous integration for a python project",
    "a query got slow after the table grew",
    "which commit broke the build",
    "write docs for our REST API",
]

# The statement skills-mcp sends for search_skills (mcp/src/tools.rs SEARCH_SQL), with the
# arguments it passes for {"query": q, "k": 5, "method": m}.
SEARCH_SQL = """
SELECT coalesce(jsonb_agg(jsonb_build_object(
           'rank', r.rank, 'id', r.id, 'name', r.name, 'category', r.category,
           'description', s.description, 'score', r.score, 'tokens', r.tokens,
           'version', s.version, 'content_hash', s.content_hash,
           'parts', jsonb_strip_nulls(jsonb_build_object(
               'bm25', r.bm25, 'semantic', r.semantic, 'graph', r.graph,
               'beta', r.beta, 'dk_term', r.dk_term, 'event_term', r.event_term, 'held_back', r.held_back, 'coverage', r.coverage)),
           'provenance', s.provenance) ORDER BY r.rank), '[]'::jsonb)
FROM skills.search(%s, categories => NULL, k => 5, token_budget => NULL, min_score => NULL,
                   method => %s)
     WITH ORDINALITY AS r(id, name, category, score, tokens, bm25, semantic, graph, beta,
                          dk_term, event_term, held_back, coverage, complement_of, complement,
                          risk, risk_rules, rank)
JOIN skills.skill AS s ON s.id = r.id"""


def percentiles(samples):
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(0.95 * len(s)))]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    calls = 200
    if "--calls" in sys.argv:
        calls = int(sys.argv[sys.argv.index("--calls") + 1])
    target = os.environ.get("CARGO_TARGET_DIR", "/var/cache/pg_skills/target")
    server = args[0] if args else os.path.join(target, "debug", "skills-mcp")
    build = "release" if "/release/" in server else "debug"

    session = Session([server, "--pool-size", "1"], DSN)
    session.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "mcp_latency", "version": "1"}})
    session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    rows = []
    with psycopg.connect(DSN, autocommit=True) as conn:
        for method in ["bm25", "keyopt"]:
            # Warm both sides: connection, encoder, the backend's query-key cache.
            for q in QUERIES:
                session.call("search_skills", {"query": q, "k": 5, "method": method})
                conn.execute(SEARCH_SQL, (q, method)).fetchone()
            mcp, sql = [], []
            for i in range(calls):
                q = QUERIES[i % len(QUERIES)]
                t = time.perf_counter()
                result = session.call("search_skills", {"query": q, "k": 5, "method": method})
                mcp.append(time.perf_counter() - t)
                assert result.get("isError") is not True, result
                t = time.perf_counter()
                json.dumps(conn.execute(SEARCH_SQL, (q, method)).fetchone()[0])
                sql.append(time.perf_counter() - t)
            (m50, m95), (s50, s95) = percentiles(mcp), percentiles(sql)
            rows.append((method, m50, m95, s50, s95))
    session.close()

    print(f"search_skills, k = 5, {calls} calls each, skills-mcp {build} build, one connection each side")
    print("| method | MCP p50 | MCP p95 | SQL p50 | SQL p95 | MCP / SQL (p50) |")
    print("|---|---|---|---|---|---|")
    for method, m50, m95, s50, s95 in rows:
        print(f"| {method} | {m50 * 1e3:.2f} ms | {m95 * 1e3:.2f} ms | {s50 * 1e3:.2f} ms "
              f"| {s95 * 1e3:.2f} ms | {m50 / s50:.2f}x |")


if __name__ == "__main__":
    main()
