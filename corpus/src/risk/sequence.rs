//! Rules that read neighbouring lines: a download followed by running the file, and a dropped
//! database judged by its name and by a confirmation nearby.

use std::sync::OnceLock;

use regex::Regex;

use super::context::{self, Line};
use super::{Field, Finding, Level, Mitigation};

/// How many logical lines after a download its execution still counts as the same step.
const WINDOW: usize = 6;

struct Patterns {
    download: Regex,
    url_file: Regex,
    verify: Regex,
    drop: Regex,
    disposable: Regex,
    confirm: Regex,
}

/// Sources of the patterns the rules here test on logical lines (a line where none matches
/// starts no finding).
pub fn line_sources() -> [&'static str; 3] {
    let p = patterns();
    [p.download.as_str(), p.url_file.as_str(), p.drop.as_str()]
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        // curl -o FILE / --output FILE, wget -O FILE / plain wget URL, PowerShell -OutFile or
        // DownloadFile(url, FILE), Python urlretrieve(url, FILE).
        download: context::regex(
            r#"(?i)(?:\baria2c\b[^\n]*?\s-o\s*["']?(?P<a>[^\s"';|&]+)|\bcurl\b[^\n]*?(?:\s-[a-zA-Z]*o\s*|--output[=\s]+)["']?(?P<c>[^\s"';|&]+)|\bwget\b[^\n]*?(?:\s-O\s*|--output-document[=\s]+)["']?(?P<w>[^\s"';|&]+)|\b(?:invoke-webrequest|iwr)\b[^\n]*?-outfile\s+["']?(?P<p>[^\s"';|&]+)|downloadfile\(\s*["'][^"']+["']\s*,\s*["']?(?P<d>[^"')\s,]+)|urlretrieve\(\s*["'][^"']+["']\s*,\s*["'](?P<u>[^"']+)["'])"#,
        ),
        url_file: context::regex(r#"(?i)\bwget\s+(?:-[\w-]+\s+)*["']?https?://[^\s"']*/(?P<f>[^/\s"'?#]+)"#),
        verify: context::regex(
            r"(?i)\b(?:sha(?:1|256|512)sum\s+(?:-c|--check)|shasum\s+(?:-a\s+\d+\s+)?(?:-c|--check)|gpg\s+--verify|cosign\s+verify|minisign\s+-V|get-filehash|gh\s+attestation\s+verify|slsa-verifier)",
        ),
        drop: context::regex(
            r#"(?i)\bdrop\s+(?:database|schema)\s+(?:if\s+exists\s+)?(?P<n>["`\w.$-]+)|\bdropdb\b[^\n;&|]*?\s["']?(?P<d>[\w.${}][\w.${}-]*)["']?\s*(?:$|[;&|'"`)])|\bdb\.dropDatabase\(\)|\b(?:redis-cli\s+)?flushall\b"#,
        ),
        disposable: context::regex(r"(?i)(?:test|tmp|temp|scratch|throwaway|sandbox|example|demo|fixture|ci_|_ci\b|dev_|_dev\b)"),
        confirm: context::regex(
            r"(?i)\b(?:confirm(?:ation|ed)?|are\s+you\s+sure|ask\s+(?:the\s+user|for\s+(?:approval|permission))|read\s+-p|--interactive|backup|back\s+up|pg_dump)\b",
        ),
    })
}

fn basename(path: &str) -> &str {
    path.trim_end_matches(['/', '\\'])
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(path)
}

/// True when `line` runs or makes executable a file whose path ends with `name`: chmod +x; a
/// path-qualified call at a command's start (./x, /tmp/x, $DIR/x); an interpreter, installer or
/// PowerShell's call operator given the file; source. A line that starts by downloading,
/// listing, reading or hashing a file does not run it.
fn runs(line: &str, name: &str) -> bool {
    static RUN: OnceLock<(Regex, Regex)> = OnceLock::new();
    let (run, inspects) = RUN.get_or_init(|| {
        (
            context::regex(
                r#"(?i)\bchmod\s+(?:-\w+\s+)*(?:[ugoa]*\+[rw]*x|[0-7]*[1357][0-7]{0,2})\s+["'`]?(?P<t1>[^\s"'`;&|]+)|(?:^|[;&|(`]|\$\s)\s*(?:sudo\s+)?(?P<t2>(?:\./|\.\\|/[\w./-]*/|~/[\w./-]*|\$\{?\w+\}?[/\\][\w./\\-]*)[\w.*-]+)(?:\s|$|[;&|)`])|\b(?:sudo\s+)?(?:ba|z|k|da)?sh\s+(?:-\S+\s+)*["'`]?(?P<t3>[^\s"'`;&|]+)|\b(?:python[0-9.]*|perl|ruby|node|powershell|pwsh)\s+(?:-\S+\s+)*["'`]?(?P<t4>[^\s"'`;&|]+)|\bstart-process\s+(?:-\w+\s+)*["'`]?(?P<t5>[^\s"'`;&|]+)|&\s*["'`]?(?P<t6>[^\s"'`;&|]+)|\b(?:msiexec\s+/i|dpkg\s+-i|rpm\s+-i\w*|installer\s+-pkg)\s+["'`]?(?P<t7>[^\s"'`;&|]+)|(?:\bsource|^\s*\.)\s+["'`]?(?P<t8>[^\s"'`;&|]+)"#,
            ),
            context::regex(
                r"(?i)^\s*(?:\$\s*)?(?:curl|wget|invoke-webrequest|iwr|cat|less|more|head|tail|ls|file|sha\d+sum|shasum|gpg|cosign|get-filehash|diff|vim|nano|code|mv|cp|rm|tar\s+-t\w*)\b",
            ),
        )
    });
    if inspects.is_match(line) {
        return false;
    }
    run.captures_iter(line).any(|c| {
        (1..=8).filter_map(|i| c.name(&format!("t{i}"))).any(|t| {
            let t = t.as_str().trim_end_matches(['"', '\'', ')', ',', '`', '.']);
            t.ends_with(name) || basename(t) == name
        })
    })
}

/// Findings on one field, starting on the logical lines `candidates` (those where one of
/// [`line_sources`] may match, from the scan's gate).
pub fn scan(field: Field, lines: &[Line], paragraphs: &[Line], candidates: &[usize], findings: &mut Vec<Finding>) {
    downloads_run(field, lines, paragraphs, candidates, findings);
    databases_dropped(field, lines, paragraphs, candidates, findings);
}

fn downloads_run(field: Field, lines: &[Line], paragraphs: &[Line], candidates: &[usize], findings: &mut Vec<Finding>) {
    let p = patterns();
    for &i in candidates {
        let line = &lines[i];
        let downloaded = p
            .download
            .captures(&line.text)
            .and_then(|c| ["a", "c", "w", "p", "d", "u"].iter().find_map(|n| c.name(n)))
            .map(|m| (m.start(), basename(m.as_str()).to_string()))
            .or_else(|| {
                p.url_file
                    .captures(&line.text)
                    .and_then(|c| c.name("f"))
                    .map(|m| (m.start(), m.as_str().to_string()))
            });
        let Some((start, name)) = downloaded else {
            continue;
        };
        if name.len() < 2 || name == "-" || name.starts_with('$') && name.len() < 3 {
            continue; // standard output or an unresolvable name
        }
        // The same line (after the download) or one of the next lines runs the file.
        let rest_of_line = line.text[start..].split_once(['&', ';', '|']).map(|x| x.1);
        let ran_at = rest_of_line
            .filter(|rest| runs(rest, &name))
            .map(|_| i)
            .or_else(|| {
                // The next WINDOW lines with text (blank lines and code fences do not count).
                (i + 1..lines.len())
                    .filter(|&j| {
                        let t = lines[j].text.trim();
                        !t.is_empty() && !t.starts_with("```") && !t.starts_with("~~~")
                    })
                    .take(WINDOW)
                    .find(|&j| runs(&lines[j].text, &name))
            });
        let Some(j) = ran_at else { continue };
        let verified = lines[i..=j].iter().any(|l| p.verify.is_match(&l.text));
        let warned = context::is_warned_at(lines, paragraphs, i, start, start);
        let mitigation = if warned {
            Some(Mitigation::Warning)
        } else if verified {
            Some(Mitigation::Verified)
        } else {
            None
        };
        findings.push(Finding {
            rule: "download-exec",
            severity: match mitigation {
                Some(_) => Level::Low,
                None => super::rules::source_severity(&line.text),
            },
            field,
            lines: (line.span(start, start).0, lines[j].last),
            excerpt: if i == j {
                context::excerpt(&line.text, start, start)
            } else {
                format!(
                    "{} … {}",
                    context::excerpt(&line.text, start, start),
                    context::excerpt(&lines[j].text, 0, 0)
                )
            },
            mitigation,
        });
    }
}

fn databases_dropped(field: Field, lines: &[Line], paragraphs: &[Line], candidates: &[usize], findings: &mut Vec<Finding>) {
    let p = patterns();
    for &i in candidates {
        let line = &lines[i];
        let Some(c) = p.drop.captures(&line.text) else {
            continue;
        };
        let m = c.get(0).expect("whole match");
        let name = c.name("n").or_else(|| c.name("d")).map_or("", |n| n.as_str());
        let disposable = !name.is_empty() && p.disposable.is_match(name);
        let nearby = &lines[i.saturating_sub(3)..(i + 2).min(lines.len())];
        let confirmed = nearby.iter().any(|l| p.confirm.is_match(&l.text));
        let mitigation = if context::is_warned_at(lines, paragraphs, i, m.start(), m.end()) {
            Some(Mitigation::Warning)
        } else if disposable || confirmed {
            Some(Mitigation::Scoped)
        } else {
            None
        };
        findings.push(Finding {
            rule: "drop-database",
            severity: if mitigation.is_some() { Level::Low } else { Level::Medium },
            field,
            lines: line.span(m.start(), m.end()),
            excerpt: context::excerpt(&line.text, m.start(), m.end()),
            mitigation,
        });
    }
}
