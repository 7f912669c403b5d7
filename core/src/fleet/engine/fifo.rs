//! The FIFO engine of one pod (docs/MODEL.md, "Pod", "Optional CPU tier", "Optional shared
//! (global) cache", "Timing: a FIFO single server per pod"): at a request's arrival its cache
//! effects apply (hit test, then touch every key), then a FIFO single server serves it for
//! prefill_tokens x t_prefill + CPU-tier tokens x t_cpu + O x t_decode ns. Everything about a
//! request is decided at its arrival.
//!
//! The pod's cache is an LRU of C keys ([`LruPod`]), or the same LRU kept as runs of trace ids
//! ([`RunLru`], the run-length replay: same results, less work), or none with a global cache
//! (then every pod reads and fills the fleet's shared pool, [`Pool`]). A CPU tier is a second LRU
//! that every key the first one evicts is demoted into.

use super::server::FifoServer;
use super::{Completion, Engine, EngineEvents, Request, Routed};
use crate::fleet::base::error::{Error, Field, Quantity, Rule};
use crate::fleet::base::limits::{BLOCK_TOKENS, MAX_POD_BLOCKS, quoting};
use crate::fleet::base::load::PodLoad;
use crate::fleet::base::mask::WORD_PODS;
use crate::fleet::cache::CacheEvents;
use crate::fleet::cache::lru::LruPod;
use crate::fleet::cache::runs::RunLru;

/// Order in which a request's keys are touched after the hit test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum TouchOrder {
    /// k_{m-1} first, k_0 last: the prefix ends up most recent (default, as vLLM frees blocks).
    TailFirst,
    /// k_0 first, k_{m-1} last (the seed's variant).
    InOrder,
}

impl core::fmt::Display for TouchOrder {
    /// Its CLI name.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl TouchOrder {
    /// Both orders.
    pub const ALL: [TouchOrder; 2] = [TouchOrder::TailFirst, TouchOrder::InOrder];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            TouchOrder::TailFirst => "tail-first",
            TouchOrder::InOrder => "in-order",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// Whose cache a request reads (docs/MODEL.md, "Shared (global) cache").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum CacheMode {
    /// Every pod has its own LRU of C blocks (the default).
    #[default]
    Local,
    /// One fleet-wide LRU of N x C blocks that every pod reads and fills (Mooncake's global
    /// cache); the routed pod still does the prefill.
    Global,
}

impl core::fmt::Display for CacheMode {
    /// Its CLI name.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl CacheMode {
    /// Both modes.
    pub const ALL: [CacheMode; 2] = [CacheMode::Local, CacheMode::Global];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            CacheMode::Local => "local",
            CacheMode::Global => "global",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// True for [`CacheMode::Local`] (serde: the default is not written).
    pub fn is_local(&self) -> bool {
        *self == CacheMode::Local
    }
}

/// The FIFO engine's parameters and its caches' (one set for every pod; the fleet's defaults in
/// `sim::defaults`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FifoConfig {
    /// Prefill cost, ns per prompt token not served from cache.
    pub t_prefill_ns: u64,
    /// Decode cost, ns per output token.
    pub t_decode_ns: u64,
    /// Touch order.
    pub order: TouchOrder,
    /// Blocks per pod in a second, slower cache tier (CPU memory; 0: no second tier). Blocks
    /// evicted from the GPU tier are demoted into it; a request continues its prefix hit there.
    pub cpu_capacity_blocks: usize,
    /// Cost of loading a block from the CPU tier, ns per token (instead of prefilling it).
    pub t_cpu_ns: u64,
    /// Per-pod caches, or one shared pool of `pods * capacity_blocks` blocks.
    pub cache: CacheMode,
}

impl FifoConfig {
    /// Checks the caches for `pods` pods of `capacity_blocks` blocks.
    pub fn validate(&self, pods: usize, capacity_blocks: usize) -> Result<(), Error> {
        if self.cpu_capacity_blocks > MAX_POD_BLOCKS
            || (self.cpu_capacity_blocks > 0 && LruPod::table_len(self.cpu_capacity_blocks) == 0)
        {
            return Err(Error::InvalidConfig {
                field: Field::CpuCapacity,
                expected: quoting!(
                    "between 0 and 4294967294 blocks (MAX_POD_BLOCKS: slot indices are u32)",
                    MAX_POD_BLOCKS
                ),
            });
        }
        if self.cache == CacheMode::Global {
            let total = pods.saturating_mul(capacity_blocks);
            if total > MAX_POD_BLOCKS || LruPod::table_len(total) == 0 {
                return Err(Error::Conflict { field: Field::Capacity, rule: Rule::GlobalPool });
            }
            if self.cpu_capacity_blocks > 0 {
                return Err(Error::Conflict { field: Field::CpuCapacity, rule: Rule::GlobalCpuTier });
            }
        }
        Ok(())
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

/// The fleet's shared pool under [`CacheMode::Global`] (None with per-pod caches): one LRU of
/// N x C keys every pod reads and fills.
pub type Pool<'a> = Option<LruPod<'a>>;

/// One pod's FIFO engine: its cache (and CPU tier), its server and its counters.
pub struct FifoEngine<'a> {
    cfg: FifoConfig,
    /// Blocks per pod C (the load signals' capacity).
    capacity_blocks: usize,
    /// The pod's own cache; None with a global cache (the fleet's [`Pool`]) or in run-length
    /// mode.
    cache: Option<LruPod<'a>>,
    cpu: Option<LruPod<'a>>,
    /// The same cache kept as runs of trace ids of `group_blocks` blocks each, in run-length
    /// mode (then `cache` is None).
    runs: Option<RunLru<'a>>,
    group_blocks: usize,
    server: FifoServer<'a>,
    stats: PodStats,
}

impl<'a> FifoEngine<'a> {
    /// An idle pod of `capacity_blocks` blocks: `cache` its own LRU (None: the fleet's pool),
    /// `cpu` its CPU tier, `server` its queue.
    pub fn new(
        cfg: FifoConfig,
        capacity_blocks: usize,
        cache: Option<LruPod<'a>>,
        cpu: Option<LruPod<'a>>,
        server: FifoServer<'a>,
    ) -> Self {
        FifoEngine { cfg, capacity_blocks, cache, cpu, runs: None, group_blocks: 0, server, stats: PodStats::default() }
    }

    /// Switches to the run-length cache of trace ids of `group_blocks` blocks (`runs` replaces the
    /// per-block LRU, which stays unused; docs/MODEL.md, "Run-length replay").
    pub fn use_runs(&mut self, runs: RunLru<'a>, group_blocks: usize) {
        self.cache = None;
        self.runs = Some(runs);
        self.group_blocks = group_blocks;
    }

    /// Leaves the pod's cache to the router, which serves it with its record (the fleet's fused
    /// tables, [`FifoFleet::attach_fused`]): the pod's own per-block cache stays unused.
    ///
    /// [`FifoFleet::attach_fused`]: crate::fleet::sim::fifo::FifoFleet
    pub fn use_router_cache(&mut self) {
        self.cache = None;
    }

    /// The pod's own per-block cache (None with a global cache, in run-length mode or when the
    /// router keeps it).
    pub fn cache(&self) -> Option<&LruPod<'a>> {
        self.cache.as_ref()
    }

    /// The hit test and the touches of `keys` (docs/MODEL.md, "Pod"): (hit blocks, CPU-tier hit
    /// blocks).
    fn serve_cache(
        &mut self,
        pool: &mut Pool<'a>,
        keys: &[u64],
        events: &mut impl CacheEvents,
    ) -> Result<(usize, usize), Error> {
        if let Some(runs) = self.runs.as_mut() {
            let hit = runs.hit_blocks(keys, self.group_blocks);
            runs.touch_request(keys, self.group_blocks)?;
            return Ok((hit, 0));
        }
        let cache = match self.cache.as_mut() {
            Some(own) => own,
            None => pool.as_mut().ok_or(Error::InvalidConfig { field: Field::Cache, expected: "local or global" })?,
        };
        let hit = cache.hit_blocks(keys);
        // The prefix continues in the CPU tier, measured before any update too.
        let cpu_hit = self.cpu.as_ref().map_or(0, |c| c.hit_blocks(&keys[hit..]));
        let mut feed = Demote { cpu: self.cpu.as_mut(), events };
        // No CPU tier and a view that keeps nothing (every router but those of an exact or
        // stale index): the touches run without the per-event checks.
        match (self.cfg.order, feed.silent()) {
            (TouchOrder::TailFirst, true) => cache.touch_each(keys.iter().rev().copied(), &mut ()),
            (TouchOrder::TailFirst, false) => cache.touch_each(keys.iter().rev().copied(), &mut feed),
            (TouchOrder::InOrder, true) => cache.touch_each(keys.iter().copied(), &mut ()),
            (TouchOrder::InOrder, false) => cache.touch_each(keys.iter().copied(), &mut feed),
        }
        Ok((hit, cpu_hit))
    }
}

/// The GPU tier's events: to the caller's feed, and every eviction demoted into the CPU tier.
struct Demote<'x, 'a, F> {
    cpu: Option<&'x mut LruPod<'a>>,
    events: &'x mut F,
}

impl<F: CacheEvents> CacheEvents for Demote<'_, '_, F> {
    #[inline]
    fn inserted(&mut self, key: u64) {
        self.events.inserted(key);
    }
    #[inline]
    fn evicted(&mut self, key: u64) {
        self.events.evicted(key);
        // Demotion: the block moves to the CPU tier as its most recent entry.
        if let Some(cpu) = self.cpu.as_deref_mut() {
            demote(cpu, key);
        }
    }
    #[inline]
    fn silent(&self) -> bool {
        self.cpu.is_none() && self.events.silent()
    }
}

/// Kept out of line so that the GPU tier's touch, which inlines its eviction path, stays small
/// when there is no CPU tier.
#[inline(never)]
fn demote(cpu: &mut LruPod<'_>, key: u64) {
    cpu.touch(key, &mut ());
}

impl<'a> Engine for FifoEngine<'a> {
    type Outcome = Outcome;
    type Shared = Pool<'a>;
    type Stats = PodStats;

    fn serve(
        &mut self,
        pool: &mut Pool<'a>,
        req: &Request<'_>,
        routed: Routed,
        cache: &mut impl CacheEvents,
        ev: &mut impl EngineEvents,
    ) -> Result<Outcome, Error> {
        let (hit_blocks, cpu_hit_blocks) = match routed.served_hit_blocks {
            // The router keeps this pod's cache with its index and served it (the fleet's
            // fused tables: no CPU tier, no view fed by the pod's cache events).
            Some(h) if self.cache.is_none() && self.runs.is_none() && self.cpu.is_none() => (h as usize, 0),
            Some(_) => {
                return Err(Error::InvalidConfig {
                    field: Field::Cache,
                    expected: "a pod's cache served by the router only when the pod keeps none",
                });
            }
            None => self.serve_cache(pool, req.keys, cache)?,
        };
        let hit_tokens = hit_blocks as u64 * BLOCK_TOKENS as u64;
        let cpu_hit_tokens = cpu_hit_blocks as u64 * BLOCK_TOKENS as u64;
        // The fleet checked keys = floor(L / 16): the hits never exceed the prompt.
        let prefill_tokens = req.input_tokens - hit_tokens - cpu_hit_tokens;
        let c = &self.cfg;
        let service = prefill_tokens
            .checked_mul(c.t_prefill_ns)
            .and_then(|a| cpu_hit_tokens.checked_mul(c.t_cpu_ns).and_then(|b| a.checked_add(b)))
            .and_then(|a| req.output_tokens.checked_mul(c.t_decode_ns).and_then(|b| a.checked_add(b)))
            .ok_or(Error::Overflow { what: Quantity::ServiceTime })?;
        let (start_ns, finish_ns) = self.server.admit(req.arrival_ns, service)?;
        let s = &mut self.stats;
        s.requests += 1;
        s.input_tokens += req.input_tokens;
        s.hit_tokens += hit_tokens;
        s.cpu_hit_tokens += cpu_hit_tokens;
        s.busy_ns = s.busy_ns.saturating_add(service);
        s.max_queue_len = s.max_queue_len.max(routed.queue_len);
        ev.completed(&Completion {
            request: routed.request,
            pod: routed.pod,
            arrival_ns: req.arrival_ns,
            first_token_ns: finish_ns,
            finish_ns,
            input_tokens: req.input_tokens,
            output_tokens: req.output_tokens,
            hit_tokens,
            prefill_tokens,
            preemptions: 0,
            queue_len: routed.queue_len,
            offload_hit_tokens: 0,
            pd: super::pd::PdOutcome::NONE,
        });
        Ok(Outcome {
            request: routed.request,
            pod: routed.pod,
            hit_blocks: hit_blocks as u32,
            cpu_hit_blocks: cpu_hit_blocks as u32,
            believed_match_blocks: routed.believed_match_blocks,
            queue_len: routed.queue_len,
            hit_tokens,
            prefill_tokens,
            arrival_ns: req.arrival_ns,
            start_ns,
            finish_ns,
            active_pods: routed.active_pods,
        })
    }

    /// Nothing happens between arrivals: a request's service is decided when it arrives.
    fn advance_once(&mut self, _t_ns: u64, _ff_ns: u64, _ev: &mut impl EngineEvents) -> Result<bool, Error> {
        Ok(false)
    }

    fn next_event_ns(&self) -> Option<u64> {
        None
    }

    fn queue_len_at(&mut self, t_ns: u64) -> u32 {
        self.server.queue_len_at(t_ns)
    }

    /// What the FIFO engine offers the load scorers (docs/MODEL.md, "Load signals under FIFO"):
    /// the request in service is running, the rest wait; nothing is pinned (the FIFO model keeps
    /// no KV accounting); the prefill backlog is the pod's remaining work in prefill-token units.
    fn load(&self, queue_len: u32, t_ns: u64) -> PodLoad {
        let running = queue_len.min(1);
        let backlog_ns = self.server.last_finish_ns().saturating_sub(t_ns);
        PodLoad {
            waiting: queue_len - running,
            running,
            kv_used_blocks: 0,
            kv_capacity_blocks: u32::try_from(self.capacity_blocks).unwrap_or(u32::MAX),
            pending_prefill_tokens: backlog_ns.checked_div(self.cfg.t_prefill_ns).unwrap_or(0),
        }
    }

    fn holds(pods: &[Self], pool: &Pool<'a>, key: u64, word: usize, candidates: u64) -> u64 {
        if let Some(pool) = pool {
            // Every pod reads the pool: all of them hold what it holds.
            return if pool.contains(key) { candidates } else { 0 };
        }
        let pods = pods.get(word * WORD_PODS..).unwrap_or_default();
        crate::fleet::base::mask::select(pods, candidates, |pod| pod.cache.as_ref().is_some_and(|c| c.contains(key)))
    }

    /// In run-length mode, per run of blocks (a run's blocks are held together or not at all):
    /// the first group in every pod first (independent probes whose cache misses overlap), then
    /// only the pods holding all of it probe further.
    fn leading_matches(pods: &[Self], _pool: &Pool<'a>, keys: &[u64], out: &mut [u32]) -> bool {
        let Some(group) = pods.first().filter(|p| p.runs.is_some()).map(|p| p.group_blocks) else { return false };
        let n = out.len();
        let runs = || pods.iter().take(n).map(|p| p.runs.as_ref());
        out.fill(0);
        let first = keys.len().min(group);
        if first > 0 {
            for (m, r) in out.iter_mut().zip(runs()) {
                *m = r.map_or(0, |r| r.held(keys[0]).min(first as u32));
            }
            for (m, r) in out.iter_mut().zip(runs()) {
                if *m as usize == first
                    && let Some(r) = r
                {
                    *m += r.hit_blocks(&keys[first..], group) as u32;
                }
            }
        }
        true
    }

    fn stats(&self) -> &PodStats {
        &self.stats
    }

    fn last_finish_ns(&self) -> u64 {
        self.server.last_finish_ns()
    }

    fn shut_down(&mut self, _pool: &mut Pool<'a>, events: &mut impl CacheEvents) -> Result<(), Error> {
        if let Some(c) = self.cache.as_mut() {
            c.clear(events);
        }
        if let Some(c) = self.cpu.as_mut() {
            c.clear(&mut ());
        }
        Ok(())
    }

    /// A pod that comes up is a new machine: nothing queued (requests of its previous life finish
    /// elsewhere).
    fn boot(&mut self) -> Result<(), Error> {
        self.server.reset();
        Ok(())
    }
}
