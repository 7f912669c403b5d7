//! Trace formats besides Mooncake's and the block-key hash of token ids (docs/MODEL.md, "Trace
//! formats" and "vLLM-compatible block keys"): `--format`, `--hash`, `--hash-seed`, `--block-size`
//! and `fleet keys`. Mooncake lines keep their own fast reader (`trace.rs`).
//!
//! Every line is first split into its fields (`name -> raw JSON text`), then each field the
//! format needs is converted with a message that names it; the reader adds "FILE:LINE: ".

use std::path::Path;

use crate::error::{CliError, CliResult};

// The token-id format and its hash (`--hash`, `fleet keys`), the field helpers every format's
// parser uses, and a trace as a request source (`source`: the replay's side) are their own
// files; this one parses the formats' lines (`crate::fleet::cli::replay` runs them).
mod fields;
mod source;
mod tokens;

pub use crate::fleet::input::trace::Lines;
pub use fields::*;
pub use source::*;
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
