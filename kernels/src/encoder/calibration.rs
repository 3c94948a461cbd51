//! Texts whose activations set the 8-bit products' smoothing factors
//! ([`super::bert::Bert::calibrate_with`]): requests of the kinds a skill library is asked, and
//! a few passages of the kind skills are written in, short and long. Written for this purpose;
//! no evaluation set's text is among them. What matters is that every channel that can run
//! wide is seen running wide, and such channels are the model's, not a text's.

/// The calibration texts (each a pass of its own or packed with its neighbours).
pub const TEXTS: &[&str] = &[
    "fix the failing unit test",
    "How do I find which commit broke the build?",
    "Write a Python script that renames every photo in a folder by the date it was taken.",
    "Our nightly build fails at random in the integration tests; how do I make them reliable?",
    "Convert this CSV of monthly sales into a chart and save it as a PNG.",
    "set up a PostgreSQL replica and check that it keeps up with the primary",
    "What's the weather going to be like in Lisbon this weekend?",
    "Find the memory leak in a long-running Node.js service that slowly uses more RAM.",
    "Deploy a containerised web app to Kubernetes with a rolling update and a health check.",
    "Migrate the database schema: add a non-null column with a default without locking the table.",
    "Why does my Rust program fail to compile with a borrow checker error on this loop?",
    "Write a SQL query that returns each customer's three most recent orders and their totals.",
    "# Git bisect\n\nUse this skill when a regression appeared between two known commits. \
     Mark a good and a bad commit, run the test at each step, and report the first bad commit \
     with its diff.",
    "## When to use\n\nWhen a test passes and fails on the same code. Rerun it in a loop, \
     record the seed, the order and the timing of each run, and look for shared state, \
     time-dependent assertions or network calls.",
    "ok",
    "SELECT id, name FROM users WHERE created_at > now() - interval '7 days' ORDER BY id;",
];
