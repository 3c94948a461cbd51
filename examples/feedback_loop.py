#!/usr/bin/env python3
"""The feedback loop from Python with psycopg: search, render context, report outcomes, fit,
search again and see the ranking change.

    PG_SKILLS_DSN="host=127.0.0.1 port=54329 user=postgres dbname=postgres" \\
        python3 examples/feedback_loop.py

Runs against a database with the demo corpus (./x demo). The agent here is simulated: on
tasks about tests that fail only some of the time, flaky-test-triage is what works and the
other skills it was served do not.
"""

import os
import sys

import psycopg

DSN = os.environ.get("PG_SKILLS_DSN", "host=127.0.0.1 port=54329 user=postgres dbname=postgres")
HELPFUL = "flaky-test-triage"
TASK = "CI is red again but the same tests pass when I rerun the job"
SIMILAR_TASKS = [
    "the build fails on CI every few runs and then passes on retry",
    "a test in the payments suite fails about one run in twenty",
    "our end-to-end tests are green locally and sometimes red in the pipeline",
    "tests pass alone but fail when the whole suite runs in parallel",
    "the nightly job fails on a different test each night",
    "retrying the CI job makes the failure go away, find out why",
    "a timing-dependent test breaks under load on the build server",
    "intermittent assertion failure in the integration tests",
]


def ranking(conn, task, k=3):
    return conn.execute(
        "SELECT r.id, r.name, r.score, s.version, s.content_hash "
        "FROM skills.search(%s, k => %s) WITH ORDINALITY AS r "
        "JOIN skills.skill AS s USING (id) ORDER BY r.ordinality",
        (task, k),
    ).fetchall()


def show(title, rows):
    print(title)
    for rank, (_, name, score, _, _) in enumerate(rows, 1):
        print(f"  {rank}. {name:<34} {score:7.3f}")


with psycopg.connect(DSN, autocommit=True) as conn:
    # 1. Search: the default method is keyopt, which also learns from outcomes.
    before = ranking(conn, TASK)
    show(f"before: {TASK!r}", before)

    # 2. The served skills as one prompt block for the agent, within 2,500 tokens.
    context = conn.execute(
        "SELECT skills.render_context(%s, k => 2, token_budget => 2500)", (TASK,)
    ).fetchone()[0]
    print(f"\ncontext block: {len(context)} characters, first line {context.splitlines()[0]!r}")

    # 3. The agent works on similar tasks and reports, for each, how every served skill did.
    for task in SIMILAR_TASKS:
        served = ranking(conn, task, k=3)
        arms = [
            {"skill_id": sid, "passed": name == HELPFUL, "version": version, "content_hash": h}
            for sid, name, _, version, h in served
        ]
        if not any(name == HELPFUL for _, name, _, _, _ in served):
            sid = conn.execute("SELECT id FROM skills.skill WHERE name = %s", (HELPFUL,)).fetchone()[0]
            arms.append({"skill_id": sid, "passed": True})
        conn.execute(
            "SELECT skills.record_run(%s, %s::jsonb, executor => 'feedback_loop.py', "
            "environment => '{\"ci\": \"github-actions\"}')",
            (task, psycopg.types.json.Jsonb(arms)),
        )
    print(f"\nreported {len(SIMILAR_TASKS)} runs: {HELPFUL} passed, the other served skills failed")

    # 4. Fit a KeyOpt round from every recorded run (the fitter worker also does this on its
    #    schedule when pg_skills.fit_interval is set).
    round_no = conn.execute("SELECT skills.fit()").fetchone()[0]
    events, settings = conn.execute(
        "SELECT events, settings FROM skills.keyopt_rounds WHERE round = %s", (round_no,)
    ).fetchone()
    print(f"fitted round {round_no} from {events} runs; cross-validation chose {settings}")

    # 5. Search again.
    after = ranking(conn, TASK)
    show(f"\nafter: {TASK!r}", after)

    place = lambda rows: next((i for i, r in enumerate(rows) if r[1] == HELPFUL), None)
    print(f"\n{HELPFUL}: rank {'-' if place(before) is None else place(before) + 1}"
          f" -> {'-' if place(after) is None else place(after) + 1}")
    if place(after) != 0:
        sys.exit(f"expected {HELPFUL} first after the fit")
    print("test result: ok. 1 passed; 0 failed")
