//! A fleet of batched engines ([`BatchedFleet`]; docs/MODEL.md, "The batched engine", "Fleet and
//! time"): its buffers and their layout, and the carving of the pods' engines from them.

use heapless::Vec as HVec;

use super::config::FleetConfig;
use super::view::ViewBuffers;
use super::{Fleet, FleetEngine, FleetTotals};
use crate::fleet::base::carve::chunks;
use crate::fleet::base::error::{Buffer, Error, Field};
use crate::fleet::base::limits::MAX_PODS;
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
}

impl BatchedLayout {
    /// Layout for `cfg` (a batched configuration), tracking `requests_per_pod` requests and
    /// `keys_per_pod` of their prompt keys per pod at once.
    pub fn new(cfg: &FleetConfig, requests_per_pod: usize, keys_per_pod: usize) -> Result<Self, Error> {
        cfg.validate()?;
        let Some(e) = cfg.batched_config() else { return Err(not_batched()) };
        Ok(BatchedLayout {
            pods: cfg.pods,
            blocks_per_pod: cfg.capacity_blocks,
            table_per_pod: BatchedEngine::table_len(cfg.capacity_blocks),
            requests_per_pod: requests_per_pod.max(1),
            running_per_pod: e.max_num_seqs as usize,
            keys_per_pod: keys_per_pod.max(1),
        })
    }

    /// Total bytes of the buffers.
    pub fn bytes(&self) -> usize {
        use core::mem::size_of;
        self.pods
            * (self.blocks_per_pod * size_of::<KvBlock>()
                + self.table_per_pod * 4
                + self.requests_per_pod * (size_of::<ReqSlot>() + 4)
                + self.running_per_pod * 4
                + self.keys_per_pod * 8)
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
}

fn not_batched() -> Error {
    Error::InvalidConfig { field: Field::Engine, expected: "the batched engine for a batched fleet" }
}

impl<'a> FleetEngine<'a> for BatchedEngine<'a> {
    type Config = BatchedConfig;
    type Buffers = BatchedBuffers<'a>;

    fn config(cfg: &FleetConfig) -> Option<BatchedConfig> {
        cfg.batched_config().copied()
    }

    fn pods(
        cfg: &FleetConfig,
        engine: &BatchedConfig,
        b: BatchedBuffers<'a>,
    ) -> Result<(HVec<Self, MAX_PODS>, (), ViewBuffers<'a>), Error> {
        let engine = *engine;
        let n = cfg.pods;
        let per = |len: usize| len / n;
        let requests_per_pod = per(b.requests.len());
        let keys_per_pod = per(b.keys.len());
        let blocks = chunks(b.blocks, n, cfg.capacity_blocks, Buffer::EngineBlocks)?;
        let tables = chunks(b.tables, n, BatchedEngine::table_len(cfg.capacity_blocks), Buffer::EngineTables)?;
        let reqs = chunks(b.requests, n, requests_per_pod, Buffer::EngineRequests)?;
        let waiting = chunks(b.waiting, n, requests_per_pod, Buffer::EngineWaiting)?;
        let running = chunks(b.running, n, engine.max_num_seqs as usize, Buffer::EngineRunning)?;
        let keys = chunks(b.keys, n, keys_per_pod, Buffer::EngineKeys)?;
        let mut engines = HVec::new();
        for (p, (((((bl, t), r), w), ru), k)) in
            blocks.zip(tables).zip(reqs).zip(waiting).zip(running).zip(keys).enumerate()
        {
            let bufs = PodBuffers { blocks: bl, table: t, reqs: r, waiting: w, running: ru, keys: k };
            let e = BatchedEngine::new(engine, p as u32, bufs)?;
            if engines.push(e).is_err() {
                return Err(Error::InvalidConfig { field: Field::Pods, expected: "at most 64" });
            }
        }
        Ok((engines, (), ViewBuffers::default()))
    }

    /// The batched engine's figures are its pods' ([`BatchedEngine::stats`]).
    fn count(_totals: &mut FleetTotals, _out: &Routed) {}
}
