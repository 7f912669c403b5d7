//! The deterministic scenario run on both sides.
//!
//! **Fleet.** The core's seeded workload generator ([`WORKLOAD`]: 12 tenants with Zipf
//! popularity, a 512-token shared prefix, two of 16 RAG documents per request, Poisson arrivals)
//! makes [`REQUESTS`] requests; the core's `token_keys` chains their blocks; the core's `Fleet`
//! of [`PODS`] pods x [`CAPACITY_BLOCKS`] blocks serves them once per router (round-robin,
//! least-loaded, prefix-aware with an exact index, prefix-aware with a stale index). Every integer
//! the fleet reports is sent, plus exact latency percentiles, the core's `LogHistogram`
//! percentiles and a digest of every per-request `Outcome`.
//!
//! **Batched engine.** Then the core's `BatchedFleet` (vLLM-style continuous batching) serves the
//! first [`BATCHED_REQUESTS`] requests of the workload on [`PODS`] pods of
//! [`BATCHED_CAPACITY_BLOCKS`] KV blocks, round-robin and prefix-aware, then prefix-aware with
//! prefill/decode disaggregation and with a CPU offload tier ([`BATCHED_RUNS`], [`run_batched`]): every
//! engine counter, exact TTFT and E2E percentiles and digests of every dispatch, inter-token
//! latency report and completion; the KV pool is small, so both runs preempt.
//!
//! **Runner.** Then the durable task runner: [`run_runner`] crashes the core's 20-step demo task
//! at every crash point (`runner::harness::enumerate_crash_points`), unbuffered and batched, and
//! checks every guarantee (each side effect exactly once, reads answered, replay equals the live
//! state) on both sides; the log bytes of a crash-free run are digested with CRC-32C.
//!
//! **Flash log.** Last, [`run_power_cuts`] puts that run's records through the core's
//! `runner::harness::power_cut_sweep` on a mock NOR flash: a power cut at every byte.

use brokerlab_core::fleet::hash::fmix64;
use brokerlab_core::fleet::keys::token_keys;
use brokerlab_core::fleet::stats::{LogHistogram, REPORTED_PERCENTILES, nearest_rank_index};
use brokerlab_core::fleet::workload::{
    DocOrder, Layout, MAX_STAGES, Popularity, Stage, SuffixScope, Workload, WorkloadSpec,
};
use brokerlab_core::fleet::{
    BatchedBuffers, BatchedConfig, BatchedEngine, BatchedFleet, BatchedLayout, BatchedStats, BlockIndex, Buffer,
    Completion, EngineConfig, EngineEvents, Error, FifoBuffers, FifoConfig, FifoFleet, FifoLayout, FleetConfig,
    IndexEntry, KvBlock, LruPod, Outcome, PendingEntry, PendingEvicts, PendingRecord, PhysicsProfile, Profile, ReqSlot,
    Request, RouterKind, ScalePolicy, Slot, ViewConfig, defaults,
};

use brokerlab_core::fleet::engine::pd::PdConfig;
use brokerlab_core::fleet::sim::pd::{Delivery, Join, PdBuffers, Transfer};
use brokerlab_core::runner::harness::{self, DEMO_SCRIPT, PowerCutViolation, SimWorld, Violation};
use brokerlab_core::runner::{Event, RamLog, Record, TaskId, crc32c, parse};

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
/// Tenants of the workload (Zipf s = 1).
pub const TENANTS: u32 = 12;
/// Shared prefix per tenant, tokens.
pub const PREFIX_TOKENS: u32 = 512;
/// RAG documents per tenant.
pub const RAG_DOCS: u32 = 16;
/// Tokens per RAG document.
pub const RAG_DOC_TOKENS: u32 = 64;
/// RAG documents per request.
pub const RAG_PER_REQUEST: u32 = 2;
/// Largest user suffix, tokens.
pub const SUFFIX_MAX_TOKENS: u32 = 256;

/// The workload, from the core's seeded generator.
pub const WORKLOAD: WorkloadSpec = WorkloadSpec {
    seed: SEED,
    requests: REQUESTS as u64,
    tenants: TENANTS,
    users_per_tenant: 8,
    prefix_tokens: PREFIX_TOKENS,
    suffix_min_tokens: 32,
    suffix_max_tokens: SUFFIX_MAX_TOKENS,
    output_min_tokens: 16,
    output_max_tokens: 256,
    output_choices: [0; 16],
    output_choices_len: 0,
    popularity: Popularity::Zipf { s_milli: 1_000 },
    rate_milli_per_s: 150_000,
    layout: Layout::StablePrefixFirst,
    header_tokens: 0,
    rag_docs: RAG_DOCS,
    rag_doc_tokens: RAG_DOC_TOKENS,
    rag_per_request: RAG_PER_REQUEST,
    rag_order: DocOrder::Sorted,
    burst_rate_milli_per_s: 0,
    burst_start_ms: 0,
    burst_ms: 0,
    suffix_scope: SuffixScope::Request,
    stages: [Stage { rate_milli_per_s: 0, duration_ms: 0 }; MAX_STAGES],
    stages_len: 0,
};

/// Longest prompt of [`WORKLOAD`], tokens (`WorkloadSpec::max_prompt_tokens`, as a constant).
pub const MAX_PROMPT_TOKENS: usize = (PREFIX_TOKENS + RAG_PER_REQUEST * RAG_DOC_TOKENS + SUFFIX_MAX_TOKENS) as usize;
/// Most 16-token blocks in one request.
pub const MAX_REQUEST_BLOCKS: usize = MAX_PROMPT_TOKENS / 16;
/// Prefill cost, ns per uncached prompt token (the model's default).
pub const T_PREFILL_NS: u64 = 50_000;
/// Decode cost, ns per output token.
pub const T_DECODE_NS: u64 = 10_000;

/// The autoscaled run's policy: 1 to [`PODS`] pods, evaluated every 250 ms, boot above a mean
/// queue of 2 (500 ms startup), drop below 0.5.
pub const SCALE: ScalePolicy = ScalePolicy {
    min_pods: 1,
    initial_pods: 1,
    interval_ns: 250_000_000,
    up_milli: 2_000,
    down_milli: 500,
    startup_ns: 500_000_000,
};

/// The runs, in report order: (group name, router, stale delay, autoscaling).
pub const RUNS: [(&str, RouterKind, u32, Option<ScalePolicy>); 5] = [
    ("round-robin", RouterKind::RoundRobin, 0, None),
    ("least-loaded", RouterKind::LeastLoaded, 0, None),
    ("prefix-aware", RouterKind::PrefixAware, 0, None),
    ("prefix-aware-stale", RouterKind::PrefixAware, STALE_DELAY, None),
    ("prefix-aware-autoscale", RouterKind::PrefixAware, 0, Some(SCALE)),
];

/// Requests of each batched-engine run (the first requests of [`WORKLOAD`]'s stream, whose
/// arrivals do not depend on the request count).
pub const BATCHED_REQUESTS: u32 = 400;
/// The batched runs' workload: [`WORKLOAD`], cut to [`BATCHED_REQUESTS`] requests.
pub const BATCHED_WORKLOAD: WorkloadSpec =
    WorkloadSpec { requests: BATCHED_REQUESTS as u64, rate_milli_per_s: 40_000, ..WORKLOAD };
/// KV blocks per pod of the batched runs (small, so that running requests preempt one another).
pub const BATCHED_CAPACITY_BLOCKS: usize = 256;
/// The batched engine: BLIS's llama-3.1-8b H100 step cost, at most 32 running requests and 1,024
/// tokens per step (chunked prefill: the longest prompt, 896 tokens, fits one chunk).
pub const BATCHED_ENGINE: BatchedConfig =
    BatchedConfig { max_num_seqs: 32, max_num_batched_tokens: 1_024, ..BatchedConfig::new(Profile::Llama31_8bH100) };
/// Requests tracked at once per pod (waiting, running, or finished behind an unfinished one);
/// a run fails with `CapacityExceeded` past this.
pub const BATCHED_REQUESTS_PER_POD: usize = 128;
/// Prompt keys of the tracked requests, per pod (`CapacityExceeded` past this).
pub const BATCHED_KEYS_PER_POD: usize = 4_096;
/// The step cost of a batched run: [`BATCHED_ENGINE`]'s linear profile, or a built-in physics
/// profile with the same limits (S = 32, M = 1,024) and the same small pods (its derived KV
/// capacity, about 8,900 blocks for Llama-3.1-8B on an H100, does not fit the machine's RAM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchedCost {
    /// [`BATCHED_ENGINE`].
    Linear,
    /// The physics step cost of this profile (docs/MODEL.md, "The physics step cost").
    Physics(PhysicsProfile),
}

/// The batched engine of a run with step cost `cost` (None: a physics profile the core refuses;
/// the built-in ones are checked by the core's tests).
pub fn batched_engine(cost: BatchedCost) -> Option<BatchedConfig> {
    match cost {
        BatchedCost::Linear => Some(BATCHED_ENGINE),
        BatchedCost::Physics(p) => Some(BatchedConfig {
            max_num_seqs: BATCHED_ENGINE.max_num_seqs,
            max_num_batched_tokens: BATCHED_ENGINE.max_num_batched_tokens,
            ..BatchedConfig::physics(p).ok()?
        }),
    }
}

/// What a batched run deploys beside the engine (docs/MODEL.md, "Prefill/decode
/// disaggregation", "The KV offload tier").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deploy {
    /// Every pod aggregated, GPU KV only.
    Aggregated,
    /// [`PD_PREFILL_PODS`] prefill pods, the others decode, the default decider and link.
    Pd,
    /// A CPU tier of [`CPU_TIER_BLOCKS`] blocks per pod, default PCIe link.
    Tier,
}

/// The prefill pool of the P/D run.
pub const PD_PREFILL_PODS: u32 = 1;
/// CPU-tier blocks per pod of the tier run.
pub const CPU_TIER_BLOCKS: usize = 512;

/// The engine of a batched run: `cost`'s, with `deploy`'s features.
pub fn deploy_engine(cost: BatchedCost, deploy: Deploy) -> Option<BatchedConfig> {
    let mut e = batched_engine(cost)?;
    e.offload.kv_bytes_per_token = e.profile_kv_bytes_per_token();
    match deploy {
        Deploy::Aggregated => {}
        Deploy::Pd => e.pd = Some(PdConfig::new(PD_PREFILL_PODS, BATCHED_CAPACITY_BLOCKS)),
        Deploy::Tier => e.offload.cpu_capacity = CPU_TIER_BLOCKS as u32,
    }
    Some(e)
}

/// The batched runs, in report order: (group name, router, step cost, deployment).
pub const BATCHED_RUNS: [(&str, RouterKind, BatchedCost, Deploy); 5] = [
    ("batched-round-robin", RouterKind::RoundRobin, BatchedCost::Linear, Deploy::Aggregated),
    ("batched-prefix-aware", RouterKind::PrefixAware, BatchedCost::Linear, Deploy::Aggregated),
    (
        "batched-physics-prefix-aware",
        RouterKind::PrefixAware,
        BatchedCost::Physics(PhysicsProfile::Llama31_8bH100Tp1),
        Deploy::Aggregated,
    ),
    ("batched-pd-prefix-aware", RouterKind::PrefixAware, BatchedCost::Linear, Deploy::Pd),
    ("batched-tier-prefix-aware", RouterKind::PrefixAware, BatchedCost::Linear, Deploy::Tier),
];

/// Length of [`Storage::slots`].
pub const SLOTS_LEN: usize = PODS * CAPACITY_BLOCKS;
/// Length of [`Storage::tables`].
pub const TABLES_LEN: usize = PODS * LruPod::table_len(CAPACITY_BLOCKS);
/// Length of [`Storage::queues`].
pub const QUEUES_LEN: usize = PODS * QUEUE_PER_POD;
/// Length of [`Storage::index`].
pub const INDEX_LEN: usize = BlockIndex::table_len(PODS * CAPACITY_BLOCKS);
/// Length of [`Storage::pending`].
pub const PENDING_LEN: usize = PENDING;
/// Length of [`Storage::pending_table`].
pub const PENDING_TABLE_LEN: usize = PendingEvicts::table_len(PENDING);
/// Length of [`Storage::tokens`].
pub const TOKENS_LEN: usize = MAX_PROMPT_TOKENS;
/// Length of [`Storage::zipf_cdf`].
pub const ZIPF_CDF_LEN: usize = TENANTS as usize;
/// Length of [`Storage::latencies`].
pub const LATENCIES_LEN: usize = REQUESTS as usize;
/// Length of [`Storage::histograms`].
pub const HISTOGRAMS_LEN: usize = RUNS.len();
/// Length of [`Storage::kv_blocks`].
pub const KV_BLOCKS_LEN: usize = PODS * BATCHED_CAPACITY_BLOCKS;
/// Length of [`Storage::kv_tables`].
pub const KV_TABLES_LEN: usize = PODS * BatchedEngine::table_len(BATCHED_CAPACITY_BLOCKS);
/// Length of [`Storage::engine_requests`] and [`Storage::engine_waiting`].
pub const ENGINE_REQUESTS_LEN: usize = PODS * BATCHED_REQUESTS_PER_POD;
/// Length of [`Storage::engine_running`].
pub const ENGINE_RUNNING_LEN: usize = PODS * BATCHED_ENGINE.max_num_seqs as usize;
/// Length of [`Storage::cpu_slots`] (the tier run's CPU tiers).
pub const CPU_SLOTS_LEN: usize = PODS * CPU_TIER_BLOCKS;
/// Length of [`Storage::cpu_tables`].
pub const CPU_TABLES_LEN: usize = PODS * LruPod::table_len(CPU_TIER_BLOCKS);
/// KV transfers, joins and deliveries in flight in the P/D run (the requests all pods track).
pub const PD_IN_FLIGHT: usize = PODS * BATCHED_REQUESTS_PER_POD;
/// Length of [`Storage::pd_transfers`]: each decode pod's link holds as many transfers as the
/// pod tracks requests.
pub const PD_TRANSFERS_LEN: usize = (PODS - PD_PREFILL_PODS as usize) * BATCHED_REQUESTS_PER_POD;
/// Length of [`Storage::engine_keys`].
pub const ENGINE_KEYS_LEN: usize = PODS * BATCHED_KEYS_PER_POD;
// The batched runs keep TTFT and E2E per request in the two halves of `latencies`.
const _: () = assert!(2 * BATCHED_REQUESTS as usize <= LATENCIES_LEN);

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
    /// The generator's prompt buffer.
    pub tokens: &'a mut [u32],
    /// The generator's Zipf table.
    pub zipf_cdf: &'a mut [u64],
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
    /// Memory of the mock NOR flash, [`FLASH_LOG_BYTES`] long.
    pub flash: &'a mut [u8],
    /// The batched engines' KV blocks.
    pub kv_blocks: &'a mut [KvBlock],
    /// The batched engines' cache maps.
    pub kv_tables: &'a mut [u32],
    /// The batched engines' request slots.
    pub engine_requests: &'a mut [ReqSlot],
    /// The batched engines' waiting rings.
    pub engine_waiting: &'a mut [u32],
    /// The batched engines' running sets.
    pub engine_running: &'a mut [u32],
    /// The batched engines' prompt keys in flight.
    pub engine_keys: &'a mut [u64],
    /// The tier run's CPU-tier slots.
    pub cpu_slots: &'a mut [Slot],
    /// The tier run's CPU-tier key tables.
    pub cpu_tables: &'a mut [u32],
    /// The P/D run's link slots.
    pub pd_transfers: &'a mut [Transfer],
    /// The P/D run's joins waiting.
    pub pd_joins: &'a mut [Join],
    /// The P/D run's deliveries waiting.
    pub pd_deliveries: &'a mut [Delivery],
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
        + TOKENS_LEN * size_of::<u32>()
        + ZIPF_CDF_LEN * size_of::<u64>()
        + LATENCIES_LEN * size_of::<u64>()
        + HISTOGRAMS_LEN * size_of::<LogHistogram>()
        + RUNNER_LOG_BYTES
        + size_of::<SimWorld<WORLD_CALLS>>()
        + FLASH_LOG_BYTES
        + KV_BLOCKS_LEN * size_of::<KvBlock>()
        + KV_TABLES_LEN * size_of::<u32>()
        + ENGINE_REQUESTS_LEN * (size_of::<ReqSlot>() + size_of::<u32>())
        + ENGINE_RUNNING_LEN * size_of::<u32>()
        + ENGINE_KEYS_LEN * size_of::<u64>()
        + CPU_SLOTS_LEN * size_of::<Slot>()
        + CPU_TABLES_LEN * size_of::<u32>()
        + PD_TRANSFERS_LEN * size_of::<Transfer>()
        + PD_IN_FLIGHT * (size_of::<Join>() + size_of::<Delivery>())
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
    /// The flash log broke a guarantee across a power cut.
    PowerCut(PowerCutViolation),
    /// The scenario itself did not hold (a workload ran short, an engine run broke an invariant).
    Scenario(&'static str),
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
            Cause::PowerCut(v) => write!(f, "flash log after a power cut: {v:?}"),
            Cause::Scenario(what) => write!(f, "scenario: {what}"),
        }
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
        u64::from(o.cpu_hit_blocks),
        u64::from(o.believed_match_blocks),
        u64::from(o.queue_len),
        o.hit_tokens,
        o.prefill_tokens,
        o.arrival_ns,
        o.start_ns,
        o.finish_ns,
        u64::from(o.active_pods),
    ] {
        d = mix(d, v);
    }
    d
}

/// Where a batched run's completion digest starts.
pub fn completion_digest_seed() -> u64 {
    mix(SEED, 0xba7c)
}

/// Folds every field of a batched engine's completion into a digest (the host test folds the host
/// CLI's completions with it too).
pub fn mix_completion(mut d: u64, c: &Completion) -> u64 {
    for v in [
        c.request,
        u64::from(c.pod),
        c.arrival_ns,
        c.first_token_ns,
        c.finish_ns,
        c.input_tokens,
        c.output_tokens,
        c.hit_tokens,
        c.prefill_tokens,
        u64::from(c.preemptions),
        u64::from(c.queue_len),
    ] {
        d = mix(d, v);
    }
    // the deployment features' fields, when a run has them (the other runs' digests unchanged)
    if c.offload_hit_tokens != 0 {
        d = mix(d, c.offload_hit_tokens);
    }
    let p = &c.pd;
    if p.disaggregated() {
        for v in [
            u64::from(p.prefill_pod),
            u64::from(p.prefill_queue_len),
            p.decode_hit_tokens,
            p.transfer_bytes,
            p.transfer_ns,
        ] {
            d = mix(d, v);
        }
    }
    d
}

/// A generator at request 0 of [`WORKLOAD`] over the storage's Zipf table.
fn workload<'b>(cdf: &'b mut [u64]) -> Result<Workload<'b>, Error> {
    workload_of(WORKLOAD, cdf)
}

/// A generator at request 0 of `spec` over the storage's Zipf table.
fn workload_of(spec: WorkloadSpec, cdf: &mut [u64]) -> Result<Workload<'_>, Error> {
    let len = Workload::cdf_len(&spec);
    let got = cdf.len();
    Workload::new(spec, cdf.get_mut(..len).ok_or(Error::BufferSize { buffer: Buffer::ZipfCdf, expected: len, got })?)
}

/// Sends the workload's own figures (independent of the fleet): request, token and block totals,
/// requests per tenant, the last arrival and a digest of every block key.
fn workload_summary(st: &mut Storage<'_>, sink: &mut impl Sink) -> Result<(), RunError> {
    let g = "workload";
    let fail = |request, e: Error| RunError { run: g, request, error: e.into() };
    let mut generator = workload(st.zipf_cdf).map_err(|e| fail(u32::MAX, e))?;
    let mut keys = [0u64; MAX_REQUEST_BLOCKS];
    let mut per_tenant = [0u64; TENANTS as usize];
    let (mut tokens, mut out_tokens, mut blocks, mut max_blocks, mut last_arrival) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut digest = SEED;
    let mut i = 0u32;
    while let Some(req) = generator.next_request(st.tokens).map_err(|e| fail(i, e))? {
        let prompt = st.tokens.get(..req.input_tokens as usize).unwrap_or_default();
        let n = token_keys(prompt, &mut keys).map_err(|e| fail(i, e))?;
        tokens += req.input_tokens;
        out_tokens += req.output_tokens;
        blocks += n as u64;
        max_blocks = max_blocks.max(n as u64);
        last_arrival = req.arrival_ns;
        if let Some(c) = per_tenant.get_mut(req.tenant as usize) {
            *c += 1;
        }
        digest = mix(mix(digest, req.arrival_ns), u64::from(req.tenant));
        for &k in &keys[..n] {
            digest = mix(digest, k);
        }
        i += 1;
    }
    sink.metric(g, "seed", 0, SEED);
    sink.metric(g, "requests", 0, u64::from(i));
    sink.metric(g, "input_tokens", 0, tokens);
    sink.metric(g, "output_tokens", 0, out_tokens);
    sink.metric(g, "blocks", 0, blocks);
    sink.metric(g, "max_request_blocks", 0, max_blocks);
    sink.metric(g, "last_arrival_ns", 0, last_arrival);
    for (t, &c) in per_tenant.iter().enumerate() {
        sink.metric(g, "tenant_requests", t as u32, c);
    }
    sink.metric(g, "digest", 0, digest);
    if i != REQUESTS {
        return Err(RunError {
            run: g,
            request: i,
            error: Cause::Scenario("the workload has fewer than REQUESTS requests"),
        });
    }
    Ok(())
}

/// The error of a latency storage shorter than a run's requests (sized statically: a build
/// error of the scenario, not of the core).
fn short_latencies(run: &'static str) -> RunError {
    RunError {
        run,
        request: u32::MAX,
        error: Cause::Scenario("the latency storage holds fewer values than the run's requests"),
    }
}

/// Carves `len` elements off the front of a buffer.
fn take<T>(buf: &mut [T], len: usize, name: Buffer) -> Result<&mut [T], Error> {
    let got = buf.len();
    buf.get_mut(..len).ok_or(Error::BufferSize { buffer: name, expected: len, got })
}

/// The FIFO fleet of [`RUNS`]' runs: `router`, a stale view of `stale_delay` requests, `scale`.
const fn fifo_config(router: RouterKind, stale_delay: u32, scale: Option<ScalePolicy>) -> FleetConfig {
    let engine = FifoConfig { t_prefill_ns: T_PREFILL_NS, t_decode_ns: T_DECODE_NS, ..defaults::FIFO };
    let view = ViewConfig { stale_delay, ..defaults::VIEW };
    FleetConfig {
        engine: EngineConfig::Fifo { engine, view, scale },
        ..FleetConfig::new(PODS, CAPACITY_BLOCKS, router)
    }
}

/// One run of the fleet with `router` over the whole request stream.
fn run_fleet(
    group: &'static str,
    router: RouterKind,
    stale_delay: u32,
    scale: Option<ScalePolicy>,
    st: &mut Storage<'_>,
    histogram: &mut LogHistogram,
    sink: &mut impl Sink,
) -> Result<(), RunError> {
    let setup = |e: Error| RunError { run: group, request: u32::MAX, error: e.into() };
    let cfg = fifo_config(router, stale_delay, scale);
    let l = FifoLayout::new(&cfg, QUEUE_PER_POD, PENDING).map_err(setup)?;
    let buffers = FifoBuffers {
        slots: take(st.slots, l.pods * l.slots_per_pod, Buffer::Slots).map_err(setup)?,
        tables: take(st.tables, l.pods * l.table_per_pod, Buffer::Tables).map_err(setup)?,
        queues: take(st.queues, l.pods * l.queue_per_pod, Buffer::Queues).map_err(setup)?,
        index: take(st.index, l.index, Buffer::Index).map_err(setup)?,
        pending: take(st.pending, l.pending, Buffer::Pending).map_err(setup)?,
        pending_table: take(st.pending_table, l.pending_table, Buffer::PendingTable).map_err(setup)?,
        cpu_slots: &mut [],
        cpu_tables: &mut [],
    };
    let mut fleet = FifoFleet::new(cfg, buffers).map_err(setup)?;
    if !histogram.is_empty() {
        return Err(RunError {
            run: group,
            request: u32::MAX,
            error: Cause::Scenario("the histogram must start empty"),
        });
    }
    let latencies = st.latencies.get_mut(..REQUESTS as usize).ok_or(short_latencies(group))?;

    let mut generator = workload(st.zipf_cdf).map_err(setup)?;
    let mut keys = [0u64; MAX_REQUEST_BLOCKS];
    let mut digest = mix(SEED, stale_delay.into());
    let (mut max_latency, mut max_queue, mut total_hit_blocks) = (0u64, 0u32, 0u64);
    for (i, latency) in (0..REQUESTS).zip(latencies.iter_mut()) {
        let fail = |e: Error| RunError { run: group, request: i, error: e.into() };
        let Some(req) = generator.next_request(st.tokens).map_err(fail)? else {
            return Err(RunError {
                run: group,
                request: i,
                error: Cause::Scenario("the workload has fewer than REQUESTS requests"),
            });
        };
        let prompt = st.tokens.get(..req.input_tokens as usize).unwrap_or_default();
        let n = token_keys(prompt, &mut keys).map_err(fail)?;
        let out = fleet
            .dispatch(
                &Request {
                    arrival_ns: req.arrival_ns,
                    input_tokens: req.input_tokens,
                    output_tokens: req.output_tokens,
                    keys: &keys[..n],
                },
                &mut (),
            )
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
        ("scale_outs", t.scale_outs),
        ("scale_ins", t.scale_ins),
        ("pod_ns", fleet.pod_ns(t.makespan_ns)),
        ("new_pod_requests", t.new_pod_requests),
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

/// What a batched run's engines report, folded as it arrives (no buffer but TTFT and E2E).
struct BatchedEvents<'b> {
    /// TTFT per request (by request index), 0 until it finishes.
    ttft: &'b mut [u64],
    /// E2E per request.
    e2e: &'b mut [u64],
    /// Digest of every completion, in completion order.
    digest: u64,
    completed: u64,
    output_tokens: u64,
    hit_tokens: u64,
    prefill_tokens: u64,
    /// Digest of the inter-token latency reports (value, count), in order.
    itl_digest: u64,
    itl_samples: u64,
    itl_ns_sum: u64,
    itl_ns_max: u64,
    /// A request finished twice, out of range, or a sum overflowed.
    broken: bool,
}

impl EngineEvents for BatchedEvents<'_> {
    fn completed(&mut self, c: &Completion) {
        self.digest = mix_completion(self.digest, c);
        self.completed += 1;
        self.output_tokens += c.output_tokens;
        self.hit_tokens += c.hit_tokens;
        self.prefill_tokens += c.prefill_tokens;
        match (self.ttft.get_mut(c.request as usize), self.e2e.get_mut(c.request as usize)) {
            // TTFT >= one step >= 1 ns: 0 means "not finished yet".
            (Some(t), Some(e)) if *t == 0 && c.ttft_ns() > 0 => {
                *t = c.ttft_ns();
                *e = c.e2e_ns();
            }
            _ => self.broken = true,
        }
    }

    fn itl(&mut self, itl_ns: u64, count: u64) {
        self.itl_digest = mix(mix(self.itl_digest, itl_ns), count);
        self.itl_samples += count;
        match itl_ns.checked_mul(count).and_then(|v| v.checked_add(self.itl_ns_sum)) {
            Some(sum) => self.itl_ns_sum = sum,
            None => self.broken = true,
        }
        if count > 0 {
            self.itl_ns_max = self.itl_ns_max.max(itl_ns);
        }
    }
}

/// One run of the batched engine (docs/MODEL.md, "The batched engine") with `router` over the
/// first [`BATCHED_REQUESTS`] requests of the workload: every counter of every pod's engine,
/// exact TTFT and E2E percentiles (ns), the inter-token latencies' count, sum, maximum and digest,
/// and digests of every dispatch and every completion. Checks that every request finishes
/// exactly once and that the tokens produced are the output tokens asked for (O' = max(O, 1)).
fn run_batched_one(
    (group, router, cost, deploy): (&'static str, RouterKind, BatchedCost, Deploy),
    st: &mut Storage<'_>,
    sink: &mut impl Sink,
) -> Result<(), RunError> {
    let setup = |e: Error| RunError { run: group, request: u32::MAX, error: e.into() };
    let engine = deploy_engine(cost, deploy).ok_or(RunError {
        run: group,
        request: u32::MAX,
        error: Cause::Scenario("the physics profile is invalid"),
    })?;
    let cfg = FleetConfig::batched(PODS, BATCHED_CAPACITY_BLOCKS, router, engine);
    let l = BatchedLayout::new(&cfg, BATCHED_REQUESTS_PER_POD, BATCHED_KEYS_PER_POD).map_err(setup)?;
    let buffers = BatchedBuffers {
        blocks: take(st.kv_blocks, l.blocks_len(), Buffer::EngineBlocks).map_err(setup)?,
        tables: take(st.kv_tables, l.tables_len(), Buffer::EngineTables).map_err(setup)?,
        requests: take(st.engine_requests, l.pods * l.requests_per_pod, Buffer::EngineRequests).map_err(setup)?,
        waiting: take(st.engine_waiting, l.pods * l.requests_per_pod, Buffer::EngineWaiting).map_err(setup)?,
        running: take(st.engine_running, l.pods * l.running_per_pod, Buffer::EngineRunning).map_err(setup)?,
        keys: take(st.engine_keys, l.pods * l.keys_per_pod, Buffer::EngineKeys).map_err(setup)?,
        // not kept on the firmware (its RAM): the releases look their hit keys up and walk the own chains
        key_blocks: &mut [],
        cpu_slots: take(st.cpu_slots, l.pods * l.cpu_slots_per_pod, Buffer::CpuSlots).map_err(setup)?,
        cpu_tables: take(st.cpu_tables, l.pods * l.cpu_table_per_pod, Buffer::CpuTables).map_err(setup)?,
        pd: PdBuffers {
            transfers: take(st.pd_transfers, l.pd_transfers_len(), Buffer::PdLinks).map_err(setup)?,
            joins: take(st.pd_joins, l.pd_in_flight, Buffer::PdLinks).map_err(setup)?,
            deliveries: take(st.pd_deliveries, l.pd_in_flight, Buffer::PdLinks).map_err(setup)?,
        },
        // not autoscaled: no WVA state (l.scale_len() is 0)
        scale: &mut [],
    };
    let mut fleet = BatchedFleet::new(cfg, buffers).map_err(setup)?;
    let n = BATCHED_REQUESTS as usize;
    let (ttft, rest) = st.latencies.split_at_mut(n.min(st.latencies.len()));
    let e2e = rest.get_mut(..n).ok_or(short_latencies(group))?;
    ttft.fill(0);
    e2e.fill(0);
    let mut ev = BatchedEvents {
        ttft,
        e2e,
        digest: completion_digest_seed(),
        completed: 0,
        output_tokens: 0,
        hit_tokens: 0,
        prefill_tokens: 0,
        itl_digest: mix(SEED, 0x171),
        itl_samples: 0,
        itl_ns_sum: 0,
        itl_ns_max: 0,
        broken: false,
    };

    let mut generator = workload_of(BATCHED_WORKLOAD, st.zipf_cdf).map_err(setup)?;
    let mut keys = [0u64; MAX_REQUEST_BLOCKS];
    let mut dispatch_digest = mix(SEED, 0xd15);
    let (mut asked_output, mut max_queue, mut believed) = (0u64, 0u32, 0u64);
    for i in 0..BATCHED_REQUESTS {
        let fail = |e: Error| RunError { run: group, request: i, error: e.into() };
        let Some(req) = generator.next_request(st.tokens).map_err(fail)? else {
            return Err(RunError {
                run: group,
                request: i,
                error: Cause::Scenario("the workload has fewer than BATCHED_REQUESTS requests"),
            });
        };
        let prompt = st.tokens.get(..req.input_tokens as usize).unwrap_or_default();
        let k = token_keys(prompt, &mut keys).map_err(fail)?;
        let d = fleet
            .dispatch(
                &Request {
                    arrival_ns: req.arrival_ns,
                    input_tokens: req.input_tokens,
                    output_tokens: req.output_tokens,
                    keys: &keys[..k],
                },
                &mut ev,
            )
            .map_err(fail)?;
        dispatch_digest = mix(
            mix(mix(dispatch_digest, u64::from(d.pod)), u64::from(d.queue_len)),
            u64::from(d.believed_match_blocks),
        );
        asked_output += req.output_tokens.max(1);
        max_queue = max_queue.max(d.queue_len);
        believed += u64::from(d.believed_match_blocks);
    }
    fleet.finish(&mut ev).map_err(|e| RunError { run: group, request: BATCHED_REQUESTS, error: e.into() })?;

    let broken = |what: &'static str| RunError { run: group, request: u32::MAX, error: Cause::Scenario(what) };
    if ev.broken || ev.completed != u64::from(BATCHED_REQUESTS) {
        return Err(broken("completions: every request finishes exactly once"));
    }
    if ev.output_tokens != asked_output {
        return Err(broken("output tokens: tokens produced = max(output_length, 1) summed"));
    }
    let prefill_pods = engine.pd.map_or(0, |x| x.prefill_pods as usize);
    emit_batched(group, &fleet, &mut ev, (max_queue, believed, dispatch_digest, prefill_pods), sink)
}

/// Checks the engines' counters against the completions, then writes every metric of one
/// batched run: the totals, each pod's counters, the percentiles and the digests. `dispatched`:
/// the longest queue seen at a dispatch, the believed match blocks summed, the dispatch digest,
/// the prefill pods (P/D; 0 without it).
fn emit_batched(
    group: &'static str,
    fleet: &BatchedFleet<'_>,
    ev: &mut BatchedEvents<'_>,
    (max_queue, believed, dispatch_digest, prefill_pods): (u32, u64, u64, usize),
    sink: &mut impl Sink,
) -> Result<(), RunError> {
    let broken = |what: &'static str| RunError { run: group, request: u32::MAX, error: Cause::Scenario(what) };
    let mut total = BatchedStats::default();
    let mut per_pod = [BatchedStats::default(); PODS];
    for (p, s) in per_pod.iter_mut().enumerate() {
        *s = fleet.pod_stats(p).copied().unwrap_or_default();
        // P/D: a prefill pod's requests are prefill jobs (each request counts once, on its
        // decode pod)
        if p >= prefill_pods {
            total.requests += s.requests;
        }
        total.finished += s.finished;
        total.input_tokens += s.input_tokens;
        total.hit_tokens += s.hit_tokens;
        total.prefill_tokens += s.prefill_tokens;
        total.output_tokens += s.output_tokens;
        total.steps += s.steps;
        total.preemptions += s.preemptions;
        total.kv_peak_blocks = total.kv_peak_blocks.max(s.kv_peak_blocks);
    }
    if total.output_tokens != ev.output_tokens
        || total.finished != ev.completed
        || total.hit_tokens != ev.hit_tokens
        || total.prefill_tokens != ev.prefill_tokens
    {
        return Err(broken("engine counters vs completions"));
    }
    let u64_of = |v: u128, what: &'static str| u64::try_from(v).map_err(|_| broken(what));
    for (name, v) in [
        ("requests", total.requests),
        ("finished", total.finished),
        ("input_tokens", total.input_tokens),
        ("output_tokens", total.output_tokens),
        ("hit_tokens", total.hit_tokens),
        ("prefill_tokens", total.prefill_tokens),
        ("steps", total.steps),
        ("preemptions", total.preemptions),
        ("kv_peak_blocks", u64::from(total.kv_peak_blocks)),
        ("makespan_ns", fleet.makespan_ns()),
        ("max_queue_len", u64::from(max_queue)),
        ("believed_match_blocks", believed),
        ("itl_samples", ev.itl_samples),
        ("itl_ns_sum", ev.itl_ns_sum),
        ("itl_ns_max", ev.itl_ns_max),
    ] {
        sink.metric(group, name, 0, v);
    }
    for (p, s) in per_pod.iter().enumerate() {
        let idx = p as u32;
        sink.metric(group, "pod_requests", idx, s.requests);
        sink.metric(group, "pod_hit_tokens", idx, s.hit_tokens);
        sink.metric(group, "pod_prefill_tokens", idx, s.prefill_tokens);
        sink.metric(group, "pod_output_tokens", idx, s.output_tokens);
        sink.metric(group, "pod_steps", idx, s.steps);
        sink.metric(group, "pod_preemptions", idx, s.preemptions);
        sink.metric(group, "pod_kv_peak_blocks", idx, u64::from(s.kv_peak_blocks));
        sink.metric(group, "pod_kv_pinned_block_ns", idx, u64_of(s.kv_pinned_block_ns, "kv_pinned_block_ns")?);
        sink.metric(group, "pod_waiting_request_ns", idx, u64_of(s.waiting_request_ns, "waiting_request_ns")?);
        sink.metric(group, "pod_max_queue_len", idx, u64::from(s.max_queue_len));
        sink.metric(group, "pod_last_finish_ns", idx, s.last_finish_ns);
    }
    ev.ttft.sort_unstable();
    ev.e2e.sort_unstable();
    for (num, den) in REPORTED_PERCENTILES {
        let at = |v: &[u64]| nearest_rank_index(v.len(), num, den).map_or(0, |k| v[k]);
        sink.metric(group, "ttft_ns_pct", num as u32, at(ev.ttft));
        sink.metric(group, "e2e_ns_pct", num as u32, at(ev.e2e));
    }
    sink.metric(group, "itl_digest", 0, ev.itl_digest);
    sink.metric(group, "dispatch_digest", 0, dispatch_digest);
    sink.metric(group, "completion_digest", 0, ev.digest);
    Ok(())
}

/// The batched-engine part: every run of [`BATCHED_RUNS`].
pub fn run_batched(storage: &mut Storage<'_>, sink: &mut impl Sink) -> Result<(), RunError> {
    for run in BATCHED_RUNS {
        run_batched_one(run, storage, sink)?;
    }
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

/// Bytes of the mock NOR flash region holding the flash log.
pub const FLASH_LOG_BYTES: usize = 8 * 1024;
/// Write size of the mock NOR flash, bytes.
pub const FLASH_WRITE: usize = 4;
/// Erase page of the mock NOR flash, bytes.
pub const FLASH_ERASE: usize = 256;
/// Most records the power-cut sweep follows (the demo log has 54).
pub const MAX_TORN_RECORDS: usize = 96;

/// The flash log under power cuts: the records of a crash-free run of the demo task (read back
/// from its RAM log) go through the core's `harness::power_cut_sweep` on a `MockFlash` of
/// [`FLASH_LOG_BYTES`] (4-byte writes, 256-byte pages): a power cut after every byte offset of
/// the whole append sequence, reboot, exactly the acknowledged records back (plus at most the
/// torn one), in order and intact, then appends after recovery, and never a write over
/// non-erased bytes.
pub fn run_power_cuts(
    log: &mut [u8],
    flash: &mut [u8],
    world: &mut SimWorld<WORLD_CALLS>,
    sink: &mut impl Sink,
) -> Result<(), RunError> {
    let g = "flash-power-cut";
    let task = TaskId::try_from("firmware-demo").unwrap_or_default();
    let fail = |at: u32, error| RunError { run: g, request: at, error };
    *world = SimWorld::new();
    harness::run_with_crashes(log, &task, &DEMO_SCRIPT, world, &[], false)
        .map_err(|v| fail(u32::MAX, Cause::Runner(v)))?;
    let used = RamLog::open(log).len();
    let bytes: &[u8] = &log[..used];
    // Where each frame starts (the RAM log is whole frames back to back from offset 0).
    let mut offsets = [0usize; MAX_TORN_RECORDS];
    let (mut count, mut at) = (0usize, 0usize);
    while at < used {
        let slot = offsets.get_mut(count).ok_or(fail(count as u32, Cause::Runner(Violation::BadLog)))?;
        *slot = at;
        let (_, n) = parse(&bytes[at..]).map_err(|_| fail(count as u32, Cause::Runner(Violation::BadLog)))?;
        at += n;
        count += 1;
    }
    let count = count as u32;
    // Record i of the run; past the end, the first records again under new sequence numbers (the
    // "different records" the sweep appends after recovery).
    let make = |i: u32| -> Record {
        let k = if i < count { i } else { (i - count) % count.max(1) };
        let decoded = offsets.get(k as usize).and_then(|&o| parse(&bytes[o..]).ok());
        let mut rec = decoded.map_or_else(|| Record::new(task.clone(), i, Event::Resumed), |(r, _)| r);
        if i >= count {
            rec.seq = 1_000_000 + i;
        }
        rec
    };
    let flash_len = FLASH_LOG_BYTES.min(flash.len()) / FLASH_ERASE * FLASH_ERASE;
    let rep = harness::power_cut_sweep::<FLASH_WRITE, FLASH_ERASE, _>(&mut flash[..flash_len], count, make);
    sink.metric(g, "records", 0, u64::from(count));
    sink.metric(g, "bytes_written", 0, u64::from(rep.bytes));
    sink.metric(g, "cuts", 0, u64::from(rep.cuts));
    sink.metric(g, "violations", 0, u64::from(rep.violations));
    if let Some((at, v)) = rep.first_violation {
        return Err(fail(at, Cause::PowerCut(v)));
    }
    if rep.cuts != rep.bytes + 1 || rep.violations != 0 {
        return Err(fail(u32::MAX, Cause::Runner(Violation::BadLog)));
    }
    Ok(())
}

/// The fleet part: the workload summary, then every run of [`RUNS`].
pub fn run_fleets(storage: &mut Storage<'_>, sink: &mut impl Sink) -> Result<(), RunError> {
    workload_summary(storage, sink)?;
    let histograms = core::mem::take(&mut storage.histograms);
    if histograms.len() < RUNS.len() {
        let error = Cause::Scenario("fewer histograms than RUNS");
        return Err(RunError { run: "setup", request: u32::MAX, error });
    }
    for ((group, router, stale, scale), histogram) in RUNS.into_iter().zip(histograms.iter_mut()) {
        run_fleet(group, router, stale, scale, storage, histogram, sink)?;
    }
    storage.histograms = histograms;
    Ok(())
}

/// Runs the whole scenario, sending every metric to `sink`: [`run_fleets`], [`run_batched`], [`run_runner`], then
/// [`run_power_cuts`] (the firmware calls them itself, to measure the stack of each).
pub fn run(storage: &mut Storage<'_>, sink: &mut impl Sink) -> Result<(), RunError> {
    run_fleets(storage, sink)?;
    run_batched(storage, sink)?;
    run_runner(storage.runner_log, storage.world, sink)?;
    run_power_cuts(storage.runner_log, storage.flash, storage.world, sink)
}
