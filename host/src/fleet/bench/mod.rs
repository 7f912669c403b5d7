//! `brokerlab fleet bench`: throughput of the core on a real trace, and its memory per block.
//!
//! Everything reported comes from one run: parse, hashing and dispatch are timed separately,
//! with the trace held in memory for the dispatch phase so file I/O does not blur it.

pub mod route;
pub mod scale;
pub mod sweep_configs;

use std::path::{Path, PathBuf};
use std::time::Instant;

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::{
    BatchedConfig, BlockIndex, FleetConfig, IndexEntry, IndexKind, LruPod, Profile, Request, RouterKind, Slot, keys,
};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::fleet::input::trace::{TraceReader, TraceRecord};
use crate::fleet::run::{Batched, Fifo, FifoSizes, OwnedFifo, Summary, with_view};

/// One router's dispatch throughput.
#[derive(Debug, Serialize)]
pub struct RouterBench {
    /// Router.
    pub router: String,
    /// Best-of-repeats wall time of the dispatch loop, s.
    pub seconds: f64,
    /// Requests per second.
    pub requests_per_s: f64,
    /// Block touches (one per full block per request) per second.
    pub block_touches_per_s: f64,
    /// Token hit rate (a sanity check that the run did real work).
    pub hit_rate: f64,
}

/// The bench report.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Trace file.
    pub trace: String,
    /// Requests in the trace.
    pub requests: u64,
    /// Full blocks over all requests (= block touches per replay).
    pub block_touches: u64,
    /// Pods.
    pub pods: usize,
    /// Blocks per pod.
    pub capacity: usize,
    /// Repeats per router (best taken).
    pub repeats: usize,
    /// Parse throughput of the JSONL text, MB/s (decompressed bytes; for a compressed trace the
    /// time includes decompressing it twice: checked whole, then parsed).
    pub parse_mb_per_s: f64,
    /// Chained-key hashing throughput, keys/s.
    pub hash_keys_per_s: f64,
    /// Per router: the seed's (prefix-aware with both indexes), then the shipped presets.
    pub routers: Vec<RouterBench>,
    /// Pod memory (LRU slots + key table) per cached block, bytes.
    pub pod_bytes_per_block: f64,
    /// Block index memory per cached block of the fleet (prefix-aware only), bytes.
    pub index_bytes_per_block: f64,
    /// The pods alone with the shortest accepted key table against the recommended one.
    pub pod_table: TableBench,
    /// Parsing the trace, best of repeats, s.
    pub parse_s: f64,
    /// Hashing its chained keys, s.
    pub hash_s: f64,
    /// The batched engine's replay of the same trace (default engine parameters), every router.
    pub batched: Vec<EngineBench>,
    /// The second trace whose batched replays were checked equal with and without fast-forward.
    pub identity_trace: String,
    /// The routers checked on it.
    pub identity_routers: usize,
    /// Run-length vs per-block replay vs the Python model, on this trace and on a hot-set trace.
    pub replays: Vec<ReplayBench>,
}

/// One batched-engine replay of the whole trace (docs/MODEL.md, "The batched engine").
#[derive(Debug, Serialize)]
pub struct EngineBench {
    /// Router.
    pub router: String,
    /// Best-of-repeats wall time of the replay with fast-forward (buffers, dispatch, draining,
    /// summary), s.
    pub seconds: f64,
    /// The same, best of `repeats` interleaved with it, over the per-block KV pool (the oracle;
    /// its whole summary checked equal), s.
    pub per_block_s: f64,
    /// For a router with an approximate index (kept as runs of trace ids in `seconds`): the same
    /// with the index per block (the oracle; its whole summary checked equal), best of `repeats`
    /// interleaved, s. None for the other routers.
    pub per_block_index_s: Option<f64>,
    /// One replay step by step (no fast-forward; its summary checked equal), s.
    pub step_by_step_s: f64,
    /// (parse + hash + replay) / (parse + hash): end to end against reading the trace.
    pub end_to_end_over_read: f64,
    /// The replay from the compressed file on one thread (`fleet replay --threads 1`: read,
    /// parse, hash and replay in turn, request by request), best of `repeats`, s (its whole
    /// summary checked equal).
    pub file_s: f64,
    /// The same on two threads (`fleet replay`'s default on two cores: the trace read, parsed
    /// and hashed on its own thread while this one replays), best of `repeats` interleaved with
    /// `file_s`, s (its whole summary checked equal).
    pub pipelined_s: f64,
    /// In that best pipelined run, the time the replaying thread waited for the reader's
    /// batches, s.
    pub pipelined_wait_s: f64,
    /// pipelined_s / (parse + hash): the measured end to end on two threads against reading the
    /// trace.
    pub pipelined_over_read: f64,
    /// file_s / (parse + hash): the measured end to end on one thread against reading the trace
    /// (the key hashing interleaved with the replay, request by request, as `fleet replay
    /// --threads 1` does).
    pub file_over_read: f64,
    /// Simulated requests per wall second.
    pub requests_per_s: f64,
    /// Engine steps simulated.
    pub steps: u64,
    /// Engine steps per wall second.
    pub steps_per_s: f64,
    /// Simulated makespan, s.
    pub makespan_s: f64,
    /// Simulated output tokens per simulated second.
    pub output_tok_per_s: Option<f64>,
    /// Simulated TTFT p90, s.
    pub ttft_p90: Option<f64>,
}

impl Loaded {
    /// `FILE:LINE: request I` of request `i`, for messages.
    fn at(&self, i: usize) -> String {
        format!("{}:{}: request {i}", self.path.display(), self.lines.get(i).copied().unwrap_or(0))
    }
}

/// The loaded trace as a request source, its keys from trace ids of the given blocks each (the
/// trace's group: a router-side approximate index is kept as runs; 1: per block).
struct LoadedSource<'l>(&'l Loaded, u32);

impl crate::fleet::run::RequestSource for LoadedSource<'_> {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        let loaded = self.0;
        let parts = |(arrival_ns, input, output, range): &(u64, u64, u64, std::ops::Range<usize>)| {
            (*arrival_ns, *input, *output, range.clone())
        };
        crate::fleet::run::source::feed_held(&loaded.reqs, &loaded.keys, parts, sink, |i, e| {
            format!("{}: {}", loaded.at(i), crate::fleet::run::fields::request_message(e))
        })
    }

    fn id_blocks(&self) -> u32 {
        self.1
    }
}

/// The FIFO buffers of the dispatch loop: room for the whole trace's queue, no stale view.
const BENCH_SIZES: FifoSizes = FifoSizes { queue_per_pod: 1 << 16, pending: 0 };

/// The batched fleet of the bench: `kind` with its defaults (the prefix-aware router with alpha
/// 16), steps fast-forwarded or one by one, the KV pool worked a run of blocks at a time or per
/// block (the oracle; docs/MODEL.md, "Run-length KV blocks").
fn batched_cfg(pods: usize, capacity: usize, kind: RouterKind, fast_forward: bool, block_runs: bool) -> FleetConfig {
    let e = BatchedConfig { fast_forward, block_runs, ..BatchedConfig::new(Profile::Qwen3_32bH100x2) };
    FleetConfig { alpha: 16.0, ..FleetConfig::batched(pods, capacity, kind, e) }
}

/// The routers of the batched bench: round-robin, prefix-aware, then every preset.
fn batched_routers() -> impl Iterator<Item = RouterKind> {
    [RouterKind::RoundRobin, RouterKind::PrefixAware].into_iter().chain(RouterKind::PRESETS)
}

fn router_label(kind: RouterKind) -> String {
    if kind == RouterKind::PrefixAware { "prefix-aware (alpha 16)".into() } else { kind.name().into() }
}

/// Every router's batched replay, best of `repeats` with fast-forward, interleaved with the same
/// replay over the per-block KV pool (the oracle of the run-at-a-time pool) and, for a router
/// with an approximate index, with that index per block (the oracle of the index as runs), and
/// once step by step (the slow path): the whole summaries must be equal.
fn engine_bench(l: &Loaded, pods: usize, capacity: usize, repeats: usize) -> CliResult<Vec<EngineBench>> {
    let mut out = Vec::new();
    let g = l.group_blocks;
    for kind in batched_routers() {
        let cfg = batched_cfg(pods, capacity, kind, true, true);
        let cfg_blocks = batched_cfg(pods, capacity, kind, true, false);
        let index_runs = crate::fleet::run::index_runs_layout(&cfg, g).is_some();
        let (mut best, mut best_blocks, mut best_index) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
        let (mut summary, mut summary_blocks, mut summary_index) = (None, None, None);
        for _ in 0..repeats.max(1) {
            let t = Instant::now();
            let r = crate::fleet::run::simulate::<Batched>(cfg, &mut LoadedSource(l, g), false)?;
            best = best.min(t.elapsed().as_secs_f64());
            summary = Some(r.summary);
            let t = Instant::now();
            let r = crate::fleet::run::simulate::<Batched>(cfg_blocks, &mut LoadedSource(l, g), false)?;
            best_blocks = best_blocks.min(t.elapsed().as_secs_f64());
            summary_blocks = Some(r.summary);
            if index_runs {
                let t = Instant::now();
                let r = crate::fleet::run::simulate::<Batched>(cfg, &mut LoadedSource(l, 1), false)?;
                best_index = best_index.min(t.elapsed().as_secs_f64());
                summary_index = Some(r.summary);
            }
        }
        let s = summary.expect("at least one repeat");
        if summary_blocks.as_ref() != Some(&s) {
            return Err(CliError::failure(format!(
                "bench batched {}: run-at-a-time and per-block KV pool summaries differ",
                kind.name()
            )));
        }
        if index_runs && summary_index.as_ref() != Some(&s) {
            return Err(CliError::failure(format!(
                "bench batched {}: the approximate index as runs and per block give different summaries",
                kind.name()
            )));
        }
        let t = Instant::now();
        let slow = crate::fleet::run::simulate::<Batched>(
            batched_cfg(pods, capacity, kind, false, true),
            &mut LoadedSource(l, g),
            false,
        )?;
        let slow_s = t.elapsed().as_secs_f64();
        if slow.summary != s {
            return Err(CliError::failure(format!(
                "bench batched {}: fast-forward and step-by-step summaries differ",
                kind.name()
            )));
        }
        let (file_s, pipelined_s, pipelined_wait_s) = file_replays(l, cfg, repeats, &s, kind)?;
        let read_s = l.parse_s + l.hash_s;
        out.push(EngineBench {
            router: router_label(kind),
            seconds: best,
            per_block_s: best_blocks,
            per_block_index_s: index_runs.then_some(best_index),
            step_by_step_s: slow_s,
            requests_per_s: l.reqs.len() as f64 / best,
            steps: s.steps,
            steps_per_s: s.steps as f64 / best,
            end_to_end_over_read: (read_s + best) / read_s,
            file_s,
            pipelined_s,
            pipelined_wait_s,
            pipelined_over_read: pipelined_s / read_s,
            file_over_read: file_s / read_s,
            makespan_s: s.makespan_s,
            output_tok_per_s: s.output_tok_per_s,
            ttft_p90: s.ttft_p90,
        });
    }
    Ok(out)
}

/// `cfg` replayed from the trace file itself, on one thread and pipelined on two (the trace read
/// on a thread of its own), best of `repeats` each, interleaved: (one thread s, two threads s,
/// the replaying thread's wait in the best two-thread run s). Each whole summary must equal
/// `expected` (the replay of the trace held in memory).
fn file_replays(
    l: &Loaded,
    cfg: FleetConfig,
    repeats: usize,
    expected: &crate::fleet::run::BatchedSummary,
    kind: RouterKind,
) -> CliResult<(f64, f64, f64)> {
    use std::sync::atomic::Ordering;
    let waited = &crate::fleet::run::pipeline::WAITED_NS;
    let (mut one, mut two, mut wait) = (f64::INFINITY, f64::INFINITY, 0.0);
    for _ in 0..repeats.max(1) {
        for pipelined in [false, true] {
            let mut src = crate::fleet::run::TraceSource {
                pipelined,
                ..crate::fleet::run::TraceSource::new(l.path.clone(), l.trace_block)
            };
            let w0 = waited.load(Ordering::Relaxed);
            let t = Instant::now();
            let r = crate::fleet::run::simulate::<Batched>(cfg, &mut src, false)?;
            let secs = t.elapsed().as_secs_f64();
            if &r.summary != expected {
                return Err(CliError::failure(format!(
                    "bench batched {}: the trace file replayed on {} and the trace in memory give different summaries",
                    kind.name(),
                    if pipelined { "two threads" } else { "one thread" }
                )));
            }
            if !pipelined {
                one = one.min(secs);
            } else if secs < two {
                two = secs;
                wait = (waited.load(Ordering::Relaxed) - w0) as f64 / 1e9;
            }
        }
    }
    Ok((one, two, wait))
}

/// The second vendored trace's batched replays with fast-forward, step by step and over the
/// per-block KV pool, every router: the whole summaries must be equal. Returns the routers
/// checked.
pub fn batched_identity(trace: &Path, trace_block: u32, pods: usize, capacity: usize) -> CliResult<usize> {
    let (l, _, _) = load(trace, trace_block, 1)?;
    let mut n = 0;
    let g = l.group_blocks;
    for kind in batched_routers() {
        let cfg = batched_cfg(pods, capacity, kind, true, true);
        let fast = crate::fleet::run::simulate::<Batched>(cfg, &mut LoadedSource(&l, g), false)?;
        let slow = crate::fleet::run::simulate::<Batched>(
            batched_cfg(pods, capacity, kind, false, true),
            &mut LoadedSource(&l, g),
            false,
        )?;
        let blocks = crate::fleet::run::simulate::<Batched>(
            batched_cfg(pods, capacity, kind, true, false),
            &mut LoadedSource(&l, g),
            false,
        )?;
        if crate::fleet::run::index_runs_layout(&cfg, g).is_some() {
            let index = crate::fleet::run::simulate::<Batched>(cfg, &mut LoadedSource(&l, 1), false)?;
            if fast.summary != index.summary {
                return Err(CliError::failure(format!(
                    "bench batched {} on {}: the approximate index as runs and per block give different summaries",
                    kind.name(),
                    trace.display()
                )));
            }
        }
        if fast.summary != blocks.summary {
            return Err(CliError::failure(format!(
                "bench batched {} on {}: run-at-a-time and per-block KV pool summaries differ",
                kind.name(),
                trace.display()
            )));
        }
        if fast.summary != slow.summary {
            return Err(CliError::failure(format!(
                "bench batched {} on {}: fast-forward and step-by-step summaries differ",
                kind.name(),
                trace.display()
            )));
        }
        n += 1;
    }
    Ok(n)
}

/// Why the pods' key tables have the length they have: the same key stream (round-robin, hit
/// test then tail-first touches, no router or timing) through pods with the shortest table the
/// pod accepts and with the recommended one, measured in the same run.
#[derive(Debug, Serialize)]
pub struct TableBench {
    /// Table entries per pod, shortest accepted (at most half full).
    pub short_table_len: usize,
    /// Bytes per cached block with the short table.
    pub short_bytes_per_block: f64,
    /// Block touches per second with the short table.
    pub short_touches_per_s: f64,
    /// Table entries per pod, recommended (a quarter to a half full; the fleet's).
    pub table_len: usize,
    /// Bytes per cached block with the recommended table.
    pub bytes_per_block: f64,
    /// Block touches per second with the recommended table.
    pub touches_per_s: f64,
    /// `touches_per_s / short_touches_per_s`.
    pub speedup: f64,
}

struct Loaded {
    /// The trace file and each request's line in it, for messages (`FILE:LINE: request I: ...`).
    path: PathBuf,
    lines: Vec<usize>,
    reqs: Vec<(u64, u64, u64, std::ops::Range<usize>)>,
    keys: Vec<u64>,
    /// The parsed records (the replay comparison hashes them again per request, as `fleet
    /// replay` does).
    records: Vec<TraceRecord>,
    /// Tokens per trace id S.
    trace_block: u32,
    /// Blocks per trace id (the run-length replay's group).
    group_blocks: u32,
    /// Decompressed JSONL bytes.
    bytes: u64,
    /// Parsing the JSONL into records, s.
    parse_s: f64,
    /// Chained-key hashing, s.
    hash_s: f64,
}

fn load(path: &Path, trace_block: u32, repeats: usize) -> CliResult<(Loaded, f64, f64)> {
    // JSONL bytes, decompressed: the parse rate of a compressed trace includes decompressing it.
    let mut text = crate::fleet::input::file::open(path)?;
    let bytes = std::io::copy(&mut text, &mut std::io::sink())
        .map_err(|e| CliError::bad_input(format!("--trace {}: cannot read: {e}", path.display())))?;
    drop(text);
    // Best of `repeats`, as every replay it is compared with. Timed as `fleet replay` reads: each
    // record parsed into the reader's own, nothing kept; the records are kept in another pass.
    let mut parse_s = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let t0 = Instant::now();
        let mut reader = TraceReader::open(path)?;
        while reader.advance()? {}
        parse_s = parse_s.min(t0.elapsed().as_secs_f64());
    }
    let mut raw = Vec::new();
    let mut lines = Vec::new();
    let mut reader = TraceReader::open(path)?;
    while reader.advance()? {
        raw.push(reader.record().clone());
        lines.push(reader.line_no());
    }
    let mut l = Loaded {
        path: path.to_path_buf(),
        lines,
        reqs: Vec::with_capacity(raw.len()),
        keys: Vec::new(),
        records: Vec::new(),
        trace_block,
        group_blocks: trace_block / 16,
        bytes,
        parse_s,
        hash_s: 0.0,
    };
    // Best of the repeats, as the parse: one pass alone can be several times slower on a busy
    // VM (first touches of the key vector), and the batched table's end-to-end ratio divides by it.
    let mut hash_s = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        l.keys.clear();
        l.reqs.clear();
        let t1 = Instant::now();
        let mut buf = Vec::new();
        for (i, r) in raw.iter().enumerate() {
            buf.resize((r.input_length / BLOCK_TOKENS as u64) as usize, 0);
            let n = keys::trace_keys(&r.hash_ids, r.input_length, trace_block, &mut buf)
                .map_err(|e| CliError::bad_input(format!("{}: {e}", l.at(i))))?;
            let start = l.keys.len();
            l.keys.extend_from_slice(&buf[..n]);
            let arrival_ns = r.timestamp_ms.checked_mul(1_000_000).ok_or_else(|| {
                CliError::bad_input(format!("{}: field `timestamp` overflows 64-bit nanoseconds", l.at(i)))
            })?;
            l.reqs.push((arrival_ns, r.input_length, r.output_length, start..start + n));
        }
        hash_s = hash_s.min(t1.elapsed().as_secs_f64());
    }
    l.hash_s = hash_s;
    l.records = raw;
    let mb_s = bytes as f64 / 1e6 / parse_s.max(1e-9);
    let keys_s = l.keys.len() as f64 / hash_s.max(1e-9);
    Ok((l, mb_s, keys_s))
}

/// Runs the benchmark.
pub fn run(
    trace: PathBuf,
    identity_trace: PathBuf,
    trace_block: u32,
    pods: usize,
    capacity: usize,
    repeats: usize,
    py: &PythonModel,
) -> CliResult<BenchReport> {
    for index in [IndexKind::Global, IndexKind::PodTables] {
        let cfg = with_view(FleetConfig::new(pods, capacity, RouterKind::PrefixAware), |v| v.index = index);
        crate::fleet::run::check_memory(&cfg, BENCH_SIZES, None, false)?;
    }
    let (l, parse_mb_per_s, hash_keys_per_s) = load(&trace, trace_block, repeats)?;
    let touches = l.keys.len() as u64;
    let requests = l.reqs.len() as u64;
    let mut routers = Vec::new();
    let runs = [
        (RouterKind::RoundRobin, IndexKind::Global, "round-robin"),
        (RouterKind::LeastLoaded, IndexKind::Global, "least-loaded"),
        (RouterKind::PrefixAware, IndexKind::PodTables, "prefix-aware (pod-tables index)"),
        (RouterKind::PrefixAware, IndexKind::Global, "prefix-aware (global index)"),
    ];
    for (kind, index, label) in runs {
        let cfg = with_view(FleetConfig::new(pods, capacity, kind), |v| v.index = index);
        routers.push(dispatch_bench(&l, cfg, repeats, label)?);
    }
    // The shipped presets, per block (the run-length replay of those it serves is in the replay
    // tables below), with the defaults `fleet replay --router NAME` uses.
    for kind in RouterKind::PRESETS {
        let cfg = FleetConfig::new(pods, capacity, kind);
        crate::fleet::run::check_memory(&cfg, BENCH_SIZES, None, false)?;
        routers.push(dispatch_bench(&l, cfg, repeats, kind.name())?);
    }
    let pod_table = table_bench(&l, pods, capacity, repeats)?;
    let batched = engine_bench(&l, pods, capacity, repeats)?;
    let (parse_s, hash_s) = (l.parse_s, l.hash_s);
    drop(l);
    let identity_routers = batched_identity(&identity_trace, trace_block, pods, capacity)?;
    let replays = replays(&trace, trace_block, pods, capacity, repeats, py)?;
    let index_bytes = BlockIndex::table_len(pods * capacity) * std::mem::size_of::<IndexEntry>();
    Ok(BenchReport {
        trace: trace.display().to_string(),
        requests,
        block_touches: touches,
        pods,
        capacity,
        repeats,
        parse_mb_per_s,
        hash_keys_per_s,
        routers,
        pod_bytes_per_block: LruPod::bytes_per_block(capacity),
        index_bytes_per_block: index_bytes as f64 / (pods * capacity) as f64,
        pod_table,
        parse_s,
        hash_s,
        batched,
        identity_trace: identity_trace.display().to_string(),
        identity_routers,
        replays,
    })
}

/// The per-block dispatch loop alone over the trace in memory (no percentiles or summary), best
/// of `repeats`.
fn dispatch_bench(l: &Loaded, cfg: FleetConfig, repeats: usize, label: &str) -> CliResult<RouterBench> {
    let mut best = f64::INFINITY;
    let mut hit_rate = 0.0;
    for _ in 0..repeats.max(1) {
        let mut owned = OwnedFifo::new(cfg, BENCH_SIZES, 1)?;
        let mut fleet = owned.fleet().map_err(crate::fleet::run::config_error)?;
        let t = Instant::now();
        for (arrival_ns, input, output, range) in &l.reqs {
            let req = Request {
                arrival_ns: *arrival_ns,
                input_tokens: *input,
                output_tokens: *output,
                keys: &l.keys[range.clone()],
            };
            fleet.dispatch(&req, &mut ()).map_err(|e| CliError::failure(format!("bench dispatch ({label}): {e}")))?;
        }
        best = best.min(t.elapsed().as_secs_f64());
        let tot = fleet.totals();
        hit_rate = tot.hit_tokens as f64 / tot.input_tokens.max(1) as f64;
    }
    Ok(RouterBench {
        router: label.into(),
        seconds: best,
        requests_per_s: l.reqs.len() as f64 / best,
        block_touches_per_s: l.keys.len() as f64 / best,
        hit_rate,
    })
}

/// Seconds to replay the key stream round-robin through `pods` bare pods with `table_len`
/// entries each, and the hit blocks (the same for every table length: a check).
fn pods_only(l: &Loaded, pods: usize, capacity: usize, table_len: usize) -> CliResult<(f64, u64)> {
    let mut slots = vec![Slot::default(); pods * capacity];
    let mut tables = vec![0u32; pods * table_len];
    let mut fleet = slots
        .chunks_exact_mut(capacity)
        .zip(tables.chunks_exact_mut(table_len))
        .map(|(s, t)| LruPod::new(s, t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::failure(format!("bench pods: {e}")))?;
    let mut hits = 0u64;
    let t = Instant::now();
    for (i, (_, _, _, range)) in l.reqs.iter().enumerate() {
        let pod = &mut fleet[i % pods];
        let keys = &l.keys[range.clone()];
        hits += pod.hit_blocks(keys) as u64;
        for &k in keys.iter().rev() {
            pod.touch(k, &mut ());
        }
    }
    Ok((t.elapsed().as_secs_f64(), hits))
}

fn table_bench(l: &Loaded, pods: usize, capacity: usize, repeats: usize) -> CliResult<TableBench> {
    let (short_len, len) = (LruPod::min_table_len(capacity), LruPod::table_len(capacity));
    let (mut short_best, mut best) = (f64::INFINITY, f64::INFINITY);
    // Interleaved, so a slow spell of the machine hits both alike.
    for _ in 0..repeats.max(1) {
        let (short_s, short_hits) = pods_only(l, pods, capacity, short_len)?;
        let (s, hits) = pods_only(l, pods, capacity, len)?;
        if short_hits != hits {
            return Err(CliError::failure(format!("bench: table lengths gave {short_hits} vs {hits} hit blocks")));
        }
        short_best = short_best.min(short_s);
        best = best.min(s);
    }
    let touches = l.keys.len() as f64;
    let per_block = |len: usize| (capacity * std::mem::size_of::<Slot>() + len * 4) as f64 / capacity as f64;
    Ok(TableBench {
        short_table_len: short_len,
        short_bytes_per_block: per_block(short_len),
        short_touches_per_s: touches / short_best,
        table_len: len,
        bytes_per_block: per_block(len),
        touches_per_s: touches / best,
        speedup: short_best / best,
    })
}

/// The readable form.
pub fn render(r: &BenchReport) -> String {
    let mut o = format!(
        "trace {} : {} requests, {} block touches per replay; {} pods x {} blocks; best of {}\n",
        r.trace, r.requests, r.block_touches, r.pods, r.capacity, r.repeats
    );
    o += &format!("parse        {:>10.1} MB/s of JSONL\n", r.parse_mb_per_s);
    o += &format!("hash         {:>10.1} M keys/s\n", r.hash_keys_per_s / 1e6);
    o += "router (per block, FIFO engine)   requests/s   M block touches/s   hit rate\n";
    for b in &r.routers {
        o += &format!(
            "{:<32} {:>11.0} {:>19.2} {:>9.2}%\n",
            b.router,
            b.requests_per_s,
            b.block_touches_per_s / 1e6,
            b.hit_rate * 100.0
        );
    }
    o += "(the presets with their defaults; the Python model implements only the first three routers)\n";
    o += &format!(
        "memory: pod {:.1} B per cached block (LRU slot 16 B + key table); global index {:.1} B more per cached block\n",
        r.pod_bytes_per_block, r.index_bytes_per_block
    );
    let t = &r.pod_table;
    o += &format!(
        "pod key table (bare pods, round-robin stream): {} entries {:.1} B/block {:.2} M touches/s vs {} entries {:.1} B/block {:.2} M touches/s: {:.2}x\n",
        t.short_table_len,
        t.short_bytes_per_block,
        t.short_touches_per_s / 1e6,
        t.table_len,
        t.bytes_per_block,
        t.touches_per_s / 1e6,
        t.speedup
    );
    o += &render_replays(&r.replays);
    o += &format!(
        "\nbatched engine (profile qwen3-32b-h100x2, S 1024, M 8192), whole replay incl. buffers and summary;\n\
         end to end = (parse {:.3} s + hash {:.3} s + replay) / (parse + hash); per-block pool: the same replay\n\
         over the per-block KV pool (the oracle), best of the same repeats interleaved; index per block: a router's\n\
         approximate index per block instead of as runs of trace ids (the oracle; interleaved too); step by step:\n\
         one run without fast-forward; every whole summary checked equal ({} on {});\n\
         file, 1 thread: the replay from the compressed file, read + parse + hash + replay in turn (fleet replay\n\
         --threads 1); file, 2 threads: the same with the trace read, parsed and hashed on a thread of its own\n\
         (fleet replay's default on 2 cores), measured, interleaved with it, its summary checked equal too;\n\
         1 thread = file, 1 thread / (parse + hash); piped = file, 2 threads / (parse + hash); wait: the replaying\n\
         thread's wait for the reader in that run:\n",
        r.parse_s, r.hash_s, r.identity_routers, r.identity_trace
    );
    o += "router                   wall s  per-block s  index per block s  step-by-step s  end to end  file, 1 thread s  1 thread  file, 2 threads s  piped  wait s  requests/s   steps      steps/s   simulated: makespan s  out tok/s  TTFT p90 s\n";
    for b in &r.batched {
        let index = b.per_block_index_s.map_or_else(|| "-".to_string(), |s| format!("{s:.3}"));
        o += &format!(
            "{:<24} {:>6.3} {:>12.3} {:>18} {:>15.3} {:>10.2}x {:>17.3} {:>8.2}x {:>18.3} {:>5.2}x {:>7.3} {:>11.0} {:>7} {:>12.0}   {:>20.1} {:>10.1} {:>11.3}\n",
            b.router,
            b.seconds,
            b.per_block_s,
            index,
            b.step_by_step_s,
            b.end_to_end_over_read,
            b.file_s,
            b.file_over_read,
            b.pipelined_s,
            b.pipelined_over_read,
            b.pipelined_wait_s,
            b.requests_per_s,
            b.steps,
            b.steps_per_s,
            b.makespan_s,
            b.output_tok_per_s.unwrap_or(f64::NAN),
            b.ttft_p90.unwrap_or(f64::NAN)
        );
    }
    o
}

/// `fleet bench --sweep`: where a sweep's time goes and how it scales with threads, measured in
/// one run: generating the workload (serial), the points on 1 thread and on `threads`, best of
/// `repeats` each, interleaved.
#[derive(Debug, Serialize)]
pub struct SweepBench {
    /// Scenario (built in).
    pub scenario: String,
    /// Points (routers x capacities).
    pub points: usize,
    /// Threads of the parallel run.
    pub threads: usize,
    /// Generating the workload once, s (serial: every point replays it).
    pub generate_s: f64,
    /// The points on one thread, s.
    pub points_1_thread_s: f64,
    /// The points on `threads` threads, s.
    pub points_n_threads_s: f64,
    /// points_1_thread_s / points_n_threads_s.
    pub points_speedup: f64,
    /// (generate + points on 1) / (generate + points on n): what a whole sweep gains.
    pub sweep_speedup: f64,
    /// The longest single point, s: no schedule finishes before it.
    pub longest_point_s: f64,
}

/// Measures [`SweepBench`] on the built-in multi-tenant scenario's capacity sweep.
pub fn sweep_bench(repeats: usize) -> CliResult<SweepBench> {
    use crate::fleet::run::progress::{Progress, Unit};
    use crate::fleet::sweep::{PointSpec, par_points};
    let sc = crate::fleet::scenario::builtin::builtin("multi-tenant")?;
    let t = Instant::now();
    let g = crate::fleet::scenario::Generated::new(sc.workload)?;
    let generate_s = t.elapsed().as_secs_f64();
    let capacities = [1024usize, 1448, 2048, 2896, 4096, 5793, 8192, 11585, 16384, 23170, 32768, 46341];
    let specs: Vec<PointSpec> = RouterKind::ALL
        .iter()
        .flat_map(|&r| {
            capacities.iter().map(move |&c| PointSpec {
                value: c as f64,
                workload: 0,
                cfg: FleetConfig { capacity_blocks: c, router: r, ..sc.fleet },
                label: None,
            })
        })
        .collect();
    let workloads = [g];
    let quiet = Progress::new(true, "bench", Unit::Points, None);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let point_s = |p: &PointSpec| -> CliResult<f64> {
        let t = Instant::now();
        let mut src = &workloads[p.workload];
        crate::fleet::run::simulate::<Fifo>(p.cfg, &mut src, false)?;
        Ok(t.elapsed().as_secs_f64())
    };
    let (mut one, mut many, mut longest) = (f64::INFINITY, f64::INFINITY, 0.0f64);
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        let each = par_points(&specs, 1, &quiet, point_s)?;
        one = one.min(t.elapsed().as_secs_f64());
        longest = longest.max(each.iter().copied().fold(0.0, f64::max));
        let t = Instant::now();
        par_points(&specs, threads, &quiet, point_s)?;
        many = many.min(t.elapsed().as_secs_f64());
    }
    Ok(SweepBench {
        scenario: sc.name,
        points: specs.len(),
        threads,
        generate_s,
        points_1_thread_s: one,
        points_n_threads_s: many,
        points_speedup: one / many,
        sweep_speedup: (generate_s + one) / (generate_s + many),
        longest_point_s: longest,
    })
}

/// The sweep measurement, readable.
pub fn render_sweep(s: &SweepBench) -> String {
    format!(
        "sweep ({} scenario, {} points: 3 routers x 12 capacities, best of the runs):\n  generate the workload \
         (serial)   {:.3} s\n  points on 1 thread               {:.3} s\n  points on {} threads              \
         {:.3} s  ({:.2}x)\n  whole sweep                      {:.2}x  (longest single point {:.3} s)\n",
        s.scenario,
        s.points,
        s.generate_s,
        s.points_1_thread_s,
        s.threads,
        s.points_n_threads_s,
        s.points_speedup,
        s.sweep_speedup,
        s.longest_point_s
    )
}

/// Where the Python model of the same replay is, and whether to run it.
#[derive(Debug, Clone)]
pub struct PythonModel {
    /// The script (tests/reference/fleet_model.py, written from docs/MODEL.md).
    pub script: PathBuf,
    /// False: skip it (`--no-python`).
    pub enabled: bool,
}

/// One router's replay of one trace: run-length, per block (its oracle) and the Python model.
#[derive(Debug, Serialize)]
pub struct RouterReplay {
    /// Router (prefix-aware: alpha 1, the pods' own tables as index).
    pub router: RouterKind,
    /// Run-length replay as `fleet replay` runs it (buffers, dispatch, exact percentiles,
    /// summary) on the parsed trace, each request's keys hashed shortly before it is dispatched
    /// (the hashing not counted), best of repeats, s.
    pub runs_s: f64,
    /// Per-block replay, best of repeats, s (the same).
    pub blocks_s: f64,
    /// Block touches per second, run-length replay.
    pub runs_touches_per_s: f64,
    /// Block touches per second, per-block replay.
    pub blocks_touches_per_s: f64,
    /// runs_s / parse_s: at most 1 means the replay is no slower than reading the trace.
    pub replay_over_parse: f64,
    /// Token hit rate (equal in the three models: checked).
    pub hit_rate: f64,
    /// Wall time of the Python model (reading the plain JSONL and simulating), s.
    pub python_s: Option<f64>,
    /// python_s / (parse_s + hash_s + runs_s): Rust end to end against Python end to end.
    pub python_ratio: Option<f64>,
}

/// One trace's replays, from one run.
#[derive(Debug, Serialize)]
pub struct ReplayBench {
    /// Which trace.
    pub trace: String,
    /// Requests.
    pub requests: u64,
    /// Block touches per replay.
    pub block_touches: u64,
    /// Pods.
    pub pods: usize,
    /// Blocks per pod.
    pub capacity: usize,
    /// Blocks per trace id (the run-length replay's group).
    pub group_blocks: u32,
    /// Decompressed JSONL, MB.
    pub mb: f64,
    /// Parsing the JSONL (decompressing included) record by record, as `fleet replay` reads it,
    /// best of repeats, s.
    pub parse_s: f64,
    /// Hashing the chained block keys, s.
    pub hash_s: f64,
    /// Per router.
    pub routers: Vec<RouterReplay>,
    /// Why the Python model did not run, when it did not.
    pub python_note: Option<String>,
}

/// Requests of the generated hot-set trace (about 7.4 M block touches).
const HOT_SET_REQUESTS: u64 = 33_000;
/// Its tenants, each with a prefix of [`HOT_SET_PREFIX_IDS`] 512-token ids: a hot set of
/// 64 x 4 x 32 = 8,192 blocks, about 4 pods of 2,000 blocks.
const HOT_SET_TENANTS: u64 = 64;
/// Shared prefix ids per tenant.
const HOT_SET_PREFIX_IDS: u64 = 4;
/// Pods x blocks of the hot-set replay.
const HOT_SET_FLEET: (usize, usize) = (8, 2_000);

/// A hot-set trace in Mooncake JSONL with 512-token ids, deterministic: request r picks tenant
/// floor(64 u^2) (u uniform in [0, 1): low tenants are hotter), sends its 4 prefix ids then 1 to 6
/// ids of its own, the last one cut at a random token; arrivals 0 to 50 ms apart.
fn hot_set_trace() -> String {
    use rand_chacha::ChaCha8Rng;
    use rand_core::{Rng, SeedableRng};
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let mut below = |n: u64| ((rng.next_u64() as u128 * n as u128) >> 64) as u64;
    let mut out = String::new();
    let mut ms = 0u64;
    for r in 0..HOT_SET_REQUESTS {
        let u = below(1 << 16);
        let tenant = (HOT_SET_TENANTS * u * u) >> 32;
        let own = 1 + below(6);
        let mut ids: Vec<u64> = (0..HOT_SET_PREFIX_IDS).map(|j| tenant * HOT_SET_PREFIX_IDS + j).collect();
        ids.extend((0..own).map(|j| 1_000_000 + r * 8 + j));
        let input = ids.len() as u64 * 512 - below(512);
        let output = 32 + below(225);
        out += &format!(
            "{{\"timestamp\": {ms}, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": {ids:?}}}\n"
        );
        ms += below(51);
    }
    out
}

/// Keys hashed ahead in [`HashingSource`]: 128 KiB, so they are still in the core's cache (L2)
/// when dispatched, and the clock is read once per batch, not per request.
const HASH_BATCH_KEYS: usize = 16_384;

/// The parsed trace fed as `fleet replay` feeds it: each request's keys hashed into a reused
/// buffer shortly before it is dispatched (so the replay reads them from the cache, as there;
/// batches of about [`HASH_BATCH_KEYS`] keys), trace ids of `group` blocks (1: replayed per
/// block). Times its own work (hashing), so the replay's time is the rest.
struct HashingSource<'l> {
    loaded: &'l Loaded,
    group: u32,
    /// Time spent in [`Self::feed`] outside the sink, s.
    own_s: f64,
}

impl crate::fleet::run::RequestSource for HashingSource<'_> {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        let l = self.loaded;
        let mut buf: Vec<u64> = Vec::new();
        let mut batch: Vec<(Request<'static>, std::ops::Range<usize>)> = Vec::new();
        let mut next = 0;
        while next < l.records.len() {
            // Hash a batch (at least one request), timed.
            let t = Instant::now();
            let first = next;
            buf.clear();
            batch.clear();
            while next < l.records.len() && (next == first || buf.len() < HASH_BATCH_KEYS) {
                let r = &l.records[next];
                let start = buf.len();
                buf.resize(start + (r.input_length / BLOCK_TOKENS as u64) as usize, 0);
                let n = keys::trace_keys(&r.hash_ids, r.input_length, l.trace_block, &mut buf[start..])
                    .map_err(|e| CliError::bad_input(format!("{}: {e}", l.at(next))))?;
                let req = Request {
                    arrival_ns: l.reqs[next].0,
                    input_tokens: r.input_length,
                    output_tokens: r.output_length,
                    keys: &[],
                };
                batch.push((req, start..start + n));
                next += 1;
            }
            self.own_s += t.elapsed().as_secs_f64();
            for (i, (req, range)) in batch.iter().enumerate() {
                let req = Request { keys: &buf[range.clone()], ..*req };
                sink(&req).map_err(|e| {
                    CliError::bad_input(format!(
                        "{}: {}",
                        l.at(first + i),
                        crate::fleet::run::fields::request_message(&e)
                    ))
                })?;
            }
        }
        Ok(())
    }

    fn id_blocks(&self) -> u32 {
        self.group
    }
}

/// One replay as `fleet replay` runs it (buffers, dispatch, exact percentiles, summary), timed
/// without the hashing that feeds it.
fn replay_once(l: &Loaded, cfg: FleetConfig, group: u32) -> CliResult<(f64, Summary)> {
    let mut src = HashingSource { loaded: l, group, own_s: 0.0 };
    let t = Instant::now();
    let r = crate::fleet::run::simulate::<Fifo>(cfg, &mut src, false)?;
    Ok((t.elapsed().as_secs_f64() - src.own_s, r.summary))
}

/// Runs the Python model on the plain JSONL `jsonl`; its wall time and its JSON result.
fn python_run(py: &PythonModel, jsonl: &Path, cfg: &FleetConfig) -> CliResult<(f64, serde_json::Value)> {
    let t = Instant::now();
    let out = std::process::Command::new("python3")
        .arg(&py.script)
        .arg("--trace")
        .arg(jsonl)
        .args(["--trace-block-size", "512", "--pods", &cfg.pods.to_string()])
        .args(["--capacity", &cfg.capacity_blocks.to_string(), "--router", cfg.router.name()])
        .args(["--alpha", &cfg.alpha.to_string()])
        .output()
        .map_err(|e| CliError::failure(format!("python3 {}: {e}", py.script.display())))?;
    let s = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(CliError::failure(format!(
            "python3 {}: {}: {}",
            py.script.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout).trim()
        )));
    }
    let v = serde_json::from_slice(&out.stdout)
        .map_err(|e| CliError::failure(format!("python3 {}: output is not JSON: {e}", py.script.display())))?;
    Ok((s, v))
}

/// The fields the Python model prints, all compared.
const PYTHON_FIELDS: [&str; 9] = [
    "requests",
    "input_tokens",
    "hit_tokens",
    "prefill_tokens",
    "hit_rate",
    "latency_p50",
    "latency_p90",
    "latency_p99",
    "per_pod_requests",
];

/// Fails unless the Python model's figures equal the replay's.
fn check_python(v: &serde_json::Value, s: &Summary, what: &str) -> CliResult<()> {
    let ours = serde_json::to_value(s).map_err(|e| CliError::failure(format!("bench: summary: {e}")))?;
    for field in PYTHON_FIELDS {
        if v[field] != ours[field] {
            return Err(CliError::failure(format!(
                "bench {what}: the Python model's {field} is {} where the replay's is {}",
                v[field], ours[field]
            )));
        }
    }
    Ok(())
}

/// Why the Python model cannot run here, if it cannot.
fn python_missing(py: &PythonModel) -> Option<String> {
    if !py.enabled {
        return Some("skipped (--no-python)".into());
    }
    if !py.script.is_file() {
        return Some(format!("{} not found (run from the repository root)", py.script.display()));
    }
    let ok = std::process::Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    (!ok).then(|| "python3 not found".to_string())
}

/// One row of the replay table: the run-length and per-block times of `kind` on `l`, its
/// summary, and the Python model's time when it ran.
fn router_replay(
    l: &Loaded,
    kind: RouterKind,
    (runs_s, blocks_s, summary): (f64, f64, &Summary),
    python_s: Option<f64>,
) -> RouterReplay {
    let touches = l.keys.len() as f64;
    RouterReplay {
        router: kind,
        runs_s,
        blocks_s,
        runs_touches_per_s: touches / runs_s,
        blocks_touches_per_s: touches / blocks_s,
        replay_over_parse: runs_s / l.parse_s,
        hit_rate: summary.hit_rate.unwrap_or(0.0),
        python_s,
        python_ratio: python_s.map(|p| p / (l.parse_s + l.hash_s + runs_s)),
    }
}

/// Best-of-`repeats` times of the run-length and the per-block replay of `cfg`, interleaved so a
/// slow spell of the machine hits both alike, and their summary (an error unless they are equal).
fn runs_and_blocks(
    l: &Loaded,
    cfg: FleetConfig,
    repeats: usize,
    name: &str,
    kind: RouterKind,
) -> CliResult<(f64, f64, Summary)> {
    let (mut runs_s, mut blocks_s) = (f64::INFINITY, f64::INFINITY);
    let mut result = None;
    for _ in 0..repeats.max(1) {
        let (s, runs) = replay_once(l, cfg, l.group_blocks)?;
        runs_s = runs_s.min(s);
        let (s, blocks) = replay_once(l, cfg, 1)?;
        blocks_s = blocks_s.min(s);
        if runs != blocks {
            return Err(CliError::failure(format!("bench {name} {kind}: run-length and per-block replays differ")));
        }
        result = Some(runs);
    }
    Ok((runs_s, blocks_s, result.expect("at least one repeat")))
}

/// Replays `l` with the seed's routers: run-length and per block (checked equal), and the
/// Python model on `jsonl` (checked equal, timed) when it can run; then the shipped presets the
/// run-length replay serves ([`preset_replays`]).
fn replay_bench(
    name: &str,
    l: &Loaded,
    jsonl: &Path,
    pods: usize,
    capacity: usize,
    repeats: usize,
    py: &PythonModel,
) -> CliResult<ReplayBench> {
    let python_note = python_missing(py);
    let mut routers = Vec::new();
    for kind in RouterKind::ALL {
        let cfg = FleetConfig::new(pods, capacity, kind);
        let (runs_s, blocks_s, summary) = runs_and_blocks(l, cfg, repeats, name, kind)?;
        let python_s = match python_note {
            None => {
                let (s, v) = python_run(py, jsonl, &cfg)?;
                check_python(&v, &summary, &format!("{name} {kind}"))?;
                Some(s)
            }
            Some(_) => None,
        };
        routers.push(router_replay(l, kind, (runs_s, blocks_s, &summary), python_s));
    }
    routers.extend(preset_replays(name, l, pods, capacity, repeats)?);
    Ok(ReplayBench {
        trace: name.into(),
        requests: l.reqs.len() as u64,
        block_touches: l.keys.len() as u64,
        pods,
        capacity,
        group_blocks: l.group_blocks,
        mb: l.bytes as f64 / 1e6,
        parse_s: l.parse_s,
        hash_s: l.hash_s,
        routers,
        python_note,
    })
}

/// The shipped presets the run-length replay serves (all of them since the approximate index
/// is kept as runs too, [`brokerlab_core::fleet::FifoFleet::runs_layout`]) with their defaults, as `fleet replay
/// --router NAME` runs them: run-length and per block, interleaved, the whole summary checked
/// equal. The Python model implements the seed's routers only.
fn preset_replays(
    name: &str,
    l: &Loaded,
    pods: usize,
    capacity: usize,
    repeats: usize,
) -> CliResult<Vec<RouterReplay>> {
    let mut out = Vec::new();
    for kind in RouterKind::PRESETS {
        let cfg = FleetConfig::new(pods, capacity, kind);
        if crate::fleet::run::runs_layout(&cfg, l.group_blocks).is_none() {
            continue;
        }
        let (runs_s, blocks_s, summary) = runs_and_blocks(l, cfg, repeats, name, kind)?;
        out.push(router_replay(l, kind, (runs_s, blocks_s, &summary), None));
    }
    Ok(out)
}

/// A scratch file removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn scratch(name: &str, fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<u64>) -> CliResult<Scratch> {
    let path = std::env::temp_dir().join(format!("brokerlab-bench-{}-{name}", std::process::id()));
    let file = Scratch(path);
    std::fs::File::create(&file.0)
        .and_then(|mut f| fill(&mut f))
        .map_err(|e| CliError::failure(format!("{}: cannot write: {e}", file.0.display())))?;
    Ok(file)
}

/// The replay comparison on the conversation trace (`trace`, `pods` x `capacity`) and on the
/// generated hot-set trace (8 pods x 2,000 blocks).
pub fn replays(
    trace: &Path,
    trace_block: u32,
    pods: usize,
    capacity: usize,
    repeats: usize,
    py: &PythonModel,
) -> CliResult<Vec<ReplayBench>> {
    let mut out = Vec::new();
    // The Python model reads plain JSONL.
    let plain = scratch("trace.jsonl", |f| {
        std::io::copy(&mut crate::fleet::input::file::open(trace).map_err(std::io::Error::other)?, f)
    })?;
    let (l, _, _) = load(trace, trace_block, repeats)?;
    out.push(replay_bench(&trace.display().to_string(), &l, &plain.0, pods, capacity, repeats, py)?);
    drop(l);
    let hot = scratch("hot-set.jsonl", |f| {
        let text = hot_set_trace();
        std::io::Write::write_all(f, text.as_bytes()).map(|()| text.len() as u64)
    })?;
    let (l, _, _) = load(&hot.0, 512, repeats)?;
    let (hp, hc) = HOT_SET_FLEET;
    out.push(replay_bench("hot-set (generated, 512-token ids)", &l, &hot.0, hp, hc, repeats, py)?);
    Ok(out)
}

/// The replay comparison, readable.
pub fn render_replays(rs: &[ReplayBench]) -> String {
    let mut o = String::new();
    for r in rs {
        o += &format!(
            "\nreplay of {}: {} requests, {} block touches, {} pods x {} blocks, {} blocks per trace id\n",
            r.trace, r.requests, r.block_touches, r.pods, r.capacity, r.group_blocks
        );
        o += &format!(
            "  parse {:.3} s ({:.1} MB/s), hash {:.3} s; replay = buffers, dispatch, percentiles and summary, best of the runs\n  \
             (fed as fleet replay feeds it: each request's keys hashed shortly before, the hashing not counted)\n",
            r.parse_s,
            r.mb / r.parse_s,
            r.hash_s
        );
        o += "  router         run-length s  M touches/s  per-block s  M touches/s  replay/parse  hit rate   Python s  ratio\n";
        for b in &r.routers {
            o += &format!(
                "  {:<14}{:>12.4} {:>12.1} {:>12.4} {:>12.2} {:>13.2} {:>8.2}% {:>10} {:>6}\n",
                b.router.name(),
                b.runs_s,
                b.runs_touches_per_s / 1e6,
                b.blocks_s,
                b.blocks_touches_per_s / 1e6,
                b.replay_over_parse,
                b.hit_rate * 100.0,
                b.python_s.map_or("-".into(), |s| format!("{s:.2}")),
                b.python_ratio.map_or("-".into(), |x| format!("{x:.0}x")),
            );
        }
        match &r.python_note {
            Some(n) => o += &format!("  Python model: {n}\n"),
            None => {
                o += "  ratio = Python wall time (read the plain JSONL + simulate) / Rust (parse + hash + run-length replay);\n  \
                      requests, tokens, hit and prefill tokens, hit rate, latency p50/p90/p99 and requests per pod checked\n  \
                      equal in the three models (run-length and per-block: the whole summary); the shipped presets\n  \
                      without an approximate index (llm-d-precise, llm-d-load, random, dynamo-kv, their defaults):\n  \
                      run-length and per block only, the whole summary checked equal\n"
            }
        }
    }
    o
}
