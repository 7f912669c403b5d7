//! The deterministic fleet scenario run on both sides: [`PODS`] pods of [`CAPACITY_BLOCKS`]
//! blocks, [`REQUESTS`] requests with shared prompt prefixes, once per router (round-robin,
//! least-loaded, prefix-aware with an exact index, prefix-aware with a stale index), through the
//! core's `Fleet`. Every integer the fleet reports is sent, plus exact latency percentiles, the
//! core's `LogHistogram` percentiles and a digest of every per-request `Outcome`.
//!
//! Then the durable task runner: [`run_runner`] crashes the core's 20-step demo task at every crash
//! point (`runner::harness::enumerate_crash_points`), unbuffered and batched, and checks every
//! guarantee (each side effect exactly once, reads answered, replay equals the live state) on
//! both sides; the log bytes of a crash-free run are digested with CRC-32C.
//!
//! The requests come from [`request`], an integer formula (no floats, no RNG crate), so the host
//! and the Cortex-M3 build the same stream.
//! TODO: switch to the seeded workload generator once `core/src/fleet/workload.rs` lands, keeping
//! the same sizes (the comparison then also covers the generator).

use brokerlab_core::fleet::hash::fmix64;
use brokerlab_core::fleet::keys::trace_keys;
use brokerlab_core::fleet::stats::{LogHistogram, REPORTED_PERCENTILES, nearest_rank_index};
use brokerlab_core::fleet::{
    Error, Fleet, FleetBuffers, FleetConfig, FleetLayout, IndexEntry, Outcome, PendingEntry, PendingRecord, Request,
    RouterKind, Slot,
};

use brokerlab_core::runner::harness::{self, DEMO_SCRIPT, SimWorld, Violation};
use brokerlab_core::runner::{RamLog, TaskId, crc32c};

use crate::Sink;

/// Seed of the demo scenario.
pub const SEED: u64 = 0x6272_6f6b_6572_5eed;
/// Requests per run.
pub const REQUESTS: u32 = 2_000;
/// Pods in the fleet.
pub const PODS: usize = 4;
/// Blocks each pod caches.
pub const CAPACITY_BLOCKS: usize = 320;
/// Queued requests tracked per pod (a run fails with `CapacityExceeded` past this).
pub const QUEUE_PER_POD: usize = 256;
/// Pending-evict records (evictions of the last `STALE_DELAY + 1` dispatches).
pub const PENDING: usize = 1_024;
/// Stale-evict delay of the stale prefix-aware run, in requests.
pub const STALE_DELAY: u32 = 16;
/// Tokens per trace hash id (the trace block size S): 4 blocks per id.
pub const TRACE_BLOCK_TOKENS: u32 = 64;
/// Shared prompt prefixes ("documents"), drawn with a skew towards low numbers.
pub const DOCUMENTS: u64 = 24;
/// Most hash ids of a document prefix.
pub const MAX_PREFIX_IDS: usize = 8;
/// Most hash ids unique to one request.
pub const MAX_UNIQUE_IDS: usize = 4;
/// Most trace hash ids in one request.
pub const MAX_HASH_IDS: usize = MAX_PREFIX_IDS + MAX_UNIQUE_IDS;
/// Most 16-token blocks in one request.
pub const MAX_REQUEST_BLOCKS: usize = MAX_HASH_IDS * (TRACE_BLOCK_TOKENS as usize / 16);
/// Mean gap between arrivals, ns (uniform in [0, 2 * mean)).
pub const MEAN_INTERARRIVAL_NS: u64 = 4_000_000;
/// Prefill cost, ns per uncached prompt token (the model's default).
pub const T_PREFILL_NS: u64 = 50_000;
/// Decode cost, ns per output token.
pub const T_DECODE_NS: u64 = 10_000;

/// The runs, in report order: (group name, router, stale delay).
pub const RUNS: [(&str, RouterKind, u32); 4] = [
    ("round-robin", RouterKind::RoundRobin, 0),
    ("least-loaded", RouterKind::LeastLoaded, 0),
    ("prefix-aware", RouterKind::PrefixAware, 0),
    ("prefix-aware-stale", RouterKind::PrefixAware, STALE_DELAY),
];

/// An upper bound of the core's hash-table lengths for `n` entries: the larger of its two sizing
/// rules (load <= 3/4: `next_power_of_two(ceil(4n/3))`; pod key tables at most half full:
/// `next_power_of_two(2n)`). The core's sizing functions are not `const`, so the static buffers
/// use this bound; each run slices them to the exact `FleetLayout` lengths and fails with
/// `BufferSize` if the core ever needs more.
const fn table_len(n: usize) -> usize {
    let three_quarters = (n * 4).div_ceil(3).next_power_of_two();
    let half = (n * 2).next_power_of_two();
    if half > three_quarters { half } else { three_quarters }
}

/// Length of [`Storage::slots`].
pub const SLOTS_LEN: usize = PODS * CAPACITY_BLOCKS;
/// Length of [`Storage::tables`].
pub const TABLES_LEN: usize = PODS * table_len(CAPACITY_BLOCKS);
/// Length of [`Storage::queues`].
pub const QUEUES_LEN: usize = PODS * QUEUE_PER_POD;
/// Length of [`Storage::index`].
pub const INDEX_LEN: usize = table_len(PODS * CAPACITY_BLOCKS);
/// Length of [`Storage::pending`].
pub const PENDING_LEN: usize = PENDING;
/// Length of [`Storage::pending_table`].
pub const PENDING_TABLE_LEN: usize = table_len(PENDING);
/// Length of [`Storage::latencies`].
pub const LATENCIES_LEN: usize = REQUESTS as usize;
/// Length of [`Storage::histograms`].
pub const HISTOGRAMS_LEN: usize = RUNS.len();

/// Every buffer the scenario uses, provided by the caller (statics on the firmware, vectors on
/// the host), each of the `*_LEN` length above.
pub struct Storage<'a> {
    /// Pod slots.
    pub slots: &'a mut [Slot],
    /// Pod key tables.
    pub tables: &'a mut [u32],
    /// Pod queues (finish times).
    pub queues: &'a mut [u64],
    /// Block index.
    pub index: &'a mut [IndexEntry],
    /// Pending-evict ring.
    pub pending: &'a mut [PendingRecord],
    /// Pending-evict table.
    pub pending_table: &'a mut [PendingEntry],
    /// Per-request latencies of one run (sorted for the exact percentiles).
    pub latencies: &'a mut [u64],
    /// One empty bounded-memory latency histogram per run of [`RUNS`] (empty on entry: a zeroed
    /// `LogHistogram` is empty, so the firmware keeps them in .bss and never builds one on the
    /// stack).
    pub histograms: &'a mut [LogHistogram],
    /// The runner's in-RAM log, [`RUNNER_LOG_BYTES`] long.
    pub runner_log: &'a mut [u8],
    /// The runner harness's simulated world.
    pub world: &'a mut SimWorld<WORLD_CALLS>,
}

/// Total bytes of the [`Storage`] buffers.
pub const fn storage_bytes() -> usize {
    use core::mem::size_of;
    SLOTS_LEN * size_of::<Slot>()
        + TABLES_LEN * size_of::<u32>()
        + QUEUES_LEN * size_of::<u64>()
        + INDEX_LEN * size_of::<IndexEntry>()
        + PENDING_LEN * size_of::<PendingRecord>()
        + PENDING_TABLE_LEN * size_of::<PendingEntry>()
        + LATENCIES_LEN * size_of::<u64>()
        + HISTOGRAMS_LEN * size_of::<LogHistogram>()
        + RUNNER_LOG_BYTES
        + size_of::<SimWorld<WORLD_CALLS>>()
}

/// Why a run failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunError {
    /// The run (group name).
    pub run: &'static str,
    /// The request being dispatched, or the crash index of the first boot for the runner
    /// (`u32::MAX` when building the fleet).
    pub request: u32,
    /// What went wrong.
    pub error: Cause,
}

/// The cause of a [`RunError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The fleet core returned an error.
    Fleet(Error),
    /// The runner harness found a broken guarantee.
    Runner(Violation),
}

impl From<Error> for Cause {
    fn from(e: Error) -> Self {
        Cause::Fleet(e)
    }
}

impl core::fmt::Display for Cause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Cause::Fleet(e) => write!(f, "fleet: {e}"),
            Cause::Runner(v) => write!(f, "runner guarantee broken: {v:?}"),
        }
    }
}

/// One synthetic request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticRequest {
    /// Gap since the previous arrival, ns.
    pub gap_ns: u64,
    /// Trace hash ids (only the first `ids` are used).
    pub hash_ids: [u64; MAX_HASH_IDS],
    /// Number of hash ids.
    pub ids: usize,
    /// Prompt length in tokens.
    pub input_tokens: u64,
    /// Output length in tokens.
    pub output_tokens: u64,
}

/// Request `i` of the scenario seeded with `seed`: a prefix of 2..=8 hash ids of one of
/// [`DOCUMENTS`] documents (document d drawn with probability growing towards 0, by squaring a
/// uniform draw), then 0..=3 hash ids unique to the request; the last id is cut short by 0..=63
/// tokens; 16..=271 output tokens; the gap to the previous arrival uniform in
/// [0, 2 * [`MEAN_INTERARRIVAL_NS`]).
pub fn request(seed: u64, i: u32) -> SyntheticRequest {
    let r = fmix64(seed ^ fmix64(u64::from(i).wrapping_add(1)));
    let r2 = fmix64(r ^ seed.rotate_left(17));
    let u = r & 0x3ff; // uniform in 0..1024
    let doc = (u * u * DOCUMENTS) >> 20;
    let prefix = 2 + ((r >> 10) % (MAX_PREFIX_IDS as u64 - 1)) as usize;
    let unique = ((r >> 20) % MAX_UNIQUE_IDS as u64) as usize;
    let mut hash_ids = [0u64; MAX_HASH_IDS];
    for (j, id) in hash_ids.iter_mut().enumerate().take(prefix) {
        *id = doc * 1_000 + j as u64;
    }
    for (j, id) in hash_ids.iter_mut().enumerate().skip(prefix).take(unique) {
        *id = 1_000_000 + u64::from(i) * 16 + j as u64;
    }
    let ids = prefix + unique;
    let s = u64::from(TRACE_BLOCK_TOKENS);
    SyntheticRequest {
        gap_ns: r2 % (2 * MEAN_INTERARRIVAL_NS),
        hash_ids,
        ids,
        input_tokens: ids as u64 * s - (r >> 30) % s,
        output_tokens: 16 + (r >> 40) % 256,
    }
}

/// Folds `v` into a digest.
fn mix(digest: u64, v: u64) -> u64 {
    fmix64(digest ^ v).wrapping_add(0x9e37_79b9_7f4a_7c15)
}

/// Folds every field of an outcome into a digest.
fn mix_outcome(mut d: u64, o: &Outcome) -> u64 {
    for v in [
        o.request,
        u64::from(o.pod),
        u64::from(o.hit_blocks),
        u64::from(o.believed_match_blocks),
        u64::from(o.queue_len),
        o.hit_tokens,
        o.prefill_tokens,
        o.arrival_ns,
        o.start_ns,
        o.finish_ns,
    ] {
        d = mix(d, v);
    }
    d
}

/// Sends the workload's own figures (independent of the fleet): request count, token and block
/// totals and a digest of every block key.
fn workload_summary(seed: u64, sink: &mut impl Sink) -> Result<(), RunError> {
    let g = "workload";
    let mut keys = [0u64; MAX_REQUEST_BLOCKS];
    let (mut tokens, mut out_tokens, mut blocks, mut max_blocks, mut arrival) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut digest = seed;
    for i in 0..REQUESTS {
        let req = request(seed, i);
        let n = trace_keys(&req.hash_ids[..req.ids], req.input_tokens, TRACE_BLOCK_TOKENS, &mut keys)
            .map_err(|e| RunError { run: g, request: i, error: e.into() })?;
        tokens += req.input_tokens;
        out_tokens += req.output_tokens;
        blocks += n as u64;
        max_blocks = max_blocks.max(n as u64);
        arrival += req.gap_ns;
        for &k in &keys[..n] {
            digest = mix(digest, k);
        }
    }
    sink.metric(g, "seed", 0, seed);
    sink.metric(g, "requests", 0, u64::from(REQUESTS));
    sink.metric(g, "input_tokens", 0, tokens);
    sink.metric(g, "output_tokens", 0, out_tokens);
    sink.metric(g, "blocks", 0, blocks);
    sink.metric(g, "max_request_blocks", 0, max_blocks);
    sink.metric(g, "last_arrival_ns", 0, arrival);
    sink.metric(g, "key_digest", 0, digest);
    Ok(())
}

/// Carves `len` elements off the front of a buffer.
fn take<'b, T>(buf: &'b mut [T], len: usize, name: &'static str) -> Result<&'b mut [T], Error> {
    let got = buf.len();
    buf.get_mut(..len).ok_or(Error::BufferSize { buffer: name, expected: len, got })
}

/// One run of the fleet with `router` over the whole request stream.
fn run_fleet(
    seed: u64,
    group: &'static str,
    router: RouterKind,
    stale_delay: u32,
    st: &mut Storage<'_>,
    histogram: &mut LogHistogram,
    sink: &mut impl Sink,
) -> Result<(), RunError> {
    let setup = |e: Error| RunError { run: group, request: u32::MAX, error: e.into() };
    let mut cfg = FleetConfig::new(PODS, CAPACITY_BLOCKS, router);
    cfg.stale_delay = stale_delay;
    cfg.t_prefill_ns = T_PREFILL_NS;
    cfg.t_decode_ns = T_DECODE_NS;
    let l = FleetLayout::new(&cfg, QUEUE_PER_POD, PENDING).map_err(setup)?;
    let buffers = FleetBuffers {
        slots: take(st.slots, l.pods * l.slots_per_pod, "slots").map_err(setup)?,
        tables: take(st.tables, l.pods * l.table_per_pod, "tables").map_err(setup)?,
        queues: take(st.queues, l.pods * l.queue_per_pod, "queues").map_err(setup)?,
        index: take(st.index, l.index, "index").map_err(setup)?,
        pending: take(st.pending, l.pending, "pending").map_err(setup)?,
        pending_table: take(st.pending_table, l.pending_table, "pending_table").map_err(setup)?,
    };
    let mut fleet = Fleet::new(cfg, buffers).map_err(setup)?;
    if !histogram.is_empty() {
        return Err(setup(Error::InvalidConfig { field: "histogram", expected: "an empty histogram" }));
    }
    let latencies = take(st.latencies, REQUESTS as usize, "latencies").map_err(setup)?;

    let mut keys = [0u64; MAX_REQUEST_BLOCKS];
    let mut arrival_ns = 0u64;
    let mut digest = mix(seed, stale_delay.into());
    let (mut max_latency, mut max_queue, mut total_hit_blocks) = (0u64, 0u32, 0u64);
    for (i, latency) in (0..REQUESTS).zip(latencies.iter_mut()) {
        let fail = |e: Error| RunError { run: group, request: i, error: e.into() };
        let req = request(seed, i);
        arrival_ns += req.gap_ns;
        let n = trace_keys(&req.hash_ids[..req.ids], req.input_tokens, TRACE_BLOCK_TOKENS, &mut keys).map_err(fail)?;
        let out = fleet
            .dispatch(&Request {
                arrival_ns,
                input_tokens: req.input_tokens,
                output_tokens: req.output_tokens,
                keys: &keys[..n],
            })
            .map_err(fail)?;
        digest = mix_outcome(digest, &out);
        *latency = out.latency_ns();
        histogram.record(*latency);
        max_latency = max_latency.max(*latency);
        max_queue = max_queue.max(out.queue_len);
        total_hit_blocks += u64::from(out.hit_blocks);
    }

    let t = *fleet.totals();
    for (name, v) in [
        ("requests", t.requests),
        ("input_tokens", t.input_tokens),
        ("output_tokens", t.output_tokens),
        ("hit_tokens", t.hit_tokens),
        ("prefill_tokens", t.prefill_tokens),
        ("hit_blocks", total_hit_blocks),
        ("latency_ns_sum", t.latency_ns_sum),
        ("latency_ns_max", max_latency),
        ("chased_requests", t.chased_requests),
        ("phantom_blocks", t.phantom_blocks),
        ("makespan_ns", t.makespan_ns),
        ("max_queue_len", u64::from(max_queue)),
    ] {
        sink.metric(group, name, 0, v);
    }
    for p in 0..PODS {
        let s = fleet.pod_stats(p).copied().unwrap_or_default();
        let cached = fleet.pod_cache(p).map_or(0, |c| c.len()) as u64;
        let idx = p as u32;
        sink.metric(group, "pod_requests", idx, s.requests);
        sink.metric(group, "pod_input_tokens", idx, s.input_tokens);
        sink.metric(group, "pod_hit_tokens", idx, s.hit_tokens);
        sink.metric(group, "pod_busy_ns", idx, s.busy_ns);
        sink.metric(group, "pod_max_queue_len", idx, u64::from(s.max_queue_len));
        sink.metric(group, "pod_cached_blocks", idx, cached);
    }
    latencies.sort_unstable();
    for (num, den) in REPORTED_PERCENTILES {
        let exact = nearest_rank_index(latencies.len(), num, den).map_or(0, |k| latencies[k]);
        let approx = histogram.percentile(num, den).unwrap_or(0);
        sink.metric(group, "latency_ns_pct", num as u32, exact);
        sink.metric(group, "latency_ns_hist_pct", num as u32, approx);
    }
    sink.metric(group, "outcome_digest", 0, digest);
    Ok(())
}

/// Calls the runner harness may record per run (world capacity).
pub const WORLD_CALLS: usize = 128;
/// Bytes of the runner's in-RAM flash-style log.
pub const RUNNER_LOG_BYTES: usize = harness::DEMO_LOG_BYTES;
/// The runner checks, in report order: (group name, batched commits).
pub const RUNNER_RUNS: [(&str, bool); 2] = [("runner", false), ("runner-batch", true)];

/// The task runner under crashes: for each of [`RUNNER_RUNS`], a crash-free run of the core's
/// `DEMO_SCRIPT` (its record count and the CRC-32C of its log bytes), then a crash at every crash
/// point with recovery and the exactly-once checks. Fails on any violation.
pub fn run_runner(log: &mut [u8], world: &mut SimWorld<WORLD_CALLS>, sink: &mut impl Sink) -> Result<(), RunError> {
    let task = TaskId::try_from("firmware-demo").unwrap_or_default();
    for (group, batch) in RUNNER_RUNS {
        let fail = |request, v| RunError { run: group, request, error: Cause::Runner(v) };
        *world = SimWorld::new();
        let clean =
            harness::run_with_crashes(log, &task, &DEMO_SCRIPT, world, &[], batch).map_err(|v| fail(u32::MAX, v))?;
        let used = RamLog::open(log).len();
        sink.metric(group, "clean_records", 0, u64::from(clean.records));
        sink.metric(group, "clean_log_bytes", 0, used as u64);
        sink.metric(group, "clean_log_crc32c", 0, u64::from(crc32c(&log[..used])));
        let rep = harness::enumerate_crash_points(log, &task, &DEMO_SCRIPT, world, false, batch);
        for (name, v) in [
            ("crash_points", rep.points),
            ("runs", rep.runs),
            ("window_crashes", rep.window),
            ("reviews", rep.reviews),
            ("deduplicated", rep.deduplicated),
            ("violations", rep.violations),
        ] {
            sink.metric(group, name, 0, u64::from(v));
        }
        if let Some((a, _, v)) = rep.first_violation {
            return Err(fail(a, v));
        }
        if rep.points == 0 || rep.runs != rep.points || rep.violations != 0 {
            return Err(fail(u32::MAX, Violation::BadLog));
        }
    }
    Ok(())
}

/// The fleet part: the workload summary, then every run of [`RUNS`].
pub fn run_fleets(seed: u64, storage: &mut Storage<'_>, sink: &mut impl Sink) -> Result<(), RunError> {
    workload_summary(seed, sink)?;
    let histograms = core::mem::take(&mut storage.histograms);
    if histograms.len() < RUNS.len() {
        let error = Error::BufferSize { buffer: "histograms", expected: RUNS.len(), got: histograms.len() };
        return Err(RunError { run: "setup", request: u32::MAX, error: error.into() });
    }
    for ((group, router, stale), histogram) in RUNS.into_iter().zip(histograms.iter_mut()) {
        run_fleet(seed, group, router, stale, storage, histogram, sink)?;
    }
    storage.histograms = histograms;
    Ok(())
}

/// Runs the whole scenario, sending every metric to `sink`: [`run_fleets`] then [`run_runner`]
/// (the firmware calls the two itself, to measure the stack of each).
pub fn run(seed: u64, storage: &mut Storage<'_>, sink: &mut impl Sink) -> Result<(), RunError> {
    run_fleets(seed, storage, sink)?;
    run_runner(storage.runner_log, storage.world, sink)
}
