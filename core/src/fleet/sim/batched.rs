//! A fleet of batched engines ([`BatchedFleet`]; docs/MODEL.md, "The batched engine", "Fleet and
//! time"): its buffers and their layout, and the carving of the pods' engines from them.

use heapless::Vec as HVec;

use super::config::FleetConfig;
use super::view::ViewBuffers;
use super::{Fleet, FleetEngine, FleetTotals};
use crate::fleet::base::carve::chunks;
use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::base::limits::MAX_PODS;
use crate::fleet::cache::lru::{LruPod, Slot};
use crate::fleet::engine::Routed;
use crate::fleet::engine::batched::{BatchedConfig, BatchedEngine, KvBlock, PodBuffers, ReqSlot};
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
        Ok(BatchedLayout {
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
        })
    }

    /// KV blocks of all pods (each prefill pod C_P, each other pod C).
    pub fn blocks_len(&self) -> usize {
        self.prefill_pods * self.prefill_blocks_per_pod + (self.pods - self.prefill_pods) * self.blocks_per_pod
    }

    /// Cache-map entries of all pods.
    pub fn tables_len(&self) -> usize {
        self.prefill_pods * self.prefill_table_per_pod + (self.pods - self.prefill_pods) * self.table_per_pod
    }

    /// P/D: transfer slots of all decode pods' links (0 without P/D).
    pub fn pd_transfers_len(&self) -> usize {
        if self.prefill_pods == 0 { 0 } else { (self.pods - self.prefill_pods) * self.requests_per_pod }
    }

    /// Total bytes of the buffers.
    pub fn bytes(&self) -> usize {
        use core::mem::size_of;
        self.blocks_len() * size_of::<KvBlock>()
            + self.tables_len() * 4
            + self.pd_transfers_len() * size_of::<super::pd::Transfer>()
            + self.pd_in_flight * (size_of::<super::pd::Join>() + size_of::<super::pd::Delivery>())
            + self.pods
                * (self.requests_per_pod * (size_of::<ReqSlot>() + 4)
                    + self.running_per_pod * 4
                    + self.keys_per_pod * 8
                    + self.cpu_slots_per_pod * size_of::<Slot>()
                    + self.cpu_table_per_pod * 4)
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
    /// `cpu_slots_per_pod` offload-tier slots per pod (empty without a tier).
    pub cpu_slots: &'a mut [Slot],
    /// `cpu_table_per_pod` offload-tier table entries per pod (empty without a tier).
    pub cpu_tables: &'a mut [u32],
    /// P/D: the links, joins and deliveries (empty without P/D).
    pub pd: super::pd::PdBuffers<'a>,
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
        // P/D: the prefill pods first, with their own capacity and step cost
        let (np, cp) = engine.pd.map_or((0, 0), |p| (p.prefill_pods as usize, p.prefill_capacity_blocks));
        let c = cfg.capacity_blocks;
        let want_blocks = np * cp + (n - np) * c;
        if b.blocks.len() != want_blocks {
            return Err(Error::BufferSize { buffer: Buffer::EngineBlocks, expected: want_blocks, got: b.blocks.len() });
        }
        let (tp, tc) = (if np > 0 { BatchedEngine::table_len(cp) } else { 0 }, BatchedEngine::table_len(c));
        let want_tables = np * tp + (n - np) * tc;
        if b.tables.len() != want_tables {
            return Err(Error::BufferSize { buffer: Buffer::EngineTables, expected: want_tables, got: b.tables.len() });
        }
        let mut rest_blocks = Some(b.blocks);
        let mut rest_tables = Some(b.tables);
        let mut split = |p: usize| {
            let (cb, ct) = if p < np { (cp, tp) } else { (c, tc) };
            let (bl, r) = rest_blocks.take().unwrap_or_default().split_at_mut(cb);
            rest_blocks = Some(r);
            let (tb, r) = rest_tables.take().unwrap_or_default().split_at_mut(ct);
            rest_tables = Some(r);
            (bl, tb)
        };
        let parts: HVec<(&mut [KvBlock], &mut [u32]), MAX_PODS> = (0..n).map(&mut split).collect();
        let (blocks, tables): (HVec<&mut [KvBlock], MAX_PODS>, HVec<&mut [u32], MAX_PODS>) = parts.into_iter().unzip();
        let (blocks, tables) = (blocks.into_iter(), tables.into_iter());
        let reqs = chunks(b.requests, n, requests_per_pod, Buffer::EngineRequests)?;
        let waiting = chunks(b.waiting, n, requests_per_pod, Buffer::EngineWaiting)?;
        let running = chunks(b.running, n, engine.max_num_seqs as usize, Buffer::EngineRunning)?;
        let keys = chunks(b.keys, n, keys_per_pod, Buffer::EngineKeys)?;
        let c2 = engine.offload.cpu_capacity as usize;
        let (mut cpu_slots, mut cpu_tables) = (Some(b.cpu_slots), Some(b.cpu_tables));
        if c2 > 0 {
            let want = (n * c2, n * LruPod::table_len(c2));
            let got = (cpu_slots.as_ref().map_or(0, |s| s.len()), cpu_tables.as_ref().map_or(0, |s| s.len()));
            if got.0 != want.0 {
                return Err(Error::BufferSize { buffer: Buffer::CpuSlots, expected: want.0, got: got.0 });
            }
            if got.1 != want.1 {
                return Err(Error::BufferSize { buffer: Buffer::CpuTables, expected: want.1, got: got.1 });
            }
        }
        let mut engines = HVec::new();
        for (p, (((((bl, t), r), w), ru), k)) in
            blocks.zip(tables).zip(reqs).zip(waiting).zip(running).zip(keys).enumerate()
        {
            // each pod's share of the tier's buffers (empty slices without a tier)
            let (cs, ct) = if c2 > 0 {
                let tl = LruPod::table_len(c2);
                let s = cpu_slots.take().unwrap_or_default();
                let tb = cpu_tables.take().unwrap_or_default();
                let (a, rest_s) = s.split_at_mut(c2);
                let (bt, rest_t) = tb.split_at_mut(tl);
                cpu_slots = Some(rest_s);
                cpu_tables = Some(rest_t);
                (a, bt)
            } else {
                (&mut [][..], &mut [][..])
            };
            let mut e = engine;
            if p < np
                && let Some((profile, cost)) = engine.pd.and_then(|x| x.prefill_cost)
            {
                e.profile = profile;
                e.cost = cost;
            }
            let bufs = PodBuffers {
                blocks: bl,
                table: t,
                reqs: r,
                waiting: w,
                running: ru,
                keys: k,
                cpu_slots: cs,
                cpu_table: ct,
            };
            let e = BatchedEngine::new(e, p as u32, bufs)?;
            if engines.push(e).is_err() {
                return Err(Error::InvalidConfig { field: Field::Pods, expected: "at most 64" });
            }
        }
        Ok((engines, (), ViewBuffers::default(), b.pd))
    }

    /// The batched engine's figures are its pods' ([`BatchedEngine::stats`]).
    fn count(_totals: &mut FleetTotals, _out: &Routed) {}

    fn outcome_of(routed: Routed) -> Result<Routed, Error> {
        Ok(routed)
    }
}
