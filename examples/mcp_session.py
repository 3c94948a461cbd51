#!/usr/bin/env python3
"""An MCP client session with skills-mcp, the way a coding agent's host runs one.

Starts the server on pipes against a database holding the demo corpus (corpus/demo), speaks
JSON-RPC 2.0 over its stdin/stdout (initialize, tools/list, tools/call for every tool), prints
the exchange and checks each answer. Standard library only.

    PG_SKILLS_DSN="host=127.0.0.1 port=54329 user=postgres dbname=postgres" \\
        python3 examples/mcp_session.py [path/to/skills-mcp]

The server binary defaults to $SKILLS_MCP, then $CARGO_TARGET_DIR/debug/skills-mcp. Exits
non-zero when a check fails; the last line counts the checks.
"""

import json
import os
import queue
import subprocess
import sys
import threading

DEMO_DSN = "host=127.0.0.1 port=54329 user=postgres dbname=postgres"


class Session:
    def __init__(self, command, dsn):
        self.proc = subprocess.Popen(
            command + ["--dsn", dsn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 1
        self.pending = {}

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message):
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while rid not in self.pending:
            line = self.lines.get(timeout=120)
            if line is None:
                raise RuntimeError("skills-mcp exited")
            message = json.loads(line)
            if "id" in message:
                self.pending[message["id"]] = message
        return self.pending.pop(rid)

    def call(self, tool, arguments):
        response = self.request("tools/call", {"name": tool, "arguments": arguments})
        if "error" in response:
            raise RuntimeError(f"{tool}: {response['error']}")
        return response["result"]

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


passed = 0
failed = 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"  ok    {what}")
    else:
        failed += 1
        print(f"  FAIL  {what} {detail}")


def show(direction, message, limit=300):
    text = json.dumps(message)
    print(f"{direction} {text[:limit]}{' ...' if len(text) > limit else ''}")


def main():
    dsn = os.environ.get("PG_SKILLS_DSN", DEMO_DSN)
    if len(sys.argv) > 1:
        server = sys.argv[1]
    else:
        target = os.environ.get("CARGO_TARGET_DIR", "/var/cache/pg_skills/target")
        server = os.environ.get("SKILLS_MCP", os.path.join(target, "debug", "skills-mcp"))
    session = Session([server], dsn)
    try:
        run(session)
    finally:
        session.close()
    print(f"test result: {'ok' if failed == 0 else 'FAILED'}. {passed} passed; {failed} failed")
    return 0 if failed == 0 else 1


def run(s):
    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "mcp_session.py", "version": "1"},
    }
    show("->", {"method": "initialize", "params": init})
    response = s.request("initialize", init)
    show("<-", response)
    result = response["result"]
    check("initialize names the server", result["serverInfo"]["name"] == "skills-mcp")
    check("the server offers tools", "tools" in result["capabilities"])
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    response = s.request("tools/list", {})
    tools = [t["name"] for t in response["result"]["tools"]]
    show("<-", {"tools/list": tools})
    check(
        "tools/list has the four tools",
        tools == ["search_skills", "get_skill", "render_context", "report_outcome"],
        tools,
    )

    task = "my pytest tests repeat the same database setup in every test"
    args = {"query": task, "k": 3, "method": "bm25"}
    show("->", {"tools/call": "search_skills", "arguments": args})
    found = s.call("search_skills", args)["structuredContent"]
    for hit in found["results"]:
        print(f"     {hit['rank']}. {hit['name']:<34} score {hit['score']:.3f}  {hit['tokens']} tokens"
              f"  v{hit['version']}  {hit['provenance'][0].get('license', '?')}")
    names = [h["name"] for h in found["results"]]
    check("bm25 ranks pytest-fixtures first", names[:1] == ["pytest-fixtures"], names)
    check("three results with their version and hash",
          len(names) == 3 and all(len(h["content_hash"]) == 64 for h in found["results"]))

    args = {"query": task, "k": 3}
    found = s.call("search_skills", args)["structuredContent"]
    print(f"     keyopt: {[h['name'] for h in found['results']]}")
    check("the default method is keyopt", found["method"] == "keyopt")
    check("keyopt also puts pytest-fixtures first", found["results"][0]["name"] == "pytest-fixtures")
    top = found["results"][0]

    show("->", {"tools/call": "get_skill", "arguments": {"id": top["id"]}})
    doc = s.call("get_skill", {"id": top["id"]})["structuredContent"]
    print("     " + doc["skill_md"][:160].replace("\n", "\n     ") + " ...")
    check("get_skill returns the whole document",
          doc["name"] == "pytest-fixtures" and len(doc["instructions"]) > 200)
    check("as a SKILL.md file", doc["skill_md"].startswith('---\nname: "pytest-fixtures"\n'))

    args = {"query": task, "k": 2, "token_budget": 2500}
    show("->", {"tools/call": "render_context", "arguments": args})
    rendered = s.call("render_context", args)
    block = rendered["content"][0]["text"]
    ctx = rendered["structuredContent"]
    print("     " + block[:200].replace("\n", "\n     ") + " ...")
    print(f"     ({ctx['tokens']} tokens: {[x['name'] for x in ctx['skills']]})")
    check("render_context stays within the budget", 0 < ctx["tokens"] <= 2500, ctx["tokens"])
    check("the block holds the skills it lists",
          all(f"## Skill: {x['name']}\n" in block for x in ctx["skills"]) and len(ctx["skills"]) >= 1)

    served = [{"id": x["id"], "passed": x["name"] == "pytest-fixtures",
               "version": x["version"], "content_hash": x["content_hash"]} for x in ctx["skills"]]
    args = {"task": task, "executor": "mcp_session.py", "environment": {"python": "3.11"},
            "skills": served}
    show("->", {"tools/call": "report_outcome", "arguments": args})
    report = s.call("report_outcome", args)["structuredContent"]
    show("<-", report)
    check("report_outcome records one arm per served skill",
          report["arms"] == len(served) and report["passed"] == 1, report)

    bad = s.call("search_skills", {"query": task, "k": 500})
    show("<-", bad)
    check("a bad argument is a tool error the agent can read",
          bad.get("isError") is True and "`k` must be between 1 and 50" in bad["content"][0]["text"])


if __name__ == "__main__":
    sys.exit(main())
