//! Trace formats besides Mooncake's and the block-key hash of token ids (docs/MODEL.md, "Trace
//! formats" and "vLLM-compatible block keys"): `--format`, `--hash`, `--hash-seed`, `--block-size`
//! and `fleet keys`. Mooncake lines keep their own fast reader (`trace.rs`).
//!
//! Every line is first split into its fields (`name -> raw JSON text`), then each field the
//! format needs is converted with a message that names it; the reader adds "FILE:LINE: ".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS, MAX_VLLM_BLOCK_TOKENS};
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
                vllm::check_block_tokens(b).map_err(|_| {
                    CliError::bad_input(format!("--block-size {b}: expected 1 to {MAX_VLLM_BLOCK_TOKENS} tokens"))
                })?;
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

pub use super::trace::Lines;

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
    #[arg(long, value_name = "BYTES", default_value_t = super::trace::DEFAULT_MAX_LINE_BYTES, value_parser = crate::mem::parse_size)]
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

/// `--format`, or the format of the trace's first non-blank line when omitted.
pub fn resolve_format(given: Option<Format>, path: &Path) -> CliResult<Format> {
    if let Some(f) = given {
        return Ok(f);
    }
    match std::fs::metadata(path) {
        // The reader says why it cannot be opened.
        Err(_) => drop(Lines::open(path)?),
        // A pipe cannot be read twice: without --format it is read as Mooncake, as always.
        Ok(m) if !m.is_file() => return Ok(Format::Mooncake),
        Ok(_) => {}
    }
    let mut lines = Lines::open(path)?;
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

/// Converts a JSON number literal (non-negative; decimal point and exponent allowed) of a unit
/// worth 10^`unit_exp` ns into integer ns, exactly from its decimal digits, rounding half up:
/// ns = floor(v * 10^unit_exp + 1/2). `None` when negative, not a number or beyond u64.
pub fn decimal_to_ns(text: &str, unit_exp: i64) -> Option<u64> {
    let (mant, exp) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None; // also a sign: timestamps are not negative
    }
    if mant.ends_with('.') || !(-1_000_000..=1_000_000).contains(&exp) {
        return None;
    }
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').skip_while(|&d| d == 0).collect();
    // value = D * 10^e ns, D the digits as an integer.
    let e = exp - frac.len() as i64 + unit_exp;
    let int_of = |ds: &[u8]| -> Option<u64> {
        ds.iter().try_fold(0u64, |acc, &d| acc.checked_mul(10)?.checked_add(u64::from(d)))
    };
    if e >= 0 {
        if digits.is_empty() {
            return Some(0);
        }
        let d = int_of(&digits)?;
        return d.checked_mul(10u64.checked_pow(u32::try_from(e).ok()?)?);
    }
    let drop = usize::try_from(-e).ok()?;
    if drop > digits.len() {
        return Some(0); // below 0.1 ns
    }
    let keep = digits.len() - drop;
    let q = int_of(&digits[..keep])?;
    if digits[keep] >= 5 { q.checked_add(1) } else { Some(q) }
}

/// A number field converted by [`decimal_to_ns`].
pub fn ns_field(f: &Fields<'_>, name: &str, unit_exp: i64, expected: &str) -> Result<u64, String> {
    let t = raw(f, name, expected)?;
    decimal_to_ns(t, unit_exp).ok_or_else(|| format!("field `{name}`: expected {expected}, got {t}"))
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

/// A Bailian, tokens or Dynamo-free trace as a request source for [`super::run::simulate`].
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
}

impl FormatSource {
    /// The per-type and per-turn hit rates, from the run's outcomes (bailian).
    pub fn breakdown(&self, outcomes: &[brokerlab_core::fleet::Outcome]) -> Breakdown {
        let mut b = Breakdown::default();
        for o in outcomes {
            let (t, turn) = self.labels[o.request as usize];
            let input = o.hit_tokens + o.prefill_tokens;
            for g in [b.by_type.entry(self.types[t as usize].clone()).or_default(), b.by_turn.entry(turn).or_default()]
            {
                g.requests += 1;
                g.input_tokens += input;
                g.hit_tokens += o.hit_tokens;
            }
        }
        for g in b.by_type.values_mut().chain(b.by_turn.values_mut()) {
            g.hit_rate = (g.input_tokens > 0).then(|| g.hit_tokens as f64 / g.input_tokens as f64);
        }
        b
    }
}

impl super::run::RequestSource for FormatSource {
    fn restart_error(&self) -> Option<String> {
        super::run::restart_error_for(&self.path)
    }

    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&brokerlab_core::fleet::Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        let mut lines = Lines::open(&self.path)?;
        let mut keys_buf: Vec<u64> = Vec::new();
        let (mut tok, mut bai) = (TokensRecord::default(), BailianRecord::default());
        let mut last = None;
        self.labels.clear();
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
                        None => {
                            self.types.push(bai.kind.clone());
                            self.types.len() - 1
                        }
                    };
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
            sink(&req).map_err(|e| lines.error(e))?;
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

/// The JSON of `fleet replay --json` for a format other than Mooncake.
#[derive(serde::Serialize)]
struct ReplayJson<'a> {
    format: &'static str,
    #[serde(flatten)]
    summary: &'a super::run::Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    breakdown: Option<&'a Breakdown>,
}

/// `fleet replay` of a bailian, dynamo or tokens trace (`cfg` already checked).
pub fn replay(a: super::ReplayArgs, format: Format, cfg: brokerlab_core::fleet::FleetConfig) -> CliResult<i32> {
    use super::progress::{Progress, Tracked, Unit};
    use super::run::simulate;
    only_token_hash(&a.hash, format)?;
    let size = std::fs::metadata(&a.trace).ok().filter(|m| m.is_file()).map(|m| m.len());
    let progress = Progress::new(a.output.quiet, "replay", Unit::TraceBytes, size);
    let mut breakdown = None;
    let res = match format {
        Format::Tokens | Format::Bailian => {
            let keyer = Keyer::new(&a.hash)?;
            if keyer.block_tokens() != BLOCK_TOKENS {
                return Err(CliError::bad_input(format!(
                    "--block-size {}: fleet replay caches 16-token blocks (the model's B), so it replays vLLM keys of 16-token blocks only; other sizes are for `fleet keys`",
                    keyer.block_tokens()
                )));
            }
            if format == Format::Tokens && a.trace_block_size.is_some() {
                return Err(CliError::bad_input(
                    "--trace-block-size: a tokens trace has no hash ids (its keys' block size is --block-size)",
                ));
            }
            let mut src = FormatSource {
                path: a.trace.clone(),
                format,
                keyer,
                trace_block_tokens: a.trace_block_size.unwrap_or(BLOCK_TOKENS as u32),
                labels: Vec::new(),
                types: Vec::new(),
            };
            let bailian = format == Format::Bailian;
            let res =
                simulate(cfg, &mut Tracked { inner: &mut src, progress: &progress, unit: Unit::TraceBytes }, bailian)?;
            if bailian {
                breakdown = Some(src.breakdown(&res.outcomes));
            }
            res
        }
        Format::Dynamo | Format::Mooncake => {
            let s = a.trace_block_size.unwrap_or(512);
            let trace = super::dynamo::load(&a.trace, s)?;
            super::dynamo::simulate(cfg, &trace, &a.trace, s, false)?
        }
    };
    progress.finish();
    if a.json {
        let mut prov = crate::provenance::Provenance::of_this_run(a.output.no_date);
        prov.add_file("trace", &a.trace)?;
        let out = ReplayJson { format: format.name(), summary: &res.summary, breakdown: breakdown.as_ref() };
        say!("{}", prov.json_with(&out));
    } else {
        say!("trace {} (format {})", a.trace.display(), format.name());
        say_raw!("{}", super::run::render_table(&res.summary));
        if let Some(b) = &breakdown {
            say_raw!("{}", render_breakdown(b));
        }
    }
    Ok(0)
}

/// The per-type and per-turn table of a Bailian replay.
pub fn render_breakdown(b: &Breakdown) -> String {
    let pct = |g: &Group| g.hit_rate.map_or_else(|| "n/a".to_string(), |h| format!("{:.2}", h * 100.0));
    let mut o = String::from("\ntype          requests  input tokens  hit tokens  hit rate %\n");
    for (k, g) in &b.by_type {
        o.push_str(&format!(
            "{k:<12}  {:>8}  {:>12}  {:>10}  {:>10}\n",
            g.requests,
            g.input_tokens,
            g.hit_tokens,
            pct(g)
        ));
    }
    o.push_str("\nturn          requests  input tokens  hit tokens  hit rate %\n");
    for (k, g) in &b.by_turn {
        o.push_str(&format!(
            "{k:<12}  {:>8}  {:>12}  {:>10}  {:>10}\n",
            g.requests,
            g.input_tokens,
            g.hit_tokens,
            pct(g)
        ));
    }
    o
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
