//! Streaming reader of Mooncake JSONL traces, with errors that name the file, line and field.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use crate::error::{CliError, CliResult};

/// One trace line, as the model reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceRecord {
    /// Arrival, ms from the trace start.
    pub timestamp_ms: u64,
    /// Prompt length L, tokens.
    pub input_length: u64,
    /// Output length O, tokens.
    pub output_length: u64,
    /// Trace block ids.
    pub hash_ids: Vec<u64>,
}

/// Default of `--max-line-bytes`: 32 MiB. The longest valid line is about 23 MB (a prompt of at
/// most 2^24 tokens at S = 16 is 1,048,576 ids of up to 20 digits and a separator).
pub const DEFAULT_MAX_LINE_BYTES: u64 = 32 << 20;

/// Default of `--max-blank-lines`: 1,000,000. Blank lines are skipped, but each costs a read: a
/// file of nothing else (a compressed archive of 2 GB of newlines) would keep a replay busy for
/// minutes and then report no requests. A real trace has a few (a trailing newline, a gap).
pub const DEFAULT_MAX_BLANK_LINES: u64 = 1_000_000;

/// Bytes of a trace a reader has consumed, shared with the progress display (read only for
/// display; clones count into the same total).
#[derive(Debug, Clone, Default)]
pub struct BytesRead(Arc<AtomicU64>, Arc<AtomicU64>);

impl BytesRead {
    /// Counts `n` more bytes.
    pub fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The bytes counted so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Records the length of the text to be read (a compressed file's text, known once checked).
    pub fn set_total(&self, n: u64) {
        // stored plus one: 0 means unknown
        self.1.store(n.saturating_add(1), Ordering::Relaxed);
    }

    /// The length of the text, when known (a compressed file: its size on disk is not it).
    pub fn total(&self) -> Option<u64> {
        self.1.load(Ordering::Relaxed).checked_sub(1)
    }
}

/// The keys of a trace line the model reads; others are skipped without being stored.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Key {
    Timestamp,
    InputLength,
    OutputLength,
    HashIds,
    #[serde(other)]
    Other,
}

/// A field as written: absent (None), `null` (Some(None)) or a number.
type Field = Option<Option<serde_json::Number>>;

/// What one line held, apart from the ids (those go straight into the record).
#[derive(Default)]
struct Seen {
    timestamp: Field,
    input_length: Field,
    output_length: Field,
    /// None: absent; Some(false): null; Some(true): an array.
    hash_ids: Option<bool>,
}

/// Deserializes a line into [`Seen`] and the record's `hash_ids` (no intermediate array).
struct LineSeed<'a> {
    ids: &'a mut Vec<u64>,
    field_err: &'a mut Option<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for LineSeed<'_> {
    type Value = Seen;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Seen, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for LineSeed<'_> {
    type Value = Seen;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
        let mut seen = Seen::default();
        while let Some(key) = map.next_key::<Key>()? {
            // a key read twice: serde would keep the last silently, other readers the first
            let twice = match key {
                Key::Timestamp => seen.timestamp.is_some().then_some("timestamp"),
                Key::InputLength => seen.input_length.is_some().then_some("input_length"),
                Key::OutputLength => seen.output_length.is_some().then_some("output_length"),
                Key::HashIds => seen.hash_ids.is_some().then_some("hash_ids"),
                Key::Other => None,
            };
            if let Some(name) = twice {
                *self.field_err = Some(twice_message(name));
                return Err(serde::de::Error::custom("a field given twice"));
            }
            match key {
                Key::Timestamp => seen.timestamp = Some(map.next_value()?),
                Key::InputLength => seen.input_length = Some(map.next_value()?),
                Key::OutputLength => seen.output_length = Some(map.next_value()?),
                Key::HashIds => {
                    self.ids.clear();
                    seen.hash_ids = Some(map.next_value_seed(IdsSeed { ids: self.ids, field_err: self.field_err })?);
                }
                Key::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(seen)
    }
}

/// `hash_ids`: `null` (false) or an array of non-negative integers pushed into `ids` (true).
struct IdsSeed<'a> {
    ids: &'a mut Vec<u64>,
    field_err: &'a mut Option<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for IdsSeed<'_> {
    type Value = bool;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> serde::de::Visitor<'de> for IdsSeed<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of non-negative integers")
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while let Some(n) = seq.next_element::<serde_json::Number>()? {
            match n.as_u64() {
                Some(v) => self.ids.push(v),
                None => {
                    *self.field_err =
                        Some(format!("field `hash_ids[{}]`: expected a non-negative integer, got {n}", self.ids.len()));
                    return Err(serde::de::Error::custom("bad hash id"));
                }
            }
        }
        Ok(true)
    }
}

/// Parses one non-blank line. `Err` holds "field ...: expected ..." without the location.
pub fn parse_line(line: &str, rec: &mut TraceRecord) -> Result<(), String> {
    use serde::de::DeserializeSeed as _;
    let mut field_err = None;
    let mut de = serde_json::Deserializer::from_str(line);
    let seen = LineSeed { ids: &mut rec.hash_ids, field_err: &mut field_err }
        .deserialize(&mut de)
        .and_then(|seen| de.end().map(|()| seen))
        .map_err(|e| {
            if let Some(m) = field_err.take() {
                return m;
            }
            let msg = e.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            format!("column {}: expected a JSON object like {{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [0]}}: {msg}", e.column())
        })?;
    rec.timestamp_ms =
        int_field("timestamp", seen.timestamp, "a non-negative integer (milliseconds from trace start)")?;
    rec.input_length = int_field("input_length", seen.input_length, "a non-negative integer (prompt tokens)")?;
    rec.output_length = int_field("output_length", seen.output_length, "a non-negative integer (output tokens)")?;
    match seen.hash_ids {
        None => return Err("missing field `hash_ids`: expected an array of non-negative integers".into()),
        Some(false) => return Err("field `hash_ids` is null: expected an array of non-negative integers".into()),
        Some(true) => {}
    }
    Ok(())
}

fn int_field(name: &str, v: Field, expected: &str) -> Result<u64, String> {
    match v {
        None => Err(format!("missing field `{name}`: expected {expected}")),
        Some(None) => Err(format!("field `{name}` is null: expected {expected}")),
        Some(Some(n)) => n.as_u64().ok_or_else(|| format!("field `{name}`: expected {expected}, got {n}")),
    }
}

/// Reads the non-blank lines of a trace (plain, gzip or zstd) with bounded memory: a line longer
/// than `--max-line-bytes` is an error, never a huge buffer; a UTF-8 byte-order mark at the start
/// is accepted. Every format's reader sits on it.
pub struct Lines {
    path: PathBuf,
    reader: Box<dyn BufRead>,
    line_no: usize,
    buf: Vec<u8>,
    max_line_bytes: u64,
    max_blank_lines: u64,
    blank_lines: u64,
    read: BytesRead,
    /// A compressed file's text length (for progress), None for plain text.
    text_len: Option<u64>,
}

impl Lines {
    /// Opens `path` ([`crate::fleet::input::file::open`]); a line longer than `max_line_bytes`
    /// (`--max-line-bytes`) is an error.
    pub fn open(path: &Path, max_line_bytes: u64) -> CliResult<Self> {
        let (reader, text_len) = crate::fleet::input::file::open_sized(path)?;
        let mut lines = Self::new(path.to_path_buf(), reader, max_line_bytes);
        lines.text_len = text_len;
        Ok(lines)
    }

    /// Reads from any buffered reader; `path` is used in messages.
    pub fn new(path: PathBuf, reader: Box<dyn BufRead>, max_line_bytes: u64) -> Self {
        Lines {
            path,
            reader,
            line_no: 0,
            buf: Vec::new(),
            max_line_bytes,
            max_blank_lines: DEFAULT_MAX_BLANK_LINES,
            blank_lines: 0,
            read: BytesRead::default(),
            text_len: None,
        }
    }

    /// Accepts at most `n` blank lines (`--max-blank-lines`; [`DEFAULT_MAX_BLANK_LINES`]); one
    /// more is an error.
    pub fn max_blank_lines(mut self, n: u64) -> Self {
        self.max_blank_lines = n;
        self
    }

    /// Counts the bytes it consumes into `read` (for a progress display).
    pub fn counting(mut self, read: &BytesRead) -> Self {
        self.read = read.clone();
        if let Some(n) = self.text_len {
            self.read.set_total(n);
        }
        self
    }

    /// 1-based physical line number of the last line returned.
    pub fn line_no(&self) -> usize {
        self.line_no
    }

    /// "FILE:LINE" of the last line returned.
    pub fn location(&self) -> String {
        format!("{}:{}", self.path.display(), self.line_no)
    }

    /// An input error at the last line returned: "FILE:LINE: msg", exit 2.
    pub fn error(&self, msg: impl std::fmt::Display) -> CliError {
        CliError::bad_input(format!("{}: {msg}", self.location()))
    }

    /// The next non-blank line, trimmed, borrowed from the reader's buffer; `None` at the end.
    pub fn next_str(&mut self) -> CliResult<Option<&str>> {
        let (start, end) = loop {
            self.buf.clear();
            // At most one byte more than the cap: a longer line is an error, never a huge buffer.
            let n = (&mut self.reader).take(self.max_line_bytes.saturating_add(1)).read_until(b'\n', &mut self.buf);
            let n = n.map_err(|e| {
                CliError::bad_input(format!("{}:{}: cannot read: {e}", self.path.display(), self.line_no + 1))
            })?;
            if n == 0 {
                return Ok(None);
            }
            self.read.add(n);
            self.line_no += 1;
            let body = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
            if body.len() as u64 > self.max_line_bytes {
                return Err(self.error(format_args!(
                    "the line is longer than --max-line-bytes {} bytes (a valid Mooncake line is at most about 23 MB: \
                     1,048,576 ids); raise --max-line-bytes if the file is right",
                    self.max_line_bytes
                )));
            }
            let text = match std::str::from_utf8(body) {
                Ok(t) => t,
                Err(e) => {
                    return Err(self.error(format_args!("not UTF-8 (byte {}): expected a JSON line", e.valid_up_to())));
                }
            };
            // A UTF-8 byte-order mark at the start of the file is accepted.
            let bom = if self.line_no == 1 && text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
            let rest = &text[bom..];
            let trimmed = rest.trim();
            if !trimmed.is_empty() {
                let start = bom + (rest.len() - rest.trim_start().len());
                break (start, start + trimmed.len());
            }
            self.blank_lines += 1;
            if self.blank_lines > self.max_blank_lines {
                return Err(self.error(format_args!(
                    "more than --max-blank-lines {} blank lines (a trace that is mostly empty lines is likely \
                     damaged); raise --max-blank-lines if the file is right",
                    self.max_blank_lines
                )));
            }
        };
        // validated above; the offsets are on char boundaries of that same text
        Ok(Some(std::str::from_utf8(&self.buf[start..end]).unwrap_or_default()))
    }

    /// The next non-blank line, trimmed and owned; `None` at the end.
    pub fn next_line(&mut self) -> CliResult<Option<String>> {
        Ok(self.next_str()?.map(str::to_owned))
    }
}

/// Reads a Mooncake trace line by line (bounded memory), checking that timestamps never decrease.
pub struct TraceReader {
    lines: Lines,
    last_ts: Option<u64>,
    rec: TraceRecord,
}

impl TraceReader {
    /// Opens `path`: plain, gzip or zstd, detected by its first bytes ([`crate::fleet::input::file`]); lines
    /// up to [`DEFAULT_MAX_LINE_BYTES`].
    pub fn open(path: &Path) -> CliResult<Self> {
        Self::open_limited(path, DEFAULT_MAX_LINE_BYTES)
    }

    /// [`TraceReader::open`] with lines up to `max_line_bytes` (`--max-line-bytes`).
    pub fn open_limited(path: &Path, max_line_bytes: u64) -> CliResult<Self> {
        let lines = Lines::open(path, max_line_bytes)?;
        Ok(TraceReader { lines, last_ts: None, rec: TraceRecord::default() })
    }

    /// Counts the bytes it consumes into `read` (for a progress display).
    pub fn counting(mut self, read: &BytesRead) -> Self {
        self.lines = self.lines.counting(read);
        self
    }

    /// Accepts at most `n` blank lines ([`Lines::max_blank_lines`]).
    pub fn max_blank_lines(mut self, n: u64) -> Self {
        self.lines = self.lines.max_blank_lines(n);
        self
    }

    /// Reads from any buffered reader (lines up to [`DEFAULT_MAX_LINE_BYTES`]); `path` is used in
    /// messages.
    pub fn new(path: PathBuf, reader: Box<dyn BufRead>) -> Self {
        let lines = Lines::new(path, reader, DEFAULT_MAX_LINE_BYTES);
        TraceReader { lines, last_ts: None, rec: TraceRecord::default() }
    }

    /// 1-based physical line number of the last record returned.
    pub fn line_no(&self) -> usize {
        self.lines.line_no()
    }

    /// "FILE:LINE" of the last record returned, for messages.
    pub fn location(&self) -> String {
        self.lines.location()
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> CliResult<Option<&TraceRecord>> {
        Ok(if self.advance()? { Some(&self.rec) } else { None })
    }

    /// The record read by the last successful [`Self::advance`].
    pub fn record(&self) -> &TraceRecord {
        &self.rec
    }

    /// Reads the next record; `false` at the end of the file.
    pub fn advance(&mut self) -> CliResult<bool> {
        let Some(line) = self.lines.next_str()? else { return Ok(false) };
        let parsed = parse_line(line, &mut self.rec);
        parsed.map_err(|m| self.lines.error(m))?;
        if let Some(prev) = self.last_ts
            && self.rec.timestamp_ms < prev
        {
            return Err(self.lines.error(format_args!(
                "field `timestamp`: {} is smaller than the previous line's {prev}; requests must be in \
                 non-decreasing time order",
                self.rec.timestamp_ms
            )));
        }
        self.last_ts = Some(self.rec.timestamp_ms);
        Ok(true)
    }
}

/// The error of a field given twice in one line.
pub fn twice_message(name: &str) -> String {
    format!("field `{name}` is given twice: expected each field once (JSON readers disagree on which one counts)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> CliResult<Vec<TraceRecord>> {
        let mut r = TraceReader::new("t.jsonl".into(), Box::new(std::io::Cursor::new(text.to_string())));
        let mut out = vec![];
        while let Some(rec) = r.next_record()? {
            out.push(rec.clone());
        }
        Ok(out)
    }

    #[test]
    fn blank_lines_skipped_and_extra_fields_ignored() {
        let recs = read_all("\n{\"timestamp\": 3, \"input_length\": 40, \"output_length\": 2, \"hash_ids\": [7, 8], \"x\": {\"y\": [1]}}\n\n").unwrap();
        assert_eq!(
            recs,
            vec![TraceRecord { timestamp_ms: 3, input_length: 40, output_length: 2, hash_ids: vec![7, 8] }]
        );
    }

    #[test]
    fn errors_name_line_and_field() {
        let ok = "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n";
        let cases = [
            (
                "{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}",
                "t.jsonl:3: field `timestamp`",
            ),
            (
                "{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}",
                "t.jsonl:3: field `timestamp`: 4 is smaller",
            ),
            ("{\"timestamp\": 6, \"output_length\": 1, \"hash_ids\": [1]}", "t.jsonl:3: missing field `input_length`"),
            (
                "{\"timestamp\": 6, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, -2]}",
                "t.jsonl:3: field `hash_ids[1]`",
            ),
            ("{\"timestamp\": 6, ", "t.jsonl:3: column"),
        ];
        for (bad, want) in cases {
            let text = format!("{ok}\n{bad}\n");
            let err = read_all(&text).unwrap_err();
            assert!(err.to_string().starts_with(want), "{err} does not start with {want}");
            assert_eq!(err.code(), 2);
        }
    }
}
