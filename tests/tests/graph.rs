//! The skill graph under concurrency: a graph build (`skills.build_graph`, which the embedder
//! worker runs after every drained batch of keys) and the statements that change edges while it
//! runs. A build locks `skills.graph_state`'s row before it touches an edge; every statement
//! that changes edges must take that lock before it locks an edge or a skill row, or the two
//! wait for each other (PostgreSQL then cancels one with "deadlock detected").

use std::time::{Duration, Instant};

use pg_skills_server_tests::{setup_extension, skip, Client, Cluster};

/// A deadlock is reported after deadlock_timeout: short, so that a regression fails fast.
const CONF: &str = "deadlock_timeout = 100ms\n";

/// Two skills whose documents make a dependency edge, plus a third, and automatic key-similarity
/// edges between all three (as an earlier build with keys would have left them).
fn library(client: &mut Client) -> (i64, i64, i64) {
    client
        .batch_execute(
            "TRUNCATE skills.edge;
             DELETE FROM skills.skill;
             INSERT INTO skills.skill (name, description, instructions) VALUES
               ('docker-build', 'Build a container image.', 'Run docker build with a tag.'),
               ('k8s-deploy', 'Deploy to a cluster.', E'## Prerequisites\\n- an image built with `docker-build`\\n'),
               ('flaky-tests', 'Find flaky tests.', 'Rerun failing tests to see which ones flake.');",
        )
        .unwrap();
    let id = |client: &mut Client, name: &str| -> i64 {
        client
            .query_one("SELECT id FROM skills.skill WHERE name = $1", &[&name])
            .unwrap()
            .get(0)
    };
    let (build, deploy, flaky) = (
        id(client, "docker-build"),
        id(client, "k8s-deploy"),
        id(client, "flaky-tests"),
    );
    client
        .execute(
            "INSERT INTO skills.edge (from_skill, to_skill, type, weight, provenance)
             SELECT f, t, 'semantic', 0.8, 'auto:key-similarity'
             FROM unnest($1::bigint[]) AS f, unnest($1::bigint[]) AS t WHERE f <> t",
            &[&vec![build, deploy, flaky]],
        )
        .unwrap();
    (build, deploy, flaky)
}

/// Runs `statement` in a second session while this session's transaction holds the lock a build
/// takes first, waits until the statement waits, runs the build in the first session and commits;
/// both must succeed (before statements took the lock first, each ended in a deadlock).
fn statement_during_a_build(cluster: &Cluster, admin: &mut Client, statement: String) {
    let mut other = cluster.client();
    let pid: i32 = other
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut build = admin.transaction().unwrap();
    // The build's first step (sql/graph.sql): one build at a time, edge changes wait for it.
    build
        .batch_execute("SELECT FROM skills.graph_state FOR UPDATE")
        .unwrap();
    let run = {
        let statement = statement.clone();
        std::thread::spawn(move || {
            other
                .batch_execute(&statement)
                .map_err(|e| format!("{e:?}"))
        })
    };
    let mut watcher = cluster.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: bool = watcher
            .query_one(
                "SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if waiting {
            break;
        }
        assert!(
            !run.is_finished(),
            "`{statement}` finished while a build held graph_state: it did not wait for the build"
        );
        assert!(Instant::now() < deadline, "`{statement}` never waited");
        std::thread::sleep(Duration::from_millis(20));
    }
    let built = build.batch_execute("SELECT skills.build_graph(neighbours => 0)");
    let committed = build.commit();
    let statement_result = run.join().unwrap();
    assert!(
        built.is_ok() && committed.is_ok(),
        "the build failed while `{statement}` waited: {built:?} {committed:?}"
    );
    assert!(
        statement_result.is_ok(),
        "`{statement}` failed while a build ran: {statement_result:?}"
    );
}

fn count(client: &mut Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).unwrap().get(0)
}

#[test]
fn edge_changes_during_a_build_wait_for_it_instead_of_deadlocking() {
    if skip() {
        return;
    }
    let cluster = Cluster::start_with("graph-locks", 54376, CONF);
    let mut admin = cluster.client();
    setup_extension(&mut admin);

    // Deleting a skill deletes its edges through the foreign keys' cascade.
    let (_, deploy, _) = library(&mut admin);
    statement_during_a_build(
        &cluster,
        &mut admin,
        format!("DELETE FROM skills.skill WHERE id = {deploy}"),
    );
    assert_eq!(
        count(
            &mut admin,
            &format!("SELECT count(*) FROM skills.edge WHERE {deploy} IN (from_skill, to_skill)")
        ),
        0,
        "the deleted skill's edges are gone"
    );

    // Deleting an automatic edge by hand: the build deletes the same rows.
    let (build, _, flaky) = library(&mut admin);
    statement_during_a_build(
        &cluster,
        &mut admin,
        format!("DELETE FROM skills.edge WHERE from_skill = {flaky} OR to_skill = {build}"),
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM skills.edge WHERE type = 'semantic'"
        ),
        0,
        "a rules-only build leaves no key-similarity edges"
    );

    // Pinning the edge the build writes from the documents: the build inserts the same key.
    let (build, deploy, _) = library(&mut admin);
    assert_eq!(
        count(
            &mut admin,
            &format!(
                "SELECT count(*) FROM skills.rule_edges() WHERE from_skill = {build} AND to_skill = {deploy}
                   AND type = 'dependency'"
            )
        ),
        1,
        "the documents make a dependency edge from docker-build to k8s-deploy"
    );
    statement_during_a_build(
        &cluster,
        &mut admin,
        format!(
            "INSERT INTO skills.edge (from_skill, to_skill, type, weight) VALUES ({build}, {deploy}, 'dependency', 2)
             ON CONFLICT (from_skill, to_skill, type) DO UPDATE SET provenance = 'manual', weight = 2"
        ),
    );
    assert_eq!(
        count(
            &mut admin,
            &format!(
                "SELECT count(*) FROM skills.edge WHERE from_skill = {build} AND to_skill = {deploy}
                   AND type = 'dependency' AND provenance = 'manual' AND weight = 2"
            )
        ),
        1,
        "the pinned dependency edge replaced the build's"
    );
    // A build after it keeps the pinned edge.
    admin
        .batch_execute("SELECT skills.build_graph(neighbours => 0)")
        .unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM skills.edge WHERE type = 'dependency' AND provenance = 'manual'"
        ),
        1
    );
}
