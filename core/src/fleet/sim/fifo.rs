//! A fleet of FIFO engines ([`FifoFleet`]): its buffers and their layout, the carving of the pods
//! (and of the shared pool of a global cache) from them, its counters, and the run-length replay.

use heapless::Vec as HVec;

use super::config::{EngineConfig, FleetConfig};
use super::view::{IndexKind, ViewBuffers, ViewLayout};
use super::{Fleet, FleetEngine, FleetTotals};
use crate::fleet::base::carve::chunks;
use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::base::limits::BLOCK_TOKENS;
use crate::fleet::cache::approx::ApproxIndex;
use crate::fleet::cache::fused::FusedSlot;
use crate::fleet::cache::index::{IndexEntry, PendingEntry, PendingRecord};
use crate::fleet::cache::lru::{LruPod, Slot};
use crate::fleet::cache::runs::{Run, RunLru};
use crate::fleet::engine::fifo::{CacheMode, FifoConfig, FifoEngine, Outcome, TouchOrder};
use crate::fleet::engine::server::FifoServer;
use crate::fleet::route::Router;
use crate::fleet::route::kind::AnyRouter;

/// N FIFO pods behind a router.
pub type FifoFleet<'a, R = AnyRouter<'a>> = Fleet<'a, FifoEngine<'a>, R>;

/// Buffer lengths a FIFO fleet needs (the caller allocates them; see [`FifoBuffers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FifoLayout {
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

impl FifoLayout {
    /// Layout for `cfg` (a FIFO configuration), tracking up to `queue_per_pod` queued requests
    /// per pod and `pending` events in flight per queue (used only with a stale view).
    pub fn new(cfg: &FleetConfig, queue_per_pod: usize, pending: usize) -> Result<Self, Error> {
        cfg.validate()?;
        cfg.no_pools_unless_batched()?;
        let Some(f) = cfg.fifo() else { return Err(super::wrong_engine("the FIFO engine for a FIFO fleet")) };
        let v = ViewLayout::new(&cfg.view(), cfg.uses_exact_index(), cfg.pods, cfg.capacity_blocks, pending)?;
        let global = f.cache == CacheMode::Global;
        Ok(FifoLayout {
            pods: cfg.pods,
            slots_per_pod: cfg.capacity_blocks,
            table_per_pod: if global { 0 } else { LruPod::table_len(cfg.capacity_blocks) },
            shared_table: if global { LruPod::table_len(cfg.pods * cfg.capacity_blocks) } else { 0 },
            queue_per_pod: queue_per_pod.max(1),
            index: v.index,
            pending: v.pending,
            pending_table: v.pending_table,
            cpu_slots_per_pod: f.cpu_capacity_blocks,
            cpu_table_per_pod: if f.cpu_capacity_blocks > 0 { LruPod::table_len(f.cpu_capacity_blocks) } else { 0 },
        })
    }

    /// Length of the `tables` buffer: `pods * table_per_pod + shared_table`.
    pub fn tables_len(&self) -> usize {
        self.pods * self.table_per_pod + self.shared_table
    }

    /// Total bytes of the buffers.
    pub fn bytes(&self) -> usize {
        use core::mem::size_of;
        let view = ViewLayout { index: self.index, pending: self.pending, pending_table: self.pending_table };
        self.shared_table * 4
            + self.pods
                * (self.slots_per_pod * size_of::<Slot>()
                    + self.table_per_pod * 4
                    + self.queue_per_pod * 8
                    + self.cpu_slots_per_pod * size_of::<Slot>()
                    + self.cpu_table_per_pod * 4)
            + view.bytes()
    }
}

/// Caller-provided storage for a FIFO fleet, with the lengths given by [`FifoLayout`].
pub struct FifoBuffers<'a> {
    /// `pods * slots_per_pod` slots.
    pub slots: &'a mut [Slot],
    /// [`FifoLayout::tables_len`] key-table entries (`pods * table_per_pod`, or the shared
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

impl<'a> FleetEngine<'a> for FifoEngine<'a> {
    type Config = FifoConfig;
    type Buffers = FifoBuffers<'a>;

    fn config(cfg: &FleetConfig) -> Option<FifoConfig> {
        cfg.fifo().copied()
    }

    fn pods(cfg: &FleetConfig, f: &FifoConfig, b: FifoBuffers<'a>) -> Result<super::PodsOf<'a, Self>, Error> {
        let f = *f;
        let queue_per_pod = b.queues.len() / cfg.pods;
        // With a shared cache, the whole slot and table buffers are the pool.
        let (pool, slots, tables) = if f.cache == CacheMode::Global {
            let total = cfg.pods * cfg.capacity_blocks;
            if b.slots.len() != total {
                return Err(Error::BufferSize { buffer: Buffer::Slots, expected: total, got: b.slots.len() });
            }
            let want = LruPod::table_len(total);
            if b.tables.len() != want {
                return Err(Error::BufferSize { buffer: Buffer::Tables, expected: want, got: b.tables.len() });
            }
            (Some(LruPod::new(b.slots, b.tables)?), None, None)
        } else {
            let slots = chunks(b.slots, cfg.pods, cfg.capacity_blocks, Buffer::Slots)?;
            let tables = chunks(b.tables, cfg.pods, LruPod::table_len(cfg.capacity_blocks), Buffer::Tables)?;
            (None, Some(slots), Some(tables))
        };
        let mut own = slots.zip(tables).map(|(s, t)| s.zip(t));
        let queues = chunks(b.queues, cfg.pods, queue_per_pod, Buffer::Queues)?;
        let cpu_cap = f.cpu_capacity_blocks;
        let mut cpu_tiers = if cpu_cap > 0 {
            let cs = chunks(b.cpu_slots, cfg.pods, cpu_cap, Buffer::CpuSlots)?;
            let ct = chunks(b.cpu_tables, cfg.pods, LruPod::table_len(cpu_cap), Buffer::CpuTables)?;
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
                None => None,
            };
            let pod = FifoEngine::new(f, cfg.capacity_blocks, cache, cpu, FifoServer::new(q)?);
            if pods.push(pod).is_err() {
                return Err(Error::InvalidConfig { field: Field::Pods, expected: "at most 64" });
            }
        }
        let view = ViewBuffers { index: b.index, pending: b.pending, pending_table: b.pending_table };
        Ok((pods, pool, view, super::pd::PdBuffers::default(), &mut []))
    }

    fn count(t: &mut FleetTotals, out: &Outcome) {
        t.hit_tokens += out.hit_tokens;
        t.cpu_hit_tokens += out.cpu_hit_blocks as u64 * BLOCK_TOKENS as u64;
        t.prefill_tokens += out.prefill_tokens;
        t.latency_ns_sum = t.latency_ns_sum.saturating_add(out.latency_ns());
        if out.believed_match_blocks > out.hit_blocks {
            t.chased_requests += 1;
            t.phantom_blocks += (out.believed_match_blocks - out.hit_blocks) as u64;
        }
        t.makespan_ns = t.makespan_ns.max(out.finish_ns);
    }
}

impl<'a, R: Router> Fleet<'a, FifoEngine<'a>, R> {
    /// The cache of pod `p` (read-only); None with a shared cache (see [`Self::shared_cache`])
    /// or in run-length mode.
    pub fn pod_cache(&self, p: usize) -> Option<&LruPod<'a>> {
        self.pods.get(p).and_then(FifoEngine::cache)
    }

    /// The shared pool of [`CacheMode::Global`] (read-only); None with per-pod caches.
    pub fn shared_cache(&self) -> Option<&LruPod<'a>> {
        self.shared.as_ref()
    }
}

impl<'a> Fleet<'a, FifoEngine<'a>, AnyRouter<'a>> {
    /// Buffer lengths of the run-length replay (`runs`, `tables`) for `cfg`, or None when the
    /// configuration needs the per-block replay: a CPU tier, a stale or global index, a shared
    /// cache, autoscaling or in-order touches (docs/MODEL.md, "Run-length replay"). With a
    /// router-side approximate index the buffers hold the pods' runs, then the index's
    /// ([`FleetConfig::router_runs_layout`]).
    pub fn runs_layout(cfg: &FleetConfig) -> Option<(usize, usize)> {
        let (runs, tables) = Self::pod_runs_layout(cfg)?;
        let (router_runs, router_tables) = Self::approx_runs_layout(cfg)?;
        Some((runs.checked_add(router_runs)?, tables.checked_add(router_tables)?))
    }

    /// The approximate index's share of [`Self::runs_layout`]: (0, 0) for a router without one.
    fn approx_runs_layout(cfg: &FleetConfig) -> Option<(usize, usize)> {
        cfg.router_runs_layout()
    }

    /// The pods' share of [`Self::runs_layout`].
    fn pod_runs_layout(cfg: &FleetConfig) -> Option<(usize, usize)> {
        let EngineConfig::Fifo { engine: f, view, scale } = cfg.engine else { return None };
        let per_block_only = f.cpu_capacity_blocks > 0
            || view.is_stale()
            || !Self::router_runs(cfg)
            || (cfg.uses_exact_index() && view.index != IndexKind::PodTables)
            || f.cache != CacheMode::Local
            || scale.is_some()
            || f.order != TouchOrder::TailFirst;
        (!per_block_only).then(|| {
            (cfg.pods * RunLru::runs_len(cfg.capacity_blocks), cfg.pods * RunLru::table_len(cfg.capacity_blocks))
        })
    }

    /// Buffer lengths (`slots`, `tables`) of the fused tables ([`Self::attach_fused`]) for
    /// `cfg`, or None when its rules do not hold: the FIFO engine with local caches, no CPU
    /// tier, no autoscaling, a view fed by no cache event (no exact or stale index), a shipped
    /// router with an approximate index of the pods' capacity (`approx_lru_blocks` 0) over the
    /// whole prompt (`approx_max_blocks` 0), at most [`PROBE_MAX_PODS`] pods, and tables the
    /// keys' tags can home ([`FusedLru::fits`]).
    ///
    /// [`PROBE_MAX_PODS`]: crate::fleet::cache::approx::PROBE_MAX_PODS
    /// [`FusedLru::fits`]: crate::fleet::cache::fused::FusedLru::fits
    pub fn fused_layout(cfg: &FleetConfig) -> Option<(usize, usize)> {
        let EngineConfig::Fifo { engine: f, view, scale } = cfg.engine else { return None };
        let spec = cfg.router_spec()?;
        let p = &spec.params;
        let ok = f.cpu_capacity_blocks == 0
            && f.cache == CacheMode::Local
            && scale.is_none()
            && !view.is_stale()
            && !cfg.uses_exact_index()
            && spec.needs_approx()
            && p.approx_lru_blocks == 0
            && p.approx_max_blocks == 0;
        if !ok {
            return None;
        }
        ApproxIndex::fused_layout(cfg.pods, cfg.capacity_blocks, cfg.capacity_blocks)
    }

    /// Keeps each pod's cache and the router's approximate-index LRU of that pod in one table
    /// ([`FusedLru`](crate::fleet::cache::fused::FusedLru), owned by the router's index), before
    /// the first dispatch, for the per-block replay: the router's record of a routed request
    /// then serves the pod's cache too (one probe per key where there were two). Results are
    /// identical (`core/tests/fused_fleet.rs` compares the fleets request by request). Returns
    /// false, changing nothing, when [`Self::fused_layout`] is None or the fleet replays per
    /// run; the buffers must have the lengths it gives. Afterwards [`Self::pod_cache`] is None.
    pub fn attach_fused(&mut self, slots: &'a mut [FusedSlot], tables: &'a mut [u32]) -> Result<bool, Error> {
        let Some((slots_len, tables_len)) = Self::fused_layout(&self.cfg) else { return Ok(false) };
        if slots.len() != slots_len || tables.len() != tables_len {
            return Err(Error::BufferSize { buffer: Buffer::RouterSlots, expected: slots_len, got: slots.len() });
        }
        if self.next_request > 0 {
            return Err(Error::InvalidConfig {
                field: Field::Router,
                expected: "the fused tables attached before the first request",
            });
        }
        // A pod replaying per run, or a view that wants the pods' cache events: not fused.
        let v = &self.view;
        if self.pods.iter().any(|p| p.cache().is_none())
            || v.index.is_some()
            || v.pending.is_some()
            || v.stores.is_some()
        {
            return Ok(false);
        }
        let Some(f) = self.cfg.fifo() else { return Ok(false) };
        let tail_first = f.order == TouchOrder::TailFirst;
        let AnyRouter::Shipped(r) = &mut self.router else { return Ok(false) };
        if !r.use_fused(self.cfg.capacity_blocks, tail_first, slots, tables)? {
            return Ok(false);
        }
        for pod in self.pods.iter_mut() {
            pod.use_router_cache();
        }
        Ok(true)
    }

    /// Whether `cfg`'s router decides from what the run-length pods and its own state can
    /// answer: the seed's three; every shipped router (preset or pipeline), which reads the
    /// exact per-pod match (precise scorers, Dynamo: the longest held prefix per pod, which the
    /// runs give per run), the FIFO load signals (which do not read the cache), its seeded RNG
    /// and its approximate index, kept as runs too (the index records a routed prompt in order,
    /// [`RunLru::new_in_order`]; docs/MODEL.md, "The approximate index as runs").
    pub fn router_runs(cfg: &FleetConfig) -> bool {
        cfg.router.is_seed() || cfg.router_spec().is_some()
    }

    /// Switches to the run-length replay for requests whose keys come from trace ids of
    /// `group_blocks` 16-token blocks each (block j is sub-block j mod R of id j div R), before
    /// the first dispatch. Results are identical to the per-block replay (docs/MODEL.md,
    /// "Run-length replay"; the property tests compare them); the work is per run of blocks.
    /// Returns false, changing nothing, when [`Self::runs_layout`] is None; the buffers must have
    /// the lengths it gives. Afterwards [`Self::pod_cache`] is None: the pods' blocks are in
    /// runs, and so is the router's approximate index if it keeps one.
    pub fn attach_runs(
        &mut self,
        group_blocks: u32,
        runs: &'a mut [Run],
        tables: &'a mut [u32],
    ) -> Result<bool, Error> {
        let (Some((runs_len, tables_len)), Some((router_runs, router_tables))) =
            (Self::pod_runs_layout(&self.cfg), Self::approx_runs_layout(&self.cfg))
        else {
            return Ok(false);
        };
        let whole = |a: usize, b: usize| a.saturating_add(b);
        if runs.len() != whole(runs_len, router_runs) {
            return Err(Error::BufferSize {
                buffer: Buffer::Runs,
                expected: whole(runs_len, router_runs),
                got: runs.len(),
            });
        }
        if tables.len() != whole(tables_len, router_tables) {
            return Err(Error::BufferSize {
                buffer: Buffer::RunTables,
                expected: whole(tables_len, router_tables),
                got: tables.len(),
            });
        }
        if group_blocks == 0 || self.next_request > 0 {
            return Err(Error::InvalidConfig {
                field: Field::TraceBlockSize,
                expected: "at least 1 block per trace id, attached before the first request",
            });
        }
        let (runs, approx_runs) = runs.split_at_mut(runs_len);
        let (tables, approx_tables) = tables.split_at_mut(tables_len);
        // The router's index first: it is the one that can refuse (no approximate index: no-op).
        if let AnyRouter::Shipped(r) = &mut self.router {
            r.use_runs(group_blocks as usize, approx_runs, approx_tables)?;
        }
        let pods = self.cfg.pods;
        let mut runs_each = chunks(runs, pods, runs_len / pods, Buffer::Runs)?;
        let mut tables_each = chunks(tables, pods, tables_len / pods, Buffer::RunTables)?;
        for pod in self.pods.iter_mut() {
            let (r, t) = (runs_each.next(), tables_each.next());
            let (Some(r), Some(t)) = (r, t) else {
                return Err(Error::BufferSize { buffer: Buffer::Runs, expected: runs_len, got: 0 });
            };
            pod.use_runs(RunLru::new(self.cfg.capacity_blocks, r, t)?, group_blocks as usize);
        }
        Ok(true)
    }
}
