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
    /// Every scenario and trace read.
    pub inputs: Vec<Input>,
}

/// One input file (or built-in scenario).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Input {
    /// "scenario" or "trace".
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
            Ok(0) => return Ok(h.finish()),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// SHA-256 (FIPS 180-4), streaming. Only for naming inputs; checked against the standard's
/// test vectors below.
#[derive(Clone)]
pub struct Sha256 {
    state: [u32; 8],
    block: [u8; 64],
    used: usize,
    len_bytes: u64,
}

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
];

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256 {
    /// A fresh hash.
    pub fn new() -> Self {
        Sha256 {
            state: [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19],
            block: [0; 64],
            used: 0,
            len_bytes: 0,
        }
    }

    /// Digest of `bytes`.
    pub fn digest(bytes: &[u8]) -> [u8; 32] {
        let mut h = Self::new();
        h.update(bytes);
        h.finish()
    }

    /// Feeds `data`.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len_bytes = self.len_bytes.wrapping_add(data.len() as u64);
        while !data.is_empty() {
            let n = (64 - self.used).min(data.len());
            self.block[self.used..self.used + n].copy_from_slice(&data[..n]);
            self.used += n;
            data = &data[n..];
            if self.used == 64 {
                let b = self.block;
                self.compress(&b);
                self.used = 0;
            }
        }
    }

    /// The digest.
    pub fn finish(mut self) -> [u8; 32] {
        let bits = self.len_bytes.wrapping_mul(8);
        self.update(&[0x80]);
        while self.used != 56 {
            self.update(&[0]);
        }
        self.update(&bits.to_be_bytes());
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }

    fn compress(&mut self, block: &[u8; 64]) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = self.state;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = h.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            (h, g, f, e, d, c, b, a) = (g, f, e, d.wrapping_add(t1), c, b, a, t1.wrapping_add(t2));
        }
        for (s, v) in self.state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *s = s.wrapping_add(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_fips_180_test_vectors() {
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
        assert_eq!(hex(&h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
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
