//! The batched engine of one pod: vLLM's iteration-level scheduler (waiting queue, running list,
//! token budget, chunked prefill, prefix hit at admission, a KV block pool with reference counts
//! and an LRU free queue, preemption by recompute); each step's time from the cost model
//! ([`crate::fleet::cost`]) in integer ns.
//!
//! docs/MODEL.md, "The batched engine", is the specification; this file follows it rule by rule.
//! Every buffer is the caller's ([`crate::fleet::sim::batched::BatchedLayout`] gives the lengths).

use super::groups::PoolGroups;
use super::offload::Offload;
use super::pd::{PdConfig, PdOutcome};
use super::{Completion, Engine, EngineEvents, Request, Routed};
use crate::fleet::base::error::{Buffer, Error, Field, Invariant, Limit, Quantity, RequestField};
use crate::fleet::base::limits::{
    BLOCK_TOKENS, MAX_BATCHED_TOKENS, MAX_NUM_SEQS, MAX_OUTPUT_TOKENS, MAX_POD_BLOCKS, quoting,
};
use crate::fleet::base::load::PodLoad;
use crate::fleet::base::mask::WORD_PODS;
use crate::fleet::cache::CacheEvents;
use crate::fleet::cache::lru::{LruPod, Slot};
use crate::fleet::cache::table::{self, Probe};
use crate::fleet::cost::linear::Profile;
use crate::fleet::cost::physics::Physics;
use crate::fleet::cost::profiles::PhysicsProfile;
use crate::fleet::cost::shape::BatchShape;
use crate::fleet::cost::step::{StepCost, StepProfile, decodes_after};

/// What a request larger than one pod's KV cache is refused with ([`Error::InvalidRequest`] on
/// `input_length`). The host adds where the capacity was set (the core names no flag).
pub const OVER_KV_CAPACITY: &str =
    "input_length + output_length - 1 at most one pod's KV capacity (capacity x 16 tokens)";

/// "No block / no request" in links.
const NIL: u32 = u32::MAX;
/// Hit blocks a per-block release looks up ahead of releasing them ([`BatchedEngine::release`]).
const RELEASE_AHEAD: usize = 32;
const B: u64 = BLOCK_TOKENS as u64;

/// The batched engine's parameters (one set for every pod).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BatchedConfig {
    /// Most running requests per pod S.
    pub max_num_seqs: u32,
    /// Token budget of one step M.
    pub max_num_batched_tokens: u32,
    /// The step model and profile the cost model came from (reporting only).
    pub profile: StepProfile,
    /// The step cost model.
    pub cost: StepCost,
    /// The KV offload tier (off unless `offload.cpu_capacity` > 0).
    pub offload: Offload,
    /// Prefill/decode disaggregation (None: every pod aggregated).
    pub pd: Option<PdConfig>,
    /// Autoscaling (None: every pod routable all the time): the pod counts, interval and
    /// startup; its rule is the WVA saturation analyzer with [`Self::wva`] (docs/MODEL.md,
    /// "Autoscaling under the batched engine"; `up_milli` and `down_milli` are not read).
    pub scale: Option<crate::fleet::sim::scale::ScalePolicy>,
    /// The saturation analyzer's thresholds and peak window (read only with `scale`).
    pub wva: crate::fleet::sim::wva::WvaThresholds,
    /// Full blocks of generated tokens are cached too (vLLM v1 hashes every full block of a
    /// request's computed tokens, prompt and output alike; docs/MODEL.md, "Generated tokens"):
    /// a request may then carry keys past its prompt (floor((L + O) / 16) of them) and the
    /// engine keys its blocks up to the tokens computed. Off: only prompt blocks are keyed.
    pub cache_generated_tokens: bool,
    /// The router reads vLLM's published gauges, scraped every this many ns (0: the engine's own
    /// signals at the arrival, the default). With N > 0, `waiting` and `kv_used_blocks` of
    /// [`Engine::load`] are the values vLLM published at the end of its last step that emitted a
    /// token (`Scheduler.make_stats` after `update_from_output`, vLLM V1) as of the last scrape at
    /// a multiple of N ns (GIE v0.5.1 `refreshMetricsInterval`, 50 ms); `running` and
    /// `pending_prefill_tokens` stay the engine's own (docs/MODEL.md, "Load signals").
    pub metrics_scrape_ns: u64,
    /// vLLM's full-sequence admission gate (`scheduler_reserve_full_isl`, vLLM >= 0.19.0, where
    /// it defaults to True; docs/MODEL.md, "Admission"): a waiting or preempted request is
    /// admitted only if the blocks of its whole sequence (prompt plus tokens generated so far,
    /// less its prefix hits, plus its unreferenced hit blocks) fit the free blocks, not only its
    /// first chunk's. Off (the model's vLLM v0.11.0 rule) unless a scenario turns it on.
    pub reserve_full_isl: bool,
    /// Advance runs of identical decode steps at once (same results). Turning it off is test
    /// support, to show that it changes nothing (feature `harness`; without it the engine always
    /// fast-forwards: [`BatchedConfig::fast_forwards`]).
    #[cfg(feature = "harness")]
    pub fast_forward: bool,
    /// Allocate, key and release a request's blocks a run at a time (same results as one
    /// block at a time, less memory latency; docs/MODEL.md, "Run-length KV blocks"). Turning it
    /// off is test support: the per-block pool, the oracle (feature `harness`; without it the
    /// engine always works per run: [`BatchedConfig::block_runs`]).
    #[cfg(feature = "harness")]
    pub block_runs: bool,
}

impl BatchedConfig {
    /// vLLM's H100 API-server defaults (S = 1024, M = 8192) with `profile`'s coefficients.
    pub const fn new(profile: Profile) -> Self {
        BatchedConfig {
            max_num_seqs: 1024,
            max_num_batched_tokens: 8192,
            profile: StepProfile::Linear(profile),
            cost: StepCost::Linear(profile.coefficients()),
            offload: Offload::OFF,
            pd: None,
            scale: None,
            wva: crate::fleet::sim::wva::WvaThresholds::DEFAULT,
            cache_generated_tokens: false,
            metrics_scrape_ns: 0,
            reserve_full_isl: false,
            #[cfg(feature = "harness")]
            fast_forward: true,
            #[cfg(feature = "harness")]
            block_runs: true,
        }
    }

    /// vLLM's defaults with the physics step cost `p`, which came from `profile`.
    pub const fn with_physics(profile: StepProfile, p: Physics) -> Self {
        BatchedConfig { profile, cost: StepCost::Physics(p), ..BatchedConfig::new(Profile::Qwen3_32bH100x2) }
    }

    /// vLLM's defaults with the built-in physics profile `p` (docs/MODEL.md, "The physics step
    /// cost").
    pub fn physics(p: PhysicsProfile) -> Result<Self, crate::fleet::cost::Error> {
        Ok(Self::with_physics(StepProfile::Physics(p), p.physics()?))
    }

    /// Whether the engine advances runs of identical decode steps at once: always, unless a test
    /// (feature `harness`) turned it off.
    pub const fn fast_forwards(&self) -> bool {
        #[cfg(feature = "harness")]
        {
            self.fast_forward
        }
        #[cfg(not(feature = "harness"))]
        {
            true
        }
    }

    /// Whether a pod's cache map may be kept per trace id ([`BatchedEngine::attach_groups`];
    /// docs/MODEL.md, "Run-length KV blocks"): blocks worked a run at a time, and no offload
    /// tier, P/D, autoscaling or cached generated tokens (their keys are not a prompt's ids).
    pub fn groups_apply(&self) -> bool {
        self.block_runs()
            && !self.offload.is_on()
            && self.pd.is_none()
            && self.scale.is_none()
            && !self.cache_generated_tokens
    }

    /// Whether the engine allocates, keys and releases a request's blocks a run at a time:
    /// always, unless a test (feature `harness`) turned it off to run the per-block oracle.
    pub const fn block_runs(&self) -> bool {
        #[cfg(feature = "harness")]
        {
            self.block_runs
        }
        #[cfg(not(feature = "harness"))]
        {
            true
        }
    }

    /// Checks every field against the model's limits.
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_num_batched_tokens == 0 || self.max_num_batched_tokens > MAX_BATCHED_TOKENS {
            return Err(Error::InvalidConfig {
                field: Field::MaxNumBatchedTokens,
                expected: quoting!("between 1 and 16777216", MAX_BATCHED_TOKENS),
            });
        }
        if self.max_num_seqs == 0 || self.max_num_seqs > MAX_NUM_SEQS {
            return Err(Error::InvalidConfig {
                field: Field::MaxNumSeqs,
                expected: quoting!("between 1 and 65536", MAX_NUM_SEQS),
            });
        }
        if self.max_num_seqs > self.max_num_batched_tokens {
            return Err(Error::InvalidConfig {
                field: Field::MaxNumSeqs,
                expected: "at most max-num-batched-tokens (each running request needs a token per step)",
            });
        }
        self.offload.validate()?;
        self.cost.validate()
    }

    /// KV bytes of one token of the whole pod for the profile (docs/MODEL.md, "KV transfer"):
    /// 2 x layers x KV heads x head_dim x 2 bytes of the profile's model (bf16); a physics
    /// profile's per-GPU figure times its tensor-parallel GPUs.
    pub fn profile_kv_bytes_per_token(&self) -> u64 {
        match (self.profile, self.cost.physics()) {
            (StepProfile::Linear(Profile::Qwen3_32bH100x2), _) => 2 * 64 * 8 * 128 * 2,
            (StepProfile::Linear(_), _) => super::offload::KV_BYTES_PER_TOKEN,
            (_, Some(p)) => p.kv_bytes_per_token_gpu().saturating_mul(p.tp() as u64),
            (_, None) => super::offload::KV_BYTES_PER_TOKEN,
        }
    }
}

/// One KV block of a pod: its key when cached, its reference count and its links (free queue
/// while unreferenced; the owning request's chain while in use).
///
/// 20 bytes, 4-byte aligned (`packed(4)`; the key is read and written by value only): the C
/// blocks are the pod's hot memory (allocation, keying and release each touch one per KV block),
/// so every byte counts in cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct KvBlock {
    key: u64,
    /// Reference count in the low 31 bits (at most `max_num_seqs` <= 65,536); [`KEYED`] set
    /// while the block is in the cache map.
    rk: u32,
    /// Free queue: towards the head. NIL while referenced. (Grouped pods use no block: their
    /// pool is per group and per run, [`PoolGroups`].)
    prev: u32,
    /// Free queue: towards the tail; while in use, the owner's previous own block.
    next: u32,
}

/// The bit of [`KvBlock::rk`] set while the block holds a key in the cache map.
const KEYED: u32 = 1 << 31;

impl KvBlock {
    /// Its reference count.
    #[inline(always)]
    fn refs(&self) -> u32 {
        self.rk & !KEYED
    }
    /// True while it holds a key in the cache map.
    #[inline(always)]
    fn keyed(&self) -> bool {
        self.rk & KEYED != 0
    }
}

impl Default for KvBlock {
    fn default() -> Self {
        KvBlock { key: 0, rk: 0, prev: NIL, next: NIL }
    }
}

/// One request on a pod (a slot of the pod's request ring).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqSlot {
    id: u64,
    arrival_ns: u64,
    input: u64,
    output: u64,
    generated: u64,
    computed: u64,
    /// Absolute position of its keys in the pod's key ring.
    keys_at: u64,
    keys_len: u32,
    hit: u32,
    /// Prompt blocks below this index have been considered for caching.
    considered: u32,
    own_head: u32,
    own_len: u32,
    sched: u64,
    hit_tokens: u64,
    prefill_tokens: u64,
    first_token_ns: u64,
    last_token_ns: u64,
    preemptions: u32,
    queue_len: u32,
    admitted: bool,
    finished: bool,
    /// Offload tier: blocks below this index were stored (never reset while the request lives).
    stored_upto: u32,
    /// Offload tier: waiting for its load, which ends at `load_end_ns`.
    loading: bool,
    load_end_ns: u64,
    /// Offload tier: its first loaded block (own blocks from there were loaded).
    loaded_from: u32,
    offload_hit_tokens: u64,
    /// P/D: a prefill job (its output token is discarded, not counted).
    job: bool,
    /// P/D: routed here for decode, its KV not delivered yet.
    parked: bool,
    /// P/D: delivered, not admitted yet (admitted with c = L - 1).
    transferred: bool,
    prefill_done_ns: u64,
    pd: PdOutcome,
}

/// A pod engine's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BatchedStats {
    /// Requests routed here.
    pub requests: u64,
    /// Requests finished.
    pub finished: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of first-admission hit tokens.
    pub hit_tokens: u64,
    /// Prefill tokens computed (recompute included).
    pub prefill_tokens: u64,
    /// Output tokens produced.
    pub output_tokens: u64,
    /// Steps run.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Integral of pinned blocks over steps, block-ns.
    pub kv_pinned_block_ns: u128,
    /// Most pinned blocks during a step.
    pub kv_peak_blocks: u32,
    /// Integral of the waiting-queue length, request-ns.
    pub waiting_request_ns: u128,
    /// Longest queue_len seen at an arrival routed here.
    pub max_queue_len: u32,
    /// Last finish, ns.
    pub last_finish_ns: u64,
    /// Offload tier: sum of first-admission CPU hits, tokens.
    pub offload_hit_tokens: u64,
    /// Offload tier: loads issued (re-admissions included).
    pub offload_loads: u64,
    /// Offload tier: blocks loaded.
    pub offload_load_blocks: u64,
    /// Offload tier: keys inserted into the tier.
    pub offload_stored_blocks: u64,
    /// Requests aborted (their client gave up; [`BatchedEngine::abort`]).
    pub aborted: u64,
    /// Sum of L of the requests admitted here, at their first admission (the population of
    /// `hit_tokens` and `offload_hit_tokens`: a request aborted before its admission looked up
    /// nothing; P/D: a prefill job's L, not a transferred request's).
    pub admitted_input_tokens: u64,
}

/// One pod's buffers (see [`crate::fleet::sim::batched::BatchedLayout`]).
pub struct PodBuffers<'a> {
    /// C KV blocks.
    pub blocks: &'a mut [KvBlock],
    /// [`BatchedEngine::table_len`] cache-map entries.
    pub table: &'a mut [u32],
    /// Request slots (requests tracked at once).
    pub reqs: &'a mut [ReqSlot],
    /// The waiting ring, as long as `reqs`.
    pub waiting: &'a mut [u32],
    /// `max_num_seqs` running slots.
    pub running: &'a mut [u32],
    /// Prompt keys of the tracked requests.
    pub keys: &'a mut [u64],
    /// The blocks of the tracked requests' prompt keys, parallel to `keys` (as long), or empty:
    /// with it (and the run pool, per-block map) an admission notes the hit blocks it found and
    /// pins, an allocation the own blocks it gives at a key's position, and the release reads
    /// them back (instead of looking the hit keys up again and walking the own chain there).
    pub key_blocks: &'a mut [u32],
    /// Offload tier: C2 LRU slots (empty without a tier).
    pub cpu_slots: &'a mut [Slot],
    /// Offload tier: [`LruPod::table_len`] of C2 entries (empty without a tier).
    pub cpu_table: &'a mut [u32],
}

/// One pod's batched engine over caller buffers.
pub struct BatchedEngine<'a> {
    cfg: BatchedConfig,
    pod: u32,
    blocks: &'a mut [KvBlock],
    table: &'a mut [u32],
    shift: u32,
    /// Low bits of a cache-map entry that hold block + 1; the bits above hold the same bits of
    /// the key's hash (a tag: a probe over another key's entry rarely reads that key's block).
    slot_mask: u32,
    /// When the tag has at least log2(table length) bits, the entry's home slot is its top
    /// bits (deletion shifts entries without reading any block).
    direct: bool,
    /// The free queue's head block (grouped pods: unused, the pool's runs are the queue;
    /// [`Self::attach_groups`]).
    free_head: u32,
    /// The free queue's tail block (grouped pods: unused).
    free_tail: u32,
    /// Free (unreferenced) blocks.
    free_len: u32,
    cached: u32,
    pinned: u32,
    refs_total: u64,
    reqs: &'a mut [ReqSlot],
    req_head: u64,
    req_tail: u64,
    waiting: &'a mut [u32],
    w_head: u32,
    w_len: u32,
    running: &'a mut [u32],
    r_len: u32,
    keys: &'a mut [u64],
    /// Parallel to `keys` (empty: not kept): while request r is admitted, `key_blocks[base + j]`
    /// is its block j for j < min(hit + own_len, keys_len) ([`PodBuffers::key_blocks`]).
    key_blocks: &'a mut [u32],
    key_head: u64,
    key_tail: u64,
    next_start_ns: u64,
    last_end_ns: u64,
    last_step_finished: u32,
    /// The first invariant found broken inside a step (reported by [`Self::check`] at its end).
    broken: Option<Invariant>,
    w_since_ns: u64,
    pending_prefill: u64,
    /// Offload tier (None without one).
    cpu: Option<LruPod<'a>>,
    /// When the pod's host-to-device link is free, ns.
    pcie_free_ns: u64,
    /// The last step scheduled nothing: the pod waits for a load (or an arrival).
    waiting_for_load: bool,
    /// P/D: requests parked here (routed for decode, KV not delivered).
    parked: u32,
    /// (start, pinned blocks) of that step: its blocks count in the utilization until the next
    /// step starts.
    gap: Option<(u64, u32)>,
    /// vLLM's gauges as the router scrapes them (used with `metrics_scrape_ns` > 0).
    gauges: Gauges,
    stats: BatchedStats,
    /// The cache map kept per trace id (None: per block; [`Self::attach_groups`]).
    groups: Option<PoolGroups<'a>>,
    /// Keys whose presence in the cache map changed since the fleet last read them (the
    /// fleet's first-key index, docs/MODEL.md "The first-key index"; empty: not kept).
    key_log: &'a mut [u64],
    key_log_len: u32,
    /// More keys changed than the log holds (the fleet then re-reads the pod's map).
    key_log_over: bool,
}

/// vLLM's published (waiting, pinned blocks) and the router's scrape of them (docs/MODEL.md,
/// "Load signals"): `published` since a time at or before the last sync, `next` published at
/// `next_ns` (u64::MAX: none), `scraped` taken at the scrape tick `tick_ns`.
#[derive(Clone, Copy, Default)]
struct Gauges {
    published: (u32, u32),
    next: (u32, u32),
    next_ns: u64,
    scraped: (u32, u32),
    tick_ns: u64,
}

impl Gauges {
    const NEW: Gauges = Gauges { published: (0, 0), next: (0, 0), next_ns: u64::MAX, scraped: (0, 0), tick_ns: 0 };

    /// The scrape in force at `t_ns` with scrapes every `every_ns` (> 0): (its tick, its value).
    /// Exact for any `t_ns` at or after the last [`Self::sync`], with no step run since.
    fn at(&self, t_ns: u64, every_ns: u64) -> (u64, (u32, u32)) {
        let tick = t_ns / every_ns * every_ns;
        if tick <= self.tick_ns {
            (self.tick_ns, self.scraped)
        } else if self.next_ns <= tick {
            (tick, self.next)
        } else {
            (tick, self.published)
        }
    }

    /// Takes the scrapes up to `t_ns` (a step's start) and publishes what was due by then.
    fn sync(&mut self, t_ns: u64, every_ns: u64) {
        (self.tick_ns, self.scraped) = self.at(t_ns, every_ns);
        if self.next_ns <= t_ns {
            self.published = self.next;
            self.next_ns = u64::MAX;
        }
    }
}

/// A decode run's shape ([`BatchedEngine::decode_run`]): step k_max - 1 (from 0) is the first
/// that needs a block or finishes a request, step k_fin - 1 the first that finishes one; bit i of
/// `boundaries` is set when some running request needs a block at steps i, i + 16, i + 32, ...;
/// `base` is the run's first batch.
struct DecodeRun {
    k_max: u64,
    k_fin: u64,
    boundaries: u32,
    base: BatchShape,
}

struct TableView<'t> {
    blocks: &'t [KvBlock],
    table: &'t mut [u32],
    shift: u32,
    slot_mask: u32,
    direct: bool,
}

impl Probe for TableView<'_> {
    fn slots(&self) -> usize {
        self.table.len()
    }
    fn is_empty(&self, i: usize) -> bool {
        self.table[i] == 0
    }
    fn home_of(&self, i: usize) -> usize {
        let e = self.table[i];
        match self.direct {
            // the top log2(len) bits of the hash: (key x FIB) >> shift
            true => (e >> (self.shift - 32)) as usize,
            false => table::home(self.blocks[(e & self.slot_mask) as usize - 1].key, self.shift),
        }
    }
    fn move_entry(&mut self, from: usize, to: usize) {
        self.table[to] = self.table[from];
    }
    fn clear(&mut self, i: usize) {
        self.table[i] = 0;
    }
}

/// The first step after `done` of a decode run where some running request may take a block:
/// the next i > done with bit i mod 16 of `boundaries` set ([`BatchedEngine::decode_run`]),
/// u64::MAX when none is.
#[inline]
fn next_boundary(boundaries: u32, done: u64) -> u64 {
    let from = ((done + 1) % B) as u32;
    // the mask rotated so that bit 0 is step done + 1's
    let m = boundaries & 0xffff;
    let rot = ((m >> from) | (m << (B as u32 - from))) & 0xffff;
    if rot == 0 { u64::MAX } else { done + 1 + rot.trailing_zeros() as u64 }
}

/// ceil(tokens / 16).
#[inline]
fn blocks_for(tokens: u64) -> u64 {
    tokens.div_ceil(B)
}

impl<'a> BatchedEngine<'a> {
    /// Key-table length for a pod of `capacity` blocks (0 when it does not fit). A `const fn`, so
    /// that callers without a heap can size their statics with it.
    pub const fn table_len(capacity: usize) -> usize {
        match table::table_len_for(capacity) {
            Some(n) => n,
            None => 0,
        }
    }

    /// An idle engine with `blocks.len()` KV blocks, all free. `reqs` and `waiting` have the same
    /// length (requests tracked at once), `running` has `max_num_seqs` entries.
    pub fn new(cfg: BatchedConfig, pod: u32, bufs: PodBuffers<'a>) -> Result<Self, Error> {
        cfg.validate()?;
        let PodBuffers { blocks, table, reqs, waiting, running, keys, key_blocks, cpu_slots, cpu_table } = bufs;
        let cpu = if cfg.offload.is_on() {
            if cpu_slots.len() != cfg.offload.cpu_capacity as usize {
                return Err(Error::BufferSize {
                    buffer: Buffer::CpuSlots,
                    expected: cfg.offload.cpu_capacity as usize,
                    got: cpu_slots.len(),
                });
            }
            Some(LruPod::new(cpu_slots, cpu_table)?)
        } else {
            None
        };
        let c = blocks.len();
        if c == 0 || c > MAX_POD_BLOCKS {
            return Err(Error::InvalidConfig {
                field: Field::Capacity,
                expected: quoting!("between 1 and 4294967294 blocks", MAX_POD_BLOCKS),
            });
        }
        let tl = Self::table_len(c);
        if tl == 0 || table.len() != tl {
            return Err(Error::BufferSize { buffer: Buffer::EngineTable, expected: tl, got: table.len() });
        }
        if reqs.is_empty() || waiting.len() != reqs.len() || reqs.len() > u32::MAX as usize {
            return Err(Error::BufferSize {
                buffer: Buffer::EngineWaiting,
                expected: reqs.len().max(1),
                got: waiting.len(),
            });
        }
        if running.len() != cfg.max_num_seqs as usize {
            return Err(Error::BufferSize {
                buffer: Buffer::EngineRunning,
                expected: cfg.max_num_seqs as usize,
                got: running.len(),
            });
        }
        if keys.is_empty() {
            return Err(Error::BufferSize { buffer: Buffer::EngineKeys, expected: 1, got: 0 });
        }
        if !key_blocks.is_empty() && key_blocks.len() != keys.len() {
            return Err(Error::BufferSize {
                buffer: Buffer::EngineKeyBlocks,
                expected: keys.len(),
                got: key_blocks.len(),
            });
        }
        table.fill(0);
        let slot_bits = 32 - (c as u32).leading_zeros();
        let slot_mask = u32::MAX.checked_shr(32 - slot_bits).unwrap_or(0);
        let shift = table::shift_for(table.len());
        // home = hash >> shift = (hash >> 32) >> (shift - 32): the tag bits hold it when
        // 32 - slot_bits >= 64 - shift
        let direct = shift >= 32 && 32 - slot_bits >= 64 - shift;
        // The free queue holds every block, in index order.
        for (i, b) in blocks.iter_mut().enumerate() {
            *b = KvBlock {
                key: 0,
                rk: 0,
                prev: if i == 0 { NIL } else { i as u32 - 1 },
                next: if i + 1 == c { NIL } else { i as u32 + 1 },
            };
        }
        Ok(BatchedEngine {
            cfg,
            pod,
            shift,
            slot_mask,
            direct,
            blocks,
            table,
            free_head: 0,
            free_tail: c as u32 - 1,
            free_len: c as u32,
            cached: 0,
            pinned: 0,
            refs_total: 0,
            reqs,
            req_head: 0,
            req_tail: 0,
            waiting,
            w_head: 0,
            w_len: 0,
            running,
            r_len: 0,
            keys,
            key_blocks,
            key_head: 0,
            key_tail: 0,
            next_start_ns: 0,
            last_end_ns: 0,
            last_step_finished: 0,
            broken: None,
            w_since_ns: 0,
            pending_prefill: 0,
            cpu,
            pcie_free_ns: 0,
            waiting_for_load: false,
            parked: 0,
            gap: None,
            gauges: Gauges::NEW,
            stats: BatchedStats::default(),
            groups: None,
            key_log: &mut [],
            key_log_len: 0,
            key_log_over: false,
        })
    }

    /// This pod's configuration (its pool's, with pools).
    pub fn config(&self) -> &BatchedConfig {
        &self.cfg
    }

    /// KV capacity C, blocks.
    pub fn capacity(&self) -> usize {
        self.blocks.len()
    }

    /// True when nothing is waiting or running.
    pub fn is_idle(&self) -> bool {
        self.w_len == 0 && self.r_len == 0
    }

    /// True when `key` is in the cache map (pinned or free).
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        if let Some(g) = self.groups.as_ref() {
            // Not asked in this mode: the fleet keeps the pool per group only where the router
            // asks for leading matches. A grouped pod knows its groups, not its blocks' keys:
            // only a group's key (its sub-block 0) is answered, any other key is false.
            debug_assert!(false, "a grouped pod is asked for leading matches, not keys");
            return g.group(key).0 > 0;
        }
        self.lookup(key).is_some()
    }

    /// Keeps the KV pool per trace id of `groups.r()` blocks and per run (docs/MODEL.md,
    /// "Run-length KV blocks"; [`PoolGroups`]): the same counts, hits, evictions and free-queue
    /// order as the per-block pool at every step, the pod's blocks no longer used. Only on a new
    /// engine (nothing cached), working a request's blocks a run at a time, without an offload
    /// tier, P/D or cached generated tokens (their keys are not a prompt's ids), with a pool of
    /// its capacity; otherwise false, and nothing changes.
    pub fn attach_groups(&mut self, groups: PoolGroups<'a>) -> bool {
        let fresh = self.cached == 0 && self.is_idle() && self.parked == 0 && self.stats.requests == 0;
        if !(fresh && self.cfg.groups_apply() && groups.capacity() == self.blocks.len()) {
            return false;
        }
        // fresh: every block free and keyless, as the pool's one keyless run
        debug_assert!(self.free_len as usize == self.blocks.len());
        self.groups = Some(groups);
        true
    }

    /// Grouped pods ([`Self::attach_groups`]): group `gkey`'s (n_G, p_G), its cached sub-blocks
    /// 0 .. n_G - 1 of which 0 .. p_G - 1 are referenced ((0, 0): none cached); None on a pod
    /// whose pool is per block.
    pub fn group_state(&self, gkey: u64) -> Option<(u32, u32)> {
        self.groups.as_ref().map(|g| g.group(gkey))
    }

    /// Whether the cache map is kept per trace id ([`Self::attach_groups`]).
    pub fn is_grouped(&self) -> bool {
        self.groups.is_some()
    }

    /// Block `b`, which holds `key`, loses it (evicted at its pop from the free queue).
    #[inline(always)]
    fn uncache(&mut self, key: u64, b: u32) {
        self.map_remove(key, b);
        self.cached -= 1;
    }

    /// How [`Engine::leading_matches`] answers for `pods`: `Some(true)` through the tiers (any
    /// pod with an offload tier: pools may give some pods none, whose match is then GPU-only),
    /// `Some(false)` through the per-group maps (every pod keeps one, no tier), `None` not at
    /// all (key by key through the exact view).
    fn lead_kind(pods: &[Self]) -> Option<bool> {
        if pods.iter().any(|e| e.cpu.is_some()) {
            return Some(true);
        }
        (!pods.is_empty() && pods.iter().all(|e| e.groups.is_some())).then_some(false)
    }

    /// The longest leading run of `keys` this pod's cache map holds, per group (grouped map).
    fn grouped_match(&self, keys: &[u64]) -> u32 {
        self.groups.as_ref().map_or(0, |g| g.lead(keys).0)
    }

    // ----- cache map -----

    /// The key's tag: the bits of its hash above the block bits of an entry.
    #[inline(always)]
    fn tag(&self, key: u64) -> u32 {
        (key.wrapping_mul(table::FIB) >> 32) as u32 & !self.slot_mask
    }

    /// The block holding `key` in the cache map, or the empty position that ended the probe
    /// (where the key's entry goes when it is inserted).
    #[inline]
    fn probe(&self, key: u64) -> Result<u32, usize> {
        let mask = self.table.len() - 1;
        let tag = self.tag(key);
        let mut i = table::home(key, self.shift);
        loop {
            let e = self.table[i];
            if e == 0 {
                return Err(i);
            }
            if e & !self.slot_mask == tag {
                let b = (e & self.slot_mask) - 1;
                if self.blocks[b as usize].key == key {
                    return Ok(b);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The block holding `key` when its home entry names it, else NIL (then [`Self::lookup`]
    /// settles it): no branch on the loaded values, so that the loads of several keys overlap.
    #[inline(always)]
    fn home_block(&self, key: u64) -> u32 {
        let e = self.table[table::home(key, self.shift)];
        let b = (e & self.slot_mask).wrapping_sub(1);
        let at = (b as usize).min(self.blocks.len() - 1);
        let held = (e != 0) & (e & !self.slot_mask == self.tag(key)) & (self.blocks[at].key == key);
        if held { b } else { NIL }
    }

    #[inline]
    fn lookup(&self, key: u64) -> Option<u32> {
        self.probe(key).ok()
    }

    /// The longest leading run of `keys` the cache map holds ([`Self::contains`] key by key).
    pub fn held_run(&self, keys: &[u64]) -> u32 {
        if self.groups.is_some() {
            return keys.iter().take_while(|&&k| self.contains(k)).count() as u32;
        }
        self.run_blocks(keys, |_| {})
    }

    /// Per-block map: the longest leading run of `keys` the map holds, `each` called with the
    /// block of each key of the run in order ([`Self::lookup`] key by key). Eight keys at a
    /// time: their home entries loaded first (independent loads, so that their cache misses
    /// overlap), then each key settled from its home entry when that names its block, else by
    /// a whole probe; a key after the run's end may be looked at.
    #[inline]
    fn run_blocks(&self, keys: &[u64], mut each: impl FnMut(u32)) -> u32 {
        const LANES: usize = 8;
        let mut n = 0u32;
        for chunk in keys.chunks(LANES) {
            let mut home = [0u32; LANES];
            for (e, &k) in home.iter_mut().zip(chunk) {
                *e = self.table[table::home(k, self.shift)];
            }
            for (&e, &k) in home.iter().zip(chunk) {
                let b = (e & self.slot_mask).wrapping_sub(1);
                let b = if e != 0 && e & !self.slot_mask == self.tag(k) && self.blocks[b as usize].key == k {
                    b
                } else {
                    match self.lookup(k) {
                        Some(b) => b,
                        None => return n,
                    }
                };
                each(b);
                n += 1;
            }
        }
        n
    }

    /// Keys block `b` with `key` unless the key is cached already (its entry goes to `empty`,
    /// the end of the key's probe, when absent).
    #[inline(always)]
    fn cache_block(&mut self, b: u32, key: u64) {
        if let Err(empty) = self.probe(key) {
            self.note_key(key);
            self.blocks[b as usize].key = key;
            self.blocks[b as usize].rk |= KEYED;
            self.table[empty] = self.tag(key) | (b + 1);
            self.cached += 1;
        }
    }

    #[inline(always)]
    fn map_remove(&mut self, key: u64, b: u32) {
        self.note_key(key);
        let mask = self.table.len() - 1;
        let mut i = table::home(key, self.shift);
        loop {
            let e = self.table[i];
            if e == 0 {
                self.broken = Some(Invariant::MappedKey);
                return;
            }
            if e & self.slot_mask == b + 1 {
                break;
            }
            i = (i + 1) & mask;
        }
        let mut view = TableView {
            blocks: self.blocks,
            table: self.table,
            shift: self.shift,
            slot_mask: self.slot_mask,
            direct: self.direct,
        };
        table::remove_at(&mut view, i);
    }

    /// Logs a key that enters or leaves the cache map (for the fleet's first-key index).
    #[inline(always)]
    fn note_key(&mut self, key: u64) {
        if self.key_log.is_empty() {
            return;
        }
        match self.key_log.get_mut(self.key_log_len as usize) {
            Some(slot) => {
                *slot = key;
                self.key_log_len += 1;
            }
            None => self.key_log_over = true,
        }
    }

    /// Gives the engine a log of the keys whose presence in its cache map changes (read with
    /// [`Self::changed_keys`]); the log starts over, marked overflowed (the map may hold keys
    /// already). Only for a per-block map and a log of at least one entry (false, nothing
    /// changed, otherwise).
    pub fn set_key_log(&mut self, log: &'a mut [u64]) -> bool {
        if self.groups.is_some() || log.is_empty() {
            return false;
        }
        self.key_log = log;
        self.key_log_len = 0;
        self.key_log_over = true;
        true
    }

    /// The keys whose presence in the cache map changed since [`Self::clear_changed_keys`] (a
    /// key may be listed more than once), and whether more changed than the log holds.
    pub fn changed_keys(&self) -> (&[u64], bool) {
        (&self.key_log[..self.key_log_len as usize], self.key_log_over)
    }

    /// Empties the changed-key log.
    pub fn clear_changed_keys(&mut self) {
        self.key_log_len = 0;
        self.key_log_over = false;
    }

    // ----- free queue -----

    fn fq_push_tail(&mut self, b: u32) {
        debug_assert!(self.blocks[b as usize].refs() == 0, "only an unreferenced block is freed");
        debug_assert!(b != self.free_tail && (self.free_len as usize) < self.blocks.len(), "not already free");
        let old = self.free_tail;
        self.blocks[b as usize].prev = old;
        self.blocks[b as usize].next = NIL;
        if old == NIL {
            self.free_head = b;
        } else {
            self.blocks[old as usize].next = b;
        }
        self.free_tail = b;
        self.free_len += 1;
    }

    fn fq_unlink(&mut self, b: u32) {
        let KvBlock { prev, next, .. } = self.blocks[b as usize];
        debug_assert!(self.free_len > 0, "unlinks from a non-empty free queue");
        // LRU links: b's neighbours point back at it (or b is the queue's end).
        debug_assert!(if prev == NIL { self.free_head == b } else { self.blocks[prev as usize].next == b });
        debug_assert!(if next == NIL { self.free_tail == b } else { self.blocks[next as usize].prev == b });
        if prev == NIL {
            self.free_head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.free_tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        self.free_len -= 1;
    }

    /// Calls `each` with every free block, head first (per-block pool).
    fn each_free(&self, mut each: impl FnMut(u32)) {
        let mut b = self.free_head;
        while b != NIL {
            each(b);
            b = self.blocks[b as usize].next;
        }
    }

    /// Pops the free-queue head (evicting its key) and gives it to request slot `r`.
    fn alloc_own(&mut self, r: usize) {
        let b = self.free_head;
        debug_assert!(b != NIL);
        self.fq_unlink(b);
        if self.blocks[b as usize].keyed() {
            let key = self.blocks[b as usize].key;
            self.uncache(key, b);
        }
        // count 1, no longer keyed
        self.blocks[b as usize].rk = 1;
        self.pinned += 1;
        self.refs_total += 1;
        self.blocks[b as usize].next = self.reqs[r].own_head;
        self.reqs[r].own_head = b;
        self.reqs[r].own_len += 1;
    }

    fn unref(&mut self, b: u32) {
        let blk = &mut self.blocks[b as usize];
        debug_assert!(blk.refs() > 0);
        blk.rk -= 1;
        self.refs_total -= 1;
        if blk.refs() == 0 {
            self.pinned -= 1;
            self.fq_push_tail(b);
        }
    }

    #[inline]
    fn key_of(&self, r: usize, j: u32) -> u64 {
        let at = ((self.reqs[r].keys_at + j as u64) % self.keys.len() as u64) as usize;
        self.keys[at]
    }

    // ----- whole runs of a request's blocks (docs/MODEL.md, "Run-length KV blocks") -----
    //
    // The same operations as the per-block pool (the `*_per_block` functions, the oracle), in
    // the same order, with the same free queue and cache map after each request's run: a run of
    // own blocks is popped with one update of the queue's ends and of the counters, and a
    // request's keys are read from one slice of the key ring (no division per key).

    /// Position of request `r`'s key 0 in the key ring (its keys are contiguous there).
    #[inline]
    fn key_base(&self, r: usize) -> usize {
        (self.reqs[r].keys_at % self.keys.len() as u64) as usize
    }

    /// Gives request slot `r` `n` blocks from the free-queue head (evicting their keys).
    fn alloc_blocks(&mut self, r: usize, n: u32) {
        if !self.cfg.block_runs() {
            for _ in 0..n {
                self.alloc_own(r);
            }
            return;
        }
        if n == 0 {
            return;
        }
        debug_assert!(n <= self.free_len, "the caller checked the free blocks");
        if self.groups.is_some() {
            return self.alloc_grouped(r, n);
        }
        // pop them in queue order, each as `alloc_own` does; the free queue's links and the
        // counters are written once for the run; each block at a key's position (its index
        // below keys_len) noted there when kept
        let mut b = self.free_head;
        let mut own = self.reqs[r].own_head;
        let q = &self.reqs[r];
        let (base, at) = (self.key_base(r), (q.hit + q.own_len) as usize);
        let noted = if self.notes_blocks() { (q.keys_len as usize).saturating_sub(at).min(n as usize) } else { 0 };
        for i in 0..n as usize {
            let blk = self.blocks[b as usize];
            if blk.keyed() {
                self.uncache(blk.key, b);
            }
            self.blocks[b as usize] = KvBlock { key: blk.key, rk: 1, prev: NIL, next: own };
            if i < noted {
                self.key_blocks[base + at + i] = b;
            }
            own = b;
            b = blk.next;
        }
        self.free_head = b;
        if b == NIL {
            self.free_tail = NIL;
        } else {
            self.blocks[b as usize].prev = NIL;
        }
        self.free_len -= n;
        self.pinned += n;
        self.refs_total += n as u64;
        self.reqs[r].own_head = own;
        self.reqs[r].own_len += n;
    }

    /// [`Self::alloc_blocks`] on a grouped pod: `n` blocks from the head of the free queue of
    /// runs, whole runs at a time (the cached ones evicted from their groups' tops), become
    /// keyless own blocks of request slot `r` (a count: [`Self::keyed_own`] of them are keyed
    /// later).
    fn alloc_grouped(&mut self, r: usize, n: u32) {
        let Some(g) = self.groups.as_mut() else { return };
        match g.pop(n) {
            Some(evicted) => self.cached -= evicted,
            None => self.broken = Some(Invariant::GroupPrefix),
        }
        self.free_len -= n;
        self.pinned += n;
        self.refs_total += n as u64;
        self.reqs[r].own_len += n;
    }

    /// Grouped pods: how many of request `q`'s own blocks are keyed (its blocks hit .. hit +
    /// this - 1; kept in `own_head`, which has no owner chain to head there, NIL for none).
    #[inline(always)]
    fn keyed_own(q: &ReqSlot) -> u32 {
        if q.own_head == NIL { 0 } else { q.own_head }
    }

    /// Releases every block of request slot `r`, last block first.
    fn release(&mut self, r: usize) {
        if !self.cfg.block_runs() {
            return self.release_per_block(r);
        }
        if self.groups.is_some() {
            return self.release_grouped(r);
        }
        let q = self.reqs[r];
        let base = self.key_base(r);
        if self.notes_blocks() {
            // Its blocks from the last down, as the own chain (newest first) and then the hits
            // from the top give them: the own blocks at and above keys_len from the chain, the
            // rest as the allocations and the admission noted them ([`Self::admission_hit`]; a
            // hit block is pinned since, so still the block of its key).
            let top = q.hit + q.own_len;
            let noted = top.min(q.keys_len);
            let mut b = q.own_head;
            for _ in noted..top {
                let older = self.blocks[b as usize].next;
                self.unref(b);
                b = older;
            }
            for j in (base..base + noted as usize).rev() {
                self.unref(self.key_blocks[j]);
            }
            let q = &mut self.reqs[r];
            q.own_head = NIL;
            q.own_len = 0;
            q.hit = 0;
            return;
        }
        // The hit blocks are looked up ahead, RELEASE_AHEAD at a time from the top, where their
        // home entries settle them ([`Self::home_block`]; a release changes neither the map
        // nor a key, so a block looked up early is the one looked up late): the first batch
        // along the own chain, whose walk waits on one load at a time, the others each before
        // its batch is released. The same unrefs in the same order as the per-block pool.
        let hits = q.hit as usize;
        let mut ahead = [NIL; RELEASE_AHEAD];
        let first = hits.min(RELEASE_AHEAD);
        let mut k = 0;
        let mut b = q.own_head;
        while b != NIL {
            if k < first {
                ahead[k] = self.home_block(self.keys[base + hits - 1 - k]);
                k += 1;
            }
            let older = self.blocks[b as usize].next;
            self.unref(b);
            b = older;
        }
        for (i, a) in ahead[..first].iter_mut().enumerate().skip(k) {
            *a = self.home_block(self.keys[base + hits - 1 - i]);
        }
        let mut top = hits;
        while top > 0 {
            let n = top.min(RELEASE_AHEAD);
            for (i, &a) in ahead[..n].iter().enumerate() {
                let found = if a != NIL { Some(a) } else { self.lookup(self.keys[base + top - 1 - i]) };
                match found {
                    Some(b) => self.unref(b),
                    None => self.broken = Some(Invariant::HitBlockCached),
                }
            }
            top -= n;
            for (i, a) in ahead[..top.min(RELEASE_AHEAD)].iter_mut().enumerate() {
                *a = self.home_block(self.keys[base + top - 1 - i]);
            }
        }
        let q = &mut self.reqs[r];
        q.own_head = NIL;
        q.own_len = 0;
        q.hit = 0;
    }

    /// [`Self::release`] on a grouped pod, in the per-block pool's order (its blocks from the
    /// last down, each freed one to the free queue's tail): its keyless own blocks (the top of
    /// its blocks) as one keyless run, then per group from its last down the sub-blocks no other
    /// request holds, one run per group; one group probe per group.
    fn release_grouped(&mut self, r: usize) {
        let q = self.reqs[r];
        let base = self.key_base(r);
        let keyed = Self::keyed_own(&q);
        let Some(g) = self.groups.as_mut() else { return };
        let mut freed = q.own_len - keyed;
        if g.free_keyless(freed).is_none() {
            self.broken = Some(Invariant::GroupPrefix);
        }
        let rr = g.r();
        let mut hi = q.hit + keyed;
        while hi > 0 {
            let g0 = (hi - 1) / rr * rr;
            match g.let_go(self.keys[base + g0 as usize], hi - g0) {
                Some(k) => freed += k,
                None => {
                    self.broken = Some(Invariant::HitBlockCached);
                    break;
                }
            }
            hi = g0;
        }
        self.free_len += freed;
        self.pinned -= freed;
        self.refs_total -= (q.hit + q.own_len) as u64;
        let q = &mut self.reqs[r];
        q.own_head = NIL;
        q.own_len = 0;
        q.hit = 0;
    }

    /// The prefix hit of a request with c = 0: (h, hit blocks with reference count 0).
    fn hit_of(&self, r: usize) -> (u32, u32) {
        self.hit_noting(r, |_, _| {})
    }

    /// [`Self::hit_of`], `note(j, b)` called with the block `b` of each hit key j in order (run
    /// pool, per-block map only).
    #[inline(always)]
    fn hit_noting(&self, r: usize, mut note: impl FnMut(usize, u32)) -> (u32, u32) {
        if !self.cfg.block_runs() {
            return self.hit_of_per_block(r);
        }
        let q = &self.reqs[r];
        let n_tok = q.input + q.generated;
        let h_max = (q.keys_len as u64).min((n_tok - 1) / B) as u32;
        let base = self.key_base(r);
        let keys = &self.keys[base..base + h_max as usize];
        if let Some(g) = self.groups.as_ref() {
            return g.lead(keys);
        }
        let mut free_hits = 0;
        let mut j = 0;
        let blocks = &self.blocks;
        let hit = self.run_blocks(keys, |b| {
            note(j, b);
            j += 1;
            free_hits += u32::from(blocks[b as usize].refs() == 0)
        });
        (hit, free_hits)
    }

    /// Whether admissions note their hit blocks in `key_blocks` ([`Self::admission_hit`]) and
    /// allocations their own blocks ([`Self::alloc_blocks`]), and [`Self::pin_hits`] and
    /// [`Self::release`] read them there: the buffer given, the run pool, a per-block map.
    #[inline(always)]
    fn notes_blocks(&self) -> bool {
        !self.key_blocks.is_empty() && self.cfg.block_runs() && self.groups.is_none()
    }

    /// [`Self::hit_of`] of waiting head `y` at an admission attempt; with [`Self::notes_blocks`]
    /// the hit blocks found are written to `key_blocks` at its keys' position, where
    /// [`Self::pin_hits`] reads them if it is admitted (nothing changes the cache map or a
    /// block's key in between), and [`Self::release`] at its release (a pinned block stays
    /// in the map under its key).
    fn admission_hit(&mut self, y: usize) -> (u32, u32) {
        if !self.notes_blocks() {
            return self.hit_of(y);
        }
        let base = self.key_base(y);
        let out = core::mem::take(&mut self.key_blocks);
        let found = self.hit_noting(y, |j, b| out[base + j] = b);
        self.key_blocks = out;
        found
    }

    /// Gives the request's own full prompt blocks below floor(min(upto, L) / 16) their keys
    /// (with `cache_generated_tokens`: its full blocks below floor(upto / 16), prompt and
    /// generated, as far as it has keys).
    fn cache_prompt_blocks(&mut self, r: usize, upto_tokens: u64) {
        if !self.cfg.block_runs() {
            return self.cache_prompt_blocks_per_block(r, upto_tokens);
        }
        let q = self.reqs[r];
        let upto = if self.cfg.cache_generated_tokens { upto_tokens } else { upto_tokens.min(q.input) };
        let full = (upto / B).min(q.keys_len as u64) as u32;
        if full <= q.considered {
            return;
        }
        let base = self.key_base(r);
        if self.groups.is_some() {
            return self.cache_grouped(r, base, full);
        }
        // Own blocks cover indices hit .. hit + own_len, newest first in the chain.
        let mut idx = q.hit + q.own_len;
        let mut b = q.own_head;
        while b != NIL && idx > q.considered {
            idx -= 1;
            let older = self.blocks[b as usize].next;
            if idx < full {
                self.cache_block(b, self.keys[base + idx as usize]);
            }
            b = older;
        }
        self.reqs[r].considered = full;
    }

    /// [`Self::cache_prompt_blocks`] on a grouped pod: its own blocks from `considered` below
    /// `full` get their keys a group at a time, each extending its group's prefix (or, already
    /// cached, staying a keyless duplicate); one group probe per group.
    fn cache_grouped(&mut self, r: usize, base: usize, full: u32) {
        let q = self.reqs[r];
        let Some(g) = self.groups.as_mut() else { return };
        let rr = g.r();
        let own_end = (q.hit + q.own_len).min(full);
        let mut keyed = Self::keyed_own(&q);
        let mut j = q.considered.max(q.hit);
        while j < own_end {
            let g0 = j / rr * rr;
            let end = (g0 + rr).min(own_end);
            let gkey = self.keys[base + g0 as usize];
            let ok = if j == q.hit + keyed {
                match g.extend(gkey, j - g0, end - g0) {
                    Some(true) => {
                        keyed += end - j;
                        self.cached += end - j;
                        true
                    }
                    Some(false) => true,
                    None => false,
                }
            } else {
                // above a keyless duplicate of its own: keyless duplicates too, or (I) breaks
                g.group(gkey).0 >= end - g0
            };
            if !ok {
                self.broken = Some(Invariant::GroupPrefix);
                return;
            }
            j = end;
        }
        let q = &mut self.reqs[r];
        q.own_head = if keyed == 0 { NIL } else { keyed };
        q.considered = full;
    }

    /// Releases every block of request slot `r`, last block first.
    fn release_per_block(&mut self, r: usize) {
        let mut b = self.reqs[r].own_head;
        while b != NIL {
            let older = self.blocks[b as usize].next;
            self.unref(b);
            b = older;
        }
        for j in (0..self.reqs[r].hit).rev() {
            let key = self.key_of(r, j);
            match self.lookup(key) {
                Some(b) => self.unref(b),
                None => self.broken = Some(Invariant::HitBlockCached),
            }
        }
        let q = &mut self.reqs[r];
        q.own_head = NIL;
        q.own_len = 0;
        q.hit = 0;
    }

    /// The prefix hit of a request with c = 0: (h, hit blocks with reference count 0).
    fn hit_of_per_block(&self, r: usize) -> (u32, u32) {
        let q = &self.reqs[r];
        let n_tok = q.input + q.generated;
        let h_max = (q.keys_len as u64).min((n_tok - 1) / B) as u32;
        let mut free_hits = 0;
        for j in 0..h_max {
            match self.lookup(self.key_of(r, j)) {
                Some(b) => free_hits += u32::from(self.blocks[b as usize].refs() == 0),
                None => return (j, free_hits),
            }
        }
        (h_max, free_hits)
    }

    /// Gives the request's own full prompt blocks below floor(min(upto, L) / 16) their keys
    /// (with `cache_generated_tokens`: its full blocks below floor(upto / 16), prompt and
    /// generated, as far as it has keys).
    fn cache_prompt_blocks_per_block(&mut self, r: usize, upto_tokens: u64) {
        let q = self.reqs[r];
        let upto = if self.cfg.cache_generated_tokens { upto_tokens } else { upto_tokens.min(q.input) };
        let full = (upto / B).min(q.keys_len as u64) as u32;
        if full <= q.considered {
            return;
        }
        // Own blocks cover indices hit .. hit + own_len, newest first in the chain.
        let mut idx = q.hit + q.own_len;
        let mut b = q.own_head;
        while b != NIL && idx > q.considered {
            idx -= 1;
            let older = self.blocks[b as usize].next;
            if idx < full {
                let key = self.key_of(r, idx);
                self.cache_block(b, key);
            }
            b = older;
        }
        self.reqs[r].considered = full;
    }

    // ----- queues -----

    fn w_push_back(&mut self, r: u32) {
        let cap = self.waiting.len() as u32;
        debug_assert!(self.w_len < cap, "the waiting ring has room (enqueue checks it)");
        self.waiting[((self.w_head + self.w_len) % cap) as usize] = r;
        self.w_len += 1;
    }

    fn w_push_front(&mut self, r: u32) {
        let cap = self.waiting.len() as u32;
        debug_assert!(self.w_len < cap, "a preempted request's slot was taken from the running set");
        self.w_head = (self.w_head + cap - 1) % cap;
        self.waiting[self.w_head as usize] = r;
        self.w_len += 1;
    }

    fn w_pop_front(&mut self) -> u32 {
        debug_assert!(self.w_len > 0, "pops a non-empty waiting queue");
        let r = self.waiting[self.w_head as usize];
        self.w_head = (self.w_head + 1) % self.waiting.len() as u32;
        self.w_len -= 1;
        r
    }

    /// Adds |W| x (now - since) to the waiting integral.
    fn waiting_until(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.w_since_ns);
        self.stats.waiting_request_ns += self.w_len as u128 * dt as u128;
        self.w_since_ns = self.w_since_ns.max(now_ns);
    }

    /// Queues a request routed here at `arrival_ns` (after [`Engine::advance`] to that time).
    pub fn enqueue(
        &mut self,
        id: u64,
        arrival_ns: u64,
        input_tokens: u64,
        output_tokens: u64,
        keys: &[u64],
        queue_len: u32,
    ) -> Result<(), Error> {
        let slot = self.new_slot(id, arrival_ns, input_tokens, output_tokens, keys, queue_len)?;
        self.append_waiting(slot, arrival_ns);
        let s = &mut self.stats;
        s.requests += 1;
        s.input_tokens += input_tokens;
        s.max_queue_len = s.max_queue_len.max(queue_len);
        Ok(())
    }

    /// Appends slot `slot` to W at `t_ns` (an arrival, or a P/D delivery).
    fn append_waiting(&mut self, slot: usize, t_ns: u64) {
        if self.is_idle() {
            self.next_start_ns = t_ns.max(self.last_end_ns);
        } else if self.waiting_for_load && t_ns < self.next_start_ns {
            // an arrival wakes a pod waiting for a load (docs/MODEL.md, "The KV offload tier")
            self.next_start_ns = t_ns;
        }
        self.waiting_until(t_ns);
        self.w_push_back(slot as u32);
        self.pending_prefill += self.reqs[slot].input;
    }

    /// Checks a request and gives it a slot (and its keys a place in the key ring).
    fn new_slot(
        &mut self,
        id: u64,
        arrival_ns: u64,
        input_tokens: u64,
        output_tokens: u64,
        keys: &[u64],
        queue_len: u32,
    ) -> Result<usize, Error> {
        if input_tokens == 0 {
            return Err(Error::InvalidRequest { field: RequestField::InputLength, expected: "at least 1 token" });
        }
        let output = output_tokens.max(1);
        if output > MAX_OUTPUT_TOKENS {
            return Err(Error::InvalidRequest {
                field: RequestField::OutputLength,
                expected: quoting!("at most 16777216 tokens", MAX_OUTPUT_TOKENS),
            });
        }
        let need_blocks = blocks_for(input_tokens + output - 1);
        if need_blocks > self.blocks.len() as u64 {
            return Err(Error::InvalidRequest { field: RequestField::InputLength, expected: OVER_KV_CAPACITY });
        }
        let cap = self.reqs.len() as u64;
        if self.req_head - self.req_tail == cap {
            return Err(Error::CapacityExceeded { limit: Limit::RequestsPerPod, capacity: cap as usize });
        }
        // Keys: a contiguous range of the key ring.
        let klen = self.keys.len() as u64;
        let m = keys.len() as u64;
        if self.req_head == self.req_tail {
            self.key_head = 0;
            self.key_tail = 0;
        }
        let mut start = self.key_head;
        if start % klen + m > klen {
            start = start.div_ceil(klen) * klen;
        }
        if start + m - self.key_tail > klen {
            return Err(Error::CapacityExceeded { limit: Limit::KeysPerPod, capacity: klen as usize });
        }
        let at = (start % klen) as usize;
        let ring = &mut self.keys[at..at + keys.len()];
        match self.groups.as_ref().map(|g| g.r() as usize) {
            // A grouped pod reads a request's keys only at the multiples of R (each group's key:
            // `PoolGroups::lead` and `pin`, `cache_grouped`, `release_grouped`), so only those
            // are written; the ring keeps its layout (the same positions, room and reclaiming).
            Some(r) if r > 1 => {
                for (slot, &key) in ring.iter_mut().zip(keys).step_by(r) {
                    *slot = key;
                }
            }
            _ => ring.copy_from_slice(keys),
        }
        self.key_head = start + m;
        let slot = (self.req_head % cap) as usize;
        self.reqs[slot] = ReqSlot {
            id,
            arrival_ns,
            input: input_tokens,
            output,
            keys_at: start,
            keys_len: keys.len() as u32,
            own_head: NIL,
            queue_len,
            ..ReqSlot::default()
        };
        self.req_head += 1;
        Ok(slot)
    }

    fn preempt(&mut self, v: usize) {
        self.release(v);
        let q = &mut self.reqs[v];
        // Recompute: everything computed is lost; the tokens it produced stand.
        let was = q.input + q.generated - q.computed;
        q.computed = 0;
        q.loading = false;
        q.preemptions += 1;
        let now = q.input + q.generated;
        self.pending_prefill += now - if was > 1 { was } else { 0 };
        self.stats.preemptions += 1;
        self.w_push_front(v as u32);
    }

    /// Tokens `r` still has to prefill (n_tok - c when that is more than one token).
    #[inline]
    fn pending_of(q: &ReqSlot) -> u64 {
        let need = q.input + q.generated - q.computed;
        if need > 1 { need } else { 0 }
    }

    /// One step at `next_start_ns` (docs/MODEL.md, "One step"): schedule the running requests,
    /// then admit waiting ones unless a request was preempted, ask the cost model for the step's
    /// time, and apply its outputs at its end.
    fn step(&mut self, ev: &mut impl EngineEvents) -> Result<(), Error> {
        let s = self.next_start_ns;
        self.close_gap(s);
        self.waiting_until(s);
        self.sync_gauges(s);
        self.waiting_for_load = false;
        if self.cpu.is_some() {
            self.ready_loads(s);
        }
        let mut budget = self.cfg.max_num_batched_tokens as u64;
        // 1. Running requests, in order; 2. waiting requests, FCFS, only if nothing was preempted.
        if !self.schedule_running(&mut budget) {
            self.admit_waiting(&mut budget, s)?;
        }
        // 3. Step time.
        let shape = self.step_shape()?;
        if shape.tokens() == 0 {
            return self.wait_for_load(s);
        }
        let d = self.cfg.cost.step_ns(&shape)?;
        let e = s.checked_add(d).ok_or(Error::Overflow { what: Quantity::StepEndTime })?;
        let st = &mut self.stats;
        st.steps += 1;
        st.prefill_tokens += shape.prefill_tokens;
        st.kv_pinned_block_ns += self.pinned as u128 * d as u128;
        st.kv_peak_blocks = st.kv_peak_blocks.max(self.pinned);
        // 4. Outputs at e.
        let (finished, emitted) = self.outputs(e, ev);
        self.last_step_finished = finished;
        if emitted {
            self.publish_gauges(e);
        }
        self.next_start_ns = e;
        self.last_end_ns = e;
        self.check()
    }

    /// Step 1: the running requests in R order get their tokens, preempting the most recently
    /// admitted while blocks are short. Returns whether a request was preempted.
    fn schedule_running(&mut self, budget: &mut u64) -> bool {
        let mut preempted = false;
        let mut i = 0;
        while i < self.r_len as usize {
            let x = self.running[i] as usize;
            if self.reqs[x].loading {
                // a request waiting for its load is skipped (no token, no budget)
                self.reqs[x].sched = 0;
                i += 1;
                continue;
            }
            if *budget == 0 {
                break;
            }
            let q = self.reqs[x];
            let need = q.input + q.generated - q.computed;
            let n = need.min(*budget);
            let new = blocks_for(q.computed + n) - (q.hit + q.own_len) as u64;
            let mut self_preempted = false;
            while new > self.free_len as u64 {
                self.r_len -= 1;
                let v = self.running[self.r_len as usize] as usize;
                self.preempt(v);
                preempted = true;
                if v == x {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            self.alloc_blocks(x, new as u32);
            self.cache_prompt_blocks(x, q.computed + n);
            self.store(x, q.computed + n);
            self.reqs[x].sched = n;
            *budget -= n;
            i += 1;
        }
        for k in i..self.r_len as usize {
            let r = self.running[k] as usize;
            self.reqs[r].sched = 0;
        }
        preempted
    }

    /// Step 2: waiting requests in FCFS order while the budget, the running slots and the free
    /// blocks allow (strict FCFS: the first that does not fit stops admission).
    fn admit_waiting(&mut self, budget: &mut u64, s: u64) -> Result<(), Error> {
        while self.w_len > 0 && *budget > 0 && self.r_len < self.cfg.max_num_seqs {
            let y = self.waiting[self.w_head as usize] as usize;
            let (h, free_hits) = self.admission_hit(y);
            if self.reqs[y].transferred {
                if !self.admit_transferred(y, h, free_hits, budget) {
                    break;
                }
                continue;
            }
            let h2 = self.cpu_hit(y, h);
            if h2 > 0 {
                if h2 as u64 + free_hits as u64 > self.free_len as u64 || !self.full_sequence_fits(y, h, free_hits) {
                    break;
                }
                self.admit_loading(y, h, h2, s)?;
                continue;
            }
            if !self.admit_computed(y, h, free_hits, h as u64 * B, budget) {
                break;
            }
        }
        Ok(())
    }

    /// P/D: admits waiting head `y`, a transferred request with GPU hit `h` (`free_hits` of
    /// them unreferenced): its prompt's KV arrived, so c = L - 1 and the last prompt token is
    /// recomputed (docs/MODEL.md, "Decode on d"); no CPU-tier lookup. False when it does not fit.
    fn admit_transferred(&mut self, y: usize, h: u32, free_hits: u32, budget: &mut u64) -> bool {
        let c = self.reqs[y].input - 1;
        self.admit_computed(y, h, free_hits, c, budget)
    }

    /// Admits waiting head `y` with GPU hit `h` (`free_hits` of them unreferenced) and its first
    /// `c` tokens computed: pops it into R, pins the hits, allocates the blocks of this step's
    /// chunk and schedules it. A transferred request (P/D) becomes a local one; the first
    /// admission records the hit (local: `hit_tokens`; transferred: the decode pod's hit). False
    /// when the chunk's new blocks do not fit the free blocks.
    fn admit_computed(&mut self, y: usize, h: u32, free_hits: u32, c: u64, budget: &mut u64) -> bool {
        let q = self.reqs[y];
        let n = (q.input + q.generated - c).min(*budget);
        let new = blocks_for(c + n) - h as u64;
        if new + free_hits as u64 > self.free_len as u64 || !self.full_sequence_fits(y, h, free_hits) {
            return false;
        }
        self.w_pop_front();
        self.running[self.r_len as usize] = y as u32;
        self.r_len += 1;
        self.pin_hits(y, h);
        self.pending_prefill -= q.input + q.generated;
        let r = &mut self.reqs[y];
        r.hit = h;
        r.considered = h;
        r.computed = c;
        if !r.admitted {
            r.admitted = true;
            if q.transferred {
                r.pd.decode_hit_tokens = h as u64 * B;
            } else {
                r.offload_hit_tokens = 0;
                r.hit_tokens = c;
                self.stats.hit_tokens += c;
                self.stats.admitted_input_tokens += q.input;
            }
        }
        self.reqs[y].transferred = false;
        self.pending_prefill += Self::pending_of(&self.reqs[y]);
        self.alloc_blocks(y, new as u32);
        self.cache_prompt_blocks(y, c + n);
        self.store(y, c + n);
        self.reqs[y].sched = n;
        *budget -= n;
        true
    }

    /// vLLM's full-sequence admission gate (`scheduler_reserve_full_isl`; vLLM v0.19.1
    /// `kv_cache_manager.py` `can_fit_full_sequence`): true when it is off, or when the blocks of
    /// waiting head `y`'s whole sequence (L + generated tokens) less its `h` hit blocks, plus the
    /// `free_hits` of them that are unreferenced, fit the free blocks. The same counts on the
    /// per-block and the grouped pool (`hit_of` gives both).
    #[inline]
    fn full_sequence_fits(&self, y: usize, h: u32, free_hits: u32) -> bool {
        if !self.cfg.reserve_full_isl {
            return true;
        }
        let q = &self.reqs[y];
        blocks_for(q.input + q.generated) - h as u64 + free_hits as u64 <= self.free_len as u64
    }

    /// Pins the hit blocks 0..h of waiting head `y` (popped from W into R).
    fn pin_hits(&mut self, y: usize, h: u32) {
        let base = self.key_base(y);
        if let Some(g) = self.groups.as_mut() {
            // per group: one holder more, its free sub-blocks among them out of the free queue
            match g.pin(&self.keys[base..base + h as usize], h) {
                Some(taken) => {
                    self.pinned += taken;
                    self.free_len -= taken;
                }
                None => self.broken = Some(Invariant::HitBlockCached),
            }
            self.refs_total += h as u64;
            return;
        }
        // noted by the admission's lookup ([`Self::admission_hit`]) when kept
        let noted = self.notes_blocks();
        for j in 0..h as usize {
            let found = if noted { Some(self.key_blocks[base + j]) } else { self.lookup(self.keys[base + j]) };
            let Some(b) = found else {
                self.broken = Some(Invariant::HitBlockCached);
                break;
            };
            debug_assert!(!noted || self.lookup(self.keys[base + j]) == Some(b), "a noted hit block is the key's");
            if self.blocks[b as usize].refs() == 0 {
                self.fq_unlink(b);
                self.pinned += 1;
            }
            self.blocks[b as usize].rk += 1;
            self.refs_total += 1;
        }
    }

    // ----- offload tier (docs/MODEL.md, "The KV offload tier") -----

    /// Lookup at an admission attempt of waiting head `y` with GPU hit `h`: touches every prompt
    /// key the tier holds, last block first (the first ends most recent), then returns h2, the
    /// blocks h .. h + h2 - 1 the tier holds, within the GPU hit's cap h_max. 0 without a tier.
    fn cpu_hit(&mut self, y: usize, h: u32) -> u32 {
        if self.cpu.is_none() {
            return 0;
        }
        let q = self.reqs[y];
        for j in (0..q.keys_len).rev() {
            let k = self.key_of(y, j);
            if let Some(cpu) = self.cpu.as_mut()
                && cpu.contains(k)
            {
                cpu.touch(k, &mut ());
            }
        }
        let h_max = (q.keys_len as u64).min((q.input + q.generated - 1) / B) as u32;
        let mut h2 = 0;
        while h + h2 < h_max && self.cpu.as_ref().is_some_and(|c| c.contains(self.key_of(y, h + h2))) {
            h2 += 1;
        }
        h2
    }

    /// Admits waiting head `y` with GPU hit `h` and CPU hit `h2` >= 1 as a loading request: its
    /// hits pinned, h2 own blocks for the loaded KV, no token this step; its load queues on the
    /// pod's host-to-device link from `s`.
    fn admit_loading(&mut self, y: usize, h: u32, h2: u32, s: u64) -> Result<(), Error> {
        let x_ns = s
            .max(self.pcie_free_ns)
            .checked_add(self.cfg.offload.load_ns(h2 as u64)?)
            .ok_or(Error::Overflow { what: Quantity::StepEndTime })?;
        self.w_pop_front();
        self.running[self.r_len as usize] = y as u32;
        self.r_len += 1;
        self.pin_hits(y, h);
        let q = self.reqs[y];
        self.pending_prefill -= q.input + q.generated;
        let c = (h + h2) as u64 * B;
        let r = &mut self.reqs[y];
        r.hit = h;
        r.considered = h;
        r.computed = c;
        r.stored_upto = h + h2;
        r.loaded_from = h;
        r.loading = true;
        r.load_end_ns = x_ns;
        r.sched = 0;
        if !r.admitted {
            r.admitted = true;
            r.hit_tokens = h as u64 * B;
            r.offload_hit_tokens = h2 as u64 * B;
            self.stats.hit_tokens += h as u64 * B;
            self.stats.offload_hit_tokens += h2 as u64 * B;
            self.stats.admitted_input_tokens += q.input;
        }
        self.pending_prefill += Self::pending_of(&self.reqs[y]);
        self.alloc_blocks(y, h2);
        self.pcie_free_ns = x_ns;
        self.stats.offload_loads += 1;
        self.stats.offload_load_blocks += h2 as u64;
        Ok(())
    }

    /// At the start of the step at `s`: every loading request whose load ended by `s` becomes an
    /// ordinary running request, its loaded blocks keyed (each unless its key is cached already).
    fn ready_loads(&mut self, s: u64) {
        for k in 0..self.r_len as usize {
            let x = self.running[k] as usize;
            let q = self.reqs[x];
            if !q.loading || q.load_end_ns > s {
                continue;
            }
            // own blocks loaded_from .. loaded_from + own_len, newest first in the chain (as
            // `cache_prompt_blocks` walks them)
            let mut idx = q.hit + q.own_len;
            let mut b = q.own_head;
            while b != NIL && idx > q.loaded_from {
                idx -= 1;
                let older = self.blocks[b as usize].next;
                let key = self.key_of(x, idx);
                self.cache_block(b, key);
                b = older;
            }
            let r = &mut self.reqs[x];
            r.considered = (q.computed / B) as u32;
            r.loading = false;
        }
    }

    /// Store on compute: after request `r` was given tokens up to `upto_tokens`, its prompt
    /// blocks from its store index to floor(min(upto, L) / 16) go to the tier (the absent ones,
    /// in block order, each most recent); if any went, every prompt key below that the tier
    /// holds is touched, last block first.
    fn store(&mut self, r: usize, upto_tokens: u64) {
        let Some(cpu) = self.cpu.as_mut() else { return };
        let q = self.reqs[r];
        let up = (upto_tokens.min(q.input) / B).min(q.keys_len as u64) as u32;
        if up <= q.stored_upto {
            return;
        }
        let klen = self.keys.len() as u64;
        let key = |j: u32| self.keys[((q.keys_at + j as u64) % klen) as usize];
        let mut inserted = 0u64;
        for j in q.stored_upto..up {
            let k = key(j);
            if !cpu.contains(k) {
                cpu.touch(k, &mut ());
                inserted += 1;
            }
        }
        if inserted > 0 {
            for j in (0..up).rev() {
                let k = key(j);
                if cpu.contains(k) {
                    cpu.touch(k, &mut ());
                }
            }
        }
        self.stats.offload_stored_blocks += inserted;
        self.reqs[r].stored_upto = up;
    }

    /// A step that scheduled nothing (every running request loading, or preempted): no time
    /// passes; the pod waits for its earliest load (an arrival may wake it earlier).
    fn wait_for_load(&mut self, s: u64) -> Result<(), Error> {
        let mut x_min = u64::MAX;
        for k in 0..self.r_len as usize {
            let q = &self.reqs[self.running[k] as usize];
            if q.loading {
                x_min = x_min.min(q.load_end_ns);
            }
        }
        if x_min == u64::MAX || x_min <= s {
            return Err(Error::Invariant { what: Invariant::EmptyStep });
        }
        self.stats.kv_peak_blocks = self.stats.kv_peak_blocks.max(self.pinned);
        self.gap = Some((s, self.pinned));
        self.waiting_for_load = true;
        self.next_start_ns = x_min;
        self.check()
    }

    /// The pinned blocks of a waiting pod count in the utilization until its next step `s`.
    fn close_gap(&mut self, s: u64) {
        if let Some((g0, pinned)) = self.gap.take() {
            self.stats.kv_pinned_block_ns += pinned as u128 * s.saturating_sub(g0) as u128;
        }
    }

    /// An idle pod's scheduling state as a new engine's: no wait for a load, no utilization gap
    /// open, the host-to-device link free (a load still on it belonged to a request that is
    /// gone). The caller has checked that the pod holds no request.
    fn reset_idle(&mut self) {
        debug_assert!(self.is_idle() && self.parked == 0, "only an idle pod is reset");
        self.gap = None;
        self.waiting_for_load = false;
        self.pcie_free_ns = 0;
    }

    /// The tiered match of `keys` on this pod (docs/MODEL.md, "Routing with the tier"): the
    /// leading run held in the cache map or the tier, each block weighing 1000 or the tier's
    /// weight, floor(sum / 1000).
    fn tiered_match(&self, keys: &[u64]) -> u32 {
        let w_cpu = self.cfg.offload.cpu_tier_weight_milli as u64;
        let mut total = 0u64;
        for &k in keys {
            if self.contains(k) {
                total += 1000;
            } else if self.cpu.as_ref().is_some_and(|c| c.contains(k)) {
                total += w_cpu;
            } else {
                break;
            }
        }
        (total / 1000) as u32
    }

    /// The leading run of `keys` held in the cache map or the tier, unweighted.
    pub fn tier_match_blocks(&self, keys: &[u64]) -> u32 {
        keys.iter().take_while(|&&k| self.contains(k) || self.cpu.as_ref().is_some_and(|c| c.contains(k))).count()
            as u32
    }

    /// True when a request scheduled now decodes: it has produced a token and needs one more.
    #[inline]
    fn decodes(q: &ReqSlot) -> bool {
        q.generated >= 1 && q.input + q.generated - q.computed == 1
    }

    /// Step 3's input: the scheduled chunks, with n and c taken before the update (a decode is
    /// its one token over c cached; anything else, recompute included, a prefill chunk).
    #[inline(always)]
    fn step_shape(&self) -> Result<BatchShape, Error> {
        let mut s = self.cfg.cost.shape();
        for k in 0..self.r_len as usize {
            let q = &self.reqs[self.running[k] as usize];
            if q.sched > 0 {
                let r = if Self::decodes(q) { s.add_decode(q.computed) } else { s.add_prefill(q.computed, q.sched) };
                r.map_err(|_| Error::Overflow { what: Quantity::BatchShape })?;
            }
        }
        s.decode_shared = self.decode_shared(s.decode_cached);
        Ok(s)
    }

    /// [`BatchShape::decode_shared`] of a step whose decodes read `decode_cached` tokens: 16 x the
    /// extra holders of the pod's KV blocks, `sum over pinned blocks (references - 1)` = the
    /// references less the pinned blocks, at most `decode_cached`; 0 when the cost model does
    /// not price them. Every running request holding a block counts as a reader (a prefill chunk
    /// reads its cached blocks in the same step; docs/MODEL.md "Shared-prefix reads"). Constant
    /// during a decode run: nothing is admitted or released and a block taken at a boundary is
    /// its request's own (one more reference and one more pinned block); and the cap does not
    /// bind there (every holder decodes, and a shared block is a full block of its context).
    #[inline]
    fn decode_shared(&self, decode_cached: u64) -> u64 {
        if !self.cfg.cost.shares_kv_reads() {
            return 0;
        }
        let extra = self.refs_total.saturating_sub(self.pinned as u64);
        extra.saturating_mul(B).min(decode_cached)
    }

    /// The batch of the `done`-th step of a decode run: every running request decoding one
    /// token with `done` more tokens cached than now (a shift of `base`, the run's first step,
    /// when the cost model allows; else summed again).
    fn decode_run_shape(&self, base: &BatchShape, done: u64) -> Result<BatchShape, Error> {
        if let Some(s) = decodes_after(base, done)? {
            return Ok(s);
        }
        let mut s = self.cfg.cost.shape();
        for k in 0..self.r_len as usize {
            let c = self.reqs[self.running[k] as usize].computed + done;
            s.add_decode(c).map_err(|_| Error::Overflow { what: Quantity::BatchShape })?;
        }
        // the run's count, as at its first step (constant through the run)
        s.decode_shared = base.decode_shared;
        Ok(s)
    }

    /// Step 4: each scheduled request in R order computes its chunk; one whose tokens are all
    /// computed produces a token at `e`, and finishes when it has produced O'. Returns the
    /// requests finished.
    fn outputs(&mut self, e: u64, ev: &mut impl EngineEvents) -> (u32, bool) {
        let mut kept = 0usize;
        let mut finished = 0u32;
        let mut emitted = false;
        for k in 0..self.r_len as usize {
            let x = self.running[k] as usize;
            let q = self.reqs[x];
            if q.sched > 0 {
                let before = Self::pending_of(&q);
                let r = &mut self.reqs[x];
                if !Self::decodes(&q) {
                    r.prefill_tokens += q.sched;
                }
                r.computed += q.sched;
                r.sched = 0;
                if r.computed == r.input + r.generated {
                    emitted = true;
                    r.generated += 1;
                    if r.generated == 1 {
                        r.first_token_ns = e;
                    } else {
                        ev.itl(e - r.last_token_ns, 1);
                    }
                    r.last_token_ns = e;
                    self.stats.output_tokens += u64::from(!r.job);
                }
                let after = Self::pending_of(&self.reqs[x]);
                self.pending_prefill = self.pending_prefill - before + after;
                if self.reqs[x].generated == self.reqs[x].output {
                    self.finish(x, ev);
                    finished += 1;
                    continue;
                }
            }
            self.running[kept] = x as u32;
            kept += 1;
        }
        self.r_len = kept as u32;
        (finished, emitted)
    }

    /// With scraped metrics: takes the router's scrapes up to the step starting at `s` and
    /// publishes what was due by then.
    fn sync_gauges(&mut self, s: u64) {
        let every = self.cfg.metrics_scrape_ns;
        if every > 0 {
            self.gauges.sync(s, every);
        }
    }

    /// With scraped metrics: vLLM publishes (waiting, pinned blocks) after a step that emitted a
    /// token, at its end `e` (V1 `update_from_output` attaches `make_stats` only to non-empty
    /// outputs; arrivals during the step are not in its waiting queue yet).
    fn publish_gauges(&mut self, e: u64) {
        if self.cfg.metrics_scrape_ns > 0 {
            self.gauges.next = (self.w_len, self.pinned);
            self.gauges.next_ns = e;
        }
    }

    fn finish(&mut self, x: usize, ev: &mut impl EngineEvents) {
        self.release(x);
        let q = &mut self.reqs[x];
        debug_assert!(!q.finished, "a request finishes once");
        debug_assert_eq!(q.generated, q.output, "tokens produced = output length");
        q.finished = true;
        let c = Completion {
            request: q.id,
            pod: self.pod,
            arrival_ns: q.arrival_ns,
            first_token_ns: q.first_token_ns,
            finish_ns: q.last_token_ns,
            input_tokens: q.input,
            output_tokens: q.output,
            hit_tokens: q.hit_tokens,
            prefill_tokens: q.prefill_tokens,
            preemptions: q.preemptions,
            queue_len: q.queue_len,
            offload_hit_tokens: q.offload_hit_tokens,
            pd: q.pd,
        };
        if !q.job {
            self.stats.finished += 1;
        }
        self.stats.last_finish_ns = self.stats.last_finish_ns.max(c.finish_ns);
        ev.completed(&c);
        self.reclaim();
    }

    /// Reclaims the oldest slots (and their keys) once finished.
    fn reclaim(&mut self) {
        let cap = self.reqs.len() as u64;
        while self.req_tail < self.req_head && self.reqs[(self.req_tail % cap) as usize].finished {
            self.req_tail += 1;
        }
        self.key_tail = if self.req_tail < self.req_head {
            self.reqs[(self.req_tail % cap) as usize].keys_at
        } else {
            self.key_head
        };
    }

    /// The slot of request `id` while the pod tracks it (ids grow with the slots: a binary
    /// search over the ring).
    fn slot_of(&self, id: u64) -> Option<usize> {
        let cap = self.reqs.len() as u64;
        let (mut lo, mut hi) = (self.req_tail, self.req_head);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.reqs[(mid % cap) as usize].id < id {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let x = (lo < self.req_head).then_some((lo % cap) as usize)?;
        (self.reqs[x].id == id).then_some(x)
    }

    /// Aborts request `id` at `t_ns`, its client having given up (vLLM's
    /// `Scheduler.finish_requests` with `FINISHED_ABORTED`, docs/MODEL.md "The load
    /// generator"): it leaves the waiting queue or the running batch at the pod's next step
    /// boundary at or after `t_ns` (the caller has run every step that starts before `t_ns`),
    /// its blocks are freed as a finished request's are (last block first; blocks with a key
    /// stay in the cache, at the free queue's tail), and it never completes. Returns false
    /// when the pod does not hold it unfinished, or holds it for P/D (not modelled).
    pub fn abort(&mut self, id: u64, t_ns: u64) -> Result<bool, Error> {
        let Some(x) = self.slot_of(id) else { return Ok(false) };
        let q = self.reqs[x];
        if q.finished || q.job || q.parked || q.transferred {
            return Ok(false);
        }
        let t = t_ns.max(self.last_end_ns);
        let w_cap = self.waiting.len() as u32;
        if let Some(k) = (0..self.w_len).find(|&k| self.waiting[((self.w_head + k) % w_cap) as usize] == x as u32) {
            self.waiting_until(t);
            for j in k..self.w_len - 1 {
                self.waiting[((self.w_head + j) % w_cap) as usize] =
                    self.waiting[((self.w_head + j + 1) % w_cap) as usize];
            }
            self.w_len -= 1;
            self.pending_prefill -= q.input + q.generated;
        } else if let Some(k) = (0..self.r_len as usize).find(|&k| self.running[k] == x as u32) {
            self.running.copy_within(k + 1..self.r_len as usize, k);
            self.r_len -= 1;
            self.pending_prefill -= Self::pending_of(&q);
        } else {
            return Err(Error::Invariant { what: Invariant::TrackedRequest });
        }
        // a pod waiting for a load counts its pinned blocks until now (they change here)
        let waited = self.gap.is_some();
        self.close_gap(t);
        self.release(x);
        self.reqs[x].finished = true;
        self.reqs[x].loading = false;
        self.stats.aborted += 1;
        // the pod's work for it ends here (the makespan covers it)
        self.stats.last_finish_ns = self.stats.last_finish_ns.max(t);
        if self.is_idle() {
            // nothing left: an idle pod, as a new one (its next arrival starts a step at once)
            self.waiting_for_load = false;
        } else if self.waiting_for_load {
            // the pod waited for a load: what is left may run from now (as an arrival wakes
            // it), its remaining pinned blocks counted from now until that step
            if waited {
                self.gap = Some((t, self.pinned));
            }
            if t < self.next_start_ns {
                self.next_start_ns = t;
            }
        }
        self.reclaim();
        self.check()?;
        Ok(true)
    }

    /// The run of identical pure-decode steps the next step starts, as far as the running
    /// requests tell (the waiting head is [`Self::head_fits`]'s): where step k_max - 1 of the run
    /// (from 0) is the first that needs a block or finishes a request; None when a running
    /// request does not decode at the next step.
    #[inline(always)]
    fn decode_run(&self) -> Result<Option<DecodeRun>, Error> {
        // Steps before a request needs a new block (its c is a multiple of 16) or finishes.
        let mut k_max = u64::MAX;
        let mut k_fin = u64::MAX;
        let mut boundaries = 0u32;
        let mut base = self.cfg.cost.shape();
        for k in 0..self.r_len as usize {
            let q = &self.reqs[self.running[k] as usize];
            if q.loading || q.generated == 0 || q.input + q.generated - q.computed != 1 {
                return Ok(None);
            }
            // The step run with c = computed + i needs a block when (computed + i) % 16 == 0:
            // steps i < to_boundary need none. The (output - generated)-th step finishes it.
            let to_boundary = (B - q.computed % B) % B;
            boundaries |= 1 << to_boundary;
            k_fin = k_fin.min(q.output - q.generated);
            k_max = k_max.min(to_boundary + 1);
            // With cached generated tokens the step that fills a block keys it (the cache map
            // changes): it runs normally too.
            if self.cfg.cache_generated_tokens && (q.keys_len as u64) > q.computed / B {
                k_max = k_max.min((B - 1 - q.computed % B) % B + 1);
            }
            base.add_decode(q.computed).map_err(|_| Error::Overflow { what: Quantity::BatchShape })?;
        }
        base.decode_shared = self.decode_shared(base.decode_cached);
        Ok(Some(DecodeRun { k_max: k_max.min(k_fin), k_fin, boundaries, base }))
    }

    /// Whether the next step would consider admitting the head of W (W not empty, a running
    /// slot and a token left after the running requests' decodes).
    fn head_may_wait(&self) -> bool {
        let m = self.cfg.max_num_batched_tokens as u64;
        self.w_len > 0 && self.r_len < self.cfg.max_num_seqs && m > self.r_len as u64
    }

    /// Whether the head of W, `y` with prefix hit (`h`, `free_hits`) and tier hit `h2`, fits the
    /// free blocks at the next step (with every running request decoding).
    fn head_fits(&self, y: usize, h: u32, free_hits: u32, h2: u32) -> bool {
        let m = self.cfg.max_num_batched_tokens as u64;
        let r_len = self.r_len as u64;
        let q = &self.reqs[y];
        let need = if q.transferred {
            let c = q.input - 1;
            blocks_for(c + (q.input + q.generated - c).min(m - r_len)) - h as u64
        } else {
            let c = h as u64 * B;
            let n = (q.input + q.generated - c).min(m - r_len);
            if h2 > 0 { h2 as u64 } else { blocks_for(c + n) - h as u64 }
        };
        need + free_hits as u64 <= self.free_len as u64
    }

    /// Start of the first step that is not part of the run of identical pure-decode steps the
    /// pod is in, up to its first step that needs a block ([`Self::fast_forward`]'s run where it
    /// does not go through block boundaries, its steps' times summed as it sums them): until
    /// then nothing a router reads of the pod changes (no admission, allocation, release or
    /// cache-map change; the same queue length and load signals), so the fleet's calendar may
    /// leave the pod there until an arrival passes it or a request is routed to it. The next
    /// step's start when it is not such a run, or with an offload tier (the run's start touches
    /// the tier), or when fast-forwarding is off. Never later than the run's end.
    fn quiet_until_ns(&self) -> u64 {
        let s = self.next_start_ns;
        if !self.cfg.fast_forwards() || self.cpu.is_some() || self.r_len == 0 {
            return s;
        }
        let Ok(Some(DecodeRun { k_max, base, .. })) = self.decode_run() else { return s };
        if k_max < 2 {
            return s;
        }
        if self.head_may_wait() {
            let y = self.waiting[self.w_head as usize] as usize;
            let (h, free_hits) = self.hit_of(y);
            if self.head_fits(y, h, free_hits, 0) {
                return s;
            }
        }
        let lin = self.linear_run(&base, k_max - 1);
        let mut e = s;
        for done in 0..k_max - 1 {
            let Ok(d) = self.run_step_ns(&base, lin, done) else { return s };
            let Some(next) = e.checked_add(d) else { return s };
            e = next;
        }
        e
    }

    /// With the linear step cost, the times of a decode run's first `steps` steps as an
    /// arithmetic progression (d0, delta): the `done`-th step's batch is `base` with done x D
    /// more cached tokens ([`Self::decode_run_shape`]), and the linear model is affine in them
    /// (t_kv_token per context token), so it takes d0 + done x delta, delta = t_kv_token x D.
    /// None (the caller asks the model step by step, with its errors) with another model, when
    /// the run's batches are not shifts of `base` ([`decodes_after`]), or when the last step's
    /// time is not computed without overflow or is not d0 + (steps - 1) x delta (the sums only
    /// grow with `done`: if the last step's does not overflow, none does).
    fn linear_run(&self, base: &BatchShape, steps: u64) -> Option<(u64, u64)> {
        let c = self.cfg.cost.linear()?;
        let last = steps.checked_sub(1)?;
        // the first and last batches as decode_run_shape gives them when they shift `base`
        let d0 = c.step_ns(&decodes_after(base, 0).ok()??).ok()?;
        let d_last = c.step_ns(&decodes_after(base, last).ok()??).ok()?;
        let delta = c.t_kv_token_ns.checked_mul(base.decode_requests)?;
        let expected = delta.checked_mul(last).and_then(|x| d0.checked_add(x))?;
        (d_last == expected).then_some((d0, delta))
    }

    /// The time of the `done`-th step of a decode run from `base`: from the progression `lin`
    /// ([`Self::linear_run`], `done` below its steps), else from the model.
    #[inline]
    fn run_step_ns(&self, base: &BatchShape, lin: Option<(u64, u64)>, done: u64) -> Result<u64, Error> {
        match lin {
            Some((d0, delta)) => Ok(d0 + done * delta),
            None => self.cfg.cost.step_ns(&self.decode_run_shape(base, done)?),
        }
    }

    /// Advances a run of identical pure-decode steps at once, when the next step is one: every
    /// running request decodes and none can be admitted. Returns false (nothing done) otherwise.
    /// The run stops before a step that finishes a request (it runs on its own) and before the
    /// first step starting at or after `t_ns`. It goes through the steps where running requests
    /// need a new block ([`Self::boundary_blocks`]: allocated in the running order, as the step's
    /// scheduling does) when no waiting request may be considered, no tier, scraped gauges or
    /// cached generated tokens see the pool mid-run, and the free blocks suffice (else it stops
    /// before such a step, which then runs on its own and preempts). Same results as step by
    /// step (tested).
    fn fast_forward(&mut self, t_ns: u64, ev: &mut impl EngineEvents) -> Result<bool, Error> {
        let r_len = self.r_len as usize;
        if r_len == 0 {
            return Ok(false);
        }
        let Some(DecodeRun { k_max, k_fin, boundaries, base }) = self.decode_run()? else { return Ok(false) };
        // During the run nothing is allocated or released and the cache map does not change, so
        // if the head of W cannot be admitted now, it cannot at any step of the run.
        let head_waits = self.head_may_wait();
        if head_waits {
            let y = self.waiting[self.w_head as usize] as usize;
            let (h, free_hits) = self.hit_of(y);
            // the step at the run's start considers the head: its tier touches (idempotent
            // while nothing is stored, as in a run of decode steps) happen here
            let h2 = if self.reqs[y].transferred { 0 } else { self.cpu_hit(y, h) };
            if self.head_fits(y, h, free_hits, h2) {
                return Ok(false);
            }
        }
        // Through block boundaries only when a block taken mid-run changes nothing but the pool
        // and the pinned count: no waiting request is considered at any step of the run (W
        // empty, or no running slot or token left for it: the same at every step), no tier
        // (its touches), no scraped gauges (they publish the pinned count at every step's end)
        // and no cached generated tokens (a filled block gets its key).
        let through =
            !head_waits && self.cpu.is_none() && self.cfg.metrics_scrape_ns == 0 && !self.cfg.cache_generated_tokens;
        // k_max (k_fin) counts the step that needs a block or finishes a request: it runs
        // normally.
        let k_end = if through { k_fin } else { k_max };
        if k_end < 2 || (!through && k_max < 2) {
            return Ok(false);
        }
        let run = k_end - 1;
        let rl = r_len as u64;
        let start = self.next_start_ns;
        self.close_gap(start);
        self.sync_gauges(start);
        let lin = self.linear_run(&base, run);
        // steps of equal time (the linear model without a context term) give their ITL
        // samples in one call after the loop: the collector merges a value equal to its last
        // one into it, so the samples it keeps are the same as one call per step
        let same = matches!(lin, Some((_, 0)));
        let mut s = start;
        let mut last_start = start;
        let mut done = 0u64;
        let mut sum_d = 0u128;
        // the pinned blocks of the steps summed in sum_d (a boundary's blocks count from its step)
        let mut pinned = self.pinned;
        while done < run && s < t_ns {
            if through && boundaries & (1 << (done % B)) != 0 {
                // a step where some running request needs a block: taken as its scheduling
                // takes it, or the run stops before it when the free blocks do not suffice
                if !self.boundary_blocks(done) {
                    break;
                }
                if self.pinned != pinned {
                    self.stats.kv_pinned_block_ns += pinned as u128 * sum_d;
                    sum_d = 0;
                    pinned = self.pinned;
                }
            }
            // Steps of equal time after the first, up to the next step where a block may be
            // taken: at once (d0 each, while they start before t_ns), as the loop below runs
            // them one by one.
            if let (true, Some((d0, _))) = (same && done > 0, lin)
                && d0 > 0
            {
                let next = if through { next_boundary(boundaries, done) } else { u64::MAX };
                let k = (run - done).min(next - done).min((t_ns - s).div_ceil(d0));
                if let Some(end) = k.checked_mul(d0).and_then(|x| s.checked_add(x)) {
                    sum_d += k as u128 * d0 as u128;
                    last_start = end - d0;
                    s = end;
                    done += k;
                    continue;
                }
            }
            let step = self
                .run_step_ns(&base, lin, done)
                .and_then(|d| s.checked_add(d).map(|e| (d, e)).ok_or(Error::Overflow { what: Quantity::StepEndTime }));
            let Ok((d, e)) = step else {
                // the steps done so far counted as when each step gave its own
                if same && done > 1 {
                    ev.itl(s - last_start, (done - 1) * rl);
                }
                self.stats.kv_pinned_block_ns += pinned as u128 * sum_d;
                return step.map(|_| false);
            };
            if done == 0 {
                // A request skipped by an earlier step (budget) produced its last token earlier.
                for k in 0..r_len {
                    ev.itl(e - self.reqs[self.running[k] as usize].last_token_ns, 1);
                }
                // every step of the run publishes the same gauges (nothing is admitted or
                // released, and with scraped gauges nothing allocated): the first one's end is
                // when they change
                self.publish_gauges(e);
            } else if !same {
                ev.itl(d, rl);
            }
            sum_d += d as u128;
            last_start = s;
            s = e;
            done += 1;
        }
        if done == 0 {
            return Ok(false);
        }
        if same && done > 1 {
            ev.itl(s - last_start, (done - 1) * rl);
        }
        self.stats.kv_pinned_block_ns += pinned as u128 * sum_d;
        // |W| is constant during the run; the integral is taken up to the last step's start, as
        // a step does (an arrival before the run's end may still change W).
        self.stats.waiting_request_ns += self.w_len as u128 * (last_start - self.w_since_ns.min(last_start)) as u128;
        self.w_since_ns = self.w_since_ns.max(last_start);
        self.stats.kv_peak_blocks = self.stats.kv_peak_blocks.max(self.pinned);
        self.stats.steps += done;
        self.stats.output_tokens += done * rl;
        for k in 0..r_len {
            let r = &mut self.reqs[self.running[k] as usize];
            r.computed += done;
            r.generated += done;
            r.last_token_ns = s;
        }
        self.next_start_ns = s;
        self.last_end_ns = s;
        self.last_step_finished = 0;
        self.check()?;
        Ok(true)
    }

    /// Step `done` of a decode run ([`Self::fast_forward`], the running requests' `computed`
    /// still the run's start): the blocks its scheduling takes, each running request in order
    /// getting blocks_for(c + 1) less the blocks it holds (c its tokens cached at that step),
    /// all of them from the free queue's head as [`Self::schedule_running`] takes them. False,
    /// with nothing taken, when they are more than the free blocks (the step would preempt).
    fn boundary_blocks(&mut self, done: u64) -> bool {
        let r_len = self.r_len as usize;
        let new_of = |q: &ReqSlot| blocks_for(q.computed + done + 1) - (q.hit + q.own_len) as u64;
        let mut need = 0u64;
        for k in 0..r_len {
            need += new_of(&self.reqs[self.running[k] as usize]);
        }
        if need > self.free_len as u64 {
            return false;
        }
        if need > 0 {
            for k in 0..r_len {
                let x = self.running[k] as usize;
                let new = new_of(&self.reqs[x]);
                self.alloc_blocks(x, new as u32);
            }
        }
        true
    }

    /// Invariants after every step, in every build, O(1): nothing broken inside the step (a held
    /// hit block that left the cache, a cached key not in the map); pinned + free = C; cached
    /// blocks <= C; at most max_num_seqs running. A broken one is an error (the fleet poisons
    /// itself), never an index out of bounds later. Debug builds also check that the reference
    /// counts add up to the blocks the running requests hold (O(running requests): measured at
    /// 5 to 10% of `fleet bench`'s batched runs in release) and audit every block of small pods.
    fn check(&self) -> Result<(), Error> {
        let broken = |what| Err(Error::Invariant { what });
        if let Some(what) = self.broken {
            return broken(what);
        }
        let c = self.blocks.len() as u64;
        if self.pinned as u64 + self.free_len as u64 != c {
            return broken(Invariant::PinnedPlusFree);
        }
        if self.cached as u64 > c {
            return broken(Invariant::CachedBlocks);
        }
        if self.r_len > self.cfg.max_num_seqs {
            return broken(Invariant::RunningSlots);
        }
        if cfg!(debug_assertions) {
            let held: u64 = self.running[..self.r_len as usize]
                .iter()
                .map(|&r| (self.reqs[r as usize].hit + self.reqs[r as usize].own_len) as u64)
                .sum();
            if held != self.refs_total {
                return broken(Invariant::HeldReferences);
            }
            if c <= 4096 {
                self.audit();
            }
        }
        Ok(())
    }

    /// Breaks the block count on purpose (one block counted pinned that is not): test support
    /// (feature `harness`) for the invariant checks of [`Self::check`].
    #[cfg(feature = "harness")]
    pub fn break_block_count(&mut self) {
        self.pinned += 1;
    }

    /// Every block of the pod against the counters (debug builds, small pods: tests).
    fn audit(&self) {
        if let Some(g) = self.groups.as_ref() {
            let audit = g.audit();
            debug_assert!(audit.is_ok(), "the grouped pool: {audit:?}");
            let (cached, free, _, _) = audit.unwrap_or_default();
            debug_assert_eq!(cached, self.cached as u64);
            debug_assert_eq!(free, self.free_len as u64);
            return;
        }
        let mut pinned = 0u64;
        let mut refs = 0u64;
        let mut keyed = 0u64;
        for b in self.blocks.iter() {
            pinned += u64::from(b.refs() > 0);
            refs += b.refs() as u64;
            keyed += u64::from(b.keyed());
        }
        debug_assert_eq!(pinned, self.pinned as u64);
        debug_assert_eq!(refs, self.refs_total);
        debug_assert_eq!(keyed, self.cached as u64);
        let mut n = 0u64;
        self.each_free(|b| {
            debug_assert_eq!(self.blocks[b as usize].refs(), 0, "only unreferenced blocks are free");
            n += 1;
        });
        debug_assert_eq!(n, self.free_len as u64);
        let pending: u64 = (0..self.w_len)
            .map(|i| {
                let r = self.waiting[((self.w_head + i) % self.waiting.len() as u32) as usize] as usize;
                self.reqs[r].input + self.reqs[r].generated
            })
            .sum::<u64>()
            + self.running[..self.r_len as usize]
                .iter()
                .map(|&r| Self::pending_of(&self.reqs[r as usize]))
                .sum::<u64>();
        debug_assert_eq!(pending, self.pending_prefill);
    }
}

impl Engine for BatchedEngine<'_> {
    type Outcome = Routed;
    type Shared = ();
    type Stats = BatchedStats;

    /// Queues the request; the engine's steps serve it (its completion comes from them).
    fn serve(
        &mut self,
        _shared: &mut (),
        req: &Request<'_>,
        routed: Routed,
        _cache: &mut impl CacheEvents,
        _ev: &mut impl EngineEvents,
    ) -> Result<Routed, Error> {
        self.enqueue(routed.request, req.arrival_ns, req.input_tokens, req.output_tokens, req.keys, routed.queue_len)?;
        Ok(routed)
    }

    /// If the next step starts before `t_ns`, runs it: one step, or a run of identical decode
    /// steps (which finishes no request) each starting before `ff_ns` (at most `t_ns`).
    fn advance_once(&mut self, t_ns: u64, ff_ns: u64, ev: &mut impl EngineEvents) -> Result<bool, Error> {
        debug_assert!(ff_ns <= t_ns, "a fast-forward never runs past the step limit");
        if self.is_idle() || self.next_start_ns >= t_ns {
            return Ok(false);
        }
        if !(self.cfg.fast_forwards() && self.fast_forward(ff_ns, ev)?) {
            self.step(ev)?;
        }
        Ok(true)
    }

    /// Start of the next step (None when idle).
    fn next_event_ns(&self) -> Option<u64> {
        (!self.is_idle()).then_some(self.next_start_ns)
    }

    /// |W| + |R| + the requests that finished in the last step if it ends after `t_ns`.
    fn queue_len_at(&mut self, t_ns: u64) -> u32 {
        let in_flight = if self.last_end_ns > t_ns { self.last_step_finished } else { 0 };
        self.w_len + self.r_len + in_flight + self.parked
    }

    /// The engine's own signals (docs/MODEL.md, "Load signals").
    fn load(&self, _queue_len: u32, t_ns: u64) -> PodLoad {
        let every = self.cfg.metrics_scrape_ns;
        let (waiting, kv_used_blocks) =
            if every > 0 { self.gauges.at(t_ns, every).1 } else { (self.w_len, self.pinned) };
        PodLoad {
            waiting,
            running: self.r_len,
            kv_used_blocks,
            kv_capacity_blocks: self.blocks.len() as u32,
            pending_prefill_tokens: self.pending_prefill,
        }
    }

    /// [`Self::queue_len_at`] is |W| + |R| + parked, plus the last step's finished requests
    /// until it ends; [`Self::load`] does not depend on time (None with scraped metrics, whose
    /// gauges do).
    fn signals(&self) -> Option<super::Signals> {
        if self.cfg.metrics_scrape_ns > 0 {
            // scraped gauges depend on the time read: the fleet asks the pod at each arrival
            return None;
        }
        Some(super::Signals {
            next_event_ns: (!self.is_idle()).then(|| self.quiet_until_ns()),
            queue_len: self.w_len + self.r_len + self.parked,
            in_flight: self.last_step_finished,
            in_flight_until_ns: self.last_end_ns,
            load: self.load(0, 0),
        })
    }

    fn holds(pods: &[Self], _shared: &(), key: u64, word: usize, candidates: u64) -> u64 {
        let pods = pods.get(word * WORD_PODS..).unwrap_or_default();
        crate::fleet::base::mask::select(pods, candidates, |e| e.contains(key))
    }

    fn leading_run(pods: &[Self], _shared: &(), pod: usize, keys: &[u64]) -> u32 {
        pods.get(pod).map_or(0, |e| e.held_run(keys))
    }

    /// Exactly when [`Self::leading_matches`] answers (returns true).
    fn leads(pods: &[Self], _shared: &()) -> bool {
        Self::lead_kind(pods).is_some()
    }

    fn park(&mut self, req: &Request<'_>, routed: Routed, pd: PdOutcome) -> Result<u32, Error> {
        let slot = self.new_slot(
            routed.request,
            req.arrival_ns,
            req.input_tokens,
            req.output_tokens,
            req.keys,
            routed.queue_len,
        )?;
        let r = &mut self.reqs[slot];
        r.parked = true;
        r.pd = pd;
        self.parked += 1;
        let s = &mut self.stats;
        s.requests += 1;
        s.input_tokens += req.input_tokens;
        s.max_queue_len = s.max_queue_len.max(routed.queue_len);
        Ok(slot as u32)
    }

    fn serve_job(&mut self, req: &Request<'_>, routed: Routed, decode_pod: u32, decode_slot: u32) -> Result<(), Error> {
        let slot = self.new_slot(routed.request, req.arrival_ns, req.input_tokens, 1, req.keys, routed.queue_len)?;
        let r = &mut self.reqs[slot];
        r.job = true;
        r.pd = PdOutcome { decode_pod, decode_slot, ..PdOutcome::NONE };
        self.append_waiting(slot, req.arrival_ns);
        let s = &mut self.stats;
        s.requests += 1;
        s.max_queue_len = s.max_queue_len.max(routed.queue_len);
        Ok(())
    }

    fn note_prefill(&mut self, slot: u32, job: &Completion) -> Result<(), Error> {
        let Some(r) = self.reqs.get_mut(slot as usize).filter(|r| r.parked && r.id == job.request) else {
            return Err(Error::Invariant { what: Invariant::ParkedRequest });
        };
        r.hit_tokens = job.hit_tokens;
        r.offload_hit_tokens = job.offload_hit_tokens;
        r.prefill_tokens += job.prefill_tokens;
        r.preemptions += job.preemptions;
        r.prefill_done_ns = job.finish_ns;
        Ok(())
    }

    fn deliver(&mut self, slot: u32, t_ns: u64) -> Result<(), Error> {
        let Some(r) = self.reqs.get_mut(slot as usize).filter(|r| r.parked) else {
            return Err(Error::Invariant { what: Invariant::ParkedRequest });
        };
        r.parked = false;
        r.transferred = true;
        r.pd.transfer_ns = t_ns - r.prefill_done_ns;
        self.parked -= 1;
        self.append_waiting(slot as usize, t_ns);
        Ok(())
    }

    fn full_match(&self, keys: &[u64]) -> u32 {
        self.tier_match_blocks(keys)
    }

    fn kv_bytes_per_token(&self) -> u64 {
        self.cfg.offload.kv_bytes_per_token
    }

    /// With an offload tier on the pods, the tiered match (docs/MODEL.md, "Routing with the
    /// tier"); without, the caller asks key by key (today's match).
    fn leading_matches(pods: &[Self], _shared: &(), keys: &[u64], out: &mut [u32]) -> bool {
        let Some(tiered) = Self::lead_kind(pods) else { return false };
        for (o, e) in out.iter_mut().zip(pods.iter()) {
            *o = if tiered { e.tiered_match(keys) } else { e.grouped_match(keys) };
        }
        true
    }

    fn abort(&mut self, request: u64, t_ns: u64) -> Result<bool, Error> {
        BatchedEngine::abort(self, request, t_ns)
    }

    fn stats(&self) -> &BatchedStats {
        &self.stats
    }

    fn last_finish_ns(&self) -> u64 {
        self.stats.last_finish_ns
    }

    /// Autoscaling, at the end of the pod's drain (nothing waiting, running or parked): drops
    /// the cache (every cached block evicted through `cache`, least recent first, i.e. in
    /// free-queue order) and the CPU tier; the KV blocks are back in index order, and the
    /// pod's scheduling state (a wait for a load, its utilization gap, the host-to-device link)
    /// is a new engine's. Its counters stay (they are the pod's over the run).
    fn shut_down(&mut self, _shared: &mut (), cache: &mut impl CacheEvents) -> Result<(), Error> {
        if !self.is_idle() || self.parked > 0 || self.pinned > 0 {
            return Err(Error::InvalidConfig {
                field: Field::ScaleMin,
                expected: "a batched pod scaled in drops its cache only once drained",
            });
        }
        if self.groups.is_some() {
            // (not reached: with autoscaling the map stays per block, `groups_apply`)
            return Err(Error::InvalidConfig {
                field: Field::ScaleMin,
                expected: "no autoscaling with the cache map per trace id",
            });
        }
        let mut b = self.free_head;
        while b != NIL {
            let blk = self.blocks[b as usize];
            if blk.keyed() {
                cache.evicted(blk.key);
            }
            b = blk.next;
        }
        let c = self.blocks.len();
        for (i, b) in self.blocks.iter_mut().enumerate() {
            *b = KvBlock {
                key: 0,
                rk: 0,
                prev: if i == 0 { NIL } else { i as u32 - 1 },
                next: if i + 1 == c { NIL } else { i as u32 + 1 },
            };
        }
        self.table.fill(0);
        self.key_log_over = true;
        self.free_head = 0;
        self.free_tail = c as u32 - 1;
        self.free_len = c as u32;
        self.cached = 0;
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.clear(&mut ());
        }
        self.reset_idle();
        Ok(())
    }

    /// Autoscaling: the pod comes up as a new machine. It is idle (never used, or drained and
    /// shut down), so its KV and CPU tier are empty already; nothing of a wait for a load
    /// survives (as after [`Engine::shut_down`]).
    fn boot(&mut self) -> Result<(), Error> {
        if !self.is_idle() || self.parked > 0 {
            return Err(Error::InvalidConfig {
                field: Field::ScaleMin,
                expected: "a batched pod boots only when it holds no request",
            });
        }
        self.reset_idle();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::fleet::cost::linear::Profile;

    /// A pod of `c` blocks, 2 running sequences at most and no CPU tier, owning its buffers.
    struct SmallPod {
        blocks: Vec<KvBlock>,
        table: Vec<u32>,
        reqs: Vec<ReqSlot>,
        waiting: Vec<u32>,
        running: Vec<u32>,
        keys: Vec<u64>,
    }

    impl SmallPod {
        fn new(c: usize) -> Self {
            SmallPod {
                blocks: vec![KvBlock::default(); c],
                table: vec![0u32; BatchedEngine::table_len(c)],
                reqs: vec![ReqSlot::default(); 4],
                waiting: vec![0u32; 4],
                running: vec![0u32; 2],
                keys: vec![0u64; 16],
            }
        }

        fn engine(&mut self) -> BatchedEngine<'_> {
            let cfg = BatchedConfig { max_num_seqs: 2, ..BatchedConfig::new(Profile::Seed) };
            let buffers = PodBuffers {
                blocks: &mut self.blocks,
                table: &mut self.table,
                reqs: &mut self.reqs,
                waiting: &mut self.waiting,
                running: &mut self.running,
                keys: &mut self.keys,
                key_blocks: &mut [],
                cpu_slots: &mut [],
                cpu_table: &mut [],
            };
            BatchedEngine::new(cfg, 0, buffers).unwrap()
        }
    }

    /// A xorshift64 stream from `seed` (the tests' random operations; seeds are never 0).
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// A key for a pod of `c` blocks from the random `r`: a small key, one that differs from
    /// others in a few high bits only (`low` below them), or `r` itself.
    fn mixed_key(r: u64, c: usize, low: u64) -> u64 {
        match r % 3 {
            0 => r % (2 * c as u64),
            1 => ((r % 64) << 40) | low,
            _ => r,
        }
    }

    /// Block `b` (keyed) loses its key, as at its eviction; returns the key.
    fn drop_key(e: &mut BatchedEngine<'_>, b: u32) -> u64 {
        let key = e.blocks[b as usize].key;
        e.uncache(key, b);
        e.blocks[b as usize].rk &= !KEYED;
        key
    }

    #[test]
    fn shut_down_and_boot_leave_a_new_engines_scheduling_state() {
        let mut pod = SmallPod::new(8);
        let mut e = pod.engine();
        // what an idle pod that last waited for a load could hold
        let stale = |e: &mut BatchedEngine<'_>| {
            e.gap = Some((5, 3));
            e.waiting_for_load = true;
            e.pcie_free_ns = 99;
        };
        let fresh = |e: &BatchedEngine<'_>| (e.gap, e.waiting_for_load, e.pcie_free_ns) == (None, false, 0);
        stale(&mut e);
        Engine::shut_down(&mut e, &mut (), &mut ()).unwrap();
        assert!(fresh(&e), "shut_down resets the wait");
        stale(&mut e);
        Engine::boot(&mut e).unwrap();
        assert!(fresh(&e), "boot resets the wait");
    }

    /// The cache map (tagged entries; home slots from the tag bits when they hold them, else
    /// from the block's key) against a model map, under random keying and evictions, for a pod
    /// whose entries give their home (8 and 3,000 blocks) and one whose do not (70,000 blocks),
    /// with small keys, keys that differ in a few high bits only, and random ones.
    #[test]
    fn cache_map_matches_a_model_map() {
        use std::collections::HashMap;
        for (c, direct) in [(8usize, true), (3_000, true), (70_000, false)] {
            let mut pod = SmallPod::new(c);
            let mut e = pod.engine();
            assert_eq!(e.direct, direct, "capacity {c}");
            let mut model: HashMap<u64, u32> = HashMap::new();
            let mut rnd = xorshift(0x2545_f491_4f6c_dd1du64 ^ c as u64);
            let ops = 4 * c + 2_000;
            for op in 0..ops {
                let b = (rnd() % c as u64) as u32;
                if e.blocks[b as usize].keyed() {
                    let key = drop_key(&mut e, b);
                    assert_eq!(model.remove(&key), Some(b));
                    assert_eq!(e.lookup(key), None, "capacity {c}: a removed key is gone");
                } else {
                    // small keys, keys equal in their high bits, and random ones
                    let key = mixed_key(rnd(), c, 7);
                    e.cache_block(b, key);
                    model.entry(key).or_insert(b);
                    assert_eq!(e.lookup(key), model.get(&key).copied(), "capacity {c}: op {op}");
                }
                assert!(e.broken.is_none(), "capacity {c}: op {op}");
                if op % 997 == 0 || op + 1 == ops {
                    for (&k, &b) in &model {
                        assert_eq!(e.lookup(k), Some(b), "capacity {c}: op {op}: key {k:#x}");
                    }
                    assert_eq!(e.table.iter().filter(|&&t| t != 0).count(), model.len());
                    assert_eq!(e.cached as usize, model.len());
                }
            }
        }
    }

    /// `held_run` and `run_blocks` (eight home entries at a time) against the leading run of
    /// `contains` and `lookup` key by key: random maps of small pods (keys that collide at their home slot, so that many are
    /// settled by the whole probe), runs of held keys of every length with an absent key, a key
    /// of another block's tag, or the end after them.
    #[test]
    fn held_run_is_the_leading_run_of_contains() {
        for c in [8usize, 100, 3_000, 70_000] {
            let mut pod = SmallPod::new(c);
            let mut e = pod.engine();
            let mut rnd = xorshift(0x51_7cc1_b727_220au64 ^ c as u64);
            let mut held: Vec<u64> = Vec::new();
            let (mut checked, mut longest) = (0, 0);
            for round in 0..400 {
                // fill some blocks (a key already cached keeps its block)
                for _ in 0..(c / 4).max(1) {
                    let b = (rnd() % c as u64) as u32;
                    if e.blocks[b as usize].keyed() {
                        drop_key(&mut e, b);
                    }
                    e.cache_block(b, mixed_key(rnd(), c, 7));
                }
                held.clear();
                held.extend(e.blocks.iter().filter(|b| b.keyed()).map(|b| b.key));
                for _ in 0..20 {
                    let len = (rnd() % 40) as usize;
                    let mut keys: Vec<u64> = (0..len).map(|_| held[(rnd() % held.len() as u64) as usize]).collect();
                    match rnd() % 3 {
                        0 => keys.push(rnd() % (2 * c as u64) + (1 << 50)),
                        1 => keys.push(((rnd() % 64) << 40) | 9),
                        _ => {}
                    }
                    keys.extend((0..rnd() % 20).map(|_| held[(rnd() % held.len() as u64) as usize]));
                    let expect = keys.iter().take_while(|&&k| e.contains(k)).count() as u32;
                    assert_eq!(e.held_run(&keys), expect, "capacity {c}, round {round}: {keys:x?}");
                    let mut got = Vec::new();
                    assert_eq!(e.run_blocks(&keys, |b| got.push(b)), expect);
                    let blocks: Vec<u32> = keys[..expect as usize].iter().map(|&k| e.lookup(k).unwrap()).collect();
                    assert_eq!(got, blocks, "capacity {c}, round {round}: the run's blocks");
                    assert_eq!(
                        <BatchedEngine<'_> as Engine>::leading_run(core::slice::from_ref(&e), &(), 0, &keys),
                        expect
                    );
                    checked += 1;
                    longest = longest.max(expect);
                }
            }
            assert!(checked > 0 && longest >= 40, "capacity {c}: runs of every length checked ({longest})");
        }
    }
}
