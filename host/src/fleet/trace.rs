//! Streaming reader of Mooncake JSONL traces, with errors that name the file, line and field.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

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

#[derive(Deserialize)]
struct RawLine {
    timestamp: Option<serde_json::Number>,
    input_length: Option<serde_json::Number>,
    output_length: Option<serde_json::Number>,
    hash_ids: Option<Vec<serde_json::Number>>,
}

/// Parses one non-blank line. `Err` holds "field ...: expected ..." without the location.
pub fn parse_line(line: &str, rec: &mut TraceRecord) -> Result<(), String> {
    let raw: RawLine = serde_json::from_str(line).map_err(|e| {
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        format!("column {}: expected a JSON object like {{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [0]}}: {msg}", e.column())
    })?;
    rec.timestamp_ms = int_field("timestamp", raw.timestamp, "a non-negative integer (milliseconds from trace start)")?;
    rec.input_length = int_field("input_length", raw.input_length, "a non-negative integer (prompt tokens)")?;
    rec.output_length = int_field("output_length", raw.output_length, "a non-negative integer (output tokens)")?;
    let ids = raw.hash_ids.ok_or("missing field `hash_ids`: expected an array of non-negative integers")?;
    rec.hash_ids.clear();
    for (i, n) in ids.iter().enumerate() {
        match n.as_u64() {
            Some(v) => rec.hash_ids.push(v),
            None => return Err(format!("field `hash_ids[{i}]`: expected a non-negative integer, got {n}")),
        }
    }
    Ok(())
}

fn int_field(name: &str, v: Option<serde_json::Number>, expected: &str) -> Result<u64, String> {
    let n = v.ok_or_else(|| format!("missing field `{name}`: expected {expected}"))?;
    n.as_u64().ok_or_else(|| format!("field `{name}`: expected {expected}, got {n}"))
}

/// Reads a trace line by line (bounded memory), checking that timestamps never decrease.
pub struct TraceReader {
    path: PathBuf,
    reader: Box<dyn BufRead>,
    line_no: usize,
    buf: String,
    last_ts: Option<u64>,
    rec: TraceRecord,
}

impl TraceReader {
    /// Opens `path`.
    pub fn open(path: &Path) -> CliResult<Self> {
        let f = File::open(path)
            .map_err(|e| CliError::bad_input(format!("--trace {}: cannot open: {e}", path.display())))?;
        Ok(Self::new(path.to_path_buf(), Box::new(BufReader::with_capacity(1 << 20, f))))
    }

    /// Reads from any buffered reader; `path` is used in messages.
    pub fn new(path: PathBuf, reader: Box<dyn BufRead>) -> Self {
        TraceReader { path, reader, line_no: 0, buf: String::new(), last_ts: None, rec: TraceRecord::default() }
    }

    /// 1-based physical line number of the last record returned.
    pub fn line_no(&self) -> usize {
        self.line_no
    }

    /// "FILE:LINE" of the last record returned, for messages.
    pub fn location(&self) -> String {
        format!("{}:{}", self.path.display(), self.line_no)
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
        loop {
            self.buf.clear();
            let n = self.reader.read_line(&mut self.buf).map_err(|e| {
                CliError::bad_input(format!("{}:{}: cannot read: {e}", self.path.display(), self.line_no + 1))
            })?;
            if n == 0 {
                return Ok(false);
            }
            super::progress::note_trace_bytes(n);
            self.line_no += 1;
            let line = self.buf.trim();
            if line.is_empty() {
                continue;
            }
            parse_line(line, &mut self.rec).map_err(|m| CliError::bad_input(format!("{}: {m}", self.location())))?;
            if let Some(prev) = self.last_ts
                && self.rec.timestamp_ms < prev
            {
                return Err(CliError::bad_input(format!(
                    "{}: field `timestamp`: {} is smaller than the previous line's {prev}; requests must be in non-decreasing time order",
                    self.location(),
                    self.rec.timestamp_ms
                )));
            }
            self.last_ts = Some(self.rec.timestamp_ms);
            return Ok(true);
        }
    }
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
            assert!(err.msg.starts_with(want), "{} does not start with {want}", err.msg);
            assert_eq!(err.code, 2);
        }
    }
}
