//! Where a run's requests come from: a stream that can be fed again from the start (a retry
//! after a full buffer), and the Mooncake traces (a file, or one compiled into the binary).

use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::{BLOCK_TOKENS, MAX_PROMPT_TOKENS};
use brokerlab_core::fleet::{Error as CoreError, Request, keys};

use crate::error::{CliError, CliResult};
use crate::fleet::input::trace::{BytesRead, TraceReader};
use crate::mem::Growth;

/// A stream of requests that can be fed again from the start (a retry after a full buffer).
pub trait RequestSource {
    /// Calls `sink` on every request in order. When `sink` fails, stop and return an error that
    /// says where (file and line, or request number).
    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()>;

    /// Why [`Self::feed`] cannot start over from the first request, if it cannot.
    fn restart_error(&self) -> Option<String> {
        None
    }

    /// Requests it will feed, when known before reading (for the memory budget), and the
    /// scenario key that sets it.
    fn len_hint(&self) -> Option<u64> {
        None
    }

    /// Blocks per trace id when every request's keys come from trace ids of that many 16-token
    /// blocks (block j is sub-block j mod R of id j div R); 1 otherwise. Lets the fleet replay
    /// per run of blocks.
    fn id_blocks(&self) -> u32 {
        1
    }

    /// The count of trace bytes it reads, for a progress display (None: it reads no file).
    fn bytes_read(&self) -> Option<BytesRead> {
        None
    }

    /// The run's memory growth, for what the source itself keeps per request (a Bailian
    /// trace's labels); called before each [`Self::feed`].
    fn grow_into(&mut self, _growth: &Growth) {}
}

/// What a run keeps per request, as named in a memory-budget message.
pub const LATENCIES: &str = "latencies (exact percentiles, 8 B per request)";
/// The same, for the kept outcomes.
pub const OUTCOMES: &str = "per-request outcomes (for the breakdowns)";

/// A Mooncake JSONL trace file.
pub struct TraceSource {
    /// The file.
    pub path: PathBuf,
    /// Trace block size S, tokens per hash id.
    pub trace_block_tokens: u32,
    /// Longest line accepted, bytes (`--max-line-bytes`; [`crate::fleet::input::trace::DEFAULT_MAX_LINE_BYTES`]).
    pub max_line_bytes: u64,
    /// Most blank lines accepted (`--max-blank-lines`; [`crate::fleet::input::trace::DEFAULT_MAX_BLANK_LINES`]).
    pub max_blank_lines: u64,
    /// The bytes read (for a progress display).
    pub read: BytesRead,
    /// Read, parse and hash the trace on a thread of its own, the requests replayed on the
    /// calling one ([`crate::fleet::run::pipeline`]; the same requests in the same order).
    pub pipelined: bool,
}

impl TraceSource {
    /// A trace with lines up to [`crate::fleet::input::trace::DEFAULT_MAX_LINE_BYTES`].
    pub fn new(path: PathBuf, trace_block_tokens: u32) -> Self {
        TraceSource {
            path,
            trace_block_tokens,
            max_line_bytes: crate::fleet::input::trace::DEFAULT_MAX_LINE_BYTES,
            max_blank_lines: crate::fleet::input::trace::DEFAULT_MAX_BLANK_LINES,
            read: BytesRead::default(),
            pipelined: false,
        }
    }
}

/// Why a trace at `path` cannot be read a second time, if it cannot: reopening a pipe
/// (`/dev/stdin`, `<(zcat ...)`) continues where the first pass stopped, and the run would
/// silently replay a truncated trace.
pub fn restart_error_for(path: &Path) -> Option<String> {
    let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    (!regular).then(|| {
        format!(
            "--trace {}: the run must read the trace a second time (an internal buffer filled up), but it is not a regular file (a pipe?); write it to a file first",
            path.display()
        )
    })
}

impl RequestSource for TraceSource {
    fn restart_error(&self) -> Option<String> {
        restart_error_for(&self.path)
    }

    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        let open = || {
            TraceReader::open_limited(&self.path, self.max_line_bytes)
                .map(|r| r.max_blank_lines(self.max_blank_lines).counting(&self.read))
        };
        if !self.pipelined {
            return feed_trace(open()?, self.trace_block_tokens, sink);
        }
        // the reader is opened on its thread (it is not Send); an error opening it is the
        // producer's first message, as it is the first thing the sequential feed returns
        let tbs = self.trace_block_tokens;
        let path = &self.path;
        crate::fleet::run::pipeline::feed_pipelined(
            move |s| feed_trace_lines(open()?, tbs, s),
            sink,
            |line, e| format!("{}:{line}: {}", path.display(), crate::fleet::run::fields::request_message(e)),
        )
    }

    fn id_blocks(&self) -> u32 {
        self.trace_block_tokens / BLOCK_TOKENS as u32
    }

    fn bytes_read(&self) -> Option<BytesRead> {
        Some(self.read.clone())
    }
}

/// A Mooncake trace compiled into the binary (the report's built-in traces): replayed like a file,
/// re-decompressed on every pass.
pub struct EmbeddedTrace {
    /// Its name in messages.
    pub name: &'static str,
    /// The compressed (or plain) JSONL bytes.
    pub bytes: &'static [u8],
    /// Tokens per trace block id.
    pub trace_block_tokens: u32,
}

impl RequestSource for EmbeddedTrace {
    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        let (_, r) = crate::fleet::input::file::reader(std::io::Cursor::new(self.bytes))
            .map_err(|e| CliError::failure(format!("{}: {e}", self.name)))?;
        feed_trace(TraceReader::new(PathBuf::from(self.name), r), self.trace_block_tokens, sink)
    }

    fn id_blocks(&self) -> u32 {
        self.trace_block_tokens / BLOCK_TOKENS as u32
    }
}

/// A Mooncake trace file parsed and hashed once and held in memory, so that many runs over it
/// (`fleet compare --trace`) read and hash it once: each run is fed exactly the requests
/// [`TraceSource`] feeds, and a request the fleet refuses is named by the same `FILE:LINE`.
pub struct ParsedTrace {
    path: PathBuf,
    trace_block_tokens: u32,
    /// (arrival ns, input tokens, output tokens, line, key range) per request.
    reqs: Vec<(u64, u64, u64, usize, std::ops::Range<usize>)>,
    keys: Vec<u64>,
}

/// Bytes a [`ParsedTrace`] holds per request besides its keys.
const PARSED_REQUEST_BYTES: u64 = std::mem::size_of::<(u64, u64, u64, usize, std::ops::Range<usize>)>() as u64;

impl ParsedTrace {
    /// Parses and hashes `src`'s trace; None when holding it would take more than `max_bytes`
    /// (then the runs read the file each, as before).
    pub fn load(src: &TraceSource, max_bytes: u64) -> CliResult<Option<Self>> {
        let reader = TraceReader::open_limited(&src.path, src.max_line_bytes)?.max_blank_lines(src.max_blank_lines);
        let mut t = ParsedTrace {
            path: src.path.clone(),
            trace_block_tokens: src.trace_block_tokens,
            reqs: Vec::new(),
            keys: Vec::new(),
        };
        let mut over = false;
        let mut grow_err = None;
        feed_trace_lines(reader, src.trace_block_tokens, &mut |req, line| {
            let bytes = (t.reqs.len() as u64 + 1) * PARSED_REQUEST_BYTES + (t.keys.len() + req.keys.len()) as u64 * 8;
            if bytes > max_bytes {
                over = true;
                return Err(CoreError::Poisoned);
            }
            if let Err(e) = crate::mem::try_grow(&mut t.keys, req.keys.len(), "the parsed trace's block keys")
                .and_then(|()| crate::mem::try_grow(&mut t.reqs, 1, "the parsed trace's requests"))
            {
                grow_err = Some(e);
                return Err(CoreError::Poisoned);
            }
            let start = t.keys.len();
            t.keys.extend_from_slice(req.keys);
            t.reqs.push((req.arrival_ns, req.input_tokens, req.output_tokens, line, start..t.keys.len()));
            Ok(())
        })
        .or_else(|e| if over { Ok(()) } else { Err(grow_err.take().unwrap_or(e)) })?;
        Ok((!over).then_some(t))
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> u64 {
        self.reqs.capacity() as u64 * PARSED_REQUEST_BYTES + self.keys.capacity() as u64 * 8
    }
}

/// Requests ahead of the one dispatched whose keys a source held in memory asks the CPU to
/// cache ([`prefetch_keys`]): a trace's keys (72 MB for the vendored conversation trace) are
/// read once per run, each a cache miss otherwise.
pub const PREFETCH_AHEAD: usize = 2;

/// Asks the CPU to bring `keys` into its cache before they are read (one hint per 64-byte line).
/// A hint only: no result depends on it (nothing on other architectures).
#[inline]
pub fn prefetch_keys(keys: &[u64]) {
    #[cfg(target_arch = "x86_64")]
    for k in keys.iter().step_by(8) {
        // SAFETY: a prefetch reads nothing architecturally and never faults; `k` is a live
        // element of `keys`.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(std::ptr::from_ref(k).cast())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = keys;
}

/// Feeds requests held in memory in order, `parts(r)` being request r's (arrival ns, input tokens,
/// output tokens, its range of `keys`), each request's keys asked into the cache
/// [`PREFETCH_AHEAD`] requests before it is fed; a request the fleet refuses is a bad-input error
/// named by `message(i, error)`. (One home for the loop of every source held in memory: a parsed
/// trace, the bench's loaded trace.)
pub fn feed_held<T>(
    reqs: &[T],
    keys: &[u64],
    parts: impl Fn(&T) -> (u64, u64, u64, std::ops::Range<usize>),
    sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>,
    message: impl Fn(usize, &CoreError) -> String,
) -> CliResult<()> {
    for (i, r) in reqs.iter().enumerate() {
        if let Some(next) = reqs.get(i + PREFETCH_AHEAD) {
            prefetch_keys(&keys[parts(next).3]);
        }
        let (arrival_ns, input_tokens, output_tokens, range) = parts(r);
        let req = Request { arrival_ns, input_tokens, output_tokens, keys: &keys[range] };
        sink(&req).map_err(|e| CliError::bad_input(message(i, &e)))?;
    }
    Ok(())
}

impl RequestSource for &ParsedTrace {
    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        let reqs = &self.reqs;
        let parts = |(arrival_ns, input, output, _, range): &(u64, u64, u64, usize, std::ops::Range<usize>)| {
            (*arrival_ns, *input, *output, range.clone())
        };
        feed_held(reqs, &self.keys, parts, sink, |i, e| {
            format!("{}:{}: {}", self.path.display(), reqs[i].3, crate::fleet::run::fields::request_message(e))
        })
    }

    fn id_blocks(&self) -> u32 {
        self.trace_block_tokens / BLOCK_TOKENS as u32
    }
}

/// Feeds every line of `reader` as a request (keys from its hash ids).
fn feed_trace(
    reader: TraceReader,
    trace_block_tokens: u32,
    sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>,
) -> CliResult<()> {
    feed_trace_lines(reader, trace_block_tokens, &mut |req, _| sink(req))
}

/// [`feed_trace`], the sink also given the request's line.
fn feed_trace_lines(
    mut reader: TraceReader,
    trace_block_tokens: u32,
    sink: &mut dyn FnMut(&Request<'_>, usize) -> Result<(), CoreError>,
) -> CliResult<()> {
    let mut keys_buf: Vec<u64> = Vec::new();
    while reader.advance()? {
        let rec = reader.record();
        let m = (rec.input_length / BLOCK_TOKENS as u64) as usize;
        let located = |e: CoreError, r: &TraceReader| {
            CliError::bad_input(format!("{}: {}", r.location(), crate::fleet::run::fields::request_message(&e)))
        };
        if rec.input_length > MAX_PROMPT_TOKENS {
            return Err(CliError::bad_input(format!(
                "{}: field `input_length`: {} exceeds the limit of {} tokens",
                reader.location(),
                rec.input_length,
                MAX_PROMPT_TOKENS
            )));
        }
        keys_buf.resize(m, 0);
        let n = keys::trace_keys(&rec.hash_ids, rec.input_length, trace_block_tokens, &mut keys_buf)
            .map_err(|e| located(e, &reader))?;
        let arrival_ns = rec.timestamp_ms.checked_mul(1_000_000).ok_or_else(|| {
            CliError::bad_input(format!(
                "{}: field `timestamp`: {} ms overflows 64-bit nanoseconds",
                reader.location(),
                rec.timestamp_ms
            ))
        })?;
        let req = Request {
            arrival_ns,
            input_tokens: rec.input_length,
            output_tokens: rec.output_length,
            keys: &keys_buf[..n],
        };
        sink(&req, reader.line_no()).map_err(|e| located(e, &reader))?;
    }
    Ok(())
}
