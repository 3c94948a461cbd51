//! The rule catalogue and the single-line pattern rules.

use std::sync::OnceLock;

use regex::{Captures, Regex, RegexSet};

use super::context::{self, Line};
use super::gate::Gate;
use super::{Field, Finding, Level, Mitigation};

/// A documented rule: its id, the highest severity it reports, and what it means.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub id: &'static str,
    pub severity: Level,
    pub summary: &'static str,
}

/// Every rule [`super::scan`] applies (docs/trust.md explains each with examples).
pub const RULES: &[Rule] = &[
    Rule { id: "pipe-to-shell", severity: Level::High, summary: "remote content piped or substituted into a shell or interpreter (high from an unnamed or anonymous source, medium from a named https host)" },
    Rule { id: "download-exec", severity: Level::High, summary: "a downloaded file made executable or run, unless a checksum or signature is verified first (high/medium by source, as pipe-to-shell)" },
    Rule { id: "credential-read", severity: Level::High, summary: "reading credentials, private keys, tokens, or browser and OS secret stores" },
    Rule { id: "exfiltration", severity: Level::Critical, summary: "sending files, secrets or the environment to another host" },
    Rule { id: "destructive-delete", severity: Level::High, summary: "recursive deletion of the root or home, formatting or overwriting disks, fork bombs" },
    Rule { id: "force-push-protected", severity: Level::Medium, summary: "force-pushing to main, master or another protected branch" },
    Rule { id: "drop-database", severity: Level::Medium, summary: "dropping a database or schema that is not a disposable test one, without confirmation" },
    Rule { id: "conceal-from-user", severity: Level::High, summary: "instructions to hide actions or output from the user" },
    Rule { id: "override-instructions", severity: Level::High, summary: "prompt injection: instructions to ignore or override earlier or system instructions" },
    Rule { id: "invisible-unicode", severity: Level::High, summary: "bidirectional controls or tag characters (high), zero-width characters (medium)" },
    Rule { id: "homoglyph-command", severity: Level::Medium, summary: "a word mixing Latin letters with look-alike Cyrillic or Greek ones" },
    Rule { id: "encoded-exec", severity: Level::High, summary: "an encoded blob decoded and executed" },
    Rule { id: "encoded-blob", severity: Level::Low, summary: "a long base64 blob (not a data: URI) that a reviewer cannot read" },
    Rule { id: "tls-verification-disabled", severity: Level::Medium, summary: "TLS certificate verification turned off" },
    Rule { id: "security-tooling-disabled", severity: Level::Medium, summary: "SELinux, AppArmor, a firewall, audit or antivirus turned off" },
];

/// Which contexts lower a match to low severity.
#[derive(Clone, Copy)]
enum Context {
    /// A command: lowered when the text warns against it.
    Command,
    /// A phrase addressed to the agent: lowered when warned against or quoted as an example.
    Phrase,
    /// Never lowered.
    Always,
}

/// Where remote code comes from decides how much to trust it: official installers are fetched
/// over https from a named host (medium: served, flagged); plain http, an IP address, an anonymous
/// paste, file-drop, tunnel or link-shortening host, or disabled TLS checks make it high.
pub(super) fn source_severity(line: &str) -> Level {
    static R: OnceLock<Regex> = OnceLock::new();
    let risky = R.get_or_init(|| {
        context::regex(
            r"(?i)\bhttp://|\bhttps?://(?:\d{1,3}\.){3}\d{1,3}\b|\bhttps?://\[[0-9a-f:]+\]|\bhttps?://(?:[\w-]+\.)*(?:pastebin\.com|paste\.ee|hastebin\.com|ghostbin\.\w+|termbin\.com|transfer\.sh|file\.io|0x0\.st|temp\.sh|ngrok(?:-free)?\.(?:io|app|dev)|trycloudflare\.com|loca\.lt|serveo\.net|bit\.ly|tinyurl\.com|is\.gd|t\.co|goo\.gl|rb\.gy|cutt\.ly|gist\.githubusercontent\.com|cdn\.discordapp\.com|webhook\.site|requestbin\.\w+|pipedream\.net|duckdns\.org|anonfiles\.com|mega\.nz|dropboxusercontent\.com)\b|\s(?:-[a-zA-Z]*k[a-zA-Z]*|--insecure|--no-check-certificate)(?:\s|$)",
        )
    });
    if risky.is_match(line) {
        Level::High
    } else {
        Level::Medium
    }
}

/// Patterns whose severity is their source's ([`source_severity`]), not a fixed one.
fn graded_by_source(rule: &str) -> bool {
    rule == "pipe-to-shell"
}

struct Pattern {
    rule: &'static str,
    severity: Level,
    context: Context,
    regex: &'static str,
    /// An extra condition on the match, for what the regex crate cannot say (no look-around).
    accept: Option<fn(&Captures) -> bool>,
}

const fn p(rule: &'static str, severity: Level, context: Context, regex: &'static str) -> Pattern {
    Pattern { rule, severity, context, regex, accept: None }
}

const fn pa(
    rule: &'static str,
    severity: Level,
    context: Context,
    regex: &'static str,
    accept: fn(&Captures) -> bool,
) -> Pattern {
    Pattern { rule, severity, context, regex, accept: Some(accept) }
}

use Context::{Always, Command, Phrase};
use Level::{Critical, High, Low, Medium};

/// Fetchers whose output is remote content.
macro_rules! fetch {
    () => { r"(?:\bcurl\b|\bwget\b|\biwr\b|\binvoke-webrequest\b|\birm\b|\binvoke-restmethod\b)" };
}
/// A shell reading its script from standard input.
macro_rules! shell {
    () => { r#"(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+(?:\S+=\S*\s+)*)?(?:/usr)?(?:/bin/)?(?:ba|z|k|da|c|tc|fi|a)?sh(?:$|[\s;&|)#'"`])"# };
}
/// Credential stores a skill has no business reading (private keys, cloud and VCS tokens,
/// password stores, browser secrets, OS keychains).
macro_rules! secret_path {
    () => { r"(?:\.ssh/id_[a-z0-9_]+(?P<pub>\.pub)?|\.ssh/[\w.-]*_key\b|\.aws/credentials|\.netrc\b|\.git-credentials|\.config/gh/hosts\.yml|\.config/gcloud/(?:credentials\.db|access_tokens\.db|application_default_credentials\.json|legacy_credentials)|\.azure/(?:accessTokens\.json|msal_token_cache\S*)|\.vault-token|\.password-store|\.gnupg/private-keys|wallet\.dat|/etc/shadow\b|Login Data|logins\.json|key[34]\.db|Chrome/[^\n]*Cookies|Keychains/[^\s]*\.keychain|\.pypirc|\.docker/config\.json|\.kube/config\b|\.npmrc|\.pgpass)" };
}
/// Commands and APIs that read a file's contents.
macro_rules! read_verb {
    () => { r"(?:\b(?:cat|less|more|head|tail|type|bat|get-content|gc|cp|copy|scp|rsync|tar|zip|7z|base64|xxd|od|strings|grep|awk|sed|sqlite3|jq|open|read_text|read_bytes|readfile|readfilesync|read_file|file_get_contents|slurp)\b|fs\.read)" };
}

/// "Don't tell the user *to* run X" is advice about what to recommend, and "don't tell the user
/// about *each* tool call" is about verbosity: neither hides anything.
fn not_advice_or_verbosity(c: &Captures) -> bool {
    let next = c.name("next").map_or(String::new(), |m| m.as_str().to_ascii_lowercase());
    let mut words = next.split_whitespace();
    let (first, second) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    !(first == "to" || first == "how" || (first == "about" && matches!(second, "each" | "every" | "all")))
}

fn not_public_key(c: &Captures) -> bool {
    c.name("pub").is_none()
}

/// Files whose names say they hold secrets only in the middle severity: reading them is often
/// routine (a registry login, a kubeconfig), so such a read is reported below the private keys.
fn routine_secret(c: &Captures) -> bool {
    let m = c.get(0).map_or("", |m| m.as_str()).to_ascii_lowercase();
    not_public_key(c)
        && [".docker/config.json", ".kube/config", ".npmrc", ".pgpass", ".pypirc"]
            .iter()
            .any(|p| m.contains(p))
}

fn private_secret(c: &Captures) -> bool {
    not_public_key(c) && !routine_secret(c)
}

/// A `curl -k` whose every URL is on the loopback interface (a local self-signed health check):
/// no one can sit in the middle there.
fn not_loopback(c: &Captures) -> bool {
    let m = c.get(0).map_or("", |m| m.as_str());
    let urls: Vec<&str> = m.split_whitespace().filter(|w| w.contains("://")).collect();
    urls.is_empty()
        || !urls.iter().all(|u| {
            let host = u.trim_matches(['"', '\'']).split("://").nth(1).unwrap_or("");
            host.starts_with("localhost") || host.starts_with("127.") || host.starts_with("[::1]")
        })
}

/// `rm` with a recursive flag (-r, -R, --recursive, combined short flags).
fn recursive_rm(c: &Captures) -> bool {
    let flags = c.name("flags").map_or("", |m| m.as_str());
    flags.split_whitespace().any(|f| {
        f == "--recursive" || (f.starts_with('-') && !f.starts_with("--") && f.contains(['r', 'R']))
    })
}

/// A `git push` that forces and names a protected branch.
fn forced_to_protected(c: &Captures) -> bool {
    let rest = c.name("rest").map_or("", |m| m.as_str());
    let words: Vec<&str> = rest.split_whitespace().collect();
    let forced = words.iter().any(|w| {
        *w == "--force"
            || w.starts_with("--force-with-lease")
            || (w.starts_with('-') && !w.starts_with("--") && w.contains('f'))
            || (w.starts_with('+') && w.len() > 1)
    });
    let protected = words.iter().any(|w| {
        let branch = w.trim_start_matches('+').rsplit([':', '/']).next().unwrap_or("");
        !w.starts_with('-')
            && matches!(branch, "main" | "master" | "trunk" | "prod" | "production" | "release" | "develop")
    });
    forced && protected
}

const PATTERNS: &[Pattern] = &[
    // --- remote code into a shell or interpreter
    p("pipe-to-shell", High, Command, concat!(r"(?i)", fetch!(), r"[^\n`;]*?\|\s*", shell!())),
    p("pipe-to-shell", High, Command, concat!(r"(?i)", fetch!(), r#"[^\n`;]*?\|\s*(?:sudo\s+)?(?:python[0-9.]*|perl|ruby|node|php|pwsh|powershell)(?:\s+-)?\s*(?:$|[;&|)`'"])"#)),
    p("pipe-to-shell", High, Command, concat!(r"(?i)", fetch!(), r"[^\n`;]*?\|\s*(?:iex|invoke-expression)\b")),
    p("pipe-to-shell", High, Command, r"(?i)\b(?:(?:ba|z|k)?sh|source|\.)\s+<\(\s*(?:curl|wget|fetch)\b"),
    p("pipe-to-shell", High, Command, r#"(?i)\b(?:(?:ba|z|k)?sh|python[0-9.]*|perl|ruby|node)\s+-c\s+["']?\$\(\s*(?:curl|wget)\b"#),
    p("pipe-to-shell", High, Command, r"(?i)\beval\s+.?\$\(\s*(?:curl|wget)\b"),
    p("pipe-to-shell", High, Command, r"(?i)\b(?:iex|invoke-expression)\s*\(?\s*(?:\(\s*)?(?:new-object\s+(?:system\.)?net\.webclient\s*\)?\s*\.downloadstring|iwr|irm|invoke-webrequest|invoke-restmethod)\b"),
    p("pipe-to-shell", High, Command, r"(?i)\b(?:exec|eval)\s*\(\s*(?:urllib\.request\.)?(?:urlopen|requests\.get)\s*\("),
    // --- credentials and secret stores
    pa("credential-read", High, Command, concat!(r"(?i)", read_verb!(), r"[^\n|;&]*?", secret_path!()), private_secret),
    pa("credential-read", Medium, Command, concat!(r"(?i)", read_verb!(), r"[^\n|;&]*?", secret_path!()), routine_secret),
    // A secret file handed to another command (curl -F key=@~/.ssh/id_rsa, < ~/.aws/credentials).
    pa("credential-read", High, Command, concat!(r#"(?i)(?:@|<\s*)["']?[^\s"']*"#, secret_path!()), private_secret),
    p("credential-read", High, Command, r"(?i)\bgpg2?\b[^\n]*--export-secret(?:-sub)?-keys\b"),
    p("credential-read", High, Command, r"(?i)\bsecurity\s+(?:find-generic-password|find-internet-password|dump-keychain)\b[^\n]*"),
    p("credential-read", High, Command, r#"(?i)\b(?:secret-tool\s+lookup|cmdkey\s+/list|vaultcmd\s+/list\w*)\b|\b(?:mimikatz|lazagne)(?:\.exe|\.py)?\s+["']?\w|\bsekurlsa::"#),
    // --- sending data away
    p("exfiltration", Critical, Command, r"(?i)\b(?:env|printenv|set)\s*\|\s*(?:[^\n|]*\|\s*)?(?:curl|wget|nc|ncat|netcat|socat|telnet)\b"),
    p("exfiltration", Critical, Command, r#"(?i)\b(?:curl|wget|http|invoke-webrequest|invoke-restmethod|iwr|irm)\b[^\n]*?(?:\s-d|\s-F|\s-T|--data(?:-binary|-raw|-urlencode)?|--form|--upload-file|--post-data|--post-file|--body-file|-body)[=\s]+["']?[^\n]*?(?:\$\(\s*(?:env|printenv|set)\s*\)|\$\(\s*(?:cat|base64|tar|gc|get-content)\b[^)]*(?:\.ssh|\.aws|\.env\b|\.netrc|/etc/passwd|/etc/shadow|\.kube|\.docker|\.git-credentials|~|\$HOME)|@[~/]?[^\s"']*(?:\.ssh/|\.aws/|\.env\b|\.netrc|/etc/passwd|/etc/shadow|\.git-credentials|\.kube/config|\.docker/config)|@~|@\$HOME)"#),
    p("exfiltration", Critical, Command, r"(?i)\b(?:cat|tar|zip|base64|gzip)\b[^\n|]*(?:\.ssh|\.aws|\.env\b|\.netrc|/etc/passwd|/etc/shadow|\.git-credentials|~/?\s|\$HOME)[^\n|]*\|\s*(?:[^\n|]*\|\s*)?(?:curl|wget|nc|ncat|netcat|socat|telnet)\b"),
    p("exfiltration", Critical, Command, r"(?i)(?:>&?|<)\s*/dev/(?:tcp|udp)/[^\s/]+/\d+"),
    // Secret files copied to a remote host (scp/rsync/sftp to user@host: or host:).
    p("exfiltration", Critical, Command, r"(?i)\b(?:scp|rsync|sftp)\b[^\n]*(?:\.ssh|\.aws|\.gnupg|\.kube/config|\.docker/config|\.netrc|\.git-credentials|\.password-store|/etc/shadow)[^\n]*\s(?:[\w.-]+@)?[\w-]+(?:\.[\w-]+)+:"),
    p("exfiltration", Critical, Command, r"(?i)\b(?:nc|ncat|netcat)\b[^\n]*\s-e\s+(?:/bin/)?(?:ba)?sh\b"),
    p("exfiltration", Medium, Command, r#"(?i)\b(?:curl|wget)\b[^\n]*?(?:\s-d|--data(?:-binary|-raw|-urlencode)?|--post-data)[=\s]+["']?[^\n]*\$\{?[A-Z_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|PRIVATE_KEY|API_KEY)[A-Z_]*"#),
    // --- destruction
    pa("destructive-delete", High, Command, r#"(?i)\brm\s+(?P<flags>(?:-{1,2}[\w-]+\s+)+)(?:--\s+)?(?:["']?(?:~|\$\{?HOME\}?|/(?:home|usr|etc|var|boot|root|opt))["']?(?:/\.?\*?)?|["']?/\*?["']?|\.\*)(?:\s|$|;|&|\|)"#, recursive_rm),
    p("destructive-delete", High, Command, r"(?i)--no-preserve-root\b"),
    p("destructive-delete", High, Command, r"(?i)\bmkfs(?:\.\w+)?\s+(?:-\S+\s+)*/dev/"),
    p("destructive-delete", High, Command, r"(?i)\bdd\b[^\n]*\bof=/dev/(?:sd|nvme|hd|vd|xvd|disk|mmcblk)"),
    p("destructive-delete", High, Command, r"(?i)>\s*/dev/(?:sd[a-z]|nvme\d|disk\d)\b"),
    p("destructive-delete", High, Always, r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"),
    p("destructive-delete", High, Command, r"(?i)\b(?:rd|rmdir)\s+/s\s+/q\s+[a-z]:\\?(?:\s|$)"),
    p("destructive-delete", High, Command, r"(?i)\bremove-item\b[^\n]*-recurse[^\n]*(?:\s[a-z]:\\\*?(?:\s|$)|\$env:userprofile|\$home\b|\s~(?:\s|$))"),
    p("destructive-delete", High, Command, r"(?i)\bformat\s+[a-z]:\s*(?:/|$)"),
    pa("force-push-protected", Medium, Command, r"(?i)\bgit\s+push\b(?P<rest>[^\n;&|]*)", forced_to_protected),
    // --- addressed to the agent
    pa("conceal-from-user", High, Phrase, r"(?i)\b(?:do\s+not|don'?t|never|without)\s+(?:ever\s+)?(?:tell(?:ing)?|inform(?:ing)?|notify(?:ing)?|alert(?:ing)?|warn(?:ing)?|let(?:ting)?)\s+(?:the\s+|your\s+)?(?:user|human|operator|developer)s?\b(?P<next>\s+\w+(?:\s+\w+)?)?", not_advice_or_verbosity),
    p("conceal-from-user", High, Phrase, r"(?i)\b(?:do\s+not|don'?t|never)\s+(?:mention|reveal|disclose|show|report|explain|log|print|display)\s+(?:this|these|that|it|what\s+you(?:'ve|\s+have)?\s+(?:done|run|did)|the\s+(?:step|command|change|action|file|request|upload|download|script)s?)\b[^.\n]{0,40}?\b(?:to\s+)?(?:the\s+)?(?:user|human|operator)s?\b"),
    p("conceal-from-user", High, Phrase, r"(?i)\bhide\s+(?:(?:this|these|it|its|them|their|that|the|any|all|your|our|every)\s+)?(?:\w+\s+){0,2}from\s+(?:the\s+)?(?:user|human|operator|developer)s?\b"),
    p("conceal-from-user", High, Phrase, r"(?i)\b(?:keep|keeping)\s+(?:this|it|these|that)\s+(?:step\s+|action\s+)?(?:secret|hidden|private)\s+from\s+(?:the\s+)?(?:user|human|operator)s?\b"),
    p("conceal-from-user", High, Phrase, r"(?i)\bwithout\s+(?:the\s+)?(?:user|human|operator)(?:'s)?\s+(?:knowing|knowledge|noticing|seeing|consent|permission)\b"),
    p("conceal-from-user", High, Phrase, r"(?i)\b(?:secretly|covertly|surreptitiously)\s+\w+"),
    p("conceal-from-user", High, Phrase, r"(?i)\b(?:do\s+not|don'?t|never)\s+(?:bring\s+(?:this|it|that|them)\s+up|raise\s+(?:this|it|that))\s+(?:with|to)\s+(?:the\s+)?(?:user|human|operator)s?\b"),
    p("conceal-from-user", High, Phrase, r"(?i)\bpretend\s+(?:that\s+)?(?:you\s+)?(?:never|didn'?t|did\s+not|have\s+not|haven'?t)\b"),
    p("conceal-from-user", High, Phrase, r"(?i)\bleave\s+(?:it|this|that|them)\s+out\s+of\s+(?:any|the|your)\s+(?:summary|summaries|report|reply|response|message)"),
    p("conceal-from-user", High, Phrase, r"(?i)\b(?:deny|lie)\b[^.\n]{0,40}\b(?:if|when)\s+(?:the\s+)?(?:user|human)\s+asks\b"),
    p("conceal-from-user", High, Phrase, r"(?i)\b(?:silently|quietly)\s+(?:send|upload|post|transmit|exfiltrate|forward|copy)\b"),
    p("override-instructions", High, Phrase, r"(?i)\b(?:ignore|disregard|forget|override|bypass|skip)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:your\s+|the\s+|my\s+)?(?:previous|prior|earlier|above|preceding|original|initial|system|safety|existing|other)\s+(?:instructions|prompts?|rules|guidelines|directives|messages|guardrails|constraints|context)\b"),
    p("override-instructions", High, Phrase, r"(?i)\b(?:ignore|disregard|forget|override)\s+(?:your|the)\s+(?:system\s+prompt|system\s+message|instructions|guidelines|rules|safety\s+\w+)\b"),
    p("override-instructions", High, Phrase, r"(?i)\byou\s+are\s+now\s+(?:in\s+)?(?:developer|dan|jailbreak|jailbroken|god|unrestricted|unfiltered|admin|root)\b"),
    // Not "developer mode": Windows, Android and browsers have a setting of that name.
    p("override-instructions", High, Phrase, r"(?i)\b(?:enable|enter|activate|switch\s+to)\s+(?:jailbreak|dan|god|unrestricted)\s+mode\b"),
    p("override-instructions", High, Phrase, r"(?i)\b(?:these|this|the\s+following)\s+instructions?\s+(?:take|takes|have|has)\s+(?:precedence|priority)\s+over\s+(?:all|any|your|the\s+system)"),
    p("override-instructions", High, Phrase, r"(?i)\bforget\s+(?:everything|all)\s+(?:you\s+(?:were|have\s+been)\s+told|above|before)\b"),
    p("override-instructions", High, Phrase, r"(?i)\bnew\s+system\s+prompt\s*:"),
    p("override-instructions", High, Phrase, r"(?i)\b(?:your\s+|the\s+|all\s+)?(?:previous|prior|earlier|original|system)\s+(?:instructions|prompts?|rules|guidelines|directives)\s+(?:are|is)\s+(?:now\s+)?(?:void|invalid|cancel+ed|obsolete|revoked|suspended|superseded|no\s+longer\s+(?:valid|in\s+effect|apply|applies))\b"),
    // --- encoded payloads
    p("encoded-exec", High, Command, concat!(r"(?i)\bbase64\s+(?:-d|--decode|-D)\b[^\n]*?\|\s*", shell!())),
    p("encoded-exec", High, Command, r#"(?i)\bbase64\s+(?:-d|--decode|-D)\b[^\n]*?\|\s*(?:sudo\s+)?(?:python[0-9.]*|perl|ruby|node|php)(?:\s+-)?\s*(?:$|[;&|)`'"])"#),
    p("encoded-exec", High, Command, r"(?i)\b(?:eval|exec)\s*\(\s*(?:__import__\(\s*.base64.\s*\)\.|base64\.|codecs\.decode|bytes\.fromhex|zlib\.decompress|marshal\.loads|atob\b|buffer\.from\b|b64decode|unhexlify)"),
    p("encoded-exec", High, Command, r"(?i)\b(?:powershell|pwsh)(?:\.exe)?\b[^\n]*\s-(?:e|ec|enc|encodedcommand)\s+[A-Za-z0-9+/=]{16,}"),
    p("encoded-exec", High, Command, r"(?i)\beval\s+.?\$\(\s*(?:echo|printf)\s[^\n]*\|\s*(?:base64\s+(?:-d|--decode|-D)|xxd\s+-r)"),
    p("encoded-exec", High, Command, r"(?i)\bxxd\s+-r\s+-p\b[^\n]*\|\s*(?:ba|z)?sh\b"),
    p("encoded-exec", High, Command, r"(?i)frombase64string[^\n]*(?:\biex\b|invoke-expression|\[scriptblock\]::create)|(?:\biex\b|invoke-expression)[^\n]*frombase64string"),
    p("encoded-blob", Low, Always, r"(?P<pre>data:[\w/+.-]+;base64,)?[A-Za-z0-9+/]{200,}={0,2}"),
    // --- weakened defences
    pa("tls-verification-disabled", Medium, Command, r"(?i)\bcurl\b[^\n]*\s(?:-[a-zA-Z]*k[a-zA-Z]*|--insecure)(?:\s[^\n]*|$)", not_loopback),
    p("tls-verification-disabled", Medium, Command, r"(?i)\bwget\b[^\n]*--no-check-certificate\b"),
    // verify=False only in an HTTP client call or next to TLS words (other libraries have a
    // `verify` argument of their own, e.g. format checks in scikit-bio).
    p("tls-verification-disabled", Medium, Command, r"(?i)\b(?:requests|httpx|session|client|s|http|aiohttp|urllib3)\.(?:get|post|put|patch|delete|head|request|options|stream|Client|AsyncClient|Session)\([^\n]*\bverify\s*=\s*False\b|\bverify\s*=\s*False\b[^\n]*\b(?:ssl|tls|https|certificate|cert)\b|\b(?:ssl|tls|https|certificate|cert)\b[^\n]*\bverify\s*=\s*False\b|\bssl\._create_unverified_context\b|\bCERT_NONE\b|\bcheck_hostname\s*=\s*False\b"),
    p("tls-verification-disabled", Medium, Command, r#"(?i)\bNODE_TLS_REJECT_UNAUTHORIZED\s*[=:]\s*["']?0\b|\brejectUnauthorized\s*:\s*false\b|\bInsecureSkipVerify\s*:\s*true\b|\bhttp\.sslVerify\s+(?:false|0)\b|\bGIT_SSL_NO_VERIFY\s*=\s*["']?(?:1|true)\b|\bPYTHONHTTPSVERIFY\s*=\s*["']?0\b|\bstrict-ssl\s+false\b|-SkipCertificateCheck\b|ServerCertificateValidationCallback\s*=\s*\{\s*\$true\s*\}|\bsslVerify\s*=\s*false\b|--trusted-host\b|\binsecure\s*=\s*true\b|\btls_verify\s*=\s*false\b|\bverify_ssl\s*=\s*false\b"#),
    p("security-tooling-disabled", Medium, Command, r"(?i)\bsetenforce\s+(?:0|permissive)\b|\bSELINUX\s*=\s*(?:disabled|permissive)\b|\bufw\s+disable\b|\b(?:systemctl|service)\s+(?:stop|disable|mask)\s+(?:--now\s+)?(?:firewalld|auditd|apparmor|ufw|clamav\S*|falcon-sensor|osqueryd|wazuh-agent|crowdstrike\S*)\b|\b(?:firewalld|auditd|apparmor)\s+stop\b|\bSet-MpPreference\b[^\n]*-Disable\w+\s+(?:\$true|1)\b|\bnetsh\s+advfirewall\s+set\s+\w+\s+state\s+off\b|\bspctl\s+--master-disable\b|\bcsrutil\s+disable\b|\baa-teardown\b|\bauditctl\s+-e\s*0\b|\biptables\s+-F\b|\bAdd-MpPreference\b[^\n]*-ExclusionPath"),
];

/// One set of patterns over one kind of text, with each member's index in [`PATTERNS`].
struct PatternSet {
    set: RegexSet,
    members: Vec<usize>,
}

impl PatternSet {
    fn new(sources: &[String], members: Vec<usize>) -> Self {
        let set = regex::RegexSetBuilder::new(members.iter().map(|&i| &sources[i]))
            // A larger lazy-DFA cache than the default 2 MiB: with tens of patterns in one set
            // the automaton keeps meeting new states, and a small cache is cleared and rebuilt
            // over and over on long documents. 64 MiB is a bound, not an allocation: over 5,000
            // skills it held a few megabytes and took a third off the scan against 16 MiB.
            .dfa_size_limit(64 << 20)
            .build()
            .expect("valid rule patterns");
        PatternSet { set, members }
    }

    /// Indexes in [`PATTERNS`] of the patterns that match somewhere in `text`. A line the scan's
    /// gate picked may match none of them (it may hold only a download, a dropped database, or a
    /// match that ran over the line's end): a plain match test answers that more cheaply than
    /// the search for every pattern's matches, which the set only runs when there is one.
    fn matching(&self, text: &str) -> Vec<usize> {
        if !self.set.is_match(text) {
            return Vec::new();
        }
        self.set.matches(text).iter().map(|j| self.members[j]).collect()
    }
}

struct Compiled {
    /// Command and always-on patterns, run on logical lines.
    lines: PatternSet,
    /// Their sources, for the risk scan's gate over lines (`super::line_gate`).
    line_sources: Vec<String>,
    /// Phrase patterns, run on paragraphs.
    phrases: PatternSet,
    /// The phrase patterns over a whole view of paragraphs: which paragraphs to test.
    phrase_gate: Gate,
    regexes: Vec<Regex>,
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| {
        let sources: Vec<String> = PATTERNS.iter().map(|p| context::ascii_boundaries(p.regex)).collect();
        let (phrases, lines): (Vec<usize>, Vec<usize>) =
            (0..PATTERNS.len()).partition(|&i| matches!(PATTERNS[i].context, Phrase));
        Compiled {
            line_sources: lines.iter().map(|&i| sources[i].clone()).collect(),
            phrase_gate: Gate::new(&phrases.iter().map(|&i| &sources[i]).collect::<Vec<_>>()),
            lines: PatternSet::new(&sources, lines),
            phrases: PatternSet::new(&sources, phrases),
            regexes: sources.iter().map(|s| context::regex(s)).collect(),
        }
    })
}

/// Sources of the patterns [`scan`] tests on logical lines.
pub fn line_sources() -> &'static [String] {
    &compiled().line_sources
}

/// The pattern rules' findings on one field: commands on the logical lines `candidates` (those
/// where a line pattern may match, from the scan's gate), phrases on the paragraphs their gate
/// picks.
pub fn scan(
    field: Field,
    lines: &[Line],
    paragraphs: &[Line],
    candidates: &[usize],
    findings: &mut Vec<Finding>,
    between: &mut dyn FnMut(),
) {
    let c = compiled();
    for &i in candidates {
        scan_line(field, lines, paragraphs, i, false, findings);
    }
    for i in c.phrase_gate.lines(paragraphs, between) {
        scan_line(field, paragraphs, paragraphs, i, true, findings);
    }
}

/// Findings of the command (`phrases` false) or phrase patterns on `view[index]` (at most one
/// per rule and line).
fn scan_line(field: Field, view: &[Line], paragraphs: &[Line], index: usize, phrases: bool, findings: &mut Vec<Finding>) {
    let line = &view[index];
    let c = compiled();
    let mut found: Vec<Finding> = Vec::new();
    let set = if phrases { &c.phrases } else { &c.lines };
    for i in set.matching(&line.text) {
        let pattern = &PATTERNS[i];
        for caps in c.regexes[i].captures_iter(&line.text) {
            if pattern.accept.is_some_and(|accept| !accept(&caps)) {
                continue;
            }
            if pattern.rule == "encoded-blob" && caps.name("pre").is_some() {
                continue; // an inline image or font, not code
            }
            let m = caps.get(0).expect("whole match");
            let mitigation = match pattern.context {
                Always => None,
                _ if context::is_search_pattern(&line.text) => Some(Mitigation::Quoted),
                Phrase if context::is_quoted_block(view, index) => Some(Mitigation::Quoted),
                Command | Phrase if context::is_warned_at(view, paragraphs, index, m.start(), m.end()) => {
                    Some(Mitigation::Warning)
                }
                Phrase if context::is_quoted(&line.text, m.start(), m.end()) => {
                    Some(Mitigation::Quoted)
                }
                _ => None,
            };
            let severity = match mitigation {
                Some(_) => Low,
                None if graded_by_source(pattern.rule) => source_severity(&line.text),
                None => pattern.severity,
            };
            let finding = Finding {
                rule: pattern.rule,
                severity,
                field,
                lines: line.span(m.start(), m.end()),
                excerpt: context::excerpt(&line.text, m.start(), m.end()),
                mitigation,
            };
            match found.iter_mut().find(|f| f.rule == pattern.rule) {
                Some(f) if f.severity < severity => *f = finding,
                Some(_) => {}
                None => found.push(finding),
            }
        }
    }
    findings.extend(found);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles_and_names_a_catalogued_rule() {
        let _ = compiled();
        for p in PATTERNS {
            let rule = RULES.iter().find(|r| r.id == p.rule).expect("catalogued");
            assert!(p.severity <= rule.severity, "{} above its rule's severity", p.rule);
        }
    }
}
