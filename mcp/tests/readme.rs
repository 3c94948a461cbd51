//! The Python example in docs/python.md is the file the test suite runs, character for character.

#[test]
fn the_readme_shows_feedback_loop_py_verbatim() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let doc = std::fs::read_to_string(format!("{root}/docs/python.md")).unwrap();
    let example = std::fs::read_to_string(format!("{root}/examples/feedback_loop.py")).unwrap();
    // From the first import on (the docstring above it is the file's own header).
    let code = &example[example.find("import os").expect("imports")..];
    let fenced = format!("```python\n{}\n```", code.trim_end());
    assert!(
        doc.contains(&fenced),
        "docs/python.md's psycopg example differs from examples/feedback_loop.py: copy the file's \
         code (from `import os`) into its ```python block"
    );
}
