//! A trace of one of these formats as a request source: its lines parsed (`super`) and fed to
//! either engine in order, with the per-type and per-turn breakdown of a bailian trace and how
//! it is printed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use brokerlab_core::fleet::keys;
use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS};

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::error::CliResult;

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
        let mut coarse: Vec<u64> = Vec::new();
        let mut request = 0u64;
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
                    self.keyer.model_keys(&tok.token_ids, request, &mut coarse, &mut keys_buf);
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
            request += 1;
            let req = brokerlab_core::fleet::Request {
                arrival_ns,
                input_tokens: input,
                output_tokens: output,
                keys: &keys_buf,
            };
            sink(&req).map_err(|e| match e {
                // a tokens line has no `input_length`: its prompt is the token ids
                brokerlab_core::fleet::Error::InvalidRequest {
                    field: brokerlab_core::fleet::RequestField::InputLength,
                    expected,
                } if self.format == Format::Tokens => lines.error(format_args!(
                    "field `token_ids` ({input} tokens, the prompt): expected {}",
                    crate::fleet::run::fields::request_expected(expected)
                )),
                e => lines.error(crate::fleet::run::fields::request_message(&e)),
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
