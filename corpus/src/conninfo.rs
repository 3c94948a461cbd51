//! Connection strings as libpq reads them, for both clients.
//!
//! tokio-postgres parses most of a connection string but knows only `sslmode=disable|prefer|
//! require` and no `sslrootcert`, and never checks a server certificate itself. So the TLS
//! settings are taken out of the string here (`key=value` form or `postgres://` URL), the rest
//! goes to tokio-postgres, and [`Tls::connector`] makes the native-tls connector the settings
//! ask for. [`redact`] is the form of a connection string that may be printed.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use native_tls::{Certificate, TlsConnector};
use percent_encoding::percent_decode_str;
use postgres_native_tls::MakeTlsConnector;

/// libpq's `sslmode`s, less `allow` (plaintext first, TLS only if the server insists), which
/// tokio-postgres cannot do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, else plaintext; the certificate is not checked.
    Prefer,
    /// TLS or no connection; the certificate is checked only when a root certificate file
    /// is there (libpq's rule).
    Require,
    /// TLS, and the certificate must chain to a trusted root.
    VerifyCa,
    /// As verify-ca, and the certificate must also name the host connected to.
    VerifyFull,
}

impl SslMode {
    pub const ALL: [SslMode; 5] = [
        SslMode::Disable,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<SslMode, String> {
        if let Some(m) = SslMode::ALL.into_iter().find(|m| m.as_str() == value) {
            return Ok(m);
        }
        let known: Vec<&str> = SslMode::ALL.iter().map(|m| m.as_str()).collect();
        Err(if value == "allow" {
            "sslmode=allow is not supported; use prefer (TLS when the server offers it) or \
             disable"
                .to_string()
        } else {
            format!(
                "sslmode must be one of {} (got {value:?})",
                known.join(", ")
            )
        })
    }

    /// What tokio-postgres is told: it only negotiates; checking is the connector's job.
    fn negotiation(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Wire;
        match self {
            SslMode::Disable => Wire::Disable,
            SslMode::Prefer => Wire::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Wire::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// `sslrootcert=system`: the operating system's trusted roots.
    System,
    /// A PEM file of one or more certificates (and only those are trusted).
    File(PathBuf),
}

impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Roots::System => f.write_str("the system's trusted roots"),
            Roots::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What a connection does about TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub mode: SslMode,
    /// The server's certificate must chain to these; `None`: it is not checked.
    pub roots: Option<Roots>,
    /// The certificate must also name the host (verify-full).
    pub check_host: bool,
}

/// libpq's default root certificate file, under the home directory.
const DEFAULT_ROOT_CERT: &str = ".postgresql/root.crt";

impl Tls {
    /// libpq's rules: `sslrootcert` (else ~/.postgresql/root.crt) is what verify modes
    /// trust, and what `require` checks against when the file is there; `system` means
    /// verify-full and nothing weaker.
    fn resolve(
        mode: Option<SslMode>,
        rootcert: Option<String>,
        home: Option<PathBuf>,
    ) -> Result<Tls, String> {
        let given = rootcert.map(|r| match r.as_str() {
            "system" => Roots::System,
            _ => Roots::File(PathBuf::from(r)),
        });
        let mode = match (mode, &given) {
            (None, Some(Roots::System)) => SslMode::VerifyFull,
            (Some(m), Some(Roots::System)) if m != SslMode::VerifyFull => {
                return Err(format!(
                    "sslmode={m} may not be used with sslrootcert=system (use verify-full)"
                ))
            }
            (m, _) => m.unwrap_or(SslMode::Prefer),
        };
        let default_file = home.map(|h| h.join(DEFAULT_ROOT_CERT));
        let roots = match (mode, given) {
            (SslMode::Disable | SslMode::Prefer, _) => None,
            // Stricter than libpq, which quietly skips a named file that is missing.
            (_, Some(Roots::File(f))) if !f.exists() => return Err(missing_root(&f)),
            (_, Some(r)) => Some(r),
            (SslMode::Require, None) => default_file.filter(|f| f.exists()).map(Roots::File),
            (_, None) => match default_file {
                Some(f) if f.exists() => Some(Roots::File(f)),
                Some(f) => return Err(missing_root(&f)),
                None => {
                    return Err(format!(
                        "sslmode={mode} needs root certificates: set sslrootcert to a PEM \
                         file, or to system for the system's trusted roots"
                    ))
                }
            },
        };
        Ok(Tls {
            mode,
            roots,
            check_host: mode == SslMode::VerifyFull,
        })
    }

    /// The connector for tokio-postgres (also used, unused, under `disable`).
    pub fn connector(&self) -> Result<MakeTlsConnector, String> {
        let mut builder = TlsConnector::builder();
        match &self.roots {
            // prefer and require: encryption without authentication, as in libpq.
            None => {
                builder.danger_accept_invalid_certs(true);
            }
            Some(roots) => {
                if let Roots::File(path) = roots {
                    for cert in read_roots(path)? {
                        builder.add_root_certificate(cert);
                    }
                    builder.disable_built_in_roots(true);
                }
                builder.danger_accept_invalid_hostnames(!self.check_host);
            }
        }
        let connector = builder
            .build()
            .map_err(|e| format!("cannot set up TLS: {e}"))?;
        Ok(MakeTlsConnector::new(connector))
    }
}

fn missing_root(path: &std::path::Path) -> String {
    format!(
        "root certificate file \"{}\" does not exist; provide it, use the system's trusted \
         roots with sslrootcert=system, or use sslmode=require (no certificate check)",
        path.display()
    )
}

fn read_roots(path: &std::path::Path) -> Result<Vec<Certificate>, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read sslrootcert {}: {e}", path.display()))?;
    match Certificate::stack_from_pem(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        Ok(_) => Err(format!(
            "sslrootcert {} holds no PEM certificate",
            path.display()
        )),
        Err(e) => Err(format!("sslrootcert {}: {e}", path.display())),
    }
}

/// A connection string split into what tokio-postgres reads and what TLS needs.
pub struct ConnInfo {
    /// Everything but the TLS settings; `ssl_mode` set to what the connector negotiates.
    pub config: tokio_postgres::Config,
    pub tls: Tls,
}

impl ConnInfo {
    /// Reads `dsn`. Without `sslmode`/`sslrootcert` there, `env` is asked for
    /// `PGSSLMODE`/`PGSSLROOTCERT` (and `HOME` for the default root file), as libpq does.
    /// Errors never quote the string (it may hold a password).
    pub fn parse(dsn: &str, env: impl Fn(&str) -> Option<String>) -> Result<ConnInfo, String> {
        let (rest, found) = take_tls_settings(dsn);
        let mut config: tokio_postgres::Config = rest
            .parse()
            .map_err(|e| format!("invalid connection string: {e}"))?;
        let set = |v: Option<String>| v.filter(|s| !s.is_empty());
        let mode = set(found.mode.or_else(|| env("PGSSLMODE")))
            .map(|m| SslMode::parse(&m))
            .transpose()?;
        let rootcert = set(found.rootcert.or_else(|| env("PGSSLROOTCERT")));
        let tls = Tls::resolve(mode, rootcert, set(env("HOME")).map(PathBuf::from))?;
        config.ssl_mode(tls.mode.negotiation());
        Ok(ConnInfo { config, tls })
    }
}

/// The server option that makes a client's own statements resolve names from pg_catalog,
/// whatever search_path the database or role sets (a planted function or operator is then
/// never called by them).
pub const FIXED_SEARCH_PATH_OPTION: &str = "-c search_path=pg_catalog,pg_temp";

/// Appends server `options` (`-c name=value ...`) to those the connection string gave.
pub fn add_server_options(config: &mut tokio_postgres::Config, options: &str) {
    let all = match config.get_options() {
        Some(existing) if !existing.trim().is_empty() => format!("{existing} {options}"),
        _ => options.to_string(),
    };
    config.options(&all);
}

/// An error and the chain of causes under it, on one line (a TLS failure says what failed only
/// in a cause).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

/// What to do about a failed connection, when TLS is why.
pub fn tls_hint(error: &str, tls: &Tls) -> Option<String> {
    if error.contains("server does not support TLS") {
        return Some(format!(
            "the server does not accept SSL connections: turn ssl on there, or connect with \
             sslmode=prefer or disable instead of {}",
            tls.mode
        ));
    }
    if error.contains("no hostname provided for TLS") {
        return Some("TLS needs a host name: set host, not only hostaddr".into());
    }
    let roots = tls.roots.as_ref()?;
    error.contains("certificate verify failed").then(|| {
        format!(
            "the server's certificate did not verify against {roots} (sslmode={}){}",
            tls.mode,
            if tls.check_host {
                "; with verify-full it must also name the host connected to"
            } else {
                ""
            }
        )
    })
}

/// The TLS settings a connection string named (the last one wins, as in libpq).
#[derive(Debug, Default, PartialEq)]
struct TlsSettings {
    mode: Option<String>,
    rootcert: Option<String>,
}

/// `dsn` without its `sslmode` and `sslrootcert` settings, and their values. A string this
/// cannot read goes on unchanged from the unreadable part, for tokio-postgres to report.
fn take_tls_settings(dsn: &str) -> (String, TlsSettings) {
    let mut found = TlsSettings::default();
    let mut keep = |s: &Setting| match s.key.as_str() {
        "sslmode" => {
            found.mode = Some(s.value.clone());
            false
        }
        "sslrootcert" => {
            found.rootcert = Some(s.value.clone());
            false
        }
        _ => true,
    };
    let rest = match url_query(dsn) {
        Some(None) => dsn.to_string(),
        Some(Some(query)) => {
            let kept: Vec<&str> = url_params(dsn, query + 1)
                .iter()
                .filter(|s| keep(s))
                .map(|s| &dsn[s.whole.clone()])
                .collect();
            if kept.is_empty() {
                dsn[..query].to_string()
            } else {
                format!("{}?{}", &dsn[..query], kept.join("&"))
            }
        }
        None => {
            let (settings, unreadable) = key_values(dsn);
            let mut kept: Vec<&str> = settings
                .iter()
                .filter(|s| keep(s))
                .map(|s| &dsn[s.whole.clone()])
                .collect();
            if let Some(at) = unreadable {
                kept.push(&dsn[at..]);
            }
            kept.join(" ")
        }
    };
    (rest, found)
}

/// What stands in for a secret in printed connection strings.
const HIDDEN: &str = "***";

/// Keys whose values are not printed: password, sslpassword and their misspellings (a
/// rejected key may still hold a secret); libpq's keys are lowercase, but not every user's.
fn is_secret(key: &str) -> bool {
    key.to_ascii_lowercase().contains("pass")
}

/// `dsn` with every password replaced by `***`: `password=` values in `key=value` strings
/// (quoted or not), the `user:password@` of URLs and their `password=` parameters. What
/// cannot be read (an unterminated quote, a stray word) is hidden too, since it may be part
/// of a password.
pub fn redact(dsn: &str) -> String {
    let mut hide: Vec<Range<usize>> = Vec::new();
    if let Some(scheme_end) = url_scheme_end(dsn) {
        // The user info ends at the last '@': a password may hold any character, even an
        // unencoded '@', '/' or '?'. Hiding too much is the safe way to be wrong.
        let at = dsn[scheme_end..].rfind('@').map(|i| scheme_end + i);
        if let Some(at) = at {
            if let Some(colon) = dsn[scheme_end..at].find(':') {
                hide.push(scheme_end + colon + 1..at);
            }
        }
        let host_start = at.map_or(scheme_end, |a| a + 1);
        if let Some(q) = dsn[host_start..].find('?').map(|i| host_start + i) {
            let mut start = q + 1;
            for piece in dsn[q + 1..].split('&') {
                let end = start + piece.len();
                match piece.find('=') {
                    Some(eq) if !is_secret(&decode(&piece[..eq])) => {}
                    Some(eq) => hide.push(start + eq + 1..end),
                    None if piece.is_empty() => {}
                    None => hide.push(start..end),
                }
                start = end + 1;
            }
        }
    } else {
        let (settings, unreadable) = key_values(dsn);
        hide.extend(
            settings
                .into_iter()
                .filter(|s| is_secret(&s.key))
                .map(|s| s.value_at),
        );
        hide.extend(unreadable.map(|at| at..dsn.len()));
    }
    // Touching ranges (a quoted value, then an unreadable rest) become one `***`.
    let mut merged: Vec<Range<usize>> = Vec::new();
    for range in hide {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    let mut out = String::with_capacity(dsn.len());
    let mut copied = 0;
    for range in merged {
        out.push_str(&dsn[copied..range.start]);
        out.push_str(HIDDEN);
        copied = range.end;
    }
    out.push_str(&dsn[copied..]);
    out
}

/// One `key=value` of a connection string: key and value decoded, and where the whole
/// setting and its value (with any quotes) are in the string.
#[derive(Debug, PartialEq)]
struct Setting {
    key: String,
    value: String,
    whole: Range<usize>,
    value_at: Range<usize>,
}

/// The settings of a `key=value` string, read by tokio-postgres's (and libpq's) rules:
/// whitespace between settings and around `=`; a value is a run of non-whitespace or a
/// single-quoted string, `\` escaping the next character in both. Also where reading
/// stopped, if before the end.
fn key_values(s: &str) -> (Vec<Setting>, Option<usize>) {
    let skip_ws = |i: usize| {
        s[i..]
            .find(|c: char| !c.is_whitespace())
            .map_or(s.len(), |k| i + k)
    };
    let mut settings = Vec::new();
    let mut i = skip_ws(0);
    while i < s.len() {
        let key_end = s[i..]
            .find(|c: char| c.is_whitespace() || c == '=')
            .map_or(s.len(), |k| i + k);
        let eq = skip_ws(key_end);
        if key_end == i || !s[eq..].starts_with('=') {
            return (settings, Some(i));
        }
        let value_start = skip_ws(eq + 1);
        let Some((value, value_end)) = read_value(s, value_start) else {
            return (settings, Some(i));
        };
        settings.push(Setting {
            key: s[i..key_end].to_string(),
            value,
            whole: i..value_end,
            value_at: value_start..value_end,
        });
        i = skip_ws(value_end);
    }
    (settings, None)
}

/// The value starting at `at` and where it ends; `None` when it is empty or unterminated.
fn read_value(s: &str, at: usize) -> Option<(String, usize)> {
    let quoted = s[at..].starts_with('\'');
    let mut chars = s[at..].char_indices().skip(usize::from(quoted));
    let mut value = String::new();
    let mut end = s.len();
    while let Some((k, c)) = chars.next() {
        match c {
            '\'' if quoted => return Some((value, at + k + 1)),
            c if c.is_whitespace() && !quoted => {
                end = at + k;
                break;
            }
            '\\' => value.push(chars.next()?.1),
            c => value.push(c),
        }
    }
    (!quoted && !value.is_empty()).then_some((value, end))
}

/// Where the `postgres://` or `postgresql://` prefix ends, for URLs.
fn url_scheme_end(s: &str) -> Option<usize> {
    ["postgres://", "postgresql://"]
        .into_iter()
        .find(|p| s.starts_with(p))
        .map(str::len)
}

/// For a URL, where its `?` is (`Some(None)`: no query); `None` for `key=value` strings.
/// Found as tokio-postgres finds it: the user info ends at the first '@'.
fn url_query(s: &str) -> Option<Option<usize>> {
    let start = url_scheme_end(s)?;
    let host = s[start..].find('@').map_or(start, |k| start + k + 1);
    Some(s[host..].find('?').map(|k| host + k))
}

/// The query parameters of a URL from byte `from`, split as tokio-postgres splits them (the
/// key runs to the next '=', the value to the next '&'). A key with no '=' after it ends
/// the list; tokio-postgres reports it.
fn url_params(s: &str, from: usize) -> Vec<Setting> {
    let mut params = Vec::new();
    let mut i = from;
    while i < s.len() {
        let Some(eq) = s[i..].find('=').map(|k| i + k) else {
            break;
        };
        let end = s[eq + 1..].find('&').map_or(s.len(), |k| eq + 1 + k);
        params.push(Setting {
            key: decode(&s[i..eq]),
            value: decode(&s[eq + 1..end]),
            whole: i..end,
            value_at: eq + 1..end,
        });
        i = end + 1;
    }
    params
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn key_value_passwords_are_hidden_quoted_or_not() {
        assert_eq!(
            redact("host=db password=s3cret user=agent"),
            "host=db password=*** user=agent"
        );
        assert_eq!(
            redact("password = 'it''s a \\'long\\' one' dbname=x"),
            // '' is not an escape: the value ends at the second quote, and what follows
            // cannot be read, so it is hidden as well.
            "password = ***"
        );
        assert_eq!(
            redact("user=a password='two words \\' quote' sslmode=require"),
            "user=a password=*** sslmode=require"
        );
        assert_eq!(redact("password=a\\ b host=h"), "password=*** host=h");
        assert_eq!(
            redact("PASSWORD=x sslpassword=y"),
            "PASSWORD=*** sslpassword=***"
        );
        assert_eq!(redact("host=h password='unterminated"), "host=h ***");
        assert_eq!(
            redact("host=h password=my secret"),
            "host=h password=*** ***"
        );
        assert_eq!(redact("hunter2"), "***");
        assert_eq!(redact("host=h port=5432"), "host=h port=5432");
    }

    #[test]
    fn url_passwords_are_hidden_in_user_info_and_parameters() {
        assert_eq!(
            redact("postgresql://agent:s3cret@db.example:6543/skills?sslmode=require"),
            "postgresql://agent:***@db.example:6543/skills?sslmode=require"
        );
        assert_eq!(
            redact("postgres://agent:p%40ss@h/db"),
            "postgres://agent:***@h/db"
        );
        // An unencoded '@' in the password: everything up to the last '@' is user info.
        assert_eq!(redact("postgres://a:p@ss@h/db"), "postgres://a:***@h/db");
        assert_eq!(
            redact("postgres://h/db?user=a&password=x&application_name=y"),
            "postgres://h/db?user=a&password=***&application_name=y"
        );
        assert_eq!(
            redact("postgres://h/db?pass%77ord=x&oops"),
            "postgres://h/db?pass%77ord=***&***"
        );
        assert_eq!(redact("postgres://agent@h/db"), "postgres://agent@h/db");
        assert_eq!(redact("postgres://h:5432"), "postgres://h:5432");
    }

    #[test]
    fn tls_settings_are_taken_out_of_either_form() {
        let (rest, found) =
            take_tls_settings("host=h sslmode = 'verify-full' user=u sslrootcert=/ca.pem");
        assert_eq!(rest, "host=h user=u");
        assert_eq!(found.mode.as_deref(), Some("verify-full"));
        assert_eq!(found.rootcert.as_deref(), Some("/ca.pem"));
        let (rest, found) = take_tls_settings(
            "postgres://u:p@h/db?sslrootcert=%2Fetc%2Fca.pem&sslmode=require&connect_timeout=3",
        );
        assert_eq!(rest, "postgres://u:p@h/db?connect_timeout=3");
        assert_eq!(found.mode.as_deref(), Some("require"));
        assert_eq!(found.rootcert.as_deref(), Some("/etc/ca.pem"));
        let (rest, _) = take_tls_settings("postgres://h/db?sslmode=disable");
        assert_eq!(rest, "postgres://h/db");
        let (rest, found) = take_tls_settings("sslmode=require host=h =junk");
        assert_eq!(rest, "host=h =junk");
        assert_eq!(found.mode.as_deref(), Some("require"));
    }

    #[test]
    fn sslmode_defaults_to_prefer_and_env_fills_in() {
        let info = ConnInfo::parse("host=h user=u", no_env).unwrap();
        assert_eq!(info.tls.mode, SslMode::Prefer);
        assert_eq!(info.tls.roots, None);
        assert_eq!(
            info.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
        let env = |k: &str| (k == "PGSSLMODE").then(|| "require".to_string());
        let info = ConnInfo::parse("host=h", env).unwrap();
        assert_eq!(info.tls.mode, SslMode::Require);
        let info = ConnInfo::parse("host=h sslmode=disable", env).unwrap();
        assert_eq!(info.tls.mode, SslMode::Disable);
        assert_eq!(
            info.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
    }

    #[test]
    fn verify_modes_need_roots_and_require_checks_them_when_there() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not read until connecting").unwrap();
        let home = dir.path().to_str().unwrap().to_string();
        let env = |k: &str| (k == "HOME").then(|| home.clone());

        let full = ConnInfo::parse(
            &format!("host=h sslmode=verify-full sslrootcert='{}'", ca.display()),
            no_env,
        )
        .unwrap();
        assert_eq!(full.tls.roots, Some(Roots::File(ca.clone())));
        assert!(full.tls.check_host);
        assert_eq!(
            full.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let e = ConnInfo::parse("host=h sslmode=verify-ca", env)
            .err()
            .unwrap();
        assert!(e.contains("root.crt\" does not exist"), "{e}");
        let e = ConnInfo::parse("host=h sslmode=verify-ca", no_env)
            .err()
            .unwrap();
        assert!(e.contains("needs root certificates"), "{e}");
        let e = ConnInfo::parse("host=h sslmode=require sslrootcert=/nope.pem", no_env)
            .err()
            .unwrap();
        assert!(e.contains("/nope.pem\" does not exist"), "{e}");

        // require: no check without a root file, a check against ~/.postgresql/root.crt
        // when it exists (libpq's rule).
        let plain = ConnInfo::parse("host=h sslmode=require", env).unwrap();
        assert_eq!(plain.tls.roots, None);
        std::fs::create_dir(dir.path().join(".postgresql")).unwrap();
        std::fs::copy(&ca, dir.path().join(DEFAULT_ROOT_CERT)).unwrap();
        let checked = ConnInfo::parse("host=h sslmode=require", env).unwrap();
        assert_eq!(
            checked.tls.roots,
            Some(Roots::File(dir.path().join(DEFAULT_ROOT_CERT)))
        );
        assert!(!checked.tls.check_host);
        let ca_mode = ConnInfo::parse("host=h sslmode=verify-ca", env).unwrap();
        assert!(ca_mode.tls.roots.is_some() && !ca_mode.tls.check_host);
    }

    #[test]
    fn system_roots_mean_verify_full() {
        let info = ConnInfo::parse("host=h sslrootcert=system", no_env).unwrap();
        assert_eq!(info.tls.mode, SslMode::VerifyFull);
        assert_eq!(info.tls.roots, Some(Roots::System));
        let e = ConnInfo::parse("postgres://h/?sslrootcert=system&sslmode=require", no_env)
            .err()
            .unwrap();
        assert!(e.contains("use verify-full"), "{e}");
    }

    #[test]
    fn bad_values_are_named_without_quoting_the_string() {
        let e = ConnInfo::parse("host=h password=hunter2 sslmode=allow", no_env)
            .err()
            .unwrap();
        assert!(e.contains("sslmode=allow is not supported"), "{e}");
        let e = ConnInfo::parse("host=h password=hunter2 sslmode=strict", no_env)
            .err()
            .unwrap();
        assert!(e.contains("verify-full (got \"strict\")"), "{e}");
        let e = ConnInfo::parse("host=h password=hunter2 port=x", no_env)
            .err()
            .unwrap();
        assert!(e.starts_with("invalid connection string"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn connectors_build_for_every_mode() {
        for mode in SslMode::ALL {
            let tls = Tls {
                mode,
                roots: None,
                check_host: false,
            };
            tls.connector().unwrap();
        }
        let system = Tls {
            mode: SslMode::VerifyFull,
            roots: Some(Roots::System),
            check_host: true,
        };
        system.connector().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let e = Tls {
            mode: SslMode::VerifyCa,
            roots: Some(Roots::File(empty)),
            check_host: false,
        }
        .connector()
        .err()
        .unwrap();
        assert!(
            e.contains("no PEM certificate") || e.contains("sslrootcert"),
            "{e}"
        );
    }

    #[test]
    fn tls_failures_get_a_hint() {
        let require = Tls {
            mode: SslMode::Require,
            roots: None,
            check_host: false,
        };
        let hint = tls_hint(
            "error performing TLS handshake: server does not support TLS",
            &require,
        )
        .unwrap();
        assert!(hint.contains("does not accept SSL connections"), "{hint}");
        assert_eq!(tls_hint("connection refused", &require), None);
        let full = Tls {
            mode: SslMode::VerifyFull,
            roots: Some(Roots::File("/ca.pem".into())),
            check_host: true,
        };
        let hint = tls_hint("...: certificate verify failed: ...", &full).unwrap();
        assert!(
            hint.contains("/ca.pem") && hint.contains("name the host"),
            "{hint}"
        );
    }
}
