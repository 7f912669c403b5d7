//! The tokens format (token ids per line) and the block-key hash of token ids (`--hash`,
//! `--hash-seed`, `--block-size`), with `fleet keys`.

use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS, MAX_VLLM_BLOCK_TOKENS};
use brokerlab_core::fleet::{keys, vllm};
use clap::Args;

use super::{Lines, fields, int_array, u64_field};
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
    #[arg(long, allow_negative_numbers = true, value_parser = crate::fleet::cli::flag::whole::<usize>)]
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
    pub fn open(path: &Path, max_line_bytes: u64) -> CliResult<Self> {
        Ok(TokensReader { lines: Lines::open(path, max_line_bytes)?, rec: TokensRecord::default(), last_ts: None })
    }

    /// Accepts at most `n` blank lines ([`Lines::max_blank_lines`]).
    pub fn max_blank_lines(mut self, n: u64) -> Self {
        self.lines = self.lines.max_blank_lines(n);
        self
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
    #[arg(long, value_name = "BYTES", default_value_t = crate::fleet::input::trace::DEFAULT_MAX_LINE_BYTES, value_parser = crate::mem::parse_size)]
    pub max_line_bytes: u64,
    /// Most blank lines accepted in the trace; one more is exit 2.
    #[arg(long, value_name = "N", default_value_t = crate::fleet::input::trace::DEFAULT_MAX_BLANK_LINES)]
    pub max_blank_lines: u64,
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
    let mut reader = TokensReader::open(&a.trace, a.max_line_bytes)?.max_blank_lines(a.max_blank_lines);
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
