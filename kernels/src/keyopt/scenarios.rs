//! The demo's feedback loop as data (examples/demo.sql runs the same 8 runs in SQL), shared by
//! the evaluation harness (`keyopt_eval`) and the regression test of the extension: agents report
//! 8 runs on "which change broke the build" tasks where git-bisect-regression passed and the
//! other served skills (the semantic top 4) failed. Afterwards, questions of that kind the fit
//! never saw should rank git-bisect-regression first, and questions of other kinds should keep
//! their own best skill: a few runs on one kind of task must not overrule relevance elsewhere
//! (the flaky-test questions are close to one of the runs, "CI went red on main overnight").

/// The skill that passed every support run.
pub const DEMO_WINNER: &str = "git-bisect-regression";

/// The support tasks, one run each (source group = the task).
pub const DEMO_SUPPORT: [&str; 8] = [
    "the release build broke sometime last week, find out which change did it",
    "a test that passed in March fails now, which commit introduced the regression",
    "performance dropped between two tags and I need the guilty change",
    "after pulling main the app crashes on start, which of the 40 new commits is it",
    "CI went red on main overnight without anyone touching that module",
    "a customer reports a bug that was not in version 2.3, find where it came in",
    "the output of the report changed between releases, which commit changed it",
    "the binary got twice as large in the last month, which change did that",
];

/// Questions the fit never saw, and the skill that should rank first after it.
pub const DEMO_QUESTIONS: [(&str, &str); 9] = [
    (
        "our nightly build started failing and nobody knows which commit caused it",
        "git-bisect-regression",
    ),
    (
        "the build broke after last night's merges, which commit did it",
        "git-bisect-regression",
    ),
    (
        "tests pass on the v1.4 tag but fail on main, find the first bad commit",
        "git-bisect-regression",
    ),
    (
        "CI is red again but the same tests pass when I rerun the job",
        "flaky-test-triage",
    ),
    (
        "a test fails about one run in ten on CI and always passes locally",
        "flaky-test-triage",
    ),
    (
        "our integration tests fail intermittently and rerunning makes them pass",
        "flaky-test-triage",
    ),
    (
        "my pytest tests repeat the same database setup",
        "pytest-fixtures",
    ),
    (
        "write a multi-stage Dockerfile so the runtime image has no compiler",
        "dockerfile-multi-stage-build",
    ),
    (
        "record why we chose Postgres over MongoDB for the team",
        "architecture-decision-records",
    ),
];
