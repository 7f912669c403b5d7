//! What the profiling examples share: a trace read and hashed into memory once, as `fleet bench`
//! holds it (one home for that loop; `batched` and `perblock` both replay from it).
use brokerlab::fleet::input::trace::TraceReader;
use brokerlab_core::fleet::keys::trace_keys;
use std::ops::Range;
use std::path::Path;

/// One request of a trace held in memory: arrival ns, input and output tokens, its keys' range.
pub type HeldRequest = (u64, u64, u64, Range<usize>);

/// Reads and hashes the trace at `path` (16-token blocks, 512 tokens per trace id): its requests
/// and every request's keys end to end.
pub fn load(path: &str) -> (Vec<HeldRequest>, Vec<u64>) {
    let mut reader = TraceReader::open(Path::new(path)).unwrap();
    let mut reqs = Vec::new();
    let mut keys = Vec::new();
    let mut buf = Vec::new();
    while reader.advance().unwrap() {
        let r = reader.record();
        buf.resize((r.input_length / 16) as usize, 0);
        let n = trace_keys(&r.hash_ids, r.input_length, 512, &mut buf).unwrap();
        let s = keys.len();
        keys.extend_from_slice(&buf[..n]);
        reqs.push((r.timestamp_ms * 1_000_000, r.input_length, r.output_length, s..s + n));
    }
    (reqs, keys)
}
