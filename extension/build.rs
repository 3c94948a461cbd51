// The schema comes from ../sql/*.sql through `extension_sql_file!`, which cargo does not track as
// an input of this crate: without this, an edit to a .sql file alone installs the old schema.
fn main() {
    println!("cargo:rerun-if-changed=../sql");
    println!("cargo:rerun-if-changed=build.rs");
}
