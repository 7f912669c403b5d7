//! A fleet of batched engines ([`BatchedFleet`]; docs/MODEL.md, "The batched engine", "Fleet and
//! time"): its buffers and their layout, and the carving of the pods' engines from them.

use heapless::Vec as HVec;

use super::config::FleetConfig;
use super::view::ViewBuffers;
use super::wva::WvaPod;
use super::{Fleet, FleetEngine, FleetTotals};
use crate::fleet::base::carve::chunks;
use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::cache::lru::{LruPod, Slot};
use crate::fleet::cache::runs::Run;
use crate::fleet::engine::Routed;
use crate::fleet::engine::batched::{BatchedConfig, BatchedEngine, KvBlock, PodBuffers, ReqSlot};
use crate::fleet::engine::groups::PoolGroups;
use crate::fleet::route::kind::AnyRouter;

/// N batched engines behind a router.
pub type BatchedFleet<'a, R = AnyRouter<'a>> = Fleet<'a, BatchedEngine<'a>, R>;

/// Buffer lengths a batched fleet needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchedLayout {
    /// Pods.
    pub pods: usize,
    /// KV blocks per pod (= capacity C).
    pub blocks_per_pod: usize,
    /// Cache-map entries per pod.
    pub table_per_pod: usize,
    /// Requests tracked at once per pod (request slots; the waiting ring has as many).
    pub requests_per_pod: usize,
    /// Running slots per pod (= max_num_seqs).
    pub running_per_pod: usize,
    /// Prompt keys kept per pod (of the requests tracked).
    pub keys_per_pod: usize,
    /// Offload-tier LRU slots per pod (C2; 0 without a tier).
    pub cpu_slots_per_pod: usize,
    /// Offload-tier key-table entries per pod (0 without a tier).
    pub cpu_table_per_pod: usize,
    /// P/D: prefill pods (0 without P/D); their KV blocks and cache-map entries.
    pub prefill_pods: usize,
    /// P/D: KV blocks per prefill pod.
    pub prefill_blocks_per_pod: usize,
    /// P/D: cache-map entries per prefill pod.
    pub prefill_table_per_pod: usize,
    /// P/D: joins and deliveries waiting, in all (0 without P/D). Each decode pod's link holds
    /// `requests_per_pod` transfers: a transfer's request holds a slot on its decode pod.
    pub pd_in_flight: usize,
    /// KV blocks of all pods.
    pub blocks_total: usize,
    /// Cache-map entries of all pods.
    pub tables_total: usize,
    /// Running slots of all pods.
    pub running_total: usize,
    /// Offload-tier LRU slots of all pods.
    pub cpu_slots_total: usize,
    /// Offload-tier key-table entries of all pods.
    pub cpu_tables_total: usize,
    /// The WVA autoscaler's per-pod entries: `pods` with autoscaling, 0 without.
    pub scale_pods: usize,
}

impl BatchedLayout {
    /// Layout for `cfg` (a batched configuration), tracking `requests_per_pod` requests and
    /// `keys_per_pod` of their prompt keys per pod at once.
    pub fn new(cfg: &FleetConfig, requests_per_pod: usize, keys_per_pod: usize) -> Result<Self, Error> {
        cfg.validate()?;
        let Some(e) = cfg.batched_config() else {
            return Err(super::wrong_engine("the batched engine for a batched fleet"));
        };
        let (np, cp) = e.pd.map_or((0, 0), |p| (p.prefill_pods as usize, p.prefill_capacity_blocks));
        // per pod: its pool's (or P/D pool's) capacity, running slots and tier
        let (mut blocks_total, mut tables_total, mut running_total) = (0usize, 0usize, 0usize);
        let (mut cpu_slots_total, mut cpu_tables_total) = (0usize, 0usize);
        for p in 0..cfg.pods {
            let (c, s, c2) = cfg.pod_shape(e, p);
            blocks_total += c;
            tables_total += BatchedEngine::table_len(c);
            running_total += s;
            cpu_slots_total += c2;
            cpu_tables_total += if c2 > 0 { LruPod::table_len(c2) } else { 0 };
        }
        Ok(BatchedLayout {
            blocks_total,
            tables_total,
            running_total,
            cpu_slots_total,
            cpu_tables_total,
            prefill_pods: np,
            prefill_blocks_per_pod: cp,
            prefill_table_per_pod: if np > 0 { BatchedEngine::table_len(cp) } else { 0 },
            // at most the requests tracked by all pods are in flight between pods
            pd_in_flight: if np > 0 { requests_per_pod.max(1) * cfg.pods } else { 0 },
            pods: cfg.pods,
            blocks_per_pod: cfg.capacity_blocks,
            table_per_pod: BatchedEngine::table_len(cfg.capacity_blocks),
            requests_per_pod: requests_per_pod.max(1),
            running_per_pod: e.max_num_seqs as usize,
            keys_per_pod: keys_per_pod.max(1),
            cpu_slots_per_pod: e.offload.cpu_capacity as usize,
            cpu_table_per_pod: if e.offload.is_on() { LruPod::table_len(e.offload.cpu_capacity as usize) } else { 0 },
            scale_pods: if cfg.scale().is_some() { cfg.pods } else { 0 },
        })
    }

    /// KV blocks of all pods (each its pool's C; with P/D each prefill pod C_P, each other pod C).
    pub fn blocks_len(&self) -> usize {
        self.blocks_total
    }

    /// Cache-map entries of all pods.
    pub fn tables_len(&self) -> usize {
        self.tables_total
    }

    /// Running slots of all pods (each its pool's `max_num_seqs`).
    pub fn running_len(&self) -> usize {
        self.running_total
    }

    /// Offload-tier LRU slots of all pods (each its pool's C2).
    pub fn cpu_slots_len(&self) -> usize {
        self.cpu_slots_total
    }

    /// Offload-tier key-table entries of all pods.
    pub fn cpu_tables_len(&self) -> usize {
        self.cpu_tables_total
    }

    /// P/D: transfer slots of all decode pods' links (0 without P/D).
    pub fn pd_transfers_len(&self) -> usize {
        if self.prefill_pods == 0 { 0 } else { (self.pods - self.prefill_pods) * self.requests_per_pod }
    }

    /// The WVA autoscaler's per-pod entries (one per pod with autoscaling, none without).
    pub fn scale_len(&self) -> usize {
        self.scale_pods
    }

    /// Blocks per prompt key of all pods, when kept ([`BatchedBuffers::key_blocks`]; else none).
    pub fn key_blocks_len(&self) -> usize {
        self.pods * self.keys_per_pod
    }

    /// Total bytes of the buffers (the blocks at key positions not included: [`Self::key_blocks_len`]).
    pub fn bytes(&self) -> usize {
        use core::mem::size_of;
        self.blocks_len() * size_of::<KvBlock>()
            + self.tables_len() * 4
            + self.pd_transfers_len() * size_of::<super::pd::Transfer>()
            + self.pd_in_flight * (size_of::<super::pd::Join>() + size_of::<super::pd::Delivery>())
            + self.running_len() * 4
            + self.cpu_slots_len() * size_of::<Slot>()
            + self.cpu_tables_len() * 4
            + self.scale_len() * size_of::<WvaPod>()
            + self.pods * (self.requests_per_pod * (size_of::<ReqSlot>() + 4) + self.keys_per_pod * 8)
    }
}

/// Caller-provided storage, lengths from [`BatchedLayout`] (each times `pods`).
pub struct BatchedBuffers<'a> {
    /// `blocks_per_pod` KV blocks per pod.
    pub blocks: &'a mut [KvBlock],
    /// `table_per_pod` cache-map entries per pod.
    pub tables: &'a mut [u32],
    /// `requests_per_pod` request slots per pod.
    pub requests: &'a mut [ReqSlot],
    /// `requests_per_pod` waiting-ring entries per pod.
    pub waiting: &'a mut [u32],
    /// `running_per_pod` running slots per pod.
    pub running: &'a mut [u32],
    /// `keys_per_pod` prompt keys per pod.
    pub keys: &'a mut [u64],
    /// `keys_per_pod` blocks per pod, at their prompt keys' positions (parallel to `keys`), or
    /// empty: kept, the pods' releases read their requests' blocks here instead of looking the
    /// hit keys up again and walking the own chains ([`PodBuffers::key_blocks`]; the same
    /// results either way).
    pub key_blocks: &'a mut [u32],
    /// `cpu_slots_per_pod` offload-tier slots per pod (empty without a tier).
    pub cpu_slots: &'a mut [Slot],
    /// `cpu_table_per_pod` offload-tier table entries per pod (empty without a tier).
    pub cpu_tables: &'a mut [u32],
    /// P/D: the links, joins and deliveries (empty without P/D).
    pub pd: super::pd::PdBuffers<'a>,
    /// The WVA autoscaler's state, one entry per pod (empty without autoscaling).
    pub scale: &'a mut [WvaPod],
}

impl<'a> FleetEngine<'a> for BatchedEngine<'a> {
    type Config = BatchedConfig;
    type Buffers = BatchedBuffers<'a>;

    fn config(cfg: &FleetConfig) -> Option<BatchedConfig> {
        cfg.batched_config().copied()
    }

    fn pods(cfg: &FleetConfig, e: &BatchedConfig, b: BatchedBuffers<'a>) -> Result<super::PodsOf<'a, Self>, Error> {
        let engine = *e;
        let n = cfg.pods;
        let per = |len: usize| len / n;
        let requests_per_pod = per(b.requests.len());
        let keys_per_pod = per(b.keys.len());
        // Each pod its own capacity, running slots and tier: its pool's (P/D: the prefill pods
        // first, with their own capacity and step cost).
        let (mut want_blocks, mut want_tables, mut want_running) = (0usize, 0usize, 0usize);
        let (mut want_cs, mut want_ct) = (0usize, 0usize);
        for p in 0..n {
            let (c, s, c2) = cfg.pod_shape(&engine, p);
            want_blocks += c;
            want_tables += BatchedEngine::table_len(c);
            want_running += s;
            want_cs += c2;
            want_ct += if c2 > 0 { LruPod::table_len(c2) } else { 0 };
        }
        if b.blocks.len() != want_blocks {
            return Err(Error::BufferSize { buffer: Buffer::EngineBlocks, expected: want_blocks, got: b.blocks.len() });
        }
        if b.tables.len() != want_tables {
            return Err(Error::BufferSize { buffer: Buffer::EngineTables, expected: want_tables, got: b.tables.len() });
        }
        let reqs = chunks(b.requests, n, requests_per_pod, Buffer::EngineRequests)?;
        let waiting = chunks(b.waiting, n, requests_per_pod, Buffer::EngineWaiting)?;
        if b.running.len() != want_running {
            return Err(Error::BufferSize {
                buffer: Buffer::EngineRunning,
                expected: want_running,
                got: b.running.len(),
            });
        }
        let keys = chunks(b.keys, n, keys_per_pod, Buffer::EngineKeys)?;
        // empty (not kept), or one ring per pod as long as its keys'
        let blocks_each = if b.key_blocks.is_empty() { 0 } else { keys_per_pod };
        if b.key_blocks.len() != n * blocks_each {
            return Err(Error::BufferSize {
                buffer: Buffer::EngineKeyBlocks,
                expected: n * keys_per_pod,
                got: b.key_blocks.len(),
            });
        }
        let mut key_blocks = b.key_blocks;
        if want_cs > 0 {
            if b.cpu_slots.len() != want_cs {
                return Err(Error::BufferSize { buffer: Buffer::CpuSlots, expected: want_cs, got: b.cpu_slots.len() });
            }
            if b.cpu_tables.len() != want_ct {
                return Err(Error::BufferSize {
                    buffer: Buffer::CpuTables,
                    expected: want_ct,
                    got: b.cpu_tables.len(),
                });
            }
        }
        let (mut blocks, mut tables, mut running) = (b.blocks, b.tables, b.running);
        let (mut cpu_slots, mut cpu_tables) = (b.cpu_slots, b.cpu_tables);
        let mut engines = HVec::new();
        for (p, ((r, w), k)) in reqs.zip(waiting).zip(keys).enumerate() {
            // pod p's engine and its share of each buffer (empty tier slices without a tier)
            let mut x = engine;
            let c = cfg.pod_setup(&mut x, p);
            let c2 = x.offload.cpu_capacity as usize;
            let (bl, rest) = core::mem::take(&mut blocks).split_at_mut(c);
            blocks = rest;
            let (tb, rest) = core::mem::take(&mut tables).split_at_mut(BatchedEngine::table_len(c));
            tables = rest;
            let (ru, rest) = core::mem::take(&mut running).split_at_mut(x.max_num_seqs as usize);
            running = rest;
            let (cs, ct) = if c2 > 0 {
                let (a, rest) = core::mem::take(&mut cpu_slots).split_at_mut(c2);
                cpu_slots = rest;
                let (t, rest) = core::mem::take(&mut cpu_tables).split_at_mut(LruPod::table_len(c2));
                cpu_tables = rest;
                (a, t)
            } else {
                (&mut [][..], &mut [][..])
            };
            let (hb, rest) = core::mem::take(&mut key_blocks).split_at_mut(blocks_each);
            key_blocks = rest;
            let bufs = PodBuffers {
                blocks: bl,
                table: tb,
                reqs: r,
                waiting: w,
                running: ru,
                keys: k,
                key_blocks: hb,
                cpu_slots: cs,
                cpu_table: ct,
            };
            let e = BatchedEngine::new(x, p as u32, bufs)?;
            if engines.push(e).is_err() {
                return Err(Error::InvalidConfig { field: Field::Pods, expected: "at most 64" });
            }
        }
        Ok((engines, (), ViewBuffers::default(), b.pd, b.scale))
    }

    /// The batched engine's figures are its pods' ([`BatchedEngine::stats`]).
    fn count(_totals: &mut FleetTotals, _out: &Routed) {}

    fn outcome_of(routed: Routed) -> Result<Routed, Error> {
        Ok(routed)
    }

    fn attach_key_log(&mut self, log: &'a mut [u64]) -> bool {
        self.set_key_log(log)
    }

    fn changed_keys(&self) -> (&[u64], bool) {
        BatchedEngine::changed_keys(self)
    }

    fn clear_changed_keys(&mut self) {
        BatchedEngine::clear_changed_keys(self)
    }

    fn caches(&self, key: u64) -> bool {
        self.contains(key)
    }
}

/// Entries of each pod's changed-key log for the first-key index (a step keys and evicts at
/// most a few hundred blocks at this model's defaults; more changes in one event make the fleet
/// re-read the pod's bit of every key kept: [`Fleet::attach_heads`]).
pub const KEY_LOG_PER_POD: usize = 4096;

/// Whether a batched fleet of `cfg` can keep the first-key index ([`Fleet::attach_heads`]):
/// its router reads the exact view (always the pods' own maps under this engine) from per-block
/// cache maps (not kept per trace id with `group_blocks`), without autoscaling, P/D or an
/// offload tier (whose tiered match the pods answer themselves).
pub fn head_index_possible(cfg: &FleetConfig, group_blocks: u32) -> bool {
    cfg.batched_config().is_some_and(|e| e.pd.is_none() && !e.offload.is_on())
        && cfg.scale().is_none()
        && cfg.uses_exact_index()
        && BatchedFleet::pool_groups_layout(cfg, group_blocks).is_none()
}

impl<'a> Fleet<'a, BatchedEngine<'a>, AnyRouter<'a>> {
    /// Buffer lengths (`runs`, `tables`) of the router's approximate index kept as runs
    /// ([`Self::attach_index_runs`]), or None when `cfg`'s router keeps no approximate index
    /// (nothing to keep as runs) or its LRUs cannot be kept so. The pods are not concerned:
    /// under this engine they stay per block (docs/MODEL.md, "The approximate index as runs").
    pub fn index_runs_layout(cfg: &FleetConfig) -> Option<(usize, usize)> {
        cfg.batched_config()?;
        match cfg.router_runs_layout()? {
            (0, _) | (_, 0) => None,
            l => Some(l),
        }
    }

    /// Keeps the router's approximate index as runs of trace ids of `group_blocks` 16-token
    /// blocks each (block j of a prompt is sub-block j mod R of id j div R), before the first
    /// dispatch: the same answers as the per-block index (docs/MODEL.md, "The approximate index
    /// as runs"; core/tests/batched_index_runs.rs compares the two), the router's work per group of a
    /// prompt instead of per block. The pods' KV pools are unchanged. Returns false, changing
    /// nothing, when [`Self::index_runs_layout`] is None; the buffers must have the lengths it
    /// gives.
    pub fn attach_index_runs(
        &mut self,
        group_blocks: u32,
        runs: &'a mut [Run],
        tables: &'a mut [u32],
    ) -> Result<bool, Error> {
        let Some((runs_len, tables_len)) = Self::index_runs_layout(&self.cfg) else { return Ok(false) };
        if runs.len() != runs_len {
            return Err(Error::BufferSize { buffer: Buffer::Runs, expected: runs_len, got: runs.len() });
        }
        if tables.len() != tables_len {
            return Err(Error::BufferSize { buffer: Buffer::RunTables, expected: tables_len, got: tables.len() });
        }
        if group_blocks == 0 || self.next_request > 0 {
            return Err(Error::InvalidConfig {
                field: Field::TraceBlockSize,
                expected: "at least 1 block per trace id, attached before the first request",
            });
        }
        match &mut self.router {
            AnyRouter::Shipped(r) => r.use_runs(group_blocks as usize, runs, tables)?,
            // (a router with an approximate index is a shipped one)
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Buffer lengths (`u32` words, `u64` keys) of the pods' cache maps kept per trace id of
    /// `group_blocks` blocks ([`Self::attach_pool_groups`]), or None where the maps stay per
    /// block: ids of one block (nothing to gain), the offload tier, P/D, cached generated tokens,
    /// autoscaling, heterogeneous pools, or the per-block pool (test support, `block_runs` off)
    /// (docs/MODEL.md, "Run-length KV blocks").
    pub fn pool_groups_layout(cfg: &FleetConfig, group_blocks: u32) -> Option<(usize, usize)> {
        let e = cfg.batched_config()?;
        if !e.groups_apply() || cfg.scale().is_some() || !cfg.pools.is_empty() {
            return None;
        }
        let (mut words, mut keys) = (0usize, 0usize);
        for p in 0..cfg.pods {
            let (c, _, _) = cfg.pod_shape(e, p);
            let l = PoolGroups::layout(c, group_blocks)?;
            words += l.words();
            keys += l.keys();
        }
        Some((words, keys))
    }

    /// Keeps every pod's cache map per trace id of `group_blocks` 16-token blocks (block j of a
    /// prompt is sub-block j mod R of the group named by its key j - j mod R), before the first
    /// dispatch: the same map contents at every step as per block (docs/MODEL.md, "Run-length KV
    /// blocks"; core/tests/batched_runs.rs compares the two), one probe per group of a request
    /// instead of one per block; the routers' exact view asks the pods for leading matches per
    /// group. Returns false, changing nothing, when [`Self::pool_groups_layout`] is None; the
    /// buffers must have the lengths it gives.
    pub fn attach_pool_groups(
        &mut self,
        group_blocks: u32,
        words: &'a mut [u32],
        keys: &'a mut [u64],
    ) -> Result<bool, Error> {
        let Some((words_len, keys_len)) = Self::pool_groups_layout(&self.cfg, group_blocks) else { return Ok(false) };
        if words.len() != words_len {
            return Err(Error::BufferSize { buffer: Buffer::EngineGroups, expected: words_len, got: words.len() });
        }
        if keys.len() != keys_len {
            return Err(Error::BufferSize { buffer: Buffer::EngineGroupKeys, expected: keys_len, got: keys.len() });
        }
        if self.next_request > 0 || self.pods.iter().any(|e| e.is_grouped()) {
            return Err(Error::InvalidConfig {
                field: Field::TraceBlockSize,
                expected: "the pods' cache maps kept per trace id attached once, before the first request",
            });
        }
        let (mut words, mut keys) = (words, keys);
        self.lead = None;
        for e in self.pods.iter_mut() {
            let l = PoolGroups::layout(e.capacity(), group_blocks).ok_or(Error::BufferSize {
                buffer: Buffer::EngineGroups,
                expected: words_len,
                got: words.len(),
            })?;
            let (w, rest) = core::mem::take(&mut words).split_at_mut(l.words());
            words = rest;
            let (k, rest) = core::mem::take(&mut keys).split_at_mut(l.keys());
            keys = rest;
            let g = PoolGroups::new(e.capacity(), group_blocks, w, k)?;
            if !e.attach_groups(g) {
                return Err(Error::InvalidConfig {
                    field: Field::TraceBlockSize,
                    expected: "the pods' cache maps kept per trace id attached to new pods",
                });
            }
        }
        Ok(true)
    }

    /// Whether the pods' cache maps are kept per trace id ([`Self::attach_pool_groups`]).
    pub fn pool_is_grouped(&self) -> bool {
        self.pods.first().is_some_and(|e| e.is_grouped())
    }

    /// Whether the router's approximate index is kept as runs ([`Self::attach_index_runs`]).
    pub fn index_is_runs(&self) -> bool {
        matches!(&self.router, AnyRouter::Shipped(r) if r.approx().is_some_and(|a| a.is_runs()))
    }
}
