//! The fleet: N pods, a router, the index feed and the timing model, dispatching one request at
//! a time in arrival order (docs/MODEL.md is the specification this follows).

use heapless::Vec as HVec;

pub mod batched;
pub mod defaults;
pub mod kinds;
pub mod scale;

pub use self::kinds::{CacheMode, IndexKind, TouchOrder};
use self::scale::{ScaleAction, ScalePolicy, ScaleState};
use crate::fleet::base::error::{Error, Field, Quantity};
use crate::fleet::base::limits::{BLOCK_TOKENS, MAX_ALPHA, MAX_POD_BLOCKS, MAX_PODS, MAX_STALE_DELAY};
use crate::fleet::base::load::PodLoad;
use crate::fleet::cache::CacheEvents;
use crate::fleet::cache::index::{BlockIndex, IndexEntry, PendingEntry, PendingEvicts, PendingRecord};
use crate::fleet::cache::lru::{LruPod, Slot};
use crate::fleet::cache::runs::{Run, RunLru};
use crate::fleet::engine::server::FifoServer;
use crate::fleet::route::kind::{AnyRouter, RouterKind};
use crate::fleet::route::seed::PrefixAware;
use crate::fleet::route::spec::{RouterBuffers, RouterLayout, RouterSpec};
use crate::fleet::route::{Holders, KeyHolders, Route, RouteView, Router};

/// A fleet's configuration.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FleetConfig {
    /// Number of pods N (1..=64).
    pub pods: usize,
    /// Blocks per pod C.
    pub capacity_blocks: usize,
    /// The router.
    pub router: RouterKind,
    /// Load penalty of the prefix-aware router, in blocks per queued request.
    pub alpha: f64,
    /// Stale-evict delay k, in requests (0: exact index).
    pub stale_delay: u32,
    /// Touch order.
    pub order: TouchOrder,
    /// Prefill cost, ns per prompt token not served from cache.
    pub t_prefill_ns: u64,
    /// Decode cost, ns per output token.
    pub t_decode_ns: u64,
    /// How the prefix-aware router's index is kept (results do not depend on it).
    pub index: IndexKind,
    /// Blocks per pod in a second, slower cache tier (CPU memory; 0: no second tier). Blocks
    /// evicted from the GPU tier are demoted into it; a request continues its prefix hit there.
    pub cpu_capacity_blocks: usize,
    /// Cost of loading a block from the CPU tier, ns per token (instead of prefilling it).
    pub t_cpu_ns: u64,
    /// Autoscaling (None: all `pods` routable all the time). `pods` is then the most pods.
    pub scale: Option<ScalePolicy>,
    /// Per-pod caches, or one shared pool of `pods * capacity_blocks` blocks.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "CacheMode::is_local"))]
    pub cache: CacheMode,
    /// A shipped router's pipeline and parameters (None: the preset of `router` with its
    /// defaults; required for [`RouterKind::Custom`]; ignored by the seed's routers).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub routing: Option<RouterSpec>,
    /// Staleness in time: the exact index learns of each store and eviction this long after it
    /// happens, ns (0: at once). Exclusive with `stale_delay`.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "is_zero"))]
    pub event_delay_ns: u64,
    /// llm-d's speculative entries: a routed request's keys count as held by its pod for this
    /// long, ns (0: off).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "is_zero"))]
    pub speculative_ttl_ns: u64,
}

#[cfg(feature = "serde")]
fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl FleetConfig {
    /// The model's defaults for everything but pods, capacity and router.
    pub const fn new(pods: usize, capacity_blocks: usize, router: RouterKind) -> Self {
        FleetConfig {
            pods,
            capacity_blocks,
            router,
            alpha: defaults::ALPHA,
            stale_delay: defaults::STALE_DELAY,
            order: defaults::ORDER,
            t_prefill_ns: defaults::T_PREFILL_NS,
            t_decode_ns: defaults::T_DECODE_NS,
            index: defaults::INDEX,
            cpu_capacity_blocks: defaults::CPU_CAPACITY_BLOCKS,
            t_cpu_ns: defaults::T_CPU_NS,
            scale: None,
            cache: defaults::CACHE,
            routing: None,
            event_delay_ns: 0,
            speculative_ttl_ns: 0,
        }
    }

    /// Pending-event queues the exact index needs: evictions (delay k or event delay), stores
    /// (event delay), speculative entries (TTL). Each has the `pending` records of
    /// [`FleetLayout::new`].
    pub fn pending_queues(&self) -> usize {
        if !self.uses_exact_index() {
            return 0;
        }
        let evicts = self.stale_delay > 0 || self.event_delay_ns > 0;
        usize::from(evicts) + usize::from(self.event_delay_ns > 0) + usize::from(self.speculative_ttl_ns > 0)
    }

    /// The shipped router's spec: `routing`, else the preset of `router` (None for the seed's
    /// routers).
    pub fn router_spec(&self) -> Option<RouterSpec> {
        if self.router.is_seed() { None } else { self.routing.or(RouterSpec::preset(self.router)) }
    }

    /// Whether the router reads the exact index (prefix-aware, precise scorers, Dynamo).
    pub fn uses_exact_index(&self) -> bool {
        match self.router_spec() {
            Some(spec) => spec.needs_index(),
            None => self.router == RouterKind::PrefixAware,
        }
    }

    /// Buffer lengths of the router's own state (an approximate index), all 0 for most routers.
    pub fn router_layout(&self) -> Result<RouterLayout, Error> {
        match self.router_spec() {
            Some(spec) => spec.layout(self.pods, self.capacity_blocks),
            None => Ok(RouterLayout::default()),
        }
    }

    /// Checks every field against the model's limits.
    pub fn validate(&self) -> Result<(), Error> {
        if !self.router.is_seed() {
            match self.router_spec() {
                Some(spec) => spec.validate()?,
                None => {
                    return Err(Error::InvalidConfig {
                        field: Field::Router,
                        expected: "a pipeline (--router-config FILE)",
                    });
                }
            }
        }
        if self.pods == 0 || self.pods > MAX_PODS {
            return Err(Error::InvalidConfig {
                field: Field::Pods,
                expected: "between 1 and 64 (the index stores pods as a 64-bit mask)",
            });
        }
        if self.capacity_blocks == 0
            || self.capacity_blocks > MAX_POD_BLOCKS
            || LruPod::table_len(self.capacity_blocks) == 0
        {
            return Err(Error::InvalidConfig {
                field: Field::Capacity,
                expected: "between 1 and 4294967294 blocks (MAX_POD_BLOCKS: slot indices are u32)",
            });
        }
        if !(self.alpha >= 0.0 && self.alpha <= MAX_ALPHA) {
            return Err(Error::InvalidConfig { field: Field::Alpha, expected: "a number between 0 and 1e9" });
        }
        if self.cpu_capacity_blocks > MAX_POD_BLOCKS
            || (self.cpu_capacity_blocks > 0 && LruPod::table_len(self.cpu_capacity_blocks) == 0)
        {
            return Err(Error::InvalidConfig {
                field: Field::CpuCapacity,
                expected: "between 0 and 4294967294 blocks (MAX_POD_BLOCKS: slot indices are u32)",
            });
        }
        if self.stale_delay > MAX_STALE_DELAY {
            return Err(Error::InvalidConfig { field: Field::Stale, expected: "at most 16777216 requests" });
        }
        if self.event_delay_ns > 0 && self.stale_delay > 0 {
            return Err(Error::InvalidConfig {
                field: Field::EventDelay,
                expected: "0 with --stale (a delay in requests or in time, not both)",
            });
        }
        if let Some(policy) = self.scale {
            policy.validate(self.pods)?;
        }
        if self.cache == CacheMode::Global {
            let total = self.pods.saturating_mul(self.capacity_blocks);
            if total > MAX_POD_BLOCKS || LruPod::table_len(total) == 0 {
                return Err(Error::InvalidConfig {
                    field: Field::Capacity,
                    expected: "pods x capacity at most 4294967294 blocks with --cache global (one pool)",
                });
            }
            if self.cpu_capacity_blocks > 0 {
                return Err(Error::InvalidConfig { field: Field::CpuCapacity, expected: "0 with --cache global" });
            }
            if self.stale_delay > 0 || self.event_delay_ns > 0 || self.speculative_ttl_ns > 0 {
                return Err(Error::InvalidConfig {
                    field: Field::Stale,
                    expected: "no stale index (--stale, --event-delay-ms, --speculative-ttl-ms) with --cache global",
                });
            }
            if self.index != IndexKind::PodTables {
                return Err(Error::InvalidConfig { field: Field::Index, expected: "pod-tables with --cache global" });
            }
            if self.scale.is_some() {
                return Err(Error::InvalidConfig {
                    field: Field::ScaleMin,
                    expected: "no autoscaling with --cache global",
                });
            }
        }
        Ok(())
    }
}

/// Buffer lengths a fleet needs (the caller allocates them; see [`FleetBuffers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetLayout {
    /// Pods.
    pub pods: usize,
    /// Slots per pod (= capacity).
    pub slots_per_pod: usize,
    /// Key-table entries per pod (0 with a shared cache).
    pub table_per_pod: usize,
    /// Key-table entries of the shared pool (0 with per-pod caches). The `tables` buffer holds
    /// [`Self::tables_len`] entries.
    pub shared_table: usize,
    /// Queued requests tracked per pod.
    pub queue_per_pod: usize,
    /// Block index entries (0 when the router does not use the index).
    pub index: usize,
    /// Pending-event records (0 when the index is exact or unused): one equal share per queue
    /// ([`FleetConfig::pending_queues`]).
    pub pending: usize,
    /// Pending-event table entries (one equal share per queue).
    pub pending_table: usize,
    /// CPU-tier slots per pod (0: no CPU tier).
    pub cpu_slots_per_pod: usize,
    /// CPU-tier key-table entries per pod.
    pub cpu_table_per_pod: usize,
}

impl FleetLayout {
    /// Layout for `cfg`, tracking up to `queue_per_pod` queued requests per pod and
    /// `pending` evictions in flight (used only with a stale index).
    pub fn new(cfg: &FleetConfig, queue_per_pod: usize, pending: usize) -> Result<Self, Error> {
        cfg.validate()?;
        let uses_index = cfg.uses_exact_index();
        let index = if uses_index && cfg.index == IndexKind::Global {
            let keys =
                cfg.pods.checked_mul(cfg.capacity_blocks).ok_or(Error::Overflow { what: Quantity::IndexSize })?;
            BlockIndex::table_len(keys)
        } else {
            0
        };
        let queues = cfg.pending_queues();
        let per_queue = if queues > 0 { pending.max(1) } else { 0 };
        let global = cfg.cache == CacheMode::Global;
        Ok(FleetLayout {
            pods: cfg.pods,
            slots_per_pod: cfg.capacity_blocks,
            table_per_pod: if global { 0 } else { LruPod::table_len(cfg.capacity_blocks) },
            shared_table: if global { LruPod::table_len(cfg.pods * cfg.capacity_blocks) } else { 0 },
            queue_per_pod: queue_per_pod.max(1),
            index,
            pending: per_queue * queues,
            pending_table: if queues > 0 { PendingEvicts::table_len(per_queue) * queues } else { 0 },
            cpu_slots_per_pod: cfg.cpu_capacity_blocks,
            cpu_table_per_pod: if cfg.cpu_capacity_blocks > 0 { LruPod::table_len(cfg.cpu_capacity_blocks) } else { 0 },
        })
    }

    /// Length of the `tables` buffer: `pods * table_per_pod + shared_table`.
    pub fn tables_len(&self) -> usize {
        self.pods * self.table_per_pod + self.shared_table
    }

    /// Total bytes of the buffers.
    pub fn bytes(&self) -> usize {
        use core::mem::size_of;
        self.shared_table * 4
            + self.pods
                * (self.slots_per_pod * size_of::<Slot>()
                    + self.table_per_pod * 4
                    + self.queue_per_pod * 8
                    + self.cpu_slots_per_pod * size_of::<Slot>()
                    + self.cpu_table_per_pod * 4)
            + self.index * size_of::<IndexEntry>()
            + self.pending * size_of::<PendingRecord>()
            + self.pending_table * size_of::<PendingEntry>()
    }
}

/// Caller-provided storage for a fleet, with the lengths given by [`FleetLayout`].
pub struct FleetBuffers<'a> {
    /// `pods * slots_per_pod` slots.
    pub slots: &'a mut [Slot],
    /// [`FleetLayout::tables_len`] key-table entries (`pods * table_per_pod`, or the shared
    /// pool's table).
    pub tables: &'a mut [u32],
    /// `pods * queue_per_pod` finish times.
    pub queues: &'a mut [u64],
    /// `index` entries.
    pub index: &'a mut [IndexEntry],
    /// `pending` records.
    pub pending: &'a mut [PendingRecord],
    /// `pending_table` entries.
    pub pending_table: &'a mut [PendingEntry],
    /// `pods * cpu_slots_per_pod` CPU-tier slots (empty without a CPU tier).
    pub cpu_slots: &'a mut [Slot],
    /// `pods * cpu_table_per_pod` CPU-tier key-table entries.
    pub cpu_tables: &'a mut [u32],
}

/// One request as the core sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'k> {
    /// Arrival time, ns from the start of the run.
    pub arrival_ns: u64,
    /// Prompt length L in tokens.
    pub input_tokens: u64,
    /// Output length O in tokens.
    pub output_tokens: u64,
    /// Keys of the floor(L/16) full blocks.
    pub keys: &'k [u64],
}

/// What happened to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Outcome {
    /// 0-based request index.
    pub request: u64,
    /// Pod it was dispatched to.
    pub pod: u32,
    /// Leading blocks found in the pod's cache.
    pub hit_blocks: u32,
    /// Blocks after those found in the pod's CPU tier (0 without one).
    pub cpu_hit_blocks: u32,
    /// Blocks the router believed the pod held (prefix-aware; 0 otherwise).
    pub believed_match_blocks: u32,
    /// queue_len of the chosen pod at arrival.
    pub queue_len: u32,
    /// 16 * hit_blocks.
    pub hit_tokens: u64,
    /// L - hit_tokens.
    pub prefill_tokens: u64,
    /// Arrival, ns.
    pub arrival_ns: u64,
    /// Service start, ns.
    pub start_ns: u64,
    /// Finish, ns.
    pub finish_ns: u64,
    /// Routable pods when it was routed (all pods without autoscaling).
    pub active_pods: u32,
}

impl Outcome {
    /// finish - arrival, ns.
    pub fn latency_ns(&self) -> u64 {
        self.finish_ns - self.arrival_ns
    }
}

/// Per-pod counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PodStats {
    /// Requests dispatched here.
    pub requests: u64,
    /// Prompt tokens of those requests.
    pub input_tokens: u64,
    /// Tokens served from this pod's cache.
    pub hit_tokens: u64,
    /// Tokens loaded from this pod's CPU tier.
    pub cpu_hit_tokens: u64,
    /// Sum of service times, ns.
    pub busy_ns: u64,
    /// Longest queue seen at an arrival routed here.
    pub max_queue_len: u32,
}

/// Fleet-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FleetTotals {
    /// Requests dispatched.
    pub requests: u64,
    /// Sum of L.
    pub input_tokens: u64,
    /// Sum of O.
    pub output_tokens: u64,
    /// Sum of hit tokens.
    pub hit_tokens: u64,
    /// Sum of tokens loaded from CPU tiers.
    pub cpu_hit_tokens: u64,
    /// Sum of prefill tokens.
    pub prefill_tokens: u64,
    /// Sum of latencies, ns.
    pub latency_ns_sum: u64,
    /// Requests where the router believed in more blocks than the pod had (stale chases).
    pub chased_requests: u64,
    /// Sum over requests of believed - actual blocks, when positive.
    pub phantom_blocks: u64,
    /// Last finish time, ns.
    pub makespan_ns: u64,
    /// Pods booted by the autoscaler.
    pub scale_outs: u64,
    /// Pods dropped by the autoscaler.
    pub scale_ins: u64,
    /// Most routable pods at any arrival.
    pub max_active_pods: u32,
    /// Requests routed while more pods than `initial_pods` were routable (autoscaling only).
    pub scaled_out_requests: u64,
    /// Of those, requests routed to a pod the autoscaler added (index >= `initial_pods`).
    pub new_pod_requests: u64,
    /// Their fair share: the sum over those requests of 1000 (active - initial) / active, rounded
    /// down. `new_pod_requests * 1000 / fair_new_pod_milli` is 1 when the router spreads
    /// load onto new pods like round-robin, below 1 when it keeps traffic on the warm ones.
    pub fair_new_pod_milli: u64,
}

/// One pod: its cache (and CPU tier), its server and its counters.
pub struct Pod<'a> {
    /// The pod's own cache; with [`CacheMode::Global`], pod 0 holds the shared pool and the
    /// others none (so a `Fleet` is no larger than before: `Option<LruPod>` costs no byte).
    cache: Option<LruPod<'a>>,
    cpu: Option<LruPod<'a>>,
    /// The same cache kept as runs of trace ids, when the run-length replay is on (then `cache`
    /// stays empty).
    runs: Option<RunLru<'a>>,
    server: FifoServer<'a>,
    stats: PodStats,
}

/// The pods' own caches, seen as an exact block index ([`IndexKind::PodTables`]).
pub struct PodCaches<'v, 'a> {
    pods: &'v [Pod<'a>],
    /// [`CacheMode::Global`]: pod 0's cache is the pool every pod reads.
    global: bool,
}

impl KeyHolders for PodCaches<'_, '_> {
    /// Bitmask of the `candidates` pods whose cache holds `key`.
    #[inline]
    fn mask(&self, key: u64, candidates: u64) -> u64 {
        if self.global {
            // Every pod reads the pool: all of them hold what it holds.
            let held = self.pods.first().and_then(|p| p.cache.as_ref()).is_some_and(|c| c.contains(key));
            return if held { candidates } else { 0 };
        }
        let mut out = 0;
        let mut rest = candidates;
        while rest != 0 {
            let p = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if self.pods.get(p).and_then(|pod| pod.cache.as_ref()).is_some_and(|c| c.contains(key)) {
                out |= 1 << p;
            }
        }
        out
    }
}

/// Feeds one pod's cache events to the index during one dispatch.
struct Feed<'x, 'a> {
    index: Option<&'x mut BlockIndex<'a>>,
    cpu: Option<&'x mut LruPod<'a>>,
    pending: Option<&'x mut PendingEvicts<'a>>,
    stores: Option<&'x mut PendingEvicts<'a>>,
    pod: usize,
    /// The events' stamp: the dispatch number (delay in requests) or the arrival, ns (in time).
    dispatch: u64,
    error: Option<Error>,
}

impl CacheEvents for Feed<'_, '_> {
    #[inline]
    fn inserted(&mut self, key: u64) {
        if let Some(ix) = self.index.as_deref_mut()
            && let Err(e) = ix.insert(key, self.pod)
        {
            self.error.get_or_insert(e);
        }
        if let Some(s) = self.stores.as_deref_mut()
            && let Err(e) = s.record(key, self.pod, self.dispatch)
        {
            self.error.get_or_insert(e);
        }
    }
    #[inline]
    fn evicted(&mut self, key: u64) {
        if let Some(ix) = self.index.as_deref_mut() {
            ix.remove(key, self.pod);
        }
        // Demotion: the block moves to the CPU tier as its most recent entry.
        if let Some(cpu) = self.cpu.as_deref_mut() {
            demote(cpu, key);
        }
        if let Some(p) = self.pending.as_deref_mut()
            && let Err(e) = p.record(key, self.pod, self.dispatch)
        {
            self.error.get_or_insert(e);
        }
    }
}

/// Kept out of line so that the GPU tier's touch, which inlines its eviction path, stays small
/// when there is no CPU tier.
#[inline(never)]
fn demote(cpu: &mut LruPod<'_>, key: u64) {
    cpu.touch(key, &mut ());
}

/// A pod that comes up is a new machine: nothing queued (requests of its previous life finish
/// elsewhere).
fn come_up(pod: Option<usize>, pods: &mut [Pod<'_>], queue_lens: &mut [u32; MAX_PODS]) {
    if let Some(p) = pod {
        pods[p].server.reset();
        queue_lens[p] = 0;
    }
}

/// N pods behind a router.
pub struct Fleet<'a, R: Router = AnyRouter<'a>> {
    cfg: FleetConfig,
    router: R,
    pods: HVec<Pod<'a>, MAX_PODS>,
    index: Option<BlockIndex<'a>>,
    pending: Option<PendingEvicts<'a>>,
    stores: Option<PendingEvicts<'a>>,
    speculative: Option<PendingEvicts<'a>>,
    scale: Option<ScaleState>,
    next_request: u64,
    last_arrival_ns: u64,
    totals: FleetTotals,
    poisoned: bool,
    /// Blocks per trace id when the run-length replay is on (0: per block).
    group_blocks: usize,
    /// How the run-length replay routes (set with it).
    run_route: RunRoute,
}

/// Routing in the run-length replay: the prefix-aware router's matches come from the runs.
#[derive(Clone, Copy, Debug)]
enum RunRoute {
    /// The router ignores caches (round-robin, least-loaded).
    Blind,
    /// [`PrefixAware`] with its matches computed per run.
    Prefix(PrefixAware),
}

impl<'a> Fleet<'a, AnyRouter<'a>> {
    /// A fleet with the built-in router named by `cfg.router` (one without router-side storage;
    /// see [`Self::with_router_buffers`]).
    pub fn new(cfg: FleetConfig, buffers: FleetBuffers<'a>) -> Result<Self, Error> {
        Self::with_router_buffers(cfg, buffers, RouterBuffers::default())
    }

    /// A fleet with the built-in router named by `cfg.router` and `cfg.routing`, its
    /// approximate index in `router` ([`FleetConfig::router_layout`]).
    pub fn with_router_buffers(
        cfg: FleetConfig,
        buffers: FleetBuffers<'a>,
        router: RouterBuffers<'a>,
    ) -> Result<Self, Error> {
        cfg.validate()?;
        let r = AnyRouter::build(cfg.router, cfg.alpha, cfg.router_spec().as_ref(), cfg.pods, router)?;
        Self::with_router(cfg, r, buffers)
    }

    /// Buffer lengths of the run-length replay (`runs`, `tables`) for `cfg`, or None when the
    /// configuration needs the per-block replay: a CPU tier, a stale or global index, a shared
    /// cache, autoscaling or in-order touches (docs/MODEL.md, "Run-length replay").
    pub fn runs_layout(cfg: &FleetConfig) -> Option<(usize, usize)> {
        let per_block_only = cfg.cpu_capacity_blocks > 0
            || cfg.stale_delay > 0
            || cfg.event_delay_ns > 0
            || cfg.speculative_ttl_ns > 0
            || !cfg.router.is_seed()
            || (cfg.router == RouterKind::PrefixAware && cfg.index != IndexKind::PodTables)
            || cfg.cache != CacheMode::Local
            || cfg.scale.is_some()
            || cfg.order != TouchOrder::TailFirst;
        (!per_block_only).then(|| {
            (cfg.pods * RunLru::runs_len(cfg.capacity_blocks), cfg.pods * RunLru::table_len(cfg.capacity_blocks))
        })
    }

    /// Switches to the run-length replay for requests whose keys come from trace ids of
    /// `group_blocks` 16-token blocks each (block j is sub-block j mod R of id j div R), before
    /// the first dispatch. Results are identical to the per-block replay (docs/MODEL.md,
    /// "Run-length replay"; the property tests compare them); the work is per run of blocks.
    /// Returns false, changing nothing, when [`Self::runs_layout`] is None or the router is not
    /// one of the three built-in ones; the buffers must have the lengths it gives. Afterwards
    /// [`Self::pod_cache`] is None: the pods' blocks are in runs.
    pub fn attach_runs(
        &mut self,
        group_blocks: u32,
        runs: &'a mut [Run],
        tables: &'a mut [u32],
    ) -> Result<bool, Error> {
        let Some((runs_len, tables_len)) = Self::runs_layout(&self.cfg) else { return Ok(false) };
        let route = match self.router {
            AnyRouter::RoundRobin(_) | AnyRouter::LeastLoaded(_) => RunRoute::Blind,
            AnyRouter::PrefixAware(p) => RunRoute::Prefix(p),
            // the shipped routers read load signals and their own indexes: per block
            _ => return Ok(false),
        };
        if group_blocks == 0 || self.next_request > 0 {
            return Err(Error::InvalidConfig {
                field: Field::TraceBlockSize,
                expected: "at least 1 block per trace id, attached before the first request",
            });
        }
        let mut runs_each = split(runs, self.cfg.pods, runs_len / self.cfg.pods, "runs")?;
        let mut tables_each = split(tables, self.cfg.pods, tables_len / self.cfg.pods, "run tables")?;
        for pod in self.pods.iter_mut() {
            let (r, t) = (runs_each.next(), tables_each.next());
            let (Some(r), Some(t)) = (r, t) else {
                return Err(Error::BufferSize { buffer: "runs", expected: runs_len, got: 0 });
            };
            pod.runs = Some(RunLru::new(self.cfg.capacity_blocks, r, t)?);
        }
        self.group_blocks = group_blocks as usize;
        self.run_route = route;
        Ok(true)
    }
}

/// What the FIFO engine offers the load scorers (docs/MODEL.md, "Load signals under FIFO"):
/// the request in service is running, the rest wait; nothing is pinned (the FIFO model keeps no
/// KV accounting); the prefill backlog is the pod's remaining work in prefill-token units.
fn fifo_load(queue_len: u32, backlog_ns: u64, t_prefill_ns: u64, capacity_blocks: usize) -> PodLoad {
    let running = queue_len.min(1);
    PodLoad {
        waiting: queue_len - running,
        running,
        kv_used_blocks: 0,
        kv_capacity_blocks: u32::try_from(capacity_blocks).unwrap_or(u32::MAX),
        pending_prefill_tokens: backlog_ns.checked_div(t_prefill_ns).unwrap_or(0),
    }
}

/// The pending-event queues of `cfg` (evictions, stores, speculative entries) over equal shares
/// of the caller's buffers.
#[allow(clippy::type_complexity)]
fn pending_queues<'a>(
    cfg: &FleetConfig,
    ring: &'a mut [PendingRecord],
    table: &'a mut [PendingEntry],
) -> Result<(Option<PendingEvicts<'a>>, Option<PendingEvicts<'a>>, Option<PendingEvicts<'a>>), Error> {
    let n = cfg.pending_queues();
    if n == 0 {
        return Ok((None, None, None));
    }
    let (ring_each, table_each) = (ring.len() / n, table.len() / n);
    let mut rings = split(ring, n, ring_each, "pending")?;
    let mut tables = split(table, n, table_each, "pending table")?;
    let mut next = || -> Result<Option<PendingEvicts<'a>>, Error> {
        match (rings.next(), tables.next()) {
            (Some(r), Some(t)) => Ok(Some(PendingEvicts::new(r, t)?)),
            _ => Err(Error::BufferSize { buffer: "pending", expected: n, got: 0 }),
        }
    };
    let evicts = if cfg.stale_delay > 0 || cfg.event_delay_ns > 0 { next()? } else { None };
    let stores = if cfg.event_delay_ns > 0 { next()? } else { None };
    let speculative = if cfg.speculative_ttl_ns > 0 { next()? } else { None };
    Ok((evicts, stores, speculative))
}

fn split<'a, T>(
    buf: &'a mut [T],
    parts: usize,
    each: usize,
    name: &'static str,
) -> Result<core::slice::ChunksExactMut<'a, T>, Error> {
    if each == 0 || buf.len() != parts * each {
        return Err(Error::BufferSize { buffer: name, expected: parts * each, got: buf.len() });
    }
    Ok(buf.chunks_exact_mut(each))
}

impl<'a, R: Router> Fleet<'a, R> {
    /// A fleet with a custom router. `cfg.router` is ignored except for buffer sizing.
    pub fn with_router(cfg: FleetConfig, router: R, b: FleetBuffers<'a>) -> Result<Self, Error> {
        cfg.validate()?;
        let queue_per_pod = b.queues.len() / cfg.pods;
        let global = cfg.cache == CacheMode::Global;
        // With a shared cache, the whole slot and table buffers are the pool (held by pod 0).
        let (mut pool, slots, tables) = if global {
            let total = cfg.pods * cfg.capacity_blocks;
            if b.slots.len() != total {
                return Err(Error::BufferSize { buffer: "slots", expected: total, got: b.slots.len() });
            }
            let want = LruPod::table_len(total);
            if b.tables.len() != want {
                return Err(Error::BufferSize { buffer: "tables", expected: want, got: b.tables.len() });
            }
            (Some(LruPod::new(b.slots, b.tables)?), None, None)
        } else {
            let slots = split(b.slots, cfg.pods, cfg.capacity_blocks, "slots")?;
            let tables = split(b.tables, cfg.pods, LruPod::table_len(cfg.capacity_blocks), "tables")?;
            (None, Some(slots), Some(tables))
        };
        let mut own = slots.zip(tables).map(|(s, t)| s.zip(t));
        let queues = split(b.queues, cfg.pods, queue_per_pod, "queues")?;
        let cpu_cap = cfg.cpu_capacity_blocks;
        let mut cpu_tiers = if cpu_cap > 0 {
            let cs = split(b.cpu_slots, cfg.pods, cpu_cap, "cpu slots")?;
            let ct = split(b.cpu_tables, cfg.pods, LruPod::table_len(cpu_cap), "cpu tables")?;
            Some(cs.zip(ct))
        } else {
            None
        };
        let mut pods = HVec::new();
        for q in queues {
            let cpu = match cpu_tiers.as_mut().and_then(Iterator::next) {
                Some((cs, ct)) => Some(LruPod::new(cs, ct)?),
                None => None,
            };
            let cache = match own.as_mut().and_then(Iterator::next) {
                Some((s, t)) => Some(LruPod::new(s, t)?),
                None => pool.take(),
            };
            let pod = Pod { cache, cpu, runs: None, server: FifoServer::new(q)?, stats: PodStats::default() };
            if pods.push(pod).is_err() {
                return Err(Error::InvalidConfig { field: Field::Pods, expected: "at most 64" });
            }
        }
        let index = if router.needs_index() && cfg.index == IndexKind::Global {
            if b.index.is_empty() {
                return Err(Error::BufferSize {
                    buffer: "index",
                    expected: BlockIndex::table_len(cfg.pods * cfg.capacity_blocks),
                    got: 0,
                });
            }
            Some(BlockIndex::new(b.index)?)
        } else {
            None
        };
        let (pending, stores, speculative) =
            if router.needs_index() { pending_queues(&cfg, b.pending, b.pending_table)? } else { (None, None, None) };
        let scale = match cfg.scale {
            Some(policy) => Some(ScaleState::new(policy, cfg.pods)?),
            None => None,
        };
        Ok(Fleet {
            cfg,
            router,
            pods,
            index,
            pending,
            stores,
            speculative,
            scale,
            next_request: 0,
            last_arrival_ns: 0,
            totals: FleetTotals::default(),
            poisoned: false,
            group_blocks: 0,
            run_route: RunRoute::Blind,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// Fleet-wide counters so far.
    pub fn totals(&self) -> &FleetTotals {
        &self.totals
    }

    /// Per-pod counters of pod `p`.
    pub fn pod_stats(&self, p: usize) -> Option<&PodStats> {
        self.pods.get(p).map(|pod| &pod.stats)
    }

    /// Provisioned pod-time until `end_ns`, ns: with autoscaling, see [`ScaleState::pod_ns`];
    /// without, every pod from 0 to `end_ns`.
    pub fn pod_ns(&self, end_ns: u64) -> u64 {
        match &self.scale {
            Some(s) => s.pod_ns(end_ns),
            None => end_ns.saturating_mul(self.pods.len() as u64),
        }
    }

    /// The cache of pod `p` (read-only); None with a shared cache (see [`Self::shared_cache`]).
    pub fn pod_cache(&self, p: usize) -> Option<&LruPod<'a>> {
        match self.cfg.cache {
            CacheMode::Local if self.group_blocks == 0 => self.pods.get(p).and_then(|pod| pod.cache.as_ref()),
            _ => None,
        }
    }

    /// The shared pool of [`CacheMode::Global`] (read-only); None with per-pod caches.
    pub fn shared_cache(&self) -> Option<&LruPod<'a>> {
        match self.cfg.cache {
            CacheMode::Local => None,
            CacheMode::Global => self.pods.first().and_then(|pod| pod.cache.as_ref()),
        }
    }

    /// Routes and serves one request.
    pub fn dispatch(&mut self, req: &Request<'_>) -> Result<Outcome, Error> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.check(req)?;
        let r = self.dispatch_inner(req);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    fn check(&self, req: &Request<'_>) -> Result<(), Error> {
        if req.keys.len() as u64 != req.input_tokens / BLOCK_TOKENS as u64 {
            return Err(Error::InvalidRequest {
                field: "keys",
                expected: "one key per full 16-token block of the prompt",
            });
        }
        if req.arrival_ns < self.last_arrival_ns {
            return Err(Error::ArrivalOutOfOrder { previous_ns: self.last_arrival_ns, arrival_ns: req.arrival_ns });
        }
        Ok(())
    }

    /// Runs the autoscaler at the arrival of request `i` (docs/MODEL.md, "Autoscaling"); returns
    /// the number of routable pods. `queue_lens` is updated for a pod that comes up.
    fn autoscale(&mut self, i: u64, arrival_ns: u64, queue_lens: &mut [u32; MAX_PODS]) -> Result<usize, Error> {
        let Some(scale) = self.scale.as_mut() else { return Ok(self.pods.len()) };
        // Before the rule reads the queue lengths, and again after it (a startup of 0).
        come_up(scale.activate_ready(arrival_ns), &mut self.pods, queue_lens);
        let action = scale.evaluate(arrival_ns, &queue_lens[..scale.active()])?;
        match action {
            ScaleAction::Hold => {}
            ScaleAction::Out { .. } => self.totals.scale_outs += 1,
            ScaleAction::In { pod } => {
                let Pod { cache, cpu, server, .. } = &mut self.pods[pod];
                let mut feed = Feed {
                    index: self.index.as_mut(),
                    cpu: None,
                    pending: self.pending.as_mut(),
                    stores: self.stores.as_mut(),
                    pod,
                    dispatch: if self.cfg.event_delay_ns > 0 { arrival_ns } else { i },
                    error: None,
                };
                if let Some(c) = cache.as_mut() {
                    c.clear(&mut feed);
                }
                if let Some(e) = feed.error {
                    return Err(e);
                }
                if let Some(c) = cpu.as_mut() {
                    c.clear(&mut ());
                }
                scale.release(pod, arrival_ns.max(server.last_finish_ns()));
                self.totals.scale_ins += 1;
            }
        }
        come_up(scale.activate_ready(arrival_ns), &mut self.pods, queue_lens);
        Ok(scale.active())
    }

    /// Steps 4 and 5 of a dispatch, per block: route, then serve from the pod's cache (or the
    /// shared pool, held by pod 0), feeding its events to the index. Returns the route, the hit
    /// blocks and the CPU tier's hit blocks.
    fn route_and_serve(
        &mut self,
        i: u64,
        req: &Request<'_>,
        queue_lens: &[u32],
    ) -> Result<(Route, usize, usize), Error> {
        let active = queue_lens.len();
        // 4. Route.
        let caches = PodCaches { pods: &self.pods, global: self.cfg.cache == CacheMode::Global };
        let held = match self.index.as_ref() {
            Some(ix) => Holders::Index(ix),
            None => Holders::Exact(&caches),
        };
        let mut loads = [PodLoad::default(); MAX_PODS];
        let loads = if self.router.needs_loads() {
            for (p, l) in loads[..active].iter_mut().enumerate() {
                let backlog_ns = self.pods[p].server.last_finish_ns().saturating_sub(req.arrival_ns);
                *l = fifo_load(queue_lens[p], backlog_ns, self.cfg.t_prefill_ns, self.cfg.capacity_blocks);
            }
            Some(&loads[..active])
        } else {
            None
        };
        let view = RouteView {
            request: i,
            queue_lens,
            held,
            pending: self.pending.as_ref(),
            pending_stores: self.stores.as_ref(),
            speculative: self.speculative.as_ref(),
            loads,
            now_ns: req.arrival_ns,
        };
        let route = self.router.route(&view, req.keys);
        let p = route.pod;
        // A custom router may name a pod that does not exist or is not booted yet.
        if p >= active {
            return Err(Error::InvalidConfig {
                field: Field::Router,
                expected: "a routable pod (index below the active pods)",
            });
        }
        self.router.routed(p, req.keys, req.arrival_ns)?;
        if let Some(s) = self.speculative.as_mut() {
            for &k in req.keys {
                s.record(k, p, req.arrival_ns)?;
            }
        }
        // 5. Serve from the pod's cache (or the shared pool, held by pod 0), feeding its events
        // to the index.
        let cache_pod = match self.cfg.cache {
            CacheMode::Local => p,
            CacheMode::Global => 0,
        };
        let Pod { cache, cpu, .. } = &mut self.pods[cache_pod];
        let cache = cache.as_mut().ok_or(Error::InvalidConfig { field: Field::Cache, expected: "local or global" })?;
        let hit_blocks = cache.hit_blocks(req.keys);
        // The prefix continues in the CPU tier, measured before any update too.
        let cpu_hit_blocks = cpu.as_ref().map_or(0, |c| c.hit_blocks(&req.keys[hit_blocks..]));
        let stamp = if self.cfg.event_delay_ns > 0 { req.arrival_ns } else { i };
        let mut feed = Feed {
            index: self.index.as_mut(),
            cpu: cpu.as_mut(),
            pending: self.pending.as_mut(),
            stores: self.stores.as_mut(),
            pod: p,
            dispatch: stamp,
            error: None,
        };
        match self.cfg.order {
            TouchOrder::TailFirst => req.keys.iter().rev().for_each(|&k| {
                cache.touch(k, &mut feed);
            }),
            TouchOrder::InOrder => req.keys.iter().for_each(|&k| {
                cache.touch(k, &mut feed);
            }),
        }
        if let Some(e) = feed.error {
            return Err(e);
        }
        Ok((route, hit_blocks, cpu_hit_blocks))
    }

    /// Steps 4 and 5 in the run-length replay ([`Fleet::attach_runs`]): the same route and hits
    /// as [`Self::route_and_serve`], computed per run of blocks of one trace id.
    fn route_and_serve_runs(
        &mut self,
        i: u64,
        req: &Request<'_>,
        queue_lens: &[u32],
    ) -> Result<(Route, usize, usize), Error> {
        let group = self.group_blocks;
        let (route, hit) = match self.run_route {
            RunRoute::Blind => {
                let view = RouteView {
                    request: i,
                    queue_lens,
                    held: Holders::None,
                    pending: None,
                    pending_stores: None,
                    speculative: None,
                    loads: None,
                    now_ns: req.arrival_ns,
                };
                (self.router.route(&view, req.keys), None)
            }
            RunRoute::Prefix(router) => {
                // match_p is pod p's own hit (an exact view, the pods' tables): per run of blocks.
                let mut matches = [0u32; MAX_PODS];
                let pods = || self.pods.iter().take(queue_lens.len()).map(|p| p.runs.as_ref());
                // The first group in every pod first: independent probes whose cache misses
                // overlap; only the pods holding all of it probe further.
                let first = req.keys.len().min(group);
                if first > 0 {
                    for (m, runs) in matches.iter_mut().zip(pods()) {
                        *m = runs.map_or(0, |r| r.held(req.keys[0]).min(first as u32));
                    }
                    for (m, runs) in matches.iter_mut().zip(pods()) {
                        if *m as usize == first
                            && let Some(r) = runs
                        {
                            *m += r.hit_blocks(&req.keys[first..], group) as u32;
                        }
                    }
                }
                let route = router.choose(&matches[..queue_lens.len()], queue_lens);
                (route, Some(route.believed_match_blocks as usize))
            }
        };
        let runs = self.pods.get_mut(route.pod).and_then(|p| p.runs.as_mut());
        let runs = runs
            .ok_or(Error::InvalidConfig { field: Field::Router, expected: "a pod index below the number of pods" })?;
        // The router's match on the chosen pod is its hit: the view is exact.
        let hit_blocks = hit.unwrap_or_else(|| runs.hit_blocks(req.keys, group));
        debug_assert_eq!(hit_blocks, runs.hit_blocks(req.keys, group));
        runs.touch_request(req.keys, group);
        Ok((route, hit_blocks, 0))
    }

    fn dispatch_inner(&mut self, req: &Request<'_>) -> Result<Outcome, Error> {
        let i = self.next_request;
        // 1. Evictions made while dispatching requests <= i-k-1 reach the router now (or, with
        // an event delay D, the stores and evictions made at or before arrival - D); speculative
        // entries made at or before arrival - TTL expire.
        let t = req.arrival_ns;
        if self.cfg.event_delay_ns > 0 {
            if let Some(upto) = t.checked_sub(self.cfg.event_delay_ns) {
                self.pending.iter_mut().chain(self.stores.iter_mut()).for_each(|p| p.deliver_through(upto));
            }
        } else if let Some(p) = self.pending.as_mut()
            && let Some(upto) = i.checked_sub(self.cfg.stale_delay as u64 + 1)
        {
            p.deliver_through(upto);
        }
        if let Some(s) = self.speculative.as_mut()
            && let Some(upto) = t.checked_sub(self.cfg.speculative_ttl_ns)
        {
            s.deliver_through(upto);
        }
        // 2. Queue lengths at arrival.
        let mut queue_lens = [0u32; MAX_PODS];
        for (q, pod) in queue_lens.iter_mut().zip(self.pods.iter_mut()) {
            *q = pod.server.queue_len_at(req.arrival_ns);
        }
        // 3. Autoscaling: the routable pods are 0..active.
        let active = self.autoscale(i, req.arrival_ns, &mut queue_lens)?;
        let queue_lens = &queue_lens[..active];
        let (route, hit_blocks, cpu_hit_blocks) = match self.group_blocks {
            0 => self.route_and_serve(i, req, queue_lens)?,
            _ => self.route_and_serve_runs(i, req, queue_lens)?,
        };
        let p = route.pod;
        // 6. Timing, on the routed pod.
        let Pod { server, stats, .. } = &mut self.pods[p];
        let hit_tokens = hit_blocks as u64 * BLOCK_TOKENS as u64;
        let cpu_hit_tokens = cpu_hit_blocks as u64 * BLOCK_TOKENS as u64;
        let prefill_tokens = req.input_tokens - hit_tokens - cpu_hit_tokens;
        let service = prefill_tokens
            .checked_mul(self.cfg.t_prefill_ns)
            .and_then(|a| cpu_hit_tokens.checked_mul(self.cfg.t_cpu_ns).and_then(|c| a.checked_add(c)))
            .and_then(|a| req.output_tokens.checked_mul(self.cfg.t_decode_ns).and_then(|b| a.checked_add(b)))
            .ok_or(Error::Overflow { what: Quantity::ServiceTime })?;
        let (start_ns, finish_ns) = server.admit(req.arrival_ns, service)?;
        let out = Outcome {
            request: i,
            pod: p as u32,
            hit_blocks: hit_blocks as u32,
            cpu_hit_blocks: cpu_hit_blocks as u32,
            believed_match_blocks: route.believed_match_blocks,
            queue_len: queue_lens[p],
            hit_tokens,
            prefill_tokens,
            arrival_ns: req.arrival_ns,
            start_ns,
            finish_ns,
            active_pods: active as u32,
        };
        // 7. Counters.
        let s = stats;
        s.requests += 1;
        s.input_tokens += req.input_tokens;
        s.hit_tokens += hit_tokens;
        s.cpu_hit_tokens += cpu_hit_tokens;
        s.busy_ns = s.busy_ns.saturating_add(service);
        s.max_queue_len = s.max_queue_len.max(out.queue_len);
        let t = &mut self.totals;
        t.requests += 1;
        t.input_tokens += req.input_tokens;
        t.output_tokens += req.output_tokens;
        t.hit_tokens += hit_tokens;
        t.cpu_hit_tokens += cpu_hit_tokens;
        t.prefill_tokens += prefill_tokens;
        t.latency_ns_sum = t.latency_ns_sum.saturating_add(out.latency_ns());
        if out.believed_match_blocks > out.hit_blocks {
            t.chased_requests += 1;
            t.phantom_blocks += (out.believed_match_blocks - out.hit_blocks) as u64;
        }
        t.makespan_ns = t.makespan_ns.max(finish_ns);
        t.max_active_pods = t.max_active_pods.max(active as u32);
        if let Some(policy) = self.cfg.scale
            && active > policy.initial_pods as usize
        {
            let initial = policy.initial_pods as usize;
            t.scaled_out_requests += 1;
            t.new_pod_requests += u64::from(p >= initial);
            t.fair_new_pod_milli += ((active - initial) * 1000 / active) as u64;
        }
        self.next_request += 1;
        self.last_arrival_ns = req.arrival_ns;
        Ok(out)
    }
}
