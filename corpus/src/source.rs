//! Where a tree of SKILL.md files comes from: repository, commit and licence.
//!
//! Order of evidence: explicit values from the caller, then a mirror manifest (`SOURCE.md` at
//! the tree root with `- Repository: URL` and `- Commit: SHA` lines, as in mirrored snapshots
//! that carry no `.git` and may sit inside another checkout), then git (`origin`, `HEAD`).

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceInfo {
    /// The folder paths are relative to (the git top level, or the tree root).
    pub root: PathBuf,
    pub repository: Option<String>,
    pub commit: Option<String>,
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn manifest_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l
            .trim_start_matches(['-', ' ', '*'])
            .strip_prefix(key)?
            .strip_prefix(':')?;
        let first = rest
            .split_whitespace()
            .next()?
            .trim_matches(['`', '<', '>']);
        (!first.is_empty()).then(|| first.to_owned())
    })
}

impl SourceInfo {
    pub fn detect(tree: &Path, repository: Option<String>, commit: Option<String>) -> SourceInfo {
        let tree = tree.canonicalize().unwrap_or_else(|_| tree.to_path_buf());
        let manifest = std::fs::read_to_string(tree.join("SOURCE.md")).unwrap_or_default();
        if let Some(manifest_repo) = manifest_value(&manifest, "Repository") {
            return SourceInfo {
                repository: repository.or(Some(manifest_repo)),
                commit: commit.or_else(|| manifest_value(&manifest, "Commit")),
                root: tree,
            };
        }
        if let Some(top) = git(&tree, &["rev-parse", "--show-toplevel"]) {
            return SourceInfo {
                root: PathBuf::from(top),
                repository: repository.or_else(|| git(&tree, &["remote", "get-url", "origin"])),
                commit: commit.or_else(|| git(&tree, &["rev-parse", "HEAD"])),
            };
        }
        SourceInfo {
            repository,
            commit,
            root: tree,
        }
    }

    /// A browsable URL for a file, when the repository is on GitHub and the commit is known.
    /// The prefix of the provenance locations of every file under `tree` (a folder inside this
    /// source): what a complete re-read of `tree` covers.
    pub fn location_prefix(&self, tree: &Path) -> String {
        let tree = tree.canonicalize().unwrap_or_else(|_| tree.to_path_buf());
        let rel = tree
            .strip_prefix(&self.root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = self
            .repository
            .clone()
            .unwrap_or_else(|| self.root.to_string_lossy().into_owned());
        if rel.is_empty() {
            format!("{base}:")
        } else {
            format!("{base}:{rel}/")
        }
    }

    pub fn file_url(&self, rel_path: &str) -> Option<String> {
        let repo = self.repository.as_deref()?;
        let commit = self.commit.as_deref()?;
        let base = repo.trim_end_matches(".git").trim_end_matches('/');
        let base = match base.strip_prefix("git@github.com:") {
            Some(rest) => format!("https://github.com/{rest}"),
            None => base.to_owned(),
        };
        base.starts_with("https://github.com/")
            .then(|| format!("{base}/blob/{commit}/{rel_path}"))
    }
}

const LICENCE_FILES: &[&str] = &["LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "COPYING"];

/// Names the licence in a licence file's text (SPDX id), or `None` if it is not recognised.
pub fn identify_licence(text: &str) -> Option<&'static str> {
    let t = text.to_lowercase();
    if t.contains("apache license") && t.contains("version 2.0") {
        Some("Apache-2.0")
    } else if t.contains("permission is hereby granted, free of charge") {
        Some("MIT")
    } else if t.contains("redistribution and use in source and binary forms") {
        Some(if t.contains("neither the name") {
            "BSD-3-Clause"
        } else {
            "BSD-2-Clause"
        })
    } else if t.contains("permission to use, copy, modify, and/or distribute") {
        Some("ISC")
    } else if t.contains("mozilla public license") {
        Some("MPL-2.0")
    } else if t.contains("gnu affero general public license") {
        Some("AGPL-3.0")
    } else if t.contains("gnu lesser general public license") {
        Some("LGPL")
    } else if t.contains("gnu general public license") {
        Some("GPL")
    } else if t.contains("creativecommons.org/publicdomain/zero") || t.contains("cc0 1.0") {
        Some("CC0-1.0")
    } else {
        None
    }
}

/// The licence file nearest to `dir`, searching upwards but not above `stop`.
pub fn nearest_licence_file(dir: &Path, stop: &Path) -> Option<PathBuf> {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        for name in LICENCE_FILES {
            let p = d.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
        if d == stop {
            break;
        }
        cur = d.parent();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_lines() {
        let m = "# x\n\n- Repository: https://github.com/obra/superpowers\n- Commit: `44c9b2d` (2026)\n";
        assert_eq!(
            manifest_value(m, "Repository").as_deref(),
            Some("https://github.com/obra/superpowers")
        );
        assert_eq!(manifest_value(m, "Commit").as_deref(), Some("44c9b2d"));
        assert_eq!(manifest_value(m, "Licence"), None);
    }

    #[test]
    fn manifest_wins_over_an_enclosing_checkout() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("SOURCE.md"),
            "- Repository: https://github.com/a/b\n- Commit: `c0ffee`\n",
        )
        .unwrap();
        let s = SourceInfo::detect(dir.path(), None, None);
        assert_eq!(s.repository.as_deref(), Some("https://github.com/a/b"));
        assert_eq!(s.commit.as_deref(), Some("c0ffee"));
        assert_eq!(s.root, dir.path().canonicalize().unwrap());
        let s = SourceInfo::detect(dir.path(), Some("https://example.org/x".into()), None);
        assert_eq!(s.repository.as_deref(), Some("https://example.org/x"));
    }

    #[test]
    fn github_urls() {
        let s = SourceInfo {
            root: PathBuf::new(),
            repository: Some("git@github.com:a/b.git".into()),
            commit: Some("abc".into()),
        };
        assert_eq!(
            s.file_url("skills/x/SKILL.md").unwrap(),
            "https://github.com/a/b/blob/abc/skills/x/SKILL.md"
        );
        let s = SourceInfo {
            repository: Some("https://gitlab.com/a/b".into()),
            ..s
        };
        assert_eq!(s.file_url("x"), None);
    }

    #[test]
    fn licence_texts() {
        assert_eq!(
            identify_licence("MIT License\n\nPermission is hereby granted, free of charge, to any"),
            Some("MIT")
        );
        assert_eq!(
            identify_licence("Apache License\nVersion 2.0, January 2004"),
            Some("Apache-2.0")
        );
        assert_eq!(identify_licence("All rights reserved."), None);
    }

    #[test]
    fn nearest_licence_walks_up_to_stop() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(nearest_licence_file(&deep, dir.path()), None);
        std::fs::write(dir.path().join("a/LICENSE"), "x").unwrap();
        assert_eq!(
            nearest_licence_file(&deep, dir.path()),
            Some(dir.path().join("a/LICENSE"))
        );
        assert_eq!(nearest_licence_file(&deep, &dir.path().join("a/b")), None);
    }
}
