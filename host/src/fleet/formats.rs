//! Trace formats besides Mooncake's and the block-key hash of token ids (docs/MODEL.md, "Trace
//! formats" and "vLLM-compatible block keys"): `--format`, `--hash`, `--hash-seed`, `--block-size`
//! and `fleet keys`. Mooncake lines keep their own fast reader (`trace.rs`).
//!
//! Every line is first split into its fields (`name -> raw JSON text`), then each field the
//! format needs is converted with a message that names it; the reader adds "FILE:LINE: ".

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS};
use brokerlab_core::fleet::{keys, vllm};
use clap::Args;
use serde_json::value::RawValue;

use crate::error::{CliError, CliResult};

/// How the block keys of token ids are computed (`--hash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HashKind {
    /// The model's chained 64-bit hash of 16-token blocks (docs/MODEL.md, "The hash H").
    Brokerlab,
    /// vLLM's `--prefix-caching-hash-algo sha256_cbor` block hash; key = the digest's last 8 bytes,
    /// big-endian (docs/MODEL.md, "vLLM-compatible block keys").
    VllmSha256Cbor,
}

/// vLLM v0.33.0's seed when `PYTHONHASHSEED` is unset and the hash is a SHA-256 one
/// (`resolve_none_hash_seed` in `vllm/v1/core/kv_cache_utils.py`).
pub const VLLM_DEFAULT_SEED: &str = "vllm-none-hash";

/// The hash flags of commands that read token ids.
#[derive(Debug, Args, Clone)]
pub struct HashArgs {
    /// Block-key hash of token ids: brokerlab (the model's chained hash, 16-token blocks) or
    /// vllm-sha256-cbor (vLLM started with `--prefix-caching-hash-algo sha256_cbor`).
    #[arg(long, value_enum, default_value = "brokerlab")]
    pub hash: HashKind,
    /// vllm-sha256-cbor: the seed string, i.e. the fleet's PYTHONHASHSEED (default
    /// "vllm-none-hash", vLLM v0.33.0's value when PYTHONHASHSEED is unset).
    #[arg(long, allow_hyphen_values = true)]
    pub hash_seed: Option<String>,
    /// vllm-sha256-cbor: tokens per block B (vLLM's --block-size; default 16, llm-d's guides use
    /// 64), 1..=1048576. The brokerlab hash always uses 16.
    #[arg(long, allow_negative_numbers = true, value_parser = super::whole::<usize>)]
    pub block_size: Option<usize>,
}

/// Computes a prompt's block keys as the hash flags say.
#[derive(Debug, Clone)]
pub struct Keyer {
    kind: HashKind,
    seed: vllm::Digest,
    block_tokens: usize,
}

impl Keyer {
    /// Checks the flags together; an error names the flag.
    pub fn new(a: &HashArgs) -> CliResult<Self> {
        match a.hash {
            HashKind::Brokerlab => {
                if a.hash_seed.is_some() {
                    return Err(CliError::bad_input(
                        "--hash-seed: only --hash vllm-sha256-cbor has a seed (the brokerlab hash has none)",
                    ));
                }
                if let Some(b) = a.block_size.filter(|&b| b != BLOCK_TOKENS) {
                    return Err(CliError::bad_input(format!(
                        "--block-size {b}: the brokerlab hash keys 16-token blocks (the model's B); other sizes need --hash vllm-sha256-cbor"
                    )));
                }
                Ok(Keyer { kind: a.hash, seed: [0; 32], block_tokens: BLOCK_TOKENS })
            }
            HashKind::VllmSha256Cbor => {
                let b = a.block_size.unwrap_or(BLOCK_TOKENS);
                vllm::check_block_tokens(b)
                    .map_err(|_| CliError::bad_input(format!("--block-size {b}: expected 1 to 1048576 tokens")))?;
                let seed = vllm::seed_digest(a.hash_seed.as_deref().unwrap_or(VLLM_DEFAULT_SEED));
                Ok(Keyer { kind: a.hash, seed, block_tokens: b })
            }
        }
    }

    /// Tokens per block.
    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// The keys of the full blocks of `tokens`, into `out` (resized).
    pub fn keys(&self, tokens: &[u32], out: &mut Vec<u64>) {
        out.resize(tokens.len() / self.block_tokens, 0);
        let n = match self.kind {
            HashKind::Brokerlab => keys::token_keys(tokens, out),
            HashKind::VllmSha256Cbor => vllm::token_keys(&self.seed, tokens, self.block_tokens, out),
        };
        debug_assert_eq!(n, Ok(out.len()));
    }
}

/// Reads the non-blank lines of a trace (plain, gzip or zstd), with bounded memory.
pub struct Lines {
    path: PathBuf,
    reader: Box<dyn BufRead>,
    line_no: usize,
    buf: Vec<u8>,
    max_line_bytes: u64,
}

impl Lines {
    /// Opens `path` ([`super::input::open`]).
    pub fn open(path: &Path) -> CliResult<Self> {
        Ok(Self::new(path.to_path_buf(), super::input::open(path)?))
    }

    /// Reads from any buffered reader; `path` is used in messages.
    pub fn new(path: PathBuf, reader: Box<dyn BufRead>) -> Self {
        Lines { path, reader, line_no: 0, buf: Vec::new(), max_line_bytes: super::trace::max_line_bytes() }
    }

    /// "FILE:LINE" of the last line returned.
    pub fn location(&self) -> String {
        format!("{}:{}", self.path.display(), self.line_no)
    }

    /// An input error at the last line returned: "FILE:LINE: msg", exit 2.
    pub fn error(&self, msg: impl std::fmt::Display) -> CliError {
        CliError::bad_input(format!("{}: {msg}", self.location()))
    }

    /// The next non-blank line, trimmed, or `None` at the end.
    pub fn next_line(&mut self) -> CliResult<Option<String>> {
        loop {
            self.buf.clear();
            let n = (&mut self.reader).take(self.max_line_bytes.saturating_add(1)).read_until(b'\n', &mut self.buf);
            let n = n.map_err(|e| {
                CliError::bad_input(format!("{}:{}: cannot read: {e}", self.path.display(), self.line_no + 1))
            })?;
            if n == 0 {
                return Ok(None);
            }
            super::progress::note_trace_bytes(n);
            self.line_no += 1;
            let body = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
            if body.len() as u64 > self.max_line_bytes {
                return Err(self.error(format_args!(
                    "the line is longer than --max-line-bytes {} bytes; raise --max-line-bytes if the file is right",
                    self.max_line_bytes
                )));
            }
            let text = std::str::from_utf8(body).map_err(|e| {
                CliError::bad_input(format!(
                    "{}: not UTF-8 (byte {}): expected a JSON line",
                    self.location(),
                    e.valid_up_to()
                ))
            })?;
            let text = if self.line_no == 1 { text.strip_prefix('\u{feff}').unwrap_or(text) } else { text };
            let line = text.trim();
            if !line.is_empty() {
                return Ok(Some(line.to_string()));
            }
        }
    }
}

/// A line's fields: name -> raw JSON text. Unknown fields are kept and ignored by the formats.
pub type Fields<'a> = BTreeMap<String, &'a RawValue>;

/// Splits a line into its fields; `example` is shown when the line is not a JSON object.
pub fn fields<'a>(line: &'a str, example: &str) -> Result<Fields<'a>, String> {
    serde_json::from_str::<Fields<'a>>(line).map_err(|e| {
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        format!("column {}: expected a JSON object like {example}: {msg}", e.column())
    })
}

/// A present, non-null field's raw text.
fn raw<'a>(f: &Fields<'a>, name: &str, expected: &str) -> Result<&'a str, String> {
    match f.get(name).map(|r| r.get()) {
        None => Err(format!("missing field `{name}`: expected {expected}")),
        Some("null") => Err(format!("field `{name}` is null: expected {expected}")),
        Some(t) => Ok(t),
    }
}

/// A non-negative integer field.
pub fn u64_field(f: &Fields<'_>, name: &str, expected: &str) -> Result<u64, String> {
    let t = raw(f, name, expected)?;
    serde_json::from_str::<u64>(t).map_err(|_| format!("field `{name}`: expected {expected}, got {t}"))
}

/// An integer field (may be negative).
pub fn i64_field(f: &Fields<'_>, name: &str, expected: &str) -> Result<i64, String> {
    let t = raw(f, name, expected)?;
    serde_json::from_str::<i64>(t).map_err(|_| format!("field `{name}`: expected {expected}, got {t}"))
}

/// A string field.
pub fn str_field(f: &Fields<'_>, name: &str, expected: &str) -> Result<String, String> {
    let t = raw(f, name, expected)?;
    serde_json::from_str::<String>(t).map_err(|_| format!("field `{name}`: expected {expected}, got {t}"))
}

/// An array of integers each at most `max`, pushed into `out` (cleared first).
pub fn int_array<T: TryFrom<u64>>(f: &Fields<'_>, name: &str, max_desc: &str, out: &mut Vec<T>) -> Result<(), String> {
    let expected = format!("an array of integers from 0 to {max_desc}");
    let t = raw(f, name, &expected)?;
    let items =
        serde_json::from_str::<Vec<&RawValue>>(t).map_err(|_| format!("field `{name}`: expected {expected}"))?;
    out.clear();
    out.reserve(items.len());
    for (i, item) in items.iter().enumerate() {
        let v = serde_json::from_str::<u64>(item.get()).ok().and_then(|v| T::try_from(v).ok()).ok_or_else(|| {
            format!("field `{name}[{i}]`: expected an integer from 0 to {max_desc}, got {}", item.get())
        })?;
        out.push(v);
    }
    Ok(())
}

/// One line of the tokens format: `{"timestamp": ms, "token_ids": [...], "output_length": n}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokensRecord {
    /// Arrival, ms from the trace start.
    pub timestamp_ms: u64,
    /// The prompt's token ids (L = their count).
    pub token_ids: Vec<u32>,
    /// Output length O, tokens.
    pub output_length: u64,
}

/// Example of a tokens line, for messages.
pub const TOKENS_EXAMPLE: &str = "{\"timestamp\": 0, \"token_ids\": [1, 2, 3], \"output_length\": 10}";

/// Parses a tokens line into `rec`.
pub fn parse_tokens(line: &str, rec: &mut TokensRecord) -> Result<(), String> {
    let f = fields(line, TOKENS_EXAMPLE)?;
    rec.timestamp_ms = u64_field(&f, "timestamp", "a non-negative integer (milliseconds from trace start)")?;
    int_array(&f, "token_ids", "4294967295", &mut rec.token_ids)?;
    if rec.token_ids.len() as u64 > MAX_PROMPT_TOKENS {
        return Err(format!(
            "field `token_ids`: {} tokens exceed the limit of {MAX_PROMPT_TOKENS} tokens",
            rec.token_ids.len()
        ));
    }
    rec.output_length = u64_field(&f, "output_length", "a non-negative integer (output tokens)")?;
    if f.contains_key("input_length") {
        let l = u64_field(&f, "input_length", "a non-negative integer (prompt tokens)")?;
        if l != rec.token_ids.len() as u64 {
            return Err(format!(
                "field `input_length`: {l} differs from the {} token ids (the prompt is the token ids)",
                rec.token_ids.len()
            ));
        }
    }
    Ok(())
}

/// Reads tokens lines, checking that timestamps never decrease.
pub struct TokensReader {
    lines: Lines,
    rec: TokensRecord,
    last_ts: Option<u64>,
}

impl TokensReader {
    /// Opens `path`.
    pub fn open(path: &Path) -> CliResult<Self> {
        Ok(TokensReader { lines: Lines::open(path)?, rec: TokensRecord::default(), last_ts: None })
    }

    /// The line reader (location, errors).
    pub fn lines(&self) -> &Lines {
        &self.lines
    }

    /// The next record, or `None` at the end.
    pub fn next_record(&mut self) -> CliResult<Option<&TokensRecord>> {
        let Some(line) = self.lines.next_line()? else {
            return Ok(None);
        };
        parse_tokens(&line, &mut self.rec).map_err(|m| self.lines.error(m))?;
        check_order(&self.lines, &mut self.last_ts, self.rec.timestamp_ms)?;
        Ok(Some(&self.rec))
    }
}

/// Timestamps must not decrease (in the unit the line gives).
fn check_order(lines: &Lines, last: &mut Option<u64>, ts: u64) -> CliResult<()> {
    if let Some(prev) = *last
        && ts < prev
    {
        return Err(lines.error(format_args!(
            "field `timestamp`: {ts} is smaller than the previous line's {prev}; requests must be in non-decreasing time order"
        )));
    }
    *last = Some(ts);
    Ok(())
}

/// `fleet keys` arguments.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// Trace of token ids (plain, gzip or zstd).
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace format; `fleet keys` reads token ids, so only `tokens`.
    #[arg(long, value_enum, default_value = "tokens")]
    pub format: KeysFormat,
    #[command(flatten)]
    pub hash: HashArgs,
    /// Longest trace line accepted, bytes.
    #[arg(long, value_name = "BYTES", default_value = "32M", value_parser = crate::mem::parse_size)]
    pub max_line_bytes: u64,
}

/// Formats `fleet keys` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeysFormat {
    /// `{"timestamp": ms, "token_ids": [...], "output_length": n}` per line.
    Tokens,
}

/// `fleet keys`: one line per request, its block keys as decimal u64 separated by spaces (an
/// empty line for a prompt shorter than one block).
pub fn keys_cmd(a: KeysArgs) -> CliResult<i32> {
    let keyer = Keyer::new(&a.hash)?;
    super::trace::set_max_line_bytes(a.max_line_bytes);
    let mut reader = TokensReader::open(&a.trace)?;
    let mut keys = Vec::new();
    let mut out = String::new();
    while let Some(rec) = reader.next_record()? {
        keyer.keys(&rec.token_ids, &mut keys);
        out.clear();
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&k.to_string());
        }
        say!("{out}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_lines_parse_and_errors_name_the_field() {
        let mut rec = TokensRecord::default();
        parse_tokens(r#"{"timestamp": 7, "token_ids": [0, 4294967295], "output_length": 3, "x": [1]}"#, &mut rec)
            .unwrap();
        assert_eq!(rec, TokensRecord { timestamp_ms: 7, token_ids: vec![0, u32::MAX], output_length: 3 });
        for (bad, want) in [
            (r#"{"timestamp": 1, "token_ids": [1, 4294967296], "output_length": 1}"#, "field `token_ids[1]`"),
            (r#"{"timestamp": 1, "token_ids": [1, -1], "output_length": 1}"#, "field `token_ids[1]`"),
            (r#"{"timestamp": 1.5, "token_ids": [], "output_length": 1}"#, "field `timestamp`"),
            (r#"{"timestamp": 1, "token_ids": 3, "output_length": 1}"#, "field `token_ids`"),
            (r#"{"timestamp": 1, "token_ids": [1]}"#, "missing field `output_length`"),
            (r#"{"timestamp": 1, "token_ids": null, "output_length": 1}"#, "field `token_ids` is null"),
            (r#"{"timestamp": 1, "token_ids": [1], "output_length": 1, "input_length": 2}"#, "field `input_length`"),
            (r#"{"timestamp": 1, "#, "column"),
        ] {
            let e = parse_tokens(bad, &mut rec).unwrap_err();
            assert!(e.starts_with(want), "{bad}: {e}");
        }
    }

    #[test]
    fn brokerlab_hash_refuses_vllm_flags() {
        let args = |hash, seed: Option<&str>, b| HashArgs { hash, hash_seed: seed.map(String::from), block_size: b };
        assert!(Keyer::new(&args(HashKind::Brokerlab, Some("1"), None)).is_err());
        assert!(Keyer::new(&args(HashKind::Brokerlab, None, Some(64))).is_err());
        assert!(Keyer::new(&args(HashKind::Brokerlab, None, Some(16))).is_ok());
        assert!(Keyer::new(&args(HashKind::VllmSha256Cbor, None, Some(0))).is_err());
        assert_eq!(Keyer::new(&args(HashKind::VllmSha256Cbor, None, Some(64))).unwrap().block_tokens(), 64);
    }
}
