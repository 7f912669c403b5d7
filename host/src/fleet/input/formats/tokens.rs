//! The tokens format (token ids per line) and the block-key hash of token ids (`--hash`,
//! `--hash-seed`, `--block-size`), with `fleet keys`.

use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS, MAX_TRACE_BLOCK_TOKENS, MAX_VLLM_BLOCK_TOKENS};
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
    /// vLLM's `--prefix-caching-hash-algo xxhash_cbor` block hash (XXH3-128 of the same CBOR);
    /// key = the digest's last 8 bytes, big-endian.
    VllmXxhashCbor,
    /// vLLM's `sha256` (SHA-256 of a Python pickle): refused, not reproducible outside Python.
    #[value(hide = true)]
    VllmSha256,
    /// vLLM's `xxhash` (XXH3-128 of a Python pickle): refused, not reproducible outside Python.
    #[value(hide = true)]
    VllmXxhash,
}

/// Why a pickle-based vLLM hash is refused (docs/MODEL.md, "vLLM-compatible block keys").
const PICKLE_WHY: &str = "it hashes `pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)`, whose bytes are CPython's \
     (the protocol changes with the Python version, and framing and memo opcodes are the pickler's choice, not a \
     specification), so no program outside that Python can reproduce the keys; start vLLM with \
     --prefix-caching-hash-algo sha256_cbor or xxhash_cbor and use --hash vllm-sha256-cbor or vllm-xxhash-cbor";

/// vLLM v0.33.0's seed when `PYTHONHASHSEED` is unset and the hash is a SHA-256 one
/// (`resolve_none_hash_seed` in `vllm/v1/core/kv_cache_utils.py`).
pub const VLLM_DEFAULT_SEED: &str = "vllm-none-hash";

/// The hash flags of commands that read token ids.
#[derive(Debug, Args, Clone)]
pub struct HashArgs {
    /// Block-key hash of token ids: brokerlab (the model's chained hash, 16-token blocks),
    /// vllm-sha256-cbor or vllm-xxhash-cbor (vLLM started with `--prefix-caching-hash-algo
    /// sha256_cbor` / `xxhash_cbor`). vLLM's pickle-based `sha256` and `xxhash` cannot be
    /// reproduced outside Python and are refused.
    #[arg(long, value_enum, default_value = "brokerlab")]
    pub hash: HashKind,
    /// vllm-*-cbor: the seed string, i.e. the fleet's PYTHONHASHSEED (vllm-sha256-cbor default
    /// "vllm-none-hash", vLLM v0.33.0's value when PYTHONHASHSEED is unset; vllm-xxhash-cbor
    /// needs it).
    #[arg(long, allow_hyphen_values = true)]
    pub hash_seed: Option<String>,
    /// vllm-*-cbor: tokens per block B (vLLM's --block-size; default 16, llm-d's guides use
    /// 64), 1..=1048576 for `fleet keys`; `fleet replay` needs a multiple of 16. The brokerlab
    /// hash always uses 16.
    #[arg(long, allow_negative_numbers = true, value_parser = crate::fleet::cli::flag::whole::<usize>)]
    pub block_size: Option<usize>,
}

/// The chain's start of each hash (vLLM's NONE_HASH).
#[derive(Debug, Clone)]
enum Seed {
    Brokerlab,
    Sha256Cbor(vllm::Digest),
    Xxh3Cbor(vllm::Xxh3Digest),
}

/// Computes a prompt's block keys as the hash flags say.
#[derive(Debug, Clone)]
pub struct Keyer {
    seed: Seed,
    block_tokens: usize,
}

impl Keyer {
    /// Checks the flags together; an error names the flag.
    pub fn new(a: &HashArgs) -> CliResult<Self> {
        match a.hash {
            HashKind::Brokerlab => {
                if a.hash_seed.is_some() {
                    return Err(CliError::bad_input(
                        "--hash-seed: only the --hash vllm-*-cbor hashes have a seed (the brokerlab hash has none)",
                    ));
                }
                if let Some(b) = a.block_size.filter(|&b| b != BLOCK_TOKENS) {
                    return Err(CliError::bad_input(format!(
                        "--block-size {b}: the brokerlab hash keys 16-token blocks (the model's B); other sizes need --hash vllm-sha256-cbor or vllm-xxhash-cbor"
                    )));
                }
                Ok(Keyer { seed: Seed::Brokerlab, block_tokens: BLOCK_TOKENS })
            }
            HashKind::VllmSha256 | HashKind::VllmXxhash => Err(CliError::bad_input(format!(
                "--hash {}: vLLM's {} hash is not reproducible here: {PICKLE_WHY}",
                if a.hash == HashKind::VllmSha256 { "vllm-sha256" } else { "vllm-xxhash" },
                if a.hash == HashKind::VllmSha256 { "sha256" } else { "xxhash" },
            ))),
            HashKind::VllmSha256Cbor | HashKind::VllmXxhashCbor => {
                let b = a.block_size.unwrap_or(BLOCK_TOKENS);
                vllm::check_block_tokens(b).map_err(|_| {
                    CliError::bad_input(format!("--block-size {b}: expected 1 to {MAX_VLLM_BLOCK_TOKENS} tokens"))
                })?;
                let seed = if a.hash == HashKind::VllmSha256Cbor {
                    Seed::Sha256Cbor(vllm::seed_digest(a.hash_seed.as_deref().unwrap_or(VLLM_DEFAULT_SEED)))
                } else {
                    let s = a.hash_seed.as_deref().ok_or_else(|| {
                        CliError::bad_input(
                            "--hash vllm-xxhash-cbor needs --hash-seed (the fleet's PYTHONHASHSEED): without it vLLM's \
                             init_none_hash draws NONE_HASH from os.urandom, which no one else can reproduce",
                        )
                    })?;
                    Seed::Xxh3Cbor(vllm::seed_hash::<vllm::Xxh3Cbor>(s))
                };
                Ok(Keyer { seed, block_tokens: b })
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
        let n = match &self.seed {
            Seed::Brokerlab => keys::token_keys(tokens, out),
            Seed::Sha256Cbor(s) => vllm::token_keys(s, tokens, self.block_tokens, out),
            Seed::Xxh3Cbor(s) => vllm::chain_keys::<vllm::Xxh3Cbor>(s, tokens, self.block_tokens, out),
        };
        debug_assert_eq!(n, Ok(out.len()));
    }

    /// Checks that the pods can cache these keys: B a multiple of 16 (each B-token block is
    /// cached as B/16 of the model's blocks, [`keys::coarse_keys`]), at most 1048576.
    pub fn check_replay(&self) -> CliResult<()> {
        let b = self.block_tokens;
        match u32::try_from(b).map_err(|_| ()).and_then(|b| keys::check_trace_block_tokens(b).map_err(|_| ())) {
            Ok(()) => Ok(()),
            Err(()) => Err(CliError::bad_input(format!(
                "--block-size {b}: fleet replay caches 16-token blocks (the model's B), so a vLLM block must be a \
                 whole number of them: a multiple of 16 from 16 to {MAX_TRACE_BLOCK_TOKENS} (`fleet keys` takes any size \
                 from 1 to {MAX_VLLM_BLOCK_TOKENS})"
            ))),
        }
    }

    /// The model's keys of the floor(L/16) 16-token blocks of `tokens` (for a replay; after
    /// [`Keyer::check_replay`]): the block keys themselves with B = 16, else each full B-token
    /// block's key split into B/16 blocks and the blocks after the last full one keyed by
    /// `request` (they never hit, as vLLM hashes no partial block). `scratch` holds the B-token keys.
    pub fn model_keys(&self, tokens: &[u32], request: u64, scratch: &mut Vec<u64>, out: &mut Vec<u64>) {
        if self.block_tokens == BLOCK_TOKENS {
            return self.keys(tokens, out);
        }
        self.keys(tokens, scratch);
        out.resize(tokens.len() / BLOCK_TOKENS, 0);
        // the tail's id: the request index, kept apart from a vLLM key's value by the top bit
        // (a collision needs a vLLM key equal to it, chance 2^-64 per pair)
        let tail = request | (1 << 63);
        let n = keys::coarse_keys(scratch, tokens.len() as u64, self.block_tokens as u32, tail, out);
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
