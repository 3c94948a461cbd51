//! Readers: a directory tree of SKILL.md files, JSONL records, and BEIR `corpus.jsonl`.
//!
//! Every reader yields one [`Item`] per input (file or line): a parsed [`Skill`] or the reason
//! it was dropped. Readers never abort on bad input; only an unreadable root is an error.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::category::Category;
use crate::drop_reason::DropReason;
use crate::normalize::{normalize_body, normalize_inline, unify_line_endings};
use crate::skill::{parse_skill_md, provenance_entry, Skill};
use crate::source::{identify_licence, nearest_licence_file, SourceInfo};

/// One input and what became of it.
#[derive(Debug)]
pub enum Item {
    Skill(Skill),
    Dropped {
        location: String,
        reason: DropReason,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// Inputs larger than this many bytes are dropped as `too_large` without being read whole.
    pub max_bytes: u64,
}

/// Default of `pg_skills.max_document_size` (kB); the extension's GUC uses it too. Loads read the
/// server's current value; this default applies only where there is no server (`--dry-run`).
pub const DEFAULT_MAX_DOCUMENT_KB: i32 = 512;

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_bytes: DEFAULT_MAX_DOCUMENT_KB as u64 * 1024,
        }
    }
}

/// Decodes input bytes, rejecting NUL bytes (binary files) and invalid UTF-8.
fn decode(bytes: Vec<u8>) -> Result<String, DropReason> {
    if bytes.contains(&0) {
        return Err(DropReason::Binary);
    }
    String::from_utf8(bytes).map_err(|_| DropReason::InvalidUtf8)
}

/// The SKILL.md files under `root` (hidden folders included, `.git` skipped), sorted by path.
pub fn skill_files(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !root.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is not a directory", root.display()),
        ));
    }
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.file_name() == "SKILL.md")
        .map(|e| e.into_path())
        .collect();
    files.sort();
    Ok(files)
}

/// Reads a tree of SKILL.md files (for example a git checkout of a public skills repository).
pub struct TreeReader {
    pub source: SourceInfo,
    pub limits: ReadLimits,
}

impl TreeReader {
    pub fn read_file(&self, path: &Path) -> Item {
        // The source root is canonical; make the file path comparable with it.
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let path = canonical.as_path();
        let rel = path
            .strip_prefix(&self.source.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned();
        let location = format!(
            "{}:{rel}",
            self.source
                .repository
                .as_deref()
                .unwrap_or(&self.source.root.to_string_lossy())
        );
        match self.parse_file(path, &rel, &location) {
            Ok(skill) => Item::Skill(skill),
            Err(reason) => Item::Dropped { location, reason },
        }
    }

    fn parse_file(&self, path: &Path, rel: &str, location: &str) -> Result<Skill, DropReason> {
        let size = std::fs::metadata(path)
            .map_err(|e| DropReason::Io(e.to_string()))?
            .len();
        if size > self.limits.max_bytes {
            return Err(DropReason::TooLarge {
                bytes: size,
                limit: self.limits.max_bytes,
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        File::open(path)
            .and_then(|f| f.take(self.limits.max_bytes + 1).read_to_end(&mut bytes))
            .map_err(|e| DropReason::Io(e.to_string()))?;
        let text = decode(bytes)?;
        let folder = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        let mut skill = parse_skill_md(&text, folder.as_deref())?;
        let (license, basis, license_file) = match skill.license_field.clone() {
            Some(l) => (Some(l), "front matter", None),
            None => {
                let dir = path.parent().unwrap_or(path);
                match nearest_licence_file(dir, &self.source.root) {
                    Some(f) => {
                        let id = std::fs::read_to_string(&f)
                            .ok()
                            .as_deref()
                            .and_then(identify_licence);
                        let rel_file = f
                            .strip_prefix(&self.source.root)
                            .unwrap_or(&f)
                            .to_string_lossy()
                            .into_owned();
                        (
                            Some(id.unwrap_or("unrecognised").to_owned()),
                            "licence file",
                            Some(rel_file),
                        )
                    }
                    None => (None, "none found", None),
                }
            }
        };
        skill.provenance.push(provenance_entry(&[
            ("location", Some(location.to_owned())),
            ("source", Some("tree".into())),
            ("repository", self.source.repository.clone()),
            ("commit", self.source.commit.clone()),
            ("path", Some(rel.to_owned())),
            ("url", self.source.file_url(rel)),
            ("license", license),
            ("license_basis", Some(basis.to_owned())),
            ("license_file", license_file),
        ]));
        Ok(skill)
    }
}

/// Reads a JSON-lines file into `(line number, line)` pairs, mapping oversize, binary and
/// non-UTF-8 lines to drop reasons. An unreadable file is an error.
fn json_lines(
    path: &Path,
    limits: ReadLimits,
) -> std::io::Result<Vec<(usize, Result<String, DropReason>)>> {
    let mut reader = BufReader::new(File::open(path)?);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        // Read at most max_bytes + 1 of a line, then skip the rest of an oversize line.
        let n = (&mut reader)
            .take(limits.max_bytes + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let mut size = n as u64;
        if buf.last() != Some(&b'\n') && n as u64 > limits.max_bytes {
            let mut rest = Vec::new();
            size += reader.read_until(b'\n', &mut rest)? as u64;
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let item = if size > limits.max_bytes {
            Err(DropReason::TooLarge {
                bytes: size,
                limit: limits.max_bytes,
            })
        } else {
            decode(std::mem::take(&mut buf))
        };
        out.push((line_no, item));
    }
    Ok(out)
}

fn string_field(obj: &serde_json::Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match obj.get(*k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

/// A text field: a string (or a number, as text), or nothing when absent or null. Any other
/// JSON value is refused rather than read as empty, which would load the record without it.
fn text_field(
    obj: &serde_json::Map<String, Value>,
    keys: &[&str],
) -> Result<Option<String>, DropReason> {
    for k in keys {
        match obj.get(*k) {
            Some(Value::String(s)) => return Ok(Some(s.clone())),
            Some(Value::Number(n)) => return Ok(Some(n.to_string())),
            None | Some(Value::Null) => {}
            Some(other) => {
                let kind = match other {
                    Value::Bool(_) => "a boolean",
                    Value::Array(_) => "an array",
                    _ => "an object",
                };
                return Err(DropReason::BadJson(format!(
                    "`{k}` is {kind}, not a string"
                )));
            }
        }
    }
    Ok(None)
}

fn parse_object(line: &str) -> Result<serde_json::Map<String, Value>, DropReason> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(DropReason::BadJson("record is not a JSON object".into())),
        Err(e) => Err(DropReason::BadJson(e.to_string())),
    }
}

fn reject_nul(skill: &Skill) -> Result<(), DropReason> {
    let has_nul = [&skill.name, &skill.description, &skill.instructions]
        .iter()
        .any(|s| s.contains('\0'));
    if has_nul {
        Err(DropReason::Binary)
    } else {
        Ok(())
    }
}

/// JSONL records: `{"name", "description", "instructions" (or "body"), "category"?, "license"?,
/// "id"?, "provenance"? (an object merged into the provenance entry)}`.
pub fn read_jsonl(path: &Path, limits: ReadLimits) -> std::io::Result<Vec<Item>> {
    // Locations must not depend on how the path was typed.
    let file = path.canonicalize()?.to_string_lossy().into_owned();
    read_records(
        path,
        limits,
        |line_no| format!("jsonl:{file}#{line_no}"),
        |obj, location| {
            if let Some(id) = string_field(obj, &["id"]) {
                *location = format!("jsonl:{file}#{id}");
            }
            jsonl_record(obj, location)
        },
    )
}

/// One [`Item`] per JSON object line. `location` starts as `line_location(line number)`; `parse`
/// may refine it (to a record id) before it is recorded in provenance or in a drop report.
fn read_records(
    path: &Path,
    limits: ReadLimits,
    line_location: impl Fn(usize) -> String + Sync,
    parse: impl Fn(&serde_json::Map<String, Value>, &mut String) -> Result<Skill, DropReason> + Sync,
) -> std::io::Result<Vec<Item>> {
    use rayon::prelude::*;
    // Parsing and normalising are most of a large file's reading: on every core, in order.
    Ok(json_lines(path, limits)?
        .into_par_iter()
        .map(|(line_no, line)| {
            let mut location = line_location(line_no);
            match line.and_then(|l| parse(&parse_object(&l)?, &mut location)) {
                Ok(s) => Item::Skill(s),
                Err(reason) => Item::Dropped { location, reason },
            }
        })
        .collect())
}

fn jsonl_record(obj: &serde_json::Map<String, Value>, location: &str) -> Result<Skill, DropReason> {
    let name = text_field(obj, &["name"])?
        .map(|n| normalize_inline(&n))
        .unwrap_or_default();
    if name.is_empty() {
        return Err(DropReason::MissingName("record has no name".into()));
    }
    let category = match text_field(obj, &["category"])? {
        Some(c) => Some(c.parse::<Category>().map_err(DropReason::BadJson)?),
        None => None,
    };
    let description = normalize_inline(&text_field(obj, &["description"])?.unwrap_or_default());
    let instructions = normalize_body(&unify_line_endings(
        &text_field(obj, &["instructions", "body"])?.unwrap_or_default(),
    ));
    if description.is_empty() && instructions.is_empty() {
        return Err(DropReason::Empty);
    }
    let license = text_field(obj, &["license"])?;
    let mut entry = provenance_entry(&[
        ("location", Some(location.to_owned())),
        ("source", Some("jsonl".into())),
        ("license", license.clone()),
    ]);
    if let (Some(Value::Object(extra)), Value::Object(e)) = (obj.get("provenance"), &mut entry) {
        for (k, v) in extra {
            if k != "location" {
                e.insert(k.clone(), v.clone());
            }
        }
    }
    let skill = Skill {
        name,
        description,
        instructions,
        category,
        license_field: license,
        provenance: vec![entry],
    };
    reject_nul(&skill)?;
    Ok(skill)
}

/// BEIR `corpus.jsonl`: `{"_id", "title", "text"}`. A `text` with SKILL.md front matter is parsed
/// as a SKILL.md; otherwise the text is the description (short) or the instructions (long).
pub fn read_beir(path: &Path, dataset: &str, limits: ReadLimits) -> std::io::Result<Vec<Item>> {
    read_records(
        path,
        limits,
        |line_no| format!("beir:{dataset}:line{line_no}"),
        |obj, location| {
            let id = string_field(obj, &["_id"])
                .ok_or_else(|| DropReason::MissingName("BEIR record has no _id".into()))?;
            *location = format!("beir:{dataset}:{id}");
            beir_record(obj, &id, dataset, location)
        },
    )
}

/// Texts up to this many characters become the description of a non-SKILL.md BEIR document.
const BEIR_SHORT_TEXT_CHARS: usize = 1024;

fn beir_record(
    obj: &serde_json::Map<String, Value>,
    id: &str,
    dataset: &str,
    location: &str,
) -> Result<Skill, DropReason> {
    let title = text_field(obj, &["title"])?
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| id.to_owned());
    let text = text_field(obj, &["text"])?.unwrap_or_default();
    let mut skill = if unify_line_endings(&text).starts_with("---\n") {
        parse_skill_md(&text, Some(&title))?
    } else {
        let inline = normalize_inline(&text);
        let (description, instructions) = if inline.chars().count() <= BEIR_SHORT_TEXT_CHARS {
            (inline, String::new())
        } else {
            (String::new(), normalize_body(&unify_line_endings(&text)))
        };
        Skill {
            name: normalize_inline(&title),
            description,
            instructions,
            category: None,
            license_field: None,
            provenance: vec![],
        }
    };
    reject_nul(&skill)?;
    skill.provenance.push(provenance_entry(&[
        ("location", Some(location.to_owned())),
        ("source", Some("beir".into())),
        ("dataset", Some(dataset.to_owned())),
        ("doc_id", Some(id.to_owned())),
        ("license", skill.license_field.clone()),
    ]));
    Ok(skill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(path: &Path, bytes: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn dropped_key(item: &Item) -> Option<&'static str> {
        match item {
            Item::Dropped { reason, .. } => Some(reason.key()),
            Item::Skill(_) => None,
        }
    }

    #[test]
    fn tree_reader_handles_good_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            &root.join("LICENSE"),
            b"MIT License\n\nPermission is hereby granted, free of charge, to any person",
        );
        write(
            &root.join("skills/good/SKILL.md"),
            b"---\nname: good\ndescription: d\n---\n# Good\n\n```sh\nls\n```\n",
        );
        write(
            &root.join(".github/skills/hidden/SKILL.md"),
            b"---\nname: hidden\ndescription: d\nlicense: Apache-2.0\n---\nbody\n",
        );
        write(
            &root.join("skills/yaml/SKILL.md"),
            b"---\nname: [broken\n---\nbody\n",
        );
        write(
            &root.join("skills/utf8/SKILL.md"),
            b"---\nname: x\n---\n\xff\xfe bad\n",
        );
        write(
            &root.join("skills/bin/SKILL.md"),
            b"---\nname: x\n---\n\0\0\0",
        );
        write(
            &root.join("skills/noname/SKILL.md"),
            b"---\ndescription: no name\n---\nbody\n",
        );
        write(&root.join("skills/big/SKILL.md"), &vec![b'a'; 2048]);
        write(&root.join("skills/ignored/README.md"), b"# not a skill");
        write(
            &root.join(".git/SKILL.md"),
            b"---\nname: in-git-dir\n---\nx\n",
        );
        let reader = TreeReader {
            source: SourceInfo {
                root: root.to_path_buf(),
                repository: None,
                commit: None,
            },
            limits: ReadLimits { max_bytes: 1024 },
        };
        let files = skill_files(root).unwrap();
        assert_eq!(files.len(), 7);
        let items: Vec<Item> = files.iter().map(|f| reader.read_file(f)).collect();
        let mut keys: Vec<_> = items.iter().filter_map(dropped_key).collect();
        keys.sort();
        assert_eq!(
            keys,
            vec![
                "bad_yaml",
                "binary",
                "invalid_utf8",
                "missing_name",
                "too_large"
            ]
        );
        let skills: Vec<&Skill> = items
            .iter()
            .filter_map(|i| match i {
                Item::Skill(s) => Some(s),
                _ => None,
            })
            .collect();
        let good = skills.iter().find(|s| s.name == "good").unwrap();
        assert_eq!(good.provenance[0]["license"], "MIT");
        assert_eq!(good.provenance[0]["license_basis"], "licence file");
        assert_eq!(good.provenance[0]["path"], "skills/good/SKILL.md");
        let hidden = skills.iter().find(|s| s.name == "hidden").unwrap();
        assert_eq!(hidden.provenance[0]["license"], "Apache-2.0");
        assert_eq!(hidden.provenance[0]["license_basis"], "front matter");
    }

    #[test]
    fn jsonl_reader_reports_each_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut f = File::create(&p).unwrap();
        writeln!(f, r#"{{"id":"a","name":"alpha","description":"d","instructions":"i","category":"testing"}}"#).unwrap();
        writeln!(f, "not json").unwrap();
        writeln!(f, r#"{{"description":"no name"}}"#).unwrap();
        writeln!(
            f,
            r#"{{"name":"c","description":"d","category":"cooking"}}"#
        )
        .unwrap();
        writeln!(f, r#"{{"name":"nul","description":"a\u0000b"}}"#).unwrap();
        writeln!(f).unwrap();
        f.write_all(b"{\"name\":\"\xff\"}\n").unwrap();
        writeln!(f, r#"{{"name":"big","description":"{}"}}"#, "x".repeat(300)).unwrap();
        writeln!(f, "[1,2]").unwrap();
        writeln!(
            f,
            r#"{{"name":"obj","description":"d","instructions":{{"a":1}}}}"#
        )
        .unwrap();
        writeln!(f, r#"{{"name":["x"],"description":"d"}}"#).unwrap();
        writeln!(
            f,
            r#"{{"name":"n","description":null,"instructions":"i","license":null}}"#
        )
        .unwrap();
        drop(f);
        let items = read_jsonl(&p, ReadLimits { max_bytes: 200 }).unwrap();
        let keys: Vec<_> = items.iter().map(dropped_key).collect();
        assert_eq!(
            keys,
            vec![
                None,
                Some("bad_json"),
                Some("missing_name"),
                Some("bad_json"),
                Some("binary"),
                Some("invalid_utf8"),
                Some("too_large"),
                Some("bad_json"),
                Some("bad_json"),
                Some("bad_json"),
                None
            ]
        );
        match &items[8] {
            Item::Dropped { reason, .. } => {
                assert_eq!(
                    reason.to_string(),
                    "bad_json: `instructions` is an object, not a string"
                )
            }
            other => panic!("{other:?}"),
        }
        match &items[0] {
            Item::Skill(s) => {
                assert_eq!(s.category, Some(Category::Testing));
                assert!(s.provenance[0]["location"]
                    .as_str()
                    .unwrap()
                    .ends_with("#a"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn beir_reader_parses_skill_md_and_plain_text() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("corpus.jsonl");
        std::fs::write(
            &p,
            concat!(
                r#"{"_id":"t1","title":"Tool","text":"Converts text to SQL."}"#, "\n",
                r#"{"_id":"s1","title":"s1","text":"---\nname: real-name\ndescription: d\n---\nbody"}"#, "\n",
                r#"{"title":"no id"}"#, "\n",
            ),
        )
        .unwrap();
        let items = read_beir(&p, "demo", ReadLimits::default()).unwrap();
        match (&items[0], &items[1]) {
            (Item::Skill(a), Item::Skill(b)) => {
                assert_eq!(
                    (a.name.as_str(), a.description.as_str()),
                    ("Tool", "Converts text to SQL.")
                );
                assert_eq!(a.provenance[0]["doc_id"], "t1");
                assert_eq!(b.name, "real-name");
                assert_eq!(b.provenance[0]["location"], "beir:demo:s1");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(dropped_key(&items[2]), Some("missing_name"));
    }
}
