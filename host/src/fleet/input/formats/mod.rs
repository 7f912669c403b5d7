//! Trace formats besides Mooncake's and the block-key hash of token ids (docs/MODEL.md, "Trace
//! formats" and "vLLM-compatible block keys"): `--format`, `--hash`, `--hash-seed`, `--block-size`
//! and `fleet keys`. Mooncake lines keep their own fast reader (`trace.rs`).
//!
//! Every line is first split into its fields (`name -> raw JSON text`), then each field the
//! format needs is converted with a message that names it; the reader adds "FILE:LINE: ".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use brokerlab_core::fleet::keys;
use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS};

use crate::error::{CliError, CliResult};

// The token-id format and its hash (`--hash`, `fleet keys`), and the field helpers every
// format's parser uses, are their own files; this one reads the formats (`crate::fleet::cli::replay` runs them).
mod fields;
mod tokens;

pub use crate::fleet::input::trace::Lines;
pub use fields::*;
pub use tokens::*;

/// Trace formats (`--format`; docs/MODEL.md, "Trace formats").
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Mooncake FAST'25: `timestamp` ms, `input_length`, `output_length`, `hash_ids` per S = 512 tokens.
    Mooncake,
    /// Alibaba Qwen-Bailian: `chat_id`, `parent_chat_id`, `timestamp` s (float), `input_length`,
    /// `output_length`, `type`, `turn`, `hash_ids` per 16 tokens.
    Bailian,
    /// NVIDIA Dynamo's session replay: `session_id`, `timestamp`/`created_time` or
    /// `delay`/`delay_ms` (ms, from the previous turn's completion), `hash_ids` per S tokens.
    Dynamo,
    /// Token ids: `timestamp` ms, `token_ids`, `output_length`; keys by `--hash`.
    Tokens,
}

impl Format {
    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            Format::Mooncake => "mooncake",
            Format::Bailian => "bailian",
            Format::Dynamo => "dynamo",
            Format::Tokens => "tokens",
        }
    }

    /// The format a line with these fields is in, if it tells.
    pub fn of_fields(f: &Fields<'_>) -> Option<Format> {
        let has = |k: &str| f.contains_key(k);
        if has("token_ids") {
            Some(Format::Tokens)
        } else if has("chat_id") || has("parent_chat_id") || has("turn") {
            Some(Format::Bailian)
        } else if has("session_id") || has("delay") || has("delay_ms") || has("created_time") {
            Some(Format::Dynamo)
        } else if has("hash_ids") {
            Some(Format::Mooncake)
        } else {
            None
        }
    }
}

/// `--format`, or the format of the trace's first non-blank line (at most `max_line_bytes`,
/// after at most `max_blank_lines` blank ones) when omitted.
pub fn resolve_format(
    given: Option<Format>,
    path: &Path,
    max_line_bytes: u64,
    max_blank_lines: u64,
) -> CliResult<Format> {
    if let Some(f) = given {
        return Ok(f);
    }
    match std::fs::metadata(path) {
        // The reader says why it cannot be opened.
        Err(_) => drop(Lines::open(path, max_line_bytes)?),
        // A pipe cannot be read twice: without --format it is read as Mooncake, as always.
        Ok(m) if !m.is_file() => return Ok(Format::Mooncake),
        Ok(_) => {}
    }
    let mut lines = Lines::open(path, max_line_bytes)?.max_blank_lines(max_blank_lines);
    let Some(line) = lines.next_line()? else {
        return Ok(Format::Mooncake); // an empty trace replays as no requests in any format
    };
    let f = fields(&line, "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [0]}")
        .map_err(|m| lines.error(m))?;
    Format::of_fields(&f).ok_or_else(|| {
        lines.error(
            "cannot tell the trace format from this first line (no `token_ids`, `chat_id`/`parent_chat_id`/`turn`, `session_id`/`delay`/`created_time` or `hash_ids` field): pass --format mooncake|bailian|dynamo|tokens",
        )
    })
}

/// One Bailian line (alibaba-edu/qwen-bailian-usagetraces-anon).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BailianRecord {
    /// `chat_id`.
    pub chat_id: i64,
    /// `parent_chat_id` (-1 for a conversation's first request).
    pub parent_chat_id: i64,
    /// `timestamp` (seconds) in ns, rounded half up.
    pub arrival_ns: u64,
    /// `input_length`.
    pub input_length: u64,
    /// `output_length`.
    pub output_length: u64,
    /// `type` (text, search, image, file).
    pub kind: String,
    /// `turn`.
    pub turn: u64,
    /// `hash_ids`, one per 16 tokens.
    pub hash_ids: Vec<u64>,
}

/// Example of a Bailian line, for messages.
pub const BAILIAN_EXAMPLE: &str = "{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 61.114, \"input_length\": 40, \"output_length\": 10, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [0, 1, 2]}";

/// Parses a Bailian line into `rec`.
pub fn parse_bailian(line: &str, rec: &mut BailianRecord) -> Result<(), String> {
    let f = fields(line, BAILIAN_EXAMPLE)?;
    rec.chat_id = i64_field(&f, "chat_id", "an integer")?;
    rec.parent_chat_id = i64_field(&f, "parent_chat_id", "an integer, -1 for a first request")?;
    if rec.parent_chat_id < -1 {
        return Err(format!(
            "field `parent_chat_id`: expected an integer, -1 for a first request, got {}",
            rec.parent_chat_id
        ));
    }
    rec.arrival_ns = ns_field(&f, "timestamp", 9, "a non-negative number of seconds from trace start")?;
    rec.input_length = u64_field(&f, "input_length", "a non-negative integer (prompt tokens)")?;
    rec.output_length = u64_field(&f, "output_length", "a non-negative integer (output tokens)")?;
    rec.kind = str_field(&f, "type", "a string (text, search, image, file)")?;
    rec.turn = u64_field(&f, "turn", "a non-negative integer (the conversation turn)")?;
    int_array(&f, "hash_ids", "18446744073709551615", &mut rec.hash_ids)?;
    Ok(())
}

/// Hit tokens of a group of requests (a Bailian `type` or `turn`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Group {
    /// Requests.
    pub requests: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of hit tokens.
    pub hit_tokens: u64,
    /// hit_tokens / input_tokens (null without input).
    pub hit_rate: Option<f64>,
}

/// Bailian breakdowns: hit rate by `type` and by `turn`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Breakdown {
    /// By `type`, in name order.
    pub by_type: BTreeMap<String, Group>,
    /// By `turn`, in turn order.
    pub by_turn: BTreeMap<u64, Group>,
}

/// A Bailian, tokens or Dynamo-free trace as a request source for [`crate::fleet::run::simulate`].
pub struct FormatSource {
    /// The file.
    pub path: PathBuf,
    /// [`Format::Bailian`] or [`Format::Tokens`].
    pub format: Format,
    /// Keys of token ids (tokens).
    pub keyer: Keyer,
    /// Tokens per hash id (bailian; 16 by default).
    pub trace_block_tokens: u32,
    /// Per request, in order (bailian): index into `types`, and the turn.
    pub labels: Vec<(u32, u64)>,
    /// Distinct `type` values in order of first appearance (bailian).
    pub types: Vec<String>,
    /// Longest line accepted, bytes (`--max-line-bytes`).
    pub max_line_bytes: u64,
    /// Most blank lines accepted (`--max-blank-lines`).
    pub max_blank_lines: u64,
    /// The bytes read (for a progress display).
    pub read: crate::fleet::input::trace::BytesRead,
    /// The run's memory growth, which the labels grow into (set by the run).
    pub growth: Option<crate::mem::Growth>,
}

/// Most distinct Bailian `type` values in one trace (the trace has 4: text, search, image,
/// file); more is exit 2 (each is looked up per line and kept for the breakdown).
pub const MAX_BAILIAN_TYPES: usize = 1024;
/// The Bailian labels a replay keeps per request, as named in a memory-budget message.
pub const LABELS: &str = "per-request labels (type and turn, 16 B per request)";

impl FormatSource {
    /// The per-type and per-turn hit rates, from the run's (request index, input tokens, hit
    /// tokens), one per request in any order (bailian; either engine).
    pub fn breakdown(&self, done: impl Iterator<Item = (u64, u64, u64)>) -> Breakdown {
        let mut b = Breakdown::default();
        for (request, input, hit) in done {
            let (t, turn) = self.labels[request as usize];
            for g in [b.by_type.entry(self.types[t as usize].clone()).or_default(), b.by_turn.entry(turn).or_default()]
            {
                g.requests += 1;
                g.input_tokens += input;
                g.hit_tokens += hit;
            }
        }
        for g in b.by_type.values_mut().chain(b.by_turn.values_mut()) {
            g.hit_rate = (g.input_tokens > 0).then(|| g.hit_tokens as f64 / g.input_tokens as f64);
        }
        b
    }
}

impl crate::fleet::run::RequestSource for FormatSource {
    fn restart_error(&self) -> Option<String> {
        crate::fleet::run::restart_error_for(&self.path)
    }

    fn bytes_read(&self) -> Option<crate::fleet::input::trace::BytesRead> {
        Some(self.read.clone())
    }

    fn grow_into(&mut self, growth: &crate::mem::Growth) {
        self.growth = Some(growth.clone());
    }

    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&brokerlab_core::fleet::Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        let mut lines =
            Lines::open(&self.path, self.max_line_bytes)?.max_blank_lines(self.max_blank_lines).counting(&self.read);
        let mut keys_buf: Vec<u64> = Vec::new();
        let (mut tok, mut bai) = (TokensRecord::default(), BailianRecord::default());
        let mut last = None;
        // a fresh vector: the run's growth counts it from empty
        self.labels = Vec::new();
        while let Some(line) = lines.next_line()? {
            let (arrival_ns, input, output) = match self.format {
                Format::Tokens => {
                    parse_tokens(&line, &mut tok).map_err(|m| lines.error(m))?;
                    let ns = tok.timestamp_ms.checked_mul(1_000_000).ok_or_else(|| {
                        lines.error(format_args!(
                            "field `timestamp`: {} ms overflows 64-bit nanoseconds",
                            tok.timestamp_ms
                        ))
                    })?;
                    self.keyer.keys(&tok.token_ids, &mut keys_buf);
                    (ns, tok.token_ids.len() as u64, tok.output_length)
                }
                _ => {
                    parse_bailian(&line, &mut bai).map_err(|m| lines.error(m))?;
                    if bai.input_length > MAX_PROMPT_TOKENS {
                        return Err(lines.error(format_args!(
                            "field `input_length`: {} exceeds the limit of {MAX_PROMPT_TOKENS} tokens",
                            bai.input_length
                        )));
                    }
                    keys_buf.resize((bai.input_length / BLOCK_TOKENS as u64) as usize, 0);
                    keys::trace_keys(&bai.hash_ids, bai.input_length, self.trace_block_tokens, &mut keys_buf)
                        .map_err(|e| lines.error(e))?;
                    let t = match self.types.iter().position(|t| *t == bai.kind) {
                        Some(t) => t,
                        None if self.types.len() == MAX_BAILIAN_TYPES => {
                            return Err(lines.error(format_args!(
                                "field `type`: {:?} would be distinct value {} of the trace; expected at most \
                                 {MAX_BAILIAN_TYPES} (MAX_BAILIAN_TYPES: text, search, image, file, ...)",
                                bai.kind,
                                MAX_BAILIAN_TYPES + 1
                            )));
                        }
                        None => {
                            self.types.push(bai.kind.clone());
                            self.types.len() - 1
                        }
                    };
                    if let Some(g) = &self.growth {
                        g.reserve_one(&mut self.labels, LABELS)?;
                    }
                    self.labels.push((t as u32, bai.turn));
                    (bai.arrival_ns, bai.input_length, bai.output_length)
                }
            };
            if let Some(prev) = last
                && arrival_ns < prev
            {
                return Err(lines.error(format_args!(
                    "field `timestamp`: {} is before the previous line's {}; requests must be in non-decreasing time order",
                    show_ns(arrival_ns, self.format),
                    show_ns(prev, self.format)
                )));
            }
            last = Some(arrival_ns);
            let req = brokerlab_core::fleet::Request {
                arrival_ns,
                input_tokens: input,
                output_tokens: output,
                keys: &keys_buf,
            };
            sink(&req).map_err(|e| {
                let capacity = crate::fleet::run::fields::request_hint(&e);
                match e {
                    // a tokens line has no `input_length`: its prompt is the token ids
                    brokerlab_core::fleet::Error::InvalidRequest {
                        field: brokerlab_core::fleet::RequestField::InputLength,
                        expected,
                    } if self.format == Format::Tokens => lines.error(format_args!(
                        "field `token_ids` ({input} tokens, the prompt): expected {expected}{capacity}"
                    )),
                    e => lines.error(format_args!("{e}{capacity}")),
                }
            })?;
        }
        Ok(())
    }
}

/// A time in the unit of the format's `timestamp`, for messages.
fn show_ns(ns: u64, f: Format) -> String {
    match f {
        Format::Bailian => format!("{} s ({ns} ns)", ns as f64 / 1e9),
        _ => format!("{} ms", ns / 1_000_000),
    }
}

/// `--hash`, `--hash-seed` and `--block-size` are for token ids: an error for other formats.
pub fn only_token_hash(h: &HashArgs, format: Format) -> CliResult<()> {
    if format == Format::Tokens {
        return Ok(());
    }
    let flag = if h.hash != HashKind::Brokerlab {
        "--hash"
    } else if h.hash_seed.is_some() {
        "--hash-seed"
    } else if h.block_size.is_some() {
        "--block-size"
    } else {
        return Ok(());
    };
    Err(CliError::bad_input(format!(
        "{flag}: applies to token ids (--format tokens); a {} trace carries hash ids, keyed by the model's hash (--trace-block-size sets their size)",
        format.name()
    )))
}

/// The per-type and per-turn table of a Bailian replay.
pub fn render_breakdown(b: &Breakdown) -> String {
    let mut o = String::new();
    breakdown_table(&mut o, "type", &b.by_type);
    breakdown_table(&mut o, "turn", &b.by_turn);
    o
}

/// One table of [`render_breakdown`]: a row per key (request type or turn).
fn breakdown_table<K: std::fmt::Display>(o: &mut String, key: &str, rows: &BTreeMap<K, Group>) {
    let pct = |g: &Group| g.hit_rate.map_or_else(|| "n/a".to_string(), |h| format!("{:.2}", h * 100.0));
    o.push_str(&format!("\n{key}          requests  input tokens  hit tokens  hit rate %\n"));
    for (k, g) in rows {
        o.push_str(&format!(
            "{k:<12}  {:>8}  {:>12}  {:>10}  {:>10}\n",
            g.requests,
            g.input_tokens,
            g.hit_tokens,
            pct(g)
        ));
    }
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
