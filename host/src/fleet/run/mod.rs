//! Running a fleet over a stream of requests on the host: owned buffers, retry on a full buffer,
//! exact percentiles and the summary every command prints.

use std::path::{Path, PathBuf};

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::stats::{REPORTED_PERCENTILES, nearest_rank_index};
use brokerlab_core::fleet::{
    CacheMode, Error as CoreError, Fleet, FleetBuffers, FleetConfig, FleetLayout, IndexEntry, Limit, LruPod, Outcome,
    PendingEntry, PendingRecord, Request, RouterBuffers, Run, Slot, keys,
};
use serde::Serialize;

use super::trace::{BytesRead, TraceReader};
use crate::error::{CliError, CliResult, FleetError};
use crate::mem::{self, Growth, Need, try_grow, try_vec};

/// Heap buffers for one fleet (the core borrows them).
pub struct OwnedFleet {
    cfg: FleetConfig,
    layout: FleetLayout,
    slots: Vec<Slot>,
    tables: Vec<u32>,
    queues: Vec<u64>,
    index: Vec<IndexEntry>,
    pending: Vec<PendingRecord>,
    pending_table: Vec<PendingEntry>,
    cpu_slots: Vec<Slot>,
    cpu_tables: Vec<u32>,
    router: OwnedRouter,
    /// Blocks per trace id of the run-length replay (1: per block, and the run buffers are empty).
    group_blocks: u32,
    runs: Vec<Run>,
    run_tables: Vec<u32>,
}

/// Heap buffers of a shipped router's approximate index (empty for the other routers).
pub struct OwnedRouter {
    slots: Vec<Slot>,
    tables: Vec<u32>,
    index: Vec<IndexEntry>,
}

impl OwnedRouter {
    /// Allocates what `cfg`'s router needs ([`FleetConfig::router_layout`]).
    pub fn new(cfg: &FleetConfig) -> CliResult<Self> {
        let l = cfg.router_layout().map_err(config_error)?;
        let n = |per_pod: usize| cfg.pods.saturating_mul(per_pod);
        Ok(OwnedRouter {
            slots: try_vec(n(l.slots_per_pod), Slot::default(), "the router's approximate-index LRUs")?,
            tables: try_vec(n(l.table_per_pod), 0, "the router's approximate-index key tables")?,
            index: try_vec(l.index, IndexEntry::default(), "the router's approximate index")?,
        })
    }

    /// The core's view of them.
    pub fn buffers(&mut self) -> RouterBuffers<'_> {
        RouterBuffers { slots: &mut self.slots, tables: &mut self.tables, index: &mut self.index }
    }
}

impl OwnedFleet {
    /// Allocates the buffers [`FleetLayout`] asks for (an allocation failure is an error naming
    /// the buffer, never an abort). The caller checks the memory budget first.
    pub fn new(cfg: FleetConfig, queue_per_pod: usize, pending: usize) -> CliResult<Self> {
        Self::with_runs(cfg, queue_per_pod, pending, 1)
    }

    /// As [`Self::new`], for requests keyed from trace ids of `group_blocks` blocks each: with
    /// more than one block per id and a configuration it supports, the fleet replays per run of
    /// blocks ([`Fleet::attach_runs`]: the same results, less work).
    pub fn with_runs(cfg: FleetConfig, queue_per_pod: usize, pending: usize, group_blocks: u32) -> CliResult<Self> {
        let l = FleetLayout::new(&cfg, queue_per_pod, pending).map_err(config_error)?;
        let n = |per_pod: usize| l.pods.saturating_mul(per_pod);
        let (runs_len, run_tables_len) = runs_layout(&cfg, group_blocks).unwrap_or((0, 0));
        Ok(OwnedFleet {
            cfg,
            layout: l,
            slots: try_vec(n(l.slots_per_pod), Slot::default(), "the pods' LRU slots")?,
            tables: try_vec(l.tables_len(), 0, "the pods' key tables")?,
            queues: try_vec(n(l.queue_per_pod), 0, "the pods' queues")?,
            index: try_vec(l.index, IndexEntry::default(), "the block index")?,
            pending: try_vec(l.pending, PendingRecord::default(), "the stale-evict FIFO")?,
            pending_table: try_vec(l.pending_table, PendingEntry::default(), "the stale-evict table")?,
            cpu_slots: try_vec(n(l.cpu_slots_per_pod), Slot::default(), "the CPU tier's slots")?,
            cpu_tables: try_vec(n(l.cpu_table_per_pod), 0, "the CPU tier's key tables")?,
            router: OwnedRouter::new(&cfg)?,
            // Last: a failed allocation names the per-block buffers first, as without runs.
            group_blocks,
            runs: try_vec(runs_len, Run::default(), "the pods' runs (run-length replay)")?,
            run_tables: try_vec(run_tables_len, 0, "the pods' run tables (run-length replay)")?,
        })
    }

    /// The buffer layout.
    pub fn layout(&self) -> &FleetLayout {
        &self.layout
    }

    /// A fresh fleet over these buffers (replaying per run when they were allocated for it).
    pub fn fleet(&mut self) -> Result<Fleet<'_>, CoreError> {
        let mut fleet = Fleet::with_router_buffers(
            self.cfg,
            FleetBuffers {
                slots: &mut self.slots,
                tables: &mut self.tables,
                queues: &mut self.queues,
                index: &mut self.index,
                pending: &mut self.pending,
                pending_table: &mut self.pending_table,
                cpu_slots: &mut self.cpu_slots,
                cpu_tables: &mut self.cpu_tables,
            },
            self.router.buffers(),
        )?;
        if !self.runs.is_empty() {
            fleet.attach_runs(self.group_blocks, &mut self.runs, &mut self.run_tables)?;
        }
        Ok(fleet)
    }
}

/// Run buffer lengths when `cfg` replays per run with ids of `group_blocks` blocks (None: per
/// block; one block per id gains nothing).
pub fn runs_layout(cfg: &FleetConfig, group_blocks: u32) -> Option<(usize, usize)> {
    if group_blocks <= 1 {
        return None;
    }
    Fleet::runs_layout(cfg)
}

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
    /// Longest line accepted, bytes (`--max-line-bytes`; [`super::trace::DEFAULT_MAX_LINE_BYTES`]).
    pub max_line_bytes: u64,
    /// Most blank lines accepted (`--max-blank-lines`; [`super::trace::DEFAULT_MAX_BLANK_LINES`]).
    pub max_blank_lines: u64,
    /// The bytes read (for a progress display).
    pub read: BytesRead,
}

impl TraceSource {
    /// A trace with lines up to [`super::trace::DEFAULT_MAX_LINE_BYTES`].
    pub fn new(path: PathBuf, trace_block_tokens: u32) -> Self {
        TraceSource {
            path,
            trace_block_tokens,
            max_line_bytes: super::trace::DEFAULT_MAX_LINE_BYTES,
            max_blank_lines: super::trace::DEFAULT_MAX_BLANK_LINES,
            read: BytesRead::default(),
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
        let reader = TraceReader::open_limited(&self.path, self.max_line_bytes)?
            .max_blank_lines(self.max_blank_lines)
            .counting(&self.read);
        feed_trace(reader, self.trace_block_tokens, sink)
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
        let (_, r) = super::input::reader(std::io::Cursor::new(self.bytes))
            .map_err(|e| CliError::failure(format!("{}: {e}", self.name)))?;
        feed_trace(TraceReader::new(PathBuf::from(self.name), r), self.trace_block_tokens, sink)
    }

    fn id_blocks(&self) -> u32 {
        self.trace_block_tokens / BLOCK_TOKENS as u32
    }
}

/// Feeds every line of `reader` as a request (keys from its hash ids).
fn feed_trace(
    mut reader: TraceReader,
    trace_block_tokens: u32,
    sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>,
) -> CliResult<()> {
    let mut keys_buf: Vec<u64> = Vec::new();
    while reader.advance()? {
        let rec = reader.record();
        let m = (rec.input_length / BLOCK_TOKENS as u64) as usize;
        let located = |e: CoreError, r: &TraceReader| CliError::bad_input(format!("{}: {e}", r.location()));
        if rec.input_length > brokerlab_core::fleet::limits::MAX_PROMPT_TOKENS {
            return Err(CliError::bad_input(format!(
                "{}: field `input_length`: {} exceeds the limit of {} tokens",
                reader.location(),
                rec.input_length,
                brokerlab_core::fleet::limits::MAX_PROMPT_TOKENS
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
        sink(&req).map_err(|e| located(e, &reader))?;
    }
    Ok(())
}

/// Headline metrics of one run (the JSON object of `fleet replay --json`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Summary {
    /// Router name.
    pub router: brokerlab_core::fleet::RouterKind,
    /// Pods N.
    pub pods: usize,
    /// Blocks per pod C.
    pub capacity: usize,
    /// Load penalty.
    pub alpha: f64,
    /// Stale-evict delay k.
    pub stale: u32,
    /// Touch order.
    pub order: brokerlab_core::fleet::TouchOrder,
    /// ns per prefill token.
    pub t_prefill_ns: u64,
    /// ns per output token.
    pub t_decode_ns: u64,
    /// Requests.
    pub requests: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of O.
    pub output_tokens: u64,
    /// Sum of hit tokens.
    pub hit_tokens: u64,
    /// CPU-tier blocks per pod (0: no CPU tier).
    pub cpu_capacity: usize,
    /// Sum of tokens loaded from the CPU tier.
    pub cpu_hit_tokens: u64,
    /// cpu_hit_tokens / input_tokens.
    pub cpu_hit_rate: Option<f64>,
    /// Sum of prefill tokens.
    pub prefill_tokens: u64,
    /// hit_tokens / input_tokens (null without input).
    pub hit_rate: Option<f64>,
    /// Latency p50, s (null without requests).
    pub latency_p50: Option<f64>,
    /// Latency p90, s.
    pub latency_p90: Option<f64>,
    /// Latency p99, s.
    pub latency_p99: Option<f64>,
    /// Mean latency, s.
    pub latency_mean: Option<f64>,
    /// Latency p90 in integer ns (exact).
    pub latency_ns_p90: Option<u64>,
    /// Requests per pod.
    pub per_pod_requests: Vec<u64>,
    /// Hit rate per pod.
    pub per_pod_hit_rate: Vec<Option<f64>>,
    /// Longest queue seen per pod.
    pub per_pod_max_queue: Vec<u32>,
    /// Requests where the router believed in more cached blocks than the pod had.
    pub chased_requests: u64,
    /// Believed-but-gone blocks, summed.
    pub phantom_blocks: u64,
    /// Finish time of the last request, s.
    pub makespan_s: f64,
    /// Autoscaling figures (null without autoscaling).
    pub autoscale: Option<AutoscaleSummary>,
    /// `"global"` with `--cache global` (one shared pool of pods x capacity blocks); absent for
    /// per-pod caches, so the default output is unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheMode>,
    /// With `--router-config`: the resolved router in one line (`router` alone says `custom`
    /// for any pipeline); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
}

/// What the autoscaler did (docs/MODEL.md, "Autoscaling").
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct AutoscaleSummary {
    /// Fewest routable pods.
    pub min_pods: u32,
    /// Routable pods at the start.
    pub initial_pods: u32,
    /// Pods booted.
    pub scale_outs: u64,
    /// Pods dropped.
    pub scale_ins: u64,
    /// Most routable pods at any arrival.
    pub max_active_pods: u32,
    /// Provisioned pod-time until the last finish, pod-seconds (the cost).
    pub pod_seconds: f64,
    /// pod_seconds / makespan: the time-averaged fleet size.
    pub mean_pods: Option<f64>,
    /// Requests routed while added pods were routable.
    pub scaled_out_requests: u64,
    /// Of those, requests routed to added pods.
    pub new_pod_requests: u64,
    /// new_pod_requests / their fair share (1: spread like round-robin; below 1: the router
    /// keeps traffic on the warm pods). Fair share rounded down to 1/1000 per request.
    pub new_pod_traffic_ratio: Option<f64>,
}

/// Seconds from integer ns (reporting only; all model arithmetic is in integer ns).
pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// A run's result: the summary and, if asked for, every outcome.
pub struct RunResult {
    /// Headline metrics.
    pub summary: Summary,
    /// Per-request outcomes (empty unless `keep_outcomes`).
    pub outcomes: Vec<Outcome>,
}

/// Runs `cfg` over `source`; on a full queue or pending-evict buffer, doubles it and starts over
/// (the run is deterministic, so the result is the same as with a large buffer from the start).
pub fn simulate(cfg: FleetConfig, source: &mut dyn RequestSource, keep_outcomes: bool) -> CliResult<RunResult> {
    let mut queue_per_pod = 4096usize;
    let mut pending = if cfg.stale_delay > 0 { ((cfg.stale_delay as usize + 1) * 256).min(1 << 20) } else { 0 };
    loop {
        let group = source.id_blocks();
        let fixed = check_memory_runs(&cfg, queue_per_pod, pending, source.len_hint(), keep_outcomes, group, &[])?;
        // what grows with the stream is checked as it grows (a trace's length is not known)
        let growth = Growth::new(&run_context(&cfg), fixed);
        source.grow_into(&growth);
        let mut owned = OwnedFleet::with_runs(cfg, queue_per_pod, pending, group)?;
        let mut fleet = owned.fleet().map_err(config_error)?;
        let mut latencies: Vec<u64> = Vec::new();
        if let Some(n) = source.len_hint() {
            try_grow(&mut latencies, n as usize, "the latencies (8 bytes per request)")?;
        }
        let mut outcomes = Vec::new();
        let mut full: Option<Limit> = None;
        let mut oom: Option<CliError> = None;
        let fed = source.feed(&mut |req| {
            let out = fleet.dispatch(req).inspect_err(|e| {
                if let CoreError::CapacityExceeded { limit, .. } = e {
                    full = Some(*limit);
                }
            })?;
            let grown = growth.reserve_one(&mut latencies, LATENCIES).and_then(|()| match keep_outcomes {
                true => growth.reserve_one(&mut outcomes, OUTCOMES),
                false => Ok(()),
            });
            if let Err(e) = grown {
                oom = Some(e);
                return Err(CoreError::CapacityExceeded { limit: Limit::CallerMemory, capacity: latencies.len() });
            }
            latencies.push(out.latency_ns());
            if keep_outcomes {
                outcomes.push(out);
            }
            Ok(())
        });
        if let Some(e) = oom {
            return Err(e);
        }
        if matches!(full, Some(Limit::QueuePerPod | Limit::PendingEvictions))
            && let Some(msg) = source.restart_error()
        {
            return Err(CliError::bad_input(msg));
        }
        match (full, fed) {
            (Some(Limit::QueuePerPod), _) => queue_per_pod *= 2,
            (Some(Limit::PendingEvictions), _) => pending = (pending * 2).max(1024),
            (Some(limit), _) => return Err(FleetError::Limit(limit).into()),
            (None, Err(e)) => return Err(e),
            (None, Ok(())) => return Ok(RunResult { summary: summarize(&fleet, latencies), outcomes }),
        }
    }
}

/// Checks the memory budget for a run of `cfg` with these bounds over `requests` requests (when
/// known): the fleet's buffers (the audit's formulas) and the per-request vectors.
pub fn check_memory(
    cfg: &FleetConfig,
    queue_per_pod: usize,
    pending: usize,
    requests: Option<u64>,
    keep_outcomes: bool,
) -> CliResult<()> {
    check_memory_runs(cfg, queue_per_pod, pending, requests, keep_outcomes, 1, &[]).map(|_| ())
}

/// What a run of `cfg` is called in a memory-budget message.
pub fn run_context(cfg: &FleetConfig) -> String {
    format!("a run of {} pods x {} blocks", cfg.pods, cfg.capacity_blocks)
}

/// [`check_memory`] plus the run-length replay's buffers, when a trace of `group_blocks` blocks
/// per id uses it, and `held`: what the caller holds while the run lasts (a Dynamo trace).
/// Returns the bytes counted.
pub fn check_memory_runs(
    cfg: &FleetConfig,
    queue_per_pod: usize,
    pending: usize,
    requests: Option<u64>,
    keep_outcomes: bool,
    group_blocks: u32,
    held: &[Need],
) -> CliResult<u64> {
    let l = FleetLayout::new(cfg, queue_per_pod, pending).map_err(config_error)?;
    let mut needs = crate::audit::fleet_needs(cfg, &l);
    let router_bytes = cfg.router_layout().map_err(config_error)?.bytes(cfg.pods) as u64;
    if router_bytes > 0 {
        needs.push(Need {
            what: "the router's approximate index".into(),
            bytes: router_bytes,
            lowered_by: "--capacity, or [params] approx_lru_blocks in --router-config".into(),
        });
    }
    if let Some((runs, tables)) = runs_layout(cfg, group_blocks) {
        needs.push(Need {
            what: "run-length replay (runs and run tables)".into(),
            bytes: (runs * std::mem::size_of::<Run>() + tables * 4) as u64,
            lowered_by: "--capacity".into(),
        });
    }
    if let Some(n) = requests {
        let per = 8 + if keep_outcomes { std::mem::size_of::<Outcome>() as u64 } else { 0 };
        needs.push(Need {
            what: "latencies (exact percentiles)".into(),
            bytes: n.saturating_mul(per),
            lowered_by: "workload.requests".into(),
        });
    }
    needs.extend_from_slice(held);
    mem::check(&run_context(cfg), &needs)
}

/// Turns a configuration error from the core into a message naming the CLI flag.
pub fn config_error(e: CoreError) -> CliError {
    match e {
        CoreError::InvalidConfig { field, expected } => FleetError::Flag { field, expected }.into(),
        other => CliError::failure(other.to_string()),
    }
}

/// The nearest-rank [`REPORTED_PERCENTILES`] of `values` (reordered): the same values a full sort
/// gives, by selection in O(n) instead of an O(n log n) sort.
pub fn exact_percentiles(values: &mut [u64]) -> [Option<u64>; 3] {
    let ranks = REPORTED_PERCENTILES.map(|(num, den)| nearest_rank_index(values.len(), num, den));
    debug_assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "percentiles in increasing order");
    // Each selection leaves everything after the chosen index at least as large: the next
    // (higher) rank is selected in that tail only.
    let mut start = 0;
    ranks.map(|rank| {
        let i = rank?;
        if i >= start {
            values[start..].select_nth_unstable(i - start);
            start = i;
        }
        Some(values[i])
    })
}

/// Builds the summary of a finished run; `latencies` in ns, any order.
pub fn summarize(fleet: &Fleet<'_>, mut latencies: Vec<u64>) -> Summary {
    let cfg = fleet.config();
    let t = fleet.totals();
    let [p50, p90, p99] = exact_percentiles(&mut latencies);
    let pods: Vec<_> = (0..cfg.pods).filter_map(|p| fleet.pod_stats(p).copied()).collect();
    Summary {
        router: cfg.router,
        pods: cfg.pods,
        capacity: cfg.capacity_blocks,
        alpha: cfg.alpha,
        stale: cfg.stale_delay,
        order: cfg.order,
        t_prefill_ns: cfg.t_prefill_ns,
        t_decode_ns: cfg.t_decode_ns,
        requests: t.requests,
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        hit_tokens: t.hit_tokens,
        cpu_capacity: cfg.cpu_capacity_blocks,
        cpu_hit_tokens: t.cpu_hit_tokens,
        cpu_hit_rate: ratio(t.cpu_hit_tokens, t.input_tokens),
        prefill_tokens: t.prefill_tokens,
        hit_rate: ratio(t.hit_tokens, t.input_tokens),
        latency_p50: p50.map(secs),
        latency_p90: p90.map(secs),
        latency_p99: p99.map(secs),
        latency_mean: (t.requests > 0).then(|| t.latency_ns_sum as f64 / t.requests as f64 / 1e9),
        latency_ns_p90: p90,
        per_pod_requests: pods.iter().map(|s| s.requests).collect(),
        per_pod_hit_rate: pods.iter().map(|s| ratio(s.hit_tokens, s.input_tokens)).collect(),
        per_pod_max_queue: pods.iter().map(|s| s.max_queue_len).collect(),
        chased_requests: t.chased_requests,
        phantom_blocks: t.phantom_blocks,
        makespan_s: secs(t.makespan_ns),
        autoscale: cfg.scale.map(|policy| AutoscaleSummary {
            min_pods: policy.min_pods,
            initial_pods: policy.initial_pods,
            scale_outs: t.scale_outs,
            scale_ins: t.scale_ins,
            max_active_pods: t.max_active_pods,
            pod_seconds: secs(fleet.pod_ns(t.makespan_ns)),
            mean_pods: ratio(fleet.pod_ns(t.makespan_ns), t.makespan_ns),
            scaled_out_requests: t.scaled_out_requests,
            new_pod_requests: t.new_pod_requests,
            new_pod_traffic_ratio: ratio(t.new_pod_requests * 1000, t.fair_new_pod_milli),
        }),
        cache: (cfg.cache != CacheMode::Local).then_some(cfg.cache),
        pipeline: None,
    }
}

/// Bytes of core memory per cached block of a pod of `capacity` blocks (LRU slots + key table).
pub fn pod_bytes_per_block(capacity: usize) -> f64 {
    LruPod::bytes_per_block(capacity)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.digits$}"))
}

/// The readable table of `fleet replay`.
pub fn render_table(s: &Summary) -> String {
    let mut o = String::new();
    let mut line = |k: &str, v: String| o.push_str(&format!("{k:<22} {v}\n"));
    line("router", s.pipeline.clone().unwrap_or_else(|| s.router.to_string()));
    line(
        "pods x capacity",
        format!("{} x {} blocks ({} tokens per pod)", s.pods, s.capacity, s.capacity * BLOCK_TOKENS),
    );
    if let Some(c) = &s.cache {
        line("cache", format!("{c}: one pool of {} blocks every pod reads", s.pods * s.capacity));
    }
    line("alpha / stale / order", format!("{} / {} / {}", s.alpha, s.stale, s.order));
    line("t_prefill / t_decode", format!("{} ns / {} ns per token", s.t_prefill_ns, s.t_decode_ns));
    line("requests", s.requests.to_string());
    line("input tokens", s.input_tokens.to_string());
    line("hit tokens", s.hit_tokens.to_string());
    if s.cpu_capacity > 0 {
        line(
            "CPU tier",
            format!(
                "{} blocks per pod, {} tokens loaded ({} %)",
                s.cpu_capacity,
                s.cpu_hit_tokens,
                opt(s.cpu_hit_rate.map(|h| h * 100.0), 2)
            ),
        );
    }
    line("prefill tokens", s.prefill_tokens.to_string());
    line("hit rate", opt(s.hit_rate.map(|h| h * 100.0), 2) + " %");
    line(
        "latency p50/p90/p99",
        format!("{} / {} / {} s", opt(s.latency_p50, 4), opt(s.latency_p90, 4), opt(s.latency_p99, 4)),
    );
    line("stale chases", format!("{} requests, {} phantom blocks", s.chased_requests, s.phantom_blocks));
    if let Some(a) = &s.autoscale {
        line(
            "autoscaling",
            format!(
                "{}..{} pods (start {}), {} out / {} in, at most {} routable",
                a.min_pods, s.pods, a.initial_pods, a.scale_outs, a.scale_ins, a.max_active_pods
            ),
        );
        line("pod-seconds", format!("{:.1} (mean {} pods)", a.pod_seconds, opt(a.mean_pods, 2)));
        line(
            "added pods' traffic",
            format!(
                "{} of {} requests while scaled out; {} x their fair share",
                a.new_pod_requests,
                a.scaled_out_requests,
                opt(a.new_pod_traffic_ratio, 2)
            ),
        );
    }
    o.push_str("\npod  requests  hit rate  max queue\n");
    for p in 0..s.pods {
        o.push_str(&format!(
            "{p:>3}  {:>8}  {:>8}  {:>9}\n",
            s.per_pod_requests[p],
            opt(s.per_pod_hit_rate[p].map(|h| h * 100.0), 2),
            s.per_pod_max_queue[p]
        ));
    }
    o
}
