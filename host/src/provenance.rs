//! What a result came from: the command line, the brokerlab version and git commit, the date,
//! and the SHA-256 of every scenario and trace read (the same digest `sha256sum` prints).
//!
//! JSON outputs carry it as a top-level `provenance` object, CSV files as a sidecar
//! `NAME.provenance.json` (a `#` line would trip most CSV readers), HTML and Markdown pages as a
//! block near the top. The date is the only line that differs between two runs of the same
//! command on the same inputs; `--no-date` leaves it out (tests compare bytes).

use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{CliError, CliResult};

/// brokerlab's version (Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Git commit the binary was built from, "unknown" outside a git checkout (host/build.rs).
pub const GIT_COMMIT: &str = env!("BROKERLAB_GIT_COMMIT");

/// Provenance of one output.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Provenance {
    /// The command line, program name shortened to `brokerlab`, arguments shell-quoted.
    pub command: String,
    /// brokerlab version.
    pub brokerlab_version: String,
    /// Git commit of the build, or "unknown".
    pub git_commit: String,
    /// UTC date and time of the run (RFC 3339), absent with `--no-date`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    /// Every scenario, trace and router config read.
    pub inputs: Vec<Input>,
    /// With `--router-config`: the router it resolved to (`router`: the preset or `custom`;
    /// `spec`: policy, filters, weighted scorers, picker and every parameter), absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_pipeline: Option<serde_json::Value>,
}

/// One input file (or built-in scenario).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Input {
    /// "scenario", "trace" or "router-config".
    pub kind: String,
    /// Path as given, or `scenarios/NAME.toml (built in)`.
    pub path: String,
    /// SHA-256 of the bytes, lowercase hex; null when the input is not a regular file (a pipe
    /// cannot be read twice).
    pub sha256: Option<String>,
}

impl Provenance {
    /// Provenance of this process's command line, dated now unless `no_date`.
    pub fn of_this_run(no_date: bool) -> Self {
        let args: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
        Self::new(&args, (!no_date).then(now_utc))
    }

    /// Provenance of `brokerlab ARGS`, with `date` as given.
    pub fn new(args: &[String], date: Option<String>) -> Self {
        let mut command = String::from("brokerlab");
        for a in args {
            command.push(' ');
            command += &shell_quote(a);
        }
        Provenance {
            command,
            brokerlab_version: VERSION.into(),
            git_commit: GIT_COMMIT.into(),
            date,
            inputs: Vec::new(),
            router_pipeline: None,
        }
    }

    /// Adds an input with the digest of `bytes`.
    pub fn add_bytes(&mut self, kind: &str, path: &str, bytes: &[u8]) {
        self.inputs.push(Input { kind: kind.into(), path: path.into(), sha256: Some(hex(&Sha256::digest(bytes))) });
    }

    /// Adds an input file, hashing it in a streaming pass; a pipe or device is listed without a
    /// digest (reading it here would consume it).
    pub fn add_file(&mut self, kind: &str, path: &Path) -> CliResult<()> {
        let sha256 = if std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            Some(hex(
                &sha256_file(path).map_err(|e| CliError::bad_input(format!("{}: cannot read: {e}", path.display())))?
            ))
        } else {
            None
        };
        self.inputs.push(Input { kind: kind.into(), path: path.display().to_string(), sha256 });
        Ok(())
    }

    /// Pretty JSON of `inner` (an object) with this as its first key, `provenance`.
    pub fn json_with<T: Serialize>(&self, inner: &T) -> String {
        #[derive(Serialize)]
        struct With<'a, T> {
            provenance: &'a Provenance,
            #[serde(flatten)]
            inner: &'a T,
        }
        serde_json::to_string_pretty(&With { provenance: self, inner }).expect("provenance and results serialize")
    }

    /// The sidecar of a CSV file, `{"provenance": {...}}`, pretty.
    pub fn sidecar_json(&self) -> String {
        self.json_with(&serde_json::Map::new())
    }

    /// Plain-text lines `label: value` (Markdown and HTML render these); the date is one line.
    pub fn lines(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("command".to_string(), self.command.clone()),
            ("brokerlab".to_string(), format!("{} (git commit {})", self.brokerlab_version, self.git_commit)),
        ];
        if let Some(d) = &self.date {
            v.push(("date".into(), d.clone()));
        }
        for i in &self.inputs {
            let digest =
                i.sha256.as_deref().map_or("not hashed (not a regular file)".into(), |h| format!("sha256 {h}"));
            v.push((i.kind.clone(), format!("{} {digest}", i.path)));
        }
        if let Some(r) = &self.router_pipeline {
            v.push(("router pipeline".into(), r.to_string()));
        }
        v
    }

    /// A Markdown section; one line per item.
    pub fn markdown(&self) -> String {
        let mut o = String::from("## Provenance\n\n");
        for (k, v) in self.lines() {
            let _ = writeln!(o, "- {k}: `{v}`");
        }
        o
    }

    /// An HTML table, one source line per row (so the date is a line of its own).
    pub fn html(&self) -> String {
        let mut o = String::from("\n<table class=\"prov\">\n");
        for (k, v) in self.lines() {
            let _ = writeln!(o, "<tr><th>{}</th><td><code>{}</code></td></tr>", html_escape(&k), html_escape(&v));
        }
        o + "</table>\n"
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `s` as a POSIX shell word: unchanged when it has only safe characters, else single-quoted.
pub fn shell_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c);
    if !s.is_empty() && s.chars().all(safe) { s.to_string() } else { format!("'{}'", s.replace('\'', "'\\''")) }
}

/// Now, UTC, RFC 3339 to the second (`2026-12-01T14:28:08Z`).
pub fn now_utc() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the Unix epoch as RFC 3339 UTC (proleptic Gregorian calendar).
pub fn rfc3339(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days to civil date (H. Hinnant's algorithm), with the era shifted to start in March.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// SHA-256 of a file, read in 1 MiB chunks.
pub fn sha256_file(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(h.finalize().into()),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_fips_180_test_vectors() {
        // the sha2 crate, checked here against the standard's vectors as this module uses it
        assert_eq!(hex(&Sha256::digest(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex(&Sha256::digest(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(
            hex(&Sha256::digest(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        // One million 'a', fed in uneven pieces (crosses block boundaries at every offset).
        let mut h = Sha256::new();
        let a = [b'a'; 997];
        let mut left = 1_000_000;
        while left > 0 {
            let n = left.min(a.len());
            h.update(&a[..n]);
            left -= n;
        }
        assert_eq!(hex(&h.finalize()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    }

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn command_line_is_shell_quoted() {
        let args: Vec<String> = ["fleet", "report", "--out", "my dir/it's", "--shrink", "10"].map(Into::into).into();
        let p = Provenance::new(&args, None);
        assert_eq!(p.command, "brokerlab fleet report --out 'my dir/it'\\''s' --shrink 10");
        let json = serde_json::to_string(&p).unwrap();
        assert!(!json.contains("\"date\""), "{json}");
    }
}
