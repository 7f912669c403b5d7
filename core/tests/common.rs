//! Helpers shared by the core's integration tests: a fleet over Vec buffers.
#![allow(dead_code)]

use brokerlab_core::fleet::*;

pub struct Bufs {
    pub cfg: FleetConfig,
    slots: Vec<Slot>,
    tables: Vec<u32>,
    queues: Vec<u64>,
    index: Vec<IndexEntry>,
    pending: Vec<PendingRecord>,
    pending_table: Vec<PendingEntry>,
    cpu_slots: Vec<Slot>,
    cpu_tables: Vec<u32>,
}

impl Bufs {
    pub fn new(cfg: FleetConfig) -> Self {
        let l = FifoLayout::new(&cfg, 64, 4096).unwrap();
        Bufs {
            cfg,
            slots: vec![Slot::default(); l.pods * l.slots_per_pod],
            tables: vec![0; l.tables_len()],
            queues: vec![0; l.pods * l.queue_per_pod],
            index: vec![IndexEntry::default(); l.index],
            pending: vec![PendingRecord::default(); l.pending],
            pending_table: vec![PendingEntry::default(); l.pending_table],
            cpu_slots: vec![Slot::default(); l.pods * l.cpu_slots_per_pod],
            cpu_tables: vec![0; l.pods * l.cpu_table_per_pod],
        }
    }

    fn buffers(&mut self) -> FifoBuffers<'_> {
        FifoBuffers {
            slots: &mut self.slots,
            tables: &mut self.tables,
            queues: &mut self.queues,
            index: &mut self.index,
            pending: &mut self.pending,
            pending_table: &mut self.pending_table,
            cpu_slots: &mut self.cpu_slots,
            cpu_tables: &mut self.cpu_tables,
        }
    }

    /// A fleet over these buffers with a custom router.
    pub fn fleet_with<R: Router>(&mut self, router: R) -> Result<FifoFleet<'_, R>, Error> {
        FifoFleet::with_router(self.cfg, router, self.buffers())
    }

    /// A fleet over these buffers with the built-in router of `cfg` and its approximate index
    /// in `router`.
    pub fn fleet_router_buffers<'a>(&'a mut self, router: RouterBuffers<'a>) -> FifoFleet<'a> {
        FifoFleet::with_router_buffers(self.cfg, self.buffers(), router).unwrap()
    }

    pub fn fleet(&mut self) -> FifoFleet<'_> {
        FifoFleet::new(self.cfg, self.buffers()).unwrap()
    }
}

/// Keys for a prompt described by distinct "block ids": each id becomes one 16-token block.
pub fn keys_of(ids: &[u64]) -> Vec<u64> {
    let mut out = vec![0; ids.len()];
    keys::trace_keys(ids, ids.len() as u64 * 16, 16, &mut out).unwrap();
    out
}

/// A request at `ms` milliseconds with prompt blocks `ids` (+ `extra` tokens of a partial block).
pub fn req<'k>(ms: u64, keys: &'k [u64], extra: u64) -> Request<'k> {
    Request { arrival_ns: ms * 1_000_000, input_tokens: keys.len() as u64 * 16 + extra, output_tokens: 0, keys }
}

/// The FIFO engine's settings of `c` (a FIFO configuration).
pub fn fifo(c: &mut FleetConfig) -> &mut FifoConfig {
    c.fifo_mut().expect("a FIFO configuration")
}

/// The view of `c` (a FIFO configuration).
pub fn view(c: &mut FleetConfig) -> &mut ViewConfig {
    c.view_mut().expect("a FIFO configuration")
}

/// The autoscaling policy of `c` (a FIFO configuration).
pub fn scale(c: &mut FleetConfig) -> &mut Option<ScalePolicy> {
    c.scale_mut().expect("a FIFO configuration")
}

/// `c` changed by `f`.
pub fn with(mut c: FleetConfig, f: impl FnOnce(&mut FleetConfig)) -> FleetConfig {
    f(&mut c);
    c
}

/// Completions and ITL samples in order (the batched engine's events).
#[derive(Default)]
pub struct Sink {
    pub done: Vec<Completion>,
    pub itl: Vec<(u64, u64)>,
}

impl EngineEvents for Sink {
    fn completed(&mut self, c: &Completion) {
        self.done.push(*c);
    }
    fn itl(&mut self, itl_ns: u64, count: u64) {
        self.itl.push((itl_ns, count));
    }
}

/// A batched fleet's buffers as its layout sizes them (no CPU tier, no P/D); the autoscaler's
/// buffer is the caller's, since the tests size it on purpose.
pub struct BatchedOwned {
    blocks: Vec<KvBlock>,
    tables: Vec<u32>,
    requests: Vec<ReqSlot>,
    waiting: Vec<u32>,
    running: Vec<u32>,
    keys: Vec<u64>,
}

impl BatchedOwned {
    pub fn new(l: &BatchedLayout) -> Self {
        BatchedOwned {
            blocks: vec![KvBlock::default(); l.blocks_len()],
            tables: vec![0; l.tables_len()],
            requests: vec![ReqSlot::default(); l.pods * l.requests_per_pod],
            waiting: vec![0; l.pods * l.requests_per_pod],
            running: vec![0; l.running_len()],
            keys: vec![0; l.pods * l.keys_per_pod],
        }
    }

    pub fn buffers<'a>(&'a mut self, scale: &'a mut [WvaPod]) -> BatchedBuffers<'a> {
        BatchedBuffers {
            blocks: &mut self.blocks,
            tables: &mut self.tables,
            requests: &mut self.requests,
            waiting: &mut self.waiting,
            running: &mut self.running,
            keys: &mut self.keys,
            cpu_slots: &mut [],
            cpu_tables: &mut [],
            pd: Default::default(),
            scale,
        }
    }
}
